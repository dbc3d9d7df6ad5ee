"""Are the running graph's streams live? The robot container's health check.

A process being up says little (a node can hang with its process alive); the streams say what
works: each driver's joint_states (100 Hz), the gate's status (2 Hz), and each camera's
camera_info (30 Hz, published with every frame, so no images are copied). The probe waits for
a first sample of each (discovery), then counts them for --window seconds: a stream below
--min-fraction of its nominal rate, or silent, fails it. Exit 0 live, 1 not live, 2 no DDS.

It joins the graph as one more DDS participant, in the launcher's DDS environment
(egomimic_launch.environment: LOCALHOST and domain 42 unless set) but over UDP only
(docker/fastdds_probe.xml: a short-lived shared-memory reader made the camera node recycle
buffers it still held, hundreds of warnings per run), with best-effort readers (a reliable one
would ask the drivers and cameras to keep samples for it). Names and QoS come from
egomimic_nodes.topics, like every other tool.

    python docker/probe_graph.py [--namespace eva] [--window 2] [--no-cameras]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--namespace", default="eva", help="robot namespace (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a first sample of each (10)")
    ap.add_argument("--window", type=float, default=2.0, help="seconds to count samples over (default 2)")
    ap.add_argument("--min-fraction", type=float, default=0.5, help="of the nominal rate (default 0.5)")
    ap.add_argument("--no-cameras", action="store_true", help="skip camera_info (camera_backend:=external)")
    args = ap.parse_args(argv)

    from egomimic_launch.environment import apply_to_this_process

    os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(Path(__file__).resolve().parent / "fastdds_probe.xml")
    apply_to_this_process()  # the rest of the DDS environment, before rclpy reads it
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from egomimic_hw.description import ARMS, CAMERAS
    from egomimic_nodes import qos, topics

    streams = [(topics.JOINT_STATES.resolve(args.namespace, arm=arm), topics.JOINT_STATES) for arm in ARMS]
    streams.append((topics.SAFETY_STATUS.resolve(args.namespace), topics.SAFETY_STATUS))
    if not args.no_cameras:
        streams += [(topics.CAMERA_INFO.resolve(args.namespace, cam=cam), topics.CAMERA_INFO) for cam in CAMERAS]
    counts = dict.fromkeys((name for name, _ in streams), 0)
    gate_status_hz = 2.0  # the gate publishes its status at 2 Hz and on every change (gate_node)

    try:
        rclpy.init()
    except Exception as exc:  # noqa: BLE001 - any rcl failure means no DDS here
        print(f"probe_graph: cannot start ROS ({exc})", file=sys.stderr)
        return 2
    node = rclpy.create_node(f"docker_probe_{os.getpid()}")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        for name, topic in streams:

            def on_sample(_msg, name=name):
                counts[name] += 1

            node.create_subscription(topic.type, name, on_sample, qos.SENSOR_READER, raw=True)

        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and not all(counts.values()):
            executor.spin_once(timeout_sec=0.05)
        silent = [name for name, n in counts.items() if n == 0]
        if silent:
            print(f"graph: NOT live: nothing within {args.timeout:g} s on {', '.join(silent)}")
            return 1
        for name in counts:
            counts[name] = 0
        start = time.monotonic()
        while time.monotonic() - start < args.window:
            executor.spin_once(timeout_sec=0.05)
        elapsed = time.monotonic() - start
        slow = []
        for name, topic in streams:
            nominal = topic.rate_hz or gate_status_hz
            rate = counts[name] / elapsed
            print(f"{name:45s} {rate:7.1f} Hz (nominal {nominal:g})")
            if rate < args.min_fraction * nominal:
                slow.append(name)
        if slow:
            print(f"graph: NOT live: below {args.min_fraction:g} x nominal on {', '.join(slow)}")
            return 1
        print(f"graph: live ({len(streams)} streams)")
        return 0
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    sys.exit(main())
