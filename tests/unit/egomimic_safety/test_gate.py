"""The gate's state machine and checks on the pure logic (no ROS)."""

import dataclasses

import numpy as np
import pytest

from egomimic_hw.description import ARMS, X5_LIMITS, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_safety.checks import ArmMeasurement, quat_angle
from egomimic_safety.config import CLAMP, GateConfig
from egomimic_safety.gate import CameraReport, GateState, SafetyGate, Send

from .helpers import NO_CAMERAS, Q, armed_gate, cameras_ok, forwarded_targets, hold_targets, measure, proposal


@pytest.fixture(scope="module")
def kin():
    k = ArmKinematics()
    return dict.fromkeys(ARMS, k)


def test_forwards_only_when_armed(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.propose(proposal(kin, 0.0), 0.0, 0.0).send is Send.NOTHING
    gate = armed_gate(kin)
    out = forwarded_targets(gate.propose(proposal(kin, 0.05, dx=0.005), 0.05, 0.05))
    assert set(out) == set(ARMS) and gate.forwarded == 1
    assert np.allclose(
        kin[Arm.LEFT].forward(out[Arm.LEFT][:6])[:3], kin[Arm.LEFT].forward(Q)[:3] + [0.005, 0, 0], atol=1e-3
    )


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        (dict(dx=float("nan")), "NONFINITE"),
        (dict(frame="left_base_dataset"), "FRAME"),
        (dict(quat_scale=1.5), "BAD_QUATERNION"),
        (dict(quat_scale=0.0), "BAD_QUATERNION"),
        (dict(dx=0.2), "TRANSLATION_JUMP"),
        (dict(dx=0.05), "TRANSLATION_RATE"),
        (dict(gripper=float("inf")), "NONFINITE"),
    ],
)
def test_fault_latches_hold_with_reason(kin, kwargs, reason):
    gate = armed_gate(kin)
    decision = gate.propose(proposal(kin, 0.05, **kwargs), 0.05, 0.05)
    assert gate.state == GateState.HOLD and gate.reason.value == reason, gate.detail
    # HOLD commands the joints measured at the fault, nothing else, at once
    out = hold_targets(decision)
    for arm in ARMS:
        assert np.allclose(out[arm][:6], Q) and out[arm][6] == 0.5
    # no automatic resume: good commands afterwards are not forwarded
    for i in range(5):
        t = 0.06 + 0.033 * i
        measure(gate, kin, t)
        assert gate.propose(proposal(kin, t), t, t).send is Send.NOTHING
    assert gate.state == GateState.HOLD and gate.forwarded == 0


def test_hold_is_resent_once_per_control_period(kin):
    gate = armed_gate(kin)
    assert gate.propose(proposal(kin, 0.05, dx=float("nan")), 0.05, 0.05).send is Send.HOLD
    sent = [t for t in np.arange(0.06, 0.5, 0.01) if gate.tick(t, t) is not None]
    assert 12 <= len(sent) <= 14  # ~30 Hz over 0.44 s
    out = gate.tick(1.0, 1.0)
    assert all(np.allclose(out[a][:6], Q) for a in ARMS)


def test_minus_q_is_the_same_rotation(kin):
    gate = armed_gate(kin)
    out = forwarded_targets(gate.propose(proposal(kin, 0.05, quat_scale=-1.0), 0.05, 0.05))
    assert gate.state == GateState.ARMED
    assert np.allclose(out[Arm.LEFT][:6], Q, atol=1e-2)


def test_a_true_half_turn_is_refused(kin):
    gate = armed_gate(kin)
    p = proposal(kin, 0.05)
    for arm in ARMS:
        w, x, y, z = p.arms[arm].pose[3:]
        p.arms[arm].pose[3:] = [-z, y, -x, w]  # q * (0, 0, 0, 1): 180 deg about the EE z axis
    gate.propose(p, 0.05, 0.05)
    assert gate.state == GateState.HOLD and gate.reason.value == "ROTATION_JUMP"


def test_rate_limit_is_against_the_previous_accepted_command(kin):
    gate = armed_gate(kin)
    t = 0.05
    for i in range(1, 6):  # 15 mm per step: under 20 mm/step, and the measured pose follows
        t += 0.033
        q_meas = kin[Arm.LEFT].inverse(proposal(kin, t, dx=0.015 * (i - 1)).arms[Arm.LEFT].pose, Q).joints_rad
        measure(gate, kin, t, q=q_meas)
        assert gate.propose(proposal(kin, t, dx=0.015 * i), t, t).send is Send.FORWARD, gate.detail
    t += 0.033
    gate.propose(proposal(kin, t, dx=0.015 * 5 + 0.025), t, t)  # 25 mm step: too fast
    assert gate.state == GateState.HOLD and gate.reason.value == "TRANSLATION_RATE"


@pytest.mark.parametrize("dt_s, allowed_m", [(1 / 30, 0.020), (0.010, 0.006), (0.5, 0.040)])
def test_rate_clamp_moves_at_most_speed_times_dt(kin, dt_s, allowed_m):
    """0.6 m/s x the stamp difference to the previous accepted command (the shadow at 0.01 s),
    dt capped at 2 control periods (40 mm)."""
    gate = armed_gate(kin, GateConfig(shadow_commands=1, required_cameras=(), command_step_action=CLAMP))
    t = 0.01 + dt_s
    measure(gate, kin, t)
    out = forwarded_targets(gate.propose(proposal(kin, t, dx=0.05), t, t))
    assert gate.state == GateState.ARMED and gate.clamped == 1 and gate.reason_counts["TRANSLATION_RATE"] == 1, (
        gate.detail
    )
    moved = kin[Arm.LEFT].forward(out[Arm.LEFT][:6])[0] - kin[Arm.LEFT].forward(Q)[0]
    assert allowed_m - 0.001 < moved < allowed_m + 0.001


def _follow(gate, kin, t, out):
    """A perfect driver: the measured joints are the forwarded ones."""
    for arm in ARMS:
        q = out[arm][:6]
        gate.update_measurement(arm, ArmMeasurement(q.copy(), 0.5, kin[arm].forward(q), t), t)


def test_fast_producer_is_held_before_exceeding_the_declared_speed(kin):
    """Review finding: 19 mm per message at 55 Hz is 1.05 m/s. A per-message limit of 20 mm let
    it through; the limit per unit of time (0.6 m/s x 18 ms = 11 mm) holds it at once."""
    gate = armed_gate(kin)
    speed = gate.config.max_ee_speed_m_s
    t, dx = 0.01, 0.0  # the shadow command: the measured pose at t = 0.01
    forwarded = []
    for _ in range(55):
        t += 1 / 55
        dx += 0.019
        decision = gate.propose(proposal(kin, t, dx=dx), t, t)
        if gate.state != GateState.ARMED:
            break
        out = forwarded_targets(decision)
        forwarded.append((t, kin[Arm.LEFT].forward(out[Arm.LEFT][:6])[:3]))
        _follow(gate, kin, t, out)
    assert gate.state == GateState.HOLD and gate.reason.value == "TRANSLATION_RATE", gate.detail
    for (t0, p0), (t1, p1) in zip([(0.01, kin[Arm.LEFT].forward(Q)[:3])] + forwarded, forwarded):
        assert np.linalg.norm(p1 - p0) / (t1 - t0) <= speed + 1e-3 / (t1 - t0)
    assert not forwarded  # 19 mm in 18 ms is refused at the first step, whatever came before
    assert np.array_equal(hold_targets(decision)[Arm.LEFT], np.append(Q, 0.5))  # and the arm holds where it is


def test_fast_producer_under_the_speed_keeps_moving(kin):
    """10 mm per message at 55 Hz (0.55 m/s) is within 0.6 m/s: one second of it, back and
    forth over 5 cm, is forwarded."""
    gate = armed_gate(kin)
    t = 0.01
    for i in range(55):
        t += 1 / 55
        dx = 0.010 * (5 - abs(5 - (i + 1) % 10))  # 10, 20, .., 50, 40, .., 0, 10 mm ...
        decision = gate.propose(proposal(kin, t, dx=dx), t, t)
        assert gate.state == GateState.ARMED, gate.detail
        _follow(gate, kin, t, forwarded_targets(decision))
    assert gate.state == GateState.ARMED and gate.forwarded == 55


def test_fast_rotating_producer_is_held(kin):
    """50 mrad per message at 55 Hz is 2.75 rad/s (limit 1.8 rad/s: 33 mrad per 18 ms)."""
    from scipy.spatial.transform import Rotation

    gate = armed_gate(kin)
    t, angle = 0.01, 0.0
    while gate.state == GateState.ARMED and angle < 1.0:
        t += 1 / 55
        angle += 0.05
        p = proposal(kin, t)
        for arm in ARMS:
            r = Rotation.from_quat(np.roll(p.arms[arm].pose[3:], -1)) * Rotation.from_rotvec([0.0, 0.0, angle])
            p.arms[arm].pose[3:] = np.roll(r.as_quat(), 1)
        decision = gate.propose(p, t, t)
        if gate.state == GateState.ARMED:
            _follow(gate, kin, t, forwarded_targets(decision))
    assert gate.state == GateState.HOLD and gate.reason.value == "ROTATION_RATE" and gate.forwarded == 0, gate.detail


def test_a_pause_grants_at_most_two_periods_of_motion(kin):
    """After 0.5 s without commands (the watchdog not run), 35 mm passes (< 40 mm = 0.6 m/s x
    2 periods) but 45 mm does not: a pause is not credit for a jump."""
    for dx, ok in ((0.035, True), (0.045, False)):
        gate = armed_gate(kin)
        measure(gate, kin, 0.51)
        gate.propose(proposal(kin, 0.51, dx=dx), 0.51, 0.51)
        assert (gate.state == GateState.ARMED) == ok and gate.forwarded == int(ok), gate.detail
        if not ok:
            assert gate.reason.value == "TRANSLATION_RATE"


def test_workspace_box_rejects_or_clamps(kin):
    x = kin[Arm.LEFT].forward(Q)[0]
    box = dict(workspace_left_max_m=(x + 0.005, 0.6, 0.7), workspace_right_max_m=(x + 0.005, 0.6, 0.7))
    gate = armed_gate(kin, GateConfig(shadow_commands=1, required_cameras=(), **box))
    gate.propose(proposal(kin, 0.05, dx=0.01), 0.05, 0.05)
    assert gate.reason.value == "WORKSPACE"
    gate = armed_gate(kin, GateConfig(shadow_commands=1, required_cameras=(), workspace_action=CLAMP, **box))
    out = forwarded_targets(gate.propose(proposal(kin, 0.05, dx=0.01), 0.05, 0.05))
    assert kin[Arm.LEFT].forward(out[Arm.LEFT][:6])[0] <= x + 0.005 + 1e-3


def test_joint_limit_target_is_refused(kin):
    q_near = Q.copy()
    q_near[5] = 1.97  # wrist roll 30 mrad inside its 2.0 rad limit
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0, q=q_near)
    gate.request_arm(0.0, 0.0)
    gate.propose(proposal(kin, 0.01, q=q_near), 0.01, 0.01)
    assert gate.state == GateState.ARMED
    q_over = q_near.copy()
    q_over[5] = 2.02
    gate.propose(proposal(kin, 0.04, q=q_over), 0.04, 0.04)
    assert gate.state == GateState.HOLD and gate.reason.value == "JOINT_LIMIT", gate.detail


def test_unreachable_pose_is_ik_failed(kin):
    q_far = np.array([0.0, 2.4701, 2.7068, -0.5280, 0.0, 0.0])  # stretched out: link6 at x = 0.54 m
    box = dict(workspace_left_max_m=(0.9, 0.9, 0.9), workspace_right_max_m=(0.9, 0.9, 0.9))
    gate = SafetyGate(GateConfig(shadow_commands=1, required_cameras=(), **box), kin)
    measure(gate, kin, 0.0, q=q_far)
    gate.request_arm(0.0, 0.0)
    gate.propose(proposal(kin, 0.01, q=q_far), 0.01, 0.01)
    assert gate.state == GateState.ARMED
    gate.propose(proposal(kin, 0.04, q=q_far, dx=0.015), 0.04, 0.04)  # 15 mm further: beyond the reach
    assert gate.state == GateState.HOLD and gate.reason.value == "IK_FAILED", gate.detail


def test_gripper_out_of_range_is_clamped_and_counted(kin):
    gate = armed_gate(kin)
    out = forwarded_targets(gate.propose(proposal(kin, 0.05, gripper=1.7), 0.05, 0.05))
    assert out[Arm.LEFT][6] == 1.0 and gate.clamped == 1 and gate.state == GateState.ARMED
    assert gate.reason_counts["GRIPPER_RANGE"] == 1


def test_stale_command_and_state_detected_by_watchdog(kin):
    gate = armed_gate(kin)
    measure(gate, kin, 0.05)
    gate.propose(proposal(kin, 0.05), 0.05, 0.05)
    for t in np.arange(0.06, 0.45, 0.01):  # state keeps coming, commands do not
        measure(gate, kin, t, mono=t)
        gate.tick(t, t)
        if gate.state != GateState.ARMED:
            break
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_COMMAND"
    assert t == pytest.approx(0.05 + gate.config.command_timeout_s + 0.01)  # the first tick past the timeout
    gate = armed_gate(kin)
    for t in np.arange(0.09, 0.30, 1 / 30):  # the policy goes on; the state is late: nothing forwarded
        assert gate.propose(proposal(kin, t), t, t).send is Send.NOTHING
        gate.tick(t, t)
    assert gate.state == GateState.ARMED and gate.deferred == 7 and gate.deferred_counts["STALE_STATE"] == 7
    gate.tick(0.31, 0.31)  # 310 ms: the lateness persisted past state_hold_after_s
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_STATE"


def test_late_state_defers_then_resumes_without_a_fault(kin):
    """A driver stream delayed by a loaded machine: the commands in between are not forwarded
    (counted), nothing latches, and forwarding resumes with fresh state."""
    gate = armed_gate(kin)
    assert gate.propose(proposal(kin, 0.05), 0.05, 0.05).send is Send.FORWARD
    assert gate.propose(proposal(kin, 0.15), 0.15, 0.15).send is Send.NOTHING  # state 150 ms old
    gate.tick(0.16, 0.16)
    measure(gate, kin, 0.17, mono=0.17)
    decision = gate.propose(proposal(kin, 0.18), 0.18, 0.18)
    assert decision.send is Send.FORWARD and gate.state == GateState.ARMED and gate.rejected == 0 and gate.deferred == 1
    # the run of deferrals is measured from its first deferral to the forward that ended it
    assert gate.deferral_runs == 1 and gate.deferral_run_max_s == pytest.approx(0.18 - 0.15)
    assert gate.propose(proposal(kin, 0.21), 0.21, 0.21).send is Send.FORWARD and gate.deferral_runs == 1


def test_silence_is_measured_on_the_monotonic_clock(kin):
    """A ROS clock that stands still (use_sim_time with /clock stopped) must not hide a dead
    producer: the command's silence is measured on the monotonic clock. (A clock stepping back
    is STATE_IMPLAUSIBLE first: next test.)"""
    gate = armed_gate(kin)
    gate.propose(proposal(kin, 0.05), 0.05, 0.05)
    measure(gate, kin, 0.05 + 1e-6, mono=0.35)  # the driver stamps with the same frozen clock
    gate.tick(0.05 + 1e-6, 0.36)  # monotonic: 310 ms since the last command
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_COMMAND"


def test_state_stamps_going_back_with_the_clock_are_implausible(kin):
    """A driver that stamps with a ROS clock that stepped back 5 s sends measurements older than
    the last one: the gate cannot tell that from a replayed or second stream, so it holds
    (fail closed) and the hold is the last plausible measurement."""
    gate = armed_gate(kin)
    gate.propose(proposal(kin, 0.05), 0.05, 0.05)
    out = gate.update_measurement(
        Arm.LEFT, ArmMeasurement(Q + 0.001, 0.5, kin[Arm.LEFT].forward(Q + 0.001), -4.85), 0.15
    )
    assert gate.state == GateState.HOLD and gate.reason.value == "STATE_IMPLAUSIBLE" and "before" in gate.detail
    assert not gate.last_measurement_accepted
    assert np.array_equal(out[Arm.LEFT], np.append(Q, 0.5)), "the hold is the last plausible measurement"


@pytest.mark.parametrize("jump_s", [-5.0, -0.15, 0.08, 5.0])
def test_command_stamp_jump_is_stale(kin, jump_s):
    gate = armed_gate(kin)
    gate.propose(proposal(kin, 0.05 + jump_s), 0.05, 0.05)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_COMMAND"


def test_replayed_stamp_is_stale(kin):
    gate = armed_gate(kin)
    gate.propose(proposal(kin, 0.05), 0.05, 0.05)
    gate.propose(proposal(kin, 0.05), 0.06, 0.06)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_COMMAND"


def test_flood_is_a_fault(kin):
    gate = armed_gate(kin)
    t = 0.05
    while gate.state == GateState.ARMED and t < 0.2:
        gate.propose(proposal(kin, t), t, t)
        t += 0.001
    assert gate.state == GateState.HOLD and gate.reason.value == "COMMAND_RATE"
    assert gate.forwarded <= gate.config.max_commands_per_window


def test_camera_health_gates_arming_and_holds(kin):
    cfg = GateConfig(shadow_commands=1)
    gate = SafetyGate(cfg, kin)
    measure(gate, kin, 0.0)
    ok, msg = gate.request_arm(0.0, 0.0)
    assert not ok and "front_1" in msg and gate.reason_counts["STALE_CAMERA"] == 1
    gate = armed_gate(kin, cfg)
    out = gate.update_camera("left_wrist", CameraReport(False, "FROZEN: content unchanged 120 ms", 0.02), 0.02)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_CAMERA" and out is not None
    gate = armed_gate(kin, cfg)
    measure(gate, kin, 0.11)
    cameras_ok(gate, 0.11, ["front_1", "left_wrist"])  # right_wrist went silent at t=0
    assert gate.propose(proposal(kin, 0.11), 0.11, 0.11).send is Send.NOTHING  # late: deferred
    gate.tick(0.11, 0.11)
    assert gate.state == GateState.ARMED and gate.deferred_counts["STALE_CAMERA"] == 1
    measure(gate, kin, 0.31)
    cameras_ok(gate, 0.31, ["front_1", "left_wrist"])
    gate.propose(proposal(kin, 0.31), 0.31, 0.31)
    gate.tick(0.31, 0.31)  # still silent past camera_hold_after_s
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_CAMERA" and "right_wrist" in gate.detail
    gate = armed_gate(kin, cfg)  # the camera node's own STALLED report is lateness too, judged by age
    gate.update_camera("front_1", CameraReport(False, "STALLED: no frame for 90 ms", 0.0, late=True), 0.05)
    assert gate.state == GateState.ARMED


def test_observation_age_policy(kin):
    gate = armed_gate(kin)
    assert gate.propose(proposal(kin, 0.05, obs=0.0), 0.05, 0.05).send is Send.FORWARD  # not from a model
    assert gate.propose(proposal(kin, 0.08, obs=0.0), 0.08, 0.08).send is Send.FORWARD
    gate.propose(proposal(kin, 2.0, obs=0.1), 2.0, 0.11)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_CAMERA"


def test_reset_goes_to_disarmed_never_armed(kin):
    gate = armed_gate(kin)
    gate.estop()
    assert gate.state == GateState.ESTOP and np.allclose(gate.tick(0.02, 0.02)[Arm.RIGHT][:6], Q)
    assert not gate.disarm()[0]
    assert not gate.request_arm(0.02, 0.02)[0]
    assert gate.reset()[0] and gate.state == GateState.DISARMED
    assert gate.tick(0.05, 0.05) is None  # DISARMED sends nothing


def test_arming_refuses_far_start_pose(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    gate.request_arm(0.0, 0.0)
    gate.propose(proposal(kin, 0.01, dx=0.05), 0.01, 0.01)
    assert gate.state == GateState.DISARMED and gate.reason.value == "START_TOO_FAR"


def test_arming_needs_fresh_state(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    ok, msg = gate.request_arm(0.0, 0.0)
    assert not ok and "no fresh state" in msg


def test_exception_inside_gate_holds(kin):
    gate = armed_gate(kin)
    gate._kin = None  # the next IK raises: the gate must hold, not crash
    decision = gate.propose(proposal(kin, 0.05), 0.05, 0.05)
    assert gate.state == GateState.HOLD and gate.reason.value == "INTERNAL_ERROR" and decision.send is Send.HOLD


def test_arm_asked_again_while_arming_succeeds_and_keeps_the_arming_window(kin):
    """A caller whose first arm reply was late or lost asks again: told it is arming (not refused),
    and the ARMING window still counts from the first request."""
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.request_arm(0.0, 0.0)[0] and gate.state == GateState.ARMING
    measure(gate, kin, 2.0)
    ok, said = gate.request_arm(2.0, 2.0)
    assert ok and said.startswith("already arming") and gate.state == GateState.ARMING
    t = gate.config.arming_timeout_s + 0.01  # from the first request, not the second
    gate.tick(t, t)
    assert gate.state == GateState.DISARMED and gate.reason.value == "STALE_COMMAND"


def test_arming_waits_out_lateness_until_the_arming_timeout(kin):
    """Nothing is forwarded while ARMING, so late state (a start-up under load) defers the shadow
    commands instead of failing the arming; once state is fresh the next command validates."""
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.request_arm(0.0, 0.0)[0]
    gate.tick(0.5, 0.5)  # state 500 ms old, no command yet: still waiting, nothing forwarded
    assert gate.state == GateState.ARMING
    assert gate.propose(proposal(kin, 0.6), 0.6, 0.6).send is Send.NOTHING  # a command on stale state is not validated
    assert gate.state == GateState.ARMING and gate.deferred_counts["STALE_STATE"] == 1
    for t in (0.61, 1.0, 5.0):  # state stays late for seconds: still waiting
        assert gate.tick(t, t) is None and gate.state == GateState.ARMING
    measure(gate, kin, 5.01)
    assert gate.propose(proposal(kin, 5.02), 5.02, 5.02).send is Send.NOTHING  # validated shadow command
    assert gate.state == GateState.ARMED and gate.forwarded == 0


def test_arming_gives_up_after_the_arming_timeout_with_the_deferral_reason(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.request_arm(0.0, 0.0)[0]
    timeout = gate.config.arming_timeout_s
    t = 0.25
    while t < timeout + 0.1:  # commands keep coming, each on 200 ms old state
        measure(gate, kin, t - 0.2, mono=t - 0.2)
        assert gate.propose(proposal(kin, t), t, t).send is Send.NOTHING
        gate.tick(t, t)
        if gate.state != GateState.ARMING:
            break
        t += 1 / 30
    assert gate.state == GateState.DISARMED and gate.reason.value == "STALE_STATE"
    assert t > timeout and f"not armed within {timeout:.1f} s" in gate.detail and gate.forwarded == 0


def test_arming_without_any_command_gives_up_with_stale_command(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.request_arm(0.0, 0.0)[0]
    t = gate.config.arming_timeout_s + 0.01
    gate.tick(t, t)
    assert (
        gate.state == GateState.DISARMED and gate.reason.value == "STALE_COMMAND" and "no command within" in gate.detail
    )


def test_a_rejection_while_arming_still_disarms_at_once(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.request_arm(0.0, 0.0)[0]
    p = proposal(kin, 0.02)
    p.arms[Arm.LEFT].pose[0] = np.nan
    gate.propose(p, 0.02, 0.02)
    assert gate.state == GateState.DISARMED and gate.reason.value == "NONFINITE"


# -- measured state and camera inputs ---------------------------------------------------------
def test_quat_angle_of_nan_is_the_largest_angle():
    q = np.array([1.0, 0.0, 0.0, 0.0])
    assert quat_angle(q, -q) == 0.0
    assert quat_angle(q, np.array([np.nan, 0.0, 0.0, 0.0])) == pytest.approx(np.pi)
    assert quat_angle(np.array([np.inf, 0.0, 0.0, 0.0]), q) == pytest.approx(np.pi)


@pytest.mark.parametrize("where", ["joints", "gripper", "pose", "stamp"])
def test_non_finite_measurement_is_refused_and_never_held(kin, where):
    """A NaN measurement is not stored (it would disable the jump checks and become the hold
    target); one that keeps coming is STALE_STATE once the last good one is too old; the hold
    is the last finite measured joints."""
    gate = armed_gate(kin)
    q_bad = Q.copy()
    meas = dict(joints_rad=Q + 0.01, gripper_norm=0.5, ee_pose_hw=kin[Arm.LEFT].forward(Q + 0.01), stamp_s=0.03)
    if where == "joints":
        meas["joints_rad"] = np.where(np.arange(6) == 2, np.nan, q_bad)
    elif where == "gripper":
        meas["gripper_norm"] = float("nan")
    elif where == "pose":
        meas["ee_pose_hw"] = np.full(7, np.inf)
    else:
        meas["stamp_s"] = float("nan")
    assert gate.update_measurement(Arm.LEFT, ArmMeasurement(**meas), 0.03) is None
    assert not gate.last_measurement_accepted
    assert gate.refused_measurements["left"] == 1
    assert gate.propose(proposal(kin, 0.05), 0.05, 0.05).send is Send.FORWARD  # the good state of t=0 is still fresh
    gate.tick(0.07, 0.07)
    assert gate.state == GateState.ARMED
    gate.update_measurement(Arm.RIGHT, ArmMeasurement(Q, 0.5, kin[Arm.RIGHT].forward(Q), 0.31), 0.31)
    out = gate.tick(0.31, 0.31)  # left: nothing usable for 310 ms (past state_hold_after_s)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_STATE" and "left" in gate.detail
    for arm in ARMS:
        assert np.all(np.isfinite(out[arm])) and np.array_equal(out[arm], np.append(Q, 0.5))


def test_hold_gripper_is_clamped(kin):
    gate = armed_gate(kin)
    measure(gate, kin, 0.04, gripper=1.3)
    decision = gate.propose(proposal(kin, 0.05, dx=float("nan")), 0.05, 0.05)
    assert gate.state == GateState.HOLD
    out = hold_targets(decision)
    for arm in ARMS:
        assert out[arm][6] == 1.0 and np.array_equal(out[arm][:6], Q)
    gate = armed_gate(kin)
    measure(gate, kin, 0.04, gripper=-0.2)
    gate.estop()
    assert all(v[6] == 0.0 for v in gate.tick(0.05, 0.05).values())


@pytest.mark.parametrize("ahead_s", [0.07, 0.5, 30.0])
def test_measured_state_from_the_future_is_stale(kin, ahead_s):
    gate = armed_gate(kin)
    measure(gate, kin, 0.04 + ahead_s, mono=0.04)  # received now, stamped ahead (driver clock jump)
    gate.propose(proposal(kin, 0.05), 0.05, 0.05)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_STATE", gate.detail
    gate = armed_gate(kin)
    measure(gate, kin, 0.04 + ahead_s, mono=0.04)
    gate.tick(0.05, 0.05)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_STATE", gate.detail
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, ahead_s, mono=0.0)
    assert not gate.request_arm(0.0, 0.0)[0]


def test_measured_state_within_the_future_tolerance_is_fresh(kin):
    gate = armed_gate(kin)
    measure(gate, kin, 0.09, mono=0.05)  # 40 ms ahead: within max_command_future_s (50 ms)
    assert gate.propose(proposal(kin, 0.05), 0.05, 0.05).send is Send.FORWARD, gate.detail


def test_a_command_on_state_received_long_ago_is_refused(kin):
    """The stamp may look fresh (the ROS clock stepped back), but nothing has arrived for 200 ms
    on the monotonic clock: the command check itself refuses it, not only the watchdog."""
    gate = armed_gate(kin)
    assert (
        gate.propose(proposal(kin, 0.05), 0.05, 0.2).send is Send.NOTHING
    )  # now 0.05 on the ROS clock, 0.2 s after receipt
    assert gate.deferred_counts["STALE_STATE"] == 1 and gate.forwarded == 0, gate.detail
    gate.tick(0.05, 0.31)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_STATE", gate.detail


@pytest.mark.parametrize("ahead_s", [0.07, 5.0])
def test_camera_frame_stamp_from_the_future_is_stale(kin, ahead_s):
    cfg = GateConfig(shadow_commands=1, required_cameras=("front_1",))
    gate = SafetyGate(cfg, kin)
    measure(gate, kin, 0.0)
    gate.update_camera("front_1", CameraReport(True, "", ahead_s), 0.0)
    ok, msg = gate.request_arm(0.0, 0.0)
    assert not ok and "ahead" in msg
    gate = armed_gate(kin, cfg)
    gate.update_camera("front_1", CameraReport(True, "", 0.04 + ahead_s), 0.04)
    gate.propose(proposal(kin, 0.05), 0.05, 0.05)
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_CAMERA", gate.detail


def test_spoofed_state_past_the_limits_holds_at_the_last_plausible_measurement(kin):
    """The adversarial case: another publisher sends joints just past every limit. The gate
    holds at once, and the hold is the last plausible measurement (never the spoofed one)."""
    gate = armed_gate(kin)
    spoof = np.array([3.0, 3.6, 3.3, 1.58, 1.6, 2.1])
    out = gate.update_measurement(Arm.LEFT, ArmMeasurement(spoof, 0.5, kin[Arm.LEFT].forward(spoof), 0.02), 0.02)
    assert (
        gate.state == GateState.HOLD
        and gate.reason.value == "STATE_IMPLAUSIBLE"
        and "outside its limits" in gate.detail
    )
    for arm in ARMS:
        assert np.array_equal(out[arm], np.append(Q, 0.5))
    for k in range(20):  # the spoofer keeps going: every re-sent hold is still the plausible one
        gate.update_measurement(
            Arm.LEFT, ArmMeasurement(spoof, 0.5, kin[Arm.LEFT].forward(spoof), 0.03 + k * 1e-3), 0.03
        )
        sent = gate.tick(0.05 + k * 0.04, 0.05 + k * 0.04)
        if sent:
            assert np.array_equal(sent[Arm.LEFT], np.append(Q, 0.5))


def test_unverified_sample_is_never_stored_but_faults_when_impossible(kin):
    gate = armed_gate(kin)
    assert gate.unverified_measurement(Arm.RIGHT, Q + 0.001, 0.02, 0.02) is None
    assert gate.state == GateState.ARMED
    out = gate.unverified_measurement(Arm.RIGHT, np.array([3.0, 3.6, 3.3, 1.58, 1.6, 2.1]), 0.03, 0.03)
    assert gate.state == GateState.HOLD and gate.reason.value == "STATE_IMPLAUSIBLE" and "unidentified" in gate.detail
    assert np.array_equal(out[Arm.RIGHT], np.append(Q, 0.5))


def test_arming_is_refused_shortly_after_an_implausible_state(kin):
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    gate.state_implausible(Arm.LEFT, "second publisher(s) on /eva/left/joint_states: ['/x']", 0.0)
    measure(gate, kin, 0.5, mono=0.5)
    ok, msg = gate.request_arm(0.5, 0.5)
    assert not ok and "second publisher" in msg
    measure(gate, kin, 1.1, mono=1.1)
    ok, msg = gate.request_arm(1.1, 1.1)
    assert ok, msg


def test_hold_target_is_clamped_inside_the_joint_bounds(kin):
    """A measurement within the plausibility margin but past the gate's bounds (an arm resting
    at a limit) is held at the bound, never past it."""
    from egomimic_safety.checks import joint_bounds

    gate = armed_gate(kin)
    q = Q.copy()
    q[5] = X5_LIMITS.pos_max[5] + 0.02  # plausible (margin 0.05) but outside the gate's bounds
    gate.update_measurement(Arm.LEFT, ArmMeasurement(q, 0.5, kin[Arm.LEFT].forward(q), 2.0), 2.0)
    gate.estop()
    out = gate.tick(2.0, 2.0)
    lo, hi = joint_bounds(gate.config)
    assert out[Arm.LEFT][5] == pytest.approx(hi[5]) and np.all(out[Arm.LEFT][:6] <= hi)


def test_a_late_command_is_held_back_and_persistent_lateness_latches(kin):
    """A command delivered 150 ms after its stamp (a loaded machine) is not forwarded, and is no
    fault; when every command stays that late for deferral_hold_after_s the gate holds."""
    gate = armed_gate(kin)
    t = 0.05
    assert gate.propose(proposal(kin, t), t, t).send is Send.FORWARD
    for k in range(1, 12):  # 11 commands at 30 Hz, each arriving 150 ms after its stamp
        stamp = 0.05 + k / 30
        t = stamp + 0.15
        measure(gate, kin, t, mono=t)
        assert gate.propose(proposal(kin, stamp), t, t).send is Send.NOTHING
        gate.tick(t, t)
        if gate.state != GateState.ARMED:
            break
    assert gate.state == GateState.HOLD and gate.reason.value == "STALE_COMMAND" and "nothing forwarded" in gate.detail
    assert gate.rejected == 0 and gate.deferred_counts["STALE_COMMAND"] >= 9


def test_a_late_command_says_which_hop_made_it_late(kin):
    """With the DDS times the node passes (written: its writer's send, received: this process's
    reception), the deferral names the hop: here the delivery, 120 ms, and the gate was prompt."""
    gate = armed_gate(kin)
    assert gate.propose(proposal(kin, 0.05), 0.05, 0.05).send is Send.FORWARD
    stamp, t = 0.05 + 1 / 30, 0.05 + 1 / 30 + 0.13
    measure(gate, kin, t, mono=t)
    late = dataclasses.replace(proposal(kin, stamp), written_s=stamp + 0.004, received_s=stamp + 0.124)
    assert gate.propose(late, t, t).send is Send.NOTHING
    assert gate.last_deferral == (
        "command arrived 130 ms after its stamp (limit 100 ms; written 4 ms after its stamp, "
        "received 120 ms later, decided 6 ms later)"
    )
    assert proposal(kin, stamp).path_timing(t) == ""  # a replay's proposals carry no DDS times


def half_turn(kin, t):
    p = proposal(kin, t)
    for arm in ARMS:
        w, x, y, z = p.arms[arm].pose[3:]
        p.arms[arm].pose[3:] = [-z, y, -x, w]  # 180 deg about the EE z axis
    return p


def test_a_half_turn_on_late_state_is_a_jump_not_a_deferral(kin):
    """State 150 ms late defers an ordinary command; a half turn is a jump wherever the arm moved
    meanwhile (limit 0.5 rad + 1.8 rad/s x 0.15 s), so it is refused at once: HOLD."""
    gate = armed_gate(kin)  # state stamped 0.0
    assert (
        gate.propose(proposal(kin, 0.15), 0.15, 0.15).send is Send.NOTHING and gate.state == GateState.ARMED
    )  # deferred
    decision = gate.propose(half_turn(kin, 0.16), 0.16, 0.16)
    assert gate.state == GateState.HOLD and gate.reason.value == "ROTATION_JUMP" and decision.send is Send.HOLD
    assert "ms old" in gate.detail


def test_a_late_half_turn_is_a_jump_not_a_deferral(kin):
    gate = armed_gate(kin)
    measure(gate, kin, 0.2, mono=0.2)
    decision = gate.propose(half_turn(kin, 0.05), 0.2, 0.2)  # arrives 150 ms after its stamp, state fresh
    assert gate.state == GateState.HOLD and gate.reason.value == "ROTATION_JUMP" and decision.send is Send.HOLD


def test_a_half_turn_on_a_late_camera_is_a_jump_not_a_deferral(kin):
    gate = armed_gate(kin, GateConfig(shadow_commands=1, required_cameras=("front_1",)))
    measure(gate, kin, 0.12, mono=0.12)  # fresh state; the camera's last report is from 0.0
    assert (
        gate.propose(proposal(kin, 0.12), 0.12, 0.12).send is Send.NOTHING and gate.deferred_counts["STALE_CAMERA"] == 1
    )
    gate.propose(half_turn(kin, 0.13), 0.13, 0.13)
    assert gate.state == GateState.HOLD and gate.reason.value == "ROTATION_JUMP"


def test_a_joint_limit_target_on_a_late_camera_is_a_fault_not_a_deferral(kin):
    """State fresh, a camera late: the target is judged in full (IK, joint limits) before it is
    deferred. A one-shot target outside the joint limits is JOINT_LIMIT at once; an ordinary
    command on the same late camera is still only deferred."""
    q_near = Q.copy()
    q_near[5] = 1.97  # wrist roll 30 mrad inside its 2.0 rad limit
    gate = SafetyGate(GateConfig(shadow_commands=1, required_cameras=("front_1",)), kin)
    measure(gate, kin, 0.0, q=q_near)
    cameras_ok(gate, 0.0)
    assert gate.request_arm(0.0, 0.0)[0]
    gate.propose(proposal(kin, 0.01, q=q_near), 0.01, 0.01)
    assert gate.state == GateState.ARMED
    measure(gate, kin, 0.12, mono=0.12, q=q_near)  # fresh state; the camera's last report is from 0.0
    assert gate.propose(proposal(kin, 0.12, q=q_near), 0.12, 0.12).send is Send.NOTHING
    assert gate.state == GateState.ARMED and gate.deferred_counts["STALE_CAMERA"] == 1
    q_over = q_near.copy()
    q_over[5] = 2.02  # 50 mrad in 40 ms from the deferred command: within the producer's rate limit
    decision = gate.propose(proposal(kin, 0.16, q=q_over), 0.16, 0.16)
    assert gate.state == GateState.HOLD and gate.reason.value == "JOINT_LIMIT" and decision.send is Send.HOLD, (
        gate.detail
    )


def test_a_step_the_arm_could_have_made_while_state_was_late_is_deferred(kin):
    """Beyond the jump limit from the late measurement, but within what the arm could have moved
    since at its speed limit: not provably a jump, so deferred (no fault). (The rate vs the
    previous command clamps here, so that only the jump rule decides.)"""
    gate = armed_gate(kin, GateConfig(shadow_commands=1, required_cameras=(), command_step_action=CLAMP))
    cfg = gate.config
    age = 0.15
    dx = cfg.max_translation_step_m + 0.5 * cfg.max_ee_speed_m_s * age
    assert gate.propose(proposal(kin, age, dx=dx), age, age).send is Send.NOTHING
    assert gate.state == GateState.ARMED and gate.deferred_counts["STALE_STATE"] == 1
    gate.propose(
        proposal(kin, age + 0.01, dx=cfg.max_translation_step_m + 1.5 * cfg.max_ee_speed_m_s * (age + 0.01)),
        age + 0.01,
        age + 0.01,
    )
    assert gate.state == GateState.HOLD and gate.reason.value == "TRANSLATION_JUMP"


def test_a_step_too_fast_for_the_previous_command_on_late_state_is_refused(kin):
    """The rate vs the previous command needs no fresh state: 60 mm within 140 ms (limit 40 mm:
    0.6 m/s x 2 periods) is refused although the state is 150 ms late."""
    gate = armed_gate(kin)
    gate.propose(proposal(kin, 0.15, dx=0.06), 0.15, 0.15)
    assert gate.state == GateState.HOLD and gate.reason.value == "TRANSLATION_RATE"


def test_a_far_first_command_on_late_state_is_refused_at_once(kin):
    """ARMING: a first command 0.1 m from a measurement 90 ms old is beyond the start tolerance
    (0.03 m) plus what the arm could have moved since (0.6 m/s x 0.09 s): START_TOO_FAR at once,
    not deferred until the state is fresh; a near one on the same late state is deferred."""
    gate = SafetyGate(NO_CAMERAS, kin)
    measure(gate, kin, 0.0)
    assert gate.request_arm(0.0, 0.0)[0]
    assert gate.propose(proposal(kin, 0.09, dx=0.02), 0.09, 0.09).send is Send.NOTHING
    assert gate.state == GateState.ARMING and gate.deferred_counts["STALE_STATE"] == 1
    gate.propose(proposal(kin, 0.095, dx=0.1), 0.095, 0.095)
    assert gate.state == GateState.DISARMED and gate.reason.value == "START_TOO_FAR" and "ms old" in gate.detail


def test_a_late_command_is_still_checked_for_content(kin):
    """Lateness defers a command, but a late NaN is still a NaN: refused, HOLD."""
    gate = armed_gate(kin)
    p = proposal(kin, 0.05)
    p.arms[Arm.LEFT].pose[0] = np.nan
    decision = gate.propose(p, 0.2, 0.2)  # 150 ms late
    assert gate.state == GateState.HOLD and gate.reason.value == "NONFINITE" and decision.send is Send.HOLD


def test_measurement_without_pose_decides_as_one_with_its_fk(kin):
    """The node passes ee_pose_hw=None (FK only when a decision needs it): every decision,
    state and hold target equals the gate fed the FK pose with each sample, over a run that
    tracks, jumps (HOLD) and re-arms."""
    gates = [SafetyGate(NO_CAMERAS, kin), SafetyGate(NO_CAMERAS, kin)]
    rng = np.random.default_rng(3)
    q = Q.copy()
    for g in gates:
        for arm in ARMS:
            g.update_measurement(
                arm, ArmMeasurement(q.copy(), 0.5, kin[arm].forward(q) if g is gates[0] else None, 0.0), 0.0
            )
        assert g.request_arm(0.0, 0.0)[0]
    for k in range(1, 300):
        t = k / 100.0
        q = q + rng.normal(0.0, 0.002, size=6)
        outs = []
        for g in gates:
            out = []
            for arm in ARMS:
                pose = kin[arm].forward(q) if g is gates[0] else None
                out.append(g.update_measurement(arm, ArmMeasurement(q.copy(), 0.5, pose, t), t))
            if k % 3 == 0:
                prop = proposal(kin, t, q=q, dx=0.3 if k == 150 else 0.002)
                out.append(g.propose(prop, t, t))
            out.append(g.tick(t, t))
            if k == 200:
                out.append((g.reset(), g.request_arm(t, t)))
            outs.append(out)
        assert repr(outs[0]) == repr(outs[1]), k
        assert (gates[0].state, gates[0].reason, gates[0].detail) == (
            gates[1].state,
            gates[1].reason,
            gates[1].detail,
        ), k
    assert gates[0].forwarded > 50 and gates[0].reason_counts["TRANSLATION_JUMP"] == 1, (
        gates[0].forwarded,
        gates[0].reason_counts,
    )
    assert gates[0].state == GateState.ARMED, gates[0].detail


def test_the_gate_measures_at_link6(kin):
    """The pose the gate judges commands against is link6 of the measured joints, to 1e-6 m and
    rad of an independent FK (Pinocchio on the URDF; the integration test
    test_link6_poses holds the published pose topics to the same reference)."""
    from egomimic_hw.pinocchio_kinematics import PinocchioArm
    from egomimic_hw.rotations import geodesic_angle, quat_to_mat

    pin = PinocchioArm()
    rng = np.random.default_rng(6)
    lo, hi = np.asarray(X5_LIMITS.pos_min), np.asarray(X5_LIMITS.pos_max)
    for i in range(20):
        q = rng.uniform(lo, hi)
        gate = SafetyGate(NO_CAMERAS, kin)
        for arm in ARMS:
            gate.update_measurement(
                arm, ArmMeasurement(joints_rad=q, gripper_norm=0.5, ee_pose_hw=None, stamp_s=0.0), 0.0
            )
        for arm in ARMS:
            got, ref = gate._measured(arm).ee_pose_hw, pin.forward(q)
            assert np.linalg.norm(got[:3] - ref[:3]) <= 1e-6, (i, got, ref)
            assert geodesic_angle(quat_to_mat(got[3:]), quat_to_mat(ref[3:])) <= 1e-6, (i, got, ref)


def test_a_joint_step_window_too_short_to_leave_a_plausible_measurement_is_refused():
    """A measurement up to state_limit_margin_rad beyond a limit is plausible, and every target
    from there is inside the joint bounds: the step allowance must cover that way back, else no
    target passes both checks (hypothesis found a clamped target 0.0569 rad from such a
    measurement with a 0.01 s window: 0.055 rad)."""
    from egomimic_hw.errors import ConfigError

    back = GateConfig().state_limit_margin_rad + GateConfig().joint_limit_margin_rad
    shortest = back / float(min(X5_LIMITS.vel_max))
    with pytest.raises(ConfigError, match="joint_step_window_s"):
        GateConfig(joint_step_window_s=shortest * 0.99)
    GateConfig(joint_step_window_s=shortest * 1.01)


PERIOD = 1.0 / 30


def _catch_up_run(kin, dx_at, camera_back_s=0.36, until_s=0.45):
    """A stream at 30 Hz whose x offset is dx_at(t); the arms are where they were last commanded
    (measured fresh every period); the camera reports until 0.05 s, then not until
    `camera_back_s`: the commands in between are deferred (STALE_CAMERA). Returns
    (gate, [(t, decision)])."""
    gate = armed_gate(kin, GateConfig(shadow_commands=1, required_cameras=("front_1",)))
    out = []
    q = Q
    t = 0.01 + PERIOD
    while t < until_s and gate.state == GateState.ARMED:
        measure(gate, kin, t, q=q, mono=t)
        if t <= 0.05 or t >= camera_back_s:
            cameras_ok(gate, t)
        decision = gate.propose(proposal(kin, t, dx=dx_at(t)), t, t)
        if decision.send is Send.FORWARD:
            q = decision.targets[Arm.LEFT][:6]  # one kinematics for both arms: the same joints
        out.append((t, decision))
        t += PERIOD
    return gate, out


def _forwarded_x(kin, decision) -> float:
    return float(kin[Arm.LEFT].forward(forwarded_targets(decision)[Arm.LEFT][:6])[0] - kin[Arm.LEFT].forward(Q)[0])


def test_after_a_deferral_the_targets_catch_up_at_the_rate_limit(kin):
    """A producer at 0.2 m/s, deferred for about 220 ms (a late camera): its plan is 47 mm past the
    last forwarded target, beyond the 40 mm that 0.6 m/s grants over the capped 2 periods. That
    is not a fast producer (its own steps are 6.7 mm a period), so the target is clamped toward
    the proposal at the rate limit (counted), not refused: HOLD used to latch here
    (TRANSLATION_RATE: a CI run's expert after a 330 ms deferral). Every forwarded step stays
    within the limit, and the targets are the proposals again once caught up."""
    gate, out = _catch_up_run(kin, lambda t: 0.2 * (t - 0.01))
    assert gate.state == GateState.ARMED, gate.detail
    assert gate.deferred_counts["STALE_CAMERA"] >= 5
    forwarded = [(t, d) for t, d in out if d.send is Send.FORWARD]
    t_gap = max(t for t, d in out if d.send is Send.NOTHING)
    before = max((t, d) for t, d in forwarded if t < t_gap)
    after = [(t, d) for t, d in forwarded if t > t_gap]
    first_t, first = after[0]
    step = _forwarded_x(kin, first) - _forwarded_x(kin, before[1])
    assert 0.2 * (first_t - 0.01) - _forwarded_x(kin, before[1]) > 0.045  # the plan ran ahead
    assert step == pytest.approx(0.6 * 2 * PERIOD, abs=2e-4)  # clamped to the limit, not refused
    assert gate.catch_up_clamps == 1 and gate.reason_counts["TRANSLATION_RATE"] == 1 and gate.clamped == 1
    last_t, last = after[-1]
    assert _forwarded_x(kin, last) == pytest.approx(0.2 * (last_t - 0.01), abs=2e-4)  # caught up
    xs = [_forwarded_x(kin, d) for _, d in forwarded]
    assert max(np.diff(xs)) <= 0.6 * 2 * PERIOD + 2e-4


def test_catching_up_never_excuses_a_fast_producer(kin):
    """The same deferral, then a producer whose own step is 27 mm in one period (0.8 m/s): a
    TRANSLATION_RATE fault, judged against its previous (deferred) proposal."""
    gate, out = _catch_up_run(kin, lambda t: 0.2 * (t - 0.01) + (0.02 if t >= 0.36 else 0.0))
    assert gate.state == GateState.HOLD and gate.reason.value == "TRANSLATION_RATE", gate.detail
    assert "from the previous command in 33.3 ms" in gate.detail
    assert gate.catch_up_clamps == 0


def test_a_fast_producer_is_refused_while_its_commands_are_deferred(kin):
    """While deferred, each proposal is judged against the producer's previous one: 27 mm in
    one period is a fault, whatever the camera."""
    gate, out = _catch_up_run(kin, lambda t: 0.2 * (t - 0.01) + (0.02 if t >= 0.25 else 0.0))
    assert gate.state == GateState.HOLD and gate.reason.value == "TRANSLATION_RATE", gate.detail
    assert out[-1][0] < 0.36  # before the camera came back: refused while deferring
