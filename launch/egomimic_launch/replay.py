"""Replay regression: a recorded bag's inputs through the frames conversion and the safety gate,
compared with what the graph did when it was recorded.

Why: a change to the gate, its limits or the frame conversion must not change what the robot
would have done on a run we already have, unless that change is the point; and when it does, the
engineer needs the first decision that differs, not a failed test. The replay is deterministic:
the same bag and the same code give the same decisions, so it runs in `make test`.

What is fed, in the bag's reception order and on the bag's clock (its reception stamps are both
the gate's ROS clock and its monotonic clock):
  <arm>/joint_states       -> the gate's measurement (the gate node's own reader,
                              gate_node.measurement_from_joint_state)
  cameras/<cam>/health     -> the gate's camera reports (gate_node.camera_report)
  <arm>/ee_pose            -> the frames conversion (frames_node.pose_ds_from_hw_msg), compared
                              with the recording's <arm>/ee_pose_dataset of the same stamp
  policy/action            -> the frames conversion (frames_node.command_hw_from_ds), and what it
                              makes is proposed to the gate when the recording's command/proposed
                              of that stamp arrived (when the live gate received it)
  safety/status            -> the operator's requests only: a recorded DISARMED -> ARMING is an arm
                              request, an ESTOP for reason ESTOP an e-stop, a DISARMED without a
                              reason a disarm (from ARMED/ARMING) or a reset (from HOLD/ESTOP);
                              everything else the gate must decide by itself
and the watchdog ticks at the gate's rate between messages. What is compared:
  - each command/proposed: the frames output against the recording (pose tolerance
    POSE_TOLERANCE), and the gate's decision: forwarded to both arms or not;
  - the gate's transitions (state, reason) in order;
  - the joints each forwarded command carried (JOINT_TOLERANCE_RAD: IK is seeded with the newest
    measured joints, and which sample was newest can differ by one between the live gate and the
    bag's reader).
The policy stage (replay_policy.py) recomputes each recorded chunk from its observation and
each recorded action with the node's chunk executor, where the policy's inputs are in the bag
(the scripted policy: arm state only; a model checkpoint: also the camera frames around each
query); the gate is fed the recorded actions either way, so a
policy difference and a gate difference are told apart. Not replayed: the drivers, and the
gate's publisher checks (the bag has no publisher ids).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import yaml
from rclpy.serialization import deserialize_message

from egomimic_data.bags import BagError, open_reader
from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.errors import PoseError
from egomimic_hw.kinematics import ArmKinematics
from egomimic_launch.replay_policy import (
    PolicyOutcome,
    checkpoint_path,
    frame_windows,
    in_windows,
    replay_policy,
)
from egomimic_msgs.msg import GateStatus
from egomimic_nodes import topics
from egomimic_nodes.frames_node import command_hw_from_ds, pose_ds_from_hw_msg
from egomimic_nodes.gate_node import camera_report, measurement_from_joint_state, proposal_from_command
from egomimic_nodes.msg_convert import pose_to_array, stamp_to_ns
from egomimic_nodes.serialized import read_header
from egomimic_safety.config import GateConfig, GateNodeConfig
from egomimic_safety.gate import GateState, SafetyGate, Send

PARAMS_FILE = "replay.yaml"
"""Beside the bag's metadata.yaml: the gate's parameters during the recording (a ROS parameter
file: `<node>: ros__parameters:`), so that the replay judges with the limits the live gate had."""
POSE_TOLERANCE = 1e-9
"""Frames output against the recording, metres and quaternion components: the same arithmetic
on the same inputs (CDR keeps doubles exactly)."""
JOINT_TOLERANCE_RAD = 2e-3
"""Forwarded joint targets against the recording. IK starts from the newest measured joints,
and the newest sample the live gate had and the one before the bag's copy of the proposal can be
one 100 Hz sample apart; the arm moves < 2 mrad per sample at the scripted motion's speed and IK
converges to the same branch, so larger differences are a changed decision, not timing."""


@dataclass(frozen=True)
class Verdict:
    """The gate's answer to one command/proposed."""

    index: int
    stamp_ns: int
    at_s: float
    """Seconds into the bag (when the live gate received it)."""
    forwarded: bool
    targets: dict[str, tuple[float, ...]] | None = None
    state: str = ""
    """The gate's state and reason after deciding (replay only; the recording says it through safety/status)."""
    reason: str = ""
    detail: str = ""

    def describe(self) -> str:
        what = "FORWARDED" if self.forwarded else "not forwarded"
        after = f" -> {self.state}{' ' + self.reason if self.reason else ''}" if self.state else ""
        detail = f" ({self.detail})" if self.detail and not self.forwarded else ""
        return f"{what}{after}{detail}"


@dataclass(frozen=True)
class Transition:
    at_s: float
    state: str
    reason: str
    detail: str

    def describe(self) -> str:
        return f"{self.state}{' ' + self.reason if self.reason else ''} ({self.detail})"


@dataclass
class Outcome:
    """What the gate did, recorded or replayed."""

    verdicts: list[Verdict] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    poses_compared: int = 0
    """Replay only: ee_pose -> ee_pose_dataset conversions compared with the recording."""


@dataclass
class Difference:
    at_s: float
    text: str


@dataclass
class Report:
    bag: Path
    recorded: Outcome
    replayed: Outcome
    differences: list[Difference]
    policy: PolicyOutcome = field(default_factory=PolicyOutcome)

    @property
    def ok(self) -> bool:
        return not self.differences

    def text(self, limit: int = 10) -> str:
        rec = self.recorded
        forwarded = sum(v.forwarded for v in rec.verdicts)
        path = " -> ".join(t.state + (":" + t.reason if t.reason else "") for t in rec.transitions)
        head = (
            f"replay of {self.bag.name}: {len(rec.verdicts)} proposals ({forwarded} forwarded), "
            f"{len(rec.transitions)} gate transitions ({path})"
        )
        p = self.policy
        policy = (
            f"policy: not replayed: {p.skipped}"
            if p.skipped
            else f"policy: {p.chunks} chunks recomputed, {p.actions} actions re-executed"
        )
        if self.ok:
            return (
                f"{head}\n{policy}\nidentical: every gate decision and transition; frames (every command, "
                f"{self.replayed.poses_compared} poses), joint targets"
                + ("" if p.skipped else ", chunks and actions")
                + " within tolerance"
            )
        diffs = sorted(self.differences, key=lambda d: d.at_s)
        lines = [head, f"{len(diffs)} difference(s); first at {diffs[0].at_s:.3f} s into the bag:"]
        lines += [f"  {d.text}" for d in diffs[:limit]]
        if len(diffs) > limit:
            lines.append(f"  ... and {len(diffs) - limit} more")
        lines.append(policy)
        return "\n".join(lines)


# -- the bag --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Message:
    at_ns: int
    topic: str
    raw: bytes


class _Topics:
    """The resolved names of the streams the replay reads, in one namespace."""

    def __init__(self, namespace: str, cameras: Iterable[str]):
        ns = namespace
        self.joint_states = {topics.JOINT_STATES.resolve(ns, arm=a): a for a in ARMS}
        self.joint_command = {topics.JOINT_COMMAND.resolve(ns, arm=a): a for a in ARMS}
        self.ee_pose = {topics.EE_POSE.resolve(ns, arm=a): a for a in ARMS}
        self.ee_pose_dataset = {topics.EE_POSE_DATASET.resolve(ns, arm=a): a for a in ARMS}
        self.health = {topics.CAMERA_HEALTH.resolve(ns, cam=c): c for c in cameras}
        self.action = topics.POLICY_ACTION.resolve(ns)
        self.proposed = topics.COMMAND_PROPOSED.resolve(ns)
        self.status = topics.SAFETY_STATUS.resolve(ns)
        self.chunk = topics.POLICY_CHUNK.resolve(ns)
        self.images = {topics.IMAGE_RAW.resolve(ns, cam=c): c for c in CAMERAS}
        """Every camera's frames: a model reads those its spec names, whichever the gate requires."""

    def optional(self) -> set[str]:
        """Read when the bag has them: the policy stage (replay_policy.py). The camera frames are
        read only for a model, and only near its queries (_frames_near_queries)."""
        return {self.chunk}

    def needed(self) -> set[str]:
        return {
            *self.joint_states,
            *self.joint_command,
            *self.ee_pose,
            *self.ee_pose_dataset,
            *self.health,
            self.action,
            self.proposed,
            self.status,
        }


def _messages(bag: Path, wanted: set[str], keep=None) -> tuple[list[_Message], set[str]]:
    """The bag's messages of `wanted`, in reception order; `keep(topic, raw)`: False leaves one out
    (it never reaches memory: a bag with images holds 83 MB/s of them)."""
    reader = open_reader(bag)
    try:
        present = {c.topic for c in reader.connections}
        conns = [c for c in reader.connections if c.topic in wanted]
        out = [
            _Message(t, c.topic, bytes(raw))
            for c, t, raw in reader.messages(connections=conns)
            if keep is None or keep(c.topic, raw)
        ]
    finally:
        reader.close()
    out.sort(key=lambda m: m.at_ns)  # stable: the file's order among equal stamps
    return out, present


def node_params(path: Path, node: str) -> dict:
    """A node's parameters in a ROS parameter file: every section whose node name is `node`
    (`/**/safety_gate`, `/eva/safety_gate`, ...), merged in file order."""
    data = yaml.safe_load(path.read_text()) or {}
    params: dict = {}
    for key, section in data.items():
        if str(key).rstrip("/").split("/")[-1] == node and isinstance(section, dict):
            params.update(section.get("ros__parameters", {}) or {})
    return params


def gate_params(path: Path) -> dict:
    """The safety gate's parameters in a ROS parameter file (node_params)."""
    return node_params(path, "safety_gate")


def configs_from_params(params: dict) -> tuple[GateConfig, GateNodeConfig]:
    """GateConfig and GateNodeConfig as the gate node builds them from its parameters
    (egomimic_nodes.params.declare_config): lists become tuples, numbers for float fields floats,
    and each value inside its field's range unless unsafe_limits lifts the upper bounds."""
    ignored = {"use_sim_time", "start_type_description_service"}
    known = {f.name: (cls, f) for cls in (GateConfig, GateNodeConfig) for f in fields(cls)}
    unknown = sorted(set(params) - set(known) - ignored)
    if unknown:
        raise BagError(f"unknown safety gate parameter(s): {unknown}")
    lift = bool(params.get("unsafe_limits", False))
    kwargs: dict[type, dict] = {GateConfig: {}, GateNodeConfig: {}}
    for name, value in params.items():
        if name in ignored:
            continue
        cls, f = known[name]
        if isinstance(value, list):
            value = tuple(value)
        elif isinstance(f.default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        lo, hi = f.metadata.get("range", (None, None))
        if lo is not None and isinstance(value, (int, float)) and not lo <= value <= (float("inf") if lift else hi):
            raise BagError(f"safety gate parameter {name}: {value!r} is outside [{lo}, {hi}]")
        kwargs[cls][name] = value
    return GateConfig(**kwargs[GateConfig]), GateNodeConfig(**kwargs[GateNodeConfig])


# -- what the recording says ----------------------------------------------------------------------


def _state_name(state: int) -> str:
    return GateState(state).name


def _transitions(statuses: Iterable[tuple[float, GateStatus]]) -> list[Transition]:
    out: list[Transition] = []
    for at_s, msg in statuses:
        key = (_state_name(msg.state), msg.reason)
        if not out or (out[-1].state, out[-1].reason) != key:
            out.append(Transition(at_s, key[0], key[1], msg.detail))
    return out


def recorded_outcome(messages: list[_Message], names: _Topics, start_ns: int) -> Outcome:
    sent: dict[int, dict[str, tuple[float, ...]]] = {}  # joint_command stamp -> arm -> joints
    statuses = []
    proposals = []
    for m in messages:
        if m.topic in names.joint_command:
            msg = deserialize_message(m.raw, topics.JOINT_COMMAND.type)
            sent.setdefault(stamp_to_ns(msg.header.stamp), {})[names.joint_command[m.topic].value] = tuple(msg.position)
        elif m.topic == names.status:
            statuses.append(((m.at_ns - start_ns) * 1e-9, deserialize_message(m.raw, GateStatus)))
        elif m.topic == names.proposed:
            msg = deserialize_message(m.raw, topics.COMMAND_PROPOSED.type)
            proposals.append((m.at_ns, stamp_to_ns(msg.header.stamp)))
    outcome = Outcome(transitions=_transitions(statuses))
    for i, (at_ns, stamp_ns) in enumerate(proposals):
        targets = sent.get(stamp_ns)
        forwarded = targets is not None and set(targets) == {a.value for a in ARMS}
        outcome.verdicts.append(
            Verdict(i, stamp_ns, (at_ns - start_ns) * 1e-9, forwarded, targets if forwarded else None)
        )
    return outcome


# -- the replay -----------------------------------------------------------------------------------


class _GateReplay:
    """The gate node's orchestration on the bag's clock: inputs taken before each decision (they
    are, in bag order), the watchdog at its period between messages, operator requests from the
    recorded status."""

    def __init__(self, config: GateConfig, node_config: GateNodeConfig, start_ns: int):
        kin = {arm: ArmKinematics(backend=node_config.kinematics) for arm in ARMS}
        self.gate = SafetyGate(config, kin)
        self.period_ns = round(node_config.watchdog_period_s * 1e9)
        self.start_ns = start_ns
        self.next_tick_ns = start_ns
        self.outcome = Outcome()
        self.refusals: list[Difference] = []
        """Operator requests the live gate accepted and this one refused, with its reason."""
        self._note(start_ns)

    def _at(self, ns: int) -> float:
        return (ns - self.start_ns) * 1e-9

    def _note(self, ns: int) -> None:
        g = self.gate
        key = (g.state.name, g.reason.value if g.reason else "")
        last = self.outcome.transitions[-1] if self.outcome.transitions else None
        if last is None or (last.state, last.reason) != key:
            self.outcome.transitions.append(Transition(self._at(ns), key[0], key[1], g.detail))

    def until(self, ns: int) -> None:
        """Watchdog ticks due before `ns`."""
        while self.next_tick_ns < ns:
            t = self.next_tick_ns
            self.gate.tick(t * 1e-9, t * 1e-9)
            self._note(t)
            self.next_tick_ns += self.period_ns

    def measurement(self, arm: Arm, raw: bytes, ns: int) -> None:
        try:
            meas = measurement_from_joint_state(arm, raw)
        except ValueError:
            return  # the node ignores it too (logged there)
        self.gate.update_measurement(arm, meas, ns * 1e-9)
        self._note(ns)

    def camera(self, cam: str, raw: bytes, ns: int) -> None:
        msg = deserialize_message(raw, topics.CAMERA_HEALTH.type)
        self.gate.update_camera(cam, camera_report(msg), ns * 1e-9)
        self._note(ns)

    def propose(self, index: int, command, ns: int) -> None:
        deferred_before = self.gate.deferred
        decision = self.gate.propose(proposal_from_command(command), ns * 1e-9, ns * 1e-9)
        self._note(ns)
        forwarded = decision.send is Send.FORWARD
        targets = {a.value: tuple(float(v) for v in decision.targets[a]) for a in ARMS} if forwarded else None
        g = self.gate
        detail = ""
        if not forwarded:  # a deferral (not validated now, no fault) says why; a fault's is the state's
            deferred = decision.send is Send.NOTHING and g.deferred > deferred_before
            detail = f"deferred: {g.last_deferral}; {g.detail}" if deferred else g.detail
        self.outcome.verdicts.append(
            Verdict(
                index,
                stamp_to_ns(command.header.stamp),
                self._at(ns),
                forwarded,
                targets,
                g.state.name,
                g.reason.value if g.reason else "",
                detail,
            )
        )

    def operator(self, previous: str | None, status: GateStatus, ns: int) -> None:
        state, reason = _state_name(status.state), status.reason
        now = ns * 1e-9
        if state == "ARMING" and previous == "DISARMED":
            ok, why = self.gate.request_arm(now, now)
            if not ok:  # the transitions differ from here; this says why
                self.refusals.append(Difference(self._at(ns), f"gate: the recorded arm request was refused: {why}"))
        elif state == "ESTOP" and reason == "ESTOP" and self.gate.state != GateState.ESTOP:
            self.gate.estop()
        elif state == "DISARMED" and not reason and previous in ("ARMED", "ARMING"):
            self.gate.disarm()
        elif state == "DISARMED" and not reason and previous in ("HOLD", "ESTOP"):
            self.gate.reset()
        self._note(ns)


def _pose_difference(a, b) -> float:
    pa, pb = pose_to_array(a), pose_to_array(b)
    dq = min(np.max(np.abs(pa[3:] - pb[3:])), np.max(np.abs(pa[3:] + pb[3:])))
    return float(max(np.max(np.abs(pa[:3] - pb[:3])), dq))


def replay(
    bag: Path | str, params: Path | str | None = None, namespace: str = "eva", overrides: dict | None = None
) -> Report:
    """Replay `bag` (module docstring) with the gate parameters of `params` (default: the bag's
    replay.yaml) and `overrides` on top; compare with the recording."""
    bag = Path(bag)
    params = Path(params) if params is not None else bag / PARAMS_FILE
    if not params.is_file():
        raise BagError(f"{params}: no gate parameters for the replay (pass --params FILE: the gate's parameter file)")
    merged = {**gate_params(params), **(overrides or {})}
    config, node_config = configs_from_params(merged)
    names = _Topics(namespace, config.required_cameras)
    policy_params = node_params(params, "policy")
    wanted, keep = names.needed() | names.optional(), None
    if checkpoint_path(str(policy_params.get("policy", "")), bag) is not None:
        wanted |= set(names.images)
        keep = _frames_near_queries(bag, names, policy_params)
    messages, present = _messages(bag, wanted, keep)
    missing = sorted(t for t in names.needed() if t not in present)
    if missing:
        raise BagError(f"{bag}: the replay needs these topics, which the bag lacks: {missing}")
    if not messages:
        raise BagError(f"{bag}: no messages on the replayed topics")
    start_ns = messages[0].at_ns
    recorded = recorded_outcome(messages, names, start_ns)
    replayed, frames_diffs = _replay(messages, names, config, node_config, start_ns)
    policy = replay_policy([(m.at_ns, m.topic, m.raw) for m in messages], namespace, policy_params, start_ns, bag)
    policy_diffs = [Difference(at_s, text) for at_s, text in policy.differences or ()]
    return Report(bag, recorded, replayed, frames_diffs + compare(recorded, replayed) + policy_diffs, policy)


def _frames_near_queries(bag: Path, names: _Topics, policy_params: dict):
    """keep() for _messages: every message but the camera frames outside the windows in which a
    recorded chunk's observation could hold them (replay_policy.frame_windows)."""
    chunks, _ = _messages(bag, {names.chunk})
    windows = frame_windows([m.raw for m in chunks], policy_params)

    def keep(topic: str, raw) -> bool:
        if topic not in names.images:
            return True
        try:
            return in_windows(read_header(raw)[0], windows)
        except ValueError as exc:  # a damaged frame: said as the bag's fault, not a traceback
            raise BagError(f"{bag}: a message on {topic} is not a readable Image: {exc}") from exc

    return keep


def _replay(messages, names: _Topics, config, node_config, start_ns) -> tuple[Outcome, list[Difference]]:
    gate = _GateReplay(config, node_config, start_ns)
    # stamp -> (at_ns, policy/action), all of them first: the frames node received an action before
    # it published the command/proposed of its stamp, but the bag's own reception of the two can
    # come in either order (two ports, two listener threads: seen under load, 8 of 126 in one bag)
    actions: dict[int, tuple[int, object]] = {}
    for m in messages:
        if m.topic == names.action:
            msg = deserialize_message(m.raw, topics.POLICY_ACTION.type)
            actions[stamp_to_ns(msg.header.stamp)] = (m.at_ns, msg)
    proposed_stamps: set[int] = set()
    poses_ds: dict[tuple[Arm, int], object] = {}  # (arm, stamp) -> the recording's ee_pose_dataset
    poses_hw: list[tuple[int, Arm, object]] = []
    diffs: list[Difference] = []
    previous_state: str | None = None
    index = 0
    for m in messages:
        gate.until(m.at_ns)
        at_s = (m.at_ns - start_ns) * 1e-9
        if m.topic in names.joint_states:
            gate.measurement(names.joint_states[m.topic], m.raw, m.at_ns)
        elif m.topic in names.health:
            gate.camera(names.health[m.topic], m.raw, m.at_ns)
        elif m.topic == names.proposed:
            live = deserialize_message(m.raw, topics.COMMAND_PROPOSED.type)
            stamp = stamp_to_ns(live.header.stamp)
            proposed_stamps.add(stamp)
            source = actions.get(stamp)
            if source is None:
                diffs.append(Difference(at_s, f"command/proposed #{index}: no policy/action of its stamp in the bag"))
                index += 1
                continue
            try:
                command = command_hw_from_ds(source[1])
            except PoseError as exc:
                diffs.append(
                    Difference(
                        at_s, f"frames: command/proposed #{index} was converted live, the replay refuses it: {exc}"
                    )
                )
                index += 1
                continue
            worst = max(_pose_difference(getattr(command, a.value).pose, getattr(live, a.value).pose) for a in ARMS)
            if worst > POSE_TOLERANCE:
                diffs.append(
                    Difference(
                        at_s,
                        f"frames: command/proposed #{index} differs from the recording by {worst:.3g} (tolerance {POSE_TOLERANCE:g})",
                    )
                )
            gate.propose(index, command, m.at_ns)
            index += 1
        elif m.topic in names.ee_pose:
            poses_hw.append((m.at_ns, names.ee_pose[m.topic], deserialize_message(m.raw, topics.EE_POSE.type)))
        elif m.topic in names.ee_pose_dataset:
            msg = deserialize_message(m.raw, topics.EE_POSE_DATASET.type)
            poses_ds[(names.ee_pose_dataset[m.topic], stamp_to_ns(msg.header.stamp))] = msg
        elif m.topic == names.status:
            status = deserialize_message(m.raw, GateStatus)
            gate.operator(previous_state, status, m.at_ns)
            previous_state = _state_name(status.state)
    gate.until(messages[-1].at_ns + 1)
    pose_diffs, gate.outcome.poses_compared = _compare_poses(poses_hw, poses_ds, start_ns)
    diffs += pose_diffs
    for stamp, (at_ns, msg) in sorted(actions.items()):
        if stamp in proposed_stamps:
            continue
        try:
            command_hw_from_ds(msg)
        except PoseError:
            continue  # refused live too (nothing was proposed)
        at_s = (at_ns - start_ns) * 1e-9
        # the last actions of a run may not have reached the bag as proposals before it closed
        if at_ns < messages[-1].at_ns - 200_000_000:
            diffs.append(Difference(at_s, "frames: a policy/action that was refused live is converted by the replay"))
    return gate.outcome, gate.refusals + diffs


def _compare_poses(poses_hw, poses_ds, start_ns: int) -> tuple[list[Difference], int]:
    """The frames conversion of each recorded ee_pose against the recording's ee_pose_dataset of
    the same arm and stamp (one the bag's best-effort reader missed is not compared). Returns the
    differences and how many poses were compared."""
    diffs, compared = [], 0
    for at_ns, arm, msg in poses_hw:
        at_s = (at_ns - start_ns) * 1e-9
        live = poses_ds.get((arm, stamp_to_ns(msg.header.stamp)))
        try:
            out = pose_ds_from_hw_msg(arm, msg)
        except PoseError as exc:
            if live is not None:
                diffs.append(
                    Difference(at_s, f"frames: {arm.value} ee_pose converted live, refused by the replay: {exc}")
                )
            continue
        if live is None:
            continue
        compared += 1
        worst = _pose_difference(out.pose, live.pose)
        if worst > POSE_TOLERANCE or out.header.frame_id != live.header.frame_id:
            diffs.append(
                Difference(
                    at_s,
                    f"frames: {arm.value} ee_pose_dataset differs from the recording by {worst:.3g} "
                    f"(tolerance {POSE_TOLERANCE:g}; frame {out.header.frame_id} vs {live.header.frame_id})",
                )
            )
    return diffs, compared


def compare(recorded: Outcome, replayed: Outcome, joint_tolerance: float = JOINT_TOLERANCE_RAD) -> list[Difference]:
    diffs: list[Difference] = []
    by_stamp = {v.stamp_ns: v for v in replayed.verdicts}
    for rec in recorded.verdicts:
        rep = by_stamp.get(rec.stamp_ns)
        if rep is None:
            continue  # reported by the frames comparison
        if rec.forwarded != rep.forwarded:
            diffs.append(
                Difference(
                    rec.at_s,
                    f"gate decision #{rec.index} (command/proposed stamp {rec.stamp_ns * 1e-9:.6f}, {rec.at_s:.3f} s): "
                    f"recorded {rec.describe()}, replayed {rep.describe()}",
                )
            )
        elif rec.forwarded and rec.targets and rep.targets:
            worst = max(
                float(np.max(np.abs(np.subtract(rec.targets[a], rep.targets[a]))))
                for a in rec.targets
                if a in rep.targets
            )
            if worst > joint_tolerance:
                diffs.append(
                    Difference(
                        rec.at_s,
                        f"gate decision #{rec.index} ({rec.at_s:.3f} s): forwarded joints differ by {worst:.4f} rad "
                        f"(tolerance {joint_tolerance:g})",
                    )
                )
    n = max(len(recorded.transitions), len(replayed.transitions))
    for i in range(n):
        rec = recorded.transitions[i] if i < len(recorded.transitions) else None
        rep = replayed.transitions[i] if i < len(replayed.transitions) else None
        if rec is not None and rep is not None and (rec.state, rec.reason) == (rep.state, rep.reason):
            continue
        at_s = min(t.at_s for t in (rec, rep) if t is not None)
        diffs.append(
            Difference(
                at_s,
                f"gate transition #{i}: recorded {rec.describe() + f' at {rec.at_s:.3f} s' if rec else '(none)'}, "
                f"replayed {rep.describe() + f' at {rep.at_s:.3f} s' if rep else '(none)'}",
            )
        )
        break  # later transitions follow from this one
    return diffs


def iter_overrides(items: Iterator[str] | list[str]) -> dict:
    """`name=value` pairs (values read as YAML: numbers, booleans, lists) for --set."""
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise BagError(f"--set {item!r}: expected NAME=VALUE")
        out[name.strip()] = yaml.safe_load(text)
    return out
