"""Shared fixtures of the policy tests: observations with non-trivial poses and camera frames."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_hw.description import CAMERAS
from egomimic_hw.rotations import mat_to_quat, ypr_to_mat
from egomimic_policy.interface import Observation


def pose_from(xyz, ypr) -> np.ndarray:
    return np.concatenate([np.asarray(xyz, dtype=float), mat_to_quat(ypr_to_mat(np.asarray(ypr, dtype=float)))])


def make_observation(
    stamp_ns: int = 1_000_000_000,
    *,
    seed: int = 0,
    shape=(480, 640),
    left=((0.32, 0.11, 0.21), (0.4, -0.3, 0.7)),
    right=((0.28, -0.14, 0.25), (-0.6, 0.2, -0.5)),
    grippers=(0.4, 0.7),
) -> Observation:
    rng = np.random.default_rng(seed)
    return Observation(
        stamp_ns=stamp_ns,
        images={c: rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for c in CAMERAS},
        left_pose=pose_from(*left),
        right_pose=pose_from(*right),
        left_gripper=grippers[0],
        right_gripper=grippers[1],
    )


@pytest.fixture
def observation() -> Observation:
    return make_observation()
