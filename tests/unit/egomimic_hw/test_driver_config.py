"""The driver node's config: its checks, and what it derives for the node (arm, gripper
calibration, pose decimation, seed, the arx5 backend's config)."""

from __future__ import annotations

import dataclasses

import pytest

from egomimic_hw.description import CALIBRATED_GRIPPERS, Arm, GripperCalibration
from egomimic_hw.driver.arx5 import Arx5Gains
from egomimic_hw.driver.config import DriverNodeConfig
from egomimic_hw.errors import ConfigError

RANGED = [(f.name, f.metadata["range"]) for f in dataclasses.fields(DriverNodeConfig) if "range" in f.metadata]


def test_every_field_has_help_and_the_defaults_are_valid():
    assert all(f.metadata.get("help") for f in dataclasses.fields(DriverNodeConfig))
    config = DriverNodeConfig()
    assert (config.driven_arm, config.backend, config.gripper_calibration) == (Arm.LEFT, "sim", GripperCalibration())


@pytest.mark.parametrize("name, bounds", RANGED, ids=[n for n, _ in RANGED])
def test_a_value_just_outside_a_range_is_refused_naming_the_field(name, bounds):
    lo, hi = bounds
    step = 1 if isinstance(lo, int) else 0.5
    DriverNodeConfig(**{name: lo})
    DriverNodeConfig(**{name: hi})
    for bad in (lo - step, hi + step):
        with pytest.raises(ConfigError, match=rf"^{name} must be in \[{lo}, {hi}\], got {bad}"):
            DriverNodeConfig(**{name: bad})


def test_arm_and_backend_are_checked():
    assert DriverNodeConfig(arm=" Right").driven_arm is Arm.RIGHT
    with pytest.raises(ConfigError, match="unknown arm 'middle'"):
        DriverNodeConfig(arm="middle")
    with pytest.raises(ConfigError, match=r"unknown driver backend 'gazebo'; choices: \['sim', 'arx5'\]"):
        DriverNodeConfig(backend="gazebo")


def test_unset_gripper_overrides_mean_the_backends_calibration():
    assert DriverNodeConfig(arm="right", backend="arx5").gripper_calibration == CALIBRATED_GRIPPERS[Arm.RIGHT]
    both = DriverNodeConfig(backend="arx5", gripper_open_m=0.09, gripper_close_m=-0.01).gripper_calibration
    assert (both.open_m, both.close_m) == (0.09, -0.01)
    with pytest.raises(ConfigError, match="close_m=-0.01 given without open_m"):
        DriverNodeConfig(gripper_close_m=-0.01)
    with pytest.raises(ConfigError, match="open_m > close_m"):
        DriverNodeConfig(gripper_open_m=0.0, gripper_close_m=0.01)


@pytest.mark.parametrize(
    "rate_hz, pose_rate_hz, every", [(100.0, 30.0, 3), (100.0, 0.0, 1), (100.0, 500.0, 1), (200.0, 50.0, 4)]
)
def test_ee_pose_goes_out_every_nth_tick(rate_hz, pose_rate_hz, every):
    assert DriverNodeConfig(rate_hz=rate_hz, pose_rate_hz=pose_rate_hz).pose_every_ticks == every


def test_the_two_simulated_arms_draw_different_noise():
    assert (
        DriverNodeConfig(arm="left", seed=5).controller_seed,
        DriverNodeConfig(arm="right", seed=5).controller_seed,
    ) == (5, 6)


def test_the_arx5_config_takes_the_arms_own_bus_unless_one_is_given():
    gains = Arx5Gains()
    left, right = DriverNodeConfig(arm="left").arx5(gains, 0.2), DriverNodeConfig(arm="right").arx5(gains, 0.1)
    assert (left.can_interface, right.can_interface) == ("can1", "can2")
    assert right.gains is gains and right.preview_s == 0.1
    assert DriverNodeConfig(arm="right", can_interface="can5").arx5(gains, 0.2).can_interface == "can5"
