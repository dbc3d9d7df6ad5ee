"""Shared builders for the pure gate tests: a measured work pose and commands around it."""

from __future__ import annotations

import numpy as np

from egomimic_hw.description import ARMS
from egomimic_safety.checks import ArmCommand, ArmMeasurement
from egomimic_safety.config import GateConfig
from egomimic_safety.gate import CameraReport, Decision, GateState, JointCommands, Proposal, SafetyGate, Send

Q = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])
"""The sim driver's start pose (a non-singular work pose)."""

NO_CAMERAS = GateConfig(shadow_commands=1, required_cameras=())


def measure(gate: SafetyGate, kin, t: float, q=Q, gripper=0.5, mono=None) -> None:
    for arm in ARMS:
        meas = ArmMeasurement(np.array(q, float), gripper, kin[arm].forward(q), t)
        gate.update_measurement(arm, meas, t if mono is None else mono)


def cameras_ok(gate: SafetyGate, t: float, cameras=None) -> None:
    for cam in cameras if cameras is not None else gate.config.required_cameras:
        gate.update_camera(cam, CameraReport(True, "", t), t)


def proposal(kin, t, *, q=Q, dx=0.0, frame=None, quat_scale=1.0, gripper=0.5, obs=0.0) -> Proposal:
    arms = {}
    for arm in ARMS:
        pose = kin[arm].forward(q)
        pose[0] += dx
        pose[3:] *= quat_scale
        arms[arm] = ArmCommand(frame or arm.hw_frame, pose, gripper)
    return Proposal(t, arms, obs)


def armed_gate(kin, config: GateConfig = NO_CAMERAS, t: float = 0.0) -> SafetyGate:
    """A gate driven to ARMED at time t + 0.01 with fresh state (and cameras if required)."""
    gate = SafetyGate(config, kin)
    measure(gate, kin, t)
    cameras_ok(gate, t)
    ok, msg = gate.request_arm(t, t)
    assert ok, msg
    for i in range(config.shadow_commands):
        ts = t + 0.01 + i * 0.001
        assert gate.propose(proposal(kin, ts), ts, ts).send is Send.NOTHING  # shadow: validated, not forwarded
    assert gate.state == GateState.ARMED, gate.detail
    return gate


def forwarded_targets(decision: Decision) -> JointCommands:
    """The targets of a FORWARD decision; any other decision fails the test."""
    assert decision.send is Send.FORWARD, f"expected FORWARD, got {decision.send}"
    return decision.targets


def hold_targets(decision: Decision) -> JointCommands:
    """The hold target of a HOLD decision; any other decision fails the test."""
    assert decision.send is Send.HOLD, f"expected HOLD, got {decision.send}"
    return decision.targets
