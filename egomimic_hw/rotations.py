"""Rotation math in one convention, vectorized over leading batch dimensions.

The only module with quaternion math: frames, kinematics, the gate's checks, the policy's
features and the scripted motion call it instead of carrying their own (or scipy's, whose
default order is the other one).

Conventions (docs/eva.md), fixed here once:
- quaternions are `[qw, qx, qy, qz]` (wxyz): scalar FIRST, as in every pose array
  `[x, y, z, qw, qx, qy, qz]` of this code base (scipy's `scalar_first=True`; ROS messages
  carry xyzw fields, mapped by name in egomimic_nodes.msg_convert); unit norm; q and -q are
  the same rotation and `canonical_quat` picks qw >= 0 where a unique form is needed;
- matrices act on column vectors, `A_R_B` maps B into A;
- Euler angles are `[yaw, pitch, roll]`, intrinsic "ZYX": R = Rz(yaw) Ry(pitch) Rx(roll),
  which is also the ARX SDK's pose_6d `[x, y, z, roll, pitch, yaw]` order reversed;
- 6D rotation = the first two COLUMNS of R, concatenated `[r00, r10, r20, r01, r11, r21]`;
  back by Gram-Schmidt.
Glossary of names: `quat` wxyz, `mat` 3x3, `rot6d` 6-vector, `ypr` [yaw, pitch, roll],
`rotvec` axis x angle (rad).

Malformed input (wrong trailing shape, non-finite, zero quaternion) raises PoseError: a NaN
that flows silently into a command is how an arm goes somewhere nobody asked for. Two
exceptions say why in their docstrings: `quat_angle` (non-finite reads as the largest angle)
and `quat_nlerp` (a per-tick path on validated rows).
"""

from __future__ import annotations

import math

import numpy as np

from egomimic_hw.errors import PoseError

QUAT_NORM_TOLERANCE = 1e-3
"""`quat_to_mat(strict=True)` refuses quaternions whose norm is further than this from 1."""


def as_array_of_shape(x, trailing: tuple[int, ...], what: str) -> np.ndarray:
    """`x` as a float array of shape (..., *trailing), all finite; else PoseError naming `what`.
    The entry check of every function here and of the pose code built on them."""
    arr = np.asarray(x, dtype=float)
    if arr.shape[arr.ndim - len(trailing) :] != trailing or arr.ndim < len(trailing):
        raise PoseError(f"{what}: expected shape (..., {', '.join(map(str, trailing))}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise PoseError(f"{what}: non-finite value in {arr.tolist() if arr.size <= 16 else 'array'}")
    return arr


CANONICAL_ZERO = 1e-12
"""Components smaller than this count as zero when choosing the canonical sign."""


def canonical_quat(quat) -> np.ndarray:
    """Unit quaternion with qw > 0 (the same rotation as the input). At qw = 0 (a half turn)
    the sign goes by the first non-zero of x, y, z, so q and -q always map to one form."""
    q = as_array_of_shape(quat, (4,), "quaternion")
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
    q = as_array_of_shape(quat, (4,), "quaternion")
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    if np.any(norm < 1e-12):
        raise PoseError("quaternion: zero norm is not a rotation")
    if strict and np.any(np.abs(norm - 1.0) > QUAT_NORM_TOLERANCE):
        raise PoseError(f"quaternion: norm {norm.ravel().tolist()} is not 1 (tolerance {QUAT_NORM_TOLERANCE})")
    w, x, y, z = np.moveaxis(q / norm, -1, 0)
    mat = np.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        axis=-1,
    )
    return mat.reshape(q.shape[:-1] + (3, 3))


def mat_to_quat(mat) -> np.ndarray:
    """Canonical (qw >= 0) quaternion of a rotation matrix; numerically stable branch choice.

    Shepperd's method, vectorized: per matrix, divide by the largest of the four candidates
    (4w^2, 4x^2, 4y^2, 4z^2 from the trace and diagonal) so no division is by a tiny number.
    """
    m = as_array_of_shape(mat, (3, 3), "rotation matrix")
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
    a = as_array_of_shape(ypr, (3,), "euler [yaw, pitch, roll]")
    if a.ndim == 1:
        return np.array(_ypr_rows(*a.tolist()))
    yaw, pitch, roll = np.moveaxis(a, -1, 0)
    cy, sy, cp, sp, cr, sr = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
    mat = np.stack(
        [
            cy * cp,
            cy * sp * sr - sy * cr,
            cy * sp * cr + sy * sr,
            sy * cp,
            sy * sp * sr + cy * cr,
            sy * sp * cr - cy * sr,
            -sp,
            cp * sr,
            cp * cr,
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
    a = as_array_of_shape(ypr, (3,), "euler [yaw, pitch, roll]")
    if a.ndim == 1:
        return np.array(_quat_of_rows(_ypr_rows(*a.tolist()))) + 0.0
    return mat_to_quat(ypr_to_mat(a))


def mat_to_ypr(mat) -> np.ndarray:
    """`[yaw, pitch, roll]` (intrinsic ZYX) of a rotation matrix; pitch in [-pi/2, pi/2]."""
    m = as_array_of_shape(mat, (3, 3), "rotation matrix")
    pitch = np.arcsin(np.clip(-m[..., 2, 0], -1.0, 1.0))
    yaw = np.arctan2(m[..., 1, 0], m[..., 0, 0])
    roll = np.arctan2(m[..., 2, 1], m[..., 2, 2])
    return np.stack([yaw, pitch, roll], axis=-1)


def mat_to_rot6d(mat) -> np.ndarray:
    """The first two columns of R, `[r00, r10, r20, r01, r11, r21]`."""
    m = as_array_of_shape(mat, (3, 3), "rotation matrix")
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def rot6d_to_mat(rot6d) -> np.ndarray:
    """Rotation matrix from 6D by Gram-Schmidt; refuses degenerate (parallel or zero) columns."""
    v = as_array_of_shape(rot6d, (6,), "rot6d")
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
    a = as_array_of_shape(mat_a, (3, 3), "rotation matrix")
    b = as_array_of_shape(mat_b, (3, 3), "rotation matrix")
    rel = np.swapaxes(a, -1, -2) @ b
    cos = (np.trace(rel, axis1=-2, axis2=-1) - 1.0) / 2.0
    return np.arccos(np.clip(cos, -1.0, 1.0))


def quat_angle(quat_a, quat_b) -> float:
    """Geodesic angle (rad, in [0, pi]) between two unit quaternions, sign-free (q ~ -q):
    2 acos(|<a, b>|).

    Unlike the rest of this module it does not raise on non-finite input: the gate measures
    commands it is about to refuse, and a non-finite input must read as pi, the largest angle,
    so that no rotation limit lets it pass (`min(1, nan)` is 1 in Python: 0 rad).
    """
    d = abs(float(np.dot(quat_a, quat_b)))
    if not np.isfinite(d):
        return float(np.pi)
    return float(2.0 * np.arccos(min(1.0, d)))


def quat_rotate_toward(quat_from, quat_to, max_angle_rad: float) -> np.ndarray:
    """The unit quaternion at most `max_angle_rad` from `quat_from` on the shortest path to
    `quat_to` (`quat_to` itself, normalized, when it is closer). Both wxyz, any norm but zero.

    Computed as scipy's `Rotation` does it (from_quat, inv, compose, as_rotvec, from_rotvec),
    operation for operation in plain floats, so the result is bit-identical to scipy's (a test
    holds them equal) without importing scipy into every process that uses rotations: that
    import costs about a second and 35 MB.
    """
    a = _unit_wxyz(_one_quat(quat_from, "quat_from"))
    b = _unit_wxyz(_one_quat(quat_to, "quat_to"))
    rotvec = _rotvec_of(_quat_product((a[0], -a[1], -a[2], -a[3]), b))
    angle = float(np.linalg.norm(rotvec))
    if angle > max_angle_rad:
        rotvec *= max_angle_rad / angle
    out = np.array(_quat_product(a, _quat_of_rotvec(rotvec)))
    return out / np.linalg.norm(out)


def quat_nlerp(quat_a, quat_b, weight_a) -> np.ndarray:
    """Normalized `weight_a * a + (1 - weight_a) * b`, with b's sign flipped where it points
    away from a (q and -q are one rotation). Shapes (..., 4) and (...,).

    Why nlerp, not slerp: between neighbouring control rows (33 ms) the angle is small and the
    two differ by far less than an arm resolves. No input checks (a per-tick path): callers
    pass rows they have validated.
    """
    w = np.asarray(weight_a, dtype=float)[..., None]
    qa, qb = np.asarray(quat_a, dtype=float), np.asarray(quat_b, dtype=float)
    sign = np.where(np.sum(qa * qb, axis=-1, keepdims=True) < 0.0, -1.0, 1.0)
    quat = w * qa + (1.0 - w) * sign * qb
    return quat / np.linalg.norm(quat, axis=-1, keepdims=True)


# -- one quaternion as a (w, x, y, z) tuple of floats: scipy's arithmetic, in its order -----------
def _one_quat(quat, what: str) -> tuple[float, float, float, float]:
    q = as_array_of_shape(quat, (4,), what)
    if q.ndim != 1:
        raise PoseError(f"{what}: expected one quaternion (4,), got {q.shape}")
    w, x, y, z = q.tolist()
    return w, x, y, z


def _unit_wxyz(q: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    w, x, y, z = q
    norm = math.sqrt(x * x + y * y + z * z + w * w)
    if norm == 0.0:
        raise PoseError("quaternion: zero norm is not a rotation")
    return w / norm, x / norm, y / norm, z / norm


def _quat_product(p, q) -> tuple[float, float, float, float]:
    """Unit Hamilton product p * q (q first, then p), normalized as scipy's compose does."""
    pw, px, py, pz = p
    qw, qx, qy, qz = q
    cx, cy, cz = py * qz - pz * qy, pz * qx - px * qz, px * qy - py * qx
    return _unit_wxyz(
        (pw * qw - px * qx - py * qy - pz * qz, pw * qx + qw * px + cx, pw * qy + qw * py + cy, pw * qz + qw * pz + cz)
    )


SMALL_ANGLE_RAD = 1e-3
"""Below this, rotation vector <-> quaternion scales use their Taylor series (as scipy does)."""


def _rotvec_of(q) -> np.ndarray:
    """Rotation vector (axis x angle, angle in [0, pi]) of a unit quaternion."""
    w, x, y, z = q
    if w < 0 or (w == 0 and (x < 0 or (x == 0 and (y < 0 or (y == 0 and z < 0))))):
        w, x, y, z = -w, -x, -y, -z
    angle = 2 * math.atan2(math.sqrt(x * x + y * y + z * z), w)
    if angle <= SMALL_ANGLE_RAD:
        angle2 = angle * angle
        scale = 2 + angle2 / 12 + 7 * angle2 * angle2 / 2880
    else:
        scale = angle / math.sin(angle / 2)
    return np.array([scale * x, scale * y, scale * z])


def _quat_of_rotvec(rotvec: np.ndarray) -> tuple[float, float, float, float]:
    x, y, z = rotvec.tolist()
    angle = math.sqrt(x * x + y * y + z * z)
    if angle <= SMALL_ANGLE_RAD:
        angle2 = angle * angle
        scale = 0.5 - angle2 / 48 + angle2 * angle2 / 3840
    else:
        scale = math.sin(angle / 2) / angle
    return math.cos(angle / 2), scale * x, scale * y, scale * z
