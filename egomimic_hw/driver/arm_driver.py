"""One arm's driver logic, ROS-free: command validation, the command watchdog, read-back, FK.

The driver node is a thin rclpy adapter over `ArmDriver`. Rules (issue 3, ../shared/EVA.md):
- commands arrive as 6 joints + normalized gripper (0 closed .. 1 open); the per-arm gripper
  calibration maps them to metres. A malformed command is refused and counted, never sent;
- watchdog: with no valid command for `command_timeout_s`, the driver commands the measured
  position once and keeps holding it. A later valid command resumes tracking (the gate decides
  what is valid; the driver never invents motion);
- a controller fault (SDK emergency, frozen state) latches: no command is sent any more;
- homing only through `home()`, which the node exposes as an explicit service.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from egomimic_hw.description import JOINTS_PER_ARM, VALUES_PER_ARM, Arm, GripperCalibration
from egomimic_hw.driver.base import ArmController, ArmReading
from egomimic_hw.errors import ConfigError
from egomimic_hw.kinematics import ArmKinematics


@dataclass(frozen=True)
class DriverConfig:
    """Driver behaviour of one arm; defaults from EVA.md and the issue."""

    arm: Arm
    command_timeout_s: float = 0.1
    preview_s: float = 0.2
    """Each target is stamped controller time + preview; the SDK interpolates to it."""
    gripper: GripperCalibration = field(default_factory=GripperCalibration)

    def __post_init__(self) -> None:
        if not self.command_timeout_s > 0:
            raise ConfigError(f"command_timeout_s must be > 0, got {self.command_timeout_s}")
        if not 0 <= self.preview_s <= 1.0:
            raise ConfigError(f"preview_s must be in [0, 1] s, got {self.preview_s}")


@dataclass
class DriverCounters:
    commands_received: int = 0
    commands_applied: int = 0
    commands_refused: int = 0
    watchdog_holds: int = 0
    last_watchdog_delay_s: float = float("nan")
    """Time from the last valid command to the watchdog's hold, at the last hold (<= timeout + one tick)."""


@dataclass(frozen=True)
class DriverState:
    """What the node publishes each period."""

    reading: ArmReading
    gripper_norm: float
    ee_pose_hw: np.ndarray
    holding: bool
    """True while the watchdog holds the measured position."""
    status: str
    """One line for /diagnostics: why the driver does what it does."""


class ArmDriver:
    def __init__(self, config: DriverConfig, controller: ArmController, kinematics: ArmKinematics):
        self.config = config
        self._ctrl = controller
        self._kin = kinematics
        self.counters = DriverCounters()
        self._last_command_s: float | None = None
        self._holding = True  # nothing commanded yet: the SDK holds its start position
        self._last_reading: ArmReading | None = None
        self.refusal = ""

    def on_command(self, positions: np.ndarray, now_s: float) -> bool:
        """Apply a joint command `[q0..q5, gripper_norm]`; False (and counted) when refused."""
        self.counters.commands_received += 1
        values = np.asarray(positions, dtype=float)
        fault = self.fault
        if fault:
            why = f"controller fault latched: {fault}"
        elif values.shape != (VALUES_PER_ARM,):
            why = f"expected {VALUES_PER_ARM} values (6 joints + gripper), got shape {values.shape}"
        elif not np.all(np.isfinite(values)):
            why = f"non-finite value in {values.tolist()}"
        else:
            why = ""
        if why:
            self.counters.commands_refused += 1
            self.refusal = why
            return False
        gripper_norm = float(np.clip(values[JOINTS_PER_ARM], 0.0, 1.0))
        self._ctrl.command(values[:JOINTS_PER_ARM], self.config.gripper.to_metres(gripper_norm), now_s, self.config.preview_s)
        self.counters.commands_applied += 1
        self._last_command_s = now_s
        self._holding = False
        return True

    def tick(self, now_s: float) -> DriverState:
        """Read the arm, run the watchdog, compute FK; called at the publication rate."""
        reading = self._ctrl.read(now_s)
        self._last_reading = reading
        timed_out = self._last_command_s is None or now_s - self._last_command_s > self.config.command_timeout_s
        if timed_out and not self._holding and not reading.fault:
            # Hold where the arm IS (not where it was going): motors stay on, nothing moves.
            gripper_m = reading.gripper_m
            self._ctrl.command(reading.joints_rad, gripper_m, now_s, 0.0)
            self._holding = True
            self.counters.watchdog_holds += 1
            self.counters.last_watchdog_delay_s = now_s - (self._last_command_s if self._last_command_s is not None else now_s)
        if reading.fault:
            status = f"FAULT (latched): {reading.fault}"
        elif self._last_command_s is None:
            status = "holding start position: no command received yet"
        elif self._holding:
            status = f"holding measured position: no valid command for > {self.config.command_timeout_s * 1e3:.0f} ms"
        else:
            status = "tracking joint commands"
        return DriverState(
            reading=reading,
            gripper_norm=self.config.gripper.to_norm(reading.gripper_m),
            ee_pose_hw=self._kin.forward(reading.joints_rad),
            holding=self._holding,
            status=status,
        )

    @property
    def fault(self) -> str:
        return self._last_reading.fault if self._last_reading is not None else ""

    def hold_measured(self, now_s: float) -> None:
        """Command the last measured position now (shutdown, deactivation)."""
        r = self._last_reading
        if r is not None and not r.fault:
            self._ctrl.command(r.joints_rad, r.gripper_m, now_s, 0.0)
            self._holding = True

    def close(self) -> None:
        self._ctrl.close()

    def home(self, now_s: float, duration_s: float = 3.0) -> str:
        """Drive to the all-zero home pose over `duration_s` (operator-authorized only)."""
        if self.fault:
            return f"refused: controller fault latched: {self.fault}"
        reading = self._ctrl.read(now_s)
        self._ctrl.command(np.zeros(JOINTS_PER_ARM), reading.gripper_m, now_s, duration_s)
        self._last_command_s = now_s + duration_s  # the watchdog starts after the move's end
        self._holding = False
        return f"homing over {duration_s:.1f} s"
