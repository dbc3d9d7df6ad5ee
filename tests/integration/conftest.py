"""Helpers for tests that start real node processes over DDS (private domain per worker)."""

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-m", "egomimic_launch.cli"]


def run_launch(tmp_path: Path, *args: str, timeout_s: float = 120.0):
    """Run egomimic-launch to completion; returns (exit code, summary dict or None, output)."""
    summary = tmp_path / "summary.json"
    cmd = LAUNCH + [
        "eva_bimanual.launch.py",
        *args,
        "--summary",
        "--summary-json",
        str(summary),
        "--run-dir",
        str(tmp_path / "run"),
        "--quiet",
    ]
    try:
        proc = subprocess.run(
            cmd, cwd=REPO_ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"egomimic-launch ran past {timeout_s:.0f} s\n{_hang_report(tmp_path / 'run', exc)}")
    data = json.loads(summary.read_text()) if summary.exists() else None
    return proc.returncode, data, proc.stdout + proc.stderr


def _hang_report(run_dir: Path, exc: subprocess.TimeoutExpired) -> str:
    """What a launcher that never exited left: its console's tail, its stop-stall dump (every
    thread's stack: egomimic_launch.cli.StopStallDump) and each node log's last lines."""
    from egomimic_launch.cli import STOP_STALL_FILE

    def text(x) -> str:
        return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")

    parts = [f"console (tail):\n{(text(exc.stdout) + text(exc.stderr))[-3000:]}"]
    stall = run_dir / STOP_STALL_FILE
    if stall.exists():
        parts.append(f"{STOP_STALL_FILE}:\n{stall.read_text()[-6000:]}")
    for log in sorted((run_dir / "logs").glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-3:]
        parts.append(f"{log.name}: " + " | ".join(line[:200] for line in tail))
    return "\n".join(parts)


def start_launch(run_dir: Path, *args: str, duration_s: float = 60.0) -> subprocess.Popen:
    """Start egomimic-launch in the background (quiet, logs under `run_dir`); the caller stops it
    (SIGINT) and waits."""
    cmd = LAUNCH + [
        "eva_bimanual.launch.py",
        *args,
        "--duration",
        str(duration_s),
        "--run-dir",
        str(run_dir),
        "--quiet",
    ]
    return subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


@pytest.fixture
def node_process(tmp_path):
    """Start `python -m <module> --ros-args ...`; all are stopped (SIGINT, then kill) at the end."""
    procs = []

    def start(module: str, *ros_args: str):
        log = open(tmp_path / f"{module.rsplit('.', 1)[-1]}.log", "w")
        p = subprocess.Popen(
            [sys.executable, "-m", module, "--ros-args", *ros_args],
            cwd=REPO_ROOT,
            env=dict(os.environ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append((p, log))
        return p

    yield start
    for p, log in procs:
        if p.poll() is None:
            p.send_signal(2)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


@pytest.fixture
def ros_node():
    """A test-side rclpy node spinning in the background."""
    import threading

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from egomimic_nodes.spin import middleware_warnings

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    middleware_warnings("warning")  # Fast DDS's warnings of this process go to the test's captured output
    node = rclpy.create_node(f"test_probe_{os.getpid()}", context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    th = threading.Thread(target=ex.spin, daemon=True)
    th.start()
    yield node
    middleware_warnings("error")  # teardown's routine "type is in use" warnings are not the test's
    ex.shutdown()
    th.join(timeout=2)
    node.destroy_node()
    rclpy.try_shutdown(context=ctx)
    # A node made in this process on the context (test_driver_node's DriverNode) leaves reference
    # cycles that keep the context, so its DDS participant, alive until the cyclic collector runs:
    # in 4 fresh clones it lived on for two more modules, in fc112 to the end of the integration
    # tests, mapping the dead nodes' shared-memory ports, so the next modules' clean-up removed
    # ports this process mapped and failed them ("a process started while stale Fast DDS files
    # were removed: {<this pytest>: ...}"). Collected here, the participant goes with its test.
    gc.collect()


def wait_for(predicate, timeout_s: float, period_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(period_s)
    return False
