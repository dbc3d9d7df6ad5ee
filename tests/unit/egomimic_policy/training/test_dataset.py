"""Training windows: observation history (first frame repeated at the start), commanded actions
made wrist-relative against the current measured pose, end padding with its mask, collate, and
the refusals that name the episode."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import same_pose
from egomimic_policy.families import build_algorithm
from egomimic_policy.features import decode_action_chunk, encode_action_chunk, neutral_norm_stats, state_ee_pose
from egomimic_policy.training.dataset import EpisodeWindows, TrainingDataError, collate_windows
from tests.unit.egomimic_policy.training.episodes import (
    frame_value,
    gripper,
    measured_pose,
    write_episode,
)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("episodes")
    write_episode(root / "a.zarr", 10)
    write_episode(root / "b.zarr", 6)
    return root


def windows(paths, n_obs=2, chunk=4, **kw) -> EpisodeWindows:
    return EpisodeWindows(paths if isinstance(paths, list) else [paths], n_obs_steps=n_obs, chunk_length=chunk, **kw)


def frame_values(window, camera):
    """The flat grey level of each history frame (JPEG keeps a flat image to within a level)."""
    return [int(round(float(f.mean()))) for f in window.images[camera]]


def test_window_holds_history_commanded_actions_and_mask(episodes):
    ds = windows(episodes)
    assert len(ds) == 16 and len(ds.episodes) == 2
    w = ds[3]  # episode a, step 3
    assert (w.episode, w.step) == (0, 3)
    for cam in CAMERAS:
        assert w.images[cam].dtype == np.uint8 and w.images[cam].shape == (2, 48, 64, 3)
        assert frame_values(w, cam) == pytest.approx([frame_value(2, cam), frame_value(3, cam)], abs=1)
    expected_state = [
        state_ee_pose(measured_pose(Arm.LEFT, t), gripper(t), measured_pose(Arm.RIGHT, t), gripper(t)) for t in (2, 3)
    ]
    np.testing.assert_allclose(w.state, expected_state, atol=1e-6)  # float32 storage
    np.testing.assert_array_equal(w.action_mask, [1, 1, 1, 1])
    # the chunk is the COMMANDED poses of steps 3..6 relative to the MEASURED pose at step 3:
    # decoding it against that pose (what rollout does) gives back the commands
    decoded = decode_action_chunk({arm: measured_pose(arm, 3) for arm in ARMS}, w.actions)
    for arm in ARMS:
        for row, t in enumerate(range(3, 7)):
            assert same_pose(decoded[arm][0][row], measured_pose(arm, t + 1), atol=1e-5)
        np.testing.assert_allclose(decoded[arm][1], [gripper(t + 1) for t in range(3, 7)], atol=1e-6)


def test_chunk_past_the_end_repeats_the_last_command_and_is_masked(episodes):
    ds = windows(episodes)
    w = ds[8]  # episode a (10 steps), step 8: rows 8, 9, then 9 repeated
    assert (w.episode, w.step) == (0, 8)
    np.testing.assert_array_equal(w.action_mask, [1, 1, 0, 0])
    np.testing.assert_array_equal(w.actions[2], w.actions[1])
    np.testing.assert_array_equal(w.actions[3], w.actions[1])
    last = ds[9]
    np.testing.assert_array_equal(last.action_mask, [1, 0, 0, 0])
    expected = encode_action_chunk(
        {arm: measured_pose(arm, 9) for arm in ARMS},
        {arm: np.stack([measured_pose(arm, 10)] * 4) for arm in ARMS},
        {arm: np.full(4, gripper(10)) for arm in ARMS},
    )
    np.testing.assert_allclose(last.actions, expected, atol=1e-5)


def test_history_repeats_the_first_frame_at_the_episode_start(episodes):
    ds = windows(episodes, n_obs=3)
    for index, steps in ((0, [0, 0, 0]), (1, [0, 0, 1]), (2, [0, 1, 2]), (10, [0, 0, 0])):  # 10: episode b, step 0
        w = ds[index]
        assert frame_values(w, "left_wrist") == pytest.approx([frame_value(s, "left_wrist") for s in steps], abs=1)
        np.testing.assert_array_equal(w.state, ds.episodes[w.episode].state[steps])
    assert ds.locate(10) == (1, 0) and ds.locate(15) == (1, 5)
    with pytest.raises(IndexError):
        ds[16]


def test_collate_gives_what_batch_from_raw_takes(episodes):
    ds = windows(episodes, chunk=8)
    raw = collate_windows([ds[i] for i in (0, 5, 12)])
    assert len(raw) == 3
    assert raw.images["front_1"].shape == (3, 2, 48, 64, 3) and raw.images["front_1"].dtype == np.uint8
    assert raw.state.shape == (3, 2, 20) and raw.actions.shape == (3, 8, 20) and raw.action_mask.shape == (3, 8)
    np.testing.assert_array_equal(raw.step, [0, 5, 2])
    algo = build_algorithm("fold", overrides={"chunk_length": 8, "image_height": 24, "image_width": 32})
    batch = algo.batch_from_raw(raw.images, raw.state, raw.actions, neutral_norm_stats(), raw.action_mask)
    assert tuple(batch.images.shape) == (3, 2, 3, 3, 24, 32) and tuple(batch.action_mask.shape) == (3, 8)
    assert float(batch.action_mask[1].sum()) == 5  # episode a step 5: rows 5..9 real


def test_frames_of_different_sizes_collate_as_objects(episodes, tmp_path):
    from egomimic_data.episode_format import EpisodeMeta, EpisodeWriter

    path = tmp_path / "big.zarr"
    meta = EpisodeMeta(task_name="unit_train", image_width=80, image_height=60)
    with EpisodeWriter(path, meta) as w:
        values = {}
        for arm in ARMS:
            for kind, pose, g in (
                ("obs", measured_pose(arm, 0), gripper(0)),
                ("cmd", measured_pose(arm, 1), gripper(1)),
            ):
                values[f"{arm.value}.{kind}_ee_pose"] = pose
                values[f"{arm.value}.{kind}_joints"] = np.zeros(6)
                values[f"{arm.value}.{kind}_gripper"] = [g]
        w.add(1, {c: np.zeros((60, 80, 3), np.uint8) for c in CAMERAS}, values)
    ds = windows([episodes / "a.zarr", path])
    raw = collate_windows([ds[0], ds[10]])
    assert raw.images["front_1"].dtype == object and raw.images["front_1"].shape == (2, 2)
    algo = build_algorithm("fold", overrides={"chunk_length": 4, "image_height": 24, "image_width": 32})
    batch = algo.batch_from_raw(raw.images, raw.state, raw.actions, neutral_norm_stats(), raw.action_mask)
    assert tuple(batch.images.shape[:3]) == (2, 2, 3)


def test_frame_cache_is_bounded_and_pickling_drops_readers(episodes):
    frame_bytes = 48 * 64 * 3
    ds = windows(episodes / "a.zarr", frame_cache_mb=5 * frame_bytes / 2**20)
    for i in range(len(ds)):
        ds[i]
    assert 0 < ds._cache.bytes <= 5 * frame_bytes
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._readers == {} and clone._cache.bytes == 0
    np.testing.assert_array_equal(clone[4].images["front_1"], ds[4].images["front_1"])
    no_cache = windows(episodes / "a.zarr", frame_cache_mb=0)
    no_cache[3]
    assert no_cache._cache.bytes == 0


def test_episode_without_a_camera_is_refused_by_name(tmp_path):
    write_episode(tmp_path / "two_cams.zarr", 3, cameras=("front_1", "left_wrist"))
    with pytest.raises(TrainingDataError, match=r"two_cams.zarr: no camera 'right_wrist'"):
        windows(tmp_path / "two_cams.zarr")


def test_partial_episodes_are_skipped_unless_asked_for(tmp_path):
    write_episode(tmp_path / "ok.zarr", 4)
    write_episode(tmp_path / "cut.zarr", 3, status="partial")
    ds = windows(tmp_path)
    assert [e.path.name for e in ds.episodes] == ["ok.zarr"]
    assert [(s.path.name, "partial" in s.reason) for s in ds.skipped] == [("cut.zarr", True)]
    assert len(windows(tmp_path, include_partial=True)) == 7
    with pytest.raises(TrainingDataError, match="no usable episodes.*cut.zarr"):
        windows(tmp_path / "cut.zarr")


def test_nothing_to_train_on_is_refused(tmp_path):
    with pytest.raises(TrainingDataError, match="no such file"):
        windows(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingDataError, match="no episodes here"):
        windows(tmp_path / "empty")


def test_non_rotation_command_is_refused_before_training(tmp_path):
    import zarr

    path = write_episode(tmp_path / "bad.zarr", 4)
    arr = zarr.open_array(str(path / "left.cmd_ee_pose"), mode="r+")
    arr[2] = np.array([0.3, 0.1, 0.2, 2.0, 0.0, 0.0, 0.0], np.float32)  # |q| = 2
    with pytest.raises(TrainingDataError, match="bad.zarr: a pose is not usable"):
        windows(path)


def test_upstream_layout_episode_trains_to_its_true_length(tmp_path):
    """Upstream's writer zero-pads every array to a multiple of 100: the windows stop at
    total_frames and the chunk's padding repeats the last real command, never a zero row."""
    from tests.unit.egomimic_data.upstream_reference import write_like_upstream

    n = 7
    numeric = {}
    for arm in ARMS:
        numeric[f"{arm.value}.obs_ee_pose"] = np.stack([measured_pose(arm, t) for t in range(n)]).astype(np.float32)
        numeric[f"{arm.value}.cmd_ee_pose"] = np.stack([measured_pose(arm, t + 1) for t in range(n)]).astype(np.float32)
        numeric[f"{arm.value}.obs_gripper"] = np.array([[gripper(t)] for t in range(n)], np.float32)
        numeric[f"{arm.value}.cmd_gripper"] = np.array([[gripper(t + 1)] for t in range(n)], np.float32)
    images = {f"images.{c}": np.full((n, 48, 64, 3), 100, np.uint8) for c in CAMERAS}
    path = write_like_upstream(tmp_path / "up.zarr", numeric, images)
    ds = windows(path, chunk=5)
    assert len(ds) == n
    w = ds[n - 2]
    np.testing.assert_array_equal(w.action_mask, [1, 1, 0, 0, 0])
    decoded = decode_action_chunk({arm: measured_pose(arm, n - 2) for arm in ARMS}, w.actions)
    assert same_pose(decoded[Arm.LEFT][0][4], measured_pose(Arm.LEFT, n), atol=1e-5)


def textured_image(t: int, camera: str, height: int, width: int) -> np.ndarray:
    """Detail (a gradient and moving stripes), so a resize is not trivially exact."""
    yy, xx = np.mgrid[0:height, 0:width]
    c = CAMERAS.index(camera)
    img = np.stack([(xx * 2 + 40 * c) % 256, (yy * 2 + 9 * t) % 256, (xx + yy) % 256], axis=-1)
    img[(yy // 8 - t) % 12 == 0] = 255
    return img.astype(np.uint8)


def write_textured_episode(path, frames: int, height: int = 96, width: int = 128):
    """An episode of textured frames at a size other than the model's."""
    return write_episode(path, frames, height=height, width=width, image=textured_image)


@pytest.fixture(scope="module")
def textured(tmp_path_factory):
    root = tmp_path_factory.mktemp("textured")
    write_textured_episode(root / "t.zarr", 5)
    write_textured_episode(root / "u.zarr", 3)
    return root


def test_prepared_frames_are_the_family_resize_and_train_as_full_frames(textured):
    """A prepared frame is resize_area of the decoded frame to the model size, and the model
    input built from prepared frames equals the one built from the full frames (what rollout
    feeds), bit for bit: the family's resize of a frame already at its size is a no-op."""
    from egomimic_data.episode_format import EpisodeReader
    from egomimic_policy.families.base import resize_area

    algo = build_algorithm("fold", overrides={"chunk_length": 4, "image_height": 24, "image_width": 32})
    assert algo.input_frame_size() == (24, 32)
    full = windows(textured)
    prepared = windows(textured, image_size=algo.input_frame_size())
    reader = EpisodeReader(textured / "t.zarr")
    for cam in CAMERAS:
        small = prepared.frame(0, cam, 2)
        assert small.shape == (24, 32, 3) and small.dtype == np.uint8
        np.testing.assert_array_equal(small, resize_area(reader.image(cam, 2), 24, 32))
        assert resize_area(small, 24, 32) is small
        np.testing.assert_array_equal(algo.image_input(small), algo.image_input(reader.image(cam, 2)))
    items = [0, 3, 6]
    raw_full = collate_windows([full[i] for i in items])
    raw_prep = collate_windows([prepared[i] for i in items])
    assert raw_full.images["front_1"].shape[2:] == (96, 128, 3)
    assert raw_prep.images["front_1"].shape[2:] == (24, 32, 3)
    norm = neutral_norm_stats()
    a = algo.batch_from_raw(raw_full.images, raw_full.state, raw_full.actions, norm, raw_full.action_mask)
    b = algo.batch_from_raw(raw_prep.images, raw_prep.state, raw_prep.actions, norm, raw_prep.action_mask)
    assert torch.equal(a.images, b.images) and torch.equal(a.actions, b.actions) and torch.equal(a.state, b.state)


def test_prepared_frames_are_decoded_once_and_preload_gives_the_same(textured, monkeypatch):
    from egomimic_data.episode_format import EpisodeReader

    decoded = []
    original = EpisodeReader.image

    def counting(self, cam, t):
        decoded.append((self.path.name, cam, t))
        return original(self, cam, t)

    monkeypatch.setattr(EpisodeReader, "image", counting)
    lazy = windows(textured, image_size=(24, 32))
    for _ in range(2):
        for i in range(len(lazy)):
            lazy[i]
    assert len(decoded) == len(set(decoded)) == 8 * len(CAMERAS)  # every frame once, however often read
    assert lazy.prepared_bytes == 8 * len(CAMERAS) * 24 * 32 * 3
    monkeypatch.setattr(EpisodeReader, "image", original)  # pool processes decode with the real one
    for workers in (1, 2):
        eager = windows(textured, image_size=(24, 32))
        eager.preload(workers)
        decoded.clear()
        monkeypatch.setattr(EpisodeReader, "image", counting)
        for i in range(len(eager)):
            for cam in CAMERAS:
                np.testing.assert_array_equal(eager[i].images[cam], lazy[i].images[cam])
        assert decoded == []  # preloaded: nothing left to decode
        monkeypatch.setattr(EpisodeReader, "image", original)
    clone = pickle.loads(pickle.dumps(eager))  # a loader worker gets the prepared frames along
    np.testing.assert_array_equal(clone[5].images["left_wrist"], eager[5].images["left_wrist"])


def test_preload_needs_prepared_frames_and_image_size_is_checked(textured):
    with pytest.raises(ConfigError, match="preload needs image_size"):
        windows(textured).preload(2)
    with pytest.raises(ConfigError, match="image_size"):
        windows(textured, image_size=(1, 32))


def test_families_without_a_plain_resize_keep_full_frames():
    pi = build_algorithm("pi", overrides={"chunk_length": 4, "d_model": 32, "n_heads": 2, "image_size": 32})
    assert pi.input_frame_size() is None
