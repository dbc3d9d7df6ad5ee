"""The arx5 backend's logic against a stand-in for the one hardware boundary: the SDK's
`Arx5JointController` (it needs a CAN bus). The stand-in uses the SDK's real value types
(`JointState`, `Gain`), its real configuration factories, and reproduces the SDK behaviours the
backend relies on: controller timestamps, the kp-from-zero rule, and set/get of gains."""

import numpy as np
import pytest

from egomimic_hw.description import Arm
from egomimic_hw.driver.arm_driver import ArmDriver, DriverConfig
from egomimic_hw.driver.arx5 import (
    MAX_GAIN_FACTOR,
    X5_DEFAULT_GRIPPER_KD,
    X5_DEFAULT_GRIPPER_KP,
    X5_DEFAULT_KD,
    X5_DEFAULT_KP,
    Arx5Controller,
    Arx5Gains,
    validate_can_interface,
)
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.kinematics import ArmKinematics, import_arx5

from .sdk_marks import SDK_MISSING

if SDK_MISSING:
    pytest.skip(f"needs the ARX SDK: {SDK_MISSING}", allow_module_level=True)
arx5 = import_arx5()


class StandInJointController:
    """What the backend sees of `Arx5JointController(model, interface)`, without a bus."""

    KP_RAISE_LIMIT_RAD = 0.2  # the SDK throws when kp rises from 0 with the command this far away

    def __init__(self, model, interface, start_joints=(0.3, 0.8, 0.9, -0.4, 0.2, 0.1)):
        self.robot_config = arx5.RobotConfigFactory.get_instance().get_config(model)
        self.interface = interface
        self.t = 0.0
        self.state = arx5.JointState(np.array(start_joints, float), np.zeros(6), np.zeros(6), 0.02)
        self.cmd = arx5.JointState(6)  # the SDK starts commanding zeros
        self.gain = arx5.Gain(6)  # and with zero gains
        self.cmd_log = []
        self.frozen = False

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
        if np.any(raising & (np.abs(np.asarray(self.cmd.pos()) - np.asarray(self.state.pos())) > self.KP_RAISE_LIMIT_RAD)):
            raise RuntimeError("kp raised from zero while the command is far from the measured position")
        self.gain = gain

    def get_gain(self):
        return self.gain


def make(interface="can1", **kw):
    made = {}

    def factory(model, iface):
        made["ctrl"] = StandInJointController(model, iface)
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
    assert np.allclose(sdk.gain.kp(), [60, 60, 60, 25, 25, 15]) and np.allclose(sdk.gain.kd(), X5_DEFAULT_KD)


def test_applying_gains_without_holding_first_would_throw():
    sdk = StandInJointController("X5", "can1")
    with pytest.raises(RuntimeError):
        sdk.set_gain(arx5.Gain(np.array(X5_DEFAULT_KP), np.array(X5_DEFAULT_KD), 5.0, 0.2))


def test_gains_that_do_not_read_back_are_refused():
    class Deaf(StandInJointController):
        def set_gain(self, gain):
            pass

    with pytest.raises(BackendUnavailable, match="did not take the gains"):
        Arx5Controller("can1", controller_factory=Deaf)


@pytest.mark.parametrize(
    "kwargs",
    [dict(kp=(80, 70, 70, 30, 30)), dict(kd=(2, 2, 2, 1, 1, np.nan)), dict(kp=(800, 70, 70, 30, 30, 20)),
     dict(gripper_kp=-1.0), dict(gripper_kd=X5_DEFAULT_GRIPPER_KD * MAX_GAIN_FACTOR * 1.01)],
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
