"""Time-stamped target rows and the math on them: evaluate at a time, blend two trajectories.

Why time stamps instead of row indices: a chunk answers an observation taken at
`observation_stamp_ns`; row i is meant for `observation_stamp_ns + i * period`. Keeping that
time with every row lets the executor drop rows whose time passed while the model ran,
evaluate the queue at the tick's own time (ticks and rows are never exactly in phase), and
blend an old and a new chunk row against row at the same instant.

Conventions (interface.py): dataset frame, poses `[x, y, z, qw, qx, qy, qz]`, grippers
normalized 0 closed .. 1 open. Positions and grippers are lerped; quaternions are nlerped
after aligning signs (q and -q are one rotation). Rows are one control period apart (33 ms),
where the angle between neighbours is small and nlerp differs from slerp by far less than the
arm can resolve; blends of two chunks use the same nlerp, so one formula serves both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from egomimic_hw.errors import PoseError
from egomimic_hw.rotations import quat_nlerp
from egomimic_policy.interface import Chunk

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Trajectory:
    """Rows in time order. t_ns: (N,) int64 ROS time each row is meant for; poses (N, 7);
    grippers (N,); chunk_id / row / observation_stamp_ns: (N,) int64 provenance per row."""

    t_ns: np.ndarray
    left_pose: np.ndarray
    right_pose: np.ndarray
    left_gripper: np.ndarray
    right_gripper: np.ndarray
    chunk_id: np.ndarray
    row: np.ndarray
    observation_stamp_ns: np.ndarray

    def __len__(self) -> int:
        return int(self.t_ns.shape[0])

    def take(self, index) -> Trajectory:
        """A sub-trajectory (a slice or index array) with every field taken alike."""
        return Trajectory(*(getattr(self, f)[index] for f in _FIELDS))

    def delayed(self, dt_ns: int) -> Trajectory:
        """The same rows, each meant for `dt_ns` later (provenance unchanged)."""
        return dataclasses.replace(self, t_ns=self.t_ns + np.int64(dt_ns))

    @staticmethod
    def empty() -> Trajectory:
        return Trajectory(
            np.zeros(0, np.int64),
            np.zeros((0, 7)),
            np.zeros((0, 7)),
            np.zeros(0),
            np.zeros(0),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )


_FIELDS = (
    "t_ns",
    "left_pose",
    "right_pose",
    "left_gripper",
    "right_gripper",
    "chunk_id",
    "row",
    "observation_stamp_ns",
)


@dataclass(frozen=True)
class Target:
    """One evaluated command: what the executor publishes for a tick."""

    left_pose: np.ndarray
    right_pose: np.ndarray
    left_gripper: float
    right_gripper: float
    chunk_id: int
    row: int
    observation_stamp_ns: int


def concat(a: Trajectory, b: Trajectory) -> Trajectory:
    return Trajectory(*(np.concatenate([getattr(a, f), getattr(b, f)]) for f in _FIELDS))


def _unit_quats(quat: np.ndarray, what: str) -> np.ndarray:
    norm = np.linalg.norm(quat, axis=-1, keepdims=True)
    if np.any(norm < 1e-6):
        raise PoseError(f"{what}: zero-norm quaternion")
    return quat / norm


def validate_chunk(chunk: Chunk) -> None:
    """Refuse a malformed chunk with a message naming the field (PoseError, a ValueError)."""
    n = len(chunk)
    if n < 1:
        raise PoseError("chunk has no rows")
    if not (np.isfinite(chunk.period_s) and chunk.period_s > 0):
        raise PoseError(f"chunk period_s must be finite and > 0, got {chunk.period_s}")
    for name, shape in (("left_pose", (n, 7)), ("right_pose", (n, 7)), ("left_gripper", (n,)), ("right_gripper", (n,))):
        value = np.asarray(getattr(chunk, name))
        if value.shape != shape:
            raise PoseError(f"chunk {name}: expected shape {shape}, got {value.shape}")
        if not np.all(np.isfinite(value)):
            raise PoseError(f"chunk {name}: non-finite value")


def from_chunk(chunk: Chunk, chunk_id: int, max_rows: int = 0) -> Trajectory:
    """Time-stamp a chunk's rows (row i at observation stamp + i * period); keep at most
    `max_rows` rows (0 = all). Quaternions are normalized; a malformed chunk raises PoseError."""
    validate_chunk(chunk)
    n = len(chunk) if max_rows <= 0 else min(len(chunk), max_rows)
    rows = np.arange(n, dtype=np.int64)
    period_ns = chunk.period_s * NS_PER_S
    left = np.array(chunk.left_pose[:n], dtype=float)
    right = np.array(chunk.right_pose[:n], dtype=float)
    left[:, 3:] = _unit_quats(left[:, 3:], "left_pose")
    right[:, 3:] = _unit_quats(right[:, 3:], "right_pose")
    return Trajectory(
        t_ns=int(chunk.observation_stamp_ns) + np.round(rows * period_ns).astype(np.int64),
        left_pose=left,
        right_pose=right,
        left_gripper=np.array(chunk.left_gripper[:n], dtype=float),
        right_gripper=np.array(chunk.right_gripper[:n], dtype=float),
        chunk_id=np.full(n, chunk_id, np.int64),
        row=rows,
        observation_stamp_ns=np.full(n, int(chunk.observation_stamp_ns), np.int64),
    )


def blend_poses(pose_a: np.ndarray, pose_b: np.ndarray, weight_a: np.ndarray) -> np.ndarray:
    """weight_a * a + (1 - weight_a) * b per row: positions lerped, quaternions nlerped with b's
    sign flipped where it points away from a. Shapes (..., 7) and (...,)."""
    w = np.asarray(weight_a, dtype=float)[..., None]
    quat = quat_nlerp(pose_a[..., 3:], pose_b[..., 3:], weight_a)
    pos = w * pose_a[..., :3] + (1.0 - w) * pose_b[..., :3]
    return np.concatenate([pos, quat], axis=-1)


def sample(traj: Trajectory, times_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(left_pose, right_pose, left_gripper, right_gripper) interpolated at `times_ns`; times
    outside [first, last] take the end row (the caller decides whether that is allowed)."""
    t = traj.t_ns
    times = np.asarray(times_ns, dtype=np.int64)
    if len(traj) == 1:
        k = np.zeros(times.shape, dtype=int)
        return traj.left_pose[k], traj.right_pose[k], traj.left_gripper[k], traj.right_gripper[k]
    i = np.clip(np.searchsorted(t, times, side="right") - 1, 0, len(t) - 2)
    span = (t[i + 1] - t[i]).astype(float)
    frac = np.clip((times - t[i]) / np.where(span > 0, span, 1.0), 0.0, 1.0)
    w_a = 1.0 - frac
    left = blend_poses(traj.left_pose[i], traj.left_pose[i + 1], w_a)
    right = blend_poses(traj.right_pose[i], traj.right_pose[i + 1], w_a)
    lg = w_a * traj.left_gripper[i] + frac * traj.left_gripper[i + 1]
    rg = w_a * traj.right_gripper[i] + frac * traj.right_gripper[i + 1]
    return left, right, lg, rg


def target_at(traj: Trajectory, now_ns: int) -> Target:
    """The command for `now_ns`, interpolated between the rows around it; provenance (chunk id,
    row, observation stamp) is that of the row at or before now (the first row if none)."""
    left, right, lg, rg = sample(traj, np.array([now_ns], dtype=np.int64))
    k = max(int(np.searchsorted(traj.t_ns, now_ns, side="right")) - 1, 0)
    return Target(
        left[0],
        right[0],
        float(lg[0]),
        float(rg[0]),
        int(traj.chunk_id[k]),
        int(traj.row[k]),
        int(traj.observation_stamp_ns[k]),
    )


def blend_into(new: Trajectory, old: Trajectory, weight_old: np.ndarray) -> Trajectory:
    """`new` with each row blended with `old` evaluated at the same time: weight_old (N,) per row
    (0 keeps the new row). Provenance stays the new chunk's."""
    if len(old) == 0 or not np.any(weight_old > 0):
        return new
    left, right, lg, rg = sample(old, new.t_ns)
    w = np.asarray(weight_old, dtype=float)
    return Trajectory(
        t_ns=new.t_ns,
        left_pose=blend_poses(left, new.left_pose, w),
        right_pose=blend_poses(right, new.right_pose, w),
        left_gripper=w * lg + (1.0 - w) * new.left_gripper,
        right_gripper=w * rg + (1.0 - w) * new.right_gripper,
        chunk_id=new.chunk_id,
        row=new.row,
        observation_stamp_ns=new.observation_stamp_ns,
    )
