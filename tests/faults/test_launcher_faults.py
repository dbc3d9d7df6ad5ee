"""A full disk under the run directory (a 1 MiB tmpfs, filled after start-up) while the gate
writes log lines, against its own real simulated graph: control goes on, e-stop answers within
50 ms, a fault still holds, the launcher stays up (the launcher SIGKILL case:
test_launcher_sigkill.py). It runs EGOMIMIC_FAULT_TRIALS trials with the independent oracle on every joint command the
drivers received, like the rest of the battery (tests/faults/test_gate_faults.py)."""

from __future__ import annotations

import errno
import shutil
import subprocess
import time

import pytest

from egomimic_hw.description import CAMERAS

from .conftest import RESULTS
from .rig import Rig
from .test_gate_faults import (
    ESTOP_CALLS,
    arm_and_stream,
    assert_estop_fast,
    assert_estop_round_trip,
    conclude,
    pose_of,
    random_arm,
    set_pose,
    trials,
)

pytestmark = pytest.mark.integration


def _mount_tmpfs(path, size="1m"):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
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


def wait_cameras(rig: Rig, log) -> None:
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
        wait_cameras(r, tmp / "launch.log")
        r.filled_bytes = _fill(mnt)
        yield r
    finally:
        r.close()
        # What the nodes managed to log before and during the full disk, kept for a post-mortem:
        # the tmpfs and everything on it are gone once it is unmounted.
        if (mnt / "run" / "logs").is_dir():
            shutil.copytree(mnt / "run" / "logs", tmp / "run_logs", dirs_exist_ok=True)
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
        RESULTS[-1] = result.with_estop(estop, rig.last_estop_gate_s, rig.last_estop_paths).with_note(
            f"disk full after {rig.filled_bytes} filler bytes"
        )
        assert_estop_fast("full_disk", estop, rig.last_estop_gate_s)
        assert rig.launcher.poll() is None, "the launcher died on the full disk"
        before = len(rig.statuses)
        deadline = time.time() + 2.0
        while len(rig.statuses) < before + 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(rig.statuses) >= before + 2, "the gate stopped publishing its status"
    assert_estop_round_trip("full_disk")
