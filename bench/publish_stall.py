"""What a subscriber stopped inside its shared-memory port's lock does to the publishing node:
rclpy's publish() vs egomimic_nodes.outbox.Outbox.

What: a publisher process (the role of the safety gate) publishes std_msgs/Header on /bench/x
at about 1 kHz; a second thread in it ticks every 1 ms (the role of the gate's watchdog and
e-stop thread). An echo process (the role of a driver) subscribes to /bench/x and publishes each
message back on /bench/y. The echo is SIGSTOPped for 0.3 s, --stops times, with --load busy
processes beside. Per stop the bench records the slowest publish() call, the ticker's longest
gap and, for the outbox, its sending thread's slowest send. Two modes, one after the other, each
in its own publisher process: `publish` (rclpy's publish(), the baseline) and `outbox`.
Why: a stop that lands while the echo's listener holds its port's interprocess mutex blocks
every send to it (gdb: SharedMemManager::Port::try_push -> interprocess_mutex::lock) until the
echo runs again, or 1 s (boost's lock timeout, repeated per attempt) if it never does; rclpy's
publish() keeps the GIL meanwhile, so the ticker stops too. That is how a stopped driver, or a
launcher killed mid-receive, held up the whole gate. (An earlier version of this bench also
ran "UDP only" profiles; gdb showed those publishers still sending through shared memory, so
that comparison measured nothing and was dropped.)
Every process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST on its own ROS_DOMAIN_ID
(--domain, +1 per mode) and the project's Fast DDS profile; nothing leaves loopback.
Run: `.venv/bin/python bench/publish_stall.py [--stops 120] [--load 2] [--domain 87]`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "config" / "fastdds_local.xml"
STOP_S = 0.3
BLOCKED_MS = 100.0
MODES = ("publish", "outbox")


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


class Ticker:
    """A thread that sleeps 1 ms at a time and keeps the longest gap between its wake-ups."""

    def __init__(self):
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            time.sleep(0.001)
            now = time.monotonic()
            self.worst = max(self.worst, now - last)
            last = now

    def take(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst * 1e3

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)


def publisher(mode: str, stops: int) -> list[dict]:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import Header

    from egomimic_nodes.outbox import Outbox

    child = subprocess.Popen([sys.executable, __file__, "--role", "echo"])
    rclpy.init()
    node = rclpy.create_node("bench_stall_publisher")
    pub = node.create_publisher(Header, "/bench/x", 10)
    box = Outbox(pub, keep=1) if mode == "outbox" else None
    send = box.publish if box is not None else pub.publish
    echoed = threading.Event()
    node.create_subscription(Header, "/bench/y", lambda _m: echoed.set(), 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    ticker = Ticker()
    try:
        deadline = time.monotonic() + 30.0
        while not echoed.is_set() and time.monotonic() < deadline:
            send(Header())
            time.sleep(0.01)
        if not echoed.is_set():
            raise SystemExit("the echo process never answered")
        rows = []
        for _ in range(stops):
            publish_for(send, 0.05)  # both running
            ticker.take()
            if box is not None:
                box.slowest_s = 0.0
            os.kill(child.pid, signal.SIGSTOP)
            call_ms = publish_for(send, STOP_S)
            os.kill(child.pid, signal.SIGCONT)
            if box is not None:
                box.flush(5.0)  # a send blocked by this stop ends once the echo runs again
            rows.append(
                {
                    "call_ms": call_ms,
                    "ticker_ms": ticker.take(),
                    "send_ms": box.slowest_s * 1e3 if box is not None else call_ms,
                }
            )
        return rows
    finally:
        ticker.stop()
        child.terminate()
        child.wait(10)
        if box is not None:
            box.close()
        executor.shutdown()
        rclpy.try_shutdown()


def publish_for(send, seconds: float) -> float:
    from std_msgs.msg import Header

    worst = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        send(Header())
        worst = max(worst, time.perf_counter() - t0)
        time.sleep(0.001)
    return worst * 1e3


def run(mode: str, stops: int, domain: int) -> list[dict]:
    env = dict(
        os.environ,
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_DOMAIN_ID=str(domain),
        FASTDDS_DEFAULT_PROFILES_FILE=str(PROFILE),
    )
    out = subprocess.run(
        [sys.executable, __file__, "--role", "publisher", "--mode", mode, "--stops", str(stops)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60 + 4 * stops,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("rows ")]
    if not lines:
        raise SystemExit(f"publisher ({mode}) failed: {out.stderr[-2000:]}")
    return json.loads(lines[-1][5:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("main", "publisher", "echo"), default="main")
    ap.add_argument("--mode", choices=MODES, default="publish")
    ap.add_argument("--stops", type=int, default=120)
    ap.add_argument("--domain", type=int, default=87)
    ap.add_argument("--load", type=int, default=2, help="busy processes beside the measurement (a loaded machine)")
    args = ap.parse_args()
    if args.role == "echo":
        echo()
        return
    if args.role == "publisher":
        print("rows " + json.dumps(publisher(args.mode, args.stops)), flush=True)
        return
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    results = {}
    try:
        for i, mode in enumerate(MODES):
            results[mode] = run(mode, args.stops, args.domain + i)
    finally:
        for h in hogs:
            h.kill()
    print(f"{args.stops} stops of {STOP_S * 1e3:.0f} ms each, {args.load} busy process(es) beside", flush=True)
    summary = {}
    for mode, rows in results.items():
        blocked = sum(r["send_ms"] > BLOCKED_MS for r in rows)
        call = max(r["call_ms"] for r in rows)
        ticker = max(r["ticker_ms"] for r in rows)
        summary[mode] = (blocked, call, ticker)
        print(
            f"{mode:8s}: stops with a send blocked > {BLOCKED_MS:.0f} ms: {blocked}/{len(rows)} (slowest send "
            f"{max(r['send_ms'] for r in rows):.0f} ms); slowest publish() call {call:.1f} ms; the other "
            f"thread's longest gap {ticker:.1f} ms",
            flush=True,
        )
    (b_base, call_base, tick_base), (b_ours, call_ours, tick_ours) = summary["publish"], summary["outbox"]
    print(
        f"ratio publish/outbox: slowest publish() call {call_base / max(call_ours, 1e-3):.0f}x, other thread's "
        f"longest gap {tick_base / max(tick_ours, 1e-3):.1f}x (blocked sends {b_base} vs {b_ours}: the block is "
        f"the middleware's; the outbox moves it off the caller and out of the GIL)",
        flush=True,
    )


if __name__ == "__main__":
    main()
