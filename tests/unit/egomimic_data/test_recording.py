"""EpisodeRecorder: a writer thread behind a bounded queue, disk-space checks, clean stops with a
reason, and a commit that survives SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from egomimic_data import episode_format as fmt
from egomimic_data.episode_format import EpisodeMeta, EpisodeReader, numeric_keys
from egomimic_data.recording import MB, STATS_ATTRIBUTE, EpisodeRecorder, RecorderError, RecorderState
from egomimic_data.recording_config import RecorderConfig, RecordingConfigError
from egomimic_data.step_assembly import Step
from egomimic_hw.description import CAMERAS

H, W = 48, 64
META = EpisodeMeta(task_name="unit", image_width=W, image_height=H)
PLENTY = 10**12
REPO = Path(__file__).resolve().parents[3]


def step(t: int) -> Step:
    img = np.full((H, W, 3), t % 256, np.uint8)
    values = {k: np.full(fmt.NUMERIC_FIELDS[k.split(".", 1)[1]], float(t), np.float32) for k in numeric_keys()}
    stamp = 1_000_000_000 + t * 33_333_333
    return Step(stamp, dict.fromkeys(CAMERAS, img), dict.fromkeys(CAMERAS, stamp - 5), values)


def config(tmp_path: Path, **kw) -> RecorderConfig:
    return RecorderConfig(record_dir=str(tmp_path / "episodes"), block_steps=10, **kw)


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_an_episode_round_trips_with_its_counts_and_stop_reason(tmp_path):
    rec = EpisodeRecorder(config(tmp_path), free_bytes=lambda _p: PLENTY)
    path = rec.start(META, 1_000_000_000)
    assert rec.status().state is RecorderState.RECORDING and path.parent == tmp_path / "episodes"
    assert all(rec.submit(step(t)) for t in range(25))
    result = rec.stop("operator", attributes={"streams": {"images.front_1": {"received": 25}}})
    assert result is not None and result.frames == 25 and result.data_status == "complete"
    status = rec.status()
    assert status.state is RecorderState.IDLE and status.frames == status.frames_committed == 25
    r = EpisodeReader(path)
    assert len(r) == 25 and r.data_status == "complete"
    assert np.all(np.diff(r.timestamps_ns) > 0)
    assert r.image("front_1", 24).shape == (H, W, 3)
    stats = r.attrs[STATS_ATTRIBUTE]
    assert stats["stop_reason"] == "operator" and stats["queue_dropped"] == 0
    assert stats["streams"]["images.front_1"]["received"] == 25
    assert rec.stop() is None, "nothing open: nothing to stop"


def test_submit_never_blocks_and_counts_what_a_full_queue_drops(tmp_path, monkeypatch):
    release = threading.Event()
    real_add = fmt.EpisodeWriter.add

    def slow_add(self, *args, **kw):
        release.wait(5)  # a disk that stalls
        return real_add(self, *args, **kw)

    monkeypatch.setattr(fmt.EpisodeWriter, "add", slow_add)
    rec = EpisodeRecorder(config(tmp_path, queue_steps=5), free_bytes=lambda _p: PLENTY)
    rec.start(META, 1)
    t0 = time.monotonic()
    accepted = [rec.submit(step(t)) for t in range(20)]
    assert time.monotonic() - t0 < 0.5, "submit waited for the writer"
    assert accepted.count(True) <= 6 and rec.status().queue_dropped == accepted.count(False) >= 14
    release.set()
    result = rec.stop("done")
    assert result is not None and result.frames == accepted.count(True)
    assert EpisodeReader(result.path).attrs[STATS_ATTRIBUTE]["queue_dropped"] == accepted.count(False)


def test_start_is_refused_when_the_disk_is_low(tmp_path):
    rec = EpisodeRecorder(config(tmp_path, min_free_mb=500.0), free_bytes=lambda _p: 100 * MB)
    with pytest.raises(RecorderError, match="only 100 MB free .* min_free_mb 500 MB"):
        rec.start(META, 1)
    status = rec.status()
    assert status.state is RecorderState.ERROR and "min_free_mb" in status.detail
    assert not list((tmp_path / "episodes").glob("*.zarr")), "nothing created"


def test_the_disk_filling_while_recording_stops_cleanly_keeping_the_committed_frames(tmp_path):
    free = {"bytes": 5000 * MB}
    clock = {"s": 0.0}
    rec = EpisodeRecorder(
        config(tmp_path, min_free_mb=1000.0, disk_check_period_s=0.05),
        free_bytes=lambda _p: free["bytes"],
        monotonic=lambda: clock["s"],
    )
    path = rec.start(META, 1)
    for t in range(20):
        assert rec.submit(step(t))
    assert wait_for(lambda: rec.status().frames == 20)
    free["bytes"] = 900 * MB  # another process filled the disk
    clock["s"] += 1.0
    assert wait_for(lambda: rec.halt_reason != "", 5), "the writer thread never checked the disk again"
    assert "recording stopped before the disk fills" in rec.halt_reason
    assert not rec.submit(step(20)), "nothing more is taken once the writer halted"
    result = rec.stop(rec.halt_reason)
    assert result is not None and result.data_status == "partial" and result.frames == 20
    status = rec.status()
    assert status.state is RecorderState.ERROR and "before the disk fills" in status.detail
    r = EpisodeReader(path)
    assert len(r) == 20 and "before the disk fills" in r.attrs[STATS_ATTRIBUTE]["stop_reason"]


def test_a_failing_write_ends_the_episode_partial_with_the_committed_blocks_readable(tmp_path, monkeypatch):
    rec = EpisodeRecorder(config(tmp_path), free_bytes=lambda _p: PLENTY)
    path = rec.start(META, 1)
    for t in range(10):
        rec.submit(step(t))
    assert wait_for(lambda: rec.status().frames == 10)

    def full(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fmt.EpisodeWriter, "flush", full)
    for t in range(10, 25):
        rec.submit(step(t))
    assert wait_for(lambda: rec.halt_reason != "")
    assert "No space left on device" in rec.halt_reason
    result = rec.stop(rec.halt_reason)
    assert result is not None and result.data_status == "partial" and result.frames == 10
    assert rec.status().state is RecorderState.ERROR and "closing failed" in rec.status().detail
    r = EpisodeReader(path)
    assert len(r) == 10 and r.data_status == "partial"
    assert r.image("left_wrist", 9).shape == (H, W, 3)


def test_an_unusable_record_dir_is_refused_naming_it(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rec = EpisodeRecorder(replace(config(tmp_path), record_dir=str(blocker / "episodes")), free_bytes=lambda _p: PLENTY)
    with pytest.raises(RecorderError, match="cannot create record_dir .*a_file/episodes"):
        rec.start(META, 1)
    assert rec.status().state is RecorderState.ERROR
    rec.config = config(tmp_path)
    rec.start(META, 1)  # a good directory clears the error
    assert rec.status().state is RecorderState.RECORDING
    rec.stop()


def test_config_refusals_name_the_field():
    with pytest.raises(RecordingConfigError, match="queue_steps"):
        RecorderConfig(queue_steps=0)
    with pytest.raises(RecordingConfigError, match="task_name"):
        RecorderConfig(task_name=" ")
    with pytest.raises(RecordingConfigError, match="min_free_mb"):
        RecorderConfig(min_free_mb=float("nan"))


KILLED_RECORDER = """
import os, signal, sys, time
sys.path.insert(0, {tests!r})
from test_recording import META, PLENTY, config, step
from pathlib import Path
from egomimic_data.recording import EpisodeRecorder
rec = EpisodeRecorder(config(Path({tmp!r})), free_bytes=lambda _p: PLENTY)
path = rec.start(META, 1)
print(path, flush=True)
for t in range(25):
    rec.submit(step(t))
while rec.status().frames < 25:
    time.sleep(0.01)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_sigkilled_recorder_leaves_every_committed_block_readable(tmp_path):
    """No stop(), no close(): the process dies. What was committed (2 blocks of 10) reads back;
    the 5 buffered steps are lost, and the episode says it is partial."""
    script = KILLED_RECORDER.format(tests=str(Path(__file__).parent), tmp=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr
    r = EpisodeReader(out.stdout.strip())
    assert len(r) == 20 and r.data_status == "partial"
    np.testing.assert_array_equal(r.array("right.cmd_joints")[19], np.full(6, 19.0, np.float32))
    assert r.image("front_1", 19)[0, 0, 0] == 19
