"""The contract every arm controller backend meets (the SDK boundary); backends.py selects one.

A controller is one arm's joint controller as the ARX SDK exposes it: it takes a joint target
stamped for a time in the future and interpolates to it in its own loop, clips to its limits,
and reports measured joints. Times are explicit arguments (`now_s`, monotonic seconds since the
controller started), so the simulated backend is deterministic under test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from egomimic_hw.description import JOINTS_PER_ARM


@dataclass(frozen=True)
class ArmReading:
    """Measured state of one arm at `stamp_s` (controller clock)."""

    stamp_s: float
    joints_rad: np.ndarray
    joint_velocities_rad_s: np.ndarray
    gripper_m: float
    fault: str
    """"" when healthy; otherwise why the controller is in its latched emergency state."""
    measured_at_s: float
    """When the joints were measured, on the caller's `now_s` clock: the node stamps
    joint_states with it (not with the publication time), so speeds computed from stamps are
    true speeds."""


class ArmController(Protocol):
    """One arm's joint controller (SDK semantics: targets are interpolated, limits clipped)."""

    def read(self, now_s: float) -> ArmReading:
        """Advance to `now_s` and return the measured state."""

    def command(self, joints_rad: np.ndarray, gripper_m: float, now_s: float, preview_s: float) -> None:
        """Target joints and gripper, to be reached at `now_s + preview_s`."""

    def close(self) -> None:
        """Release the hardware (the SDK goes to damping)."""


def home_pose(controller: ArmController) -> tuple[np.ndarray, float | None]:
    """Where `home` drives an arm: the controller's `home_joints_rad` / `home_gripper_m` when it
    names them (the simulated arm: its start pose, where a simulated trial begins), else the
    SDK's home, all joints at zero, with the gripper left where it is (None)."""
    joints = getattr(controller, "home_joints_rad", None)
    gripper = getattr(controller, "home_gripper_m", None)
    return (np.zeros(JOINTS_PER_ARM) if joints is None else np.asarray(joints, float)), gripper
