"""The gate as a state machine under any sequence of events (hypothesis.stateful).

`GateMachine` is the specification. It runs the pure gate in a small world: two arms that start
at the work pose, within 0.05 rad of a wrist limit or stretched to the edge of the reach, go
where they were last commanded and report their joints; one camera; a policy; an operator.
Each rule is one kind of event there:
- the policy streams well-formed commands (the hands moved, turned, single joints nudged),
  sends one with a defect (non-finite or far position, a quaternion that is no rotation, 6
  values, a wrong frame, a gripper out of range, an answer to a stale observation), garbage
  stamped anywhere in time (NaN, inf, huge, zero / non-unit / random quaternions), or a flood;
- the arms are disturbed (jitter, an implausible jump, the gripper out of range), or the driver
  reports a NaN joint or a stamp from the future;
- the camera reports OK, FROZEN, late frames or a frame from the future;
- the watchdog ticks, once or through up to half a second in which state, camera reports and
  commands each flow or stop;
- the operator arms, disarms, stops or resets, each where it means something (@precondition).
Every event comes after a `Lapse`: time passes and, usually, the arms and the camera report.

After every gate call (`GateMachine._decide`):
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
- a twin gate fed the same calls sends the same and is in the same state (determinism).
Between events (@invariant): no exception inside the gate (INTERNAL_ERROR is never counted; one
that escaped would fail the rule), a latched gate's hold target is that clamped measurement,
`forwarded` counts exactly the commands that went out, the counters add up and never decrease,
the twin's counters are the gate's.

Guards: a clean stream forwards (the machine driven by hand), and over a fixed sample the rules
reach every reason code, every clamp path and every state, and enough sequences forward and
hold, else the properties would prove nothing about them. Examples: EGOMIMIC_PROPERTY_EXAMPLES
(default 200 for `make test`; the full run, `make test-properties`, uses 10000).

What a gate call returns is read in one place, `sent()`.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
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
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,  # derandomize comes from the profile (tests/conftest.py)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
STEPS = 16
"""Events per sequence, power-on included; a stream of well-formed commands is one event."""
MACHINE_SETTINGS = settings(SETTINGS, stateful_step_count=STEPS)
KIN = ArmKinematics()
KINS = dict.fromkeys(ARMS, KIN)
LATCHED = (GateState.HOLD, GateState.ESTOP)


def sent(result) -> dict | None:
    """What one gate call tells the node to send to the drivers now: per arm
    `[q0..q5, gripper_norm]`, or None for nothing. The only place that reads the gate's return
    values: propose()'s `Decision` carries its targets (None when it sends nothing); the other
    calls return the targets themselves, or None."""
    return getattr(result, "targets", result)


CONFIGS = [
    # production defaults: everything rejects (gripper clamps), one camera required
    GateConfig(shadow_commands=1, required_cameras=("front_1",)),
    # every clampable check clamps; a box whose edge is 3 mm beyond the work pose (link6 x = 0.212 m), so
    # that clean commands (+-5 mm per axis) cross it often and the WORKSPACE clamp is taken in any sample;
    # a short joint-step window (0.015 s: 0.075 rad, just above the 0.06 rad GateConfig requires) so
    # joint-space motions reach the joint-step clamp in any sample (0.02 s took it 0-5 times in 400
    # sequences, depending on the constants of the modules loaded before: full-suite order)
    GateConfig(
        shadow_commands=2,
        required_cameras=(),
        command_step_action=CLAMP,
        workspace_action=CLAMP,
        joint_limit_action=CLAMP,
        joint_step_action=CLAMP,
        joint_step_window_s=0.015,
        workspace_left_max_m=(0.215, 0.6, 0.7),
        workspace_right_max_m=(0.215, 0.6, 0.7),
    ),
    # everything rejects, the gripper range included; a short joint-step window (0.04 s: 0.2 rad)
    GateConfig(shadow_commands=1, required_cameras=(), gripper_action=REJECT, joint_step_window_s=0.04),
]
CLAMPABLE = {
    Reason.WORKSPACE,
    Reason.TRANSLATION_RATE,
    Reason.ROTATION_RATE,
    Reason.JOINT_LIMIT,
    Reason.JOINT_STEP,
    Reason.GRIPPER_RANGE,
}
NEVER_EXPECTED = {Reason.NODE_LOST, Reason.INTERNAL_ERROR}
"""NODE_LOST is not the gate's to raise (docs/interfaces.md: the launcher's); INTERNAL_ERROR means
an exception inside the gate, which no input may cause (GateMachine.no_exception_inside_the_gate)."""

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
    return (
        "near_limit",
        draw(st.sampled_from([3, 4, 5])),
        draw(st.sampled_from([-1, 1])),
        draw(st.floats(-0.05, 0.05)),
    )


def start_joints(spec) -> np.ndarray:
    if spec[0] == "work":
        return Q.copy()
    if spec[0] == "stretched":
        return Q_STRETCHED.copy()
    _, j, side, d = spec
    q = Q.copy()
    q[j] = (X5_LIMITS.pos_max[j] if side > 0 else X5_LIMITS.pos_min[j]) - side * d
    return q


MOTIONS = {
    "move": ["same"] * 6 + ["flip"],
    "turn": ["same", "small_turn", "small_turn", "turn", "big_turn"],
    "joint": ["same", "joint"],
}
"""Well-formed motions: the hand moved (orientation kept, maybe written as -q), turned (a little,
at the rate limits, beyond the jump limit), or one joint nudged. Each is its own rule (a stream
of up to 10 commands): hypothesis picks among rules uniformly and switches a random subset off
in each sequence, and one rule would leave the gate mostly faults, not a policy's commands."""


ORIENTATIONS = "same flip small_turn turn big_turn joint random zero scaled special short".split()
"""Everything `_target` can make of the orientation (and shape) of a target."""


@st.composite
def arm_command(draw, motion: str | None = None):
    """One arm's command. Of a `motion`: near the measured pose (now and then a medium offset),
    gripper a little out of range now and then: these keep the gate armed and forwarding.
    Without one: anything."""
    clean = motion is not None
    if clean:
        dxyz = draw(weighted((15, st.tuples(small, small, small)), (1, st.tuples(medium, medium, medium))))
        quat = draw(st.sampled_from(MOTIONS[motion]))
    else:
        dxyz = tuple(draw(delta) for _ in range(3))
        quat = draw(st.sampled_from(ORIENTATIONS))
    spec = {
        "dxyz": list(dxyz),
        "quat": quat,
        "frame": "hw" if clean else draw(st.sampled_from(["hw", "dataset", ""])),
        "gripper": draw(
            weighted((4, st.floats(0.0, 1.0)), (1, st.floats(-0.3, 1.3)))
            if clean
            else st.one_of(st.floats(-2, 3), special)
        ),
    }
    _draw_orientation(draw, spec)
    return spec


def _draw_orientation(draw, spec: dict) -> None:
    """What spec["quat"]'s kind needs; only that is drawn (drawing dominates the run time)."""
    quat = spec["quat"]
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


DEFECTS = ("position", "orientation", "shape", "frame", "far", "gripper", "observation")
"""One thing wrong with a command that is otherwise a small move: a non-finite or huge position
component, a quaternion that is no rotation (zero, scaled, random, NaN), 6 values instead of 7,
a frame other than the arm's hardware frame, a target 1.5 to 2 m away (outside every workspace
box here, whatever the direction), a gripper value out of range or non-finite, an answer to an
observation 3 s old or 200 ms ahead. Garbage has several at once, so its first one hides the
rest; this reaches each check by itself."""


@st.composite
def defective_command(draw):
    spec = draw(arm_command("move"))
    defect = draw(st.sampled_from(DEFECTS))
    if defect == "position":
        spec["dxyz"][draw(st.integers(0, 2))] = draw(special)
    elif defect == "orientation":
        spec["quat"] = draw(st.sampled_from(["zero", "scaled", "random", "special"]))
        _draw_orientation(draw, spec)
    elif defect == "shape":
        spec["quat"] = "short"
    elif defect == "frame":
        spec["frame"] = draw(st.sampled_from(["dataset", ""]))
    elif defect == "far":
        direction = np.array([draw(st.floats(-1.0, 1.0)) for _ in range(3)])
        norm = np.linalg.norm(direction)
        direction = direction / norm if norm > 1e-6 else np.array([1.0, 0.0, 0.0])
        spec["dxyz"] = list(direction * draw(st.floats(1.5, 2.0)))
    elif defect == "observation":
        spec["observation_offset_s"] = draw(st.sampled_from([-3.0, 0.2]))  # the proposal's, not the arm's
    else:
        spec["gripper"] = draw(st.one_of(st.floats(-2, 3), special))
    return spec


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


@dataclass(frozen=True)
class Lapse:
    """What comes before each event: `dt_s` passes and, when `reports`, the arms (where the driver
    took them) and the camera report just before it."""

    dt_s: float
    reports: bool


lapse = st.builds(
    Lapse, weighted((4, st.floats(0.01, 0.045)), (1, st.floats(0.0, 0.1))), st.sampled_from([True] * 9 + [False])
)


@dataclass(frozen=True)
class WellFormed:
    """One command of a stream of well-formed ones, and what comes before it."""

    lapse: Lapse
    left: dict
    right: dict
    obs_offset_s: float
    """The observation it answers: now (0) or 50 ms ago."""
    reset_first: bool
    """The operator resets a latched gate first."""


def well_formed(motion: str):
    command = st.builds(
        WellFormed, lapse, arm_command(motion), arm_command(motion), st.sampled_from([0.0, -0.05]), st.booleans()
    )
    return st.lists(command, min_size=1, max_size=10)


CAMERA_HEALTH = {
    "ok": lambda t: CameraReport(True, "", t),
    "frozen": lambda t: CameraReport(False, "FROZEN", t),
    "stalled": lambda t: CameraReport(False, "STALLED", t - 0.2, late=True),
    "ahead": lambda t: CameraReport(True, "", t + 0.2),
}
"""What the camera may report at `t`: OK; FROZEN (a fault at once while arming or armed); frames
200 ms late (transient: commands wait, HOLD after camera_hold_after_s); a frame stamped 200 ms
ahead (a fault). Only config 0 requires the camera."""

OPERATOR = {
    "arm": lambda gate, t: gate.request_arm(t, t),
    "disarm": lambda gate, t: gate.disarm(),
    "estop": lambda gate, t: gate.estop(),
    "reset": lambda gate, t: gate.reset(),
}
"""The operator's services; the watchdog ticks after each (ESTOP's hold goes out at the next tick)."""


@dataclass
class Coverage:
    """What the guard's sequences reached, summed over them."""

    refused: Counter = field(default_factory=Counter)
    """Reason counts added by calls that clamped nothing (rejections, faults, refused arming)."""
    clamped: Counter = field(default_factory=Counter)
    """Reason counts added by calls that forwarded a clamped command."""
    states: set = field(default_factory=set)
    sequences: int = 0
    forwarding: int = 0
    """Sequences that forwarded at least one command."""
    holding: int = 0
    """Sequences that reached HOLD."""


class GateMachine(RuleBasedStateMachine):
    """The gate and its world (see the module docstring). Every gate call goes through `_decide`,
    which makes it on the gate and on a twin and checks what it sends."""

    coverage: Coverage | None = None
    """Set by the guard (on a subclass) to collect what the sequences reach."""

    @initialize(config_index=st.sampled_from(range(len(CONFIGS))), start=start())
    def power_on(self, config_index: int, start: tuple) -> None:
        """The arms stand at `start` and report, the camera reports OK, the operator arms."""
        self.config = CONFIGS[config_index]
        self.gate = SafetyGate(self.config, KINS)
        self.twin = SafetyGate(self.config, KINS)
        self.lo, self.hi = joint_bounds(self.config)
        self.t = 100.0
        self.q_arm = {arm: start_joints(start) for arm in ARMS}
        """Where each arm is: what it reports."""
        self.gripper_norm = 0.5
        self.driver_target: dict = {}
        """Per arm, the joints last forwarded: a perfect driver takes the arm there (until it is pushed)."""
        self.accepted: dict = {}
        """Per arm, (stamp, joints) of the last measurement the rules accept (this test's own copy)."""
        self.gate_meas: dict = {}
        """Per arm, what the gate holds as measured (the last measurement it accepted): (joints, gripper)."""
        self.hold_expected: dict | None = None
        """While latched: per arm, what HOLD/ESTOP must send."""
        self.last_forwarded: dict = {}
        self.last_forwarded_stamp: float | None = None
        self.forwarded = 0
        self.counters_before = self._counters(self.gate)
        self.reached: set = set()
        self._measure()
        self._camera("ok")
        self._operator("arm")

    # -- the policy ---------------------------------------------------------------------------
    @rule(commands=well_formed("move"))
    def policy_moves_the_hands(self, commands: list[WellFormed]) -> None:
        self._stream(commands)

    @rule(commands=well_formed("turn"))
    def policy_turns_the_hands(self, commands: list[WellFormed]) -> None:
        self._stream(commands)

    @rule(commands=well_formed("joint"))
    def policy_moves_single_joints(self, commands: list[WellFormed]) -> None:
        self._stream(commands)

    @rule(
        lapse=lapse,
        defective=defective_command(),
        other=arm_command("move"),
        left_defective=st.booleans(),
        reset_first=st.booleans(),
    )
    def policy_proposes_a_defective_command(
        self, lapse: Lapse, defective: dict, other: dict, left_defective: bool, reset_first: bool
    ) -> None:
        """One arm's part has one defect (DEFECTS), stamped now, and the operator keeps trying as
        for well-formed commands: each check that reads the content gets its turn."""
        self._elapse(lapse)
        self._operator_keeps_trying(reset_first)
        left, right = (defective, other) if left_defective else (other, defective)
        self._propose(left, right, 0.0, defective.get("observation_offset_s", 0.0))

    @rule(
        lapse=lapse,
        left=arm_command(),
        right=arm_command(),
        stamp_jump_s=st.sampled_from([0.0] * 5 + [-0.2, 0.08, 5.0, -5.0, float("nan")]),
        obs_offset_s=st.sampled_from([0.0, -0.05, -3.0]),
    )
    def policy_proposes_garbage(
        self, lapse: Lapse, left: dict, right: dict, stamp_jump_s: float, obs_offset_s: float
    ) -> None:
        """Anything, stamped now, late, ahead or NaN, maybe answering a 3 s old observation: a late
        stamp never hides bad content. A DISARMED gate is re-armed for one that looks right at a
        glance (stamped now, hardware frame)."""
        self._elapse(lapse)
        if stamp_jump_s == 0.0 and left["frame"] == "hw":
            self._rearm_if_disarmed()
        self._propose(left, right, stamp_jump_s, obs_offset_s)

    @rule(lapse=lapse, commands=st.integers(5, 12), spacing_s=st.floats(0.001, 0.013))
    def policy_floods(self, lapse: Lapse, commands: int, spacing_s: float) -> None:
        """The current pose again and again, 1 to 13 ms apart (COMMAND_RATE beyond max_command_rate_hz)."""
        self._elapse(lapse)
        pose = {arm: KIN.forward(self.q_arm[arm]) for arm in ARMS}
        for _ in range(commands):
            arms = {arm: ArmCommand(arm.hw_frame, pose[arm].copy(), 0.5) for arm in ARMS}
            t = self.t
            self._decide("propose", lambda gate: gate.propose(Proposal(t, arms), t, t), stamp_s=t)
            self.t += spacing_s

    # -- the arms and the camera --------------------------------------------------------------
    @rule(
        lapse=lapse,
        how=st.sampled_from(["jitter", "far", "gripper", "nonfinite", "future"]),
        amount=st.floats(-0.05, 0.05),
    )
    def arms_are_disturbed(self, lapse: Lapse, how: str, amount: float) -> None:
        """Both arms are pushed a little (every joint by up to 5 mrad) or far (anywhere within 0.5
        rad of the work pose: an implausible jump), or the gripper reads anywhere in [-0.5, 1.5];
        they stay there until commanded again, and report. Or the driver reports one NaN joint
        (refused, the previous measurement kept), or a stamp 60 to 560 ms ahead."""
        self._elapse(lapse)
        if how == "nonfinite":
            self._measure(joints=np.where(np.arange(6) == int(abs(amount) * 100) % 6, np.nan, self.q_arm[ARMS[0]]))
            return
        if how == "future":
            self._measure(stamp_offset_s=0.06 + abs(amount) * 10)
            return
        for arm in ARMS:
            if how == "jitter":
                self.q_arm[arm] = self.q_arm[arm] + amount * 0.1
            elif how == "far":
                self.q_arm[arm] = np.clip(Q + amount * 10, -1.5, 1.5)
        if how == "gripper":
            self.gripper_norm = 0.5 + amount * 20
        self.driver_target.clear()
        self._measure()

    @rule(lapse=lapse, health=st.sampled_from(list(CAMERA_HEALTH)))
    def camera_reports(self, lapse: Lapse, health: str) -> None:
        self._elapse(lapse)
        self._camera(health)

    # -- time ---------------------------------------------------------------------------------
    @rule(lapse=lapse)
    def watchdog_ticks(self, lapse: Lapse) -> None:
        self._elapse(lapse)
        self._tick()

    @rule(
        lapse=lapse,
        duration_s=st.floats(0.03, 0.5),
        state_flows=st.booleans(),
        cameras_flow=st.booleans(),
        commands_flow=st.booleans(),
    )
    def time_passes(
        self, lapse: Lapse, duration_s: float, state_flows: bool, cameras_flow: bool, commands_flow: bool
    ) -> None:
        """Up to half a second with the watchdog ticking every 10 ms, while the arms' state, the
        camera reports and the policy's commands (holding still at ~33 Hz) each flow or stop."""
        self._elapse(lapse)
        end, k = self.t + duration_s, 0
        while self.t < end:
            self.t += 0.01
            k += 1
            if state_flows:
                self._measure()
            if cameras_flow:
                self._camera("ok")
            if commands_flow and k % 3 == 0:
                still = {"dxyz": [0.0, 0.0, 0.0], "quat": "same", "frame": "hw", "gripper": 0.5}
                self._propose(still, still, 0.0, 0.0)
            self._tick()

    # -- the operator -------------------------------------------------------------------------
    @precondition(lambda self: self.gate.state == GateState.DISARMED)
    @rule(lapse=lapse)
    def operator_arms(self, lapse: Lapse) -> None:
        """Refused without fresh plausible state and healthy cameras; else ARMING validates the
        shadow commands. (While ARMING or ARMED arming changes nothing.)"""
        self._elapse(lapse)
        self._operator("arm")

    @precondition(lambda self: self.gate.state in LATCHED)
    @rule(lapse=lapse)
    def operator_arms_while_latched(self, lapse: Lapse) -> None:
        """Must be refused: only reset() leaves HOLD/ESTOP."""
        self._elapse(lapse)
        self._operator("arm")

    @precondition(lambda self: self.gate.state != GateState.DISARMED)
    @rule(lapse=lapse)
    def operator_disarms(self, lapse: Lapse) -> None:
        """Must be refused while latched."""
        self._elapse(lapse)
        self._operator("disarm")

    @precondition(lambda self: self.gate.state != GateState.ESTOP)
    @rule(lapse=lapse)
    def operator_estops(self, lapse: Lapse) -> None:
        self._elapse(lapse)
        self._operator("estop")

    @precondition(lambda self: self.gate.state in LATCHED)
    @rule(lapse=lapse)
    def operator_resets(self, lapse: Lapse) -> None:
        """Elsewhere reset() refuses and changes nothing."""
        self._elapse(lapse)
        self._operator("reset")

    # -- invariants between events ------------------------------------------------------------
    @invariant()
    def no_exception_inside_the_gate(self) -> None:
        """INTERNAL_ERROR means the gate caught an exception of its own: no input may cause one."""
        assert self.gate.reason_counts[Reason.INTERNAL_ERROR.value] == 0, (
            f"exception inside the gate: {self.gate.detail}"
        )

    @invariant()
    def a_latched_gate_holds_the_last_accepted_joints(self) -> None:
        """HOLD/ESTOP hold the joints last accepted before the fault, clamped inside the joint
        bounds, gripper in [0, 1]: finite and within the limits. None only when the gate never
        accepted a measurement: there is nothing to hold (the drivers' watchdogs hold)."""
        if self.gate.state not in LATCHED:
            return
        hold = self.gate.hold_target
        if not self.hold_expected:
            assert hold is None, "a hold target without a measurement to hold"
            return
        assert hold is not None and set(hold) == set(self.hold_expected), "latched without the hold target"
        for arm, values in hold.items():
            assert np.all(np.isfinite(values)) and np.all((values[:6] >= self.lo) & (values[:6] <= self.hi)), values
            assert np.array_equal(values, self.hold_expected[arm]), (
                f"{arm.value}: the hold target is not the measured joints"
            )

    @invariant()
    def forwarded_counts_the_commands_that_went_out(self) -> None:
        assert self.gate.forwarded == self.forwarded, (self.gate.forwarded, self.forwarded)

    @invariant()
    def counters_add_up_and_never_go_back(self) -> None:
        """Each rejection counts its reason and each clamped command at least one; deferrals are
        counted per reason; the node publishes all of them as totals, so none ever decreases."""
        gate = self.gate
        assert gate.rejected + gate.clamped <= sum(gate.reason_counts.values()), (
            gate.rejected,
            gate.clamped,
            gate.reason_counts,
        )
        assert gate.deferred == sum(gate.deferred_counts.values()), (gate.deferred, gate.deferred_counts)
        now = self._counters(gate)
        assert all(a >= b for a, b in zip(now[:-1], self.counters_before[:-1])), (self.counters_before, now)
        assert not self.counters_before[-1] - now[-1], (
            f"reason counts went back: {self.counters_before[-1]} -> {now[-1]}"
        )
        self.counters_before = now

    @invariant()
    def the_twin_has_the_same_counters(self) -> None:
        """Determinism; what the twin sends and its state are compared after every call."""
        assert self._counters(self.twin) == self._counters(self.gate)

    # -- the gate calls and what must hold after each -----------------------------------------
    def _decide(self, what: str, call, stamp_s: float | None = None) -> None:
        """Make one call, `call(gate)`, on the gate and on its twin; check what it sends and where
        it leaves the gate. `what`: "propose", "measure", "camera", "tick" or an operator
        service; `stamp_s`: a proposal's stamp."""
        gate = self.gate
        before, counts_before, clamped_before = gate.state, Counter(gate.reason_counts), gate.clamped
        measured = {arm: (joints.copy(), gripper) for arm, (joints, gripper) in self.gate_meas.items()}
        out = sent(call(gate))
        twin_out = sent(call(self.twin))
        after = gate.state
        self.reached.add(after)
        assert self.twin.state == after and self.twin.last_measurement_accepted == gate.last_measurement_accepted, (
            f"{what}: the twin is in {self.twin.state.name}, the gate in {after.name}"
        )
        assert (out is None) == (twin_out is None) and (
            out is None or (set(out) == set(twin_out) and all(np.array_equal(out[a], twin_out[a]) for a in out))
        ), f"{what}: the twin sent otherwise"
        if self.coverage is not None:
            added = Counter(gate.reason_counts)
            added.subtract(counts_before)
            bucket = self.coverage.clamped if gate.clamped > clamped_before else self.coverage.refused
            bucket.update({reason: n for reason, n in added.items() if n > 0})
        if before in LATCHED:
            assert after in LATCHED or (what == "reset" and after == GateState.DISARMED), (
                f"{what}: {before.name} -> {after.name}"
            )
        if after in LATCHED and self.hold_expected is None:
            self.hold_expected = {
                arm: np.append(np.clip(joints, self.lo, self.hi), np.clip(gripper, 0.0, 1.0))
                for arm, (joints, gripper) in measured.items()
            }
        if after not in LATCHED:
            self.hold_expected = None
        if out is not None:
            for arm, values in out.items():
                assert np.all(values[:6] >= self.lo) and np.all(values[:6] <= self.hi), (
                    f"{arm.value}: a joint target outside the limits"
                )
            if after in LATCHED:
                for arm in ARMS:
                    assert np.all(np.isfinite(out[arm])), "a non-finite hold"
                    assert np.array_equal(out[arm], self.hold_expected[arm]), (
                        "HOLD sent something other than the measured joints"
                    )
            else:
                assert what == "propose" and before == GateState.ARMED and after == GateState.ARMED, (
                    f"{what}: forwarded outside ARMED"
                )
                self._audit(out, measured, stamp_s)
        if after != GateState.ARMED:
            self.last_forwarded, self.last_forwarded_stamp = {}, None

    def _audit(self, out: dict, measured: dict, stamp_s: float) -> None:
        """A forwarded command: within every limit by the oracle, against the joints measured when
        it was decided and the previous command forwarded in this armed run."""
        for arm in ARMS:
            previous = self.last_forwarded.get(arm)
            elapsed_s = None if previous is None else stamp_s - self.last_forwarded_stamp
            bad = audit_command(arm, out[arm], measured[arm][0], self.config, KIN, previous, elapsed_s)
            assert not bad, bad
        self.last_forwarded = {arm: out[arm].copy() for arm in ARMS}
        self.last_forwarded_stamp = stamp_s
        self.driver_target = {arm: out[arm][:6].copy() for arm in ARMS}
        self.forwarded += 1

    def _elapse(self, lapse: Lapse) -> None:
        self.t += lapse.dt_s
        if lapse.reports:
            for arm, target in self.driver_target.items():
                self.q_arm[arm] = target.copy()
            self._measure()
            self._camera("ok")

    def _measure(self, stamp_offset_s: float = 0.0, joints: np.ndarray | None = None) -> None:
        """Both arms report (`joints` instead of where they are, if given); each measurement must
        be accepted exactly when the rules say."""
        t, stamp = self.t, self.t + stamp_offset_s
        for arm in ARMS:
            q = self.q_arm[arm] if joints is None else joints
            pose = KIN.forward(q) if np.all(np.isfinite(q)) else np.full(7, np.nan)
            meas = ArmMeasurement(q.copy(), self.gripper_norm, pose, stamp)
            expected = self._plausible(arm, q, stamp)
            self._decide("measure", lambda gate: gate.update_measurement(arm, meas, t))
            assert self.gate.last_measurement_accepted == expected, (
                f"measurement {q.tolist()} at {stamp}: accepted {self.gate.last_measurement_accepted}, the rules say {expected}"
            )
            if expected:
                self.accepted[arm] = (stamp, q.copy())
                self.gate_meas[arm] = (q.copy(), self.gripper_norm)

    def _plausible(self, arm, q: np.ndarray, stamp: float) -> bool:
        """The measured-state rules, restated independently of egomimic_safety.plausibility."""
        config = self.config
        if not np.all(np.isfinite(q)):
            return False
        margin = config.state_limit_margin_rad
        if np.any(q < X5_LIMITS.pos_min - margin) or np.any(q > X5_LIMITS.pos_max + margin):
            return False
        if arm not in self.accepted:
            return True
        dt = stamp - self.accepted[arm][0]
        step = np.abs(q - self.accepted[arm][1])
        if dt == 0:
            return bool(np.all(step <= config.state_noise_rad))
        return dt > 0 and bool(
            np.all(step <= X5_LIMITS.vel_max * config.state_speed_factor * dt + config.state_noise_rad)
        )

    def _camera(self, health: str) -> None:
        t = self.t
        report = CAMERA_HEALTH[health](t)
        self._decide("camera", lambda gate: gate.update_camera("front_1", report, t))

    def _propose(self, left: dict, right: dict, stamp_jump_s: float, obs_offset_s: float) -> None:
        arms = {}
        for arm, spec in zip(ARMS, (left, right)):
            frame = {"hw": arm.hw_frame, "dataset": arm.dataset_frame, "": ""}[spec["frame"]]
            arms[arm] = ArmCommand(frame, _target(spec, self.q_arm[arm]), spec["gripper"])
        t = self.t
        obs = 0.0 if obs_offset_s == 0.0 else t + obs_offset_s
        stamp = t + stamp_jump_s
        self._decide("propose", lambda gate: gate.propose(Proposal(stamp, arms, obs), t, t), stamp_s=stamp)

    def _stream(self, commands: list[WellFormed]) -> None:
        """One command after each lapse; the operator keeps trying (below)."""
        for command in commands:
            self._elapse(command.lapse)
            self._operator_keeps_trying(command.reset_first)
            self._propose(command.left, command.right, 0.0, command.obs_offset_s)

    def _tick(self) -> None:
        t = self.t
        self._decide("tick", lambda gate: gate.tick(t, t))

    def _operator(self, service: str) -> None:
        t = self.t

        def call(gate):
            OPERATOR[service](gate, t)
            return gate.tick(t, t)

        self._decide(service, call)

    def _operator_keeps_trying(self, reset_first: bool) -> None:
        """Before a command that should go through: reset a latched gate when `reset_first`, arm a
        DISARMED one, so that sequences spend their time ARMED and forwarding, not latched."""
        if reset_first and self.gate.state in LATCHED:
            self._operator("reset")
        self._rearm_if_disarmed()

    def _rearm_if_disarmed(self) -> None:
        if self.gate.state == GateState.DISARMED:
            self._operator("arm")

    @staticmethod
    def _counters(gate: SafetyGate) -> tuple:
        return gate.forwarded, gate.rejected, gate.clamped, gate.deferred, gate.transitions, Counter(gate.reason_counts)

    def teardown(self) -> None:
        """Count this sequence into the guard's coverage, unless hypothesis abandoned it midway
        (drawing past its buffer): it tears those down too, with its StopTest on the way up, and
        a cut sequence would skew the shares. What it raised and clamped was counted as it happened."""
        if self.coverage is not None and hasattr(self, "gate") and sys.exc_info()[0] is None:
            self.coverage.sequences += 1
            self.coverage.forwarding += self.gate.forwarded > 0
            self.coverage.holding += GateState.HOLD in self.reached
            self.coverage.states |= self.reached


def test_the_gate_keeps_its_contract_through_any_sequence_of_events():
    run_state_machine_as_test(GateMachine, settings=MACHINE_SETTINGS)


def check_invariants(machine: GateMachine) -> None:
    """Every @invariant, for a machine driven by hand (hypothesis checks them after each rule)."""
    for inv in machine.invariants:
        inv.function(machine)


@pytest.mark.parametrize("seed", range(3))
def test_properties_are_not_vacuous(seed):
    """Guard: a clean stream does reach ARMED and forward (else the properties prove nothing)."""
    rng = np.random.default_rng(seed)
    machine = GateMachine()
    machine.power_on(config_index=0, start=("work",))
    for _ in range(30):
        spec = {"dxyz": list(rng.uniform(-0.003, 0.003, 3)), "quat": "same", "frame": "hw", "gripper": 0.5}
        machine.policy_moves_the_hands([WellFormed(Lapse(0.033, True), spec, spec, 0.0, False)])
        check_invariants(machine)
    assert machine.gate.forwarded > 20


GUARD_EXAMPLES = 400
FORWARDING_SHARE = 0.25
"""At least this share of the guard's sequences must have forwarded commands. Measured
(2026-12-03, 400 sequences each): 0.36, 0.46, 0.49, 0.50 over four random seeds, 0.45 in the
guard's own sample (derandomized, drawn without the loaded modules' constants). Lower than the
event-list generator this machine replaced (0.57-0.65): hypothesis switches a random subset of
the rules off in each sequence (swarm testing), so some have no well-formed stream at all."""
HOLDING_SHARE = 0.3
"""Likewise for reaching HOLD (measured 0.44-0.58 random, 0.55 in the guard's sample)."""


def test_generators_reach_every_reason_and_every_clamp(monkeypatch):
    """Guard (derandomized, so it is the same set every run): over the generated sequences
    every reason code the gate can raise is raised, every clamp path is taken, every state is
    reached, and enough sequences forward commands and reach HOLD for the properties to mean
    something.

    Hypothesis also draws, now and then, literal constants found in the source of every local
    module loaded so far; which modules those are depends on the order the suite runs in, so the
    "same" derandomized set differed between runs (no JOINT_STEP clamp in one order, no
    STALE_STATE in another). The guard's sample is drawn without them. Its seed comes from the
    machine class's name only (a class made here has no source to hash): editing the rules'
    text does not reshuffle it, changing what they draw does."""
    from hypothesis.internal.conjecture import providers
    from hypothesis.internal.constants_ast import Constants

    assert hasattr(providers, "_get_local_constants"), (
        "hypothesis changed: make the guard's sample order-independent again"
    )
    monkeypatch.setattr(providers, "_get_local_constants", Constants)
    providers.CONSTANTS_CACHE.cache.clear()
    coverage = Coverage()
    sampled = type("SampledGateMachine", (GateMachine,), {"coverage": coverage})
    try:
        run_state_machine_as_test(
            sampled,
            settings=settings(
                max_examples=GUARD_EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        providers.CONSTANTS_CACHE.cache.clear()  # later tests draw with the local constants again
    refused = {Reason(r) for r in coverage.refused}
    clamped = {Reason(r) for r in coverage.clamped}
    missing = set(Reason) - NEVER_EXPECTED - refused
    assert not missing, f"never refused for: {sorted(r.value for r in missing)}; counts {dict(coverage.refused)}"
    assert clamped == CLAMPABLE, f"clamp paths never taken: {sorted(r.value for r in CLAMPABLE - clamped)}"
    assert coverage.states == set(GateState), (
        f"states never reached: {sorted(s.name for s in set(GateState) - coverage.states)}"
    )
    n = coverage.sequences
    assert coverage.forwarding >= FORWARDING_SHARE * n and coverage.holding >= HOLDING_SHARE * n, coverage


def _wxyz(r: Rotation) -> np.ndarray:
    return np.roll(r.as_quat(), 1)


unit_vectors = (
    st.lists(st.floats(-1.0, 1.0), min_size=3, max_size=3)
    .filter(lambda v: np.linalg.norm(v) > 1e-3)
    .map(lambda v: np.asarray(v) / np.linalg.norm(v))
)


@SETTINGS
@given(
    age_s=st.floats(0.0, 0.3),
    step=st.floats(0.0, 3.0),
    turn=st.floats(0.0, np.pi),
    direction=unit_vectors,
    axis=unit_vectors,
    moved=st.floats(0.0, 1.0),
    moved_direction=unit_vectors,
    turned_axis=unit_vectors,
)
def test_a_jump_judged_on_late_state_is_a_jump_from_everywhere_the_arm_could_be(
    age_s, step, turn, direction, axis, moved, moved_direction, turned_axis
):
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
    seen_age_s = 10.0 - meas.stamp_s  # the age the check computes: age_s, rounded (a bound 1 ulp off fails)
    slack_m, slack_rad = cfg.max_ee_speed_m_s * seen_age_s, cfg.max_ee_angular_speed_rad_s * seen_age_s
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
