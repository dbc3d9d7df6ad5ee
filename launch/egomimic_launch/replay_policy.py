"""The policy stage of the replay regression: each recorded chunk recomputed from the observation
it answered, and each recorded action recomputed by the chunk executor from those chunks.

Why separate from replay.py: the gate's replay needs only messages; this stage needs the policy
and its executor as the node ran them (its parameters, beside the bag in replay.yaml), and it
applies only where the policy's inputs are in the bag.

What it does, for a bag whose policy is `scripted` (its inputs are the arm state only) or a
model checkpoint (a file path: its inputs are also the camera images, so the bag must hold the
`cameras/<cam>/image_raw` frames around each query; `tools/record_replay_fixtures.py` keeps
those and drops the rest, which a 640x480 stream at 27 MB/s would not fit in the repository):
  policy/chunk   each chunk's observation is rebuilt from the recorded `<arm>/ee_pose_dataset`
                 and `<arm>/joint_states` samples (and, for a model, the camera frames) of its
                 observation stamp (the synchronizer chose samples of that stamp: the driver
                 stamps a pose and a joint state alike), the policy answers it, and the rows must
                 equal the recording's (1e-9 for the scripted policy; MODEL_TOLERANCE for a
                 model, loaded from its checkpoint with the recorded seed: its sampler's noise
                 sequence is replayed by answering the chunks in their order; the scripted
                 motion holds the measured pose until the node saw the gate ARMED, which the
                 bag does not tie to a query: both are tried, scripted.ClockDriven);
  policy/action  the node's ChunkScheduler runs on the bag's clock: each chunk (the replayed one)
                 accepted at its recorded arrival, a tick at each recorded action's stamp; each
                 target must equal the recorded action (pose and gripper within the chunks'
                 tolerance, the same chunk id and row).
Which samples the node held at a query is not recorded: each chunk is answered from the distinct
observations of its stamp that the recorded inputs build at their cut-offs in stamp order and in
the bag's arrival order (_observations), each with the policy's state before the query, and the
first that reproduces the recording counts; when none does, the closest one is reported.
Not replayed: when the worker queried (the recorded chunks are the queries that happened),
ticks that published nothing (a chunk merges at the first tick after it arrived, which
published an action in every case seen here), and, for a model, a query that drew noise without
publishing a chunk (after a policy/reset, a refused, failed or discarded answer: every later
chunk then differs) and models or executors whose inputs are not all in the bag (an observation
history, obs_steps > 1; blend `inpaint`'s committed prefix): those are skipped with the reason.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from rclpy.serialization import deserialize_message

from egomimic_hw.description import ARMS, JOINTS_PER_ARM, Arm
from egomimic_hw.sync import ObservationSynchronizer
from egomimic_msgs.msg import ActionChunk, BimanualCommand
from egomimic_nodes import topics
from egomimic_nodes.msg_convert import image_to_array, pose_to_array, stamp_to_ns
from egomimic_nodes.policy_node import SYNC_HISTORY, image_stream, joint_stream, pose_stream
from egomimic_policy.interface import Chunk, Observation
from egomimic_policy.rollout import ExecutorConfig, RolloutConfig
from egomimic_policy.rollout.scheduler import ChunkScheduler
from egomimic_policy.scripted import ClockDriven, ScriptedChunkConfig, ScriptedChunkPolicy, ScriptedMotionConfig

TOLERANCE = 1e-9
"""Chunk rows' and actions' poses against the recording: the same arithmetic on the same doubles."""
GRIPPER_TOLERANCE = 1e-7
"""Grippers travel as float32 (BimanualCommand): half a float32 step at 1.0 is 6e-8."""
MODEL_TOLERANCE = 1e-5
"""A model's chunk rows (m, quaternion components and gripper): its network computes in float32
on one torch thread, as the node did (families.rollout: num_threads 1); on the machine that
recorded it the replay is bit-identical (measured: 0 difference), and a CPU with other vector
kernels may round the float32 sums differently (1 float32 step is 6e-8 at 1.0), so the margin is
about 100 steps (not measured on another CPU: a sampler's steps can grow a rounding difference).
A changed model, input, seed or sampler moves rows by millimetres."""
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


def _differs(
    worst: tuple[float, float], tolerance: float = TOLERANCE, gripper_tolerance: float = GRIPPER_TOLERANCE
) -> str:
    """'' within tolerance, else what differs."""
    pose, gripper = worst
    if pose <= tolerance and gripper <= gripper_tolerance:
        return ""
    return f"poses by {pose:.3g} (tolerance {tolerance:g}), grippers by {gripper:.3g} (tolerance {gripper_tolerance:g})"


def frame_windows(chunk_raws, params: dict) -> list[tuple[int, int]]:
    """(from, to) stamp windows (ns) in which a camera frame could be in the observation of a
    recorded chunk (its raw ActionChunk bytes): max_image_age_s + sync_tolerance_s before its
    observation stamp to sync_tolerance_s after (the policy node's `params`)."""
    rollout = config_from_params(RolloutConfig, params)
    before = int((rollout.max_image_age_s + rollout.sync_tolerance_s) * 1e9)
    after = int(rollout.sync_tolerance_s * 1e9)
    stamps = [stamp_to_ns(deserialize_message(raw, ActionChunk).observation_stamp) for raw in chunk_raws]
    return [(s - before, s + after) for s in sorted(stamps)]


def in_windows(stamp_ns: int, windows: list[tuple[int, int]]) -> bool:
    return any(lo <= stamp_ns <= hi for lo, hi in windows)


def checkpoint_path(value: str, bag_dir: Path | None = None) -> Path | None:
    """The checkpoint file a `policy` parameter names, or None when it names none (scripted, a
    family, a server). A relative path is looked up from the current directory, then from the
    bag's directory upwards (a fixture names `policies/<name>.ckpt` of the repository it is in)."""
    value = value.strip()
    if not value or value in ("scripted", "expert", "none") or "://" in value:
        return None
    path = Path(value)
    if path.is_absolute():
        return path if path.is_file() else None
    candidates = [Path.cwd() / path]
    if bag_dir is not None:
        candidates += [parent / path for parent in Path(bag_dir).resolve().parents]
    return next((c for c in candidates if c.is_file()), None)


def _model_policy(path: Path, params: dict):
    """The model as the node loaded it (egomimic_policy.loading.load_policy): on the CPU, with the
    recorded seed and config pin."""
    from egomimic_policy.loading import load_policy

    return load_policy(
        str(path),
        cache_dir=str(params.get("cache_dir", "")) or None,
        seed=int(params.get("seed", 0)),
        device="cpu",
        pin_config_sha256=str(params.get("config_sha256", "")),
    )


def replay_policy(messages, ns: str, params: dict, start_ns: int, bag_dir: Path | None = None) -> PolicyOutcome:
    """`messages`: the bag's (at_ns, topic, raw) in reception order; `params`: the policy node's;
    `bag_dir`: where a relative checkpoint path is also looked up (checkpoint_path)."""
    name = str(params.get("policy", RolloutConfig.policy)).strip()
    rollout = config_from_params(RolloutConfig, params)
    tolerance, gripper_tolerance = TOLERANCE, GRIPPER_TOLERANCE
    if name == "scripted":
        policy = ScriptedChunkPolicy(
            config_from_params(ScriptedMotionConfig, params, "scripted."),
            chunk_length=config_from_params(ScriptedChunkConfig, params, "scripted.").chunk_length,
            rate_hz=rollout.rate_hz,
        )
    else:
        path = checkpoint_path(name, bag_dir)
        if path is None:
            return PolicyOutcome(
                skipped=f"policy {name!r} is not replayed (only the scripted policy and a checkpoint file are; "
                "a server's, the expert's privileged or a family's untrained model's inputs are not all in the bag)"
            )
        policy = _model_policy(path, params)
        tolerance = gripper_tolerance = MODEL_TOLERANCE
    executor = config_from_params(ExecutorConfig, params, "executor.", rate_hz=rollout.rate_hz)
    if policy.spec.obs_steps > 1 or executor.blend == "inpaint":
        return PolicyOutcome(
            skipped=f"policy {name!r}: its queries also held "
            + ("an observation history (obs_steps > 1)" if policy.spec.obs_steps > 1 else "blend inpaint's prefix")
            + ", which the replay does not rebuild"
        )
    cameras = tuple(policy.spec.cameras)
    image_topics = {topics.IMAGE_RAW.resolve(ns, cam=c): c for c in cameras}
    pose_topics = {topics.EE_POSE_DATASET.resolve(ns, arm=a): a for a in ARMS}
    joint_topics = {topics.JOINT_STATES.resolve(ns, arm=a): a for a in ARMS}
    chunk_topic, action_topic = topics.POLICY_CHUNK.resolve(ns), topics.POLICY_ACTION.resolve(ns)
    if cameras and not any(topic in image_topics for _, topic, _ in messages):
        return PolicyOutcome(
            skipped=f"policy {name!r} reads cameras {list(cameras)}: the bag holds none of their frames"
        )
    samples: list[tuple[int, str, np.ndarray]] = []  # (stamp, the node's stream name, value)
    chunks: list[tuple[float, ActionChunk]] = []
    actions: list[tuple[float, BimanualCommand]] = []
    for at_ns, topic, raw in messages:
        at_s = (at_ns - start_ns) * 1e-9
        if topic in pose_topics:
            msg = deserialize_message(raw, topics.EE_POSE_DATASET.type)
            samples.append(
                (stamp_to_ns(msg.header.stamp), pose_stream(pose_topics[topic]), pose_to_array(msg.pose), at_ns)
            )
        elif topic in joint_topics:
            msg = deserialize_message(raw, topics.JOINT_STATES.type)
            value = np.array(msg.position[: JOINTS_PER_ARM + 1], float)
            samples.append((stamp_to_ns(msg.header.stamp), joint_stream(joint_topics[topic]), value, at_ns))
        elif topic in image_topics:
            msg = deserialize_message(raw, topics.IMAGE_RAW.type)
            samples.append(
                (stamp_to_ns(msg.header.stamp), image_stream(image_topics[topic]), image_to_array(msg), at_ns)
            )
        elif topic == chunk_topic:
            chunks.append((at_s, deserialize_message(raw, ActionChunk)))
        elif topic == action_topic:
            actions.append((at_s, deserialize_message(raw, BimanualCommand)))
    if not chunks:
        return PolicyOutcome(skipped="no policy/chunk in the bag")
    chunks.sort(key=lambda c: c[1].chunk_id)
    ids = [c.chunk_id for _, c in chunks]
    if ids != list(range(1, len(ids) + 1)):
        return PolicyOutcome(skipped=f"chunk ids {ids[:5]}... are not 1, 2, 3, ...: the policy started before the bag")
    out = PolicyOutcome(differences=[])
    replayed: list[tuple[int, Chunk]] = []
    samples.sort(key=lambda x: x[0])
    stamps = np.array([x[0] for x in samples], dtype=np.int64)
    for at_s, msg in chunks:
        stamp = stamp_to_ns(msg.observation_stamp)
        candidates = _observations(samples, stamps, stamp, rollout, cameras)
        if not candidates:
            out.differences.append(
                (at_s, f"policy: chunk {msg.chunk_id}: no input in the bag builds an observation of its stamp")
            )
            return out
        policy, chunk, differs = _answer(policy, candidates, _rows(msg), tolerance, gripper_tolerance)
        if differs:
            out.differences.append((at_s, f"policy: chunk {msg.chunk_id} differs from the recording: {differs}"))
        replayed.append((stamp_to_ns(msg.header.stamp), chunk))
        out.chunks += 1
    out.actions, more = _replay_executor(executor, replayed, actions, start_ns, tolerance, gripper_tolerance)
    out.differences += more
    return out


def _answer(policy, candidates: list[Observation], recorded: dict, tolerance: float, gripper_tolerance: float):
    """(policy, chunk, what differs) for the first candidate observation whose answer reproduces
    `recorded` ("" differs), else for the closest one. Each candidate is answered from the policy's
    state before the query: a sampling model's noise (sampler_state / restore_sampler_state: one
    draw, whichever candidate), any other policy (the scripted one anchors on its first query) on
    a copy, of which the answering one is returned to go on with."""
    state = policy.sampler_state() if hasattr(policy, "sampler_state") else None
    # A clock-driven policy (scripted.ClockDriven) was engaged only while the node saw the gate
    # ARMED, which the bag does not tie to the query: its state as before first, then the other.
    engagements = (policy.engaged, not policy.engaged) if isinstance(policy, ClockDriven) else (None,)
    closest: tuple[float, object, Chunk, str] | None = None
    for i, (observation, engaged) in enumerate(itertools.product(candidates, engagements)):
        if state is not None:
            if i:
                policy.restore_sampler_state(state)
            trial = policy
        else:
            trial = copy.deepcopy(policy)
        if engaged is not None:
            trial.set_engaged(engaged)
        chunk = trial.infer(observation)
        worst = _worst(_chunk_rows(chunk), recorded)
        differs = _differs(worst, tolerance, gripper_tolerance)
        if not differs:
            return trial, chunk, ""
        if closest is None or max(worst) < closest[0]:
            closest = (max(worst), trial, chunk, differs)
    assert closest is not None  # candidates is never empty here
    _, trial, chunk, differs = closest
    if len(candidates) > 1:
        differs += f" (the closest of {len(candidates)} candidate observations)"
    if len(engagements) > 1:
        differs += " (engaged or not)"
    return trial, chunk, differs


def _observations(
    samples, stamps: np.ndarray, stamp_ns: int, rollout: RolloutConfig, cameras: tuple[str, ...] = ()
) -> list[Observation]:
    """The observations the node may have built with stamp `stamp_ns`, distinct by the samples
    they hold: its own synchronizer fed the inputs known by a cut-off, each cut-off whose build
    has that stamp; first the cut-offs in stamp order, then in the order the bag received the
    samples (the node's own arrival order is the closer of the two, but a bag under load receives
    late). `samples`: (stamp, stream, value, received) sorted by stamp. Why a search: the stamp is
    the newest of the chosen samples, the two arms' drivers tick out of phase, and which samples
    the node had at its query is not recorded: a later arm-state sample can change which one is
    nearest a frame's capture without changing the stamp (seen with the model fixture: 3 of 9
    chunks were the second candidate's, exactly)."""
    window = int(rollout.sync_tolerance_s * 1e9) + int(max(rollout.max_input_age_s, rollout.max_image_age_s) * 1e9)
    lo = int(np.searchsorted(stamps, stamp_ns - window))
    hi = int(np.searchsorted(stamps, stamp_ns + int(rollout.sync_tolerance_s * 1e9), side="right"))
    ages = {name: rollout.max_input_age_s for arm in ARMS for name in (pose_stream(arm), joint_stream(arm))}
    ages.update({image_stream(cam): rollout.max_image_age_s for cam in cameras})
    found: list[Observation] = []
    seen: set[tuple] = set()
    by_stamp = samples[lo:hi]
    by_arrival = sorted(by_stamp, key=lambda x: x[3])
    builds = []  # the build at each cut-off: one synchronizer per order, fed one sample at a time
    for ordered, clock in ((by_stamp, 0), (by_arrival, 3)):
        sync = ObservationSynchronizer(ages, rollout.sync_tolerance_s, history_depth=SYNC_HISTORY)
        for sample in ordered:
            sync.update(sample[1], sample[0], sample[2])
            if sample[clock] >= stamp_ns:
                builds.append(sync.build(int(sample[clock])))
    for result in builds:
        key = tuple(sorted(result.stamps.items())) if result.ok else None
        if result.ok and result.stamp_ns == stamp_ns and key not in seen:
            seen.add(key)
            v = result.values
            found.append(
                Observation(
                    stamp_ns=stamp_ns,
                    images={cam: v[image_stream(cam)] for cam in cameras},
                    left_pose=v[pose_stream(Arm.LEFT)],
                    right_pose=v[pose_stream(Arm.RIGHT)],
                    left_gripper=float(v[joint_stream(Arm.LEFT)][JOINTS_PER_ARM]),
                    right_gripper=float(v[joint_stream(Arm.RIGHT)][JOINTS_PER_ARM]),
                    left_joints=v[joint_stream(Arm.LEFT)][:JOINTS_PER_ARM],
                    right_joints=v[joint_stream(Arm.RIGHT)][:JOINTS_PER_ARM],
                )
            )
    return found


def _replay_executor(
    config: ExecutorConfig,
    chunks: list[tuple[int, Chunk]],
    actions,
    start_ns: int,
    tolerance: float = TOLERANCE,
    gripper_tolerance: float = GRIPPER_TOLERANCE,
):
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
        differs = _differs(_worst(mine, theirs), tolerance, gripper_tolerance)
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
