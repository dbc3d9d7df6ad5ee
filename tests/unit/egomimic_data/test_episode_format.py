"""EVA episode zarr format: round trip, commit marker and crash recovery, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_data import episode_format as fmt
from egomimic_data.episode_format import (
    EpisodeError,
    EpisodeMeta,
    EpisodeReader,
    EpisodeWriteError,
    EpisodeWriter,
    episode_name,
    numeric_keys,
)
from egomimic_hw.description import CAMERAS

CAMS = CAMERAS
META = EpisodeMeta(task_name="unit")


def image(t, cam):
    yy, xx = np.mgrid[0:480, 0:640]
    img = np.zeros((480, 640, 3), np.uint8)
    img[..., 0] = (xx + 7 * t) % 256
    img[..., 1] = (yy + CAMS.index(cam) * 40) % 256
    img[..., 2] = 30 * CAMS.index(cam)
    return img


def values(t):
    out = {}
    for key in numeric_keys():
        width = fmt.NUMERIC_FIELDS[key.split(".", 1)[1]]
        out[key] = np.arange(width, dtype=np.float32) + t + (100 if key.startswith("right") else 0)
    return out


def meta_calibration():
    return {"front_1": {"width": 640, "height": 480, "fx": 266.5, "fy": 266.5, "cx": 320.0, "cy": 240.0}}


def write(path, n, **kw):
    meta = EpisodeMeta(task_name="unit", calibration=meta_calibration())
    with EpisodeWriter(path, meta, **kw) as w:
        for t in range(n):
            w.add(
                1_000 + t * 33_333_333,
                {c: image(t, c) for c in CAMS},
                values(t),
                image_stamps_ns={c: 900 + t * 33_333_333 + i for i, c in enumerate(CAMS)},
            )
    return meta


def test_a_reused_reference_frame_keeps_the_rgb_clock_strictly_increasing(tmp_path):
    """The recorder bridges one dropped front_1 frame with the one before (step_assembly): that
    step's stamps.front_1 repeats the reused frame's capture stamp (the truth), while upstream's
    RGB clock, which its readers require strictly increasing, carries the step's own stamp; across
    a block boundary too (the reused frame is the last of the block before)."""
    path = tmp_path / "e.zarr"
    period = 33_333_333
    reused = {3, 30}  # step 30 opens the second block of 30
    with EpisodeWriter(path, META, block_steps=30) as w:
        for t in range(40):
            head = 900 + (t - 1 if t in reused else t) * period
            w.add(1_000 + t * period, {c: image(t, c) for c in CAMS}, values(t), dict.fromkeys(CAMS, head))
    r = EpisodeReader(path)
    clock, head = r.array("obs_rgb_timestamps_ns"), r.image_stamps_ns("front_1")
    assert np.all(np.diff(clock) > 0)
    for t in range(40):
        if t in reused:
            assert clock[t] == 1_000 + t * period and head[t] == head[t - 1]
        else:
            assert clock[t] == head[t] == 900 + t * period


def test_round_trip(tmp_path):
    path = tmp_path / "ep.zarr"
    write(path, 75)
    r = EpisodeReader(path)
    assert len(r) == 75 and r.data_status == "complete" and r.cameras == CAMS
    a = r.attrs
    assert a["embodiment"] == "eva_bimanual" and a["total_frames"] == 75
    assert a["fps"] == 30 and isinstance(a["fps"], int)  # upstream's schema types fps int
    assert a["task_name"] == "unit" and a["features"]["left.obs_ee_pose"]["shape"] == [7]
    assert a["features"]["images.front_1"]["shape"] == [480, 640, 3]
    assert a["calibration"]["cameras"]["front_1"]["K"][0][0] == 266.5  # upstream's block
    assert r.intrinsics("front_1") == {**meta_calibration()["front_1"], "distortion": [0.0] * 5}
    assert r.intrinsics("left_wrist") is None  # not calibrated
    for key in numeric_keys():
        arr = r.array(key)
        assert arr.dtype == np.float32 and arr.shape[0] == 75
        np.testing.assert_array_equal(arr[40], values(40)[key])
    np.testing.assert_array_equal(r.timestamps_ns, 1_000 + np.arange(75) * 33_333_333)
    np.testing.assert_array_equal(r.image_stamps_ns("left_wrist"), 901 + np.arange(75) * 33_333_333)
    # upstream's RGB clock: the reference camera's (front_1) capture stamps
    np.testing.assert_array_equal(r.array("obs_rgb_timestamps_ns"), 900 + np.arange(75) * 33_333_333)
    for t in (0, 31, 74):
        got = r.image("right_wrist", t)
        assert got.shape == (480, 640, 3)
        assert np.mean(np.abs(got.astype(int) - image(t, "right_wrist").astype(int))) < 3  # JPEG q85
    assert r.jpeg("front_1", 0)[:2] == b"\xff\xd8"  # stored as JPEG bytes
    assert r.meta().task_name == "unit"


def test_window_pads_with_last_row(tmp_path):
    write(tmp_path / "ep.zarr", 10)
    r = EpisodeReader(tmp_path / "ep.zarr")
    w = r.window("left.obs_gripper", 7, 5)
    np.testing.assert_array_equal(w[:, 0], [7, 8, 9, 9, 9])
    with pytest.raises(IndexError):
        r.window("left.obs_gripper", 10, 2)


def test_grows_past_initial_capacity(tmp_path, monkeypatch):
    monkeypatch.setattr(fmt, "INITIAL_CAPACITY_STEPS", 16)
    write(tmp_path / "ep.zarr", 70, block_steps=8)
    r = EpisodeReader(tmp_path / "ep.zarr")
    assert len(r) == 70 and r.array("left.cmd_joints").shape == (70, 6)
    np.testing.assert_array_equal(r.array("right.obs_joints")[69], values(69)["right.obs_joints"])


def test_writer_killed_mid_episode_reads_back_committed_blocks_as_partial(tmp_path):
    """No close(): what a SIGKILLed recorder leaves. The arrays are longer (capacity) than the
    data; the reader must cut to the commit marker and call the episode partial."""
    path = tmp_path / "ep.zarr"
    meta = EpisodeMeta(task_name="crash")
    w = EpisodeWriter(path, meta, block_steps=10)
    for t in range(25):  # 2 blocks committed, 5 steps only buffered
        w.add(t, {c: image(t, c) for c in CAMS}, values(t))
    del w
    r = EpisodeReader(path)
    assert len(r) == 20 and r.data_status == "partial"
    assert r.array("left.obs_ee_pose").shape == (20, 7)
    assert not np.any(np.isnan(r.array("left.obs_ee_pose")))
    with pytest.raises(IndexError):
        r.jpeg("front_1", 20)


def test_exception_inside_writer_marks_partial(tmp_path):
    path = tmp_path / "ep.zarr"
    with pytest.raises(RuntimeError):
        with EpisodeWriter(path, EpisodeMeta(task_name="x")) as w:
            w.add(0, {c: image(0, c) for c in CAMS}, values(0))
            raise RuntimeError("recorder died")
    r = EpisodeReader(path)
    assert r.data_status == "partial" and len(r) == 1


def test_refusals(tmp_path):
    path = tmp_path / "ep.zarr"
    write(path, 1)
    with pytest.raises(EpisodeError, match="refusing to overwrite"):
        EpisodeWriter(path, EpisodeMeta(task_name="x"))
    w = EpisodeWriter(tmp_path / "b.zarr", EpisodeMeta(task_name="x"))
    good = {c: image(0, c) for c in CAMS}
    with pytest.raises(EpisodeError, match="misses image"):
        w.add(0, {"front_1": good["front_1"]}, values(0))
    bad = values(0)
    bad["left.obs_joints"] = np.zeros(7)
    with pytest.raises(EpisodeError, match="must have 6 values"):
        w.add(0, good, bad)
    bad = values(0)
    bad["right.cmd_ee_pose"][2] = np.nan
    with pytest.raises(EpisodeError, match="not finite"):
        w.add(0, good, bad)
    with pytest.raises(EpisodeError, match=r"uint8 \(480, 640, 3\)"):
        w.add(0, {**good, "front_1": np.zeros((720, 960, 3), np.uint8)}, values(0))
    assert w.frames == 0  # nothing half-accepted
    assert w.close() == 0
    with pytest.raises(EpisodeError, match="not an EVA episode"):
        EpisodeReader(tmp_path / "missing.zarr")
    with pytest.raises(EpisodeError):
        EpisodeMeta(task_name="")


def test_episode_name_is_utc_start_time():
    assert episode_name(0) == "1970-01-01-00-00-00-000000.zarr"
    assert episode_name(1_700_000_000_123_456_000) == "2023-11-14-22-13-20-123456.zarr"


def test_partial_capture_stamps_are_refused(tmp_path):
    with EpisodeWriter(tmp_path / "e.zarr", META) as w:
        with pytest.raises(EpisodeError, match="capture stamp"):
            w.add(0, {c: image(0, c) for c in CAMS}, values(0), image_stamps_ns={CAMS[0]: 0})
        assert w.frames == 0


def test_bad_calibration_leaves_nothing_behind(tmp_path):
    from dataclasses import replace

    with pytest.raises(EpisodeError, match="JSON"):
        EpisodeWriter(tmp_path / "e.zarr", replace(META, calibration={"k": np.eye(3)}))
    assert not (tmp_path / "e.zarr").exists()


def test_a_failed_block_write_keeps_the_step_and_says_so(tmp_path, monkeypatch):
    w = EpisodeWriter(tmp_path / "e.zarr", META, block_steps=2)
    w.add(0, {c: image(0, c) for c in CAMS}, values(0))
    real_flush = w.flush
    monkeypatch.setattr(w, "flush", lambda: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(EpisodeWriteError, match="do not add the step again"):
        w.add(1, {c: image(1, c) for c in CAMS}, values(1))
    assert w.frames == 2
    monkeypatch.setattr(w, "flush", real_flush)
    assert w.close() == 2
    assert len(EpisodeReader(tmp_path / "e.zarr")) == 2
