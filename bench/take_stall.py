"""A take that waits in the middleware: does it stop the whole reader process? rclpy's
take_message (GIL held through rcl_take) against egomimic_nodes.taken.take_one (rcl through
ctypes, GIL released), in one run; the physical limit is 0 stalled stops.

What: a writer process (the role of a driver) publishes a pose at --rate Hz and reads a 1 kHz
load stream; a reader process (the role of the synthetic camera process) takes the poses
(reliable, depth 1, as the camera does) from a "capture" thread at 30 Hz and sends the load
stream, while a pure-Python ticker thread beside them wakes every 1 ms. The writer is SIGSTOPped
for STOP_S, --stops times, at random phases. Per stop the bench takes the ticker's longest gap
inside the stop window: over STALL_MS, every Python thread of the reader stood still.
Why: in fresh clone fc73 the camera process's three capture threads produced no frame for 281
ms the moment the fault battery SIGSTOPped a driver (a STALE_CAMERA HOLD where STALE_STATE was
expected), and 465 ms later in the same graph. Fast DDS's take waits for the reader's mutex (up
to max_blocking_time, 100 ms), which the reader's event thread holds while it sends an ACKNACK
to the writer; into a port that the stopped writer process holds locked, that send waits.
Every process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST on its own ROS_DOMAIN_ID
(--domain, +1 per take mode) and the project's profile; nothing leaves loopback.
Run: `.venv/bin/python bench/take_stall.py [--stops 150] [--rate 100] [--load 1] [--domain 83]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from sigstop import REPO, end_all, local_dds_env, longest_gaps_ms, stop_repeatedly

MODES = ("rclpy", "ours")
STOP_S = 0.4
STALL_MS = 50.0
TICK_S = 0.001
CAPTURE_HZ = 30.0
LOAD_HZ = 1000.0


def qos():
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)


def writer(rate_hz: float) -> None:
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.executors import ExternalShutdownException
    from sensor_msgs.msg import JointState

    rclpy.init()
    node = rclpy.create_node("bench_take_stall_writer")
    pub = node.create_publisher(PoseStamped, "/bench/pose", qos())
    heard = [0]
    node.create_subscription(JointState, "/bench/load", lambda _m: heard.__setitem__(0, heard[0] + 1), 10)

    def spin():
        with contextlib.suppress(ExternalShutdownException):  # SIGTERM at the end
            rclpy.spin(node)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    msg = PoseStamped()
    msg.pose.orientation.w = 1.0
    period, nxt = 1.0 / rate_hz, time.monotonic()
    try:
        while rclpy.ok():
            msg.pose.position.x += 1e-4
            pub.publish(msg)
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))
    except (KeyboardInterrupt, Exception):  # noqa: BLE001 - SIGTERM at the end: the context shut down under publish()
        pass


def reader(mode: str, seconds: float, out: Path) -> None:
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState

    from egomimic_nodes.outbox import publish_serialized
    from egomimic_nodes.taken import TakenSubscriptions

    rclpy.init()
    node = rclpy.create_node("bench_take_stall_reader")
    subs = TakenSubscriptions(node.context, "bench_take_stall_taken")
    sub = subs.subscribe(PoseStamped, "/bench/pose", qos())
    load = node.create_publisher(JointState, "/bench/load", 10)
    load_bytes = serialize_message(JointState(name=["j"], position=[0.0]))
    stop = threading.Event()
    ticks: list[float] = []
    taken = [0]

    def take_rclpy():
        n = 0
        while True:
            with sub.handle:
                got = sub.handle.take_message(PoseStamped, False)
            if got is None:
                return n
            n += 1

    take = take_rclpy if mode == "rclpy" else lambda: len(TakenSubscriptions.take(sub))

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(TICK_S)

    def capture():
        while not stop.is_set():
            taken[0] += take()
            time.sleep(1.0 / CAPTURE_HZ)

    def loader():  # without the GIL (publish_serialized), so a blocked send is not what is measured
        nxt = time.monotonic()
        while not stop.is_set():
            publish_serialized(load, load_bytes)
            nxt += 1.0 / LOAD_HZ
            time.sleep(max(0.0, nxt - time.monotonic()))

    threads = [threading.Thread(target=f, daemon=True) for f in (ticker, capture, loader)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    out.write_text(json.dumps({"ticks": ticks, "taken": taken[0]}))
    os._exit(0)  # a thread may still sit in the middleware; nothing else to clean up


def run(mode: str, stops: int, rate: float, domain: int, tmp: Path) -> dict:
    env = local_dds_env(domain)
    out = tmp / f"{mode}.json"
    seconds = 6.0 + stops * (STOP_S + 0.3)
    me = [sys.executable, __file__]
    rd = subprocess.Popen(
        [*me, "--role", "reader", "--mode", mode, "--seconds", str(seconds), "--out", str(out)], env=env
    )
    wr = subprocess.Popen([*me, "--role", "writer", "--rate", str(rate)], env=env)
    try:
        time.sleep(4.0)  # discovery
        windows = stop_repeatedly(wr.pid, stops, STOP_S, (0.2, 0.3), seed=11)
        rd.wait(timeout=seconds + 30)
    finally:
        end_all([wr, rd])
    result = json.loads(out.read_text())
    if result["taken"] < 10:
        raise SystemExit(f"{mode}: the reader took {result['taken']} poses")
    return {"gaps_ms": longest_gaps_ms(result["ticks"], windows), "taken": result["taken"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("main", "reader", "writer"), default="main")
    ap.add_argument("--mode", choices=MODES, default="ours")
    ap.add_argument("--rate", type=float, default=100.0, help="the pose writer's rate, Hz")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--stops", type=int, default=150)
    ap.add_argument("--domain", type=int, default=83)
    ap.add_argument("--load", type=int, default=1, help="busy processes beside the measurement (a loaded machine)")
    args = ap.parse_args()
    if args.role == "writer":
        writer(args.rate)
        return
    if args.role == "reader":
        reader(args.mode, args.seconds, args.out)
        return
    import tempfile

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="take_stall_") as tmp:
            for i, mode in enumerate(MODES):
                results[mode] = run(mode, args.stops, args.rate, args.domain + i, Path(tmp))
    finally:
        for h in hogs:
            h.kill()
    print(
        f"{args.stops} stops of {STOP_S * 1e3:.0f} ms of a {args.rate:.0f} Hz pose writer, {args.load} busy process(es) "
        f"beside; the reader process's longest pause of a 1 ms Python ticker while its capture thread takes:",
        flush=True,
    )
    stalled = {}
    for mode, r in results.items():
        g = sorted(r["gaps_ms"])
        stalled[mode] = sum(x > STALL_MS for x in g)
        print(
            f"take {mode:5}: stops that stalled the reader (> {STALL_MS:.0f} ms): {stalled[mode]}/{len(g)} "
            f"(physical limit 0); pause median {g[len(g) // 2]:.1f} ms, p99 {g[int(0.99 * (len(g) - 1))]:.1f}, "
            f"worst {g[-1]:.1f} ms ({r['taken']} poses taken)",
            flush=True,
        )
    out_dir = REPO / "out" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "take_stall.json").write_text(json.dumps({"stops": args.stops, "rate_hz": args.rate, **results}))


if __name__ == "__main__":
    main()
