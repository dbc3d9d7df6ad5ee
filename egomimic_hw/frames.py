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
from egomimic_hw.rotations import _as_array, canonical_quat, mat_to_quat, quat_to_mat

EVA_DATASET_FROM_HARDWARE_ROTATION = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
"""M in R_ds = M @ R_hw (EVA.md); orientation only."""

DS_FROM_HW = EVA_DATASET_FROM_HARDWARE_ROTATION
HW_FROM_DS = EVA_DATASET_FROM_HARDWARE_ROTATION.T


def rot_ds_from_hw(rot_hw) -> np.ndarray:
    """Dataset-frame rotation matrix of a hardware-frame one."""
    return DS_FROM_HW @ np.asarray(rot_hw, dtype=float)


def rot_hw_from_ds(rot_ds) -> np.ndarray:
    """Hardware-frame rotation matrix of a dataset-frame one."""
    return HW_FROM_DS @ np.asarray(rot_ds, dtype=float)


def _convert_pose(pose, rot: np.ndarray, what: str) -> np.ndarray:
    p = _as_array(pose, (7,), what)
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
    p = _as_array(pose, (7,), "pose")
    t = np.zeros(p.shape[:-1] + (4, 4))
    t[..., :3, :3] = quat_to_mat(p[..., 3:], strict=True)
    t[..., :3, 3] = p[..., :3]
    t[..., 3, 3] = 1.0
    return t


def matrix_to_pose(transform) -> np.ndarray:
    """`[x, y, z, qw, qx, qy, qz]` of a 4x4 transform (canonical quaternion)."""
    t = _as_array(transform, (4, 4), "transform")
    out = np.empty(t.shape[:-2] + (7,))
    out[..., :3] = t[..., :3, 3]
    out[..., 3:] = mat_to_quat(t[..., :3, :3])
    return out


def same_pose(a, b, *, atol: float = 1e-9) -> bool:
    """True when two poses agree, treating q and -q as the same rotation."""
    pa, pb = _as_array(a, (7,), "pose"), _as_array(b, (7,), "pose")
    if pa.shape != pb.shape:
        raise PoseError(f"pose shapes differ: {pa.shape} vs {pb.shape}")
    return bool(
        np.allclose(pa[..., :3], pb[..., :3], atol=atol)
        and np.allclose(canonical_quat(pa[..., 3:]), canonical_quat(pb[..., 3:]), atol=atol)
    )
