"""The gate's typed decision: what a Decision may carry, and which one propose() returns in each
state (the adapter maps it to messages without looking at the gate's state)."""

import numpy as np
import pytest

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_safety.gate import NOTHING, Decision, GateState, SafetyGate, Send

from .helpers import NO_CAMERAS, Q, armed_gate, forwarded_targets, hold_targets, measure, proposal

TARGET = np.append(Q, 0.5)


@pytest.fixture(scope="module")
def kin():
    k = ArmKinematics()
    return dict.fromkeys(ARMS, k)


def test_a_forward_carries_both_arms_a_hold_a_target_nothing_none():
    both = {arm: TARGET.copy() for arm in ARMS}
    assert Decision(Send.FORWARD, both).targets is both
    assert Decision(Send.HOLD, {Arm.LEFT: TARGET}).targets[Arm.LEFT] is TARGET  # a hold may cover one measured arm
    with pytest.raises(ValueError, match="both arms"):
        Decision(Send.FORWARD, {Arm.LEFT: TARGET})  # never one arm without the other
    with pytest.raises(ValueError, match="both arms"):
        Decision(Send.FORWARD)
    with pytest.raises(ValueError, match="hold target"):
        Decision(Send.HOLD, {})
    with pytest.raises(ValueError, match="no targets"):
        Decision(Send.NOTHING, both)
    assert NOTHING.send is Send.NOTHING and NOTHING.targets is None


def test_a_decision_has_no_truth_value():
    """`if decision:` was the old "something to send" test; every Decision object would pass it."""
    for decision in (NOTHING, Decision(Send.HOLD, {Arm.LEFT: TARGET})):
        with pytest.raises(TypeError, match="decision.send"):
            bool(decision)


def test_after_fault_holds_only_with_a_target():
    assert Decision.after_fault(None) is NOTHING
    held = Decision.after_fault({Arm.RIGHT: TARGET})
    assert held.send is Send.HOLD and held.targets[Arm.RIGHT] is TARGET


def test_propose_decides_in_every_state(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.propose(proposal(kin, 0.0), 0.0, 0.0) is NOTHING  # DISARMED
    assert gate.request_arm(0.0, 0.0)[0]
    assert gate.propose(proposal(kin, 0.01), 0.01, 0.01) is NOTHING and gate.state == GateState.ARMED  # the shadow
    out = forwarded_targets(gate.propose(proposal(kin, 0.05, dx=0.005), 0.05, 0.05))
    assert set(out) == set(ARMS) and gate.forwarded == 1
    assert gate.propose(proposal(kin, 0.15), 0.15, 0.15) is NOTHING and gate.deferred == 1  # state 150 ms late
    measure(gate, kin, 0.16)
    hold = hold_targets(gate.propose(proposal(kin, 0.17, dx=float("nan")), 0.17, 0.17))
    assert gate.state == GateState.HOLD
    assert all(np.array_equal(hold[arm], TARGET) for arm in ARMS), "the hold is the measured joints"
    assert gate.propose(proposal(kin, 0.2), 0.2, 0.2) is NOTHING  # HOLD re-sends from tick(), never from propose
    assert gate.forwarded == 1


def test_a_rejection_while_arming_sends_nothing(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.request_arm(0.0, 0.0)[0]
    assert gate.propose(proposal(kin, 0.01, dx=0.05), 0.01, 0.01) is NOTHING  # START_TOO_FAR: back to DISARMED
    assert gate.state == GateState.DISARMED and gate.reason.value == "START_TOO_FAR"


def test_forward_exactly_when_armed_before_and_after(kin):
    """The old adapter's inference ("targets and ARMED after the call: forward"), checked against
    the decision over a run that tracks, is refused, deferred and re-armed."""
    rng = np.random.default_rng(7)
    gate = armed_gate(kin)
    sends = []
    for k in range(1, 120):
        t = 0.01 + k / 30
        if k % 7:
            measure(gate, kin, t)
        if k == 60 and gate.state in (GateState.HOLD, GateState.ESTOP):
            gate.reset()
        if gate.state == GateState.DISARMED:
            measure(gate, kin, t)
            gate.request_arm(t, t)
        before = gate.state
        forwarded_before = gate.forwarded
        dx = 0.2 if k in (40, 90) else float(rng.uniform(-0.002, 0.002))
        decision = gate.propose(proposal(kin, t, dx=dx), t, t)
        sends.append(decision.send)
        armed_through = before == GateState.ARMED and gate.state == GateState.ARMED
        assert (decision.send is Send.FORWARD) == (armed_through and gate.forwarded == forwarded_before + 1), k
        assert (decision.send is Send.HOLD) == (before == GateState.ARMED and gate.state == GateState.HOLD), k
    assert {Send.FORWARD, Send.HOLD, Send.NOTHING} <= set(sends), "the run must reach every decision"
