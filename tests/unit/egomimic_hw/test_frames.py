"""Frames and rotations: round trips, scipy as an independent oracle, and the naive bug."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from egomimic_hw.errors import PoseError
from egomimic_hw.frames import (
    EVA_DATASET_FROM_HARDWARE_ROTATION,
    pose_ds_from_hw,
    pose_hw_from_ds,
    same_pose,
)
from egomimic_hw.rotations import (
    canonical_quat,
    geodesic_angle,
    mat_to_quat,
    mat_to_rot6d,
    mat_to_ypr,
    quat_to_mat,
    rot6d_to_mat,
    ypr_to_mat,
    ypr_to_quat,
)


def random_poses(n, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.concatenate([rng.uniform(-0.6, 0.6, size=(n, 3)), q], axis=1)


def to_scipy_xyzw(quat_wxyz):
    return np.concatenate([quat_wxyz[..., 1:], quat_wxyz[..., :1]], axis=-1)


def test_m_is_a_proper_rotation():
    m = EVA_DATASET_FROM_HARDWARE_ROTATION
    assert np.allclose(m @ m.T, np.eye(3))
    assert np.isclose(np.linalg.det(m), 1.0)


def test_round_trip_10k_two_arm_poses_within_1e9():
    poses = random_poses(10_000).reshape(5_000, 2, 7)  # two arms per sample
    back = pose_hw_from_ds(pose_ds_from_hw(poses))
    assert np.max(np.abs(back[..., :3] - poses[..., :3])) <= 1e-9
    assert np.max(np.abs(canonical_quat(back[..., 3:]) - canonical_quat(poses[..., 3:]))) <= 1e-9


def test_agrees_with_scipy_within_1e12():
    poses = random_poses(2_000, seed=1)
    ours = quat_to_mat(poses[:, 3:])
    ref = Rotation.from_quat(to_scipy_xyzw(poses[:, 3:])).as_matrix()
    assert np.max(np.abs(ours - ref)) <= 1e-12
    ds = pose_ds_from_hw(poses)
    ref_ds = Rotation.from_matrix(EVA_DATASET_FROM_HARDWARE_ROTATION) * Rotation.from_quat(to_scipy_xyzw(poses[:, 3:]))
    assert np.max(np.abs(quat_to_mat(ds[:, 3:]) - ref_ds.as_matrix())) <= 1e-12


def test_ypr_is_intrinsic_zyx_like_scipy():
    rng = np.random.default_rng(2)
    ypr = rng.uniform([-np.pi, -1.5, -np.pi], [np.pi, 1.5, np.pi], size=(500, 3))
    ref = Rotation.from_euler("ZYX", ypr).as_matrix()
    assert np.max(np.abs(ypr_to_mat(ypr) - ref)) <= 1e-12
    assert np.max(np.abs(ypr_to_mat(mat_to_ypr(ref)) - ref)) <= 1e-9


def test_rot6d_round_trip_and_first_two_columns():
    mats = quat_to_mat(random_poses(500, seed=3)[:, 3:])
    r6 = mat_to_rot6d(mats)
    assert np.allclose(r6[:, :3], mats[:, :, 0]) and np.allclose(r6[:, 3:], mats[:, :, 1])
    assert np.max(np.abs(rot6d_to_mat(r6) - mats)) <= 1e-12


def test_naive_conversion_without_m_differs():
    poses = random_poses(100, seed=4)
    ds = pose_ds_from_hw(poses)
    angles = geodesic_angle(quat_to_mat(poses[:, 3:]), quat_to_mat(ds[:, 3:]))
    assert np.all(angles > 0.5), "forgetting M must be a large, visible error"


def test_q_and_minus_q_are_one_rotation():
    p = random_poses(1, seed=5)[0]
    flipped = p.copy()
    flipped[3:] *= -1
    assert same_pose(p, flipped)
    assert np.allclose(pose_ds_from_hw(p), pose_ds_from_hw(flipped))


@pytest.mark.parametrize(
    "bad",
    [
        [0, 0, 0, np.nan, 0, 0, 0],
        [0, 0, np.inf, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0],  # zero quaternion
        [0, 0, 0, 2.0, 0, 0, 0],  # non-unit quaternion
        [0, 0, 0, 1, 0, 0],  # wrong shape
    ],
)
def test_malformed_pose_raises(bad):
    with pytest.raises(PoseError):
        pose_ds_from_hw(np.asarray(bad, dtype=float))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=4, max_size=4).filter(lambda v: np.linalg.norm(v) > 1e-3))
def test_mat_quat_round_trip_property(v):
    q = canonical_quat(np.asarray(v))
    assert np.allclose(mat_to_quat(quat_to_mat(q)), q, atol=1e-9)


unit_quats = (
    st.lists(st.floats(-1, 1, allow_nan=False), min_size=4, max_size=4)
    .filter(lambda v: np.linalg.norm(v) > 1e-2)
    .map(lambda v: np.asarray(v) / np.linalg.norm(v))
)
positions = st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3).map(np.asarray)
poses = st.tuples(positions, unit_quats).map(lambda pq: np.concatenate(pq))


@settings(max_examples=500, deadline=None)
@given(poses, poses)
def test_two_arm_round_trip_property(left, right):
    both = np.stack([left, right])
    back = pose_hw_from_ds(pose_ds_from_hw(both))
    assert same_pose(back, both, atol=1e-9)
    fwd = pose_hw_from_ds(pose_ds_from_hw(both[::-1]))  # arms are independent: order does not matter
    assert same_pose(fwd[::-1], both, atol=1e-9)


@settings(max_examples=500, deadline=None)
@given(poses)
def test_dataset_rotation_matches_scipy_property(pose):
    ds = pose_ds_from_hw(pose)
    ref = Rotation.from_matrix(EVA_DATASET_FROM_HARDWARE_ROTATION) * Rotation.from_quat(to_scipy_xyzw(pose[3:]))
    assert np.max(np.abs(quat_to_mat(ds[3:]) - ref.as_matrix())) <= 1e-12
    assert np.array_equal(ds[:3], pose[:3]), "translation must be unchanged"


def test_two_real_arm_poses_round_trip():
    """Non-trivial poses of the two arms (both rotated away from identity about all axes)."""
    left = np.concatenate([[0.25, 0.1, 0.2], Rotation.from_euler("ZYX", [0.3, -0.4, 1.1]).as_quat(scalar_first=True)])
    right = np.concatenate(
        [[0.3, -0.12, 0.18], Rotation.from_euler("ZYX", [-0.7, 0.5, -2.0]).as_quat(scalar_first=True)]
    )
    both = np.stack([left, right])
    ds = pose_ds_from_hw(both)
    assert not same_pose(ds, both, atol=1e-3)
    assert same_pose(pose_hw_from_ds(ds), both, atol=1e-9)


def test_single_euler_fast_path_equals_batched_path():
    rng = np.random.default_rng(11)
    ypr = np.concatenate(
        [
            rng.uniform(-np.pi, np.pi, size=(5_000, 3)),
            [[0.0, np.pi / 2, 0.0], [0.0, -np.pi / 2, 0.3], [np.pi, 0.0, -np.pi], [0.0, 0.0, 0.0]],
        ]
    )
    batched = ypr_to_mat(ypr)
    single = np.stack([ypr_to_mat(a) for a in ypr])
    assert np.max(np.abs(batched - single)) <= 1e-15
    assert np.allclose(single, Rotation.from_euler("ZYX", ypr).as_matrix(), atol=1e-12)
    quats = np.stack([ypr_to_quat(a) for a in ypr])
    assert np.max(np.abs(quats - mat_to_quat(batched))) <= 1e-15
    assert np.max(np.abs(ypr_to_quat(ypr) - quats)) <= 1e-15


def test_single_matrix_fast_path_equals_batched_path():
    mats = Rotation.random(5_000, random_state=7).as_matrix()
    half_turns = np.stack(
        [
            Rotation.from_rotvec(axis * np.pi).as_matrix()
            for axis in (*np.eye(3), np.array([1.0, 1.0, 0.0]) / np.sqrt(2))
        ]
    )
    mats = np.concatenate([mats, half_turns, np.eye(3)[None]])
    batched = mat_to_quat(mats)
    single = np.stack([mat_to_quat(m) for m in mats])
    assert np.max(np.abs(batched - single)) <= 1e-15
