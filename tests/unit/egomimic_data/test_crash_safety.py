"""A recorder SIGKILLed mid-episode: the episode opens, is cut to its last commit, reads partial;
`repair` then finalizes it (and refuses while the writer is alive). The writer runs in a child
process, killed once two blocks are committed and a third is pending in its buffer."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import zarr

from egomimic_data.episode_check import RepairRefused, check_episode, repair_episode, summarize
from egomimic_data.episode_format import EpisodeReader, recording_in_progress

BLOCK, STEPS = 10, 25  # 2 blocks committed, 5 steps buffered when killed
DEADLINE_S = 60.0  # generous: the child imports zarr on a shared, loaded machine

CHILD = textwrap.dedent(
    f"""
    import sys
    import numpy as np
    from egomimic_data.episode_format import EpisodeMeta, EpisodeWriter, numeric_keys, NUMERIC_FIELDS
    from egomimic_hw.description import CAMERAS

    meta = EpisodeMeta(task_name="crash", image_width=64, image_height=48,
                       calibration={{c: dict(width=64, height=48, fx=40.0, fy=40.0, cx=32.5, cy=23.5) for c in CAMERAS}})
    w = EpisodeWriter(sys.argv[1], meta, block_steps={BLOCK})
    for t in range({STEPS}):
        img = np.full((48, 64, 3), t, np.uint8)
        vals = {{k: np.arange(NUMERIC_FIELDS[k.split(".", 1)[1]], dtype=np.float32) + t for k in numeric_keys()}}
        w.add(1_000_000_000 + t * 33_333_333, {{c: img for c in CAMERAS}}, vals)
    print("buffered", w.frames, flush=True)
    sys.stdin.read()  # hold the episode open (and its lock) until killed
    """
)


def wait_for(predicate, what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.02)


def committed(path) -> int:
    try:
        return int(zarr.open_group(str(path), mode="r").attrs.get("frames_committed", -1))
    except Exception:  # noqa: BLE001 - not created yet
        return -1


@pytest.fixture
def killed_episode(tmp_path):
    path = tmp_path / "killed.zarr"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([child.stdout], [], [], DEADLINE_S)
        assert ready, "the child never reported its buffered steps"
        assert child.stdout.readline().split() == ["buffered", str(STEPS)]
        wait_for(lambda: committed(path) >= 2 * BLOCK, "two committed blocks")
        # alive: its lock says so, and repair refuses to touch a live recording
        assert recording_in_progress(path) and summarize(path).status == "recording"
        with pytest.raises(RepairRefused, match="live writer"):
            repair_episode(path)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=DEADLINE_S) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return path


def test_a_sigkilled_episode_opens_cut_to_its_last_commit_and_reads_partial(killed_episode):
    path = killed_episode
    assert not recording_in_progress(path)  # the kernel dropped the dead writer's lock
    r = EpisodeReader(path)
    assert len(r) == 2 * BLOCK and r.data_status == "partial" and not r.finalized
    assert r._group["left.obs_ee_pose"].shape[0] > 2 * BLOCK  # the preallocated capacity
    arr = r.array("right.cmd_ee_pose")
    assert arr.shape == (2 * BLOCK, 7) and not np.any(np.isnan(arr))
    np.testing.assert_array_equal(arr[-1], np.arange(7) + 2 * BLOCK - 1)
    assert np.all(r.image("front_1", 2 * BLOCK - 1) == 2 * BLOCK - 1)
    with pytest.raises(IndexError):
        r.jpeg("front_1", 2 * BLOCK)  # the pending block was never committed
    s = summarize(path)
    assert (s.status, s.frames) == ("partial", 2 * BLOCK) and "repair" in s.note
    assert any("never closed" in e for e in check_episode(path).errors)


def test_repair_finalizes_the_killed_episode_as_partial_idempotently(killed_episode):
    path = killed_episode
    before = {k: a.shape for k, a in zarr.open_group(str(path), mode="r").arrays()}
    plan = repair_episode(path, dry_run=True)
    assert not plan.applied and "data_status 'recording' -> 'partial'" in plan.actions
    assert f"total_frames 0 -> {2 * BLOCK}" in plan.actions
    assert {k: a.shape for k, a in zarr.open_group(str(path), mode="r").arrays()} == before  # dry run

    done = repair_episode(path)
    assert done.applied and done.actions == plan.actions and (done.frames, done.status) == (2 * BLOCK, "partial")
    again = repair_episode(path)
    assert not again.actions and not again.applied  # idempotent

    r = EpisodeReader(path)
    assert len(r) == 2 * BLOCK and r.data_status == "partial" and r.finalized
    assert all(a.shape[0] == 2 * BLOCK for _, a in r._group.arrays())
    assert r.attrs["total_frames"] == r.attrs["frames_committed"] == 2 * BLOCK
    np.testing.assert_array_equal(r.array("left.obs_gripper")[:, 0], np.arange(2 * BLOCK))  # committed data kept
    report = check_episode(path)
    assert report.errors == [] and report.ok() and not report.ok(strict=True)  # "partial" is a warning
