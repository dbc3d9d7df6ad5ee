"""Gate configuration: every limit with its unit and its source. Defaults are the safe ones.

Clamp or reject: the checks that can be clamped (workspace, rate vs the previous command,
joint limits, joint step, gripper range) each take a `CLAMP` / `REJECT` action. Everything
defaults to REJECT except the gripper range, which the issue defines as clamped and
counted. A clamp never hides a broken input: non-finite values, bad quaternions, wrong frames,
stale data, IK failures and jumps against the measured pose always reject.

Two clocks (ros2_control's `update(time, period)` idea, made explicit): message stamps are
compared with `now_s` (the ROS clock that stamps them); silence (no message received) is
measured on `mono_s`, a monotonic clock, so a wall-clock step can never hide a dead producer
(rclpy #1490, ros2 #1080 in ../shared/research/safety.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from egomimic_hw.description import ARMS, CAMERAS, CONTROL_RATE_HZ, DEFAULT_PREVIEW_S, X5_LIMITS
from egomimic_hw.errors import ConfigError
from egomimic_safety.plausibility import PlausibilityConfig

REJECT = "reject"
CLAMP = "clamp"
ACTIONS = (REJECT, CLAMP)


@dataclass(frozen=True)
class GateConfig:
    # -- time -------------------------------------------------------------------------------
    control_rate_hz: float = CONTROL_RATE_HZ
    """The policy / gate rate (30 Hz upstream); per-step limits are speeds divided by it."""
    max_command_age_s: float = 0.1
    """A proposed command whose stamp is older than this is stale (MoveIt Servo's 0.1 s)."""
    max_command_late_s: float = 0.3
    """A command older than max_command_age_s but not older than this arrived late (a loaded
    machine delayed it): it is not forwarded (deferred, counted) and is no fault by itself. Older
    than this, or not after the last accepted stamp, is a producer fault (a clock jump, a
    replay): STALE_COMMAND."""
    deferral_hold_after_s: float = 0.3
    """ARMED, commands arriving, yet none forwarded for this long because each was deferred
    (late state, camera or command): the lateness is persistent, HOLD with the last deferral's
    reason. The same safety argument as state_hold_after_s: nothing is forwarded meanwhile."""
    max_command_future_s: float = 0.05
    """A command stamped further than this in the future is refused (a producer clock jump);
    the same bound applies to measured-state stamps (STALE_STATE) and camera frame stamps
    (STALE_CAMERA): a stamp from the future would otherwise look fresh for as long as it leads."""
    command_timeout_s: float = 0.3
    """ARMED with no command received for this long (monotonic) -> HOLD (STALE_COMMAND). Silence
    shorter than this is a late producer, not a fault: there is nothing to forward, and each
    driver already holds its measured position 100 ms after its last command (its own
    watchdog), so the arm is held physically at 100 ms either way; the gate latches (and sends
    its own hold) at 0.3 s, 9 control periods, so that a policy delayed by a loaded machine does
    not stop the robot. A dead producer is held by the gate within 310 ms (with the 100 Hz
    watchdog) and by the drivers within 110 ms."""
    arming_timeout_s: float = 10.0
    """ARMING waits this long for `shadow_commands` validated commands (the operator arms, then
    starts the policy), through late state, cameras and commands (nothing is forwarded while
    ARMING), then gives up and returns to DISARMED: STALE_COMMAND if no command came, else the
    last deferral's reason."""
    max_command_rate_hz: float = 2.0 * CONTROL_RATE_HZ
    """More command stamps than this rate within `command_rate_window_s` is a flood
    (COMMAND_RATE): a producer replaying or looping. 2x the control rate tolerates timer jitter."""
    command_rate_window_s: float = 0.1
    max_state_age_s: float = 0.08
    """Measured joint state older than this (stamp, or silence on the monotonic clock) is stale:
    8 missed driver periods at 100 Hz. A command is forwarded only against state fresher than
    this; with staler state it is held back (deferred, counted), not forwarded."""
    state_hold_after_s: float = 0.3
    """Stale state latches HOLD (STALE_STATE) only once the newest state is this old: a loaded
    machine that delays the drivers' 100 Hz stream by a few periods must not stop the robot.
    Safety argument: from max_state_age_s on, nothing is forwarded, and each driver holds its
    measured position 100 ms after its last command; the arm therefore never executes a command
    checked against state older than max_state_age_s, and moves at most what the last
    forwarded command allows (0.6 m/s x 2 periods = 40 mm, inside the 80 mm jump limit) while
    the latch waits. 0.3 s is 30 driver periods, 20x the p99 publication jitter measured on an
    idle machine and 3x the longest stall seen under a one-core hog."""
    state_limit_margin_rad: float = PlausibilityConfig.limit_margin_rad
    """A measured joint further than this outside its limit is STATE_IMPLAUSIBLE (see
    egomimic_safety/plausibility.py for this and the next two)."""
    state_speed_factor: float = PlausibilityConfig.speed_factor
    """A measured joint moving faster than this x its speed limit between two samples is
    STATE_IMPLAUSIBLE."""
    state_noise_rad: float = PlausibilityConfig.noise_rad
    """Allowed on top of the speed limit between two samples (encoder noise)."""
    implausible_arm_lockout_s: float = 1.0
    """Arming is refused for this long after an implausible measurement of either arm (a
    spoofing publisher that pauses must not find an armable gate)."""
    # -- cameras ----------------------------------------------------------------------------
    required_cameras: tuple[str, ...] = CAMERAS
    """Cameras whose health must be OK to arm and to stay armed (the graph passes the cameras
    in use; commands from outside, e.g. tests with policy:=none, may require none)."""
    max_camera_age_s: float = 0.1
    """A camera whose newest frame, or newest health report (monotonic), is older than this is
    late (3 frames at 30 Hz): commands are deferred, not forwarded, while it is."""
    camera_hold_after_s: float = 0.3
    """A late camera (no frame, or the camera node's STALLED) latches HOLD (STALE_CAMERA) once
    its newest frame is this old (9 frames at 30 Hz). A camera that reports FROZEN or ERROR is a
    fault at once. Safety argument: the same as state_hold_after_s (nothing is forwarded while
    a camera is late; the drivers hold after 100 ms)."""
    max_observation_age_s: float = 1.5
    """A command answering an observation older than this is STALE_CAMERA. Chunked policies
    execute rows for up to 1 s after the query (query_frequency 30 at 30 Hz) plus inference
    time (98-535 ms on a 4090, EVA.md). observation_stamp == 0 marks a command that answers no
    observation (teleop, tests): that check is skipped, the camera health checks still apply."""
    # -- Cartesian --------------------------------------------------------------------------
    quat_norm_tolerance: float = 1e-3
    max_translation_step_m: float = 0.08
    """Command vs measured EE translation (upstream parity)."""
    max_rotation_step_rad: float = 0.5
    """Command vs measured EE geodesic rotation (upstream parity)."""
    max_ee_speed_m_s: float = X5_LIMITS.ee_speed_max_m_s
    """Translation limit vs the previous accepted command = this x dt, dt = the difference of
    the two commands' stamps (the X5's declared 0.6 m/s -> 20 mm per 33 ms control period,
    11 mm for a command 18 ms after the previous one)."""
    max_ee_angular_speed_rad_s: float = X5_LIMITS.ee_angular_speed_max_rad_s
    """Rotation limit vs the previous accepted command = this x dt (1.8 rad/s -> 60 mrad per
    control period)."""
    rate_limit_max_dt_periods: float = 2.0
    """dt in the two limits above is capped at this many control periods (2 -> 67 ms at 30 Hz),
    so a pause in the stream never grants a large step (0.6 m/s x 67 ms = 40 mm at most)."""
    command_step_action: str = REJECT
    workspace_left_min_m: tuple[float, float, float] = (-0.1, -0.6, -0.2)
    workspace_left_max_m: tuple[float, float, float] = (0.6, 0.6, 0.7)
    workspace_right_min_m: tuple[float, float, float] = (-0.1, -0.6, -0.2)
    workspace_right_max_m: tuple[float, float, float] = (0.6, 0.6, 0.7)
    """Per-arm box (hardware frame, metres) the commanded EE position (link6) must stay in. The
    defaults are a generous envelope inside the X5's link6 reach (sampled over the joint limits:
    |x|, |y| <= 0.62 m, z in [-0.33, 0.71] m); deployments narrow it in YAML."""
    workspace_action: str = REJECT
    # -- joints -----------------------------------------------------------------------------
    joint_limit_margin_rad: float = 0.01
    """Joint targets must stay this far inside the SDK's joint limits (which it clips silently)."""
    joint_limit_action: str = REJECT
    joint_step_window_s: float = DEFAULT_PREVIEW_S
    """Joint step vs the measured joints <= joint_vel_max x this window (the SDK preview time,
    upstream parity: 5 rad/s x 0.2 s = 1 rad)."""
    joint_step_action: str = REJECT
    gripper_action: str = CLAMP
    """Finite gripper values outside [0, 1] are clamped and counted (GRIPPER_RANGE)."""
    # -- arming -----------------------------------------------------------------------------
    start_translation_tolerance_m: float = 0.03
    start_rotation_tolerance_rad: float = 0.2
    shadow_commands: int = 3
    """Commands validated but not forwarded while ARMING (upstream: one shadow inference)."""

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
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"gate parameter {name} must be a finite number >= 0, got {value!r}")
        for arm in (a.value for a in ARMS):
            lo, hi = getattr(self, f"workspace_{arm}_min_m"), getattr(self, f"workspace_{arm}_max_m")
            if not all(a < b for a, b in zip(lo, hi)):
                raise ConfigError(f"workspace_{arm}: min {list(lo)} must be below max {list(hi)} on every axis")
        for name in ("control_rate_hz", "max_command_rate_hz", "command_rate_window_s", "max_command_age_s",
                     "command_timeout_s", "max_state_age_s", "max_camera_age_s", "rate_limit_max_dt_periods"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"gate parameter {name} must be > 0, got {getattr(self, name)}")
        for late, hold in (("max_state_age_s", "state_hold_after_s"), ("max_camera_age_s", "camera_hold_after_s"),
                           ("max_command_age_s", "max_command_late_s")):
            if getattr(self, hold) < getattr(self, late):
                raise ConfigError(f"gate parameter {hold} ({getattr(self, hold)}) must be >= {late} ({getattr(self, late)})")
        step_rad = float(min(X5_LIMITS.vel_max)) * self.joint_step_window_s
        back_rad = self.state_limit_margin_rad + self.joint_limit_margin_rad
        if step_rad <= back_rad:
            # A measurement may lie state_limit_margin_rad beyond a limit and still be plausible;
            # every target from there (the hold target too) is inside the joint bounds, up to
            # back_rad away: a smaller step allowance leaves no target that passes both checks.
            raise ConfigError(f"joint_step_window_s {self.joint_step_window_s} s allows joint steps of {step_rad:.3f} rad, "
                              f"not more than the {back_rad:.3f} rad from a plausible measurement beyond a limit "
                              f"(state_limit_margin_rad + joint_limit_margin_rad) back inside the joint bounds")
        if self.max_command_rate_hz < self.control_rate_hz:
            raise ConfigError(f"max_command_rate_hz {self.max_command_rate_hz} is below the control rate {self.control_rate_hz}")

    @property
    def plausibility(self) -> PlausibilityConfig:
        """The measured-state checks (STATE_IMPLAUSIBLE) with this config's numbers."""
        return PlausibilityConfig(limit_margin_rad=self.state_limit_margin_rad, speed_factor=self.state_speed_factor,
                                  noise_rad=self.state_noise_rad)

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
