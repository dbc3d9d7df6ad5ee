"""Wrist-relative action encoding (Fold): definition, round trip, and decode-at-query-tick."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from egomimic_hw.errors import PoseError
from egomimic_hw.frames import pose_to_matrix, same_pose, wrist_relative_decode, wrist_relative_encode


def random_poses(n, seed):
    rng = np.random.default_rng(seed)
    quats = Rotation.random(n, random_state=seed).as_quat(scalar_first=True)
    return np.concatenate([rng.uniform(-0.6, 0.6, size=(n, 3)), quats], axis=1)


def test_encoding_is_the_relative_transform():
    current, targets = random_poses(1, 0)[0], random_poses(100, 1)
    enc = wrist_relative_encode(current, targets)
    rel = np.linalg.inv(pose_to_matrix(current)) @ pose_to_matrix(targets)  # independent: 4x4 inverse
    assert np.max(np.abs(enc[:, :3] - rel[:, :3, 3])) <= 1e-12
    assert np.max(np.abs(enc[:, 3:6] - rel[:, :3, 0])) <= 1e-12 and np.max(np.abs(enc[:, 6:] - rel[:, :3, 1])) <= 1e-12


def test_identity_when_target_is_current():
    current = random_poses(1, 2)[0]
    enc = wrist_relative_encode(current, current[None])
    assert np.allclose(enc[0], [0, 0, 0, 1, 0, 0, 0, 1, 0], atol=1e-12)


def test_decode_against_query_pose_not_live_pose():
    query, live = random_poses(2, 3)
    targets = random_poses(10, 4)
    enc = wrist_relative_encode(query, targets)
    assert same_pose(wrist_relative_decode(query, enc), targets, atol=1e-9)
    assert not same_pose(wrist_relative_decode(live, enc), targets, atol=1e-3)


@pytest.mark.parametrize("bad_current", [np.zeros(7), np.full(7, np.nan), np.ones(6), np.ones((2, 7))])
def test_bad_current_pose_raises(bad_current):
    with pytest.raises(PoseError):
        wrist_relative_encode(bad_current, random_poses(2, 5))


def test_degenerate_rot6d_raises():
    enc = np.zeros((1, 9))
    with pytest.raises(PoseError):
        wrist_relative_decode(random_poses(1, 6)[0], enc)


unit_quats = (
    st.lists(st.floats(-1, 1, allow_nan=False), min_size=4, max_size=4)
    .filter(lambda v: np.linalg.norm(v) > 1e-2)
    .map(lambda v: np.asarray(v) / np.linalg.norm(v))
)
poses = st.tuples(st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3), unit_quats).map(
    lambda pq: np.concatenate([np.asarray(pq[0]), pq[1]])
)


@settings(max_examples=500, deadline=None)
@given(poses, poses)
def test_round_trip_property(current, target):
    back = wrist_relative_decode(current, wrist_relative_encode(current, target[None]))[0]
    assert same_pose(back, target, atol=1e-9)
