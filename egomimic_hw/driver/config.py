"""The driver node's own settings, ROS-free: which arm and backend one driver process runs, at
which rates, and whose commands it takes (`DriverNodeConfig`). The driver's behaviour
(`arm_driver.DriverConfig`), the simulated controller (`sim.SimConfig`, parameters `sim.*`)
and the gains (`arx5.Arx5Gains`, `arx5.*`) have their own.

Every field is a node parameter: its `help` is the parameter's description and its `range` the
inclusive bounds rclpy enforces at start. `__post_init__` checks the same bounds and the rules
across fields, so a config built in a test is refused for the same reasons as a bad YAML value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from egomimic_hw.config_fields import check_ranges
from egomimic_hw.description import DEFAULT_CAN_INTERFACE, Arm, GripperCalibration
from egomimic_hw.driver.arx5 import Arx5Config, Arx5Gains
from egomimic_hw.driver.backends import BACKENDS
from egomimic_hw.driver.calibration import resolve_gripper_calibration
from egomimic_hw.errors import ConfigError

GRIPPER_OVERRIDE_HELP = (
    "gripper {end} width override, m. Unset (the default: no value) = the backend's calibration: "
    "arx5 this arm's measured endpoints, sim the uncalibrated 0.08 m open / 0 m close. "
    "Set both gripper_open_m and gripper_close_m, or neither"
)


@dataclass(frozen=True)
class DriverNodeConfig:
    """One driver process: its arm, backend, rates, and the gate whose commands it applies."""

    arm: str = field(default=Arm.LEFT.value, metadata={"help": "the arm this process drives: left | right"})
    backend: str = field(default="sim", metadata={"help": f"controller backend: {' | '.join(BACKENDS)}"})
    rate_hz: float = field(
        default=100.0, metadata={"help": "state loop and joint_states rate, Hz", "range": (1.0, 500.0)}
    )
    pose_rate_hz: float = field(
        default=30.0,
        metadata={
            # What ee_pose's consumers need (the policy, recorder and camera scene sample at 30 Hz),
            # not every tick: each sample costs FK here and a callback and a publish in frames.
            "help": "ee_pose rate, Hz: every round(rate_hz / pose_rate_hz)-th tick (0 = every tick)",
            "range": (0.0, 500.0),
        },
    )
    can_interface: str = field(
        default="", metadata={"help": "arx5: the arm's SocketCAN interface ('' = left can1, right can2)"}
    )
    gripper_open_m: float | None = field(default=None, metadata={"help": GRIPPER_OVERRIDE_HELP.format(end="open")})
    gripper_close_m: float | None = field(default=None, metadata={"help": GRIPPER_OVERRIDE_HELP.format(end="close")})
    """None, never a sentinel number: a close width is legitimately negative (calibration.py)."""
    kinematics: str = field(
        default="auto",
        metadata={"help": "FK/IK backend: auto (the SDK solver where it imports, else Pinocchio), sdk or pinocchio"},
    )
    seed: int = field(
        default=0,
        metadata={"help": "sim: noise seed of the left arm; the right arm's is seed + 1", "range": (0, 2**62)},
    )
    gate_node: str = field(
        default="safety_gate",
        metadata={"help": "the node, in this namespace, whose joint commands and safety/status are accepted"},
    )
    require_gate: bool = field(
        default=True,
        metadata={
            "help": "apply joint commands only from gate_node while its status is not DISARMED "
            "(false: from any publisher, for tests and bench rigs only)"
        },
    )

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown driver backend {self.backend!r}; choices: {list(BACKENDS)}")
        # Built once here for their checks: an unknown arm, and a gripper override of one
        # endpoint only or with open <= close, are refused now, not at the first command.
        _ = (self.driven_arm, self.gripper_calibration)

    @property
    def driven_arm(self) -> Arm:
        return Arm.parse(self.arm)

    @property
    def gripper_calibration(self) -> GripperCalibration:
        return resolve_gripper_calibration(self.driven_arm, self.backend, self.gripper_open_m, self.gripper_close_m)

    @property
    def pose_every_ticks(self) -> int:
        """ee_pose goes out with every this-many-th joint_states sample."""
        return max(1, round(self.rate_hz / self.pose_rate_hz)) if self.pose_rate_hz > 0 else 1

    @property
    def controller_seed(self) -> int:
        """The simulated controller's noise seed: the two arms must not draw the same noise."""
        return self.seed + (0 if self.driven_arm is Arm.LEFT else 1)

    def arx5(self, gains: Arx5Gains, preview_s: float) -> Arx5Config:
        """What the arx5 backend opens: this arm's CAN interface, `gains`, and the driver's preview."""
        return Arx5Config(self.can_interface or DEFAULT_CAN_INTERFACE[self.driven_arm], gains, preview_s)
