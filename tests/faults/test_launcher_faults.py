"""Faults of the process supervision, each against its own real simulated graph:
- a full disk under the run directory (a 1 MiB tmpfs, filled after start-up) while the gate
  writes log lines: control goes on, e-stop answers within 50 ms, a fault still holds;
- the launcher SIGKILLed while the graph is armed and commanding: the gate latches ESTOP and
  sends its hold, the drivers hold, every node is gone within 3 s, nothing moves.
Each runs EGOMIMIC_FAULT_TRIALS trials with the independent oracle on every joint command the
drivers received, like the rest of the battery (tests/faults/test_gate_faults.py)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time

import numpy as np
import psutil
import pytest

from egomimic_hw.description import ARMS, CAMERAS
from egomimic_safety.checks import joint_bounds

from .conftest import RESULTS, TrialResult
from .rig import Rig
from .test_gate_faults import (ESTOP_CALLS, arm_and_stream, assert_estop_fast, assert_no_motion, conclude, pose_of,
                               random_arm, set_pose, trials)

pytestmark = pytest.mark.integration


def _mount_tmpfs(path, size="1m"):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): the full-disk case needs root")


def _fill(path) -> int:
    """Write until the file system is full; returns the bytes written."""
    written = 0
    with open(path / "filler", "wb", buffering=0) as f:
        block = b"\0" * 4096
        while True:
            try:
                written += f.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return written


def _wait_cameras(rig: Rig, log) -> None:
    deadline = time.time() + 20
    while time.time() < deadline and not all(rig.health[c] for c in CAMERAS):
        time.sleep(0.1)
    assert all(rig.health[c] for c in CAMERAS), log.read_text()[-3000:]


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """One graph whose run directory (node logs, parameters) lives on a 1 MiB tmpfs."""
    tmp = tmp_path_factory.mktemp("full_disk")
    mnt = tmp / "tmpfs"
    _mount_tmpfs(mnt)
    r = Rig(tmp, CAMERAS, run_dir=mnt / "run")
    try:
        assert r.wait_ready(90), (tmp / "launch.log").read_text()[-3000:]
        _wait_cameras(r, tmp / "launch.log")
        r.filled_bytes = _fill(mnt)
        yield r
    finally:
        r.close()
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_under_the_run_directory(rig):
    """With the disk full, a burst of 300 service calls makes the gate log 300 lines that cannot
    be stored; control goes on: e-stop answers within 50 ms at p99, a NaN still holds in time,
    the status keeps flowing, and the launcher stays up."""
    for rng in trials("full_disk"):
        t_start = time.time()
        for _ in range(150):  # each call logs a line in the gate
            rig.call("disarm")
            rig.call("reset")
        arm_and_stream(rig, rng)
        arm, field = random_arm(rng), int(rng.integers(7))

        def mutate(msg, arm=arm, field=field):
            pose = pose_of(getattr(msg, arm.value))
            pose[field] = float("nan")
            set_pose(getattr(msg, arm.value), pose)
        t_fault = rig.inject_once(mutate)
        result = conclude(rig, "full_disk", t_start, t_fault, {"HOLD"}, {"NONFINITE"})
        estop = rig.estop_latencies(ESTOP_CALLS)
        RESULTS[-1] = result.with_estop(estop).with_note(f"disk full after {rig.filled_bytes} filler bytes")
        assert_estop_fast("full_disk", estop)
        assert rig.launcher.poll() is None, "the launcher died on the full disk"
        before = len(rig.statuses)
        deadline = time.time() + 2.0
        while len(rig.statuses) < before + 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(rig.statuses) >= before + 2, "the gate stopped publishing its status"


def _start_armed_graph(tmp, rng) -> Rig:
    r = Rig(tmp, CAMERAS)
    assert r.wait_ready(90), (tmp / "launch.log").read_text()[-3000:]
    _wait_cameras(r, tmp / "launch.log")
    arm_and_stream(r, rng)
    return r


def test_launcher_sigkill_stops_the_whole_graph_safely(tmp_path):
    """SIGKILL the launcher while armed and commanding: no orphan is left after 3 s, the gate
    announced ESTOP and held, nothing outside the limits reached a driver, and the arms did not
    move beyond one control period of their measured trajectory."""
    for i, rng in enumerate(trials("launcher_sigkill")):
        tmp = tmp_path / f"trial{i}"
        tmp.mkdir()
        rig = _start_armed_graph(tmp, rng)
        try:
            t_start = rig.armed_stamp_s
            estop_before = rig.estop_latencies(ESTOP_CALLS)  # e-stop latency while armed (state ESTOP after)
            rig.call("reset")
            arm_and_stream(rig, rng)
            nodes = [p for p in psutil.Process(rig.launcher.pid).children(recursive=True)]
            assert len(nodes) >= 5, [p.cmdline() for p in nodes]
            t_fault = time.time()
            os.kill(rig.launcher.pid, signal.SIGKILL)
            rig.launcher.wait()
            gone, alive = psutil.wait_procs(nodes, timeout=3.0)
            t_gone = time.time()
            names = [" ".join(p.cmdline()[-4:]) for p in alive if p.is_running()]
            for p in alive:
                p.kill()
            assert not alive, f"launcher_sigkill: nodes alive 3 s after the launcher died: {names}"
            rig.stop_stream()
            estop = rig.wait_state({"ESTOP"}, t_fault - 0.001, 1.0)
            assert estop is not None, f"launcher_sigkill: the gate did not announce ESTOP: {rig.statuses[-1]}"
            lo, hi = joint_bounds(rig.config)
            for arm in ARMS:  # a hold is exactly a measured sample (clamped); a forwarded command is an IK solution
                measured = [np.append(np.clip(j.positions[:6], lo, hi), np.clip(j.positions[6], 0.0, 1.0))
                            for j in rig.joint_samples(arm, t_fault - 0.2, t_gone)]
                holds = [c for c in rig.commands_since(t_fault) if c.arm == arm
                         and any(np.array_equal(c.values, m) for m in measured)]
                assert holds, f"launcher_sigkill: {arm.value}: no hold command after the launcher died"
            assert_no_motion(rig, "launcher_sigkill", t_fault, t_gone)
            cmds = rig.commands_since(t_start)
            bad = [c for c in cmds if c.violations]
            RESULTS.append(TrialResult("launcher_sigkill", "ESTOP", estop.reason, estop.stamp_s - t_fault,
                                       estop.recv_s - t_fault, len(cmds), len(bad), [v for c in bad for v in c.violations][:3],
                                       note=f"all {len(nodes)} nodes gone {t_gone - t_fault:.2f} s after the kill").with_estop(estop_before))
            assert not bad, f"launcher_sigkill: commands outside limits: {RESULTS[-1].examples}"
            assert_estop_fast("launcher_sigkill", estop_before)
        finally:
            rig.close()
