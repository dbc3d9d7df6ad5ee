"""Properties of the pure gate over arbitrary event sequences (hypothesis).

For ANY sequence of measurements (near joint limits, at the edge of the reach, far jumps,
non-finite, stamped in the future, gripper out of range), proposals (NaN, inf, huge, zero /
non-unit / flipped / turned quaternions, wrong shapes and frames, stamps jumping back and forth,
joint-space targets across a limit, floods), watchdog ticks through silences, camera reports
and operator calls:
- every forwarded command passes the independent oracle (egomimic_safety.oracle) against the
  measured joints at that instant and the previous forwarded command (speed x elapsed time);
- a measurement is accepted exactly when it is finite and plausible by this test's own
  statement of the rules (within the limits + margin, no faster than 1.5x the joint speed
  limits + noise since the last accepted one, stamp not going back); an implausible one is a
  fault (STATE_IMPLAUSIBLE);
- only ARMED forwards; HOLD/ESTOP send exactly the last accepted joints the gate measured
  before the fault, clamped inside the gate's joint bounds (gripper clamped to [0, 1]); no
  output of any kind ever carries a joint outside those bounds; nothing leaves HOLD/ESTOP
  except reset(), and reset() only goes to DISARMED;
- no exception escapes, none is even caught inside (INTERNAL_ERROR never happens), and the
  gate is deterministic (same inputs, same outputs).
A guard test checks the generators reach every reason code and every clamp path (else the
properties would prove nothing about them).
Examples per property: EGOMIMIC_PROPERTY_EXAMPLES (default 200 for `make test`; the full run,
`make test-properties`, uses 10000).
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from egomimic_hw.description import ARMS, X5_LIMITS
from egomimic_hw.kinematics import ArmKinematics
from egomimic_safety.checks import ArmCommand, ArmMeasurement, joint_bounds
from egomimic_safety.config import CLAMP, REJECT, GateConfig
from egomimic_safety.gate import CameraReport, GateState, Proposal, SafetyGate
from egomimic_safety.oracle import audit_command
from egomimic_safety.reasons import Reason

from .helpers import Q

EXAMPLES = int(os.environ.get("EGOMIMIC_PROPERTY_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,  # derandomize comes from the profile (tests/conftest.py)
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KIN = ArmKinematics()
KINS = {arm: KIN for arm in ARMS}

CONFIGS = [
    # production defaults: everything rejects (gripper clamps), one camera required
    GateConfig(shadow_commands=1, required_cameras=("front_1",)),
    # every clampable check clamps; a box whose edge is 3 mm beyond the work pose (link6 x = 0.212 m), so
    # that clean commands (+-5 mm per axis) cross it often and the WORKSPACE clamp is taken in any sample;
    # a short joint-step window (0.015 s: 0.075 rad, just above the 0.06 rad GateConfig requires) so
    # joint-space motions reach the joint-step clamp in any sample (0.02 s took it 0-5 times in 400
    # sequences, depending on the constants of the modules loaded before: full-suite order)
    GateConfig(shadow_commands=2, required_cameras=(), command_step_action=CLAMP, workspace_action=CLAMP,
               joint_limit_action=CLAMP, joint_step_action=CLAMP, joint_step_window_s=0.015,
               workspace_left_max_m=(0.215, 0.6, 0.7), workspace_right_max_m=(0.215, 0.6, 0.7)),
    # everything rejects, the gripper range included; a short joint-step window (0.04 s: 0.2 rad)
    GateConfig(shadow_commands=1, required_cameras=(), gripper_action=REJECT, joint_step_window_s=0.04),
]
CLAMPABLE = {Reason.WORKSPACE, Reason.TRANSLATION_RATE, Reason.ROTATION_RATE, Reason.JOINT_LIMIT, Reason.JOINT_STEP,
             Reason.GRIPPER_RANGE}
NEVER_EXPECTED = {Reason.NODE_LOST, Reason.INTERNAL_ERROR}
"""NODE_LOST is not the gate's to raise (INTERFACES.md: the launcher's); INTERNAL_ERROR means
an exception inside the gate, which no input may cause (asserted in run())."""

Q_STRETCHED = np.array([0.0, 2.4701, 2.7068, -0.5280, 0.0, 0.0])
"""link6 at x = 0.54 m, within ~5 mm of the reach: small outward targets are unreachable."""

# -- strategies ---------------------------------------------------------------------------------
def weighted(*pairs):
    """One of the strategies, each with its weight: `weighted((15, a), (1, b))`. (one_of would
    deduplicate equal strategies, so repeating one in one_of does not weight it.)"""
    index = [i for i, (w, _) in enumerate(pairs) for _ in range(w)]
    return st.sampled_from(index).flatmap(lambda i: pairs[i][1])


special = st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -1e308, 5e-324, 0.0])
small = st.floats(-0.005, 0.005)
"""Per axis: a clean target is then < 9 mm from the measured pose."""
medium = st.floats(-0.06, 0.06)
"""Start offsets (START_TOO_FAR beyond 30 mm), rate-limit steps, unreachable targets."""
delta = weighted((2, small), (1, medium), (1, st.floats(-1.0, 1.0)), (1, special))


@st.composite
def start(draw):
    """Where the arms are when the sequence starts: the work pose, a wrist joint within
    +-0.05 rad of a limit (either side, so inside and past the gate's margin), or stretched."""
    kind = draw(st.sampled_from(["work"] * 4 + ["near_limit"] * 2 + ["stretched"] * 2))
    if kind == "work":
        return ("work",)
    if kind == "stretched":
        return ("stretched",)
    return ("near_limit", draw(st.sampled_from([3, 4, 5])), draw(st.sampled_from([-1, 1])), draw(st.floats(-0.05, 0.05)))


def start_joints(spec) -> np.ndarray:
    if spec[0] == "work":
        return Q.copy()
    if spec[0] == "stretched":
        return Q_STRETCHED.copy()
    _, j, side, d = spec
    q = Q.copy()
    q[j] = (X5_LIMITS.pos_max[j] if side > 0 else X5_LIMITS.pos_min[j]) - side * d
    return q


@st.composite
def arm_command(draw, clean: bool):
    """Clean commands (near the measured pose, maybe q -> -q or a small turn, now and then a
    medium offset or a joint-space nudge, gripper a little out of range) keep the gate armed
    and forwarding; corrupt ones draw from everything."""
    if clean:
        dxyz = draw(weighted((15, st.tuples(small, small, small)), (1, st.tuples(medium, medium, medium))))
        quat = draw(st.sampled_from(["same"] * 6 + ["flip", "small_turn", "small_turn", "joint", "turn", "big_turn"]))
    else:
        dxyz = tuple(draw(delta) for _ in range(3))
        quat = draw(st.sampled_from(["same", "flip", "small_turn", "turn", "big_turn", "joint", "random", "zero", "scaled",
                                     "special", "short"]))
    spec = {"dxyz": list(dxyz), "quat": quat, "frame": "hw" if clean else draw(st.sampled_from(["hw", "dataset", ""])),
            "gripper": draw(weighted((4, st.floats(0.0, 1.0)), (1, st.floats(-0.3, 1.3))) if clean
                            else st.one_of(st.floats(-2, 3), special))}
    # only what the kind uses is drawn (drawing dominates the run time)
    if quat == "small_turn":
        spec["rotvec"] = [draw(st.floats(-0.015, 0.015)) for _ in range(3)]
    elif quat in ("turn", "big_turn"):  # turn: rate-limit territory; big_turn: mostly beyond the 0.5 rad jump limit
        axis = np.array([draw(st.floats(-1.0, 1.0)) for _ in range(3)])
        axis = axis / np.linalg.norm(axis) if np.linalg.norm(axis) > 1e-6 else np.array([0.0, 0.0, 1.0])
        spec["rotvec"] = list(axis * draw(st.floats(0.03, 0.3) if quat == "turn" else st.floats(0.4, 3.1)))
    elif quat == "joint":
        spec["joint"] = (draw(st.integers(0, 5)), draw(st.floats(-0.08, 0.08)))
    elif quat == "random":
        spec["rand_quat"] = [draw(st.floats(-2, 2)) for _ in range(4)]
    elif quat == "scaled":
        spec["scale"] = draw(st.floats(0.5, 1.5))
    return spec


clean_propose = st.tuples(st.just("propose"), arm_command(True), arm_command(True), st.just(0.0),
                          st.sampled_from([0.0, -0.05]), st.booleans())
"""A well-formed command. A DISARMED gate is re-armed before it (an operator who keeps
trying); with the last flag (half the time) a latched HOLD/ESTOP is reset first, so sequences
spend their time ARMED and forwarding rather than latched."""
corrupt_propose = st.tuples(st.just("propose"), arm_command(False), arm_command(False),
                            st.sampled_from([0.0] * 5 + [-0.2, 0.08, 5.0, -5.0, float("nan")]), st.sampled_from([0.0, -0.05, -3.0]),
                            st.just(False))
EVENTS = {
    "clean": clean_propose,
    "corrupt": corrupt_propose,
    "measure": st.tuples(st.just("measure"), st.sampled_from(["jitter", "far", "nonfinite", "future", "gripper"]),
                         st.floats(-0.05, 0.05)),
    "tick": st.tuples(st.just("tick")),
    "gap": st.tuples(st.just("gap"), st.floats(0.03, 0.5), st.booleans(), st.booleans(), st.booleans()),
    "flood": st.tuples(st.just("flood"), st.integers(5, 12), st.floats(0.001, 0.013)),
    "camera": st.tuples(st.just("camera"), st.booleans()),
    "service": st.tuples(st.just("service"), st.sampled_from(["arm", "disarm", "estop", "reset"])),
}
event = weighted((16, EVENTS["clean"]), (3, EVENTS["corrupt"]), *[(1, EVENTS[k]) for k in
                                                                   ("measure", "tick", "gap", "flood", "camera", "service")])
step = st.tuples(event, weighted((4, st.floats(0.01, 0.045)), (1, st.floats(0.0, 0.1))), st.sampled_from([True] * 9 + [False]))
"""(event, seconds before it, whether state and camera reports arrived just before it)"""
scenario = st.tuples(st.sampled_from(range(len(CONFIGS))), start(), st.lists(step, min_size=10, max_size=30))


def _target(spec, q_meas: np.ndarray) -> np.ndarray:
    pose = KIN.forward(q_meas)
    kind = spec["quat"]
    if kind == "joint":  # a joint-space motion: FK of the measured joints with one joint nudged
        j, dq = spec["joint"]
        q = q_meas.copy()
        q[j] += dq
        pose = KIN.forward(q)
    with np.errstate(all="ignore"):
        pose[:3] = pose[:3] + np.asarray(spec["dxyz"], dtype=float)
    if kind == "flip":
        pose[3:] = -pose[3:]
    elif kind in ("small_turn", "turn", "big_turn"):
        r = Rotation.from_quat(np.roll(pose[3:], -1)) * Rotation.from_rotvec(spec["rotvec"])
        pose[3:] = np.roll(r.as_quat(), 1)
    elif kind == "random":
        pose[3:] = spec["rand_quat"]
    elif kind == "zero":
        pose[3:] = 0.0
    elif kind == "scaled":
        pose[3:] *= spec["scale"]
    elif kind == "special":
        pose[4] = float("nan")
    elif kind == "short":
        pose = pose[:6]
    return pose


def run(config_index: int, start_spec, events, coverage: dict | None = None) -> list:
    """Drive a fresh gate through `events`; returns the trace (and checks the invariants).
    `coverage`, if given, collects Counter()s "refused" (reasons of rejections and faults) and
    "clamped" (reasons of clamps on commands that went through)."""
    config = CONFIGS[config_index]
    gate = SafetyGate(config, KINS)
    lo, hi = joint_bounds(config)
    t = 100.0
    q_meas = {arm: start_joints(start_spec) for arm in ARMS}
    driver_target: dict = {}
    """A perfect driver: the arm goes where it was last commanded (until pushed by a measure event)."""
    gate_meas = {}
    """What the gate holds as measured (the last measurement it accepted): (joints, gripper)."""
    accepted: dict = {}
    """Per arm: (stamp, joints) of the last measurement the rules accept (this test's own copy)."""
    gripper_meas = 0.5
    last_forwarded: dict = {}
    last_forwarded_stamp = None
    hold_expected = None
    trace = []

    def plausible(arm, q, stamp) -> bool:
        """The measured-state rules, restated independently of egomimic_safety.plausibility."""
        if not np.all(np.isfinite(q)):
            return False
        margin = config.state_limit_margin_rad
        if np.any(q < X5_LIMITS.pos_min - margin) or np.any(q > X5_LIMITS.pos_max + margin):
            return False
        if arm not in accepted:
            return True
        dt = stamp - accepted[arm][0]
        step = np.abs(q - accepted[arm][1])
        if dt == 0:
            return bool(np.all(step <= config.state_noise_rad))
        return dt > 0 and bool(np.all(step <= X5_LIMITS.vel_max * config.state_speed_factor * dt + config.state_noise_rad))

    def measure(stamp_offset=0.0, joints=None):
        for arm in ARMS:
            q = q_meas[arm] if joints is None else joints
            meas = ArmMeasurement(q.copy(), gripper_meas, KIN.forward(q) if np.all(np.isfinite(q)) else np.full(7, np.nan),
                                  t + stamp_offset)
            expected = plausible(arm, q, t + stamp_offset)
            act("measure", lambda: (gate.update_measurement(arm, meas, t), None))
            assert gate.last_measurement_accepted == expected, (
                f"measurement {q.tolist()} at {t + stamp_offset}: accepted {gate.last_measurement_accepted}, the rules say {expected}")
            if expected:
                accepted[arm] = (t + stamp_offset, q.copy())
                gate_meas[arm] = (q.copy(), gripper_meas)

    def camera(ok=True):
        gate.update_camera("front_1", CameraReport(ok, "" if ok else "FROZEN", t), t)

    def check(kind, name, before, out, decision_meas, stamp=None):
        """The invariants, after every call that can send something."""
        nonlocal hold_expected, last_forwarded, last_forwarded_stamp
        after = gate.state
        assert gate.reason_counts[Reason.INTERNAL_ERROR.value] == 0, f"exception inside the gate: {gate.detail}"
        if before in (GateState.HOLD, GateState.ESTOP):
            assert after in (GateState.HOLD, GateState.ESTOP) or (name == "reset" and after == GateState.DISARMED)
        if after in (GateState.HOLD, GateState.ESTOP) and hold_expected is None:
            hold_expected = {a: np.append(np.clip(j, lo, hi), np.clip(g, 0.0, 1.0)) for a, (j, g) in decision_meas.items()}
        if after not in (GateState.HOLD, GateState.ESTOP):
            hold_expected = None
        if out is not None:
            for a, values in out.items():
                assert np.all(values[:6] >= lo) and np.all(values[:6] <= hi), f"{a.value}: a joint target outside the limits"
            if after in (GateState.HOLD, GateState.ESTOP):
                for a in ARMS:
                    assert np.all(np.isfinite(out[a])), "a non-finite hold"
                    assert np.array_equal(out[a], hold_expected[a]), "HOLD sent something other than the measured joints"
            else:
                assert kind == "propose" and before == GateState.ARMED and after == GateState.ARMED, "forwarded outside ARMED"
                for a in ARMS:
                    previous = last_forwarded.get(a)
                    elapsed = None if previous is None else stamp - last_forwarded_stamp
                    bad = audit_command(a, out[a], decision_meas[a][0], config, KIN, previous, elapsed)
                    assert not bad, bad
                last_forwarded = {a: out[a].copy() for a in ARMS}
                last_forwarded_stamp = stamp
                for a in ARMS:
                    driver_target[a] = out[a][:6].copy()
        if after != GateState.ARMED:
            last_forwarded, last_forwarded_stamp = {}, None
        trace.append((int(after), None if out is None else {a.value: out[a].tolist() for a in out}))

    def act(kind, fn, name=""):
        """Run one gate call, attribute the reason counts it added, check the invariants."""
        before_counts, clamped_before = Counter(gate.reason_counts), gate.clamped
        decision_meas = {a: (j.copy(), g) for a, (j, g) in gate_meas.items()}
        before = gate.state
        out, stamp = fn()
        added = Counter(gate.reason_counts)
        added.subtract(before_counts)
        if coverage is not None:
            bucket = coverage["clamped"] if gate.clamped > clamped_before else coverage["refused"]
            bucket.update({r: n for r, n in added.items() if n > 0})
        check(kind, name, before, out, decision_meas, stamp)

    def propose(left, right, stamp_jump, obs_offset):
        arms = {}
        for arm, spec in zip(ARMS, (left, right)):
            frame = {"hw": arm.hw_frame, "dataset": arm.dataset_frame, "": ""}[spec["frame"]]
            arms[arm] = ArmCommand(frame, _target(spec, q_meas[arm]), spec["gripper"])
        obs = 0.0 if obs_offset == 0.0 else t + obs_offset
        stamp = t + stamp_jump
        return gate.propose(Proposal(stamp, arms, obs), t, t), stamp

    measure()
    camera()
    gate.request_arm(t, t)
    for (ev, dt, fresh) in events:
        t += dt
        if fresh:
            for arm in ARMS:
                if arm in driver_target:
                    q_meas[arm] = driver_target[arm].copy()
            measure()
            camera()
        kind = ev[0]
        if kind == "propose":
            _, left, right, stamp_jump, obs_offset, retry = ev
            if stamp_jump == 0.0 and left["frame"] == "hw":  # an operator who keeps trying
                if retry and gate.state in (GateState.HOLD, GateState.ESTOP):
                    act("service", lambda: (gate.reset() and gate.tick(t, t), None), "reset")
                if gate.state == GateState.DISARMED:
                    gate.request_arm(t, t)
            act("propose", lambda: propose(left, right, stamp_jump, obs_offset))
        elif kind == "flood":  # the first command, then the same pose again and again, fast
            _, n, spacing = ev
            pose = {arm: KIN.forward(q_meas[arm]) for arm in ARMS}
            for _ in range(n):
                arms = {arm: ArmCommand(arm.hw_frame, pose[arm].copy(), 0.5) for arm in ARMS}
                act("propose", lambda: (gate.propose(Proposal(t, arms), t, t), t))
                t += spacing
        elif kind == "measure":
            _, how, amount = ev
            if how == "nonfinite":
                measure(joints=np.where(np.arange(6) == int(abs(amount) * 100) % 6, np.nan, q_meas[ARMS[0]]))
                continue
            if how == "future":
                measure(stamp_offset=0.06 + abs(amount) * 10)
                continue
            for arm in ARMS:
                if how == "jitter":
                    q_meas[arm] = q_meas[arm] + amount * 0.1
                elif how == "far":
                    q_meas[arm] = np.clip(Q + amount * 10, -1.5, 1.5)
            if how == "gripper":
                gripper_meas = 0.5 + amount * 20  # -0.5 .. 1.5: out of range now and then
            driver_target.clear()  # pushed: the arm stays there until commanded again
            measure()
        elif kind == "tick":
            act("tick", lambda: (gate.tick(t, t), None))
        elif kind == "gap":  # time passes with the watchdog running; state / cameras may go silent
            _, duration, state_flows, cameras_flow, commands_flow = ev
            end = t + duration
            k = 0
            while t < end:
                t += 0.01
                k += 1
                if state_flows:
                    measure()
                if cameras_flow:
                    camera()
                if commands_flow and k % 3 == 0:  # the policy goes on at ~33 Hz: lateness, not silence
                    still = {"dxyz": [0.0, 0.0, 0.0], "quat": "same", "frame": "hw", "gripper": 0.5}
                    act("propose", lambda: propose(still, still, 0.0, 0.0))
                act("tick", lambda: (gate.tick(t, t), None))
        elif kind == "camera":
            act("camera", lambda: (gate.update_camera("front_1", CameraReport(ev[1], "" if ev[1] else "FROZEN", t), t), None))
        else:
            name = ev[1]

            def call():
                if name == "arm":
                    gate.request_arm(t, t)
                else:
                    getattr(gate, name)()
                return gate.tick(t, t), None
            act("service", call, name)
    trace.append((gate.forwarded, gate.rejected, gate.clamped, dict(gate.reason_counts)))
    return trace


@SETTINGS
@given(scenario)
def test_forwarded_commands_are_within_every_limit(s):
    run(*s)


@SETTINGS
@given(scenario)
def test_gate_is_deterministic(s):
    assert run(*s) == run(*s)


@pytest.mark.parametrize("seed", range(3))
def test_properties_are_not_vacuous(seed):
    """Guard: a clean stream does reach ARMED and forward (else the properties prove nothing)."""
    rng = np.random.default_rng(seed)
    events = []
    for _ in range(30):
        spec = {"dxyz": list(rng.uniform(-0.003, 0.003, 3)), "quat": "same", "frame": "hw", "gripper": 0.5}
        events.append((("propose", spec, spec, 0.0, 0.0, False), 0.033, True))
    trace = run(0, ("work",), events)
    assert trace[-1][0] > 20


GUARD_EXAMPLES = 400
FORWARDING_SHARE = 0.4
"""At least this share of the guard's sequences must end having forwarded commands. Measured
(2026-12-03, 400 sequences each): 0.565, 0.595, 0.642, 0.647 over four random seeds; the
guard's own sample (derandomized, drawn without the loaded modules' constants) 0.64. 0.4 is
still most sequences forwarding."""
HOLDING_SHARE = 0.2
"""Likewise for reaching HOLD (measured 0.73-0.83 random, 0.83 in the guard's sample)."""


def test_generators_reach_every_reason_and_every_clamp(monkeypatch):
    """Guard (derandomized, so it is the same set every run): over the generated sequences
    every reason code the gate can raise is raised, every clamp path is taken, and enough
    sequences forward commands and reach HOLD for the properties to mean something.

    Hypothesis also draws, now and then, literal constants found in the source of every local
    module loaded so far; which modules those are depends on the order the suite runs in, so the
    "same" derandomized set differed between runs (no JOINT_STEP clamp in one order, no
    STALE_STATE in another). The guard's sample is drawn without them."""
    from hypothesis.internal.conjecture import providers
    from hypothesis.internal.constants_ast import Constants

    assert hasattr(providers, "_get_local_constants"), "hypothesis changed: make the guard's sample order-independent again"
    monkeypatch.setattr(providers, "_get_local_constants", Constants)
    providers.CONSTANTS_CACHE.cache.clear()
    coverage = {"refused": Counter(), "clamped": Counter()}
    seen = Counter()

    @settings(max_examples=GUARD_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(scenario)
    def sample(s):
        trace = run(*s, coverage=coverage)
        seen["n"] += 1
        seen["forwarding"] += trace[-1][0] > 0
        seen["holding"] += any(state == GateState.HOLD for state, _ in trace[:-1])

    try:
        sample()
    finally:
        providers.CONSTANTS_CACHE.cache.clear()  # later tests draw with the local constants again
    refused = {Reason(r) for r in coverage["refused"]}
    clamped = {Reason(r) for r in coverage["clamped"]}
    missing = set(Reason) - NEVER_EXPECTED - refused
    assert not missing, f"never refused for: {sorted(r.value for r in missing)}; counts {dict(coverage['refused'])}"
    assert clamped == CLAMPABLE, f"clamp paths never taken: {sorted(r.value for r in CLAMPABLE - clamped)}"
    assert seen["forwarding"] >= FORWARDING_SHARE * seen["n"] and seen["holding"] >= HOLDING_SHARE * seen["n"], seen


def _wxyz(r: Rotation) -> np.ndarray:
    return np.roll(r.as_quat(), 1)


unit_vectors = st.lists(st.floats(-1.0, 1.0), min_size=3, max_size=3).filter(lambda v: np.linalg.norm(v) > 1e-3).map(
    lambda v: np.asarray(v) / np.linalg.norm(v))


@SETTINGS
@given(age_s=st.floats(0.0, 0.3), step=st.floats(0.0, 3.0), turn=st.floats(0.0, np.pi), direction=unit_vectors,
       axis=unit_vectors, moved=st.floats(0.0, 1.0), moved_direction=unit_vectors, turned_axis=unit_vectors)
def test_a_jump_judged_on_late_state_is_a_jump_from_everywhere_the_arm_could_be(
        age_s, step, turn, direction, axis, moved, moved_direction, turned_axis):
    """checks.check_jump_from_late_state refuses a target exactly when it is beyond the jump
    limit from EVERY pose the arm can have reached since the late measurement at its EE speed
    limits (sound: no HOLD for a step the arm could have made; complete: nothing beyond the
    bound is deferred). Sampled: one reachable pose, moved and turned up to the bound."""
    from egomimic_safety.checks import _Refusal, check_jump_from_late_state, quat_angle

    cfg = CONFIGS[0]
    meas_pose = KIN.forward(Q)
    r_meas = Rotation.from_quat(np.roll(meas_pose[3:], -1))
    target = meas_pose.copy()
    target[:3] += direction * step * (cfg.max_translation_step_m + cfg.max_ee_speed_m_s * age_s)
    target[3:] = _wxyz(r_meas * Rotation.from_rotvec(axis * turn))
    meas = ArmMeasurement(Q, 0.5, meas_pose, 10.0 - age_s)
    try:
        check_jump_from_late_state(target, meas, 10.0, 0.0, cfg)
        refused = None
    except _Refusal as refusal:
        refused = refusal.reason
    slack_m, slack_rad = cfg.max_ee_speed_m_s * age_s, cfg.max_ee_angular_speed_rad_s * age_s
    far_m = np.linalg.norm(target[:3] - meas_pose[:3]) > cfg.max_translation_step_m + slack_m
    far_rad = quat_angle(target[3:], meas_pose[3:]) > cfg.max_rotation_step_rad + slack_rad
    assert (refused is not None) == (far_m or far_rad)  # complete
    reached = meas_pose.copy()  # a pose the arm can have reached meanwhile
    reached[:3] += moved_direction * moved * slack_m
    reached[3:] = _wxyz(r_meas * Rotation.from_rotvec(turned_axis * moved * slack_rad))
    if refused == Reason.TRANSLATION_JUMP:  # sound: a jump from there too
        assert np.linalg.norm(target[:3] - reached[:3]) > cfg.max_translation_step_m - 1e-9
    if refused == Reason.ROTATION_JUMP:
        assert quat_angle(target[3:], reached[3:]) > cfg.max_rotation_step_rad - 1e-9
