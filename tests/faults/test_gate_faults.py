"""Fault battery: every fault the gate must catch, against the real simulated graph over DDS.

One graph per module (egomimic-launch, policy:=none, sim drivers, frames, gate, cameras); the
test process is the policy. Each fault runs EGOMIMIC_FAULT_TRIALS seeded trials (default 3;
EGOMIMIC_FAULT_SEED changes the seed) with randomized timing and magnitude: reset, arm, stream
valid commands for a random time, inject, then require
- the expected state (and reason) stamped by the gate within 110 ms of the fault (a silent
  driver, a stalled camera or a silent policy: within the documented persistence bounds,
  stale_state_bound, stale_camera_bound and stale_command_bound, since a
  late stream is first held back, the drivers hold on their own at 100 ms, and the gate
  latches only when it stays late),
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
import re
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_msgs.msg import CameraHealth
from egomimic_safety.checks import joint_bounds

from .conftest import RESULTS, RigHiccup, TrialResult
from .freeze import Freeze
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
WATCHDOG_PERIOD_S = 0.01
"""The gate's watchdog runs at 100 Hz."""
LOAD_ALLOWANCE_S = PERIOD_S
"""The persistence bounds' allowance for the machine: the silent stream's last message reaching
the gate late, and the gate's watchdog waking late (the hypervisor takes the vCPUs away for tens
of ms on this host: fc25 and fc26 measured 315-318 ms against 310 ms without it). One control
period, as for the camera bound. Safety is unchanged: nothing is forwarded once the stream is
late (max_*_age_s), and the drivers hold on their own 100 ms after their last command."""


def stale_state_bound(rig: Rig) -> float:
    """A silent driver latches HOLD once its newest state is state_hold_after_s old (commands
    are held back from max_state_age_s on): that, plus one watchdog period and LOAD_ALLOWANCE_S."""
    return rig.config.state_hold_after_s + WATCHDOG_PERIOD_S + LOAD_ALLOWANCE_S


def stale_command_bound(rig: Rig) -> float:
    """A silent policy latches HOLD once no command was taken for command_timeout_s: that, plus
    one watchdog period and LOAD_ALLOWANCE_S."""
    return rig.config.command_timeout_s + WATCHDOG_PERIOD_S + LOAD_ALLOWANCE_S


def stale_camera_bound(rig: Rig) -> float:
    """A stalled camera latches HOLD once its newest frame is camera_hold_after_s old, counted from
    that frame's capture stamp (newest_frame_before_hold); plus one watchdog period for the tick's
    phase and one control period for the gate's latency from that tick to its announced status
    (take, decide, send the holds, stamp the status) under load (LOAD_ALLOWANCE_S): measured
    305-318 ms from the newest frame on an idle machine. (Counted from the injection instead, a
    camera whose last frame before the stall was already late read as a slow gate: fc16, 362 ms
    after the injection.)"""
    return rig.config.camera_hold_after_s + WATCHDOG_PERIOD_S + LOAD_ALLOWANCE_S


def newest_frame_before_hold(rig: Rig, cameras: list[str], t_inject: float) -> float:
    """The capture stamp of the newest frame the stalled camera(s) published before the gate's
    HOLD (the oldest of these when several stall at once: that one latches first); the injection
    time when the HOLD never comes (conclude then fails on it) or no frame was seen."""
    status = rig.wait_state({"HOLD"}, t_inject - 0.001, 3.0)
    if status is None:
        return t_inject
    newest = [
        max((s for (_, s, st) in list(rig.health[c]) if st == CameraHealth.OK and s <= status.stamp_s), default=None)
        for c in cameras
    ]
    newest = [n for n in newest if n is not None]
    return min(newest) if newest else t_inject


def newest_state_before_hold(rig: Rig, arm: Arm, frozen: Freeze) -> float:
    """The stamp of the newest state the frozen driver published before its final stop (the
    gate's bound counts from it; the driver may have run a few ms between the freeze's tries),
    taken once the gate held, when this rig has every state in flight; the first stop when none."""
    rig.wait_state({"HOLD"}, frozen.first_stop_s - 0.001, 3.0)
    with rig.lock:
        stamps = [j.stamp_s for j in rig.joint_history[arm] if j.stamp_s <= frozen.stopped_s]
    return max(stamps, default=frozen.first_stop_s)


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
        assert not missing, (
            f"no CameraHealth from {missing} within 20 s: the camera faults cannot run; "
            + (tmp / "launch.log").read_text()[-3000:]
        )
        yield r
        assert not r.poll_errors, f"the rig's poll thread raised: {r.poll_errors[:3]}"
    finally:
        r.close()


# -- trial skeleton ------------------------------------------------------------------------------
def to_disarmed(rig: Rig) -> None:
    rig.stop_stream()
    state = rig.state()
    if state in ("HOLD", "ESTOP"):
        ok, msg = rig.call("reset")
        # this rig may not have seen an earlier reset's status yet
        assert ok or "nothing to reset" in msg, rig.unanswered("reset", msg)
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
    if armed is None and rig.statuses[-1].reason in ("STALE_COMMAND", "STALE_STATE", "STALE_CAMERA"):
        raise RigHiccup(f"arming failed before any fault (the machine stalled the rig or a stream): {rig.statuses[-1]}")
    assert armed, rig.statuses[-1]
    rig.armed_stamp_s = armed.stamp_s
    time.sleep(rng.uniform(0.05, 0.35))
    return anchor


DEAF_DETAILS = {
    "STALE_COMMAND": re.compile(r"(?:HOLD: )?no command for (\d+) ms"),
    "STALE_CAMERA": re.compile(
        r"(?:HOLD: )?camera (\S+): (?:newest frame is (\d+) ms old|no health report for (\d+) ms).*"
    ),
}
"""The gate's details that say how long it has heard nothing of a stream (gate.py)."""


def deaf_since_s(status) -> float | None:
    """When the stream named in a STALE_COMMAND or STALE_CAMERA HOLD last reached the gate, by the
    gate's own detail (its decision stamp minus the silence it names), or None for any other."""
    pattern = DEAF_DETAILS.get(status.reason)
    m = pattern.fullmatch(status.detail) if pattern is not None else None
    if m is None:
        return None
    silent_ms = next(int(g) for g in m.groups() if g is not None and g.isdigit())
    return status.stamp_s - silent_ms / 1e3


HEALTH_STATES = {
    CameraHealth.OK: "OK",
    CameraHealth.STALLED: "STALLED",
    CameraHealth.FROZEN: "FROZEN",
    CameraHealth.STARTING: "STARTING",
    CameraHealth.ERROR: "ERROR",
}


def camera_frames_after(rig: Rig, status, since_s: float) -> tuple[int, list[int]]:
    """For a STALE_CAMERA decision: (frames of the named camera this rig received before the
    decision stamped after `since_s`, the states of every report it received in that window).
    The camera sends one OK report per frame, stamped with the frame's capture time, so frames
    the rig got and the gate did not mean the gate was deaf; none means the camera stopped."""
    m = DEAF_DETAILS["STALE_CAMERA"].fullmatch(status.detail)
    if m is None:
        return 0, []
    window = [(s, st) for (r, s, st) in list(rig.health.get(m.group(1), [])) if since_s < s and r <= status.recv_s]
    return sum(1 for _, st in window if st == CameraHealth.OK), [st for _, st in window]


def conclude(
    rig: Rig,
    fault: str,
    t_start: float,
    t_fault: float,
    states: set[str],
    reasons: set[str] | None,
    keep_streaming=True,
    extra=None,
    deadline_s: float = DEADLINE_S,
    stopped: str = "",
) -> TrialResult:
    """`stopped`: the node the fault SIGSTOPped, when it is one that writes to the gate."""
    armed_at = getattr(rig, "armed_stamp_s", None)
    early = [
        s
        for s in list(rig.statuses)
        if s.state in ("HOLD", "ESTOP") and armed_at is not None and armed_at < s.stamp_s < t_fault - 0.001
    ]
    if early:
        raise RigHiccup(f"{fault}: gate left ARMED before the fault ({early[0].reason}: {early[0].detail})")
    status = rig.wait_state(states, t_fault - 0.001, 3.0)
    assert status is not None, f"{fault}: never reached {states}; last: {rig.statuses[-1]}"
    if reasons is not None:
        silent = (
            []
            if status.reason in reasons
            else rig.silent_streams(status.reason, status.detail, status.stamp_s, DEADLINE_S)
        )
        if silent:  # the gate held for a real silence of a stream the fault did not touch
            bad = [c for c in rig.commands_since(t_start) if c.violations]
            assert not bad, f"{fault}: commands outside limits reached the drivers: {bad[0].violations}"
            raise RigHiccup(
                f"{fault}: the gate held for {status.reason} ({status.detail}) and this rig saw {', '.join(silent)} "
                f"silent for that whole window too: the machine stalled, the injected fault was not what was measured"
            )
        deaf_since = deaf_since_s(status)
        missed, states_seen = (
            camera_frames_after(rig, status, deaf_since + 0.002) if deaf_since is not None else (0, [])
        )
        deaf = (status.reason == "STALE_COMMAND" and deaf_since is not None and deaf_since >= t_fault - PERIOD_S) or (
            status.reason == "STALE_CAMERA" and missed >= 2
        )
        if stopped and status.reason not in reasons and deaf:
            # The stream the gate names went on, and the gate heard none of it: its command
            # silence began at the stop while this rig kept sending (else `silent` above), or
            # this rig received frames of the camera, stamped after the gate's newest one, before
            # the decision. A writer stopped while it holds a reader's shared-memory port mutex
            # (Fast DDS try_push) leaves that reader deaf to every writer until it runs again
            # (bench/deaf_reader.py: 2 of 150 stops of a 1 kHz writer). The gate held all the
            # same, on the first stream to go stale (its command timeout, or a camera's 300 ms:
            # fc125 and fc126 saw front_1 "307 ms old" beside a SIGSTOPped driver, before the
            # state bound), but the staleness under test was not what it measured: re-run, listed.
            # The rig's freeze (freeze.py) now stops a node only where every thread is in a
            # blocking wait, which makes a held port lock unlikely, not impossible; this stays for
            # that rest and for a freeze that found no such instant. Its evidence is
            # partial: a writer to the gate blocks on the held lock too, so the camera node may
            # send the rig one frame and stop in its send to the gate (CI, 2026-12-07: 1 frame).
            bad = [c for c in rig.commands_since(t_start) if c.violations]
            assert not bad, f"{fault}: commands outside limits reached the drivers: {bad[0].violations}"
            raise RigHiccup(
                f"{fault}: the gate held for {status.reason} ({status.detail}) while that stream went on: the "
                f"stopped {stopped} held the gate's shared-memory port lock (the gate heard no writer until it ran)"
            )
        camera_view = (
            f"; this rig got {missed} frame(s) of that camera after the gate's newest, and these reports: "
            f"{[HEALTH_STATES.get(st, st) for st in states_seen][:12]}"
            if status.reason == "STALE_CAMERA" and deaf_since is not None
            else ""
        )
        assert status.reason in reasons, (
            f"{fault}: reason {status.reason} ({status.detail}), expected {reasons}; "
            f"fault at {t_fault:.3f}, decision {status.stamp_s - t_fault:+.3f} s after it{camera_view}"
        )
    if keep_streaming and rig._stream_thread is None:
        rig.start_stream({a: rig.measured_pose(a) for a in ARMS})
    time.sleep(NO_RESUME_S)  # valid commands keep coming: nothing may resume
    assert rig.state() == status.state, f"{fault}: left {status.state} by itself: {rig.statuses[-1]}"

    # Stamped after the status that announced the state: only hold re-sends (a forwarded command
    # carries its proposal's stamp, always before the decision; it may still be in flight).
    def after_status():
        return [c for c in rig.commands_since(t_start) if c.stamp_s > status.stamp_s]

    if status.state in ("HOLD", "ESTOP"):  # this rig may take them late on a loaded machine
        deadline = time.time() + 1.0
        while not all(any(c.arm == arm for c in after_status()) for arm in ARMS) and time.time() < deadline:
            time.sleep(0.01)
    after = after_status()
    for arm in ARMS:
        values = [c.values for c in after if c.arm == arm]
        assert all(np.array_equal(v, values[0]) for v in values), f"{fault}: a non-hold command after {status.state}"
        if status.state in ("HOLD", "ESTOP"):
            check_hold(rig, fault, arm, values, t_fault, status)
    cmds = rig.commands_since(t_start)
    bad = [c for c in cmds if c.violations]
    result = TrialResult(
        fault,
        status.state,
        status.reason,
        status.stamp_s - t_fault,
        status.recv_s - t_fault,
        len(cmds),
        len(bad),
        [v for c in bad for v in c.violations][:3],
        bound_s=deadline_s,
    )
    RESULTS.append(result if extra is None else extra(result))
    assert not bad, f"{fault}: commands outside limits reached the drivers: {result.examples}"
    assert result.time_to_state_s <= deadline_s, (
        f"{fault}: {status.state} {result.time_to_state_s * 1e3:.0f} ms after the fault "
        f"(bound {deadline_s * 1e3:.0f} ms)"
    )
    return result


def check_hold(rig: Rig, fault: str, arm: Arm, values_after: list, t_fault: float, status) -> None:
    """HOLD/ESTOP actively commands the measured joints: at least MIN_HOLDS hold commands
    within NO_RESUME_S of the gate's decision, each exactly a sample the arm's driver published
    (the gate holds the last plausible measurement it received), clamped inside the gate's joint
    bounds, measured between state_hold_after_s before the fault (state that late is still
    only deferring) and the decision."""
    assert values_after, f"{fault}: {arm.value}: no hold command after {status.state} (the arms have no brakes)"
    hold = values_after[0]
    assert np.all(np.isfinite(hold)), f"{fault}: {arm.value}: non-finite hold {hold.tolist()}"

    def holds():  # sent (header stamp) within NO_RESUME_S of the decision; this rig may receive them late
        return [
            c
            for c in rig.commands_since(t_fault)
            if c.arm == arm and c.stamp_s <= status.stamp_s + NO_RESUME_S and np.array_equal(c.values, hold)
        ]

    deadline = time.time() + 1.0
    while len(holds()) < MIN_HOLDS and time.time() < deadline:
        time.sleep(0.01)
    assert len(holds()) >= MIN_HOLDS, (
        f"{fault}: {arm.value}: {len(holds())} hold commands within {NO_RESUME_S * 1e3:.0f} ms"
    )
    lo, hi = joint_bounds(rig.config)
    since = t_fault - rig.config.state_hold_after_s - DRIVER_PERIOD_S  # late state is still the gate's newest
    samples = rig.joint_samples(arm, since, status.stamp_s, wait_s=0.3)  # a frozen driver has none after the fault
    assert samples, f"{fault}: {arm.value}: no measured joints around the fault"
    measured = [np.append(np.clip(j.positions[:6], lo, hi), np.clip(j.positions[6], 0.0, 1.0)) for j in samples]
    assert any(np.array_equal(m, hold) for m in measured), (
        f"{fault}: {arm.value}: hold {np.round(hold, 5).tolist()} is none of the {len(samples)} samples the driver published "
        f"between {since - t_fault:+.3f} s and the decision (nearest "
        f"{np.round(min(measured, key=lambda m: float(np.max(np.abs(m - hold)))), 5).tolist()})"
    )


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
        scale = (
            0.0 if kind == "zero_quaternion" else float(rng.choice([rng.uniform(0.2, 0.99), rng.uniform(1.01, 3.0)]))
        )

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
        deadline = t_flip + 3.0  # 12 forwarded commands take 0.25 s; the rig may take them late
        while len(rig.commands_since(t_flip + 0.05)) < 12 and rig.state() == "ARMED" and time.time() < deadline:
            time.sleep(0.02)
        assert rig.state() == "ARMED", f"q -> -q was refused: {rig.statuses[-1]}"
        after = list(rig.commands_since(t_flip + 0.05))
        assert len(after) >= 12, (
            f"the flipped commands were not forwarded ({len(after)} in {time.time() - t_flip:.2f} s)"
        )
        for c in after:
            assert np.allclose(c.values[:6], before[c.arm][:6], atol=2e-3), "a flipped quaternion moved the arm"
        bad = [c for c in rig.commands_since(t_start) if c.violations]
        RESULTS.append(
            TrialResult(
                "q_to_minus_q", "ARMED", "", float("nan"), float("nan"), len(rig.commands_since(t_start)), len(bad), []
            )
        )
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

        mutated_trial(
            rig, rng, "unreachable", mutate, {"WORKSPACE", "TRANSLATION_JUMP", "TRANSLATION_RATE", "IK_FAILED"}
        )


def test_joint_limit_target(rig):
    """Drive the wrist roll to 30 mrad inside its 2.0 rad limit, then ask for a pose past it."""
    for rng in trials("joint_limit"):
        t_start = time.time()
        arm_and_stream(rig, rng)
        arm = random_arm(rng)
        q = {a: rig.measured_joints(a) for a in ARMS}
        goal = 1.97
        while abs(q[arm][5] - goal) > 1e-6:  # 0.75 rad/s: under the 1.8 rad/s limit even when a late
            q[arm][5] += float(np.clip(goal - q[arm][5], -0.025, 0.025))  # command shrinks dt to 14 ms
            rig.set_stream_pose({a: rig.kin[a].forward(q[a]) for a in ARMS})
            time.sleep(PERIOD_S)
        deadline = time.time() + 3.0
        while abs(rig.measured_joints(arm)[5] - goal) > 0.005 and time.time() < deadline:
            time.sleep(0.02)
        if rig.state() != "ARMED":  # before any fault: the rig's stream stalled (load)
            raise RigHiccup(f"joint_limit: the gate left ARMED during the approach: {rig.statuses[-1]}")
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
        conclude(
            rig, "stale_command", t_start, t_fault, {"HOLD"}, {"STALE_COMMAND"}, deadline_s=stale_command_bound(rig)
        )


def test_stale_state_driver_frozen(rig):
    for rng in trials("stale_state"):
        t_start = time.time()
        arm_and_stream(rig, rng)
        arm = random_arm(rng)
        driver = f"driver_{arm.value}"
        pid = rig.node_pid(driver)
        frozen = rig.freeze(pid)
        try:
            t_fault = newest_state_before_hold(rig, arm, frozen)
            conclude(
                rig,
                "stale_state",
                t_start,
                t_fault,
                {"HOLD"},
                {"STALE_STATE"},
                deadline_s=stale_state_bound(rig),
                stopped=driver,
            )
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
        t_inject = rig.freeze(pid).first_stop_s
    else:
        assert rig.set_camera_fault(f"{how}:{cam}")
    try:
        t_fault = t_inject
        if how == "freeze":  # the fault is observable once the camera node reports FROZEN (0.3 s of
            # unchanged content); a STALLED report before it is a late frame, which the gate rightly
            # treats as transient
            deadline = time.time() + 2.0
            while time.time() < deadline:
                bad = [s for (_, s, st) in list(rig.health[cam]) if st == CameraHealth.FROZEN and s >= t_inject]
                if bad:
                    t_fault = bad[0]
                    break
                time.sleep(0.01)
        else:  # the gate's bound counts from the newest frame it had, which may precede the injection
            t_fault = newest_frame_before_hold(rig, [cam] if how == "stall" else list(CAMERAS), t_inject)
        conclude(
            rig,
            fault,
            t_start,
            t_fault,
            {"HOLD"},
            {"STALE_CAMERA"},
            extra=lambda r: r.with_note(f"{(r.time_to_state_s + t_fault - t_inject) * 1e3:.0f} ms after injection"),
            deadline_s=DEADLINE_S if how == "freeze" else stale_camera_bound(rig),
            stopped="cameras" if how == "sigstop" else "",
        )
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
        # Back by more than max_command_late_s (0.3 s): a command 0.1-0.3 s old is only late (held
        # back, not a fault); ahead by more than max_command_future_s (0.05 s).
        jump = float(rng.choice([-rng.uniform(0.35, 5.0), rng.uniform(0.15, 5.0)]))

        def mutate(msg):
            ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec + int(jump * 1e9)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)

        mutated_trial(rig, rng, "clock_jump", mutate, {"STALE_COMMAND"})


def test_command_flood_1khz(rig):
    for rng in trials("flood_1khz"):
        t_start = time.time()
        anchor = arm_and_stream(rig, rng)
        # The flood replaces the stream (one producer gone wild): two producers interleaving
        # their stamps would be caught as STALE_COMMAND instead, a different fault.
        t_stop = rig.stop_stream()
        end = t_stop + rng.uniform(0.2, 0.4)
        stamps = []
        while time.time() < end:
            msg = rig.make_command(anchor)
            rig.send(msg)
            stamps.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
            time.sleep(0.001)
        # The fault exists from the first command that makes the stamps a flood (more than the
        # gate's limit within its window): on a loaded machine this rig reaches 1 kHz late.
        streamed = list(rig.stream_stamps)
        t_fault = first_flooding_stamp(
            streamed + stamps, rig.config.max_commands_per_window, rig.config.command_rate_window_s, first=len(streamed)
        )
        if t_fault is None:
            raise RigHiccup(
                f"flood_1khz: the rig never sent more than {rig.config.max_commands_per_window} commands "
                f"within {rig.config.command_rate_window_s * 1e3:.0f} ms ({len(stamps)} in all)"
            )
        conclude(
            rig,
            "flood_1khz",
            t_start,
            t_fault,
            {"HOLD"},
            {"COMMAND_RATE"},
            extra=lambda r: r.with_note(f"flood condition {(t_fault - t_stop) * 1e3:.0f} ms after the flood began"),
        )


def first_flooding_stamp(stamps: list[float], per_window: int, window_s: float, first: int = 0) -> float | None:
    """The first stamp from index `first` on with more than `per_window` stamps in the window
    ending at it (the gate's COMMAND_RATE rule), or None."""
    for i in range(first, len(stamps)):
        t = stamps[i]
        if sum(1 for u in stamps[: i + 1] if t - window_s < u <= t) > per_window:
            return t
    return None


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
            rig.send(msg)
        conclude(
            rig,
            "fast_producer",
            t_start,
            t_fault,
            {"HOLD"},
            {"TRANSLATION_RATE"},
            extra=lambda r: r.with_note(f"{step_m * rate_hz:.2f} m/s"),
        )


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
        deadline = time.time() + 5.0
        while not (ok := rig.call("arm"))[0] and time.time() < deadline:  # fresh state needed to arm
            time.sleep(0.1)
        assert ok[0], ok[1]
        arm = random_arm(rng)
        far = {a: rig.measured_pose(a) for a in ARMS}
        far[arm][:3] += unit(rng) * rng.uniform(0.035, 0.07)  # the stale pre-fault plan, offset
        t_fault = time.time()
        rig.start_stream(far)
        conclude(rig, "rearm_far_start", t_start, t_fault, {"DISARMED"}, {"START_TOO_FAR"}, keep_streaming=False)
        late = [c for c in rig.commands_since(t_start) if c.stamp_s >= t_start]  # not the old HOLD's re-sends in flight
        assert not late, "a command reached a driver although arming failed"


# -- trust and liveness (spoofed state, foreign commands, e-stop under load, a second launch) ------
SPOOF = np.array([3.0, 3.6, 3.3, 1.58, 1.6, 2.1])
"""Each joint just past its X5 limit (the adversarial report's values)."""
ESTOP_CALLS = 34
"""E-stop calls per trial: 3 trials give 102 per row, so the row's p99 is not just its worst call."""
ESTOP_P99_S = 0.050
ESTOP_ANSWERED_S = 1.0


def wait_matched(pub, subscribers: int, timeout_s: float = 5.0) -> None:
    """Block until `pub` reaches `subscribers` readers (samples sent before are lost)."""
    deadline = time.time() + timeout_s
    while pub.get_subscription_count() < subscribers and time.time() < deadline:
        time.sleep(0.005)
    assert pub.get_subscription_count() >= subscribers, (
        f"{pub.topic_name}: only {pub.get_subscription_count()} reader(s)"
    )


ENCODER_NOISE_RAD = 2e-5
"""One sigma of the simulated joint encoders' noise."""


def motion_bound(rig: Rig, arm: Arm, before_s: float, t0: float) -> float:
    """How far the arm's measured joints moved in one control period over [before_s, t0],
    plus 6 sigma of encoder noise: the allowance for 'no motion beyond one control period of
    the measured trajectory'."""
    samples = rig.joint_samples(arm, before_s, t0)
    assert len(samples) >= 3, f"{arm.value}: too few samples before the fault to know how it moved"
    t = np.array([s.stamp_s for s in samples])
    q = np.array([s.positions[:6] for s in samples])
    later = np.searchsorted(t, t + PERIOD_S)
    ok = later < len(t)
    period = np.max(np.abs(q[later[ok]] - q[ok])) if ok.any() else 0.0
    return float(period) + 6 * ENCODER_NOISE_RAD


def assert_no_motion(rig: Rig, fault: str, t_fault: float, until_s: float, may_fall_silent: bool = False) -> None:
    """`may_fall_silent`: the driver may exit right after the fault (the launcher died), so
    there may be no sample after it; whatever was published must still not have moved."""
    for arm in ARMS:
        bound = motion_bound(rig, arm, t_fault - 0.5, t_fault)
        ref = rig.joint_samples(arm, t_fault - 0.05, t_fault)
        after = rig.joint_samples(arm, t_fault, until_s)
        if not ref and may_fall_silent and not after:
            continue  # the driver exited at once; this rig never took its last samples (assert_held)
        if not ref or not (after or may_fall_silent):
            recent = rig.joint_samples(arm, t_fault - 2.0, until_s, wait_s=0.0)
            src = rig.state_source[arm]
            pytest.fail(
                f"{fault}: {arm.value}: no measured joints around the fault: {len(recent)} samples from 2 s before "
                f"it, stamps of the newest {[round(j.stamp_s - t_fault, 3) for j in recent[-5:]]} s from it "
                f"(received {[round(j.recv_s - t_fault, 3) for j in recent[-5:]]}); samples from writers the rig "
                f"did not know: {src.unknown}, foreign: {src.refused}"
            )
        if not after:
            continue
        # Each sample after the fault against the last one before it, allowed what the measured
        # trajectory moved per control period times the periods elapsed (at least one): an arm
        # still settling on its streamed target keeps its pace (a fresh clone saw 0.209 mrad over
        # 0.3 s against one period's 0.205), while a foreign or faulty command accelerates it
        # towards its target, far beyond that pace.
        noise = 6 * ENCODER_NOISE_RAD
        per_period = bound - noise
        for s in after:
            dt = s.stamp_s - ref[-1].stamp_s
            drift = float(np.max(np.abs(s.positions[:6] - ref[-1].positions[:6])))
            allowed = per_period * max(1.0, dt / PERIOD_S) + noise
            assert drift <= allowed, (
                f"{fault}: {arm.value}: the arm moved {drift:.5f} rad in {dt * 1e3:.0f} ms after the fault (allowed "
                f"{allowed:.5f} rad: {per_period:.5f} rad per control period before it, plus encoder noise)"
            )


def p99(values) -> float:
    return sorted(values)[min(len(values) - 1, int(np.ceil(0.99 * len(values))) - 1)]


def assert_estop_fast(fault: str, latencies, gate_s) -> None:
    """Per trial: every answer carries the gate's own handling time, and every call gets its
    answer within ESTOP_ANSWERED_S. The p99 bounds are per row (assert_estop_round_trip), as the
    acceptance states them: a p99 over one trial's 34-68 calls is in effect its maximum."""
    assert len(gate_s) == len(latencies), f"{fault}: the gate's answers carry no handling time"
    assert max(latencies) <= ESTOP_ANSWERED_S, (
        f"{fault}: a safety/estop call waited {max(latencies) * 1e3:.0f} ms for its answer"
    )


def assert_estop_round_trip(fault: str) -> None:
    """Per row (the trials' calls pooled, at least 100): the gate's own handling time and the
    round trip seen by the probe process, the operator's view, are within ESTOP_P99_S at p99
    (the slowest of each is in the battery summary too). The probe sends through two DDS
    participants (estop_probe.py), as an operator console should: a reply can reach one
    participant ~300 ms late while the other gets its own within milliseconds."""
    ms = [x for r in RESULTS if r.fault == fault for x in r.estop_ms]
    assert len(ms) >= 100, f"{fault}: {len(ms)} e-stop calls measured, too few for a p99"
    gate_ms = [x for r in RESULTS if r.fault == fault for x in r.estop_gate_ms]
    assert p99(gate_ms) <= ESTOP_P99_S * 1e3, (
        f"{fault}: safety/estop answered in {p99(gate_ms):.1f} ms at p99 by the gate "
        f"over {len(gate_ms)} calls (limit {ESTOP_P99_S * 1e3:.0f} ms)"
    )
    assert p99(ms) <= ESTOP_P99_S * 1e3, (
        f"{fault}: safety/estop round trip {p99(ms):.1f} ms at p99 over {len(ms)} calls "
        f"(limit {ESTOP_P99_S * 1e3:.0f} ms)"
    )


def test_spoofed_state_at_the_limits(rig):
    """Another publisher sends joint states just past every limit at ~1 kHz for 0.5 s: the gate
    holds at once (STATE_IMPLAUSIBLE), its holds are the real measured joints, no command
    outside the limits reaches a driver and the arm does not move."""
    from sensor_msgs.msg import JointState

    from egomimic_nodes import topics

    for rng in trials("spoofed_state"):
        t_start = time.time()
        arm_and_stream(rig, rng)
        arm = random_arm(rng)
        pub = rig.node.create_publisher(
            JointState, topics.JOINT_STATES.resolve("eva", arm=arm), topics.JOINT_STATES.qos
        )
        try:
            wait_matched(pub, 2)  # the gate and this rig
            msg = JointState()
            msg.name = arm.joint_names
            msg.position = [float(v) for v in SPOOF] + [0.5]
            t_fault = time.time()
            end = t_fault + 0.5
            while time.time() < end:
                msg.header.stamp = rig.node.get_clock().now().to_msg()
                pub.publish(msg)
                time.sleep(0.001)
            result = conclude(rig, "spoofed_state", t_start, t_fault, {"HOLD"}, {"STATE_IMPLAUSIBLE"})
        finally:
            rig.node.destroy_publisher(pub)
        assert_no_motion(rig, "spoofed_state", t_fault, time.time())
        estop = rig.estop_latencies(ESTOP_CALLS)
        RESULTS[-1] = result.with_estop(estop, rig.last_estop_gate_s, rig.last_estop_paths).with_note(
            f"{rig.foreign_states} spoofed samples kept out of the measured trajectory"
        )
        assert_estop_fast("spoofed_state", estop, rig.last_estop_gate_s)
    assert_estop_round_trip("spoofed_state")


def test_direct_joint_command_from_another_publisher(rig):
    """A joint command 1.7 rad away, straight to a driver from another node, with the gate
    DISARMED (trials 1 and 3) or ARMED (trial 2): the driver refuses every one (counted), the
    arm does not move, and nothing outside the limits is applied."""
    from sensor_msgs.msg import JointState

    from egomimic_nodes import topics

    for i, rng in enumerate(trials("direct_command")):
        t_start = time.time()
        armed = i % 2 == 1
        if armed:
            arm_and_stream(rig, rng)
        else:
            to_disarmed(rig)
        arm = random_arm(rng)
        pub = rig.node.create_publisher(
            JointState, topics.JOINT_COMMAND.resolve("eva", arm=arm), topics.JOINT_COMMAND.qos
        )
        try:
            wait_matched(pub, 2)  # the driver and this rig
            before = rig.driver_refusals(arm, "foreign_publisher") + rig.driver_refusals(arm, "unknown_publisher")
            q = rig.measured_joints(arm)
            q[0] += 1.7 if q[0] < 0.5 else -1.7
            msg = JointState()
            msg.name = arm.joint_names
            msg.position = [float(v) for v in q] + [0.5]
            t_fault = time.time()
            sent = 0

            def refused() -> int:
                return (
                    rig.driver_refusals(arm, "foreign_publisher")
                    + rig.driver_refusals(arm, "unknown_publisher")
                    - before
                )

            # At least 0.3 s of foreign commands, and on until the driver reports refusing one
            # (its /diagnostics come at 1 Hz), 5 s at most. A fixed 0.3 s burst once ended with
            # no refusal counted (9 commands): this new writer matched the driver's reader
            # (wait_matched) before that reader matched it, so the burst may be lost, or the
            # report was still on its way; either way the assertion waited on a guess.
            while time.time() < t_fault + 0.3 or (refused() < 1 and time.time() < t_fault + 5.0):
                msg.header.stamp = rig.node.get_clock().now().to_msg()
                pub.publish(msg)
                sent += 1
                time.sleep(PERIOD_S)
        finally:
            rig.node.destroy_publisher(pub)
        deadline = time.time() + 3.0  # the last ones' refusals, in the next 1 Hz report
        while time.time() < deadline and refused() < sent:
            time.sleep(0.05)
        # The foreign commands that reached the driver were refused and counted; that none moved
        # the arm is checked next.
        assert refused() >= 1, f"direct_command: the driver counted no refusal of {sent} foreign commands in 5 s"
        assert_no_motion(rig, "direct_command", t_fault, time.time())
        if armed:
            assert rig.state() == "ARMED", f"the gate's stream was disturbed: {rig.statuses[-1]}"
        cmds = rig.commands_since(t_start)
        bad = [c for c in cmds if c.violations]
        estop = rig.estop_latencies(ESTOP_CALLS)
        RESULTS.append(
            TrialResult(
                "direct_command",
                "ARMED" if armed else "DISARMED",
                "",
                float("nan"),
                float("nan"),
                len(cmds),
                len(bad),
                [v for c in bad for v in c.violations][:3],
                note=f"{sent} foreign commands refused by the driver",
            ).with_estop(estop, rig.last_estop_gate_s, rig.last_estop_paths)
        )
        assert not bad, f"direct_command: commands outside limits: {RESULTS[-1].examples}"
        assert_estop_fast("direct_command", estop, rig.last_estop_gate_s)
    assert_estop_round_trip("direct_command")


def test_estop_answers_within_50ms_under_a_2khz_flood(rig):
    """safety/estop is served on its own thread: it answers while the gate's main callbacks
    take a 2 kHz command flood (from another process, so the flood runs at its rate)."""
    import json
    import subprocess
    import sys

    for rng in trials("estop_flood_2khz"):
        t_start = time.time()
        anchor = arm_and_stream(rig, rng)
        rig.stop_stream()
        poses = json.dumps({a.value: [float(v) for v in p] for a, p in anchor.items()})
        flood = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("flood.py")), "2000", "4.0", poses],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            # Fast DDS may log to stdout first (e.g. a shared-memory port it could not lock)
            first = []
            while len(first) < 20 and (not first or first[-1] != "flooding"):
                line = flood.stdout.readline()
                if not line:
                    break
                first.append(line.strip())
            assert first and first[-1] == "flooding", f"the flood did not start: {first}"
            t_fault = time.time()
            time.sleep(0.2)
            estop = rig.estop_latencies(2 * ESTOP_CALLS)
            out = flood.communicate(timeout=30)[0]
        finally:
            if flood.poll() is None:
                flood.kill()
        words = out.split()
        n, seconds = int(words[words.index("published") + 1]), float(words[words.index("in") + 1])
        rate = n / seconds
        assert rig.wait_state({"ESTOP"}, t_fault, 2.0), f"no ESTOP: {rig.statuses[-1]}"
        cmds = rig.commands_since(t_start)
        bad = [c for c in cmds if c.violations]
        RESULTS.append(
            TrialResult(
                "estop_flood_2khz",
                "ESTOP",
                "ESTOP",
                float("nan"),
                float("nan"),
                len(cmds),
                len(bad),
                [v for c in bad for v in c.violations][:3],
                note=f"flood at {rate:.0f} Hz",
            ).with_estop(estop, rig.last_estop_gate_s, rig.last_estop_paths)
        )
        assert rate >= 1500, f"the flood ran at {rate:.0f} Hz only (2 kHz asked; this machine could not produce it)"
        assert not bad
        assert_estop_fast("estop_flood_2khz", estop, rig.last_estop_gate_s)
    assert_estop_round_trip("estop_flood_2khz")


def test_second_launch_refuses_while_the_graph_runs(rig, tmp_path):
    """A second egomimic-launch on the same namespace and domain refuses to start (exit 6),
    names the running nodes, and leaves the running graph alone."""
    import subprocess
    import sys

    state = rig.state()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "egomimic_launch.cli",
            "eva_bimanual.launch.py",
            "policy:=none",
            "--run-dir",
            str(tmp_path / "run"),
            "--quiet",
            "--duration",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 6, proc.stdout + proc.stderr
    import re

    named = re.search(r"ROS_DOMAIN_ID=\d+: (.*?)\. Stop", proc.stderr).group(1).split(", ")
    graph = {
        "/eva/driver_left",
        "/eva/driver_right",
        "/eva/frames",
        "/eva/cameras",
        "/eva/safety_gate",
        "/eva/safety_gate_estop",
        "/eva/safety_gate_state",
        "/eva/driver_left_in",
        "/eva/driver_right_in",
        "/eva/cameras_poses",
    }  # with companions
    # It names what its discovery has seen by then (at least one node, 0.5 s more once one is
    # seen): on a busy machine not necessarily every node, never a node of another graph.
    assert len(named) >= 1 and set(named) <= graph, proc.stderr
    assert rig.launcher.poll() is None and rig.state() == state
