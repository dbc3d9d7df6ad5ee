"""How long publish() blocks while a subscriber process is stopped (SIGSTOP), by transport.

What: a publisher process (the role of the safety gate) publishes std_msgs/Header on /bench/x
at about 1 kHz and times every publish(); an echo process (the role of a driver) subscribes to
/bench/x and publishes each message back on /bench/y. The echo process is SIGSTOPped for
0.3 s, --stops times, and the publisher's slowest publish() during each stop is recorded, with
--load busy processes beside (a loaded 2-core machine). Three configurations, one after the
other (publisher profile, echo profile):
  - shm: both on the shipped profile (config/fastdds_local.xml: shared memory, loopback UDP);
  - udp: the publisher on loopback UDP only (a profile this bench writes), the echo shipped;
  - udp_both: both on loopback UDP only.
Why: the fault battery's stale-state case (a driver SIGSTOPped) sometimes saw the gate's HOLD
after ~1 s instead of 310 ms, with both arms' state stale: the gate's main thread was blocked.
Measured here (2026-12-03, 80 stops, 2 busy processes): a publish() blocked for 1.0 s (once
2.0 s) in 4/80 stops with shared memory, 2/80 with the publisher on UDP only, 3/80 with both on
UDP only; without load 0/60. So the block is not the shared-memory port's 1 s lock timeout
alone: it is in the middleware's publish path whatever the transport; not fixed yet.
Every process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST on its own ROS_DOMAIN_ID
(--domain, +1 per configuration); nothing leaves loopback.
Run: `.venv/bin/python bench/publish_stall.py [--stops 80] [--load 2] [--domain 87]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHM_PROFILE = REPO / "config" / "fastdds_local.xml"
UDP_PROFILE = Path(tempfile.gettempdir()) / "egomimic_bench_fastdds_udp_only.xml"
UDP_PROFILE_XML = """<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns="http://www.eprosima.com"><profiles>
  <transport_descriptors><transport_descriptor>
    <transport_id>udp_lo</transport_id><type>UDPv4</type>
    <interfaces><allowlist><interface name="lo"/></allowlist></interfaces>
  </transport_descriptor></transport_descriptors>
  <participant profile_name="bench_udp_only" is_default_profile="true"><rtps>
    <userTransports><transport_id>udp_lo</transport_id></userTransports>
    <useBuiltinTransports>false</useBuiltinTransports>
  </rtps></participant>
</profiles></dds>
"""
STOP_S = 0.3
CONFIGURATIONS = (("shm", SHM_PROFILE, SHM_PROFILE), ("udp", UDP_PROFILE, SHM_PROFILE), ("udp_both", UDP_PROFILE, UDP_PROFILE))
"""(name, the publisher's profile, the echo process's profile)."""
BLOCKED_MS = 100.0


def echo() -> None:
    import rclpy
    from std_msgs.msg import Header

    rclpy.init()
    node = rclpy.create_node("bench_stall_echo")
    pub = node.create_publisher(Header, "/bench/y", 10)
    node.create_subscription(Header, "/bench/x", pub.publish, 10)
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass


def publisher(stops: int, echo_profile: str) -> list[float]:
    """The slowest publish() (ms) during each stop of the echo process."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import Header

    child_env = dict(os.environ, FASTDDS_DEFAULT_PROFILES_FILE=echo_profile)
    child = subprocess.Popen([sys.executable, __file__, "--role", "echo"], env=child_env)
    rclpy.init()
    node = rclpy.create_node("bench_stall_publisher")
    pub = node.create_publisher(Header, "/bench/x", 10)
    echoed = threading.Event()
    node.create_subscription(Header, "/bench/y", lambda _m: echoed.set(), 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    try:
        deadline = time.monotonic() + 30.0
        while not echoed.is_set() and time.monotonic() < deadline:
            pub.publish(Header())
            time.sleep(0.01)
        if not echoed.is_set():
            raise SystemExit("the echo process never answered")
        worst = []
        for _ in range(stops):
            publish_for(pub, 0.05)  # both running
            os.kill(child.pid, signal.SIGSTOP)
            worst.append(publish_for(pub, STOP_S))
            os.kill(child.pid, signal.SIGCONT)
        return worst
    finally:
        child.terminate()
        child.wait(10)
        executor.shutdown()
        rclpy.try_shutdown()


def publish_for(pub, seconds: float) -> float:
    from std_msgs.msg import Header

    worst = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        pub.publish(Header())
        worst = max(worst, time.perf_counter() - t0)
        time.sleep(0.001)
    return worst * 1e3


def run(profile: Path, echo_profile: Path, stops: int, domain: int) -> list[float]:
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(domain),
               FASTDDS_DEFAULT_PROFILES_FILE=str(profile))
    out = subprocess.run([sys.executable, __file__, "--role", "publisher", "--stops", str(stops),
                          "--echo-profile", str(echo_profile)], env=env,
                         capture_output=True, text=True, timeout=60 + 2 * stops)
    lines = [line for line in out.stdout.splitlines() if line.startswith("worst_ms ")]
    if not lines:
        raise SystemExit(f"publisher failed: {out.stderr[-2000:]}")
    return [float(x) for x in lines[-1].split()[1:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("main", "publisher", "echo"), default="main")
    ap.add_argument("--stops", type=int, default=60)
    ap.add_argument("--domain", type=int, default=87)
    ap.add_argument("--echo-profile", default=str(SHM_PROFILE))
    ap.add_argument("--load", type=int, default=0, help="busy processes beside the measurement (a loaded machine)")
    args = ap.parse_args()
    if args.role == "echo":
        echo()
        return
    if args.role == "publisher":
        print("worst_ms " + " ".join(f"{x:.3f}" for x in publisher(args.stops, args.echo_profile)), flush=True)
        return
    UDP_PROFILE.write_text(UDP_PROFILE_XML)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    results = {}
    try:
        for i, (name, profile, echo_profile) in enumerate(CONFIGURATIONS):
            results[name] = sorted(run(profile, echo_profile, args.stops, args.domain + i))
    finally:
        for h in hogs:
            h.kill()
    print(f"{args.stops} stops of {STOP_S * 1e3:.0f} ms each, {args.load} busy process(es) beside", flush=True)
    for name, worst in results.items():
        blocked = sum(x > BLOCKED_MS for x in worst)
        print(f"{name}: slowest publish while the subscriber was stopped {worst[-1]:.1f} ms; median of the per-stop "
              f"maxima {worst[len(worst) // 2]:.2f} ms; stops with a publish blocked > {BLOCKED_MS:.0f} ms: "
              f"{blocked}/{len(worst)}", flush=True)
    for name in ("udp", "udp_both"):
        print(f"blocked stops, shm vs {name}: {sum(x > BLOCKED_MS for x in results['shm'])} vs "
              f"{sum(x > BLOCKED_MS for x in results[name])}", flush=True)


if __name__ == "__main__":
    main()
