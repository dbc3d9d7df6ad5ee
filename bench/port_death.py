"""A process that stalls for a while: does Fast DDS declare its shared-memory port dead, and
does it hear its writers again afterwards? Measured against the physical limit (it hears them
again at once: the writers never stopped).

What: a reader process (the role of a driver or the gate) takes /bench/cmd at 30 Hz from one
writer process and /bench/state at 100 Hz from another. The reader is SIGSTOPped for D seconds
(a node starved by the scheduler, or frozen by the fault battery), --stops times per D, then
resumed. Per stop the bench measures how long after the resume the reader's /bench/cmd arrivals
come back to the writer's rate (RECOVER_WINDOW_S; "never" when not within WAIT_S), and counts
Fast DDS's port warnings that every process printed (warnings turned on as the nodes do):
"NOT Healthy", "Zombie", "SHM Listener on port N failure", "marked as not ok".
Why: Fast DDS's shared-memory watchdog (every process that has a port open runs one) marks a
port dead when its listener has neither woken from its wait nor finished the message it was
processing between two checks, which are at least healthy_check_timeout_ms apart (1000 ms by
default). A dead port refuses every push; its listener regenerates it, and every writer that
opens it finds it "NOT Healthy" and recreates it: in test loops a driver's port churned like
that for 20 s after its driver started, and the gate's commands did not reach it (README,
"Open"). The bench sizes that: which stall kills a port, and whether the reader comes back.
Each profile runs in its own processes: config/fastdds_local.xml (the project's) against a copy
with <healthy_check_timeout_ms> set to --timeout-ms (1000, Fast DDS's default).
Every process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST on its own ROS_DOMAIN_ID
(--domain, +1 per profile); nothing leaves loopback.
Run: `.venv/bin/python bench/port_death.py [--stalls 0.5,1.5,3] [--stops 4] [--timeout-ms 1000]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "config" / "fastdds_local.xml"
CMD_HZ = 30.0
STATE_HZ = 100.0
RECOVER_WINDOW_S = 0.5
"""Recovered: the reader got at least half the commands the writer sent in a window this long."""
WAIT_S = 6.0
"""How long after a resume the bench waits for the reader to recover."""
ALARMS = re.compile(r"NOT Healthy|Zombie|Listener on port \d+ failure|marked as not ok")


def set_dds_warnings() -> None:
    import ctypes

    ctypes.CDLL("librmw_fastrtps_cpp.so").rmw_set_log_severity(30)


def writer(topic: str, rate_hz: float) -> None:
    """deaf_reader's writer, with Fast DDS's warnings on (set before rclpy loads the RMW: the
    library is the same one)."""
    set_dds_warnings()
    from deaf_reader import writer as plain_writer  # this file's folder is on sys.path

    plain_writer(topic, rate_hz)


def reader(out: Path) -> None:
    """Appends one wall-clock arrival time per /bench/cmd message to `out` (flushed at once, so
    the controller reads them while this process runs)."""
    import rclpy
    from sensor_msgs.msg import JointState

    rclpy.init()
    set_dds_warnings()
    node = rclpy.create_node("bench_death_reader")
    f = open(out, "a", buffering=1)
    node.create_subscription(JointState, "/bench/cmd", lambda _m: f.write(f"{time.time()}\n"), 10)
    node.create_subscription(JointState, "/bench/state", lambda _m: None, 10)
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    except Exception:
        if rclpy.ok():
            raise


def arrivals(path: Path) -> list[float]:
    try:
        return [float(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def recovered_after(path: Path, t_resume: float) -> float | None:
    """Seconds from the resume to the start of the first RECOVER_WINDOW_S window in which the
    reader got at least half of the writer's commands; None when not within WAIT_S."""
    need = CMD_HZ * RECOVER_WINDOW_S / 2
    deadline = time.time() + WAIT_S + RECOVER_WINDOW_S
    while time.time() < deadline:
        t = [x for x in arrivals(path) if x > t_resume]
        for i, start in enumerate(t):
            if sum(1 for x in t[i:] if x < start + RECOVER_WINDOW_S) >= need:
                return start - t_resume
        time.sleep(0.1)
    return None


def run(profile: Path, domain: int, stalls: list[float], stops: int, tmp: Path) -> dict:
    from egomimic_launch.environment import ros_environment

    # Its own domain and profile; discovery on this machine whatever the caller's shell says.
    env = ros_environment({**os.environ, "ROS_DOMAIN_ID": str(domain), "FASTDDS_DEFAULT_PROFILES_FILE": str(profile)})
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    me = [sys.executable, __file__]
    logs = {name: open(tmp / f"{domain}_{name}.log", "w") for name in ("reader", "cmd", "state")}
    out = tmp / f"{domain}_arrivals.txt"
    rd = subprocess.Popen(
        [*me, "--role", "reader", "--out", str(out)], env=env, stderr=logs["reader"], stdout=logs["reader"]
    )
    procs = [rd]
    for topic, rate in (("cmd", CMD_HZ), ("state", STATE_HZ)):
        procs.append(
            subprocess.Popen(
                [*me, "--role", "writer", "--topic", topic, "--rate", str(rate)],
                env=env,
                stderr=logs[topic],
                stdout=logs[topic],
            )
        )
    results = {}
    try:
        first = recovered_after(out, time.time() - 1.0)
        if first is None:
            raise SystemExit(f"{profile.name}: the reader never heard the command writer (discovery)")
        for stall in stalls:
            times = []
            for _ in range(stops):
                os.kill(rd.pid, signal.SIGSTOP)
                time.sleep(stall)
                os.kill(rd.pid, signal.SIGCONT)
                back = recovered_after(out, time.time())
                times.append(None if back is None else round(back, 2))
                time.sleep(1.0)
            results[f"{stall:g}"] = times
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs.values():
            f.close()
    alarms = {name: len(ALARMS.findall((tmp / f"{domain}_{name}.log").read_text(errors="replace"))) for name in logs}
    return {"recovered_after_s": results, "port_alarms": alarms}


def profile_with_timeout(timeout_ms: int, tmp: Path) -> Path:
    """A copy of the project's profile whose shared-memory transport has `timeout_ms`."""
    text = re.sub(r"\s*<healthy_check_timeout_ms>\d+</healthy_check_timeout_ms>", "", PROFILE.read_text())
    marker = "</port_queue_capacity>"
    assert marker in text, "the project's profile changed"
    path = tmp / f"fastdds_healthy_{timeout_ms}.xml"
    tag = f"<healthy_check_timeout_ms>{timeout_ms}</healthy_check_timeout_ms>"
    path.write_text(text.replace(marker, f"{marker}\n        {tag}"))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("main", "reader", "writer"), default="main")
    ap.add_argument("--topic", default="cmd")
    ap.add_argument("--rate", type=float, default=CMD_HZ)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--stalls", default="0.5,1.5,3", help="reader stall lengths, seconds, comma-separated")
    ap.add_argument("--stops", type=int, default=4, help="stalls per length")
    ap.add_argument(
        "--timeout-ms", type=int, default=1000, help="the baseline's healthy_check_timeout_ms (Fast DDS's default)"
    )
    ap.add_argument("--domain", type=int, default=85)
    ap.add_argument("--json", type=Path, default=REPO / "out" / "bench" / "port_death.json")
    args = ap.parse_args()
    if args.role == "writer":
        return writer(args.topic, args.rate)
    if args.role == "reader":
        return reader(args.out)
    stalls = [float(s) for s in args.stalls.split(",")]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ours = re.search(r"<healthy_check_timeout_ms>(\d+)<", PROFILE.read_text())
        report = {
            f"Fast DDS's default (healthy_check_timeout_ms {args.timeout_ms})": run(
                profile_with_timeout(args.timeout_ms, tmp), args.domain, stalls, args.stops, tmp
            ),
            f"the project's profile (healthy_check_timeout_ms {ours[1] if ours else 1000})": run(
                PROFILE, args.domain + 1, stalls, args.stops, tmp
            ),
        }
    print(
        f"reader stalled (SIGSTOP) {args.stops}x per length; seconds after the resume until it heard the 30 Hz writer again"
    )
    print("(physical limit 0: the writer never stopped; 'never' = not within 6 s)")
    for name, res in report.items():
        print(f"\n{name}:   port alarms in the logs {res['port_alarms']}")
        for stall, times in res["recovered_after_s"].items():
            shown = ", ".join("never" if t is None else f"{t:.2f}" for t in times)
            print(f"  stall {stall:>4} s: {shown}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(f"\nwritten to {args.json}")


if __name__ == "__main__":
    main()
