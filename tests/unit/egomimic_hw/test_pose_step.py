"""The one measure of a commanded step (egomimic_hw/pose_step.py) that the gate's rate check and
the executor's speed limiter share."""

import numpy as np
import pytest

from egomimic_hw.pose_step import step_size, step_toward
from egomimic_hw.rotations import quat_angle, ypr_to_quat

PREV = np.array([0.30, -0.10, 0.20, *ypr_to_quat([0.1, -0.2, 0.3])])


def pose(dx, yaw_rad):
    out = PREV.copy()
    out[:3] += dx
    out[3:] = ypr_to_quat([0.1 + yaw_rad, -0.2, 0.3])
    return out


def test_the_step_is_the_distance_and_the_geodesic_angle_whatever_the_quaternions_norm():
    target = pose([0.03, 0.04, 0.0], 0.25)
    assert step_size(PREV, target) == pytest.approx((0.05, 0.25), abs=1e-12)
    scaled = target.copy()
    scaled[3:] *= -2.5  # a model's raw row: another norm, the other sign, the same rotation
    assert step_size(PREV, scaled) == pytest.approx((0.05, 0.25), abs=1e-12)


def test_a_non_finite_orientation_reads_as_the_largest_angle():
    target = pose([0.0, 0.0, 0.0], 0.0)
    target[4] = np.nan
    assert step_size(PREV, target)[1] == pytest.approx(np.pi)


def test_a_long_step_is_shortened_along_itself_and_a_fast_turn_on_the_shortest_arc():
    target = pose([0.03, 0.04, 0.0], 0.25)
    dist, angle = step_size(PREV, target)
    out = step_toward(PREV, target, dist, angle, 0.01, 0.05)
    assert step_size(PREV, out) == pytest.approx((0.01, 0.05), abs=1e-9)
    assert np.allclose((out[:3] - PREV[:3]) / 0.01, (target[:3] - PREV[:3]) / 0.05)  # same direction
    # on the arc from PREV to the target: what is left of the turn is the rest of the angle
    assert quat_angle(out[3:], target[3:]) == pytest.approx(0.25 - 0.05, abs=1e-9)


@pytest.mark.parametrize("max_m, max_rad", [(0.1, 0.05), (0.01, 1.0)])
def test_a_part_within_its_bound_is_kept_as_it_is(max_m, max_rad):
    target = pose([0.03, 0.04, 0.0], 0.25)
    out = step_toward(PREV, target, *step_size(PREV, target), max_m, max_rad)
    kept = slice(0, 3) if max_m == 0.1 else slice(3, 7)
    assert np.array_equal(out[kept], target[kept]) and out is not target
