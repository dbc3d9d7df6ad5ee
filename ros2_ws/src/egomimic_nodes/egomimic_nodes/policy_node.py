"""Policy node: runs a ChunkPolicy through the asynchronous rollout executor at `rate_hz`.

  sub  <arm>/ee_pose_dataset (PoseStamped), <arm>/joint_states (JointState),
       cameras/<cam>/image_raw (rgb8; only the cameras the policy's spec names),
       safety/status (GateStatus; only with policy:=scripted|expert, whose motion runs while ARMED)
  pub  policy/action (BimanualCommand, dataset frame, every tick while there is a target),
       policy/chunk (ActionChunk, every chunk the model produced), /diagnostics (1 Hz)
  srv  policy/reset (clear the action queue and the policy's observation window)

`policy` (docs/interfaces.md): scripted | expert | fold | pi | moe | <checkpoint path> | tcp://host:port,
built by egomimic_policy.loading; `inject_latency_ms` delays every query (rehearse a slow
model). The tick only evaluates the executor's queue; the model runs in the executor's worker
(egomimic_policy/rollout), so a slow model or a dead server never delays the tick: the queue
drains, the last target is held for at most `executor.max_dry_s` (counted, reported), then
nothing is published and the safety gate sees a stale command and holds the arms.

Arm state (poses and joint states, 300 samples/s in all) is taken, not delivered: its readers sit
on a companion node that no executor spins (egomimic_nodes/taken.py), drained before every tick
and every query, so the newest samples are always seen without 300 executor callbacks a second.
Camera frames are taken too, and only when an observation is built (a query; with an
observation window, every tick): the newest frame of each camera, as CDR bytes whose pixels are
read in place (serialized.read_image). A model that queries twice a second (make run's every 15
ticks) no longer receives 90 frames of 900 KB a second, each a callback, a deserialization into
a Python array and a copy (perf put the node at about 31 % of one core in make run before and
after: the 30 Hz tick and the model are most of it, README "Headroom"). Every output goes through an Outbox (its own sending thread):
a subscriber that blocks a writer (outbox.py) never stops the tick.

Observations come from egomimic_hw.sync.ObservationSynchronizer: a query is made only when
every input is fresh (`max_input_age_s` for arm state, `max_image_age_s` for cameras) and the
inputs agree in time (`sync_tolerance_s`); otherwise it is skipped and the reason reported.
With `policy:=scripted` the executor runs the scripted motion (no model, no cameras): anchored
at the measured poses and grippers, as before this node went through the executor. With
`policy:=expert` it runs the simulated box task's scripted expert (`expert.task_seed`: the
box the synthetic cameras draw; privileged: it reads no camera). Both are motions defined in
time: they hold the measured pose until the gate is ARMED and start from there
(scripted.ClockDriven: anchored earlier, a motion ran ahead of arms the gate had not yet let move).

Parameters (read-only; `ros2 param describe` shows each one's text and range): the fields of
egomimic_policy.rollout.config.RolloutConfig (top level), ExecutorConfig (`executor.*`),
ScriptedMotionConfig and ScriptedChunkConfig (`scripted.*`), ExpertConfig (`expert.*`) and
RemoteConfig (`remote.*`).
"""

from __future__ import annotations

import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState

from egomimic_hw.description import ARMS, JOINTS_PER_ARM, Arm
from egomimic_hw.sync import ObservationSynchronizer
from egomimic_msgs.msg import ActionChunk, BimanualCommand, GateStatus
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.msg_convert import array_to_pose, ns_to_stamp, pose_to_array, stamp_to_ns
from egomimic_nodes.outbox import Outbox, close_all, flush_all
from egomimic_nodes.params import declare_config
from egomimic_nodes.serialized import read_image
from egomimic_nodes.spin import lower_this_thread, quiet_middleware_for_images, run_node
from egomimic_nodes.stall_dump import StallDump
from egomimic_nodes.taken import TakenSubscriptions
from egomimic_policy.expert import ExpertChunkPolicy, ExpertConfig
from egomimic_policy.interface import Observation
from egomimic_policy.loading import choose_device, load_policy
from egomimic_policy.remote.client import RemoteConfig
from egomimic_policy.rollout import (
    AsyncChunkExecutor,
    ExecutorConfig,
    ObservationHistory,
    ObservationUnavailable,
    RolloutConfig,
    TickStatus,
)
from egomimic_policy.scripted import ClockDriven, ScriptedChunkConfig, ScriptedChunkPolicy, ScriptedMotionConfig

ACTION_KEEP = 2
"""Actions that may wait while their writer is blocked (two ticks); older ones are dropped and
counted: each is superseded by the next, and the gate judges each by its stamp."""
CHUNK_KEEP = 4
"""Chunks that may wait: every chunk matters to a recorder, and they come at most a few a second."""
EXIT_FLUSH_S = 0.2
"""On exit, each writer gets this long to hand over what is queued."""
SYNC_HISTORY = 8
"""Messages kept per input, so 100 Hz arm state can be matched to a 30 Hz frame's capture time."""
LATE_TICK_PERIODS = 3
"""A control tick this many periods after the previous one is logged (with this thread's CPU meanwhile)."""
STALL_DUMP_S = 0.5
"""A control tick this late prints every thread's stack into the log while it is still late
(stall_dump.py): the gate latches HOLD after 0.3 s without a command, so such a stall is a HOLD
whose cause the stacks name."""
ARM_STATE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=SYNC_HISTORY, reliability=ReliabilityPolicy.RELIABLE)
"""The taken arm-state readers keep what the synchronizer keeps, so a late drain loses nothing it
would have used."""
IMAGE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
"""The taken image readers keep the newest frame only: an observation uses the newest frame of
each camera (the synchronizer matches the 100 Hz arm state to its capture stamp). Best effort,
as qos.SENSOR_READER: it also connects to a stock driver's best-effort publisher."""


def pose_stream(arm: Arm) -> str:
    return topics.EE_POSE_DATASET.name(arm)


def joint_stream(arm: Arm) -> str:
    return topics.JOINT_STATES.name(arm)


def image_stream(camera: str) -> str:
    return topics.IMAGE_RAW.name(cam=camera)


class PolicyNode(Node):
    PARAMETERS = (
        (RolloutConfig, "", ()),
        (ExecutorConfig, "executor.", ("rate_hz",)),
        (ScriptedChunkConfig, "scripted.", ()),
        (ScriptedMotionConfig, "scripted.", ()),
        (ExpertConfig, "expert.", ()),
        (RemoteConfig, "remote.", ("address", "rate_hz")),
    )
    """What --help lists (declared in __init__; the skipped fields come from other parameters)."""
    RAISE_PRIORITY_AFTER_INIT = True
    """torch's import and the checkpoint's load run at the launcher's niceness, not the control
    tier's: seconds of CPU while the gate is armed and the cameras must keep up (spin.raise_after_init)."""

    def __init__(self):
        super().__init__("policy")
        config = declare_config(self, RolloutConfig)
        rate_hz = config.rate_hz
        device, warning = choose_device(config.policy, config.device, config.allow_cpu_policy)
        if warning:
            self.get_logger().warning(warning)
        chunking = declare_config(self, ScriptedChunkConfig, prefix="scripted.")
        self.executor_config = declare_config(self, ExecutorConfig, prefix="executor.", rate_hz=rate_hz)
        motion = declare_config(self, ScriptedMotionConfig, prefix="scripted.")
        remote = declare_config(self, RemoteConfig, prefix="remote.", address=RemoteConfig.address, rate_hz=rate_hz)
        expert = declare_config(self, ExpertConfig, prefix="expert.")
        self._expert = ExpertChunkPolicy(expert, rate_hz=rate_hz) if config.policy.strip() == "expert" else None

        scripted = ScriptedChunkPolicy(motion, chunk_length=chunking.chunk_length, rate_hz=rate_hz)
        self.policy = load_policy(
            config.policy,
            inject_latency_ms=config.inject_latency_ms,
            cache_dir=config.cache_dir or None,
            pin_config_sha256=config.config_sha256,
            seed=config.seed,
            device=device,
            remote=remote,
            scripted=scripted,
            expert=self._expert,
        )
        name = config.policy.strip()
        self._clock_driven: ClockDriven | None = {"scripted": scripted, "expert": self._expert}.get(name)
        """A motion defined in time runs only while the gate is ARMED (scripted.ClockDriven)."""
        spec = self.policy.spec
        if abs(spec.rate_hz - rate_hz) > 1e-6:
            raise ValueError(
                f"policy {spec.family} produces rows at {spec.rate_hz} Hz, the control rate is {rate_hz} Hz"
            )
        self.cameras = tuple(spec.cameras)
        self._image_hw = tuple(spec.image_size)
        ages = {s: config.max_input_age_s for arm in ARMS for s in (pose_stream(arm), joint_stream(arm))}
        ages.update({image_stream(cam): config.max_image_age_s for cam in self.cameras})
        self.sync = ObservationSynchronizer(ages, config.sync_tolerance_s, history_depth=SYNC_HISTORY)
        self._bad_images = 0

        self._taken = TakenSubscriptions(self.context, f"{self.get_name()}_state", self.get_namespace())
        self._arm_state = []
        for arm in ARMS:
            for msg_type, stream, cb in (
                (PoseStamped, pose_stream(arm), self._pose_cb(arm)),
                (JointState, joint_stream(arm), self._joint_cb(arm)),
            ):
                self._arm_state.append(
                    (self._taken.subscribe(msg_type, self.resolve_topic_name(stream), ARM_STATE_QOS), cb)
                )
        self._take_lock = threading.Lock()
        self._images = [  # only what the policy needs: scripted and expert read no camera
            (self._taken.subscribe(Image, self.resolve_topic_name(image_stream(cam)), IMAGE_QOS, raw=True), cam)
            for cam in self.cameras
        ]
        quiet = quiet_middleware_for_images(len(self.cameras))
        if quiet:
            self.get_logger().info(f"middleware log: {quiet}")
        self._pub_action = Outbox(
            self.create_publisher(BimanualCommand, topics.POLICY_ACTION.name(), topics.POLICY_ACTION.qos),
            keep=ACTION_KEEP,
        )
        self._pub_chunk = Outbox(
            self.create_publisher(ActionChunk, topics.POLICY_CHUNK.name(), topics.POLICY_CHUNK.qos), keep=CHUNK_KEEP
        )
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        )
        self.create_service(topics.POLICY_RESET.type, topics.POLICY_RESET.name, self._on_reset)
        if self._clock_driven is not None:
            self._clock_driven.set_engaged(False)  # until the gate says ARMED
            self.create_subscription(
                GateStatus, topics.SAFETY_STATUS.name(), self._on_gate_status, topics.SAFETY_STATUS.qos
            )
        self.add_on_set_parameters_callback(self._on_set_parameters)

        self._period_ns = int(1e9 / rate_hz)
        # The model's observation window: one synchronized observation per control tick.
        self.history = ObservationHistory(spec.obs_steps, self._period_ns)
        # Not `self.executor`: rclpy.Node uses that name for the executor spinning the node.
        self.rollout = AsyncChunkExecutor(
            self.policy, self.executor_config, self._observe, self._now_ns, on_worker_start=self._lower_worker
        )
        self._status = TickStatus.WAITING
        self._stall_dump = StallDump(STALL_DUMP_S)
        self._spin_tid = threading.get_native_id()
        self._last_tick: tuple[float, float] | None = None  # (monotonic, this thread's CPU time)
        self.late_ticks = 0
        self.create_timer(1.0 / rate_hz, self._on_tick)
        self.create_timer(1.0, self._publish_diagnostics)
        c = self.executor_config
        self.get_logger().info(
            f"policy {spec.family} ({spec.fingerprint}, config SHA-256 {spec.extra.get('config_sha256', 'none')}, "
            f"{spec.chunk_length} rows, cameras {list(self.cameras)}"
            + (f", served by {self.policy.config.address}" if hasattr(self.policy, "connected") else "")
            + f") at {rate_hz} Hz; cadence {c.cadence}, blend {c.blend}, max_dry_s {c.max_dry_s}, "
            f"inject_latency_ms {config.inject_latency_ms:g}"
        )

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    # --------------------------------------------------------------- inputs
    def _pose_cb(self, arm: Arm):
        stream = pose_stream(arm)

        def cb(msg: PoseStamped) -> None:
            if msg.header.frame_id != arm.dataset_frame:
                self.get_logger().error(
                    f"{stream} in frame {msg.header.frame_id!r}, expected {arm.dataset_frame!r}: ignored",
                    throttle_duration_sec=2.0,
                )
                return
            self.sync.update(stream, stamp_to_ns(msg.header.stamp), pose_to_array(msg.pose))

        return cb

    def _joint_cb(self, arm: Arm):
        stream = joint_stream(arm)

        def cb(msg: JointState) -> None:
            if len(msg.position) <= JOINTS_PER_ARM:
                self.get_logger().error(f"{stream} without a gripper value: ignored", throttle_duration_sec=2.0)
                return
            self.sync.update(stream, stamp_to_ns(msg.header.stamp), np.array(msg.position[: JOINTS_PER_ARM + 1], float))

        return cb

    def _take_inputs(self, images: bool = False) -> None:
        """Feed every waiting arm-state sample to the synchronizer, oldest first, and with
        `images` each camera's newest frame (the tick and the rollout's worker both call this)."""
        with self._take_lock:
            for sub, cb in self._arm_state:
                for msg, _info in self._taken.take(sub):
                    cb(msg)
            if images:
                for sub, cam in self._images:
                    for raw, _info in self._taken.take(sub):
                        self._on_image(cam, raw)

    def _on_image(self, camera: str, raw: bytes) -> None:
        stream = image_stream(camera)
        try:
            stamp_ns, rgb = read_image(raw)  # a view of the taken bytes: no per-pixel work
        except ValueError as exc:
            rgb, why = None, str(exc)
        else:
            why = f"{rgb.shape[0]}x{rgb.shape[1]}, the policy expects {self._image_hw[0]}x{self._image_hw[1]}"
        if rgb is None or rgb.shape[:2] != self._image_hw:
            self._bad_images += 1
            self.get_logger().error(f"{stream}: {why}: frame ignored", throttle_duration_sec=2.0)
            return
        self.sync.update(stream, stamp_ns, rgb)

    def _observe(self, now_ns: int) -> Observation:
        """Called by the executor's worker when a query is due: the current observation with the
        preceding ticks' observations (at most one period apart each) as its history."""
        self._take_inputs(images=True)
        result = self.sync.build(now_ns)
        if not result.ok:
            raise ObservationUnavailable(result.reason)
        return self.history.attach(self._observation(result))

    def _record_history(self, now_ns: int) -> None:
        result = self.sync.build(now_ns)
        if result.ok:
            self.history.record(self._observation(result))

    def _observation(self, result) -> Observation:
        v = result.values
        state = {arm: v[joint_stream(arm)] for arm in ARMS}
        return Observation(
            stamp_ns=result.stamp_ns,
            images={cam: v[image_stream(cam)] for cam in self.cameras},
            left_pose=v[pose_stream(Arm.LEFT)],
            right_pose=v[pose_stream(Arm.RIGHT)],
            left_gripper=float(state[Arm.LEFT][JOINTS_PER_ARM]),
            right_gripper=float(state[Arm.RIGHT][JOINTS_PER_ARM]),
            left_joints=state[Arm.LEFT][:JOINTS_PER_ARM],
            right_joints=state[Arm.RIGHT][:JOINTS_PER_ARM],
        )

    # ----------------------------------------------------------------- tick
    def path_tier_threads(self) -> frozenset[int]:
        """The tick's thread (the one that spins this node: it builds it) and the action writer's
        (for spin.raise_after_init): the command path's tier, above the model and the observers."""
        return frozenset({self._spin_tid, self._pub_action.native_id})

    def stack_tier_threads(self) -> set[int]:
        """The model worker (for spin.raise_after_init): it stays at the stack tier."""
        tid = self.rollout.worker_native_id
        return set() if tid is None else {tid}

    def _lower_worker(self) -> None:
        """The model runs below the tick: with `realtime` the process is at the control tier (its
        30 Hz actions are a hop of the command path), the inference at the stack's."""
        done = lower_this_thread("stack")
        if done:
            self.get_logger().info(f"scheduling: {done}")

    def _on_tick(self) -> None:
        """The action first, then the rest. The target comes from the queue alone, so nothing the
        tick takes in can change it; what the tick did before the hand-off went into the action's
        timing: taking the arm states (~13 samples a tick, 0.7-0.8 ms median, up to 2.8 ms) put
        the hand-off 1.3-1.5 ms after the tick began, up to 3.8 ms, and its spread into the
        stream's worst gap. With the action first: 0.74 ms median, 1.8 ms at most."""
        self._stall_dump.arm()
        self._note_lateness()
        now = self.get_clock().now()
        result = self.rollout.tick(now.nanoseconds)
        if result.target is not None:
            self._pub_action.publish(self._action_msg(result.target, now.to_msg()))
        self._take_inputs(images=bool(self.history.depth))  # a window records every tick
        if self.history.depth:
            self._record_history(now.nanoseconds)
        for accepted in result.new_chunks:  # after the action: 100 rows take a few ms to build
            self._pub_chunk.publish(self._chunk_msg(accepted))
        if result.status is not self._status:
            self._report_transition(result.status)
            self._status = result.status

    def _note_lateness(self) -> None:
        """Log a tick that came LATE_TICK_PERIODS periods or more after the previous one, with
        this thread's CPU time meanwhile (about the gap: this node was busy; else it was blocked
        or not scheduled): a gate HOLD for a silent command stream then names its cause."""
        now, cpu = time.monotonic(), time.thread_time()
        last, self._last_tick = self._last_tick, (now, cpu)
        if last is not None and now - last[0] >= LATE_TICK_PERIODS * self._period_ns * 1e-9:
            self.late_ticks += 1
            self.get_logger().warning(
                f"control tick ran {(now - last[0]) * 1e3:.0f} ms after the previous one (period "
                f"{self._period_ns * 1e-6:.0f} ms; this thread used {(cpu - last[1]) * 1e3:.0f} ms of CPU meanwhile"
                + (
                    f"; every thread's stack was printed above when it was {STALL_DUMP_S:.1f} s late)"
                    if now - last[0] >= STALL_DUMP_S
                    else ")"
                ),
                throttle_duration_sec=1.0,
            )

    def _report_transition(self, status: TickStatus) -> None:
        problem = self.rollout.stats(self._now_ns())["last_problem"]
        log = self.get_logger()
        if status is TickStatus.RUNNING:
            log.info("executing chunks")
        elif status is TickStatus.HOLDING:
            log.warning(
                f"queue ran dry: holding the last target for at most {self.executor_config.max_dry_s} s "
                f"({problem or 'the next chunk is late'})"
            )
        elif status is TickStatus.STOPPED and self.rollout.stats(self._now_ns())["runaway_ticks"]:
            log.error(f"not publishing (the gate holds the arms); {problem}")
        elif status is TickStatus.STOPPED:
            log.error(
                f"queue dry for more than {self.executor_config.max_dry_s} s: not publishing "
                f"(the gate holds the arms); {problem}"
            )
        else:
            log.warning(f"waiting for a first chunk: {problem or 'no observation yet'}")

    def _row_msg(self, left, right, lg, rg, chunk_id, row, obs_ns, stamp) -> BimanualCommand:
        msg = BimanualCommand()
        msg.header.stamp = stamp
        msg.header.frame_id = "dataset"
        for arm, pose, gripper in ((Arm.LEFT, left, lg), (Arm.RIGHT, right, rg)):
            ps: PoseStamped = getattr(msg, arm.value)
            ps.header.stamp = stamp
            ps.header.frame_id = arm.dataset_frame
            array_to_pose(pose, ps.pose)
            setattr(msg, f"{arm.value}_gripper", float(gripper))
        msg.chunk_id, msg.row = int(chunk_id), int(row)
        msg.observation_stamp = ns_to_stamp(int(obs_ns))
        return msg

    def _action_msg(self, t, stamp) -> BimanualCommand:
        return self._row_msg(
            t.left_pose, t.right_pose, t.left_gripper, t.right_gripper, t.chunk_id, t.row, t.observation_stamp_ns, stamp
        )

    def _chunk_msg(self, accepted) -> ActionChunk:
        c = accepted.chunk
        msg = ActionChunk()
        msg.header.stamp = ns_to_stamp(accepted.received_ns)
        msg.chunk_id = accepted.chunk_id
        msg.observation_stamp = ns_to_stamp(int(c.observation_stamp_ns))
        msg.period = float(c.period_s)
        period_ns = c.period_s * 1e9
        msg.rows = [
            self._row_msg(
                c.left_pose[i],
                c.right_pose[i],
                c.left_gripper[i],
                c.right_gripper[i],
                accepted.chunk_id,
                i,
                c.observation_stamp_ns,
                ns_to_stamp(int(c.observation_stamp_ns + round(i * period_ns))),
            )
            for i in range(len(c))
        ]
        return msg

    # ------------------------------------------------------------- services
    def _on_set_parameters(self, params) -> SetParametersResult:
        """`expert.task_seed` (policy:=expert) is the one parameter applied while running: the
        box of a new trial (then call policy/reset). The others are declared read-only."""
        for p in params:
            if p.name != "expert.task_seed":
                return SetParametersResult(successful=False, reason=f"{p.name} is read at start only; restart the node")
            if self._expert is None:
                return SetParametersResult(successful=False, reason="expert.task_seed applies only with policy:=expert")
        for p in params:
            target = self._expert.set_task_seed(int(p.value))
            self.get_logger().info(f"expert.task_seed {int(p.value)}: box {target.describe()}")
        return SetParametersResult(successful=True)

    def _on_gate_status(self, msg: GateStatus) -> None:
        engaged = msg.state == GateStatus.ARMED
        if engaged != self._clock_driven.engaged:
            self._clock_driven.set_engaged(engaged)
            self.get_logger().info(
                f"gate {'ARMED: the motion starts at the next query' if engaged else 'not armed: holding the measured pose'}"
            )

    def _on_reset(self, request, response):
        self.rollout.reset()
        self.history.clear()
        response.success, response.message = True, "queue cleared; the policy restarts at the next fresh observation"
        self.get_logger().info("policy/reset: queue cleared")
        return response

    def _publish_diagnostics(self) -> None:
        values = self.rollout.stats(self._now_ns())
        status_fn = getattr(self.policy, "status", None)
        if status_fn is not None:
            values.update(status_fn())
        values["bad_images"] = self._bad_images
        values["late_ticks"] = self.late_ticks
        for box in (self._pub_action, self._pub_chunk):
            values.update({f"{box.topic}.{k}": v for k, v in box.stats().items()})
        level = {TickStatus.RUNNING: diagnostics.OK, TickStatus.STOPPED: diagnostics.ERROR}.get(
            self._status, diagnostics.WARN
        )
        if values.get("remote_state", "connected") != "connected":
            level = diagnostics.ERROR
        message = f"{values['status']}: queue {values['queue_rows']} rows, latency p50 {values['latency_p50_ms']} ms"
        if values["last_problem"] and self._status is not TickStatus.RUNNING:
            message += f"; {values['last_problem']}"
        self._pub_diag.publish(
            diagnostics.array(self, diagnostics.status("policy", self.get_name(), level, message, values))
        )

    def on_exit(self) -> None:
        self._stall_dump.close()  # teardown is not a stalled tick
        self.rollout.stop(timeout_s=1.0)
        close = getattr(self.policy, "close", None)
        if close is not None:
            close()
        flush_all((self._pub_action, self._pub_chunk, self._pub_diag), EXIT_FLUSH_S)

    def destroy_node(self) -> None:
        close_all((self._pub_action, self._pub_chunk, self._pub_diag))
        self._taken.destroy()
        super().destroy_node()


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
