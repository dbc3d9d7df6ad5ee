"""The EVA robot description: arms, joint names, limits, gripper calibration, rates.

The only copy of these facts in the code base (source: docs/eva.md, itself taken from the
ARX SDK's X5 RobotConfig and the upstream EgoVerse configs). Everything else imports them.

Vector layout: per arm 7 values `[q0..q5, gripper]`; bimanual vectors are 14 wide, left at
offset 0, right at offset 7. Use `arm_slice(arm)` / `gripper_index(arm)`, never literals.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from egomimic_hw.errors import ConfigError

CONTROL_RATE_HZ = 30.0
"""Policy / gate rate (upstream: 30 Hz, 33 ms)."""

SDK_LOOP_DT_S = 0.002
"""The ARX SDK's background joint loop period (500 Hz)."""

DEFAULT_PREVIEW_S = 0.2
"""Upstream stamps each joint target for controller time + 0.2 s; the SDK interpolates to it."""

ARX_MODEL = "X5"
"""ARX SDK model key of both EVA arms (ARX X5A)."""

BASE_LINK = "base_link"
"""Root of the kinematic chain: the arm base, origin of the hardware frame `<arm>_base`."""

EEF_LINK = "link6"
"""The end-effector point of every pose in this system (FK, IK, published poses, the gate,
episodes): the last joint's link, as upstream sets `robot_config.eef_link_name = "link6"`
(EgoVerse `egomimic/robot/eva/eva_ws/src/eva/robot_interface.py`). The SDK's default
`eef_link` lies 0.145 m further along tool x; the lab's policies were trained on link6."""

JOINTS_PER_ARM = 6
VALUES_PER_ARM = JOINTS_PER_ARM + 1


class Arm(str, enum.Enum):
    """The two arms; the value is the name used in topics, frame ids and YAML."""

    LEFT = "left"
    RIGHT = "right"

    @property
    def offset(self) -> int:
        """Start of this arm's 7 values in a bimanual 14-vector."""
        return 0 if self is Arm.LEFT else VALUES_PER_ARM

    @property
    def hw_frame(self) -> str:
        """ROS frame id of the arm base as the SDK reports it (hardware frame)."""
        return f"{self.value}_base"

    @property
    def dataset_frame(self) -> str:
        """ROS frame id of the same origin in the dataset orientation convention."""
        return f"{self.value}_base_dataset"

    @property
    def joint_names(self) -> list[str]:
        """Names on `<arm>/joint_states` and `<arm>/joint_command` (docs/interfaces.md)."""
        return [f"{self.value}_joint{i + 1}" for i in range(JOINTS_PER_ARM)] + [f"{self.value}_gripper"]

    @classmethod
    def parse(cls, name: str) -> Arm:
        try:
            return cls(name.strip().lower())
        except ValueError:
            raise ConfigError(f"unknown arm {name!r}; choices: {[a.value for a in cls]}") from None


ARMS = (Arm.LEFT, Arm.RIGHT)


def arm_slice(arm: Arm) -> slice:
    """The 7 values of `arm` in a bimanual 14-vector."""
    return slice(arm.offset, arm.offset + VALUES_PER_ARM)


def gripper_index(arm: Arm) -> int:
    """Index of `arm`'s gripper in a bimanual 14-vector."""
    return arm.offset + JOINTS_PER_ARM


@dataclass(frozen=True)
class ArmLimits:
    """Joint-space limits of one X5 arm (ARX SDK RobotConfig "X5")."""

    joint_pos_min_rad: tuple[float, ...] = (-3.14, -0.05, -0.1, -1.6, -1.57, -2.0)
    joint_pos_max_rad: tuple[float, ...] = (2.618, 3.5, 3.2, 1.55, 1.57, 2.0)
    joint_vel_max_rad_s: tuple[float, ...] = (5.0, 5.0, 5.5, 5.5, 5.0, 5.0)
    joint_torque_max_nm: tuple[float, ...] = (30.0, 40.0, 30.0, 15.0, 10.0, 10.0)
    ee_speed_max_m_s: float = 0.6
    """Declared, not enforced by the SDK."""
    ee_angular_speed_max_rad_s: float = 1.8
    """Declared, not enforced by the SDK."""
    gripper_width_m: float = 0.088
    gripper_speed_max_m_s: float = 0.3

    @property
    def pos_min(self) -> np.ndarray:
        return np.asarray(self.joint_pos_min_rad, dtype=float)

    @property
    def pos_max(self) -> np.ndarray:
        return np.asarray(self.joint_pos_max_rad, dtype=float)

    @property
    def vel_max(self) -> np.ndarray:
        return np.asarray(self.joint_vel_max_rad_s, dtype=float)


X5_LIMITS = ArmLimits()

GRIPPER_EMERGENCY_BELOW_M = -0.017
"""A measured gripper below this width is an SDK emergency (docs/eva.md)."""


@dataclass(frozen=True)
class GripperCalibration:
    """Normalized gripper (0 closed, 1 open) <-> SDK metres: native = g * (open - close) + close."""

    open_m: float = 0.08
    close_m: float = 0.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.open_m) and np.isfinite(self.close_m)) or self.open_m <= self.close_m:
            raise ConfigError(
                f"gripper calibration needs finite open_m > close_m, got open_m={self.open_m}, close_m={self.close_m}"
            )

    def to_metres(self, gripper_norm: float) -> float:
        return float(gripper_norm) * (self.open_m - self.close_m) + self.close_m

    def to_norm(self, width_m: float) -> float:
        return (float(width_m) - self.close_m) / (self.open_m - self.close_m)


CALIBRATED_GRIPPERS = {
    Arm.LEFT: GripperCalibration(open_m=0.09445506587172998, close_m=-0.012),
    Arm.RIGHT: GripperCalibration(open_m=0.09594861425534644, close_m=-0.012),
}
"""Measured EVA endpoints (docs/eva.md); the defaults of GripperCalibration are the uncalibrated ones."""

DEFAULT_CAN_INTERFACE = {Arm.LEFT: "can1", Arm.RIGHT: "can2"}

CAMERAS = ("front_1", "left_wrist", "right_wrist")
"""Camera names on `cameras/<cam>/...` (docs/interfaces.md)."""
