"""The policy stage of the replay regression: each recorded chunk recomputed from the observation
it answered, and each recorded action recomputed by the chunk executor from those chunks.

Why separate from replay.py: the gate's replay needs only messages; this stage needs the policy
and its executor as the node ran them (its parameters, beside the bag in replay.yaml), and it
applies only where the policy's inputs are in the bag.

What it does, for a bag whose policy is `scripted` (its inputs are the arm state only; a model's
are the camera images, which the fixtures do not hold, 27 MB/s):
  policy/chunk   each chunk's observation is rebuilt from the recorded `<arm>/ee_pose_dataset`
                 and `<arm>/joint_states` samples of its observation stamp (the synchronizer chose
                 samples of that stamp: the driver stamps a pose and a joint state alike), the
                 policy answers it, and the rows must equal the recording's (1e-9);
  policy/action  the node's ChunkScheduler runs on the bag's clock: each chunk (the replayed one)
                 accepted at its recorded arrival, a tick at each recorded action's stamp; each
                 target must equal the recorded action (pose and gripper within 1e-9, the same
                 chunk id and row).
Not replayed: when the worker queried (the recorded chunks are the queries that happened) and
ticks that published nothing (a chunk merges at the first tick after it arrived, which
published an action in every case seen here).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from rclpy.serialization import deserialize_message

from egomimic_hw.description import ARMS, JOINTS_PER_ARM, Arm
from egomimic_hw.sync import ObservationSynchronizer
from egomimic_msgs.msg import ActionChunk, BimanualCommand
from egomimic_nodes import topics
from egomimic_nodes.msg_convert import pose_to_array, stamp_to_ns
from egomimic_nodes.policy_node import SYNC_HISTORY, joint_stream, pose_stream
from egomimic_policy.interface import Chunk, Observation
from egomimic_policy.rollout import ExecutorConfig, RolloutConfig
from egomimic_policy.rollout.scheduler import ChunkScheduler
from egomimic_policy.scripted import ScriptedChunkConfig, ScriptedChunkPolicy, ScriptedMotionConfig

TOLERANCE = 1e-9
"""Chunk rows' and actions' poses against the recording: the same arithmetic on the same doubles."""
GRIPPER_TOLERANCE = 1e-7
"""Grippers travel as float32 (BimanualCommand): half a float32 step at 1.0 is 6e-8."""
REPLAYED_POLICIES = ("scripted",)
POSE_KEYS = frozenset(arm.value for arm in ARMS)
"""Keys of the compared rows that hold poses (the others hold grippers)."""


@dataclass
class PolicyOutcome:
    skipped: str = ""
    """Why the policy stage did not run ("" when it did)."""
    chunks: int = 0
    actions: int = 0
    differences: list[tuple[float, str]] | None = None


def config_from_params(cls, params: dict, prefix: str = "", **fixed):
    """`cls` from the node's parameters `<prefix><field>` (lists as tuples, ints for floats)."""
    kwargs = dict(fixed)
    for f in fields(cls):
        if f.name in fixed or prefix + f.name not in params:
            continue
        value = params[prefix + f.name]
        if isinstance(value, list):
            value = tuple(value)
        elif isinstance(f.default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def _rows(msg: ActionChunk) -> dict[str, np.ndarray]:
    return {
        "left": np.array([pose_to_array(r.left.pose) for r in msg.rows]),
        "right": np.array([pose_to_array(r.right.pose) for r in msg.rows]),
        "left_gripper": np.array([r.left_gripper for r in msg.rows]),
        "right_gripper": np.array([r.right_gripper for r in msg.rows]),
    }


def _chunk_rows(chunk: Chunk) -> dict[str, np.ndarray]:
    return {
        "left": np.asarray(chunk.left_pose),
        "right": np.asarray(chunk.right_pose),
        "left_gripper": np.asarray(chunk.left_gripper),
        "right_gripper": np.asarray(chunk.right_gripper),
    }


def _worst(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> tuple[float, float]:
    """Largest difference of the poses (q and -q are one rotation) and of the grippers."""
    pose, gripper = 0.0, 0.0
    for key in a:
        x, y = np.asarray(a[key], float), np.asarray(b[key], float)
        if x.shape != y.shape:
            return float("inf"), float("inf")
        d = np.abs(x - y)
        if key in POSE_KEYS:
            d[..., 3:] = np.minimum(d[..., 3:], np.abs(x[..., 3:] + y[..., 3:]))
            pose = max(pose, float(np.max(d)) if d.size else 0.0)
        else:
            gripper = max(gripper, float(np.max(d)) if d.size else 0.0)
    return pose, gripper


def _differs(worst: tuple[float, float]) -> str:
    """'' within tolerance, else what differs."""
    pose, gripper = worst
    if pose <= TOLERANCE and gripper <= GRIPPER_TOLERANCE:
        return ""
    return f"poses by {pose:.3g} (tolerance {TOLERANCE:g}), grippers by {gripper:.3g} (tolerance {GRIPPER_TOLERANCE:g})"


def replay_policy(messages, ns: str, params: dict, start_ns: int) -> PolicyOutcome:
    """`messages`: the bag's (at_ns, topic, raw) in reception order; `params`: the policy node's."""
    name = str(params.get("policy", RolloutConfig.policy)).strip()
    if name not in REPLAYED_POLICIES:
        return PolicyOutcome(skipped=f"policy {name!r} is not replayed (its inputs, camera images, are not in the bag)")
    rollout = config_from_params(RolloutConfig, params)
    policy = ScriptedChunkPolicy(
        config_from_params(ScriptedMotionConfig, params, "scripted."),
        chunk_length=config_from_params(ScriptedChunkConfig, params, "scripted.").chunk_length,
        rate_hz=rollout.rate_hz,
    )
    executor = config_from_params(ExecutorConfig, params, "executor.", rate_hz=rollout.rate_hz)
    pose_topics = {topics.EE_POSE_DATASET.resolve(ns, arm=a): a for a in ARMS}
    joint_topics = {topics.JOINT_STATES.resolve(ns, arm=a): a for a in ARMS}
    chunk_topic, action_topic = topics.POLICY_CHUNK.resolve(ns), topics.POLICY_ACTION.resolve(ns)
    samples: list[tuple[int, str, np.ndarray]] = []  # (stamp, the node's stream name, value)
    chunks: list[tuple[float, ActionChunk]] = []
    actions: list[tuple[float, BimanualCommand]] = []
    for at_ns, topic, raw in messages:
        at_s = (at_ns - start_ns) * 1e-9
        if topic in pose_topics:
            msg = deserialize_message(raw, topics.EE_POSE_DATASET.type)
            samples.append((stamp_to_ns(msg.header.stamp), pose_stream(pose_topics[topic]), pose_to_array(msg.pose)))
        elif topic in joint_topics:
            msg = deserialize_message(raw, topics.JOINT_STATES.type)
            value = np.array(msg.position[: JOINTS_PER_ARM + 1], float)
            samples.append((stamp_to_ns(msg.header.stamp), joint_stream(joint_topics[topic]), value))
        elif topic == chunk_topic:
            chunks.append((at_s, deserialize_message(raw, ActionChunk)))
        elif topic == action_topic:
            actions.append((at_s, deserialize_message(raw, BimanualCommand)))
    if not chunks:
        return PolicyOutcome(skipped="no policy/chunk in the bag")
    chunks.sort(key=lambda c: c[1].chunk_id)
    ids = [c.chunk_id for _, c in chunks]
    if ids != list(range(1, len(ids) + 1)):
        return PolicyOutcome(
            skipped=f"chunk ids {ids[:5]}... are not 1, 2, 3, ...: the policy was reset or started before the bag"
        )
    out = PolicyOutcome(differences=[])
    replayed: list[tuple[int, Chunk]] = []
    samples.sort(key=lambda x: x[0])
    stamps = np.array([x[0] for x in samples], dtype=np.int64)
    for at_s, msg in chunks:
        stamp = stamp_to_ns(msg.observation_stamp)
        observation = _observation(samples, stamps, stamp, rollout)
        if observation is None:
            out.differences.append(
                (at_s, f"policy: chunk {msg.chunk_id}: no arm state in the bag builds an observation of its stamp")
            )
            return out
        chunk = policy.infer(observation)
        differs = _differs(_worst(_chunk_rows(chunk), _rows(msg)))
        if differs:
            out.differences.append((at_s, f"policy: chunk {msg.chunk_id} differs from the recording: {differs}"))
        replayed.append((stamp_to_ns(msg.header.stamp), chunk))
        out.chunks += 1
    out.actions, more = _replay_executor(executor, replayed, actions, start_ns)
    out.differences += more
    return out


def _observation(samples, stamps: np.ndarray, stamp_ns: int, rollout: RolloutConfig) -> Observation | None:
    """The observation the node built with stamp `stamp_ns`: its own synchronizer fed the arm
    state known by a cut-off, the first cut-off (in stamp order, around the stamp) whose build
    has that stamp. Why a search: the stamp is the newest of the chosen samples, the two arms'
    drivers tick out of phase, and which samples the node had at its query is not recorded."""
    window = int(rollout.sync_tolerance_s * 1e9) + int(rollout.max_input_age_s * 1e9)
    lo = int(np.searchsorted(stamps, stamp_ns - window))
    hi = int(np.searchsorted(stamps, stamp_ns + int(rollout.sync_tolerance_s * 1e9), side="right"))
    ages = {name: rollout.max_input_age_s for arm in ARMS for name in (pose_stream(arm), joint_stream(arm))}
    for cut in range(max(lo, 1), hi + 1):
        now_ns = int(stamps[cut - 1])
        if now_ns < stamp_ns:
            continue
        sync = ObservationSynchronizer(ages, rollout.sync_tolerance_s, history_depth=SYNC_HISTORY)
        for sample_stamp, stream, value in samples[lo:cut]:
            sync.update(stream, sample_stamp, value)
        result = sync.build(now_ns)
        if result.ok and result.stamp_ns == stamp_ns:
            v = result.values
            return Observation(
                stamp_ns=stamp_ns,
                images={},
                left_pose=v[pose_stream(Arm.LEFT)],
                right_pose=v[pose_stream(Arm.RIGHT)],
                left_gripper=float(v[joint_stream(Arm.LEFT)][JOINTS_PER_ARM]),
                right_gripper=float(v[joint_stream(Arm.RIGHT)][JOINTS_PER_ARM]),
                left_joints=v[joint_stream(Arm.LEFT)][:JOINTS_PER_ARM],
                right_joints=v[joint_stream(Arm.RIGHT)][:JOINTS_PER_ARM],
            )
    return None


def _replay_executor(config: ExecutorConfig, chunks: list[tuple[int, Chunk]], actions, start_ns: int):
    """The ChunkScheduler on the bag's clock: chunks accepted at their arrival, ticks at the
    recorded actions' stamps; each target against its recorded action."""
    scheduler = ChunkScheduler(config)
    events = [(received, 0, chunk) for received, chunk in chunks]
    events += [(stamp_to_ns(a.header.stamp), 1, (at_s, a)) for at_s, a in actions]
    events.sort(key=lambda e: (e[0], e[1]))
    diffs: list[tuple[float, str]] = []
    compared = 0
    for t_ns, kind, item in events:
        if kind == 0:
            token = scheduler.query_started(t_ns)
            scheduler.accept(token, item, t_ns)
            continue
        at_s, recorded = item
        target = scheduler.tick(t_ns).target
        if target is None:
            diffs.append(
                (
                    at_s,
                    f"policy: the action of tick {(t_ns - start_ns) * 1e-9:.3f} s was published live, the replayed executor has none",
                )
            )
            break
        compared += 1
        mine = {
            "left": target.left_pose,
            "right": target.right_pose,
            "left_gripper": [target.left_gripper],
            "right_gripper": [target.right_gripper],
        }
        theirs = {
            "left": pose_to_array(recorded.left.pose),
            "right": pose_to_array(recorded.right.pose),
            "left_gripper": [recorded.left_gripper],
            "right_gripper": [recorded.right_gripper],
        }
        differs = _differs(_worst(mine, theirs))
        if differs or (target.chunk_id, target.row) != (recorded.chunk_id, recorded.row):
            diffs.append(
                (
                    at_s,
                    f"policy: action at {at_s:.3f} s differs from the recording: {differs or 'values equal'}; "
                    f"chunk {target.chunk_id} row {target.row}, recorded chunk {recorded.chunk_id} row {recorded.row}",
                )
            )
            break  # the executor's state differs from here on
    return compared, diffs
