"""Gripper calibration resolution: measured endpoints on the real arms, defaults in sim, and an
override only of both endpoints."""

import pytest

from egomimic_hw.description import Arm, GripperCalibration
from egomimic_hw.driver.calibration import resolve_gripper_calibration
from egomimic_hw.errors import ConfigError

MEASURED = {Arm.LEFT: (0.09445506587172998, -0.012), Arm.RIGHT: (0.09594861425534644, -0.012)}
"""docs/eva.md's calibrated endpoints, written out independently of description.py."""


@pytest.mark.parametrize("arm", list(Arm))
def test_the_real_arms_use_their_measured_endpoints(arm):
    cal = resolve_gripper_calibration(arm, "arx5")
    assert (cal.open_m, cal.close_m) == MEASURED[arm]


@pytest.mark.parametrize("arm", list(Arm))
def test_the_simulated_gripper_uses_the_uncalibrated_defaults(arm):
    assert resolve_gripper_calibration(arm, "sim") == GripperCalibration(open_m=0.08, close_m=0.0)


@pytest.mark.parametrize("backend", ["sim", "arx5"])
def test_an_override_of_both_endpoints_wins(backend):
    cal = resolve_gripper_calibration(Arm.RIGHT, backend, open_m=0.09, close_m=-0.01)
    assert (cal.open_m, cal.close_m) == (0.09, -0.01)


@pytest.mark.parametrize("given,missing", [(dict(open_m=0.09), "close_m"), (dict(close_m=-0.012), "open_m")])
@pytest.mark.parametrize("backend", ["sim", "arx5"])
def test_an_override_of_one_endpoint_is_refused_naming_the_missing_one(backend, given, missing):
    with pytest.raises(ConfigError, match=rf"left: .* given without {missing}; set both"):
        resolve_gripper_calibration(Arm.LEFT, backend, **given)


def test_a_negative_close_is_a_value_not_unset():
    cal = resolve_gripper_calibration(Arm.LEFT, "arx5", open_m=0.0945, close_m=-1.0)
    assert cal.close_m == -1.0  # no sentinel: what is asked is used (and validated)


@pytest.mark.parametrize("open_m,close_m", [(0.0, 0.01), (0.05, 0.05), (float("nan"), 0.0)])
def test_an_invalid_override_is_refused(open_m, close_m):
    with pytest.raises(ConfigError, match="open_m > close_m"):
        resolve_gripper_calibration(Arm.LEFT, "arx5", open_m=open_m, close_m=close_m)


def test_an_unknown_backend_lists_the_choices():
    with pytest.raises(ConfigError, match=r"choices: \['sim', 'arx5'\]"):
        resolve_gripper_calibration(Arm.LEFT, "mujoco")
