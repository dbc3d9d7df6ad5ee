"""Shared fixtures of the executor-core tests: explicit times and a scripted motion whose
target at any time is known exactly (motion.sample(t - anchor))."""

from dataclasses import replace

import numpy as np

from egomimic_hw.description import Arm
from egomimic_policy.interface import Chunk, Observation
from egomimic_policy.scripted import ScriptedMotion, ScriptedMotionConfig

P_NS = 33_333_333  # 30 Hz (tick spacing in these tests)
T0 = 1_700_000_000_000_000_000
LEFT0 = np.array([0.30, 0.05, 0.25, 1.0, 0.0, 0.0, 0.0])
RIGHT0 = np.array([0.30, -0.05, 0.25, 0.0, 1.0, 0.0, 0.0])
MOTION = ScriptedMotionConfig(ramp_s=0.0)  # full amplitude at once: every row differs


def row_ns(i: int) -> int:
    """Time of row i of a chunk observed at T0 (rows are rounded to the ns)."""
    return T0 + round(i * 1e9 / 30)


def obs(stamp_ns: int) -> Observation:
    return Observation(stamp_ns, {}, LEFT0, RIGHT0, 0.5, 0.5)


def reference(t_ns: int, anchor_ns: int = T0):
    motion = ScriptedMotion(MOTION, {Arm.LEFT: LEFT0, Arm.RIGHT: RIGHT0}, {Arm.LEFT: 0.5, Arm.RIGHT: 0.5})
    return motion.sample((t_ns - anchor_ns) * 1e-9)


def shifted(chunk: Chunk, dx_m: float) -> Chunk:
    """The same chunk moved by dx_m along x on both arms (a model that changed its mind)."""
    left, right = chunk.left_pose.copy(), chunk.right_pose.copy()
    left[:, 0] += dx_m
    right[:, 0] += dx_m
    return replace(chunk, left_pose=left, right_pose=right)
