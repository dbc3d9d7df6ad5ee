"""CPU of the whole simulated graph, per node and in total, launcher included.

    .venv/bin/python bench/graph_cpu.py [--seconds 20] [--policy scripted]

Runs the graph twice in one go, the same way `make run` does (synthetic cameras, simulated
arms, the policy armed by auto_arm), and reads each process's CPU time from /proc over the
same window after start-up:
  1. baseline: every node on rclpy's SingleThreadedExecutor (EGOMIMIC_EXECUTOR=single);
  2. ours: spin.make_executor's choice (EventsExecutor where it works).
Both runs already take the gate's joint_states and the launcher's streams in batches
(egomimic_nodes/taken.py); the executor is the one switch this bench flips. It prints per-node
CPU in % of one core for both, the ratio ours/baseline, and the total against the target of
75 % of one core (the whole graph on one of the two cores, leaving the other for what a robot PC
runs beside it). CPU shares are only comparable on an otherwise idle machine: the bench
says the load average it started at.
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

import psutil

from egomimic_launch.process import cpu_percent, node_processes

REPO = Path(__file__).resolve().parents[1]
TARGET_PCT = 75.0


def measure(executor: str, seconds: float, settle_s: float, policy: str, domain: int) -> dict[str, float]:
    env = dict(
        os.environ,
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_DOMAIN_ID=str(domain),
        FASTDDS_DEFAULT_PROFILES_FILE=str(REPO / "config" / "fastdds_local.xml"),
    )
    if executor:
        env["EGOMIMIC_EXECUTOR"] = executor
    else:
        env.pop("EGOMIMIC_EXECUTOR", None)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "egomimic_launch.cli",
            "eva_bimanual.launch.py",
            f"policy:={policy}",
            "auto_arm:=true",
            "--quiet",
            "--run-dir",
            str(Path(tmp) / "run"),
            "--duration",
            str(settle_s + seconds + 30),
        ]
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            launcher = psutil.Process(proc.pid)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(node_processes(launcher)) < 6:
                time.sleep(0.2)
            time.sleep(settle_s)  # start-up (imports, discovery, arming) is not the steady state
            return cpu_percent(node_processes(launcher), seconds)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="measurement window per run (default 20)")
    ap.add_argument("--settle", type=float, default=8.0, help="seconds after all nodes are up before measuring")
    ap.add_argument("--policy", default="scripted", help="policy launch argument (default scripted)")
    ap.add_argument("--domain", type=int, default=96, help="ROS_DOMAIN_ID of the runs (default 96)")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    a = ap.parse_args()
    load = os.getloadavg()[0]
    print(
        f"graph CPU, {a.seconds:.0f} s window, policy {a.policy}, {psutil.cpu_count()} cores, load average at start {load:.2f}"
    )
    base = measure("single", a.seconds, a.settle, a.policy, a.domain)
    ours = measure("", a.seconds, a.settle, a.policy, a.domain)
    names = sorted(set(base) | set(ours), key=lambda n: -ours.get(n, 0.0))
    print(f"{'process':<16}{'baseline %':>12}{'ours %':>10}{'ours/base':>11}")
    for n in names:
        b, o = base.get(n, float("nan")), ours.get(n, float("nan"))
        print(f"{n:<16}{b:>12.1f}{o:>10.1f}{o / b if b else float('nan'):>11.2f}")
    tb, to = sum(base.values()), sum(ours.values())
    print(f"{'total':<16}{tb:>12.1f}{to:>10.1f}{to / tb:>11.2f}")
    print(
        f"target: whole graph <= {TARGET_PCT:.0f} % of one core: ours is {to / TARGET_PCT:.2f}x the target "
        f"({'met' if to <= TARGET_PCT else 'NOT met'})"
    )
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(
            json.dumps(
                {
                    "window_s": a.seconds,
                    "policy": a.policy,
                    "load_at_start": load,
                    "baseline_pct": base,
                    "ours_pct": ours,
                    "baseline_total_pct": tb,
                    "ours_total_pct": to,
                    "target_pct": TARGET_PCT,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
