"""The real backend: one `arx5_interface.Arx5JointController` per arm on a SocketCAN bus.

Hazards handled here, all from the SDK's behaviour (../shared/EVA.md, research/ecosystem.md):
- an interface name starting with `en`/`eth` makes the SDK write raw EtherCAT frames on that
  Ethernet port: only `can*` names are accepted;
- the constructor raises at once without a bus; we re-raise as BackendUnavailable naming the
  interface and what to check;
- targets are stamped `controller time + preview` (the SDK interpolates to that absolute time);
- the SDK's emergency state is a damping loop that never returns: we cannot observe it
  directly, so a controller timestamp that stops advancing is reported as a latched fault.
The SDK is imported lazily so that everything else runs where the wheel cannot be installed.
"""

from __future__ import annotations

import numpy as np

from egomimic_hw.description import ARX_MODEL, JOINTS_PER_ARM
from egomimic_hw.driver.base import ArmReading
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.kinematics import import_arx5

STALLED_AFTER_S = 0.1
"""The SDK's timestamp advances every 2 ms; frozen this long means its loop is gone."""


def validate_can_interface(name: str) -> str:
    """Accept SocketCAN names only (`can0`, `can1`, ...); explain why anything else is refused."""
    if not isinstance(name, str) or not name.startswith("can") or not name[3:].isalnum():
        raise ConfigError(
            f"CAN interface {name!r} refused: only SocketCAN names like 'can1' are allowed "
            "(an Ethernet name such as 'eth0'/'enp3s0' makes the ARX SDK send raw EtherCAT frames)"
        )
    return name


class Arx5Controller:
    """`ArmController` over the ARX SDK joint controller (needs the arm on its CAN bus)."""

    def __init__(self, can_interface: str, model: str = ARX_MODEL, controller_factory=None):
        validate_can_interface(can_interface)
        arx5 = import_arx5()
        self._arx5 = arx5
        factory = controller_factory or arx5.Arx5JointController
        try:
            self._ctrl = factory(model, can_interface)
        except RuntimeError as exc:
            raise BackendUnavailable(
                f"ARX5 controller on {can_interface!r} did not start: {exc}. Check that the interface "
                f"exists and is up (`ip link show {can_interface}`, 1 Mbit/s) and the arm is powered."
            ) from exc
        self._last_stamp = None
        self._last_change_wall = None
        self.fault = ""

    def command(self, joints_rad, gripper_m: float, now_s: float, preview_s: float) -> None:
        q = np.asarray(joints_rad, dtype=float)
        if q.shape != (JOINTS_PER_ARM,) or not np.all(np.isfinite(q)) or not np.isfinite(gripper_m):
            raise ConfigError(f"joint target must be {JOINTS_PER_ARM} finite joints + gripper, got {q}, {gripper_m}")
        zeros = np.zeros(JOINTS_PER_ARM)
        cmd = self._arx5.JointState(q, zeros, zeros, float(gripper_m))
        cmd.timestamp = self._ctrl.get_timestamp() + preview_s
        self._ctrl.set_joint_cmd(cmd)

    def read(self, now_s: float) -> ArmReading:
        state = self._ctrl.get_joint_state()
        stamp = float(state.timestamp)
        if self._last_stamp is None or stamp != self._last_stamp:
            self._last_stamp, self._last_change_wall = stamp, now_s
        elif now_s - self._last_change_wall > STALLED_AFTER_S and not self.fault:
            self.fault = f"SDK state timestamp frozen for {now_s - self._last_change_wall:.3f} s (emergency or lost bus)"
        return ArmReading(
            stamp_s=stamp,
            joints_rad=np.array(state.pos(), dtype=float),
            joint_velocities_rad_s=np.array(state.vel(), dtype=float),
            gripper_m=float(state.gripper_pos),
            fault=self.fault,
        )

    def close(self) -> None:
        # The SDK's destructor puts the arm into damping (and sleeps 2 s on X5).
        del self._ctrl
