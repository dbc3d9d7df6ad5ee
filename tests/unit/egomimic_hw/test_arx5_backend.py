"""The arx5 backend's logic against a stand-in for the one hardware boundary: the SDK's
`Arx5JointController` (it needs a CAN bus). The stand-in uses the SDK's real value types
(`JointState`, `Gain`, `RobotConfig`), its real configuration factories, and reproduces the SDK
behaviours the backend relies on: controller timestamps, the kp-from-zero rule, set/get of
gains, the robot configuration kept by value, and the gripper clip to [floor, width]."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from egomimic_hw.description import ARMS, CALIBRATED_GRIPPERS, DEFAULT_CAN_INTERFACE, DEFAULT_PREVIEW_S, Arm
from egomimic_hw.driver.arm_driver import ArmDriver, DriverConfig
from egomimic_hw.driver.arx5 import (
    MAX_GAIN_FACTOR,
    X5_DEFAULT_GRIPPER_KD,
    X5_DEFAULT_GRIPPER_KP,
    X5_DEFAULT_KD,
    X5_DEFAULT_KP,
    Arx5Controller,
    Arx5Gains,
    SdkBuild,
    detect_sdk_build,
    validate_can_interface,
)
from egomimic_hw.driver.calibration import resolve_gripper_calibration
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.kinematics import ArmKinematics, import_arx5

from .sdk_marks import SDK_MISSING

if SDK_MISSING:
    pytest.skip(f"needs the ARX SDK: {SDK_MISSING}", allow_module_level=True)
arx5 = import_arx5()


class StandInJointController:
    """What the backend sees of `Arx5JointController(robot_config, controller_config, interface)`,
    without a bus."""

    KP_RAISE_LIMIT_RAD = 0.2  # the SDK throws when kp rises from 0 with the command this far away

    def __init__(
        self,
        robot_config,
        controller_config,
        interface,
        start_joints=(0.3, 0.8, 0.9, -0.4, 0.2, 0.1),
        gripper_floor_m=0.0,
    ):
        self.robot_config = robot_config  # the SDK keeps its own copy; so does the stand-in (below)
        self.controller_config = controller_config
        self.interface = interface
        self.gripper_floor_m = gripper_floor_m
        self.t = 0.0
        self.state = arx5.JointState(np.array(start_joints, float), np.zeros(6), np.zeros(6), 0.02)
        self.cmd = arx5.JointState(6)  # the SDK starts commanding zeros
        self.gain = arx5.Gain(6)  # and with zero gains
        self.cmd_log = []
        self.frozen = False

    def get_robot_config(self):
        return self.robot_config

    def get_controller_config(self):
        return self.controller_config

    def clipped_gripper(self, cmd_m):
        """Where the SDK's loop would drive the gripper for a command (controller_base.cpp)."""
        return min(max(cmd_m, self.gripper_floor_m), self.robot_config.gripper_width)

    def get_timestamp(self):
        return self.t

    def advance(self, dt):
        if not self.frozen:
            self.t += dt

    def get_joint_state(self):
        s = arx5.JointState(self.state.pos(), self.state.vel(), self.state.torque(), self.state.gripper_pos)
        s.timestamp = self.t
        return s

    def set_joint_cmd(self, cmd):
        assert isinstance(cmd, arx5.JointState)
        self.cmd = cmd
        self.cmd_log.append((cmd.timestamp, np.array(cmd.pos()), cmd.gripper_pos))

    def set_gain(self, gain):
        raising = (np.asarray(self.gain.kp()) == 0) & (np.asarray(gain.kp()) > 0)
        if np.any(
            raising & (np.abs(np.asarray(self.cmd.pos()) - np.asarray(self.state.pos())) > self.KP_RAISE_LIMIT_RAD)
        ):
            raise RuntimeError("kp raised from zero while the command is far from the measured position")
        self.gain = gain

    def get_gain(self):
        return self.gain


def sdk_configs():
    robot_config = arx5.RobotConfigFactory.get_instance().get_config("X5")
    return robot_config, arx5.ControllerConfigFactory.get_instance().get_config("joint_controller", 6)


def make(interface="can1", **kw):
    made = {}

    def factory(robot_config, controller_config, iface):
        made["ctrl"] = StandInJointController(robot_config, controller_config, iface)
        return made["ctrl"]

    ctrl = Arx5Controller(interface, controller_factory=factory, **kw)
    return ctrl, made["ctrl"]


def test_default_gains_are_the_sdk_defaults():
    cfg = arx5.ControllerConfigFactory.get_instance().get_config("joint_controller", 6)
    assert np.allclose(cfg.default_kp, X5_DEFAULT_KP) and np.allclose(cfg.default_kd, X5_DEFAULT_KD)
    assert cfg.default_gripper_kp == X5_DEFAULT_GRIPPER_KP and cfg.default_gripper_kd == X5_DEFAULT_GRIPPER_KD


@pytest.mark.parametrize("name", ["eth0", "enp3s0", "vcan0x!", "", "can", "CAN1"])
def test_non_can_interfaces_are_refused_before_the_sdk_is_touched(name):
    calls = []
    with pytest.raises(ConfigError):
        Arx5Controller(name, controller_factory=lambda *a: calls.append(a))
    assert calls == []


def test_can_names_accepted():
    assert validate_can_interface("can1") == "can1" and validate_can_interface("can12") == "can12"


def test_real_sdk_without_a_bus_is_a_clear_error():
    with pytest.raises(BackendUnavailable, match="can9.*ip link show can9"):
        Arx5Controller("can9")


def test_gains_are_applied_after_holding_the_measured_joints():
    ctrl, sdk = make(gains=Arx5Gains(kp=(60, 60, 60, 25, 25, 15)))
    # The first command was the measured position (otherwise the stand-in, like the SDK, throws).
    _, first_q, first_g = sdk.cmd_log[0]
    assert np.allclose(first_q, sdk.state.pos()) and first_g == pytest.approx(0.02)
    assert np.allclose(sdk.gain.kp(), [60, 60, 60, 25, 25, 15]) and np.allclose(sdk.gain.kd(), Arx5Gains().kd)


def test_applying_gains_without_holding_first_would_throw():
    sdk = StandInJointController(*sdk_configs(), "can1")
    with pytest.raises(RuntimeError):
        sdk.set_gain(arx5.Gain(np.array(X5_DEFAULT_KP), np.array(X5_DEFAULT_KD), 5.0, 0.2))


def test_gains_that_do_not_read_back_are_refused():
    class Deaf(StandInJointController):
        def set_gain(self, gain):
            pass

    with pytest.raises(BackendUnavailable, match="did not take the gains"):
        Arx5Controller("can1", controller_factory=Deaf)


# -- upstream's real-robot configuration ---------------------------------------------------------

UPSTREAM_KP = np.array([6.225, 17.225, 18.225, 14.225, 8.225, 6.225]) * 0.8
UPSTREAM_KD = np.full(6, 2.0) * 0.6
"""EgoVerse `ARXInterface._create_controllers`, written out here independently of the code."""


def test_default_gains_are_upstreams_and_read_back():
    ctrl, sdk = make()
    assert np.allclose(sdk.get_gain().kp(), UPSTREAM_KP) and np.allclose(sdk.get_gain().kd(), UPSTREAM_KD)
    # the SDK's Gain keeps the gripper gains as float32
    gain = sdk.get_gain()
    assert gain.gripper_kp == pytest.approx(5.0, rel=1e-7) and gain.gripper_kd == pytest.approx(0.2, rel=1e-7)
    assert np.allclose(ctrl.gains.kp, UPSTREAM_KP)


def test_robot_config_is_upstreams_and_read_back():
    ctrl, sdk = make()
    default, _ = sdk_configs()
    got = sdk.get_robot_config()
    assert (got.base_link_name, got.eef_link_name) == ("base_link", "link6")
    assert got.gripper_torque_max == 4.0
    widest_open_m = max(c.open_m for c in CALIBRATED_GRIPPERS.values())
    assert got.gripper_width == pytest.approx(widest_open_m) and got.gripper_width > default.gripper_width
    # metres per motor radian unchanged: the calibrated endpoints keep their meaning
    metres_per_rad = default.gripper_width / default.gripper_open_readout
    assert got.gripper_width / got.gripper_open_readout == pytest.approx(metres_per_rad)
    assert ctrl.robot_config is got


def test_a_gripper_width_below_the_sdks_is_not_narrowed():
    _, sdk = make(gripper_open_m=0.08)
    default, _ = sdk_configs()
    assert sdk.get_robot_config().gripper_width == default.gripper_width
    assert sdk.get_robot_config().gripper_open_readout == default.gripper_open_readout


def test_a_robot_config_that_does_not_read_back_is_refused():
    class KeepsDefaults(StandInJointController):
        def get_robot_config(self):
            return sdk_configs()[0]

    with pytest.raises(BackendUnavailable, match="did not take robot_config.eef_link_name"):
        Arx5Controller("can1", controller_factory=KeepsDefaults)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(gripper_open_m=0.0),
        dict(gripper_open_m=94.5),
        dict(gripper_open_m=np.nan),
        dict(gripper_torque_max_nm=0.0),
        dict(gripper_torque_max_nm=40.0),
    ],
)
def test_implausible_gripper_settings_are_refused_before_the_sdk_is_touched(kwargs):
    calls = []
    with pytest.raises(ConfigError):
        Arx5Controller("can1", controller_factory=lambda *a: calls.append(a), **kwargs)
    assert calls == []


def test_the_arx5_yaml_leaves_the_drivers_on_the_code_defaults_which_are_evas():
    """The deployment YAML holds only what differs from the code: nothing for the drivers,
    because the defaults already are EVA's (buses, gripper calibration, gains, preview)."""
    path = Path(__file__).resolve().parents[3] / "ros2_ws/src/egomimic_bringup/config/eva_arx5.yaml"
    params = yaml.safe_load(path.read_text())
    assert not [k for k in params if "driver" in k or "safety_gate" in k], "repeats code defaults"
    assert DEFAULT_CAN_INTERFACE == {Arm.LEFT: "can1", Arm.RIGHT: "can2"}
    for arm in ARMS:
        assert resolve_gripper_calibration(arm, "arx5") == CALIBRATED_GRIPPERS[arm]
    defaults = Arx5Gains()
    assert np.allclose(defaults.kp, np.array([6.225, 17.225, 18.225, 14.225, 8.225, 6.225]) * 0.8)
    assert np.allclose(defaults.kd, 2.0 * 0.6) and (defaults.gripper_kp, defaults.gripper_kd) == (5.0, 0.2)
    assert DEFAULT_PREVIEW_S == 0.2


# -- gripper range: what the SDK build in use would clip ------------------------------------------


def test_the_installed_pypi_wheel_is_detected_as_unpatched():
    build = detect_sdk_build(arx5)
    assert build.patched is False and build.gripper_floor_m == 0.0
    assert "unpatched" in build.describe() and "emergency below -0.005 m" in build.describe()


@pytest.mark.parametrize(
    "content,patched",
    [
        (b"...Gripper position error: got {:.3f} but should be in {:.3f}~{:.3f} (m). Please...", True),
        (b"...Gripper position error: got {:.3f} but should be in 0~{:.3f} (m). Please...", False),
        (b"no such message", None),
    ],
)
def test_build_detection_reads_the_gripper_check_message(tmp_path, content, patched):
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "arx5_interface.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF" + content)
    (tmp_path / "__init__.py").write_text("")
    module = type("Module", (), {"__file__": str(tmp_path / "__init__.py")})
    build = detect_sdk_build(module)
    assert build.patched is patched
    assert build.gripper_floor_m == (-0.012 if patched else 0.0)


@pytest.mark.parametrize(
    "patched,asked_m,sent_m",
    [
        (False, -0.012, 0.0),  # the calibrated close, below the PyPI wheel's floor
        (True, -0.012, -0.012),  # the patched build takes it
        (True, -0.02, -0.012),
        (False, 0.0945, 0.0945),  # the calibrated open, inside the widened range
        (False, 0.2, None),  # above the width: the width
    ],
)
def test_gripper_commands_are_clamped_to_what_the_sdk_passes_on_and_counted(monkeypatch, patched, asked_m, sent_m):
    monkeypatch.setattr("egomimic_hw.driver.arx5.detect_sdk_build", lambda module: SdkBuild(patched, "test"))
    ctrl, sdk = make()
    sent_m = sdk.get_robot_config().gripper_width if sent_m is None else sent_m
    ctrl.command(np.asarray(sdk.state.pos()), asked_m, now_s=0.0, preview_s=0.2)
    _, _, got = sdk.cmd_log[-1]
    sdk.gripper_floor_m = ctrl.sdk_build.gripper_floor_m
    assert got == pytest.approx(sent_m) and sdk.clipped_gripper(asked_m) == pytest.approx(got)
    assert ctrl.gripper_clamps == (0 if asked_m == sent_m else 1)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kp=(80, 70, 70, 30, 30)),
        dict(kd=(2, 2, 2, 1, 1, np.nan)),
        dict(kp=(800, 70, 70, 30, 30, 20)),
        dict(gripper_kp=-1.0),
        dict(gripper_kd=X5_DEFAULT_GRIPPER_KD * MAX_GAIN_FACTOR * 1.01),
    ],
)
def test_bad_gains_are_refused(kwargs):
    with pytest.raises(ConfigError):
        Arx5Gains(**kwargs)


def test_targets_are_stamped_controller_time_plus_preview():
    ctrl, sdk = make()
    sdk.advance(12.5)
    ctrl.command(np.array([0.1, 0.2, 0.3, 0.0, 0.0, 0.0]), 0.05, now_s=999.0, preview_s=0.2)
    stamp, q, g = sdk.cmd_log[-1]
    assert stamp == pytest.approx(12.7) and np.allclose(q, [0.1, 0.2, 0.3, 0, 0, 0]) and g == pytest.approx(0.05)


@pytest.mark.parametrize("q,g", [([np.nan, 0, 0, 0, 0, 0], 0.0), ([0, 0, 0, 0, 0], 0.0), ([0] * 6, np.inf)])
def test_malformed_targets_never_reach_the_sdk(q, g):
    ctrl, sdk = make()
    n = len(sdk.cmd_log)
    with pytest.raises(ConfigError):
        ctrl.command(np.array(q, dtype=float), g, now_s=0.0, preview_s=0.2)
    assert len(sdk.cmd_log) == n


def test_frozen_controller_timestamp_latches_a_fault():
    ctrl, sdk = make()
    for i in range(5):
        sdk.advance(0.002)
        assert ctrl.read(now_s=i * 0.01).fault == ""
    sdk.frozen = True
    faults = [ctrl.read(now_s=0.05 + i * 0.01).fault for i in range(20)]
    assert faults[0] == "" and faults[-1].startswith("SDK state timestamp frozen")
    sdk.frozen = False
    sdk.advance(0.002)
    assert ctrl.read(now_s=1.0).fault, "the fault latches even if the timestamp moves again"


def test_driver_over_the_arx5_backend_holds_on_watchdog_and_stops_on_fault():
    ctrl, sdk = make()
    driver = ArmDriver(DriverConfig(arm=Arm.LEFT, command_timeout_s=0.1), ctrl, ArmKinematics())
    t = 0.01
    sdk.advance(0.01)
    driver.tick(t)
    target = np.array(list(sdk.state.pos()) + [0.5]) + np.r_[0.05, np.zeros(6)]
    assert driver.on_command(target, t)
    n = len(sdk.cmd_log)
    for _ in range(20):  # 200 ms without commands
        sdk.advance(0.01)
        t += 0.01
        driver.tick(t)
    holds = sdk.cmd_log[n:]
    assert len(holds) == 1, "the watchdog commands the measured position once, then the SDK holds it"
    assert np.allclose(holds[0][1], sdk.state.pos())
    assert driver.counters.watchdog_holds == 1
    sdk.frozen = True
    for _ in range(30):
        t += 0.01
        driver.tick(t)
    assert driver.fault
    n = len(sdk.cmd_log)
    assert not driver.on_command(target, t)
    driver.tick(t + 0.01)
    assert len(sdk.cmd_log) == n, "after a latched fault no command reaches the SDK"
    assert driver.home(t).startswith("refused")
