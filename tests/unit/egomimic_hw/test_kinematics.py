"""FK/IK through the real ARX SDK solver (no hardware needed)."""

import numpy as np
import pytest

from egomimic_hw.kinematics import ArmKinematics, pose6d_from_pose, pose_from_pose6d

WORK = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])


@pytest.fixture(scope="module")
def kin():
    return ArmKinematics()


def test_pose6d_conversion_round_trip():
    p6 = np.array([0.3, -0.1, 0.2, 0.3, -0.4, 1.2])
    assert np.allclose(pose6d_from_pose(pose_from_pose6d(p6)), p6, atol=1e-12)


def test_ik_recovers_reachable_poses(kin):
    rng = np.random.default_rng(0)
    for _ in range(50):
        q = WORK + rng.uniform(-0.3, 0.3, 6)
        result = kin.inverse(kin.forward(q), q + rng.uniform(-0.05, 0.05, 6))
        assert result.ok, result.detail
        assert result.position_error_m < 1e-3


def test_ik_failure_is_reported_not_a_nearest_solution(kin):
    target = kin.forward(WORK)
    target[0] += 2.0  # 2 m out of reach
    result = kin.inverse(target, WORK)
    assert not result.ok
    assert result.detail
