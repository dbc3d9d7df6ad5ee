"""Joint commands by name: values put in the arm's order whatever order a JointState lists
them in, names that are not the arm's refused, and every refusal counted by the driver, the
ones its node decides (publisher, gate state) included."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_hw.description import Arm, GripperCalibration
from egomimic_hw.driver.arm_driver import ArmDriver, DriverConfig
from egomimic_hw.driver.joint_order import in_arm_order
from egomimic_hw.driver.sim import SimArx5Controller, SimConfig
from egomimic_hw.kinematics import ArmKinematics

NAMES = Arm.LEFT.joint_names
START = np.array(SimConfig().initial_joints_rad)


class Recording(SimArx5Controller):
    """The simulated controller, keeping every joint target it was sent."""

    def __init__(self):
        super().__init__(SimConfig(joint_noise_std_rad=0.0))
        self.targets: list[np.ndarray] = []

    def command(self, joints_rad, gripper_m, now_s, preview_s):
        self.targets.append(np.asarray(joints_rad, dtype=float).copy())
        super().command(joints_rad, gripper_m, now_s, preview_s)


@pytest.fixture(scope="module")
def kin():
    return ArmKinematics()


@pytest.fixture
def driver(kin):
    ctrl = Recording()
    d = ArmDriver(DriverConfig(arm=Arm.LEFT, gripper=GripperCalibration()), ctrl, kin)
    d.tick(0.0)  # a first measurement: commands are judged against it
    return d, ctrl


def test_values_are_put_in_the_arm_order_by_name():
    values = np.arange(7.0)
    assert np.array_equal(in_arm_order(values, [], NAMES)[0], values), "no names: the arm's order"
    assert np.array_equal(in_arm_order(values, NAMES, NAMES)[0], values)
    shuffled = [NAMES[i] for i in (6, 2, 0, 5, 1, 4, 3)]
    ordered, why = in_arm_order(values, shuffled, NAMES)
    assert why == "" and dict(zip(shuffled, values, strict=True)) == dict(zip(NAMES, ordered, strict=True))


@pytest.mark.parametrize(
    "names",
    [
        NAMES[:6],  # the gripper missing
        [n.replace("left", "right") for n in NAMES],  # the other arm's
        NAMES[:6] + [NAMES[0]],  # a joint twice: which value would it be?
        NAMES + ["left_joint7"],
    ],
)
def test_names_that_are_not_the_arms_are_refused(names):
    values, why = in_arm_order(np.zeros(len(names)), names, NAMES)
    assert why.startswith("joint names") and str(NAMES) in why


def test_a_shuffled_command_reaches_the_controller_in_the_arm_order(driver):
    d, ctrl = driver
    target = np.append(START + np.linspace(0.01, 0.06, 6), 0.5)
    order = [6, 5, 4, 3, 2, 1, 0]
    assert d.on_command(target[order], 0.01, names=[NAMES[i] for i in order])
    assert np.allclose(ctrl.targets[-1], target[:6])
    assert (d.counters.commands_received, d.counters.commands_applied) == (1, 1)


def test_wrong_names_are_refused_and_counted_and_nothing_is_sent(driver):
    d, ctrl = driver
    assert not d.on_command(np.append(START, 0.5), 0.01, names=[n.replace("left", "right") for n in NAMES])
    assert d.counters.refusals["joint_names"] == 1 and d.refusal.startswith("joint names")
    assert (d.counters.commands_received, d.counters.commands_refused) == (1, 1) and ctrl.targets == []


def test_named_values_of_the_wrong_count_are_refused_as_malformed(driver):
    d, ctrl = driver
    shuffled = list(reversed(NAMES))
    assert not d.on_command(np.append(START, [0.5, 0.1]), 0.01, names=shuffled)
    assert d.counters.refusals["malformed"] == 1 and ctrl.targets == []


def test_a_refusal_decided_before_the_values_is_counted_as_received_and_holds(driver):
    d, ctrl = driver
    assert d.on_command(np.append(START + 0.05, 0.5), 0.01)
    d.refuse_command("gate_not_armed", "the gate is not commanding (state 0)", 0.02)
    c = d.counters
    assert (c.commands_received, c.commands_applied, c.commands_refused) == (2, 1, 1)
    assert c.refusals["gate_not_armed"] == 1 and d.refusal == "the gate is not commanding (state 0)"
    assert d.tick(0.03).holding, "a refused stream is no longer trusted: the arm holds where it is"
    assert np.allclose(ctrl.targets[-1], d.tick(0.03).reading.joints_rad, atol=1e-3)


def test_home_brings_the_simulated_arm_back_to_its_start_pose_and_gripper(driver):
    """A new simulated trial starts where the first did: the sim's home is its start pose (the
    hardware's is all-zero joints, base.home_pose), reached within the move's duration at the
    arm's speed limits, and held there by the watchdog afterwards."""
    from egomimic_hw.driver.base import home_pose

    d, ctrl = driver
    t = 0.0
    for k in range(60):  # move away for 2 s, gripper closing
        t = 0.01 + k / 30.0
        d.on_command(np.append(START + np.r_[0.3, -0.2, 0.2, 0.0, 0.1, 0.0] * min(1.0, k / 45.0), 0.0), t)
        d.tick(t)
    away = d.tick(t).reading
    assert np.max(np.abs(away.joints_rad - START)) > 0.15 and away.gripper_m < 0.02
    assert d.home(t, duration_s=3.0) == "homing over 3.0 s"
    for k in range(1, 121):
        state = d.tick(t + k / 30.0)
    assert np.allclose(state.reading.joints_rad, START, atol=2e-3), state.reading.joints_rad - START
    assert state.reading.gripper_m == pytest.approx(SimConfig().initial_gripper_m, abs=1e-3)
    assert d.home(t + 5.0) == "homing over 1.0 s", "already home: the shortest move"
    joints, gripper = home_pose(object())  # a controller that names no home: the SDK's
    assert np.array_equal(joints, np.zeros(6)) and gripper is None
