"""Rotation math in one convention, vectorized over leading batch dimensions.

Conventions (EVA.md), fixed here once:
- quaternions are `[qw, qx, qy, qz]` (wxyz), unit norm; q and -q are the same rotation and
  `canonical_quat` picks qw >= 0 where a unique form is needed;
- matrices act on column vectors, `A_R_B` maps B into A;
- Euler angles are `[yaw, pitch, roll]`, intrinsic "ZYX": R = Rz(yaw) Ry(pitch) Rx(roll),
  which is also the ARX SDK's pose_6d `[x, y, z, roll, pitch, yaw]` order reversed;
- 6D rotation = the first two COLUMNS of R, concatenated `[r00, r10, r20, r01, r11, r21]`;
  back by Gram-Schmidt.
Glossary of names: `quat` wxyz, `mat` 3x3, `rot6d` 6-vector, `ypr` [yaw, pitch, roll].

Malformed input (wrong trailing shape, non-finite, zero quaternion) raises PoseError: a NaN
that flows silently into a command is how an arm goes somewhere nobody asked for.
"""

from __future__ import annotations

import math

import numpy as np

from egomimic_hw.errors import PoseError

QUAT_NORM_TOLERANCE = 1e-3
"""`quat_to_mat(strict=True)` refuses quaternions whose norm is further than this from 1."""


def _as_array(x, trailing: tuple[int, ...], what: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.shape[arr.ndim - len(trailing):] != trailing or arr.ndim < len(trailing):
        raise PoseError(f"{what}: expected shape (..., {', '.join(map(str, trailing))}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise PoseError(f"{what}: non-finite value in {arr.tolist() if arr.size <= 16 else 'array'}")
    return arr


CANONICAL_ZERO = 1e-12
"""Components smaller than this count as zero when choosing the canonical sign."""


def canonical_quat(quat) -> np.ndarray:
    """Unit quaternion with qw > 0 (the same rotation as the input). At qw = 0 (a half turn)
    the sign goes by the first non-zero of x, y, z, so q and -q always map to one form."""
    q = _as_array(quat, (4,), "quaternion")
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    if np.any(norm < 1e-12):
        raise PoseError("quaternion: zero norm is not a rotation")
    q = q / norm
    significant = np.abs(q) > CANONICAL_ZERO
    first = np.argmax(significant, axis=-1)[..., None]
    lead = np.take_along_axis(q, first, axis=-1)
    # Tiny components only decide the sign; their values are kept (zeroing them would move the
    # rotation by up to CANONICAL_ZERO). `+ 0.0` turns -0.0 into 0.0.
    return np.where(lead < 0.0, -q, q) + 0.0


def quat_to_mat(quat, *, strict: bool = False) -> np.ndarray:
    """Rotation matrix of a quaternion (wxyz). strict: refuse a norm off 1 by > tolerance."""
    q = _as_array(quat, (4,), "quaternion")
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    if np.any(norm < 1e-12):
        raise PoseError("quaternion: zero norm is not a rotation")
    if strict and np.any(np.abs(norm - 1.0) > QUAT_NORM_TOLERANCE):
        raise PoseError(f"quaternion: norm {norm.ravel().tolist()} is not 1 (tolerance {QUAT_NORM_TOLERANCE})")
    w, x, y, z = np.moveaxis(q / norm, -1, 0)
    mat = np.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        axis=-1,
    )
    return mat.reshape(q.shape[:-1] + (3, 3))


def mat_to_quat(mat) -> np.ndarray:
    """Canonical (qw >= 0) quaternion of a rotation matrix; numerically stable branch choice.

    Shepperd's method, vectorized: per matrix, divide by the largest of the four candidates
    (4w^2, 4x^2, 4y^2, 4z^2 from the trace and diagonal) so no division is by a tiny number.
    """
    m = _as_array(mat, (3, 3), "rotation matrix")
    if m.ndim == 2:
        return _mat_to_quat_one(m)
    r = m.reshape(-1, 3, 3)
    d0, d1, d2 = r[:, 0, 0], r[:, 1, 1], r[:, 2, 2]
    cand = np.stack([1.0 + d0 + d1 + d2, 1.0 + d0 - d1 - d2, 1.0 - d0 + d1 - d2, 1.0 - d0 - d1 + d2], axis=1)
    choice = np.argmax(cand, axis=1)
    s = 2.0 * np.sqrt(np.maximum(np.take_along_axis(cand, choice[:, None], axis=1)[:, 0], 1e-300))
    zy, yz = r[:, 2, 1], r[:, 1, 2]
    xz, zx = r[:, 0, 2], r[:, 2, 0]
    yx, xy = r[:, 1, 0], r[:, 0, 1]
    # Row k: the quaternion when candidate k is the largest (each divided by its own s).
    branches = np.stack(
        [
            np.stack([0.25 * s, (zy - yz) / s, (xz - zx) / s, (yx - xy) / s], axis=1),
            np.stack([(zy - yz) / s, 0.25 * s, (xy + yx) / s, (xz + zx) / s], axis=1),
            np.stack([(xz - zx) / s, (xy + yx) / s, 0.25 * s, (yz + zy) / s], axis=1),
            np.stack([(yx - xy) / s, (xz + zx) / s, (yz + zy) / s, 0.25 * s], axis=1),
        ],
        axis=1,
    )
    out = branches[np.arange(r.shape[0]), choice]
    return canonical_quat(out.reshape(m.shape[:-2] + (4,)))


def _mat_to_quat_one(m: np.ndarray) -> np.ndarray:
    """The same Shepperd branch choice and canonical sign for ONE matrix, in plain floats.

    Why a second path: the driver's FK and the gate's IK convert one pose per call at 100 Hz
    per arm; numpy's per-call overhead made that 55 us against ~2 us here
    (bench/kinematics_frames.py). A test holds both paths equal.
    """
    return np.array(_quat_of_rows(m.tolist())) + 0.0


def _quat_of_rows(rows) -> list[float]:
    (r00, r01, r02), (r10, r11, r12), (r20, r21, r22) = rows
    cand = (1.0 + r00 + r11 + r22, 1.0 + r00 - r11 - r22, 1.0 - r00 + r11 - r22, 1.0 - r00 - r11 + r22)
    c = max(range(4), key=cand.__getitem__)
    s = 2.0 * math.sqrt(max(cand[c], 1e-300))
    if c == 0:
        q = [0.25 * s, (r21 - r12) / s, (r02 - r20) / s, (r10 - r01) / s]
    elif c == 1:
        q = [(r21 - r12) / s, 0.25 * s, (r01 + r10) / s, (r02 + r20) / s]
    elif c == 2:
        q = [(r02 - r20) / s, (r01 + r10) / s, 0.25 * s, (r12 + r21) / s]
    else:
        q = [(r10 - r01) / s, (r02 + r20) / s, (r12 + r21) / s, 0.25 * s]
    norm = math.sqrt(sum(v * v for v in q))
    q = [v / norm for v in q]
    lead = next((v for v in q if abs(v) > CANONICAL_ZERO), 1.0)
    sign = -1.0 if lead < 0.0 else 1.0
    return [sign * v for v in q]


def ypr_to_mat(ypr) -> np.ndarray:
    """R = Rz(yaw) Ry(pitch) Rx(roll) from `[yaw, pitch, roll]` (intrinsic ZYX)."""
    a = _as_array(ypr, (3,), "euler [yaw, pitch, roll]")
    if a.ndim == 1:
        return np.array(_ypr_rows(*a.tolist()))
    yaw, pitch, roll = np.moveaxis(a, -1, 0)
    cy, sy, cp, sp, cr, sr = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
    mat = np.stack(
        [
            cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr,
            sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr,
            -sp, cp * sr, cp * cr,
        ],
        axis=-1,
    )
    return mat.reshape(a.shape[:-1] + (3, 3))


def _ypr_rows(yaw: float, pitch: float, roll: float) -> list[list[float]]:
    """The rows of ypr_to_mat for ONE angle triple, in plain floats: the driver's FK (50 Hz)
    and the gate's converts one SDK pose per call, where numpy's per-call overhead is most of
    the cost (bench/kinematics_frames.py). A test holds both paths equal."""
    cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
    cr, sr = math.cos(roll), math.sin(roll)
    return [
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ]


def ypr_to_quat(ypr) -> np.ndarray:
    """Canonical quaternion of `[yaw, pitch, roll]`: mat_to_quat(ypr_to_mat(ypr)), with the
    single-triple case in plain floats."""
    a = _as_array(ypr, (3,), "euler [yaw, pitch, roll]")
    if a.ndim == 1:
        return np.array(_quat_of_rows(_ypr_rows(*a.tolist()))) + 0.0
    return mat_to_quat(ypr_to_mat(a))


def mat_to_ypr(mat) -> np.ndarray:
    """`[yaw, pitch, roll]` (intrinsic ZYX) of a rotation matrix; pitch in [-pi/2, pi/2]."""
    m = _as_array(mat, (3, 3), "rotation matrix")
    pitch = np.arcsin(np.clip(-m[..., 2, 0], -1.0, 1.0))
    yaw = np.arctan2(m[..., 1, 0], m[..., 0, 0])
    roll = np.arctan2(m[..., 2, 1], m[..., 2, 2])
    return np.stack([yaw, pitch, roll], axis=-1)


def mat_to_rot6d(mat) -> np.ndarray:
    """The first two columns of R, `[r00, r10, r20, r01, r11, r21]`."""
    m = _as_array(mat, (3, 3), "rotation matrix")
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def rot6d_to_mat(rot6d) -> np.ndarray:
    """Rotation matrix from 6D by Gram-Schmidt; refuses degenerate (parallel or zero) columns."""
    v = _as_array(rot6d, (6,), "rot6d")
    a, b = v[..., :3], v[..., 3:]
    na = np.linalg.norm(a, axis=-1, keepdims=True)
    if np.any(na < 1e-9):
        raise PoseError("rot6d: first column has zero norm")
    c0 = a / na
    b = b - np.sum(c0 * b, axis=-1, keepdims=True) * c0
    nb = np.linalg.norm(b, axis=-1, keepdims=True)
    if np.any(nb < 1e-9):
        raise PoseError("rot6d: columns are parallel")
    c1 = b / nb
    c2 = np.cross(c0, c1)
    return np.stack([c0, c1, c2], axis=-1)


def geodesic_angle(mat_a, mat_b) -> np.ndarray:
    """Angle (rad, in [0, pi]) of the rotation taking A to B: the true distance, sign-free."""
    a = _as_array(mat_a, (3, 3), "rotation matrix")
    b = _as_array(mat_b, (3, 3), "rotation matrix")
    rel = np.swapaxes(a, -1, -2) @ b
    cos = (np.trace(rel, axis1=-2, axis2=-1) - 1.0) / 2.0
    return np.arccos(np.clip(cos, -1.0, 1.0))
