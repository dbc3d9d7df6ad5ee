"""The real backend: one `arx5_interface.Arx5JointController` per arm on a SocketCAN bus.

Hazards handled here, all from the SDK's behaviour (docs/eva.md):
- an interface name starting with `en`/`eth` makes the SDK write raw EtherCAT frames on that
  Ethernet port: only `can*` names are accepted;
- the constructor raises at once without a bus; we re-raise as BackendUnavailable naming the
  interface and what to check;
- targets are stamped `controller time + preview` (the SDK interpolates to that absolute time);
- the SDK's emergency state is a damping loop that never returns: we cannot observe it
  directly, so a controller timestamp that stops advancing is reported as a latched fault;
- gains come from YAML (`Arx5Gains`, defaults: what upstream runs on EVA); the SDK throws when
  kp is raised from zero while the command is more than 0.2 rad from the measured position, so
  the command is first set to the measured joints, then the gains are applied and read back;
- the robot configuration is upstream's (link6 end effector, gripper torque limit 4 Nm) and is
  read back from the controller after it is built;
- gripper range: the SDK clips commands to [floor, gripper_width] and declares an emergency on a
  measured width 5 mm outside it. EVA's calibrated open widths (0.0945 / 0.0959 m) exceed the
  wheel's gripper_width (0.088 m), so the width is raised to cover them; its calibrated close
  (-0.012 m) is below the floor of the PyPI wheel (0 m), which only upstream's patched build
  lowers to -0.012 m. `detect_sdk_build` tells which build is loaded; commands are clamped to
  its range here, and counted, so that what is sent is what the arm gets.
The SDK is imported lazily so that everything else runs where the wheel cannot be installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from egomimic_hw.description import (
    ARX_MODEL,
    BASE_LINK,
    CALIBRATED_GRIPPERS,
    DEFAULT_PREVIEW_S,
    EEF_LINK,
    JOINTS_PER_ARM,
)
from egomimic_hw.driver.base import ArmReading
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.kinematics import import_arx5

X5_DEFAULT_KP = (80.0, 70.0, 70.0, 30.0, 30.0, 20.0)
X5_DEFAULT_KD = (2.0, 2.0, 2.0, 1.0, 1.0, 0.7)
X5_DEFAULT_GRIPPER_KP = 5.0
X5_DEFAULT_GRIPPER_KD = 0.2
"""The SDK's joint_controller defaults for the X5 (ControllerConfigFactory; a test checks them)."""

EVA_KP = tuple(k * 0.8 for k in (6.225, 17.225, 18.225, 14.225, 8.225, 6.225))
EVA_KD = (2.0 * 0.6,) * JOINTS_PER_ARM
EVA_GRIPPER_KP = 5.0
EVA_GRIPPER_KD = 0.2
"""The gains upstream runs on the real arms (EgoVerse `ARXInterface._create_controllers`:
kp = [6.225, 17.225, 18.225, 14.225, 8.225, 6.225] x 0.8, kd = 2.0 x 0.6, gripper 5.0 / 0.2):
5-16x softer than the SDK's defaults, what the lab's policies were collected and run with."""

EVA_GRIPPER_TORQUE_MAX_NM = 4.0
"""Upstream raises the SDK's 1.5 Nm: the SDK freezes the gripper command above half of it, and
closing from open draws ~1 Nm, so the default stops the gripper before it closes."""

MAX_GAIN_FACTOR = 2.0
"""A configured gain above this multiple of the SDK default is refused: almost surely a typo
(an extra zero makes a stiff, oscillating arm)."""

GRIPPER_FLOOR_PATCHED_M = -0.012
GRIPPER_FLOOR_UNPATCHED_M = 0.0
"""Gripper command floors: upstream's patched build (arx5_patches/0002) for the X5, and every
other build (the PyPI wheel)."""

MAX_GRIPPER_OPEN_M = 0.12
"""A calibrated open width above this is a unit slip, not a gripper (EVA's open at 0.096 m)."""

MAX_GRIPPER_TORQUE_NM = 10.0
"""The gripper's DM-J4310 motor is the type of joints 5 and 6, which the SDK limits to 10 Nm."""

GRIPPER_STATE_TOLERANCE_M = 0.005
"""The SDK declares an emergency on a measured gripper this far outside [floor, width]."""

_PATCHED_MARKER = b"but should be in {:.3f}~{:.3f} (m)"
_UNPATCHED_MARKER = b"but should be in 0~{:.3f} (m)"
"""The SDK's gripper sanity-check message, compiled into its Python extension: the patch
replaces the fixed 0 with the floor (0002-allow-bounded-x5-negative-gripper-close.patch)."""


@dataclass(frozen=True)
class SdkBuild:
    """Which ARX SDK build is loaded, as far as its binary tells, and what follows for the gripper."""

    patched: bool | None
    """True: upstream's patched build; False: the unpatched one (PyPI); None: could not tell."""
    detail: str

    @property
    def gripper_floor_m(self) -> float:
        """Lowest gripper command the SDK passes on; unknown builds get the unpatched floor
        (commands are then never below what any build accepts)."""
        return GRIPPER_FLOOR_PATCHED_M if self.patched else GRIPPER_FLOOR_UNPATCHED_M

    @property
    def gripper_emergency_below_m(self) -> float:
        return self.gripper_floor_m - GRIPPER_STATE_TOLERANCE_M

    def describe(self) -> str:
        """One line for the driver's start log and diagnostics."""
        name = {True: "patched", False: "unpatched", None: "unknown"}[self.patched]
        return (
            f"ARX SDK build {name} ({self.detail}): gripper command floor {self.gripper_floor_m:+.3f} m, "
            f"emergency below {self.gripper_emergency_below_m:+.3f} m"
        )


def detect_sdk_build(arx5_module) -> SdkBuild:
    """Read the loaded SDK's compiled extension for the gripper check's message, which the
    patch changes. Nothing else distinguishes the builds short of driving a gripper."""
    package_dir = Path(arx5_module.__file__).resolve().parent
    for binary in sorted(package_dir.rglob("*.so*")):
        content = binary.read_bytes()
        if _PATCHED_MARKER in content:
            return SdkBuild(True, f"{binary.name} has the patched gripper check")
        if _UNPATCHED_MARKER in content:
            return SdkBuild(False, f"{binary.name} has the unpatched gripper check")
    return SdkBuild(None, f"no gripper check message found under {package_dir}")


@dataclass(frozen=True)
class Arx5Gains:
    """Joint PD gains of one arm (SDK units: kp Nm/rad, kd Nm s/rad), from YAML `arx5.*`;
    defaults are upstream's EVA gains, the check against typos is relative to the SDK's."""

    kp: tuple[float, ...] = field(default=EVA_KP, metadata={"help": "joint stiffness, Nm/rad (6 joints)"})
    kd: tuple[float, ...] = field(default=EVA_KD, metadata={"help": "joint damping, Nm s/rad (6 joints)"})
    gripper_kp: float = field(default=EVA_GRIPPER_KP, metadata={"help": "gripper stiffness (SDK units)"})
    gripper_kd: float = field(default=EVA_GRIPPER_KD, metadata={"help": "gripper damping (SDK units)"})
    """Each value above MAX_GAIN_FACTOR x the SDK's default is refused (a typo)."""

    def __post_init__(self) -> None:
        for name, values, defaults in (
            ("kp", self.kp, X5_DEFAULT_KP),
            ("kd", self.kd, X5_DEFAULT_KD),
            ("gripper_kp", (self.gripper_kp,), (X5_DEFAULT_GRIPPER_KP,)),
            ("gripper_kd", (self.gripper_kd,), (X5_DEFAULT_GRIPPER_KD,)),
        ):
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


@dataclass(frozen=True)
class Arx5Config:
    """What the arx5 backend needs for one arm (backends.open_controller builds the controller
    from it; the controller checks the interface name, so a sim run never does)."""

    can_interface: str
    gains: Arx5Gains = field(default_factory=Arx5Gains)
    preview_s: float = DEFAULT_PREVIEW_S
    """The preview of the hold command sent before the gains are applied (DriverConfig.preview_s)."""


def gripper_width_covering(open_m: float, sdk_width_m: float) -> float:
    """The robot config's gripper width for a calibrated open width: never below the SDK's."""
    return max(float(open_m), float(sdk_width_m))


def configure_robot(robot_config, *, gripper_width_m: float, gripper_torque_max_nm: float):
    """Set upstream's EVA values on an SDK RobotConfig (a copy from RobotConfigFactory).

    The SDK reports the gripper in metres as motor angle / gripper_open_readout x gripper_width
    and commands it the inverse way, so gripper_width is a scale as well as the clip bound:
    widening it alone would stretch every reading (a calibrated 0.0945 m would read 0.103 m).
    The readout is scaled with it, so metres per motor radian, and with them the calibrated
    endpoints, stay as measured; only the clip and emergency bounds move.
    """
    sdk_width_m = float(robot_config.gripper_width)
    robot_config.base_link_name = BASE_LINK
    robot_config.eef_link_name = EEF_LINK
    robot_config.gripper_torque_max = float(gripper_torque_max_nm)
    robot_config.gripper_open_readout = float(robot_config.gripper_open_readout) * gripper_width_m / sdk_width_m
    robot_config.gripper_width = float(gripper_width_m)
    return robot_config


class Arx5Controller:
    """`ArmController` over the ARX SDK joint controller (needs the arm on its CAN bus).

    `gripper_open_m`: the calibrated open width the robot config must cover (default: the widest
    of both EVA arms). `controller_factory(robot_config, controller_config, interface)` stands in
    for `Arx5JointController` in tests.
    """

    def __init__(
        self,
        can_interface: str,
        model: str = ARX_MODEL,
        gains: Arx5Gains | None = None,
        preview_s: float = DEFAULT_PREVIEW_S,
        controller_factory=None,
        *,
        gripper_open_m: float | None = None,
        gripper_torque_max_nm: float = EVA_GRIPPER_TORQUE_MAX_NM,
    ):
        validate_can_interface(can_interface)
        if not (np.isfinite(gripper_torque_max_nm) and 0 < gripper_torque_max_nm <= MAX_GRIPPER_TORQUE_NM):
            raise ConfigError(
                f"gripper_torque_max_nm must be in (0, {MAX_GRIPPER_TORQUE_NM}] Nm, got {gripper_torque_max_nm}"
            )
        open_m = max(c.open_m for c in CALIBRATED_GRIPPERS.values()) if gripper_open_m is None else gripper_open_m
        if not (np.isfinite(open_m) and 0 < open_m <= MAX_GRIPPER_OPEN_M):
            raise ConfigError(f"gripper_open_m must be in (0, {MAX_GRIPPER_OPEN_M}] m, got {open_m}")
        arx5 = import_arx5()
        self._arx5 = arx5
        self.sdk_build = detect_sdk_build(arx5)
        robot_config = arx5.RobotConfigFactory.get_instance().get_config(model)
        configure_robot(
            robot_config,
            gripper_width_m=gripper_width_covering(open_m, robot_config.gripper_width),
            gripper_torque_max_nm=gripper_torque_max_nm,
        )
        controller_config = arx5.ControllerConfigFactory.get_instance().get_config(
            "joint_controller", robot_config.joint_dof
        )
        factory = controller_factory or arx5.Arx5JointController
        try:
            self._ctrl = factory(robot_config, controller_config, can_interface)
        except RuntimeError as exc:
            raise BackendUnavailable(
                f"ARX5 controller on {can_interface!r} did not start: {exc}. Check that the interface "
                f"exists and is up (`ip link show {can_interface}`, 1 Mbit/s) and the arm is powered."
            ) from exc
        self.robot_config = self._ctrl.get_robot_config()
        self._check_robot_config(robot_config)
        self.gripper_command_range_m = (self.sdk_build.gripper_floor_m, float(self.robot_config.gripper_width))
        """Commands outside are clamped here (the SDK would clip them) and counted."""
        self.gripper_clamps = 0
        self._last_change: tuple[float, float] | None = None
        """(SDK state timestamp, now_s) when that timestamp last changed; None before the first read."""
        self.fault = ""
        self.gains = gains or Arx5Gains()
        self._apply_gains(preview_s)

    def _check_robot_config(self, asked) -> None:
        """The controller runs on a copy of the config: read it back, field by field."""
        got = self.robot_config
        for name in ("base_link_name", "eef_link_name", "gripper_width", "gripper_open_readout", "gripper_torque_max"):
            want, have = getattr(asked, name), getattr(got, name)
            if have != want:
                raise BackendUnavailable(
                    f"ARX5 controller did not take robot_config.{name}: asked {want}, reads back {have}"
                )

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
        if not (
            np.allclose(got.kp(), g.kp)
            and np.allclose(got.kd(), g.kd)
            and np.isclose(got.gripper_kp, g.gripper_kp)
            and np.isclose(got.gripper_kd, g.gripper_kd)
        ):
            raise BackendUnavailable(f"ARX5 controller did not take the gains: asked {g}, reads back kp={got.kp()}")

    def command(self, joints_rad, gripper_m: float, now_s: float, preview_s: float) -> None:
        q = np.asarray(joints_rad, dtype=float)
        if q.shape != (JOINTS_PER_ARM,) or not np.all(np.isfinite(q)) or not np.isfinite(gripper_m):
            raise ConfigError(f"joint target must be {JOINTS_PER_ARM} finite joints + gripper, got {q}, {gripper_m}")
        floor_m, width_m = self.gripper_command_range_m
        sent_m = min(max(float(gripper_m), floor_m), width_m)
        if sent_m != gripper_m:
            self.gripper_clamps += 1
        zeros = np.zeros(JOINTS_PER_ARM)
        cmd = self._arx5.JointState(q, zeros, zeros, sent_m)
        cmd.timestamp = self._ctrl.get_timestamp() + preview_s
        self._ctrl.set_joint_cmd(cmd)

    def read(self, now_s: float) -> ArmReading:
        state = self._ctrl.get_joint_state()
        stamp = float(state.timestamp)
        if self._last_change is None or stamp != self._last_change[0]:
            self._last_change = (stamp, now_s)
        elif now_s - self._last_change[1] > STALLED_AFTER_S and not self.fault:
            self.fault = f"SDK state timestamp frozen for {now_s - self._last_change[1]:.3f} s (emergency or lost bus)"
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
