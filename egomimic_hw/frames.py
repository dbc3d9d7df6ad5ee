"""Hardware <-> dataset frame conversion of EVA poses (the bug that stopped the first rollout).

The ARX SDK reports and accepts end-effector poses in each arm's base link ("hardware frame",
frame_id `<arm>_base`). Episodes and models use the same origin with a different orientation
convention ("dataset frame", frame_id `<arm>_base_dataset`):

    R_ds = M @ R_hw,   M = EVA_DATASET_FROM_HARDWARE_ROTATION,   translation unchanged,

and back with M.T. Live control applies M to every observed pose going into a model and M.T to
every commanded orientation coming out. Forgetting one side gives smooth, plausible motion to
the wrong place, so both directions live here and nowhere else.

Poses are `[x, y, z, qw, qx, qy, qz]` (see rotations.py for conventions), batched over any
leading dimensions.
"""

from __future__ import annotations

import numpy as np

from egomimic_hw.errors import PoseError
from egomimic_hw.rotations import (
    as_array_of_shape,
    canonical_quat,
    mat_to_quat,
    mat_to_rot6d,
    quat_to_mat,
    rot6d_to_mat,
)

EVA_DATASET_FROM_HARDWARE_ROTATION = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
"""M in R_ds = M @ R_hw (docs/eva.md); orientation only."""

DS_FROM_HW = EVA_DATASET_FROM_HARDWARE_ROTATION
HW_FROM_DS = EVA_DATASET_FROM_HARDWARE_ROTATION.T


def rot_ds_from_hw(rot_hw) -> np.ndarray:
    """Dataset-frame rotation matrix of a hardware-frame one."""
    return DS_FROM_HW @ np.asarray(rot_hw, dtype=float)


def rot_hw_from_ds(rot_ds) -> np.ndarray:
    """Hardware-frame rotation matrix of a dataset-frame one."""
    return HW_FROM_DS @ np.asarray(rot_ds, dtype=float)


def _convert_pose(pose, rot: np.ndarray, what: str) -> np.ndarray:
    p = as_array_of_shape(pose, (7,), what)
    out = np.empty_like(p)
    out[..., :3] = p[..., :3]
    out[..., 3:] = mat_to_quat(rot @ quat_to_mat(p[..., 3:], strict=True))
    return out


def pose_ds_from_hw(pose_hw) -> np.ndarray:
    """`[x, y, z, qw, qx, qy, qz]` hardware -> dataset (canonical quaternion out)."""
    return _convert_pose(pose_hw, DS_FROM_HW, "hardware pose")


def pose_hw_from_ds(pose_ds) -> np.ndarray:
    """`[x, y, z, qw, qx, qy, qz]` dataset -> hardware (canonical quaternion out)."""
    return _convert_pose(pose_ds, HW_FROM_DS, "dataset pose")


def pose_to_matrix(pose) -> np.ndarray:
    """4x4 homogeneous transform of a `[x, y, z, qw, qx, qy, qz]` pose."""
    p = as_array_of_shape(pose, (7,), "pose")
    t = np.zeros(p.shape[:-1] + (4, 4))
    t[..., :3, :3] = quat_to_mat(p[..., 3:], strict=True)
    t[..., :3, 3] = p[..., :3]
    t[..., 3, 3] = 1.0
    return t


def matrix_to_pose(transform) -> np.ndarray:
    """`[x, y, z, qw, qx, qy, qz]` of a 4x4 transform (canonical quaternion)."""
    t = as_array_of_shape(transform, (4, 4), "transform")
    out = np.empty(t.shape[:-2] + (7,))
    out[..., :3] = t[..., :3, 3]
    out[..., 3:] = mat_to_quat(t[..., :3, :3])
    return out


WRIST_RELATIVE_WIDTH = 9
"""`[x, y, z, r00, r10, r20, r01, r11, r21]`: translation and 6D rotation in the query-tick wrist frame."""


def wrist_relative_encode(current, targets) -> np.ndarray:
    """Targets as seen from the wrist at the query tick (Fold's action encoding, docs/eva.md).

    With the pose captured at the query tick (p_c, R_c) and each target (p_t, R_t):
    xyz_rel = R_c^T (p_t - p_c), R_rel = R_c^T R_t, stored as `[xyz_rel, rot6d(R_rel)]`.
    `current` is one pose (7,); `targets` is (..., 7). Both in the same frame (the dataset frame
    for models). Returns (..., 9).
    """
    c = as_array_of_shape(current, (7,), "current pose")
    if c.ndim != 1:
        raise PoseError(f"current pose: expected one pose of shape (7,), got {c.shape}")
    t = as_array_of_shape(targets, (7,), "target poses")
    rot_c = quat_to_mat(c[3:], strict=True)
    rot_t = quat_to_mat(t[..., 3:], strict=True)
    out = np.empty(t.shape[:-1] + (WRIST_RELATIVE_WIDTH,))
    out[..., :3] = (t[..., :3] - c[:3]) @ rot_c  # row-vector form of R_c^T (p_t - p_c)
    out[..., 3:] = mat_to_rot6d(rot_c.T @ rot_t)
    return out


def wrist_relative_decode(current, encoded) -> np.ndarray:
    """Absolute poses (..., 7) of wrist-relative rows (..., 9): T_cmd = T_c . T_rel.

    Every row of a chunk decodes against the pose captured at the query tick, never the live
    pose (the live pose has moved since; decoding against it shifts the whole plan).
    """
    c = as_array_of_shape(current, (7,), "current pose")
    if c.ndim != 1:
        raise PoseError(f"current pose: expected one pose of shape (7,), got {c.shape}")
    e = as_array_of_shape(encoded, (WRIST_RELATIVE_WIDTH,), "wrist-relative rows")
    rot_c = quat_to_mat(c[3:], strict=True)
    out = np.empty(e.shape[:-1] + (7,))
    out[..., :3] = c[:3] + e[..., :3] @ rot_c.T  # p_c + R_c xyz_rel
    out[..., 3:] = mat_to_quat(rot_c @ rot6d_to_mat(e[..., 3:]))
    return out


def same_pose(a, b, *, atol: float = 1e-9) -> bool:
    """True when two poses agree, treating q and -q as the same rotation."""
    pa, pb = as_array_of_shape(a, (7,), "pose"), as_array_of_shape(b, (7,), "pose")
    if pa.shape != pb.shape:
        raise PoseError(f"pose shapes differ: {pa.shape} vs {pb.shape}")
    return bool(
        np.allclose(pa[..., :3], pb[..., :3], atol=atol)
        and np.allclose(canonical_quat(pa[..., 3:]), canonical_quat(pb[..., 3:]), atol=atol)
    )
