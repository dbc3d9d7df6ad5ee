"""Which gripper calibration a driver uses: one function, so no node keeps its own rules.

Sources, in order: an explicit override (both endpoints, from the operator), else the backend's
default: `arx5` drives EVA's grippers and uses their measured endpoints
(`description.CALIBRATED_GRIPPERS`); `sim` reports the SDK's own 0..width range and uses the
uncalibrated defaults. An override of one endpoint only is refused: the other would silently
come from somewhere else, and a close of -0.012 m with a default open of 0.08 m (or the reverse)
maps every normalized command to the wrong width. Overrides are `None` when absent, never a
sentinel number: -1.0 cannot mean "unset" for a quantity that is legitimately negative.
"""

from __future__ import annotations

from egomimic_hw.description import CALIBRATED_GRIPPERS, Arm, GripperCalibration
from egomimic_hw.driver.backends import BACKENDS
from egomimic_hw.errors import ConfigError


def resolve_gripper_calibration(
    arm: Arm, backend: str, open_m: float | None = None, close_m: float | None = None
) -> GripperCalibration:
    """The calibration for `arm` on driver `backend`, overridden only by both endpoints."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown driver backend {backend!r}; choices: {list(BACKENDS)}")
    if (open_m is None) != (close_m is None):
        given, missing = ("open_m", "close_m") if close_m is None else ("close_m", "open_m")
        value = open_m if close_m is None else close_m
        raise ConfigError(
            f"gripper calibration override for {arm.value}: {given}={value} given without {missing}; "
            "set both gripper_open_m and gripper_close_m, or neither to use the "
            f"{'measured' if backend == 'arx5' else 'default'} endpoints"
        )
    if open_m is not None and close_m is not None:  # both or neither, checked above
        return GripperCalibration(open_m=float(open_m), close_m=float(close_m))
    return CALIBRATED_GRIPPERS[arm] if backend == "arx5" else GripperCalibration()
