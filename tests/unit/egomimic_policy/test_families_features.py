"""The shared EVA encodings: state layout, wrist-relative action round trip, gripper columns,
and the default cache directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.errors import PoseError
from egomimic_hw.frames import same_pose
from egomimic_hw.rotations import quat_to_mat
from egomimic_policy.checkpoints import default_cache_dir
from egomimic_policy.features import (
    ACTION_DIM,
    arm_columns,
    decode_action_chunk,
    encode_action_chunk,
    gripper_column,
    state_ee_pose,
)
from tests.unit.egomimic_policy.conftest import pose_from


def test_state_layout_is_xyz_rot6d_gripper_left_then_right():
    left, right = pose_from((0.1, 0.2, 0.3), (0.5, -0.2, 0.1)), pose_from((0.4, -0.5, 0.6), (-1.0, 0.3, 2.0))
    s = state_ee_pose(left, 0.25, right, 0.75)
    assert s.shape == (20,) and (gripper_column(Arm.LEFT), gripper_column(Arm.RIGHT)) == (9, 19)
    for arm, pose, g in ((Arm.LEFT, left, 0.25), (Arm.RIGHT, right, 0.75)):
        cols = s[arm_columns(arm)]
        rot = quat_to_mat(pose[3:])
        np.testing.assert_allclose(cols[:3], pose[:3])
        np.testing.assert_allclose(cols[3:9], np.concatenate([rot[:, 0], rot[:, 1]]), atol=1e-12)  # COLUMNS
        assert cols[9] == g
    with pytest.raises(PoseError):
        state_ee_pose(left, float("nan"), right, 0.5)


def test_action_chunk_round_trip_and_anchor():
    rng = np.random.default_rng(0)
    current = {
        Arm.LEFT: pose_from((0.3, 0.1, 0.2), (0.3, 0.2, -0.1)),
        Arm.RIGHT: pose_from((0.3, -0.1, 0.2), (2.5, -0.4, 1.0)),
    }
    targets = {
        a: np.stack([pose_from(current[a][:3] + rng.normal(0, 0.02, 3), rng.normal(0, 1, 3)) for _ in range(7)])
        for a in ARMS
    }
    grippers = {a: rng.uniform(0, 1, 7) for a in ARMS}
    actions = encode_action_chunk(current, targets, grippers)
    assert actions.shape == (7, ACTION_DIM)
    np.testing.assert_allclose(actions[:, 9], grippers[Arm.LEFT])
    np.testing.assert_allclose(actions[:, 19], grippers[Arm.RIGHT])
    decoded = decode_action_chunk(current, actions)
    for arm in ARMS:
        assert all(same_pose(p, t, atol=1e-9) for p, t in zip(decoded[arm][0], targets[arm]))
        np.testing.assert_allclose(decoded[arm][1], grippers[arm])
    # The same rows anchored elsewhere land elsewhere: the anchor is an input, never implicit.
    moved = {a: pose_from(current[a][:3] + 0.05, (0.0, 0.0, 0.0)) for a in ARMS}
    assert not same_pose(decode_action_chunk(moved, actions)[Arm.LEFT][0][0], targets[Arm.LEFT][0], atol=1e-3)
    with pytest.raises(PoseError, match=r"\(H, 20\)"):
        decode_action_chunk(current, actions[:, :19])


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("EGOMIMIC_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("EGOMIMIC_CACHE_DIR")
    assert default_cache_dir() == Path("~/.cache/egomimic/checkpoints").expanduser()
