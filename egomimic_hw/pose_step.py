"""The step between two end-effector poses, and the pose part of the way along it.

One measure for every stage that limits a commanded step: the gate's rate check
(egomimic_safety.checks.check_command_step) and the executor's speed limiter
(egomimic_policy.rollout.speed_limit), so that what the limiter lets out is what the gate
accepts by construction, not by two copies kept alike. Poses are [x, y, z, qw, qx, qy, qz].
"""

from __future__ import annotations

import numpy as np

from egomimic_hw.rotations import quat_angle, quat_rotate_toward


def step_size(prev: np.ndarray, pose: np.ndarray) -> tuple[float, float]:
    """(metres, radians) from `prev` to `pose`: the distance between the positions and the
    geodesic angle between the orientations (quaternions of any nonzero norm: a model's raw
    rows; a non-finite one reads as pi, see quat_angle)."""
    dist = float(np.linalg.norm(pose[:3] - prev[:3]))
    angle = quat_angle(prev[3:] / np.linalg.norm(prev[3:]), pose[3:] / np.linalg.norm(pose[3:]))
    return dist, angle


def step_toward(
    prev: np.ndarray, pose: np.ndarray, dist: float, angle: float, max_m: float, max_rad: float
) -> np.ndarray:
    """A copy of `pose` moved back toward `prev` until its step (`dist`, `angle`: step_size's)
    is at most `max_m` and `max_rad`: the position along the straight line, the orientation on
    the shortest arc. A part already within its bound is kept as it is."""
    out = np.array(pose, dtype=float)
    if dist > max_m:
        out[:3] = prev[:3] + (pose[:3] - prev[:3]) * (max_m / dist)
    if angle > max_rad:
        out[3:] = quat_rotate_toward(prev[3:], pose[3:], max_rad)
    return out
