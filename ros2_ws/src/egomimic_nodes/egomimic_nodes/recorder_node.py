"""Recorder node: episodes of the running graph (zarr, docs/eva.md "Episodes"), on request or,
with `auto_start` (the launch argument record:=true), from the moment every stream is live until
shutdown.

  sub  cameras/<cam>/image_raw (rgb8, header.stamp = capture time), or with image_transport
       compressed cameras/<cam>/image_raw/compressed (the cameras' JPEGs, stored as they came),
       cameras/<cam>/camera_info
       (intrinsics, read when an episode starts), <arm>/joint_states (measured joints and
       gripper), <arm>/ee_pose_dataset (measured pose, dataset frame), policy/action (commanded
       poses and grippers, dataset frame), <arm>/joint_command (commanded joints)
  pub  recorder/status (egomimic_msgs/RecorderStatus, latched: on every change and every
       `status_period_s` while recording), /diagnostics (the same with per-stream counts)
  srv  recorder/start: open an episode in `record_dir`; refused, saying why, while a stream is
       not live, when the disk has less than `min_free_mb` free or record_dir is unusable
       (status ERROR). recorder/stop: commit it.

Steps (egomimic_data/step_assembly.py): one per head-camera frame, every other stream matched
to its capture stamp; the measured pose is paired with the joint_states sample of its own stamp,
so the recorded obs_ee_pose is the FK of the recorded obs_joints (through M). A step with a
stream that is not live or out of tolerance is skipped and counted under that stream.

Work per tick (the control rate): take every sample that arrived (taken.py: readers on a
companion node no executor spins; images and joint states read from their CDR bytes without
building the message, serialized.py), assemble the steps and hand them to the writer thread
(egomimic_data/recording.py: bounded queue, never waits). JPEG encoding (image_transport raw; with
compressed the cameras' JPEGs are stored as they came, egomimic_data/jpeg_frame.py) and zarr writes run in
that thread, in blocks behind the episode's commit marker, with disk-space checks; a disk that
nearly fills or a failed write ends the episode cleanly ("partial", status ERROR, the reason
in detail), the committed blocks intact.

Run time: `task_name` and `task_description` may be set while the node runs
(`ros2 param set /eva/recorder task_name fold_towel`) and apply to the next episode; every other
parameter is read at start. SIGINT/SIGTERM commit the open episode ("complete") and publish the
final status before the node exits 0.

Parameters: RecorderConfig (egomimic_data.recording_config) at the top level and AssemblyConfig
(egomimic_data.step_assembly) as `sync.*`.
"""

from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.msg import SetParametersResult
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile
from sensor_msgs.msg import CameraInfo

from egomimic_data.episode_format import EpisodeMeta
from egomimic_data.jpeg_frame import jpeg_frame
from egomimic_data.recording import EpisodeRecorder, RecorderError, RecorderState
from egomimic_data.recording_config import RecorderConfig
from egomimic_data.step_assembly import (
    CMD_POSE_STREAM,
    AssemblyConfig,
    StepAssembler,
    cmd_joints_stream,
    image_stream,
    obs_joints_stream,
    obs_pose_stream,
)
from egomimic_hw.description import ARMS, JOINTS_PER_ARM, Arm
from egomimic_msgs.msg import BimanualCommand, RecorderStatus
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.msg_convert import pose_to_array, stamp_to_ns
from egomimic_nodes.outbox import Outbox, close_all, flush_all
from egomimic_nodes.params import declare_config
from egomimic_nodes.serialized import JointStateLayout, read_compressed_image, read_image, read_pose_stamped
from egomimic_nodes.spin import lower_this_thread, run_node
from egomimic_nodes.taken import TakenSubscriptions

IMAGE_DEPTH = 10
"""Frames a reader keeps between two takes (330 ms at 30 Hz): a tick delayed that long loses none."""
STATE_DEPTH = 32
"""joint_states kept between takes (320 ms at 100 Hz); poses and commands use IMAGE_DEPTH."""
EXIT_FLUSH_S = 0.5
"""On exit, the final status gets this long to reach the middleware and its subscribers."""


def _qos(topic: topics.Topic, depth: int) -> QoSProfile:
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=topic.qos.reliability,
        durability=topic.qos.durability,
    )


def _received_ns(info) -> int:
    return int(info.get("received_timestamp") or time.time_ns())


class RecorderNode(Node):
    PARAMETERS = ((RecorderConfig, "", ()), (AssemblyConfig, "sync.", ("fps", "cameras")))
    """What --help lists (declared in __init__; sync.fps is the top-level fps, cameras are the robot's)."""

    def __init__(self):
        super().__init__("recorder")
        self.config = declare_config(self, RecorderConfig)
        self.sync_config = declare_config(self, AssemblyConfig, prefix="sync.", fps=self.config.fps)
        self.task = (self.config.task_name, self.config.task_description)
        self.assembler = StepAssembler(self.sync_config)
        self.recorder = EpisodeRecorder(self.config, on_writer_start=self._lower_writer)
        self.cameras = self.sync_config.cameras

        self._taken = TakenSubscriptions(self.context, f"{self.get_name()}_in", self.get_namespace())
        self._readers = []
        self._camera_quality: dict[str, int] = {}
        for cam in self.cameras:
            if self.config.image_transport == "compressed":
                self._reader(topics.IMAGE_COMPRESSED, IMAGE_DEPTH, self._jpeg_cb(cam), raw=True, cam=cam)
            else:
                self._reader(topics.IMAGE_RAW, IMAGE_DEPTH, self._image_cb(cam), raw=True, cam=cam)
        for arm in ARMS:
            self._reader(topics.JOINT_STATES, STATE_DEPTH, self._joints_cb(arm), raw=True, arm=arm)
            self._reader(topics.EE_POSE_DATASET, IMAGE_DEPTH, self._pose_cb(arm), raw=True, arm=arm)
            self._reader(topics.JOINT_COMMAND, IMAGE_DEPTH, self._command_joints_cb(arm), raw=True, arm=arm)
        self._reader(topics.POLICY_ACTION, IMAGE_DEPTH, self._command_cb)
        self._info = {
            cam: self._taken.subscribe(
                CameraInfo, self.resolve_topic_name(topics.CAMERA_INFO.name(cam=cam)), _qos(topics.CAMERA_INFO, 1)
            )
            for cam in self.cameras
        }
        self._intrinsics: dict[str, dict] = {}

        self._pub_status = self.create_publisher(
            RecorderStatus, topics.RECORDER_STATUS.name(), topics.RECORDER_STATUS.qos
        )
        self._status_box = Outbox(self._pub_status)
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        )
        self.create_service(topics.RECORDER_START.type, topics.RECORDER_START.name, self._on_start)
        self.create_service(topics.RECORDER_STOP.type, topics.RECORDER_STOP.name, self._on_stop)
        self._auto_pending = self.config.auto_start
        self._waiting = ""
        self._status_key: tuple | None = None
        self._skipped_reported = self._skipped_warned = 0
        self.create_timer(1.0 / self.config.fps, self._on_tick)
        self.create_timer(self.config.status_period_s, self._on_status_timer)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._publish_status()
        self.get_logger().info(
            f"recorder: episodes to {self.config.record_dir} at {self.config.fps:g} Hz, paced by "
            f"{self.sync_config.reference_camera}; "
            + ("auto_start: the first episode opens once every stream is live" if self._auto_pending else "idle")
        )

    def _lower_writer(self) -> None:
        """The writer thread (JPEG encoding, zarr) runs below the stack tier: on a busy machine it
        waits behind the cameras, the policy and the drivers; its queue (queue_steps) absorbs it."""
        done = lower_this_thread("background")
        if done:
            self.get_logger().info(f"scheduling: {done}")

    def _reader(self, topic: topics.Topic, depth: int, handler, raw: bool = False, arm=None, cam=None) -> None:
        name = self.resolve_topic_name(topic.name(arm, cam))
        self._readers.append((self._taken.subscribe(topic.type, name, _qos(topic, depth), raw=raw), handler))

    # --------------------------------------------------------------- inputs
    def _refuse(self, stream: str, why: str) -> None:
        self.assembler.reject(stream, why)
        self.get_logger().warning(f"{stream}: sample refused: {why}", throttle_duration_sec=5.0)

    def _image_cb(self, cam: str):
        stream = image_stream(cam)

        def cb(raw: bytes, info) -> None:
            try:
                stamp_ns, pixels = read_image(raw)
            except ValueError as exc:
                self._refuse(stream, str(exc))
                return
            self.assembler.image(cam, stamp_ns, pixels, _received_ns(info))

        return cb

    def _jpeg_cb(self, cam: str):
        """image_transport compressed: the camera's JPEG is stored as it came (jpeg_frame.py); its
        quality, read from its tables, becomes the next episode's (the reference camera's)."""
        stream = image_stream(cam)

        def cb(raw: bytes, info) -> None:
            try:
                stamp_ns, fmt, data = read_compressed_image(raw)
                if "jpeg" not in fmt:
                    raise ValueError(f"format {fmt!r}, expected a JPEG")
                frame = jpeg_frame(data)
            except ValueError as exc:
                self._refuse(stream, str(exc))
                return
            self._camera_quality[cam] = frame.quality
            self.assembler.image(cam, stamp_ns, frame, _received_ns(info))

        return cb

    def _joints_cb(self, arm: Arm):
        stream, names, layout = obs_joints_stream(arm), arm.joint_names, JointStateLayout()

        def cb(raw: bytes, info) -> None:
            try:
                stamp_ns, got, position = layout.read(raw)
            except ValueError as exc:
                self._refuse(stream, str(exc))
                return
            if got != names or len(position) < len(names):
                self._refuse(stream, f"joints {got} with {len(position)} positions, expected {names}")
                return
            self.assembler.joints(
                arm, stamp_ns, position[:JOINTS_PER_ARM], position[JOINTS_PER_ARM], _received_ns(info)
            )

        return cb

    def _pose_cb(self, arm: Arm):
        stream = obs_pose_stream(arm)

        def cb(raw: bytes, info) -> None:
            try:
                stamp_ns, frame_id, pose = read_pose_stamped(raw)
            except ValueError as exc:
                self._refuse(stream, str(exc))
                return
            if frame_id != arm.dataset_frame:
                self._refuse(stream, f"frame_id {frame_id!r}, expected {arm.dataset_frame!r}")
                return
            self.assembler.pose(arm, stamp_ns, pose, _received_ns(info))

        return cb

    def _command_cb(self, msg: BimanualCommand, info) -> None:
        poses, grippers = {}, {}
        for arm in ARMS:
            ps: PoseStamped = getattr(msg, arm.value)
            if ps.header.frame_id != arm.dataset_frame:
                self._refuse(
                    CMD_POSE_STREAM, f"{arm.value} frame_id {ps.header.frame_id!r}, expected {arm.dataset_frame!r}"
                )
                return
            poses[arm] = pose_to_array(ps.pose)
            grippers[arm] = float(getattr(msg, f"{arm.value}_gripper"))
        self.assembler.command(stamp_to_ns(msg.header.stamp), poses, grippers, _received_ns(info))

    def _command_joints_cb(self, arm: Arm):
        stream, layout = cmd_joints_stream(arm), JointStateLayout()

        def cb(raw: bytes, info) -> None:
            try:
                stamp_ns, _names, position = layout.read(raw)
            except ValueError as exc:
                self._refuse(stream, str(exc))
                return
            if len(position) < JOINTS_PER_ARM:
                self._refuse(stream, f"{len(position)} positions, expected {JOINTS_PER_ARM} joints")
                return
            self.assembler.command_joints(arm, stamp_ns, position[:JOINTS_PER_ARM], _received_ns(info))

        return cb

    def _take_all(self) -> None:
        for sub, handler in self._readers:
            for msg, info in self._taken.take(sub):
                handler(msg, info)

    def _calibration(self) -> dict:
        """Each camera's intrinsics from its newest camera_info (those seen so far)."""
        for cam, sub in self._info.items():
            taken = self._taken.take(sub)
            if taken:
                info: CameraInfo = taken[-1][0]
                k = [float(x) for x in info.k]
                self._intrinsics[cam] = {
                    "width": int(info.width),
                    "height": int(info.height),
                    "fx": k[0],
                    "fy": k[4],
                    "cx": k[2],
                    "cy": k[5],
                    "distortion": [float(x) for x in info.d],
                }
        return dict(self._intrinsics)

    # ---------------------------------------------------------------- ticks
    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _on_tick(self) -> None:
        now_ns = self._now_ns()
        self._take_all()
        if self.recorder.recording and self.recorder.halt_reason:
            self._finish(self.recorder.halt_reason, data_status="partial")
        elif self._auto_pending and not self.recorder.recording:
            self._waiting = self.assembler.waiting_for(now_ns)
            if not self._waiting:
                self._auto_pending = False
                self._start("auto_start", now_ns)
        for step in self.assembler.assemble(now_ns):
            if not self.recorder.submit(step):
                self.assembler.unrecorded_step(step)
        skipped = sum(self.assembler.skipped.values())
        if self.recorder.recording and skipped > max(self._skipped_reported, self._skipped_warned):
            # only when a step was skipped since the last look: the throttled logger call costs
            # ~0.1 ms, every tick, once anything was skipped (until the next diagnostics)
            self._skipped_warned = skipped
            self.get_logger().warning(
                f"skipping steps ({skipped} so far): {self.assembler.last_skip}", throttle_duration_sec=5.0
            )
        self._publish_status()

    def _on_status_timer(self) -> None:
        if self.recorder.recording:
            self._publish_status(force=True)
        self._publish_diagnostics()

    # ------------------------------------------------------------- episodes
    def _start(self, why: str, now_ns: int | None = None) -> tuple[bool, str]:
        if self.recorder.recording:
            return False, f"already recording {self.recorder.status().episode_path}"
        now_ns = self._now_ns() if now_ns is None else now_ns
        missing = self.assembler.waiting_for(now_ns)
        if missing:
            message = f"not every stream is live: {missing}"
            self.recorder.refuse(message)
            self.get_logger().error(f"recorder/start refused: {message}")
            self._publish_status()
            return False, message
        height, width = self.assembler.frame_size(self.sync_config.reference_camera) or (480, 640)
        task_name, task_description = self.task
        meta = EpisodeMeta(
            task_name=task_name,
            task_description=task_description,
            cameras=self.cameras,
            fps=self.config.fps,
            image_width=width,
            image_height=height,
            jpeg_quality=self._camera_quality.get(self.sync_config.reference_camera, self.config.jpeg_quality),
            calibration=self._calibration(),
        )
        try:
            path = self.recorder.start(meta, now_ns)
        except RecorderError as exc:
            self.get_logger().error(f"recording not started: {exc}")
            self._publish_status()
            return False, str(exc)
        self.assembler.begin(now_ns)
        self._skipped_reported = self._skipped_warned = 0
        self.get_logger().info(f"recording {path} (task {task_name!r}; {why})")
        self._publish_status()
        return True, f"recording {path}"

    def _finish(self, reason: str, data_status: str = "complete") -> str:
        counts = self.assembler.end()
        attributes = {
            "streams": {name: c.as_dict() for name, c in counts.items()},
            "steps": self.assembler.steps,
            "steps_skipped": dict(self.assembler.skipped),
            "steps_not_queued": self.assembler.unrecorded,
            "last_skip": self.assembler.last_skip,
            "reference_camera": self.sync_config.reference_camera,
            "image_transport": self.config.image_transport,
        }
        result = self.recorder.stop(reason, data_status=data_status, attributes=attributes)
        if result is None:
            return "not recording"
        dropped = sum(counts[image_stream(c)].dropped for c in self.cameras)
        message = (
            f"{result.path}: {result.frames} frames committed ({result.data_status}); camera frames dropped "
            f"{dropped}, steps skipped {sum(self.assembler.skipped.values())}; {reason}"
        )
        log = self.get_logger()
        (log.info if self.recorder.status().state is RecorderState.IDLE else log.error)(f"episode {message}")
        self._publish_status()
        return message

    # ------------------------------------------------------------- services
    def _on_start(self, request, response):
        response.success, response.message = self._start(topics.RECORDER_START.name)
        return response

    def _on_stop(self, request, response):
        if not self.recorder.recording:
            response.success, response.message = False, "not recording"
            return response
        self._take_all()  # what arrived since the last tick belongs to the episode
        for step in self.assembler.assemble(self._now_ns()):
            if not self.recorder.submit(step):
                self.assembler.unrecorded_step(step)
        response.message = self._finish(topics.RECORDER_STOP.name)
        response.success = True
        return response

    def _on_set_parameters(self, params) -> SetParametersResult:
        task_name, task_description = self.task
        for p in params:
            if p.name == "task_name":
                if not str(p.value).strip():
                    return SetParametersResult(successful=False, reason="task_name must be a non-empty string")
                task_name = str(p.value)
            elif p.name == "task_description":
                task_description = str(p.value)
            else:
                return SetParametersResult(successful=False, reason=f"{p.name} is read at start only; restart the node")
        if (task_name, task_description) != self.task:
            self.task = (task_name, task_description)
            self.get_logger().info(f"task {task_name!r} applies to the next episode")
        return SetParametersResult(successful=True)

    # --------------------------------------------------------------- status
    def _status_msg(self) -> RecorderStatus:
        s = self.recorder.status()
        counts = self.assembler.counts()
        msg = RecorderStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.state = int(s.state)
        msg.episode_path = s.episode_path
        msg.task_name = self.task[0]
        msg.frames, msg.frames_committed = s.frames, s.frames_committed
        msg.dropped = sum(counts[image_stream(c)].dropped for c in self.cameras)
        msg.skipped = sum(self.assembler.skipped.values())
        msg.disk_free_mb = float(s.free_mb)
        detail = s.detail
        if s.state is RecorderState.IDLE and self._auto_pending:
            detail = f"auto_start: waiting for every stream ({self._waiting or 'no tick yet'})"
        elif s.state is RecorderState.RECORDING and self.assembler.last_skip:
            detail += f"; last skip: {self.assembler.last_skip}"
        msg.detail = detail
        msg.stream_names = list(counts)
        msg.stream_received = [c.received for c in counts.values()]
        msg.stream_dropped = [c.dropped for c in counts.values()]
        msg.stream_duplicated = [c.duplicated for c in counts.values()]
        msg.stream_max_gap_ms = [float(c.max_gap_ms) for c in counts.values()]
        msg.stream_latency_ms = [float(c.latency_p50_ms) for c in counts.values()]
        return msg

    def _publish_status(self, force: bool = False) -> None:
        """On a change of state, episode, task or detail (or `force`): not on every frame."""
        s = self.recorder.status()
        key = (
            s.state,
            s.episode_path,
            self.task,
            s.detail,
            self._waiting.split(":", 1)[0] if self._auto_pending else "",
        )
        if force or key != self._status_key:
            self._status_key = key
            self._status_box.publish(self._status_msg())

    def _publish_diagnostics(self) -> None:
        msg = self._status_msg()
        skipped_new = msg.skipped - self._skipped_reported
        self._skipped_reported = msg.skipped
        s = self.recorder.status()
        if msg.state == RecorderStatus.ERROR:
            level = diagnostics.ERROR
        elif msg.state == RecorderStatus.RECORDING and (skipped_new or s.queue_dropped or s.refused):
            level = diagnostics.WARN
        else:
            level = diagnostics.OK
        values = {
            "state": RecorderState(msg.state).name,
            "episode": msg.episode_path,
            "task_name": msg.task_name,
            "frames": msg.frames,
            "frames_committed": msg.frames_committed,
            "camera_frames_dropped": msg.dropped,
            "steps_skipped": msg.skipped,
            "queue_dropped": s.queue_dropped,
            "refused_steps": s.refused,
            "disk_free_mb": f"{msg.disk_free_mb:.0f}",
        }
        for name, received, dropped, duplicated, gap, latency in zip(
            msg.stream_names,
            msg.stream_received,
            msg.stream_dropped,
            msg.stream_duplicated,
            msg.stream_max_gap_ms,
            msg.stream_latency_ms,
        ):
            values.update(
                {
                    f"{name}.received": received,
                    f"{name}.dropped": dropped,
                    f"{name}.duplicated": duplicated,
                    f"{name}.max_gap_ms": f"{gap:.1f}",
                    f"{name}.latency_ms": f"{latency:.1f}",
                }
            )
        self._pub_diag.publish(
            diagnostics.array(self, diagnostics.status("recorder", self.get_name(), level, msg.detail, values))
        )

    # ------------------------------------------------------------------ exit
    def on_exit(self) -> None:
        """Commit the open episode, then make sure the final status leaves the process."""
        if self.recorder.recording:
            self._take_all()
            self._finish("shutdown")
        self._status_box.publish(self._status_msg())
        flush_all((self._status_box, self._pub_diag), EXIT_FLUSH_S)
        self._pub_status.wait_for_all_acked(Duration(nanoseconds=int(EXIT_FLUSH_S * 1e9)))

    def destroy_node(self) -> None:
        close_all((self._status_box, self._pub_diag))
        self._taken.destroy()
        super().destroy_node()


def main(args=None) -> int:
    return run_node(RecorderNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
