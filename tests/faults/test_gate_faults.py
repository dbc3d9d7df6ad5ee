"""Fault battery: every fault of issue 5 against the real simulated graph over DDS.

One graph per module (egomimic-launch, policy:=none, sim drivers, frames, gate, cameras); the
test process is the policy. Each fault runs EGOMIMIC_FAULT_TRIALS seeded trials (default 3;
EGOMIMIC_FAULT_SEED changes the seed) with randomized timing and magnitude: reset, arm, stream
valid commands for a random time, inject, then require
- the expected state (and reason) stamped by the gate within 110 ms of the fault,
- ZERO joint commands outside the limits among all the drivers received (independent oracle),
- no automatic resume: valid commands keep coming for 150 ms after the fault, the state stays
  and only the hold target reaches the drivers;
- HOLD/ESTOP actively hold: at least 3 hold commands per arm within those 150 ms, equal to the
  joints measured at the fault (within one driver period of motion), never non-finite.
The graph requires all three cameras; a camera node that reports no health fails the module.
Fault instant: publication of the faulty message; for silence faults the instant the producer
stopped (policy stopped, driver or camera SIGSTOPped, stall injected); for a frozen camera the
stamp of its first non-OK health report (the camera node needs freeze_after_s to see a freeze).
The per-fault summary (trials, worst time to state, commands out of limits) prints at the end
of the session and goes to out/faults/summary.json.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_msgs.msg import CameraHealth

from .conftest import RESULTS, RigHiccup, TrialResult
from .rig import PERIOD_S, Rig

pytestmark = pytest.mark.integration

TRIALS = int(os.environ.get("EGOMIMIC_FAULT_TRIALS", "3"))
SEED = int(os.environ.get("EGOMIMIC_FAULT_SEED", "5"))
DEADLINE_S = 0.110
NO_RESUME_S = 0.15
MIN_HOLDS = 3
"""Hold commands per arm within NO_RESUME_S of entering HOLD/ESTOP (sent at once, then every
33 ms: 5 expected)."""
DRIVER_PERIOD_S = 0.01
"""The sim drivers publish joint_states at 100 Hz (eva_sim.yaml)."""


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    r = Rig(tmp, CAMERAS)
    try:
        assert r.wait_ready(90), (tmp / "launch.log").read_text()[-3000:]
        # The gate requires every camera (as in production): the camera node must report
        # health, else the camera faults would prove nothing. No fallback to "no cameras".
        deadline = time.time() + 20
        while time.time() < deadline and not all(r.health[c] for c in CAMERAS):
            time.sleep(0.1)
        missing = [c for c in CAMERAS if not r.health[c]]
        assert not missing, f"no CameraHealth from {missing} within 20 s: the camera faults cannot run; " + \
            (tmp / "launch.log").read_text()[-3000:]
        yield r
    finally:
        r.close()


# -- trial skeleton ------------------------------------------------------------------------------
def to_disarmed(rig: Rig) -> None:
    rig.stop_stream()
    state = rig.state()
    if state in ("HOLD", "ESTOP"):
        assert rig.call("reset")[0]
    elif state in ("ARMED", "ARMING"):
        rig.call("disarm")
    assert rig.wait_state({"DISARMED"}, 0.0, 2.0)


def arm_and_stream(rig: Rig, rng) -> dict[Arm, np.ndarray]:
    """DISARMED -> ARMED with the measured pose streamed; then a random extra streaming time."""
    to_disarmed(rig)
    deadline = time.time() + 5.0
    t_arm = time.time()
    while True:  # a camera that just came back may still be reporting its fault
        ok, msg = rig.call("arm")
        if ok or time.time() > deadline:
            break
        time.sleep(0.1)
    assert ok, msg
    anchor = {a: rig.measured_pose(a) for a in ARMS}
    rig.start_stream(anchor)
    armed = rig.wait_state({"ARMED"}, t_arm, 3.0)
    assert armed, rig.statuses[-1]
    rig.armed_stamp_s = armed.stamp_s
    time.sleep(rng.uniform(0.05, 0.35))
    return anchor


def conclude(rig: Rig, fault: str, t_start: float, t_fault: float, states: set[str], reasons: set[str] | None,
             keep_streaming=True, extra=None) -> TrialResult:
    armed_at = getattr(rig, "armed_stamp_s", None)
    early = [s for s in list(rig.statuses) if s.state in ("HOLD", "ESTOP") and armed_at is not None
             and armed_at < s.stamp_s < t_fault - 0.001]
    if early:
        raise RigHiccup(f"{fault}: gate left ARMED before the fault ({early[0].reason}: {early[0].detail})")
    status = rig.wait_state(states, t_fault - 0.001, 3.0)
    assert status is not None, f"{fault}: never reached {states}; last: {rig.statuses[-1]}"
    if reasons is not None:
        assert status.reason in reasons, f"{fault}: reason {status.reason} ({status.detail}), expected {reasons}"
    if keep_streaming and rig._stream_thread is None:
        rig.start_stream({a: rig.measured_pose(a) for a in ARMS})
    time.sleep(NO_RESUME_S)  # valid commands keep coming: nothing may resume
    assert rig.state() == status.state, f"{fault}: left {status.state} by itself: {rig.statuses[-1]}"
    after = [c for c in rig.commands_since(status.stamp_s + 0.02)]
    for arm in ARMS:
        values = [c.values for c in after if c.arm == arm]
        assert all(np.array_equal(v, values[0]) for v in values), f"{fault}: a non-hold command after {status.state}"
        if status.state in ("HOLD", "ESTOP"):
            check_hold(rig, fault, arm, values, t_fault, status)
    cmds = rig.commands_since(t_start)
    bad = [c for c in cmds if c.violations]
    result = TrialResult(fault, status.state, status.reason, status.stamp_s - t_fault, status.recv_s - t_fault,
                         len(cmds), len(bad), [v for c in bad for v in c.violations][:3])
    RESULTS.append(result if extra is None else extra(result))
    assert not bad, f"{fault}: commands outside limits reached the drivers: {result.examples}"
    assert result.time_to_state_s <= DEADLINE_S, f"{fault}: {status.state} {result.time_to_state_s * 1e3:.0f} ms after the fault"
    return result


def check_hold(rig: Rig, fault: str, arm: Arm, values_after: list, t_fault: float, status) -> None:
    """HOLD/ESTOP actively commands the measured joints: at least MIN_HOLDS hold commands
    within NO_RESUME_S of the gate's decision, each equal to the arm's joints measured at the
    fault instant, within one driver period of motion (the gate holds its newest measurement;
    this process may not have seen exactly that sample)."""
    assert values_after, f"{fault}: {arm.value}: no hold command after {status.state} (the arms have no brakes)"
    hold = values_after[0]
    assert np.all(np.isfinite(hold)), f"{fault}: {arm.value}: non-finite hold {hold.tolist()}"
    holds = [c for c in rig.commands_since(t_fault)
             if c.arm == arm and c.recv_s <= status.stamp_s + NO_RESUME_S and np.array_equal(c.values, hold)]
    assert len(holds) >= MIN_HOLDS, f"{fault}: {arm.value}: {len(holds)} hold commands within {NO_RESUME_S * 1e3:.0f} ms"
    samples = rig.joint_samples(arm, t_fault - 0.2, status.stamp_s + DRIVER_PERIOD_S)
    assert samples, f"{fault}: {arm.value}: no measured joints around the fault"
    measured = np.array([np.append(j.positions[:6], np.clip(j.positions[6], 0.0, 1.0)) for j in samples])
    stamps = np.array([j.stamp_s for j in samples])
    # one driver period of motion: the largest change between consecutive samples (noise included)
    period_motion = np.max(np.abs(np.diff(measured, axis=0)), axis=0) if len(samples) > 1 else np.zeros(7)
    near = (stamps >= t_fault - DRIVER_PERIOD_S) & (stamps <= status.stamp_s)
    at_fault = measured[near] if near.any() else measured[[int(np.argmin(np.abs(stamps - t_fault)))]]
    err = np.abs(at_fault - hold)
    assert np.any(np.all(err <= period_motion + 1e-9, axis=1)), (
        f"{fault}: {arm.value}: hold {np.round(hold, 5).tolist()} is not the joints measured at the fault "
        f"(nearest {np.round(at_fault[int(np.argmin(err.max(axis=1)))], 5).tolist()}, one period of motion "
        f"{np.round(period_motion, 5).tolist()})")


def mutated_trial(rig: Rig, rng, fault: str, mutate, reasons: set[str]) -> None:
    t_start = time.time()
    arm_and_stream(rig, rng)
    t_fault = rig.inject_once(mutate)
    conclude(rig, fault, t_start, t_fault, {"HOLD"}, reasons)


def trials(fault: str):
    for i in range(TRIALS):
        yield np.random.default_rng([SEED, sum(map(ord, fault)), i])


# -- pose helpers -------------------------------------------------------------------------------
def pose_of(ps) -> np.ndarray:
    p, q = ps.pose.position, ps.pose.orientation
    return np.array([p.x, p.y, p.z, q.w, q.x, q.y, q.z])


def set_pose(ps, pose) -> None:
    from egomimic_nodes.msg_convert import array_to_pose

    array_to_pose(pose, ps.pose)


def random_arm(rng) -> Arm:
    return ARMS[int(rng.integers(2))]


def unit(rng) -> np.ndarray:
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


# -- the faults -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_nonfinite(rig, value):
    for rng in trials(value):
        arm, field = random_arm(rng), int(rng.integers(8))
        bad = float("nan") if value == "nan" else float(rng.choice([np.inf, -np.inf]))

        def mutate(msg):
            if field == 7:
                setattr(msg, f"{arm.value}_gripper", bad)
            else:
                pose = pose_of(getattr(msg, arm.value))
                pose[field] = bad
                set_pose(getattr(msg, arm.value), pose)
        mutated_trial(rig, rng, value, mutate, {"NONFINITE"})


@pytest.mark.parametrize("kind", ["zero_quaternion", "non_unit_quaternion"])
def test_bad_quaternion(rig, kind):
    for rng in trials(kind):
        arm = random_arm(rng)
        scale = 0.0 if kind == "zero_quaternion" else float(rng.choice([rng.uniform(0.2, 0.99), rng.uniform(1.01, 3.0)]))

        def mutate(msg):
            pose = pose_of(getattr(msg, arm.value))
            pose[3:] *= scale
            set_pose(getattr(msg, arm.value), pose)
        mutated_trial(rig, rng, kind, mutate, {"BAD_QUATERNION"})


def test_wrong_frame_id(rig):
    for rng in trials("wrong_frame"):
        arm = random_arm(rng)
        frame = str(rng.choice([arm.dataset_frame, "", "world", "left_base" if arm is Arm.RIGHT else "right_base"]))

        def mutate(msg):
            getattr(msg, arm.value).header.frame_id = frame
        mutated_trial(rig, rng, "wrong_frame", mutate, {"FRAME"})


def test_quaternion_sign_flip_passes(rig):
    for rng in trials("q_to_minus_q"):
        t_start = time.time()
        anchor = arm_and_stream(rig, rng)
        before = {c.arm: c.values for c in rig.commands_since(time.time() - 0.2)}
        flipped = {a: np.concatenate([p[:3], -p[3:]]) for a, p in anchor.items()}
        rig.set_stream_pose(flipped)
        t_flip = time.time()
        time.sleep(0.3)
        assert rig.state() == "ARMED", f"q -> -q was refused: {rig.statuses[-1]}"
        after = [c for c in rig.commands_since(t_flip + 0.05)]
        assert len(after) >= 12, "the flipped commands were not forwarded"
        for c in after:
            assert np.allclose(c.values[:6], before[c.arm][:6], atol=2e-3), "a flipped quaternion moved the arm"
        bad = [c for c in rig.commands_since(t_start) if c.violations]
        RESULTS.append(TrialResult("q_to_minus_q", "ARMED", "", float("nan"), float("nan"),
                                   len(rig.commands_since(t_start)), len(bad), []))
        assert not bad


def test_half_turn_is_refused(rig):
    for rng in trials("half_turn"):
        arm, axis = random_arm(rng), unit(rng)

        def mutate(msg):
            pose = pose_of(getattr(msg, arm.value))
            r = Rotation.from_quat(np.roll(pose[3:], -1)) * Rotation.from_rotvec(np.pi * axis)
            pose[3:] = np.roll(r.as_quat(), 1)
            set_pose(getattr(msg, arm.value), pose)
        mutated_trial(rig, rng, "half_turn", mutate, {"ROTATION_JUMP"})


def test_translation_jump(rig):
    for rng in trials("translation_jump"):
        arm, step = random_arm(rng), unit(rng) * rng.uniform(0.025, 0.5)

        def mutate(msg):
            pose = pose_of(getattr(msg, arm.value))
            pose[:3] += step
            set_pose(getattr(msg, arm.value), pose)
        mutated_trial(rig, rng, "translation_jump", mutate, {"TRANSLATION_RATE", "TRANSLATION_JUMP", "WORKSPACE"})


def test_unreachable_pose(rig):
    for rng in trials("unreachable"):
        arm, step = random_arm(rng), unit(rng) * rng.uniform(0.9, 1.5)

        def mutate(msg):
            pose = pose_of(getattr(msg, arm.value))
            pose[:3] += step
            set_pose(getattr(msg, arm.value), pose)
        mutated_trial(rig, rng, "unreachable", mutate, {"WORKSPACE", "TRANSLATION_JUMP", "TRANSLATION_RATE", "IK_FAILED"})


def test_joint_limit_target(rig):
    """Drive the wrist roll to 30 mrad inside its 2.0 rad limit, then ask for a pose past it."""
    for rng in trials("joint_limit"):
        t_start = time.time()
        arm_and_stream(rig, rng)
        arm = random_arm(rng)
        q = {a: rig.measured_joints(a) for a in ARMS}
        goal = 1.97
        while abs(q[arm][5] - goal) > 1e-6:
            q[arm][5] += float(np.clip(goal - q[arm][5], -0.04, 0.04))
            rig.set_stream_pose({a: rig.kin[a].forward(q[a]) for a in ARMS})
            time.sleep(PERIOD_S)
        deadline = time.time() + 3.0
        while abs(rig.measured_joints(arm)[5] - goal) > 0.005 and time.time() < deadline:
            time.sleep(0.02)
        assert rig.state() == "ARMED", rig.statuses[-1]
        over = q[arm].copy()
        over[5] = 2.0 + rng.uniform(0.005, 0.025)
        target = rig.kin[arm].forward(over)

        def mutate(msg):
            set_pose(getattr(msg, arm.value), target)
        t_fault = rig.inject_once(mutate)
        conclude(rig, "joint_limit", t_start, t_fault, {"HOLD"}, {"JOINT_LIMIT"})


def test_stale_command_policy_stopped(rig):
    for rng in trials("stale_command"):
        t_start = time.time()
        arm_and_stream(rig, rng)
        time.sleep(rng.uniform(0.0, PERIOD_S))  # random phase within the period
        t_fault = rig.stop_stream()
        conclude(rig, "stale_command", t_start, t_fault, {"HOLD"}, {"STALE_COMMAND"})


def test_stale_state_driver_frozen(rig):
    for rng in trials("stale_state"):
        t_start = time.time()
        arm_and_stream(rig, rng)
        pid = rig.node_pid(f"driver_{random_arm(rng).value}")
        t_fault = time.time()
        rig.freeze(pid)
        try:
            conclude(rig, "stale_state", t_start, t_fault, {"HOLD"}, {"STALE_STATE"})
        finally:
            rig.thaw(pid)
        time.sleep(0.2)  # the driver is back: still no resume
        assert rig.state() == "HOLD"


def _camera_trial(rig: Rig, rng, fault: str, how: str) -> None:
    cam = str(rng.choice(CAMERAS))
    t_start = time.time()
    arm_and_stream(rig, rng)
    pid = None
    t_inject = time.time()
    if how == "sigstop":
        pid = rig.node_pid("cameras")
        rig.freeze(pid)
    else:
        assert rig.set_camera_fault(f"{how}:{cam}")
    try:
        t_fault = t_inject
        if how == "freeze":  # the fault is observable once the camera node reports it
            deadline = time.time() + 2.0
            while time.time() < deadline:
                bad = [s for (_, s, st) in list(rig.health[cam]) if st != CameraHealth.OK and s >= t_inject]
                if bad:
                    t_fault = bad[0]
                    break
                time.sleep(0.01)
        conclude(rig, fault, t_start, t_fault, {"HOLD"}, {"STALE_CAMERA"},
                 extra=lambda r: r.with_note(f"{(r.time_to_state_s + t_fault - t_inject) * 1e3:.0f} ms after injection"))
    finally:
        if pid is not None:
            rig.thaw(pid)
        else:
            rig.set_camera_fault("")


def test_frozen_camera(rig):
    for rng in trials("frozen_camera"):
        _camera_trial(rig, rng, "frozen_camera", "freeze")


def test_stalled_camera(rig):
    for i, rng in enumerate(trials("stalled_camera")):
        _camera_trial(rig, rng, "stalled_camera", "sigstop" if i % 2 else "stall")


def test_clock_jump(rig):
    for rng in trials("clock_jump"):
        jump = float(rng.choice([-1.0, 1.0])) * rng.uniform(0.15, 5.0)

        def mutate(msg):
            ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec + int(jump * 1e9)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
        mutated_trial(rig, rng, "clock_jump", mutate, {"STALE_COMMAND"})


def test_command_flood_1khz(rig):
    for rng in trials("flood_1khz"):
        t_start = time.time()
        anchor = arm_and_stream(rig, rng)
        t_fault = time.time()
        end = t_fault + rng.uniform(0.2, 0.4)
        while time.time() < end:
            rig.pub.publish(rig.make_command(anchor))
            time.sleep(0.001)
        conclude(rig, "flood_1khz", t_start, t_fault, {"HOLD"}, {"COMMAND_RATE"})


def test_fast_producer(rig):
    """A producer at ~55 Hz with 14-19 mm per message (0.73-1.1 m/s): the rate limits are per
    unit of time (0.6 m/s x the stamp difference), so its first fast step is refused."""
    for rng in trials("fast_producer"):
        t_start = time.time()
        anchor = arm_and_stream(rig, rng)
        arm, direction = random_arm(rng), unit(rng)
        step_m, rate_hz = rng.uniform(0.014, 0.019), rng.uniform(52.0, 58.0)
        rig.stop_stream()
        t0 = time.time()
        t_fault = float("nan")
        for k in range(6):
            stamp = t0 + k / rate_hz
            time.sleep(max(0.0, stamp - time.time()))
            pose = {a: p.copy() for a, p in anchor.items()}
            pose[arm][:3] += direction * step_m * k
            msg = rig.make_command(pose, stamp_s=stamp)
            if k == 1:
                t_fault = time.time()  # before publishing: the gate may decide within 1 ms
            rig.pub.publish(msg)
        conclude(rig, "fast_producer", t_start, t_fault, {"HOLD"}, {"TRANSLATION_RATE"},
                 extra=lambda r: r.with_note(f"{step_m * rate_hz:.2f} m/s"))


def test_estop_during_motion(rig):
    for rng in trials("estop"):
        t_start = time.time()
        anchor = arm_and_stream(rig, rng)
        arm = random_arm(rng)
        direction = unit(rng)
        for k in range(int(rng.integers(5, 15))):  # moving at 0.15 m/s (5 mm per step), at most 5 cm
            pose = {a: p.copy() for a, p in anchor.items()}
            pose[arm][:3] += direction * 0.005 * min(k + 1, 10)
            rig.set_stream_pose(pose)
            time.sleep(PERIOD_S)
        t_fault = time.time()
        assert rig.call("estop")[0]
        conclude(rig, "estop", t_start, t_fault, {"ESTOP"}, {"ESTOP"})


def test_reset_then_arm_without_fresh_start_pose(rig):
    for rng in trials("rearm_far_start"):
        arm_and_stream(rig, rng)
        t_fault = rig.inject_once(lambda msg: msg.__setattr__("left_gripper", float("nan")))
        held = rig.wait_state({"HOLD"}, t_fault - 0.001, 2.0)
        assert held
        if held.reason != "NONFINITE":
            raise RigHiccup(f"rearm_far_start: the gate held for {held.reason} before the NaN ({held.detail})")
        rig.stop_stream()
        assert rig.call("reset")[0]
        rig.armed_stamp_s = None  # the HOLD above was this trial's own doing; the fault is the re-arm
        t_start = time.time()
        assert rig.call("arm")[0]
        arm = random_arm(rng)
        far = {a: rig.measured_pose(a) for a in ARMS}
        far[arm][:3] += unit(rng) * rng.uniform(0.035, 0.07)  # the stale pre-fault plan, offset
        t_fault = time.time()
        rig.start_stream(far)
        conclude(rig, "rearm_far_start", t_start, t_fault, {"DISARMED"}, {"START_TOO_FAR"}, keep_streaming=False)
        assert not rig.commands_since(t_start), "a command reached a driver although arming failed"
