"""Gate configuration: every limit with its unit and its source. Defaults are the safe ones.

Clamp or reject: the checks that can be clamped (workspace, rate vs the previous command,
joint limits, joint step, gripper range) each take a `CLAMP` / `REJECT` action. Everything
defaults to REJECT except the gripper range, which is clamped and counted (GRIPPER_RANGE).
A clamp never hides a broken input: non-finite values, bad quaternions, wrong frames, stale
data, IK failures and jumps against the measured pose always reject.

Two clocks (ros2_control's `update(time, period)` idea, made explicit): message stamps are
compared with `now_s` (the ROS clock that stamps them); silence (no message received) is
measured on `mono_s`, a monotonic clock, so a wall-clock step can never hide a dead producer
(rclpy timers and rates follow the ROS clock, which can step back or stop).

Each field's text is its parameter description (`metadata["help"]`, what `ros2 param describe`
shows on the gate node) and its `range` what the parameter accepts at start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from egomimic_hw.description import ARMS, CAMERAS, CONTROL_RATE_HZ, DEFAULT_PREVIEW_S, X5_LIMITS
from egomimic_hw.errors import ConfigError
from egomimic_safety.plausibility import PlausibilityConfig

REJECT = "reject"
CLAMP = "clamp"
ACTIONS = (REJECT, CLAMP)

# What a parameter accepts at start (ros2 param describe shows these ranges): the physically
# meaningful span, not a tuning. __post_init__ adds what a range cannot say (> 0, orderings).
TIME_MAX_S = 10.0
"""Ages, timeouts and windows: a fault detected after more than 10 s is no detection."""
ARMING_MAX_S = 600.0
"""Arming waits and lockouts: an operator's time scale."""
RATE_MAX_HZ = 1000.0
ANGLE_MAX_RAD = math.pi
SPEED_FACTOR_MAX = 10.0
SHADOW_COMMANDS_MAX = 100
WORKSPACE_HELP = (
    "Per-arm box (hardware frame, metres) the commanded EE position (link6) must stay in. The defaults "
    "are a generous envelope inside the X5's link6 reach (sampled over the joint limits: |x|, |y| <= "
    "0.62 m, z in [-0.33, 0.71] m); deployments narrow it in YAML."
)


@dataclass(frozen=True)
class GateConfig:
    # -- time -------------------------------------------------------------------------------
    control_rate_hz: float = field(
        default=CONTROL_RATE_HZ,
        metadata={
            "help": "The policy / gate rate, Hz (30 Hz upstream); per-step limits are speeds divided by it.",
            "range": (1.0, RATE_MAX_HZ),
        },
    )
    max_command_age_s: float = field(
        default=0.1,
        metadata={
            "help": "A proposed command whose stamp is older than this (s) is stale (MoveIt Servo's 0.1 s).",
            "range": (0.0, TIME_MAX_S),
        },
    )
    max_command_late_s: float = field(
        default=0.3,
        metadata={
            "help": "A command older than max_command_age_s but not older than this (s) arrived late (a loaded "
            "machine delayed it): it is not forwarded (deferred, counted) and is no fault by itself. Older "
            "than this, or not after the last accepted stamp, is a producer fault (a clock jump, a "
            "replay): STALE_COMMAND.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    deferral_hold_after_s: float = field(
        default=0.3,
        metadata={
            "help": "ARMED, commands arriving, yet none forwarded for this long (s) because each was deferred "
            "(late state, camera or command): the lateness is persistent, HOLD with the last deferral's "
            "reason. The same safety argument as state_hold_after_s: nothing is forwarded meanwhile.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    max_command_future_s: float = field(
        default=0.05,
        metadata={
            "help": "A command stamped further than this (s) in the future is refused (a producer clock jump); "
            "the same bound applies to measured-state stamps (STALE_STATE) and camera frame stamps "
            "(STALE_CAMERA): a stamp from the future would otherwise look fresh for as long as it leads.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    command_timeout_s: float = field(
        default=0.3,
        metadata={
            "help": "ARMED with no command received for this long (s, monotonic) -> HOLD (STALE_COMMAND). Silence "
            "shorter than this is a late producer, not a fault: there is nothing to forward, and each "
            "driver already holds its measured position 100 ms after its last command (its own "
            "watchdog), so the arm is held physically at 100 ms either way; the gate latches (and sends "
            "its own hold) at 0.3 s, 9 control periods, so that a policy delayed by a loaded machine does "
            "not stop the robot. A dead producer is held by the gate within 310 ms (with the 100 Hz "
            "watchdog) and by the drivers within 110 ms.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    arming_timeout_s: float = field(
        default=10.0,
        metadata={
            "help": "ARMING waits this long (s) for `shadow_commands` validated commands (the operator arms, then "
            "starts the policy), through late state, cameras and commands (nothing is forwarded while "
            "ARMING), then gives up and returns to DISARMED: STALE_COMMAND if no command came, else the "
            "last deferral's reason.",
            "range": (0.0, ARMING_MAX_S),
        },
    )
    max_command_rate_hz: float = field(
        default=2.0 * CONTROL_RATE_HZ,
        metadata={
            "help": "More command stamps than this rate (Hz) within `command_rate_window_s` is a flood "
            "(COMMAND_RATE): a producer replaying or looping. 2x the control rate tolerates timer jitter.",
            "range": (1.0, RATE_MAX_HZ),
        },
    )
    command_rate_window_s: float = field(
        default=0.1,
        metadata={
            "help": "The window (s) over which command stamps are counted against max_command_rate_hz.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    max_state_age_s: float = field(
        default=0.08,
        metadata={
            "help": "Measured joint state older than this (s; stamp, or silence on the monotonic clock) is stale: "
            "8 missed driver periods at 100 Hz. A command is forwarded only against state fresher than "
            "this; with staler state it is held back (deferred, counted), not forwarded.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    state_hold_after_s: float = field(
        default=0.3,
        metadata={
            "help": "Stale state latches HOLD (STALE_STATE) only once the newest state is this old (s): a loaded "
            "machine that delays the drivers' 100 Hz stream by a few periods must not stop the robot. "
            "Safety argument: from max_state_age_s on, nothing is forwarded, and each driver holds its "
            "measured position 100 ms after its last command; the arm therefore never executes a command "
            "checked against state older than max_state_age_s, and moves at most what the last "
            "forwarded command allows (0.6 m/s x 2 periods = 40 mm, inside the 80 mm jump limit) while "
            "the latch waits. 0.3 s is 30 driver periods, 20x the p99 publication jitter measured on an "
            "idle machine and 3x the longest stall seen under a one-core hog.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    state_limit_margin_rad: float = field(
        default=PlausibilityConfig.limit_margin_rad,
        metadata={
            "help": "A measured joint further than this (rad) outside its limit is STATE_IMPLAUSIBLE (see "
            "egomimic_safety/plausibility.py for this and the next two).",
            "range": (0.0, ANGLE_MAX_RAD),
        },
    )
    state_speed_factor: float = field(
        default=PlausibilityConfig.speed_factor,
        metadata={
            "help": "A measured joint moving faster than this x its speed limit between two samples is "
            "STATE_IMPLAUSIBLE (>= 1: the arm may reach its speed limit).",
            "range": (1.0, SPEED_FACTOR_MAX),
        },
    )
    state_noise_rad: float = field(
        default=PlausibilityConfig.noise_rad,
        metadata={
            "help": "Allowed (rad) on top of the speed limit between two samples (encoder noise).",
            "range": (0.0, ANGLE_MAX_RAD),
        },
    )
    implausible_arm_lockout_s: float = field(
        default=1.0,
        metadata={
            "help": "Arming is refused for this long (s) after an implausible measurement of either arm (a "
            "spoofing publisher that pauses must not find an armable gate).",
            "range": (0.0, ARMING_MAX_S),
        },
    )
    # -- cameras ----------------------------------------------------------------------------
    required_cameras: tuple[str, ...] = field(
        default=CAMERAS,
        metadata={
            "help": "Cameras whose health must be OK to arm and to stay armed (the graph passes the cameras in "
            "use; commands from outside, e.g. tests with policy:=none, may require none: [])."
        },
    )
    max_camera_age_s: float = field(
        default=0.1,
        metadata={
            "help": "A camera whose newest frame, or newest health report (monotonic), is older than this (s) is "
            "late (3 frames at 30 Hz): commands are deferred, not forwarded, while it is.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    camera_hold_after_s: float = field(
        default=0.3,
        metadata={
            "help": "A late camera (no frame, or the camera node's STALLED) latches HOLD (STALE_CAMERA) once its "
            "newest frame is this old (s; 9 frames at 30 Hz). A camera that reports FROZEN or ERROR is a "
            "fault at once. Safety argument: the same as state_hold_after_s (nothing is forwarded while "
            "a camera is late; the drivers hold after 100 ms).",
            "range": (0.0, TIME_MAX_S),
        },
    )
    max_observation_age_s: float = field(
        default=1.5,
        metadata={
            "help": "A command answering an observation older than this (s) is STALE_CAMERA. Chunked policies "
            "execute rows for up to 1 s after the query (query_frequency 30 at 30 Hz) plus inference "
            "time (98-535 ms on a 4090, upstream's figures). observation_stamp == 0 marks a command that answers no "
            "observation (teleop, tests): that check is skipped, the camera health checks still apply.",
            "range": (0.0, TIME_MAX_S),
        },
    )
    # -- Cartesian --------------------------------------------------------------------------
    quat_norm_tolerance: float = field(
        default=1e-3,
        metadata={
            "help": "A commanded quaternion whose norm differs from 1 by more than this is BAD_QUATERNION (never "
            "normalized silently: a wrong norm means a broken producer).",
            "range": (0.0, 0.5),
        },
    )
    max_translation_step_m: float = field(
        default=0.08,
        metadata={
            "help": "Command vs measured EE translation, m (upstream parity): further is TRANSLATION_JUMP, never "
            "clamped.",
            "range": (0.0, 1.0),
        },
    )
    max_rotation_step_rad: float = field(
        default=0.5,
        metadata={
            "help": "Command vs measured EE geodesic rotation, rad (upstream parity): further is ROTATION_JUMP, "
            "never clamped.",
            "range": (0.0, math.pi),
        },
    )
    max_ee_speed_m_s: float = field(
        default=X5_LIMITS.ee_speed_max_m_s,
        metadata={
            "help": "Translation limit vs the previous accepted command = this (m/s) x dt, dt = the difference of "
            "the two commands' stamps (the X5's declared 0.6 m/s -> 20 mm per 33 ms control period, "
            "11 mm for a command 18 ms after the previous one). At most the X5's declared speed: the SDK "
            "does not enforce it, the gate is all that does.",
            "range": (0.0, X5_LIMITS.ee_speed_max_m_s),
        },
    )
    max_ee_angular_speed_rad_s: float = field(
        default=X5_LIMITS.ee_angular_speed_max_rad_s,
        metadata={
            "help": "Rotation limit vs the previous accepted command = this (rad/s) x dt (1.8 rad/s -> 60 mrad per "
            "control period). At most the X5's declared angular speed, as max_ee_speed_m_s.",
            "range": (0.0, X5_LIMITS.ee_angular_speed_max_rad_s),
        },
    )
    rate_limit_max_dt_periods: float = field(
        default=2.0,
        metadata={
            "help": "dt in the two limits above is capped at this many control periods (2 -> 67 ms at 30 Hz), so "
            "a pause in the stream never grants a large step (0.6 m/s x 67 ms = 40 mm at most). After a deferral "
            "the forwarded target catches up with the producer's plan at this rate (clamped toward it; the "
            "producer's own steps between its proposals are held to the limits, deferred or not: egomimic_safety.gate).",
            "range": (0.0, 10.0),
        },
    )
    command_step_action: str = field(
        default=REJECT,
        metadata={
            "help": "reject | clamp: a command beyond the two rate limits above (TRANSLATION_RATE, ROTATION_RATE)."
        },
    )
    workspace_left_min_m: tuple[float, float, float] = field(
        default=(-0.1, -0.6, -0.2),
        metadata={"help": "Left arm: the low corner [x, y, z] of the workspace box. " + WORKSPACE_HELP},
    )
    workspace_left_max_m: tuple[float, float, float] = field(
        default=(0.6, 0.6, 0.7),
        metadata={"help": "Left arm: the high corner [x, y, z] of the workspace box. " + WORKSPACE_HELP},
    )
    workspace_right_min_m: tuple[float, float, float] = field(
        default=(-0.1, -0.6, -0.2),
        metadata={"help": "Right arm: the low corner [x, y, z] of the workspace box. " + WORKSPACE_HELP},
    )
    workspace_right_max_m: tuple[float, float, float] = field(
        default=(0.6, 0.6, 0.7),
        metadata={"help": "Right arm: the high corner [x, y, z] of the workspace box. " + WORKSPACE_HELP},
    )
    workspace_action: str = field(
        default=REJECT,
        metadata={"help": "reject | clamp: a commanded EE position outside its arm's workspace box (WORKSPACE)."},
    )
    # -- joints -----------------------------------------------------------------------------
    joint_limit_margin_rad: float = field(
        default=0.01,
        metadata={
            "help": "Joint targets must stay this far (rad) inside the SDK's joint limits (which it clips silently).",
            "range": (0.0, ANGLE_MAX_RAD),
        },
    )
    joint_limit_action: str = field(
        default=REJECT,
        metadata={
            "help": "reject | clamp: a joint target outside the limits shrunk by joint_limit_margin_rad (JOINT_LIMIT)."
        },
    )
    joint_step_window_s: float = field(
        default=DEFAULT_PREVIEW_S,
        metadata={
            "help": "Joint step vs the measured joints <= joint_vel_max x this window (s; the SDK preview time, "
            "upstream parity: 5 rad/s x 0.2 s = 1 rad).",
            "range": (0.0, 2.0),
        },
    )
    joint_step_action: str = field(
        default=REJECT,
        metadata={
            "help": "reject | clamp: a joint target further from the measured joints than joint_step_window_s "
            "allows (JOINT_STEP)."
        },
    )
    gripper_action: str = field(
        default=CLAMP,
        metadata={
            "help": "reject | clamp: finite gripper values outside [0, 1] (GRIPPER_RANGE); by default clamped "
            "and counted."
        },
    )
    # -- arming -----------------------------------------------------------------------------
    start_translation_tolerance_m: float = field(
        default=0.03,
        metadata={
            "help": "While ARMING, the first command must start this near (m) the measured EE position "
            "(START_TOO_FAR).",
            "range": (0.0, 1.0),
        },
    )
    start_rotation_tolerance_rad: float = field(
        default=0.2,
        metadata={
            "help": "While ARMING, the first command must start this near (rad) the measured EE orientation "
            "(START_TOO_FAR).",
            "range": (0.0, math.pi),
        },
    )
    shadow_commands: int = field(
        default=3,
        metadata={
            "help": "Commands validated but not forwarded while ARMING (upstream: one shadow inference).",
            "range": (0, SHADOW_COMMANDS_MAX),
        },
    )

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if name.endswith("_action"):
                if value not in ACTIONS:
                    raise ConfigError(f"gate parameter {name} must be one of {list(ACTIONS)}, got {value!r}")
            elif name == "required_cameras":
                unknown = [c for c in value if c not in CAMERAS]
                if unknown or len(set(value)) != len(value):
                    raise ConfigError(f"required_cameras {list(value)}: unknown or repeated; choices: {list(CAMERAS)}")
            elif name.startswith("workspace_"):
                if len(value) != 3 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in value):
                    raise ConfigError(f"gate parameter {name} must be 3 finite numbers [x, y, z] m, got {value!r}")
            elif (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value >= 0)
            ):
                raise ConfigError(f"gate parameter {name} must be a finite number >= 0, got {value!r}")
        for arm in (a.value for a in ARMS):
            lo, hi = getattr(self, f"workspace_{arm}_min_m"), getattr(self, f"workspace_{arm}_max_m")
            if not all(a < b for a, b in zip(lo, hi)):
                raise ConfigError(f"workspace_{arm}: min {list(lo)} must be below max {list(hi)} on every axis")
        for name in (
            "control_rate_hz",
            "max_command_rate_hz",
            "command_rate_window_s",
            "max_command_age_s",
            "command_timeout_s",
            "max_state_age_s",
            "max_camera_age_s",
            "rate_limit_max_dt_periods",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"gate parameter {name} must be > 0, got {getattr(self, name)}")
        for late, hold in (
            ("max_state_age_s", "state_hold_after_s"),
            ("max_camera_age_s", "camera_hold_after_s"),
            ("max_command_age_s", "max_command_late_s"),
        ):
            if getattr(self, hold) < getattr(self, late):
                raise ConfigError(
                    f"gate parameter {hold} ({getattr(self, hold)}) must be >= {late} ({getattr(self, late)})"
                )
        step_rad = float(min(X5_LIMITS.vel_max)) * self.joint_step_window_s
        back_rad = self.state_limit_margin_rad + self.joint_limit_margin_rad
        if step_rad <= back_rad:
            # A measurement may lie state_limit_margin_rad beyond a limit and still be plausible;
            # every target from there (the hold target too) is inside the joint bounds, up to
            # back_rad away: a smaller step allowance leaves no target that passes both checks.
            raise ConfigError(
                f"joint_step_window_s {self.joint_step_window_s} s allows joint steps of {step_rad:.3f} rad, "
                f"not more than the {back_rad:.3f} rad from a plausible measurement beyond a limit "
                f"(state_limit_margin_rad + joint_limit_margin_rad) back inside the joint bounds"
            )
        if self.max_command_rate_hz < self.control_rate_hz:
            raise ConfigError(
                f"max_command_rate_hz {self.max_command_rate_hz} is below the control rate {self.control_rate_hz}"
            )

    @property
    def plausibility(self) -> PlausibilityConfig:
        """The measured-state checks (STATE_IMPLAUSIBLE) with this config's numbers."""
        return PlausibilityConfig(
            limit_margin_rad=self.state_limit_margin_rad,
            speed_factor=self.state_speed_factor,
            noise_rad=self.state_noise_rad,
        )

    @property
    def period_s(self) -> float:
        return 1.0 / self.control_rate_hz

    @property
    def max_rate_dt_s(self) -> float:
        """The longest dt the per-time rate limits grant (seconds)."""
        return self.rate_limit_max_dt_periods / self.control_rate_hz

    @property
    def max_commands_per_window(self) -> int:
        """Command stamps allowed in any `command_rate_window_s` window."""
        return max(1, math.ceil(self.max_command_rate_hz * self.command_rate_window_s - 1e-9))

    def workspace(self, arm_value: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return getattr(self, f"workspace_{arm_value}_min_m"), getattr(self, f"workspace_{arm_value}_max_m")


WATCHDOG_RATE_RANGE_HZ = (10.0, 1000.0)
CAMERA_LIVENESS = ("health_reports", "image_stamps")


@dataclass(frozen=True)
class GateNodeConfig:
    """What the gate node adds around SafetyGate: its watchdog, its kinematics and whom it
    trusts for measured state. Declared as parameters like GateConfig, so each has a description
    and a range, and is built and checked without a node."""

    watchdog_rate_hz: float = field(
        default=100.0,
        metadata={
            "help": "Watchdog rate, Hz: silence (no command, state or camera health) is seen within one period; "
            "at 100 Hz a 100 ms timeout is seen within 10 ms (the HOLD target is still re-sent only once "
            "per control period).",
            "range": WATCHDOG_RATE_RANGE_HZ,
        },
    )
    check_state_publishers: bool = field(
        default=True,
        metadata={
            "help": "Accept joint_states only from the driver nodes (driver_<arm> in this namespace); false only "
            "for in-process adapter tests, which call the callbacks without a publisher id."
        },
    )
    kinematics: str = field(
        default="auto",
        metadata={"help": "FK/IK backend: auto (the SDK solver where it imports, else Pinocchio), sdk or pinocchio."},
    )
    camera_liveness: str = field(
        default="health_reports",
        metadata={
            "help": "How a required camera is known to be live. health_reports: the project's camera node's "
            "cameras/<cam>/health reports (frame age, and freezes: a camera repeating one picture faults "
            "at once). image_stamps: the header stamps of cameras/<cam>/image_raw, read best effort, for a "
            "stock driver with no health topic (realsense2_camera, usb_cam): frame age only, a frozen "
            "picture with fresh stamps is not detected."
        },
    )

    unsafe_limits: bool = field(
        default=False,
        metadata={
            "help": "Accept GateConfig limits above their documented safe maxima (lower bounds, types and "
            "orderings still hold). The launchers set it only from the launch argument unsafe_limits:=true (a "
            "params_file cannot) and log every such value at start; /diagnostics reports it. For bench "
            "tests of the gate itself, never on a robot near people.",
        },
    )

    def __post_init__(self) -> None:
        if self.camera_liveness not in CAMERA_LIVENESS:
            raise ConfigError(f"camera_liveness must be one of {list(CAMERA_LIVENESS)}, got {self.camera_liveness!r}")
        lo, hi = WATCHDOG_RATE_RANGE_HZ
        rate = self.watchdog_rate_hz
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not lo <= rate <= hi:
            raise ConfigError(f"watchdog_rate_hz must be a number in [{lo:g}, {hi:g}], got {rate!r}")

    @property
    def watchdog_period_s(self) -> float:
        return 1.0 / self.watchdog_rate_hz
