"""The gate's state machine and checks on the pure logic (no ROS)."""

import numpy as np
import pytest

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_safety.checks import ArmCommand, ArmMeasurement
from egomimic_safety.config import GateConfig
from egomimic_safety.gate import GateState, Proposal, SafetyGate

Q = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])


@pytest.fixture(scope="module")
def kin():
    k = ArmKinematics()
    return {arm: k for arm in ARMS}


def measured(kin, now):
    return {arm: ArmMeasurement(Q.copy(), 0.5, kin[arm].forward(Q), now) for arm in ARMS}


def proposal(kin, now, *, dx=0.0, frame=None, quat_scale=1.0, gripper=0.5):
    arms = {}
    for arm in ARMS:
        pose = kin[arm].forward(Q)
        pose[0] += dx
        pose[3:] *= quat_scale
        arms[arm] = ArmCommand(frame or arm.hw_frame, pose, gripper)
    return Proposal(now, arms)


def armed_gate(kin, config=GateConfig(shadow_commands=1)):
    gate = SafetyGate(config, kin)
    for arm, m in measured(kin, 0.0).items():
        gate.update_measurement(arm, m)
    ok, msg = gate.request_arm(0.0)
    assert ok, msg
    assert gate.propose(proposal(kin, 0.01), 0.01) is None  # shadow: validated, not forwarded
    assert gate.state == GateState.ARMED
    return gate


def test_forwards_only_when_armed(kin):
    gate = SafetyGate(GateConfig(), kin)
    for arm, m in measured(kin, 0.0).items():
        gate.update_measurement(arm, m)
    assert gate.propose(proposal(kin, 0.0), 0.0) is None
    gate = armed_gate(kin)
    out = gate.propose(proposal(kin, 0.02, dx=0.005), 0.02)
    assert set(out) == set(ARMS) and gate.forwarded == 1


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        (dict(dx=float("nan")), "NONFINITE"),
        (dict(frame="left_base_dataset"), "FRAME"),
        (dict(quat_scale=1.5), "BAD_QUATERNION"),
        (dict(dx=0.2), "TRANSLATION_JUMP"),
        (dict(gripper=float("inf")), "NONFINITE"),
    ],
)
def test_fault_latches_hold_with_reason(kin, kwargs, reason):
    gate = armed_gate(kin)
    out = gate.propose(proposal(kin, 0.02, **kwargs), 0.02)
    assert gate.state == GateState.HOLD and gate.reason.value == reason
    # HOLD commands the joints measured at the fault, nothing else
    for arm in ARMS:
        assert np.allclose(out[arm][:6], Q)
    # no automatic resume: a good command afterwards is not forwarded
    assert gate.propose(proposal(kin, 0.05), 0.05) is not None and gate.state == GateState.HOLD
    assert gate.forwarded == 0


def test_minus_q_is_the_same_rotation(kin):
    gate = armed_gate(kin)
    assert gate.propose(proposal(kin, 0.02, quat_scale=-1.0), 0.02) is not None
    assert gate.state == GateState.ARMED


def test_gripper_out_of_range_is_clamped_and_counted(kin):
    gate = armed_gate(kin)
    out = gate.propose(proposal(kin, 0.02, gripper=1.7), 0.02)
    assert out[Arm.LEFT][6] == 1.0 and gate.clamped == 1 and gate.state == GateState.ARMED


def test_stale_command_and_state_detected_by_watchdog(kin):
    gate = armed_gate(kin)
    gate.propose(proposal(kin, 0.02), 0.02)
    gate.tick(0.05)
    assert gate.state == GateState.ARMED
    gate.tick(0.2)  # no state for 200 ms, no command for 180 ms
    assert gate.state == GateState.HOLD


def test_reset_goes_to_disarmed_never_armed(kin):
    gate = armed_gate(kin)
    gate.estop()
    assert gate.state == GateState.ESTOP
    assert not gate.disarm()[0]
    assert gate.reset()[0] and gate.state == GateState.DISARMED


def test_arming_refuses_far_start_pose(kin):
    gate = SafetyGate(GateConfig(shadow_commands=1), kin)
    for arm, m in measured(kin, 0.0).items():
        gate.update_measurement(arm, m)
    gate.request_arm(0.0)
    gate.propose(proposal(kin, 0.01, dx=0.05), 0.01)
    assert gate.state == GateState.DISARMED and gate.reason.value == "START_TOO_FAR"


def test_arming_needs_fresh_state(kin):
    gate = SafetyGate(GateConfig(), kin)
    ok, msg = gate.request_arm(0.0)
    assert not ok and "no fresh state" in msg


def test_exception_inside_gate_holds(kin):
    gate = armed_gate(kin)
    bad = Proposal(0.02, {arm: ArmCommand(arm.hw_frame, "not a pose", 0.5) for arm in ARMS})
    gate.propose(bad, 0.02)
    assert gate.state == GateState.HOLD and gate.reason.value == "INTERNAL_ERROR"


def test_arming_waits_for_the_first_command_through_a_state_hiccup(kin):
    gate = SafetyGate(GateConfig(shadow_commands=1), kin)
    for arm, m in measured(kin, 0.0).items():
        gate.update_measurement(arm, m)
    assert gate.request_arm(0.0)[0]
    gate.tick(0.5)  # state 500 ms old, no command yet: still waiting, nothing forwarded
    assert gate.state == GateState.ARMING
    assert gate.propose(proposal(kin, 0.6), 0.6) is None  # but a command on stale state fails
    assert gate.state == GateState.DISARMED and gate.reason.value == "STALE_STATE"
    gate.tick(20.0)
    assert gate.state == GateState.DISARMED
