"""The simulated SDK controller and the driver logic: limits, settling, watchdog, faults."""

import numpy as np
import pytest

from egomimic_hw.description import X5_LIMITS, Arm, GripperCalibration
from egomimic_hw.driver.arm_driver import ArmDriver, DriverConfig
from egomimic_hw.driver.sim import SimArx5Controller, SimConfig
from egomimic_hw.errors import ConfigError
from egomimic_hw.kinematics import ArmKinematics

START = np.array(SimConfig().initial_joints_rad)


def run(ctrl, t0, t1, dt=0.002):
    ts = np.arange(t0, t1, dt)
    return ts, np.array([ctrl.read(t).joints_rad for t in ts])


def test_step_command_respects_speed_limits_and_settles():
    ctrl = SimArx5Controller(SimConfig(joint_noise_std_rad=0.0))
    target = START + 0.5
    target[1] = START[1] - 0.5  # keep joint2 well inside its limits
    ctrl.command(target, 0.04, now_s=0.0, preview_s=0.0)  # a step: only the speed clip limits it
    ts, q = run(ctrl, 0.002, 1.5)
    speeds = np.abs(np.diff(q, axis=0)) / 0.002
    assert np.all(speeds <= X5_LIMITS.vel_max * (1 + 1e-6))
    assert ctrl.clipped_steps > 0
    assert np.max(np.abs(q[-1] - target)) < 1e-3


def test_out_of_limit_target_is_clipped_like_the_sdk():
    ctrl = SimArx5Controller(SimConfig(joint_noise_std_rad=0.0))
    target = START.copy()
    target[0] = 10.0
    ctrl.command(target, 0.5, now_s=0.0, preview_s=0.1)
    _, q = run(ctrl, 0.002, 3.0)
    assert np.isclose(q[-1][0], X5_LIMITS.pos_max[0], atol=1e-3)
    assert ctrl.read(3.0).gripper_m <= X5_LIMITS.gripper_width_m + 1e-9


def test_holds_without_commands():
    ctrl = SimArx5Controller(SimConfig(joint_noise_std_rad=1e-5), seed=1)
    _, q = run(ctrl, 0.0, 2.0, dt=0.01)
    assert np.max(np.abs(q - START)) < 1e-4  # noise only, no drift


def test_emergency_latches_and_ignores_commands():
    ctrl = SimArx5Controller(SimConfig(joint_noise_std_rad=0.0))
    ctrl.inject_emergency("test")
    ctrl.command(START + 0.3, 0.04, 0.0, 0.0)
    _, q = run(ctrl, 0.002, 0.5)
    assert ctrl.read(0.5).fault == "test"
    assert np.max(np.abs(q - START)) < 1e-9


def test_bad_sim_config_is_refused():
    with pytest.raises(ConfigError):
        SimConfig(initial_joints_rad=(0.0,) * 5)
    with pytest.raises(ConfigError):
        SimConfig(initial_joints_rad=(9.0, 0, 0, 0, 0, 0))


@pytest.fixture(scope="module")
def kin():
    return ArmKinematics()


def make_driver(kin):
    ctrl = SimArx5Controller(SimConfig(joint_noise_std_rad=0.0))
    return ArmDriver(DriverConfig(arm=Arm.LEFT, gripper=GripperCalibration()), ctrl, kin), ctrl


def test_driver_refuses_malformed_commands(kin):
    driver, _ = make_driver(kin)
    assert not driver.on_command(np.array([np.nan] * 7), 0.0)
    assert not driver.on_command(np.zeros(6), 0.0)
    assert driver.counters.commands_refused == 2 and driver.counters.commands_applied == 0


def test_driver_watchdog_holds_measured_position(kin):
    driver, ctrl = make_driver(kin)
    target = np.append(START + 0.3, 0.5)
    driver.tick(0.0)
    assert driver.on_command(target, 0.0)
    state = driver.tick(0.05)
    assert not state.holding
    state = driver.tick(0.15)  # > command_timeout (0.1 s) since the last command
    assert state.holding and driver.counters.watchdog_holds == 1
    held = state.reading.joints_rad
    later = driver.tick(1.0).reading.joints_rad
    assert np.max(np.abs(later - held)) < 0.02  # stops near where it was, not at the target
    assert np.max(np.abs(later - (START + 0.3))) > 0.05  # and not at the target


def test_driver_watchdog_is_due_at_the_timeout_and_holds_between_ticks(kin):
    driver, _ = make_driver(kin)
    assert driver.watchdog_due_s() is None  # nothing commanded yet: nothing to watch
    driver.tick(0.0)
    assert driver.on_command(np.append(START + 0.3, 0.5), 0.02)
    assert driver.watchdog_due_s() == pytest.approx(0.12)
    driver.tick(0.05)
    assert not driver.check_watchdog(0.12)  # the timeout is strict
    assert driver.check_watchdog(0.1201)
    assert driver.counters.watchdog_holds == 1 and driver.counters.last_watchdog_delay_s == pytest.approx(0.1001)
    assert driver.watchdog_due_s() is None and driver.tick(0.125).holding
    assert driver.counters.watchdog_holds == 1  # the next tick does not hold a second time
    assert driver.on_command(np.append(driver.tick(0.13).reading.joints_rad, 0.5), 0.13)
    assert driver.watchdog_due_s() == pytest.approx(0.23)


def test_driver_publishes_fk_pose(kin):
    driver, _ = make_driver(kin)
    state = driver.tick(0.0)
    assert np.allclose(state.ee_pose_hw, kin.forward(state.reading.joints_rad))
    assert 0.0 <= state.gripper_norm <= 1.0


def test_driver_refuses_targets_outside_the_limits_and_holds(kin):
    """Defence in depth: a command past a joint limit never reaches the controller; the arm
    holds where it is instead of continuing to the previous target."""
    driver, ctrl = make_driver(kin)
    driver.tick(0.0)
    assert driver.on_command(np.append(START + 0.2, 0.5), 0.0)
    driver.tick(0.05)
    past = np.append(START, 0.5)
    past[0] = X5_LIMITS.pos_max[0] + 0.01
    assert not driver.on_command(past, 0.05)
    assert driver.counters.refusals["outside_limits"] == 1 and "joint1" in driver.refusal
    state = driver.tick(0.06)
    assert state.holding
    held = driver.tick(1.0).reading.joints_rad
    assert np.max(np.abs(held - (START + 0.2))) > 0.05, "after a refusal the arm must not go on to the old target"
    assert np.all(held <= X5_LIMITS.pos_max)


def test_driver_refuses_a_step_larger_than_the_speed_limits_allow(kin):
    driver, _ = make_driver(kin)
    driver.tick(0.0)
    allowed = X5_LIMITS.vel_max * (DriverConfig(arm=Arm.LEFT).command_period_s + DriverConfig(arm=Arm.LEFT).preview_s)
    ok = np.append(START + np.r_[allowed[0] * 0.95, np.zeros(5)], 0.5)
    too_far = np.append(START + np.r_[allowed[0] * 1.05, np.zeros(5)], 0.5)
    assert not driver.on_command(too_far, 0.0)
    assert driver.counters.refusals["step_too_large"] == 1
    assert driver.on_command(ok, 0.01)


def test_driver_refuses_commands_before_its_first_measurement(kin):
    driver, _ = make_driver(kin)
    assert not driver.on_command(np.append(START, 0.5), 0.0)
    assert driver.counters.refusals["no_state"] == 1


class _TeleportingController:
    """A controller whose measurement jumps (a corrupted encoder read): the driver must not
    trust it."""

    def __init__(self, inner):
        self.inner = inner
        self.jump_at = None

    def read(self, now_s):
        r = self.inner.read(now_s)
        if self.jump_at is not None and now_s >= self.jump_at:
            from dataclasses import replace

            return replace(r, joints_rad=r.joints_rad + np.r_[1.0, np.zeros(5)])
        return r

    def command(self, *args):
        self.inner.command(*args)

    def close(self):
        self.inner.close()


def test_driver_does_not_trust_an_implausible_measurement(kin):
    ctrl = _TeleportingController(SimArx5Controller(SimConfig(joint_noise_std_rad=0.0)))
    driver = ArmDriver(DriverConfig(arm=Arm.LEFT, gripper=GripperCalibration()), ctrl, kin)
    for k in range(5):
        driver.tick(k * 0.01)
    ctrl.jump_at = 0.05
    state = driver.tick(0.05)
    assert state.holding and "implausible" in state.status and driver.counters.implausible_readings == 1
    assert not driver.on_command(np.append(START, 0.5), 0.05)
    assert driver.counters.refusals["implausible_state"] == 1


def test_a_second_read_of_the_same_measurement_reads_the_same_values():
    """The driver stamps a re-read of the same measurement with the same stamp, so the values
    must be the same too (as the SDK returns its latest state): a new noise draw per read gave
    two different joint samples under one stamp (fc23: ee_pose 1.2e-5 m from the FK of the
    joints published with its stamp). A new substep is a new measurement with new noise."""
    ctrl = SimArx5Controller(SimConfig(), seed=3)
    a, b = ctrl.read(0.1), ctrl.read(0.1005)  # within one 2 ms substep
    assert a.measured_at_s == b.measured_at_s and np.array_equal(a.joints_rad, b.joints_rad)
    c = ctrl.read(0.11)
    assert c.measured_at_s > a.measured_at_s and not np.array_equal(c.joints_rad, a.joints_rad)
