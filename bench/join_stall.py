"""What a process joining the DDS domain does to the safety gate's inputs (issue 13: the rare
HOLD right after arming).

What: the sim graph runs (policy:=scripted, auto_arm:=true) with --load busy processes beside
(niceness 0, each in a session of its own, like a browser or a training run on a robot PC).
A watcher takes the gate's inputs as the gate does (the three cameras' health and
command/proposed, 30 Hz each, and the drivers' joint states, 100 Hz) with each sample's DDS reception time, and the gate's status.
Mode `joins`: a joiner (a bare rclpy node that lives a second: what `ros2 topic echo`, rviz,
the operator console or a late recorder is to the graph) starts and exits, --joins times, one
every 3 s. Mode `quiet`, the baseline: the same windows, nothing joins. Per window the bench
records the longest pause between two receptions of any of those streams, against the gate's
thresholds (an input older than 100 ms defers commands; 300 ms latches HOLD), and lists the
gate's HOLDs.
Why: with one CPU hog, pauses of 330-370 ms (once 1024 ms) in the frames node's
command/proposed and in the cameras' health followed joins, in the source timestamps (the
writer late) or in the reception (the reader late), and the gate latched HOLD ("newest frame is
304 ms old", "no command for 302 ms"): the suite's and `make run`'s rare HOLD just after arming,
when the recorder, the web view or rviz's nodes join. The cause was stale shared-memory port
files in /dev/shm, reused by new participants (egomimic_launch/shm.py, which the launcher now
runs first): their listeners saw pushes only at their periodic wake-up every
healthy_check_timeout_ms / 3 = 333 ms (perf sched_switch). With 140 stale port files: 347-384 ms
and a HOLD in 4 of 6 runs; with them removed: 59-77 ms, no HOLD, 3 runs. Not a fix on their own:
the joiner's priority (`--joiner-nice`), a deeper writer history, a 50 ms health-check timeout.
Each mode runs on its own ROS_DOMAIN_ID with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST; nothing
leaves loopback.
Run: `.venv/bin/python bench/join_stall.py [--joins 15] [--load 1] [--domain 91] [--profile XML]`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "config" / "fastdds_local.xml"
NAMESPACE = "eva"
JOIN_PERIOD_S = 3.0
JOINER_LIFE_S = 1.0
"""A join every 3 s: the joiner lives 1 s (plus its start-up), then 2 s of quiet."""
DEFER_MS = 100.0
"""The gate defers commands while a camera's newest frame is older than this (max_camera_age_s)."""
HOLD_MS = 300.0
"""... and latches HOLD past this (camera_hold_after_s; the command and state limits are alike)."""
CONTROL_NICENESS = -5


def watcher(out: str) -> None:
    """Takes the gate's inputs as the gate does (camera health, command/proposed) with each
    sample's DDS source and reception times, and the gate's status, until SIGTERM."""
    import signal
    import threading

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile

    from egomimic_hw.description import ARMS, CAMERAS
    from egomimic_msgs.msg import GateStatus
    from egomimic_nodes import topics
    from egomimic_nodes.taken import TakenSubscriptions

    os.nice(CONTROL_NICENESS - os.nice(0))  # its own reception must not be what pauses
    rclpy.init()
    node = rclpy.create_node("bench_join_watcher")
    taken = TakenSubscriptions(node.context, "bench_join_watcher_taken")
    streams = [(topics.CAMERA_HEALTH, {"cam": cam}) for cam in CAMERAS] + [(topics.COMMAND_PROPOSED, {})]
    streams += [(topics.JOINT_STATES, {"arm": arm}) for arm in ARMS]
    subs = []
    for topic, where in streams:
        name = topic.resolve(NAMESPACE, **where)
        qos = QoSProfile(depth=300, reliability=topic.qos.reliability, durability=topic.qos.durability)
        subs.append((name, taken.subscribe(topic.type, name, qos, raw=True)))
    samples: dict[str, list] = {name: [] for name, _ in subs}
    holds: list[str] = []
    armed = threading.Event()

    def on_status(msg) -> None:
        if msg.state == GateStatus.ARMED:
            armed.set()
        elif msg.state == GateStatus.HOLD and (not holds or holds[-1] != msg.detail):
            holds.append(msg.detail)

    node.create_subscription(GateStatus, topics.SAFETY_STATUS.resolve(NAMESPACE), on_status, topics.SAFETY_STATUS.qos)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    said = False
    while not stop:
        for name, sub in subs:
            for _raw, info in taken.take(sub, limit=10_000):
                samples[name].append((int(info["source_timestamp"]), int(info["received_timestamp"])))
        if armed.is_set() and not said:
            print("ready", flush=True)
            said = True
        time.sleep(0.02)
    Path(out).write_text(json.dumps({"samples": samples, "holds": holds}))


def joiner(niceness: int) -> None:
    """A bare rclpy node that lives a second: what `ros2 topic echo`, rviz or a console is to the
    graph. Its niceness (and its autogroup's) is set before rclpy.init, so its middleware
    threads have it too."""
    import rclpy

    from egomimic_nodes.spin import set_autogroup_nice

    if niceness != 0:
        os.nice(niceness - os.nice(0))
        set_autogroup_nice(niceness)
    rclpy.init()
    node = rclpy.create_node("bench_joiner")
    end = time.monotonic() + JOINER_LIFE_S
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)


def run_mode(name: str, profile: Path, domain: int, joins: int, tmp: Path, join: bool, nice: int) -> dict:
    env = dict(
        os.environ,
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_DOMAIN_ID=str(domain),
        FASTDDS_DEFAULT_PROFILES_FILE=str(profile),
    )
    me = [sys.executable, __file__]
    out = tmp / f"{name}.json"
    duration_s = 40.0 + joins * JOIN_PERIOD_S
    launch = subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "egomimic-launch"),
            "eva_bimanual.launch.py",
            "policy:=scripted",
            "auto_arm:=true",
            f"namespace:={NAMESPACE}",
            "--duration",
            str(duration_s),
            "--run-dir",
            str(tmp / f"{name}-run"),
            "--quiet",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watch = subprocess.Popen(
        [*me, "--role", "watch", "--out", str(out)], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    windows = []
    try:
        if watch.stdout.readline().strip() != "ready":
            raise SystemExit(f"{name}: the gate never armed")
        time.sleep(2.0)  # steady state before the first join
        for _ in range(joins):
            t0 = time.time_ns()
            if join:
                subprocess.run(
                    [*me, "--role", "join", "--joiner-nice", str(nice)],
                    env=env,
                    timeout=60,
                    check=True,
                    start_new_session=True,
                )
            else:
                time.sleep(JOINER_LIFE_S)  # the same window, nothing joins
            windows.append((t0, time.time_ns() + 300_000_000))
            time.sleep(JOIN_PERIOD_S - 1.0)
    finally:
        watch.terminate()
        watch.wait(20)
        launch.send_signal(signal.SIGINT)
        launch.wait(60)
    data = json.loads(out.read_text())
    worst = []
    for t0, t1 in windows:
        pause = 0
        for stream in data["samples"].values():
            received = sorted(r for _s, r in stream)
            before = [r for r in received if r < t0]
            seq = ([before[-1]] if before else []) + [r for r in received if t0 <= r <= t1]
            pause = max(pause, max((b - a for a, b in zip(seq, seq[1:])), default=0))
        worst.append(pause / 1e6)
    return {"mode": name, "worst_pause_ms": worst, "holds": data["holds"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--joins", type=int, default=15, help="joining processes per mode (default 15)")
    ap.add_argument("--load", type=int, default=1, help="busy processes beside (default 1: one core)")
    ap.add_argument("--domain", type=int, default=91, help="ROS_DOMAIN_ID of the first mode (+1 for the second)")
    ap.add_argument(
        "--profile", type=Path, default=PROFILE, help="Fast DDS profile for both modes (default: the project's)"
    )
    ap.add_argument(
        "--joiner-nice",
        type=int,
        default=0,
        help="the joiner's niceness (default 0, a tool started by hand; the graph's control tier is -5)",
    )
    ap.add_argument("--role", choices=("watch", "join"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "watch":
        watcher(a.out)
        return 0
    if a.role == "join":
        joiner(a.joiner_nice)
        return 0
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(a.load)]
    try:
        with tempfile.TemporaryDirectory(prefix="join_stall_") as tmp_name:
            tmp = Path(tmp_name)
            results = [
                run_mode(name, a.profile, a.domain + i, a.joins, tmp, join, a.joiner_nice)
                for i, (name, join) in enumerate((("quiet", False), ("joins", True)))
            ]
    finally:
        for h in hogs:
            h.kill()
    print(
        f"\nsim graph (policy:=scripted), {a.joins} windows per mode, {a.load} busy process(es) beside, "
        f"joiner at niceness {a.joiner_nice}"
    )
    print(f"{'mode':<16}{'median':>9}{'p90':>9}{'worst':>9}{'>100 ms':>9}{'>300 ms':>9}   gate HOLDs")
    stats = {}
    for r in results:
        w = sorted(r["worst_pause_ms"])
        med, p90, top = w[len(w) // 2], w[round(0.9 * (len(w) - 1))], w[-1]
        stats[r["mode"]] = top
        over_defer = sum(x > DEFER_MS for x in w)
        over_hold = sum(x > HOLD_MS for x in w)
        holds = "; ".join(r["holds"]) or "none"
        print(f"{r['mode']:<16}{med:>8.0f} {p90:>8.0f} {top:>8.0f} {over_defer:>8d} {over_hold:>8d}   {holds}")
    print(
        f"worst pause in a window, joins / quiet: {stats['joins'] / max(stats['quiet'], 1e-9):.2f}; "
        f"against the HOLD limit ({HOLD_MS:.0f} ms): {stats['joins'] / HOLD_MS:.2f}"
    )
    print("(ms: per window, the longest gap between two receptions of any of the gate's inputs: camera health")
    print(" and command/proposed at 30 Hz, joint states at 100 Hz; a 30 Hz stream's normal gap is 33 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
