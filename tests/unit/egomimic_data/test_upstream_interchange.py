"""Episodes move both ways between this project and upstream EgoVerse: the project's episodes
load in upstream's reader (re-implemented in upstream_reference, with the files and commits it
follows) and meet the v3.1 rules; episodes laid out as upstream's ZarrWriter writes them (padded
arrays, no commit marker, no `cameras`) load here, for training (EpisodeReader) and replay."""

from __future__ import annotations

import time

import numpy as np
import pytest

from egomimic_data import episode_format as fmt
from egomimic_data.episode_check import check_episode, repair_episode
from egomimic_data.episode_format import EpisodeMeta, EpisodeReader, EpisodeWriter, numeric_keys
from egomimic_hw.cameras.base import Intrinsics
from egomimic_hw.cameras.replay import ReplayCamera
from egomimic_hw.description import ARMS, CAMERAS

from .upstream_reference import (
    FOLD_EVA_KEY_MAP,
    UpstreamDataset,
    pinhole_block,
    upstream_rule_errors,
    write_like_upstream,
)

W, H = 64, 48
"""Small frames: the layout, not the pixels, is under test."""
START_NS = 1_700_000_000_000_000_000


def image(t: int, cam: str) -> np.ndarray:
    img = np.zeros((H, W, 3), np.uint8)
    img[..., 0] = (np.arange(W) * 3 + 5 * t) % 256
    img[..., 1] = 60 * CAMERAS.index(cam)
    img[..., 2] = (np.arange(H)[:, None] * 4) % 256
    return img


def values(t: int) -> dict[str, np.ndarray]:
    out = {}
    for key in numeric_keys():
        width = fmt.NUMERIC_FIELDS[key.split(".", 1)[1]]
        out[key] = (np.arange(width) + 0.01 * t + (1 if key.startswith(ARMS[1].value) else 0)).astype(np.float32)
    return out


def project_calibration() -> dict:
    cal: dict = {c: {"width": W, "height": H, "fx": 40.0, "fy": 40.0, "cx": 32.5, "cy": 23.5} for c in CAMERAS}
    base_T_cam = np.eye(4)
    base_T_cam[:3, 3] = (0.1, 0.2, 0.5)
    cal["extrinsics"] = {f"{a.value}_base_T_front_1": base_T_cam.tolist() for a in ARMS}
    return cal


def write_ours(path, n: int, *, close: str | None = "complete"):
    meta = EpisodeMeta(task_name="fold_clothes", image_width=W, image_height=H, calibration=project_calibration())
    w = EpisodeWriter(path, meta, block_steps=10)
    for t in range(n):
        stamp = START_NS + t * 33_333_333
        w.add(
            stamp,
            {c: image(t, c) for c in CAMERAS},
            values(t),
            {c: stamp - 5_000_000 - i for i, c in enumerate(CAMERAS)},
        )
    if close is not None:
        w.close(close)
    return w


# -- ours -> upstream ----------------------------------------------------------------------------


def test_our_episode_loads_in_upstreams_reader_with_the_fold_eva_key_map(tmp_path):
    path = tmp_path / "ours.zarr"
    write_ours(path, 45)  # not a multiple of 100: no padding, total_frames is the length either way
    assert UpstreamDataset.loads(EpisodeReader(path).attrs)
    ds = UpstreamDataset(path, FOLD_EVA_KEY_MAP)
    assert len(ds) == 45 and ds.embodiment_id == 6  # eva_bimanual
    first, last = ds[0], ds[44]
    for a in ARMS:
        np.testing.assert_array_equal(
            first[f"{a.value}.obs_ee_pose"], [values(0)[f"{a.value}.obs_ee_pose"], values(1)[f"{a.value}.obs_ee_pose"]]
        )
        chunk = last[f"{a.value}.cmd_ee_pose"]
        assert chunk.shape == (101, 7)  # one real row, padded with it (never with zeros)
        np.testing.assert_array_equal(chunk, np.repeat(values(44)[f"{a.value}.cmd_ee_pose"][None], 101, axis=0))
        assert last[f"{a.value}.cmd_gripper"].shape == (101, 1)
    reader = EpisodeReader(path)
    for c in CAMERAS:
        got = first[f"cam.{c}"]
        assert got.shape == (3, H, W) and 0.0 <= got.min() and got.max() <= 1.0
        np.testing.assert_allclose(got, np.transpose(reader.image(c, 0), (2, 0, 1)) / 255.0)


def test_our_episode_meets_upstreams_v31_rules_strictly(tmp_path):
    path = tmp_path / "ours.zarr"
    write_ours(path, 45)
    assert upstream_rule_errors(path, strict=True) == []
    a = EpisodeReader(path).attrs
    assert a["schema_version"] == "v3.1" and a["data_status"] == "complete" and a["fps"] == 30
    block = a["calibration"]
    assert block["reference_frame"] == "camera:front_1"
    assert block["cameras"]["front_1"]["K"] == [[40.0, 0.0, 32.5, 0.0], [0.0, 40.0, 23.5, 0.0], [0.0, 0.0, 1.0, 0.0]]
    assert block["cameras"]["left_wrist"]["resolution"] == [W, H]
    # arm_bases is ref_T_armbase; the legacy `extrinsics` (front camera in each arm base) round-trips
    np.testing.assert_allclose(
        a["extrinsics"][ARMS[0].value], project_calibration()["extrinsics"]["left_base_T_front_1"], atol=1e-12
    )
    assert set(a["intrinsics"]) == set(CAMERAS)
    assert a["features"]["images.front_1"] == {
        "dtype": "jpeg",
        "shape": [H, W, 3],
        "names": ["height", "width", "channel"],
    }
    assert a["features"]["left.obs_ee_pose"]["dtype"] == "float32"
    clock = EpisodeReader(path).array("obs_rgb_timestamps_ns")  # front_1's capture stamps
    np.testing.assert_array_equal(clock, START_NS + np.arange(45) * 33_333_333 - 5_000_000)


def test_unfinished_or_partial_episodes_stay_out_of_upstreams_training_sets(tmp_path):
    crashed = tmp_path / "crashed.zarr"
    w = write_ours(crashed, 25, close=None)  # no close: 2 blocks committed, 5 steps buffered
    attrs = EpisodeReader(crashed).attrs
    assert attrs["total_frames"] == 0 and not UpstreamDataset.loads(attrs)  # "recording"
    del w
    partial = tmp_path / "partial.zarr"
    write_ours(partial, 12, close="partial")
    attrs = EpisodeReader(partial).attrs
    assert not UpstreamDataset.loads(attrs)
    # upstream's rules know no "partial": a cut-short episode fails them on purpose
    assert upstream_rule_errors(partial, strict=False) == [
        "attrs.data_status: 'partial' not in ['complete', 'structural_sample']"
    ]


# -- upstream -> ours ----------------------------------------------------------------------------


def upstream_data(n: int, dtype=np.float64):
    numeric = {}
    for key in numeric_keys():
        numeric[key] = np.stack([values(t)[key] for t in range(n)]).astype(dtype)
    numeric["obs_rgb_timestamps_ns"] = START_NS + np.arange(n, dtype=np.int64) * 33_333_333
    images = {f"images.{c}": np.stack([image(t, c) for t in range(n)]) for c in CAMERAS}
    return numeric, images


def test_an_upstream_written_episode_loads_here_padded_arrays_cut_to_total_frames(tmp_path):
    path = tmp_path / "upstream.zarr"
    numeric, images = upstream_data(130)
    spans = [("reach for the towel", 0, 60), ("fold it", 60, 130)]
    block = pinhole_block(dict.fromkeys(CAMERAS, (W, H)), fx=40.0)
    write_like_upstream(path, numeric, images, annotations=spans, attrs={"calibration": block})
    raw = EpisodeReader(path)._group
    assert raw["left.obs_ee_pose"].shape == (200, 7) and raw["images.front_1"].shape == (200,)  # as upstream pads
    assert "frames_committed" not in raw.attrs and "cameras" not in raw.attrs

    r = EpisodeReader(path)
    assert len(r) == 130 and r.data_status == "complete" and r.finalized and not r.has_commit_marker
    assert r.cameras == CAMERAS and r.fps == 30.0
    for key in numeric_keys():
        got = r.array(key)
        assert got.shape == (130, numeric[key].shape[1]) and got.dtype == np.float64
        np.testing.assert_array_equal(got, numeric[key])
    # training windows pad with the last real row, not with upstream's zero padding
    np.testing.assert_array_equal(
        r.window("right.cmd_ee_pose", 129, 101), np.repeat(numeric["right.cmd_ee_pose"][-1:], 101, axis=0)
    )
    np.testing.assert_array_equal(r.timestamps_ns, numeric["obs_rgb_timestamps_ns"])
    np.testing.assert_array_equal(r.image_stamps_ns("left_wrist"), numeric["obs_rgb_timestamps_ns"])
    with pytest.raises(IndexError):
        r.jpeg("front_1", 130)  # the padded tail is not a frame
    decoded = r.image("left_wrist", 129)
    assert decoded.shape == (H, W, 3) and np.mean(np.abs(decoded.astype(int) - image(129, "left_wrist"))) < 4
    assert r.intrinsics("front_1") == {
        "width": W,
        "height": H,
        "fx": 40.0,
        "fy": 40.0,
        "cx": 32.5,
        "cy": 23.5,
        "distortion": [0.0] * 5,
    }
    assert r.annotations() == [{"text": t, "start_idx": b, "end_idx": e} for t, b, e in spans]
    assert r.meta().task_name == "fold_clothes" and (r.meta().image_width, r.meta().image_height) == (W, H)
    # it meets the contract as `egomimic-episodes check` reads it, and needs no repair
    report = check_episode(path)
    assert report.errors == [], report.errors
    assert any("schema_version" in w for w in report.warnings)  # upstream's writer does not write it
    result = repair_episode(path)
    assert not result.actions and not result.applied and "no commit marker" in result.note


def test_an_upstream_written_episode_replays_through_the_camera_backend(tmp_path):
    path = tmp_path / "upstream.zarr"
    numeric, images = upstream_data(40)
    write_like_upstream(
        path, numeric, images, attrs={"calibration": pinhole_block(dict.fromkeys(CAMERAS, (W, H)), fx=40.0)}
    )
    reader = EpisodeReader(path)
    cam = ReplayCamera("right_wrist", path, loop=False, start_monotonic=time.monotonic())
    try:
        assert len(cam) == 40  # not the 100 padded frames
        assert cam.intrinsics == Intrinsics.from_dict(reader.intrinsics("right_wrist"))
        frames = [cam.read(2.0) for _ in range(3)]
    finally:
        cam.close()
    for k, f in enumerate(frames):
        assert f is not None and f.index == k
        np.testing.assert_array_equal(f.image, reader.image("right_wrist", k))


def test_an_older_upstream_episode_without_status_clock_or_calibration_still_loads(tmp_path):
    path = tmp_path / "old.zarr"
    numeric, images = upstream_data(30, dtype=np.float32)
    del numeric["obs_rgb_timestamps_ns"]
    write_like_upstream(path, numeric, images, attrs={"data_status": None}, fps=15)
    r = EpisodeReader(path)
    assert len(r) == 30 and r.data_status == "complete" and r.intrinsics("front_1") is None
    np.testing.assert_array_equal(r.image_stamps_ns("front_1"), np.round(np.arange(30) * 1e9 / 15).astype(np.int64))
    cam = ReplayCamera("front_1", path, loop=False, start_monotonic=time.monotonic())
    try:
        assert len(cam) == 30 and cam.read(2.0) is not None  # default intrinsics, timing at 15 fps
    finally:
        cam.close()
    report = check_episode(path)
    assert "the episode states no camera matrix (upstream's calibration_present)" in report.errors
