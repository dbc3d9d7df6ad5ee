"""Gate configuration: every limit with its unit and its source. Defaults are the safe ones."""

from __future__ import annotations

from dataclasses import dataclass

from egomimic_hw.errors import ConfigError


@dataclass(frozen=True)
class GateConfig:
    max_command_age_s: float = 0.1
    """A proposed command older than this (stamp vs now) is stale: 3 control periods."""
    command_timeout_s: float = 0.11
    """ARMED with no command for this long -> HOLD (STALE_COMMAND), detected by the watchdog."""
    arming_timeout_s: float = 10.0
    """ARMING waits this long for the first proposed command (the operator arms, then starts
    the policy), then gives up with STALE_COMMAND and returns to DISARMED."""
    max_state_age_s: float = 0.1
    """Measured joint state older than this is stale (the driver publishes at 100 Hz)."""
    max_translation_step_m: float = 0.08
    """Command vs measured EE translation (upstream parity)."""
    max_rotation_step_rad: float = 0.5
    """Command vs measured EE geodesic rotation (upstream parity)."""
    quat_norm_tolerance: float = 1e-3
    joint_step_window_s: float = 0.2
    """Joint step limit = joint_vel_max x this window (the SDK preview time, upstream parity)."""
    start_translation_tolerance_m: float = 0.03
    start_rotation_tolerance_rad: float = 0.2
    shadow_commands: int = 3
    """Commands validated but not forwarded while ARMING (upstream: one shadow inference)."""

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (isinstance(value, (int, float)) and value >= 0):
                raise ConfigError(f"gate parameter {name} must be a number >= 0, got {value!r}")
