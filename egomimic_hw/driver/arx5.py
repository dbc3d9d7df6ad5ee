"""The real backend: one `arx5_interface.Arx5JointController` per arm on a SocketCAN bus.

Hazards handled here, all from the SDK's behaviour (../shared/EVA.md, research/ecosystem.md):
- an interface name starting with `en`/`eth` makes the SDK write raw EtherCAT frames on that
  Ethernet port: only `can*` names are accepted;
- the constructor raises at once without a bus; we re-raise as BackendUnavailable naming the
  interface and what to check;
- targets are stamped `controller time + preview` (the SDK interpolates to that absolute time);
- the SDK's emergency state is a damping loop that never returns: we cannot observe it
  directly, so a controller timestamp that stops advancing is reported as a latched fault;
- gains come from YAML (`Arx5Gains`); the SDK throws when kp is raised from zero while the
  command is more than 0.2 rad from the measured position, so the command is first set to the
  measured joints, then the gains are applied and read back.
The SDK is imported lazily so that everything else runs where the wheel cannot be installed.
"""

from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from egomimic_hw.description import ARX_MODEL, JOINTS_PER_ARM
from egomimic_hw.driver.base import ArmReading
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.kinematics import import_arx5

X5_DEFAULT_KP = (80.0, 70.0, 70.0, 30.0, 30.0, 20.0)
X5_DEFAULT_KD = (2.0, 2.0, 2.0, 1.0, 1.0, 0.7)
X5_DEFAULT_GRIPPER_KP = 5.0
X5_DEFAULT_GRIPPER_KD = 0.2
"""The SDK's joint_controller defaults for the X5 (ControllerConfigFactory; a test checks them)."""

MAX_GAIN_FACTOR = 2.0
"""A configured gain above this multiple of the SDK default is refused: almost surely a typo
(an extra zero makes a stiff, oscillating arm)."""


@dataclass(frozen=True)
class Arx5Gains:
    """Joint PD gains of one arm (SDK units: kp Nm/rad, kd Nm s/rad), from YAML `arx5.*`."""

    kp: tuple[float, ...] = X5_DEFAULT_KP
    kd: tuple[float, ...] = X5_DEFAULT_KD
    gripper_kp: float = X5_DEFAULT_GRIPPER_KP
    gripper_kd: float = X5_DEFAULT_GRIPPER_KD

    def __post_init__(self) -> None:
        for name, values, defaults in (("kp", self.kp, X5_DEFAULT_KP), ("kd", self.kd, X5_DEFAULT_KD),
                                       ("gripper_kp", (self.gripper_kp,), (X5_DEFAULT_GRIPPER_KP,)),
                                       ("gripper_kd", (self.gripper_kd,), (X5_DEFAULT_GRIPPER_KD,))):
            v = np.asarray(values, dtype=float)
            if v.shape != np.asarray(defaults).shape or not np.all(np.isfinite(v)) or np.any(v < 0):
                raise ConfigError(f"arx5.{name} must be {len(defaults)} finite values >= 0, got {list(values)}")
            too_high = v > MAX_GAIN_FACTOR * np.asarray(defaults)
            if np.any(too_high):
                raise ConfigError(
                    f"arx5.{name} = {list(values)} exceeds {MAX_GAIN_FACTOR}x the SDK default {list(defaults)} "
                    f"at index {np.flatnonzero(too_high).tolist()}: refused (typo?)"
                )


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

    def __init__(self, can_interface: str, model: str = ARX_MODEL, gains: Arx5Gains | None = None,
                 preview_s: float = 0.2, controller_factory=None):
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
        self.gains = gains or Arx5Gains()
        self._apply_gains(preview_s)

    def _apply_gains(self, preview_s: float) -> None:
        """Hold the measured joints, then set the gains and check they took (SDK order rule)."""
        state = self._ctrl.get_joint_state()
        q = np.array(state.pos(), dtype=float)
        zeros = np.zeros(JOINTS_PER_ARM)
        hold = self._arx5.JointState(q, zeros, zeros, float(state.gripper_pos))
        hold.timestamp = self._ctrl.get_timestamp() + preview_s
        self._ctrl.set_joint_cmd(hold)
        g = self.gains
        self._ctrl.set_gain(self._arx5.Gain(np.asarray(g.kp), np.asarray(g.kd), g.gripper_kp, g.gripper_kd))
        got = self._ctrl.get_gain()
        if not (np.allclose(got.kp(), g.kp) and np.allclose(got.kd(), g.kd)
                and np.isclose(got.gripper_kp, g.gripper_kp) and np.isclose(got.gripper_kd, g.gripper_kd)):
            raise BackendUnavailable(f"ARX5 controller did not take the gains: asked {g}, reads back kp={got.kp()}")

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
            measured_at_s=now_s,  # the SDK's state is at most one 2 ms loop old when read
        )

    def close(self) -> None:
        # The SDK's destructor puts the arm into damping (and sleeps 2 s on X5).
        del self._ctrl
