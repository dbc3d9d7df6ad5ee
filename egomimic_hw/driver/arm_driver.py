"""One arm's driver logic, ROS-free: command validation, the command watchdog, read-back, FK.

The driver node is a thin rclpy adapter over `ArmDriver`. Rules (docs/eva.md):
- commands arrive as 6 joints + normalized gripper (0 closed .. 1 open), named in any order
  (joint_order.py); the per-arm gripper calibration maps them to metres. A malformed command is
  refused and counted, never sent;
- defence in depth behind the safety gate: a command with a joint outside the X5 limits, or a
  step from the driver's own measured position larger than the joint speed limits allow over
  one command period plus the preview, is refused; the driver then holds the measured position
  at once (it does not keep going to the previous target) and counts the reason;
- its own measurements are checked before they are trusted (egomimic_safety.plausibility): an
  implausible reading refuses commands until a plausible one arrives, and a hold goes to the
  last plausible joints, clamped inside the limits;
- watchdog: with no valid command for `command_timeout_s`, the driver commands the measured
  position once and keeps holding it. A later valid command resumes tracking (the gate decides
  what is valid; the driver never invents motion);
- a controller fault (SDK emergency, frozen state) latches: no command is sent any more;
- homing only through `home()`, which the node exposes as an explicit service.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from egomimic_hw.description import CONTROL_RATE_HZ, JOINTS_PER_ARM, VALUES_PER_ARM, X5_LIMITS, Arm, GripperCalibration
from egomimic_hw.driver.base import ArmController, ArmReading, home_pose
from egomimic_hw.driver.joint_order import in_arm_order
from egomimic_hw.errors import ConfigError
from egomimic_hw.kinematics import ArmKinematics
from egomimic_safety.plausibility import StateMonitor, clamp_to_limits


@dataclass(frozen=True)
class DriverConfig:
    """Driver behaviour of one arm; defaults from docs/eva.md."""

    arm: Arm
    command_timeout_s: float = field(
        default=0.1,
        metadata={"help": "watchdog: with no valid command for this long, s, the arm holds its measured position"},
    )
    preview_s: float = field(
        default=0.2,
        metadata={
            "help": "each target is stamped controller time + this, s; the SDK interpolates to it",
            "range": (0.0, 1.0),
        },
    )
    gripper: GripperCalibration = field(default_factory=GripperCalibration)
    command_period_s: float = field(
        default=1.0 / CONTROL_RATE_HZ,
        metadata={
            "help": "the gate's command period, s: a command may step from the measured joints by at most "
            "the joint speed limits x (this + preview_s)"
        },
    )
    """What the arm can do before the next command: the step check's time budget."""

    def __post_init__(self) -> None:
        if not self.command_timeout_s > 0:
            raise ConfigError(f"command_timeout_s must be > 0, got {self.command_timeout_s}")
        if not 0 < self.command_period_s <= 1.0:
            raise ConfigError(f"command_period_s must be in (0, 1] s, got {self.command_period_s}")
        if not 0 <= self.preview_s <= 1.0:
            raise ConfigError(f"preview_s must be in [0, 1] s, got {self.preview_s}")


@dataclass
class DriverCounters:
    commands_received: int = 0
    commands_applied: int = 0
    commands_refused: int = 0
    refusals: Counter = field(default_factory=Counter)
    """Refused commands per reason key (malformed, fault, outside_limits, step_too_large,
    implausible_state, no_state, and the node's own: foreign_publisher, unknown_publisher,
    gate_not_armed, joint_names)."""
    implausible_readings: int = 0
    watchdog_holds: int = 0
    last_watchdog_delay_s: float = float("nan")
    """Time from the last valid command to the watchdog's hold, at the last hold (the timeout plus
    the node's wake-up latency: it wakes at watchdog_due_s, not at its next tick)."""


@dataclass(frozen=True)
class DriverState:
    """What the node publishes each period."""

    reading: ArmReading
    gripper_norm: float
    ee_pose_hw: np.ndarray | None
    """FK of the measured joints; None on ticks that publish no pose (tick(with_pose=False))."""
    holding: bool
    """True while the watchdog holds the measured position."""
    status: str
    """One line for /diagnostics: why the driver does what it does."""


HOME_SPEED_RAD_S = 0.5
"""Average speed of the farthest joint on a `home` move: a tenth of the X5's slowest joint
limit (5 rad/s), slow enough to watch and stop."""
HOME_DURATION_S = (1.0, 10.0)
"""A home move takes at least 1 s (a short move is still a gentle one) and at most 10 s."""


class ArmDriver:
    def __init__(self, config: DriverConfig, controller: ArmController, kinematics: ArmKinematics):
        self.config = config
        self._ctrl = controller
        self._kin = kinematics
        self.counters = DriverCounters()
        self._last_command_s: float | None = None
        self._holding = True  # nothing commanded yet: the SDK holds its start position
        self._last_reading: ArmReading | None = None
        self._monitor = StateMonitor()
        self._implausible = False
        self.refusal = ""

    def on_command(self, positions: np.ndarray, now_s: float, names: Sequence[str] = ()) -> bool:
        """Apply a joint command `[q0..q5, gripper_norm]`, or its values named by `names` in any
        order; False (counted, and the measured position held) when refused."""
        self.counters.commands_received += 1
        values, why = in_arm_order(positions, names, self.config.arm.joint_names)
        key = "joint_names"
        if not why:
            key, why = self._command_problem(values)
        if why:
            self._refuse(key, why, now_s)
            return False
        gripper_norm = float(np.clip(values[JOINTS_PER_ARM], 0.0, 1.0))
        self._ctrl.command(
            values[:JOINTS_PER_ARM], self.config.gripper.to_metres(gripper_norm), now_s, self.config.preview_s
        )
        self.counters.commands_applied += 1
        self._last_command_s = now_s
        self._holding = False
        return True

    def refuse_command(self, key: str, why: str, now_s: float) -> None:
        """Refuse a command its receiver judged before its values (its publisher, the gate's
        state): counted as received and refused under `key`, like every other refusal."""
        self.counters.commands_received += 1
        self._refuse(key, why, now_s)

    def _refuse(self, key: str, why: str, now_s: float) -> None:
        """Count a refused command under `key` and hold the measured position now: a refused
        command means the stream can no longer be trusted, so the arm must not keep going to
        the previous target either."""
        self.counters.commands_refused += 1
        self.counters.refusals[key] += 1
        self.refusal = why
        if not self._holding:
            self.hold_measured(now_s)

    def _command_problem(self, values: np.ndarray) -> tuple[str, str]:
        fault = self.fault
        if fault:
            return "fault", f"controller fault latched: {fault}"
        if values.shape != (VALUES_PER_ARM,):
            return "malformed", f"expected {VALUES_PER_ARM} values (6 joints + gripper), got shape {values.shape}"
        if not np.all(np.isfinite(values)):
            return "malformed", f"non-finite value in {values.tolist()}"
        q = values[:JOINTS_PER_ARM]
        lo, hi = X5_LIMITS.pos_min, X5_LIMITS.pos_max
        if np.any(q < lo) or np.any(q > hi):
            j = int(np.argmax(np.maximum(lo - q, q - hi)))
            return "outside_limits", f"joint{j + 1} target {q[j]:.3f} rad outside [{lo[j]:.3f}, {hi[j]:.3f}]"
        if self._monitor.last is None:
            return "no_state", "no plausible measurement yet"
        if self._implausible:
            return "implausible_state", f"the last measurement was implausible: {self._monitor.last_problem}"
        allowed = X5_LIMITS.vel_max * (self.config.command_period_s + self.config.preview_s)
        step = np.abs(q - self._monitor.last.joints_rad)
        j = int(np.argmax(step / allowed))
        if step[j] > allowed[j]:
            return "step_too_large", (
                f"joint{j + 1} step {step[j]:.3f} rad from the measured position > {allowed[j]:.3f} rad "
                f"({X5_LIMITS.vel_max[j]} rad/s x {self.config.command_period_s + self.config.preview_s:.3f} s)"
            )
        return "", ""

    def tick(self, now_s: float, with_pose: bool = True) -> DriverState:
        """Read the arm, run the watchdog, compute FK (only `with_pose`: the node publishes the
        pose at a lower rate than the joints); called at the publication rate."""
        reading = self._read(now_s)
        self._run_watchdog(now_s, reading)
        if reading.fault:
            status = f"FAULT (latched): {reading.fault}"
        elif self._implausible:
            status = f"holding: implausible measurement ({self._monitor.last_problem})"
        elif self._last_command_s is None:
            status = "holding start position: no command received yet"
        elif self._holding:
            status = (
                f"holding measured position: no valid command for > {self.config.command_timeout_s * 1e3:.0f} ms"
                + (f" (last refusal: {self.refusal})" if self.refusal else "")
            )
        else:
            status = "tracking joint commands"
        return DriverState(
            reading=reading,
            gripper_norm=self.config.gripper.to_norm(reading.gripper_m),
            ee_pose_hw=self._kin.forward(reading.joints_rad) if with_pose else None,
            holding=self._holding,
            status=status,
        )

    def watchdog_due_s(self) -> float | None:
        """When the watchdog will hold if no valid command comes first (the caller's clock), or
        None when it has nothing to watch (holding already, nothing commanded, a latched fault).
        The node wakes at this instant instead of waiting for its next tick, so the hold comes
        within the timeout plus the wake-up latency, not plus a period."""
        if self._holding or self._last_command_s is None or self.fault:
            return None
        return self._last_command_s + self.config.command_timeout_s

    def check_watchdog(self, now_s: float) -> bool:
        """Between ticks, at `watchdog_due_s()`: read the arm and hold it where it is if no valid
        command came in time. True when it held (the reading is not published: ticks are)."""
        if self.watchdog_due_s() is None:
            return False
        assert self._last_command_s is not None  # watchdog_due_s() is None until a command came
        if now_s - self._last_command_s <= self.config.command_timeout_s:
            return False
        self._run_watchdog(now_s, self._read(now_s))
        return self._holding

    def _read(self, now_s: float) -> ArmReading:
        reading = self._ctrl.read(now_s)
        self._last_reading = reading
        if not reading.fault:
            problem = self._monitor.check(reading.joints_rad, reading.measured_at_s)
            if problem and not self._implausible:
                self.counters.implausible_readings += 1
            self._implausible = bool(problem)
        return reading

    def _run_watchdog(self, now_s: float, reading: ArmReading) -> None:
        timed_out = self._last_command_s is None or now_s - self._last_command_s > self.config.command_timeout_s
        if (timed_out or self._implausible) and not self._holding and not reading.fault:
            # Hold where the arm IS (not where it was going): motors stay on, nothing moves.
            self.hold_measured(now_s)
            if timed_out:
                self.counters.watchdog_holds += 1
                self.counters.last_watchdog_delay_s = now_s - (
                    self._last_command_s if self._last_command_s is not None else now_s
                )

    @property
    def fault(self) -> str:
        return self._last_reading.fault if self._last_reading is not None else ""

    def hold_measured(self, now_s: float) -> None:
        """Command the last plausible measured position, clamped inside the joint limits, now
        (watchdog, refusals, shutdown, deactivation)."""
        r = self._last_reading
        last = self._monitor.last
        if r is None or r.fault or last is None:
            return
        self._ctrl.command(clamp_to_limits(last.joints_rad), r.gripper_m, now_s, 0.0)
        self._holding = True

    def close(self) -> None:
        self._ctrl.close()

    def home(self, now_s: float, duration_s: float | None = None) -> str:
        """Drive to the home pose (operator-authorized only): all joints at zero on the hardware,
        the start pose in simulation (base.home_pose). The move takes `duration_s`, by default
        the farthest joint's distance at HOME_SPEED_RAD_S, within HOME_DURATION_S."""
        if self.fault:
            return f"refused: controller fault latched: {self.fault}"
        reading = self._ctrl.read(now_s)
        joints, gripper_m = home_pose(self._ctrl)
        if duration_s is None:
            farthest = float(np.max(np.abs(joints - reading.joints_rad)))
            duration_s = float(np.clip(farthest / HOME_SPEED_RAD_S, *HOME_DURATION_S))
        self._ctrl.command(joints, reading.gripper_m if gripper_m is None else gripper_m, now_s, duration_s)
        self._last_command_s = now_s + duration_s  # the watchdog starts after the move's end
        self._holding = False
        return f"homing over {duration_s:.1f} s"
