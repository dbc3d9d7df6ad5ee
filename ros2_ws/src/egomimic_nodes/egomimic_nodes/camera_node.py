"""Camera node: publishes, for each camera in `cameras`,
  cameras/<cam>/image_raw            sensor_msgs/Image rgb8, header.stamp = capture time
  cameras/<cam>/camera_info          intrinsics of the published image (scaled if resized)
  cameras/<cam>/image_raw/compressed sensor_msgs/CompressedImage JPEG (only with publish_compressed)
  cameras/<cam>/health               egomimic_msgs/CameraHealth with every frame, and from the
                                     health timer while frames do not come (silence is reported)
  /diagnostics                       one status per camera: 1 Hz and at once on a state change

Backends (`backend`, egomimic_hw.cameras.backends): `synthetic` renders the simulated scene from
the arms' measured end-effector poses (`left/ee_pose`, `right/ee_pose`); `replay` plays a recorded
episode (zarr) or image directory (`replay_path`) at its recorded timing; `v4l2` reads a UVC
camera (`<cam>.device`); `realsense` a D405 by serial (`<cam>.serial`). A backend that cannot
start (no library, no device) makes the node exit at start with the fix in the message, never
publish something fake. In simulation and replay one process serves all three cameras (2 cores);
hardware cameras run one process each, so a stuck USB driver takes down one stream only.

Every frame goes through FrameShaper: area-resized to `width` x `height` (default 640x480, what
the models were trained on) and converted to RGB once. Each camera has its own capture thread
(blocking backend reads; the image and the health published right after capture, camera_info
and the JPEG handed to outboxes that send from their own threads: _Stream.__init__ says why;
/diagnostics goes through an outbox as well);
the executor runs the health timer and the parameter callback. The synthetic scene's arm poses are taken by a thread of their own, so a
take that waits in the middleware never holds up a capture (taken.py says how one can).

Health (egomimic_hw.cameras.health): STALLED after `stall_after_s` without a frame (0 = 2.5
periods), FROZEN after `freeze_after_s` of unchanged content, plus rate, jitter, dropped and
duplicated counts. The safety gate treats any state other than OK as a stale camera.

Parameters: the fields of CameraNodeConfig and, per camera, CameraDeviceConfig as
`<cam>.<field>` (egomimic_hw.cameras.config: help, ranges and checks there).

Fault injection, at runtime, for the safety-gate fault battery:
    ros2 param set /eva/cameras inject_fault freeze:front_1   # same content, fresh stamps
    ros2 param set /eva/cameras inject_fault stall:left_wrist  # stop publishing that camera
    ros2 param set /eva/cameras inject_fault ""                # clear
(rclpy: a SetParameters call on `<node>/set_parameters`). Every backend is wrapped in a
FaultInjectingCamera (egomimic_hw.cameras.faults), so any backend can be faulted; faults only
ever make a camera look worse. SIGSTOP of the process is another real stall. Other parameters
are read at start and refused at runtime (read-only).
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

import numpy as np
import simplejpeg
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from egomimic_hw.cameras.backends import open_camera
from egomimic_hw.cameras.base import CameraError, Intrinsics
from egomimic_hw.cameras.config import CameraDeviceConfig, CameraNodeConfig
from egomimic_hw.cameras.faults import FaultInjectingCamera, parse_fault
from egomimic_hw.cameras.health import CameraHealthMonitor, HealthConfig, HealthReport, HealthState
from egomimic_hw.cameras.processing import FrameShaper
from egomimic_hw.description import ARMS
from egomimic_hw.errors import ConfigError
from egomimic_hw.sim_task import target_for
from egomimic_msgs.msg import CameraHealth
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.cdr_length import serialize
from egomimic_nodes.msg_convert import ns_to_stamp, pose_to_array
from egomimic_nodes.outbox import Outbox, close_all, publish_serialized
from egomimic_nodes.params import declare_config
from egomimic_nodes.serialized import SerializedImage, SerializedTemplate
from egomimic_nodes.spin import run_node
from egomimic_nodes.taken import TakenSubscriptions
from egomimic_nodes.thread_sched import ThreadSchedStat

POSE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
"""The scene's ee_pose readers: only the newest pose is drawn."""

READ_TIMEOUT_S = 0.25
EXIT_JOIN_S = 1.2
"""On exit, how long the capture threads and the pose thread together may take to stop (a read
or a pose wait wakes within READ_TIMEOUT_S; a hardware read can take up to ~1 s to time out)."""
"""A capture thread wakes at least this often (to notice shutdown); silence is judged by health."""
SIDE_KEEP = 8
"""Frames an outbox of camera_info or JPEGs holds while its send waits (267 ms at 30 Hz; more
are dropped, oldest first, and counted in /diagnostics)."""
STALE_REPUBLISH_NS = 100_000_000
"""While a camera is not OK and no frame comes, its health is republished every 100 ms."""
LATE_FRAME_PERIODS = 2.0
"""A frame that goes out this many periods or more after its capture stamp is logged (with where
the capture thread's time went meanwhile) and counted (`late_frames`, `late_max_ms` in
/diagnostics): the gate defers commands once a camera's newest frame is 100 ms old, and this says
whether the camera itself was late, and why."""
LATE_LOG_EVERY_S = 1.0
"""A camera's late frames are logged at most once a second, except a new worst."""
DIAG_LEVEL = {
    HealthState.OK: diagnostics.OK,
    HealthState.STARTING: diagnostics.WARN,
    HealthState.STALLED: diagnostics.ERROR,
    HealthState.FROZEN: diagnostics.ERROR,
    HealthState.ERROR: diagnostics.ERROR,
}


def camera_info(camera: str, k: Intrinsics) -> CameraInfo:
    info = CameraInfo()
    info.header.frame_id = f"{camera}_optical"
    info.width, info.height = k.width, k.height
    info.distortion_model = "plumb_bob"
    info.d = [float(x) for x in k.distortion]
    info.k = k.k.ravel().tolist()
    info.r = np.eye(3).ravel().tolist()
    info.p = [k.fx, 0.0, k.cx, 0.0, 0.0, k.fy, k.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return info


def health_message(report: HealthReport, stamp) -> CameraHealth:
    msg = CameraHealth()
    msg.header.stamp = stamp
    msg.header.frame_id = f"{report.camera}_optical"
    msg.camera = report.camera
    msg.state = int(report.state)
    msg.detail = report.detail
    msg.last_frame_stamp = ns_to_stamp(report.last_frame_ns)
    msg.last_change_stamp = ns_to_stamp(report.last_change_ns)
    msg.rate_hz = float(report.rate_hz)
    msg.interval_jitter_s = float(report.interval_jitter_s)
    msg.dropped, msg.duplicated, msg.frames = report.dropped, report.duplicated, report.frames
    return msg


class _Sent(NamedTuple):
    """What the late-frame log knows of the previous frame: when it went out (monotonic s), the
    capture thread's CPU time and run-queue wait then, and how long its sends took (s)."""

    at: float
    cpu_s: float
    waited_ns: int | None
    image_s: float
    health_s: float
    health_middleware_s: float
    rest_s: float


class _Stream:
    """One camera: backend (wrapped for fault injection), shaper, health, publishers and its
    capture thread."""

    def __init__(
        self,
        node: CameraNode,
        camera: str,
        backend: FaultInjectingCamera,
        shaper: FrameShaper,
        health: HealthConfig,
        compressed_quality: int | None,
    ):
        self.node = node
        self.camera = camera
        self.backend = backend
        self.shaper = shaper
        self.monitor = CameraHealthMonitor(camera, health)
        self.pub_image = node.create_publisher(Image, topics.IMAGE_RAW.name(cam=camera), topics.IMAGE_RAW.qos)
        self.pub_info = node.create_publisher(
            CameraInfo, topics.CAMERA_INFO.name(cam=camera), topics.CAMERA_INFO.writer_qos
        )
        self.pub_health = node.create_publisher(
            CameraHealth, topics.CAMERA_HEALTH.name(cam=camera), topics.CAMERA_HEALTH.writer_qos
        )
        self.pub_compressed = (
            node.create_publisher(
                CompressedImage, topics.IMAGE_COMPRESSED.name(cam=camera), topics.IMAGE_COMPRESSED.qos
            )
            if compressed_quality
            else None
        )
        # camera_info and the JPEGs go out from threads of their own (outbox.py): their readers
        # include the recorder and the launcher, which run below the control tier, and a send
        # waits while a descheduled reader holds its shared-memory port. Sent from here, that
        # wait stopped the capture loop, so every camera's next frame and health came late
        # together: make run with recording on saw 15-20 camera STALLED reports, 5-7 off. The
        # raw image (the policy, control tier) and the health (the gate) still go out here,
        # right after capture.
        self.out_info = Outbox(self.pub_info, keep=SIDE_KEEP)
        self.out_compressed = Outbox(self.pub_compressed, keep=SIDE_KEEP) if self.pub_compressed is not None else None
        self.jpeg_quality = compressed_quality
        self.intrinsics = shaper.output_intrinsics(backend.intrinsics)
        self.info = SerializedTemplate(camera_info(camera, self.intrinsics))
        # The Image's bytes are built once and patched per frame (serialized.py): ~1 ms of CPU
        # per frame less than publish(msg), the same bytes on the wire.
        self.image = SerializedImage(f"{camera}_optical", shaper.height, shaper.width)
        # A standard JPEG of the RGB image. The format string follows image_transport's
        # convention: "jpeg compressed bgr8" means "decode with a standard decoder" (cv::imdecode
        # yields BGR); "compressed rgb8" would tell decoders to skip the swap: red/blue exchanged.
        self.compressed = CompressedImage(format="rgb8; jpeg compressed bgr8")
        self.compressed.header.frame_id = f"{camera}_optical"
        self.publish_errors = 0
        self.late_frames = 0
        self.late_max_ns = 0
        self._late_logged = -LATE_LOG_EVERY_S
        self._late_after_ns = int(LATE_FRAME_PERIODS * 1e9 / health.expected_rate_hz)
        self._last_sent: _Sent | None = None
        """The late-frame log's account of the previous frame."""
        self._schedstat: ThreadSchedStat | None = None
        """The capture thread's run-queue wait (opened by that thread: /proc/thread-self)."""
        self.lock = threading.Lock()  # guards last_state / last_health_ns (capture thread vs timer)
        self.last_state = HealthState.STARTING
        self.last_health_ns = 0
        self.thread = threading.Thread(target=self._capture_loop, name=f"capture-{camera}", daemon=True)

    def _capture_loop(self) -> None:
        node = self.node
        self._schedstat = ThreadSchedStat.open()
        try:
            while not node.stopping.is_set():
                try:
                    frame = self.backend.read(READ_TIMEOUT_S)
                except Exception as exc:  # noqa: BLE001 - any backend failure is reported as ERROR, never a silent dead thread
                    why = str(exc) if isinstance(exc, (CameraError, ConfigError)) else f"{type(exc).__name__}: {exc}"
                    self.monitor.on_error(why)
                    node.get_logger().error(f"{self.camera}: {why}", throttle_duration_sec=5.0)
                    node.stopping.wait(0.5)
                    continue
                if frame is None:
                    continue
                self.publish(self.shaper.shape(frame), frame.capture_ns)
        finally:
            if self._schedstat is not None:
                self._schedstat.close()
                self._schedstat = None

    def publish(self, rgb: np.ndarray, capture_ns: int) -> None:
        self._note_lateness(capture_ns)
        sent = time.monotonic()
        try:
            if not publish_serialized(self.pub_image, self.image.fill(capture_ns, rgb)):
                raise RuntimeError("rcl refused the message")
        except Exception as exc:  # noqa: BLE001 - a reliable writer can refuse under overload
            if not self.node.context.ok():  # shutting down: stop capturing quietly
                self.node.stopping.set()
                return
            self.publish_errors += 1
            self.node.get_logger().warning(f"{self.camera}: publish failed: {exc}", throttle_duration_sec=5.0)
        image_sent = time.monotonic()
        report = self.monitor.on_frame(capture_ns, rgb)
        health_middleware_s = self.publish_health(report, capture_ns)
        health_sent = time.monotonic()
        self.info.stamp(capture_ns)
        self.out_info.publish_bytes(bytes(self.info.buffer))  # a copy: the template is patched per frame
        if self.out_compressed is not None:
            self.compressed.header.stamp = ns_to_stamp(capture_ns)
            self.compressed.data = simplejpeg.encode_jpeg(rgb, quality=self.jpeg_quality, colorspace="RGB")
            self.out_compressed.publish_bytes(serialize(self.compressed))
        done = time.monotonic()
        self._last_sent = _Sent(
            done,
            time.thread_time(),
            self._cpu_waited_ns(),
            image_sent - sent,
            health_sent - image_sent,
            health_middleware_s,
            done - health_sent,
        )

    def _cpu_waited_ns(self) -> int | None:
        """This thread's run-queue wait so far (None where /proc gives none)."""
        return self._schedstat.waited_ns() if self._schedstat is not None else None

    def _note_lateness(self, capture_ns: int) -> None:
        """Count and log a frame about to go out LATE_FRAME_PERIODS or more after its capture:
        with this thread's CPU time since the previous frame went out and how long it waited for
        a CPU meanwhile (run and CPU wait about all of the gap: the thread was busy or starved of
        CPU; much less: it slept, on the device, the GIL or a lock) and what the previous frame's
        sends took (the health's also inside the middleware call, which runs without the GIL)."""
        late_ns = self.node._now_ns() - capture_ns
        if late_ns < self._late_after_ns:
            return
        self.late_frames += 1
        worst = late_ns > self.late_max_ns
        self.late_max_ns = max(self.late_max_ns, late_ns)
        now = time.monotonic()
        if self._last_sent is None or (not worst and now - self._late_logged < LATE_LOG_EVERY_S):
            return  # a new worst always goes to the log; the others once a second per camera
        self._late_logged = now
        last = self._last_sent
        waited_ns = self._cpu_waited_ns()
        waited = (
            f"{(waited_ns - last.waited_ns) * 1e-6:.0f} ms"
            if waited_ns is not None and last.waited_ns is not None
            else "?"
        )
        self.node.get_logger().warning(
            f"{self.camera}: frame goes out {late_ns * 1e-6:.0f} ms after its capture stamp ({self.late_frames} so "
            f"far); since the previous frame went out {(now - last.at) * 1e3:.0f} ms ago this thread used "
            f"{(time.thread_time() - last.cpu_s) * 1e3:.0f} ms of CPU and waited {waited} for one (thread "
            f"{threading.get_native_id()}); the previous frame's image send took {last.image_s * 1e3:.1f} ms, its "
            f"health {last.health_s * 1e3:.1f} ms ({last.health_middleware_s * 1e3:.1f} ms in the middleware), its "
            f"info and JPEG {last.rest_s * 1e3:.1f} ms"
        )

    def outbox_stats(self) -> dict:
        """Sent, dropped and failed per outbox, for /diagnostics."""
        out = {}
        for name, box in (("info", self.out_info), ("jpeg", self.out_compressed)):
            if box is not None:
                out.update({f"{name}.{k}": v for k, v in box.stats().items()})
        return out

    def publish_health(self, report: HealthReport, now_ns: int) -> float:
        """Publish `report`; returns the seconds spent inside the middleware call."""
        with self.lock:
            changed = report.state != self.last_state
            self.last_state = report.state
            self.last_health_ns = now_ns
        # Without the GIL, like the images: rclpy's publish() keeps it while a subscriber's
        # shared-memory port is locked (a process that died holding it: 1 s per push), and the
        # node's other threads, its exit included, would stop with this one.
        sent = None
        try:
            data = serialize(health_message(report, ns_to_stamp(now_ns)))
            sent = time.monotonic()
            if not publish_serialized(self.pub_health, data):
                self.publish_errors += 1
        except Exception:  # noqa: BLE001 - counted like image publish failures
            self.publish_errors += 1
        middleware_s = time.monotonic() - sent if sent is not None else 0.0
        if changed:
            self.node.state_changed(self, report)
        return middleware_s

    def check(self, now_ns: int) -> None:
        """Timer path: report silence (and any not-OK state) when frames do not carry it."""
        if self.monitor.state_at(now_ns) == HealthState.OK:
            return  # frames carry an OK report; the timer reports only what is wrong
        report = self.monitor.check(now_ns)
        with self.lock:
            due = report.state != self.last_state or now_ns - self.last_health_ns >= STALE_REPUBLISH_NS
        if report.state != HealthState.OK and due:
            self.publish_health(report, now_ns)


class CameraNode(Node):
    PARAMETERS = ((CameraNodeConfig, "", ()), (CameraDeviceConfig, "<cam>.", ()))
    """What --help lists (declared in _declare_parameters; `<cam>.*` per served camera)."""

    def __init__(self):
        super().__init__("camera")
        self.stopping = threading.Event()
        config, devices = self._declare_parameters()
        self.fault = config.fault
        cameras, backend, width, height = config.cameras, config.backend, config.width, config.height
        self._ee = {arm: np.array([0.3, 0.0, 0.3]) for arm in ARMS}
        self._poses: TakenSubscriptions | None = None
        self._pose_readers = {}
        self._pose_thread: threading.Thread | None = None
        self.pose_errors = 0
        if backend == "synthetic":
            # The scene follows the arms' measured poses: taken, not delivered (taken.py), by a
            # thread that waits on both readers; the capture threads only read the newest.
            self._poses = TakenSubscriptions(self.context, f"{self.get_name()}_poses", self.get_namespace())
            self._pose_readers = {
                arm: self._poses.subscribe(PoseStamped, self.resolve_topic_name(topics.EE_POSE.name(arm)), POSE_QOS)
                for arm in ARMS
            }
            self._pose_thread = threading.Thread(target=self._take_poses, name="camera poses", daemon=True)
        start = time.monotonic() + 0.2  # replay: every camera of this process starts in step
        self._streams: list[_Stream] = []
        try:
            for cam in cameras:
                src = config.source(cam, devices[cam])
                cam_backend = FaultInjectingCamera(
                    open_camera(
                        backend, src, clock_ns=self._now_ns, ee_positions=self._ee_positions, start_monotonic=start
                    ),
                    self.fault,
                )
                shaper = FrameShaper(width, height)
                if shaper.aspect_changes(cam_backend.intrinsics.width, cam_backend.intrinsics.height):
                    self.get_logger().warning(
                        f"{cam}: source {cam_backend.intrinsics.width}x{cam_backend.intrinsics.height} is "
                        f"resized to {width}x{height}: the aspect ratio changes (intrinsics scaled per axis)"
                    )
                self._streams.append(_Stream(self, cam, cam_backend, shaper, config.health, config.compressed_quality))
        except Exception:
            for s in self._streams:
                s.backend.close()
            raise
        # An Outbox like every other output of the control graph: rclpy's publish() keeps the GIL
        # while it waits for a subscriber's shared-memory port, /diagnostics goes to the
        # observers (bag, monitor, web view, launcher), and the capture threads need the GIL.
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos), keep=SIDE_KEEP
        )
        self._diag_lock = threading.Lock()
        self.create_timer(1.0 / config.health_check_hz, self._check_health)
        self.create_timer(1.0, self._publish_diagnostics)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._backend_name = backend
        for s in self._streams:
            s.thread.start()
        if self._pose_thread is not None:
            self._pose_thread.start()
        self.get_logger().info(
            f"{', '.join(cameras)}: {backend} -> {width}x{height} rgb8 at {config.rate_hz} Hz"
            + (f" (fault {config.inject_fault})" if self.fault.active else "")
        )

    def _declare_parameters(self) -> tuple[CameraNodeConfig, dict[str, CameraDeviceConfig]]:
        """The node's config and each camera's (`<cam>.*`), from their dataclasses (declare_config)."""
        config = declare_config(self, CameraNodeConfig)
        devices = {cam: declare_config(self, CameraDeviceConfig, prefix=f"{cam}.") for cam in config.cameras}
        return config, devices

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _ee_positions(self) -> dict:
        """The newest measured EE position of each arm (hardware frame), for the renderers."""
        return self._ee  # replaced whole by the pose thread, never changed in place

    def _take_poses(self) -> None:
        """Keep `_ee` at the newest pose of each arm until the node stops (the only thread that
        takes from the pose readers). A failure is counted (`pose_errors` in /diagnostics),
        logged and retried: the scene keeps the last poses meanwhile."""
        readers = list(self._pose_readers.items())
        subs = [reader for _, reader in readers]
        while not self.stopping.is_set():
            try:
                if not self._poses.wait(subs, READ_TIMEOUT_S):
                    continue
                for arm, reader in readers:
                    taken = self._poses.take(reader)
                    if taken:
                        self._ee = {**self._ee, arm: pose_to_array(taken[-1][0].pose)[:3]}
            except Exception as exc:  # noqa: BLE001 - counted and retried; at shutdown the readers go away
                if self.stopping.is_set():
                    return
                self.pose_errors += 1
                self.get_logger().error(
                    f"taking the arms' poses failed ({self.pose_errors} so far): {exc!r}; the scene keeps "
                    "the last poses, retrying",
                    throttle_duration_sec=5.0,
                )
                self.stopping.wait(READ_TIMEOUT_S)

    def _on_set_parameters(self, params) -> SetParametersResult:
        """`inject_fault` and `task_seed` (synthetic cameras: the box of a new trial) apply at
        once; every other parameter is read at start only."""
        new_fault, new_seed = self.fault, None
        for p in params:
            if p.name == "task_seed":
                if self._backend_name != "synthetic":
                    return SetParametersResult(
                        successful=False, reason=f"task_seed needs the synthetic cameras (backend {self._backend_name})"
                    )
                new_seed = int(p.value)  # the declared range is checked by rclpy before this callback
                continue
            if p.name != "inject_fault":
                return SetParametersResult(successful=False, reason=f"{p.name} is read at start only; restart the node")
            try:
                new_fault = parse_fault(str(p.value), [s.camera for s in self._streams])
            except ConfigError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
        if new_fault != self.fault:
            self.get_logger().warning(f"inject_fault: {new_fault.kind or 'cleared'} {new_fault.camera}".rstrip())
        self.fault = new_fault
        for s in self._streams:
            s.backend.fault = new_fault
        if new_seed is not None:
            target = target_for(new_seed)
            for s in self._streams:
                s.backend.wrapped.set_target(target)
            self.get_logger().info(f"task_seed {new_seed}: " + (f"box {target.describe()}" if target else "no box"))
        return SetParametersResult(successful=True)

    def _check_health(self) -> None:
        now = self._now_ns()
        for s in self._streams:
            s.check(now)

    def state_changed(self, stream: _Stream, report: HealthReport) -> None:
        """Called from a capture thread or the timer: publish /diagnostics at once."""
        if report.state != HealthState.OK:
            self.get_logger().warning(f"{stream.camera}: {report.state.name}: {report.detail}")
        else:
            self.get_logger().info(f"{stream.camera}: OK")
        self._publish_diagnostics()

    def _status(self, s: _Stream):
        r = s.monitor.check(self._now_ns())
        return diagnostics.status(
            f"camera/{s.camera}",
            s.camera,
            DIAG_LEVEL[r.state],
            f"{r.state.name}: {r.detail}",
            {
                "state": r.state.name,
                "backend": self._backend_name,
                "rate_hz": f"{r.rate_hz:.2f}",
                "interval_jitter_ms": f"{r.interval_jitter_s * 1e3:.2f}",
                "dropped": r.dropped,
                "duplicated": r.duplicated,
                "frames": r.frames,
                "publish_errors": s.publish_errors
                + s.out_info.failed
                + (s.out_compressed.failed if s.out_compressed is not None else 0),
                **s.outbox_stats(),
                "late_frames": s.late_frames,
                "late_max_ms": round(s.late_max_ns * 1e-6, 1),
                "pose_errors": self.pose_errors,
                "fault": self.fault.describe(),
            },
        )

    def _publish_diagnostics(self) -> None:
        with self._diag_lock:
            try:
                self._pub_diag.publish(diagnostics.array(self, *[self._status(s) for s in self._streams]))
            except Exception as exc:  # noqa: BLE001 - e.g. during shutdown, from a capture thread
                self.get_logger().warning(f"diagnostics publish failed: {exc}", throttle_duration_sec=5.0)

    def on_exit(self) -> None:
        # Stop and join the capture threads BEFORE closing the devices: releasing an OpenCV
        # capture while a thread is inside grab() is a use-after-free (reads time out in ~1 s).
        # One deadline for all: a thread can also be held up in a publish to a subscriber that
        # died holding its shared-memory port (a SIGKILLed launcher), for seconds; the node must
        # still exit promptly. A device whose thread is still inside it is left to the process
        # exit to release, never closed under the thread.
        self.stopping.set()
        if self._poses is not None:
            self._poses.wake()
        deadline = time.monotonic() + EXIT_JOIN_S
        for s in self._streams:
            s.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._pose_thread is not None:
            self._pose_thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for s in self._streams:
            if s.thread.is_alive():
                self.get_logger().error(
                    f"{s.camera}: capture thread did not stop within {EXIT_JOIN_S:.1f} s "
                    "(a read or a publish blocked); the process exit releases the device"
                )
                continue
            s.backend.close()
        # the outboxes within what is left of the same deadline (a send to a dead subscriber's
        # port can take 1 s; their threads are daemons)
        boxes = [box for s in self._streams for box in (s.out_info, s.out_compressed)] + [self._pub_diag]
        close_all(boxes, max(0.0, deadline - time.monotonic()))

    def destroy_node(self) -> None:
        # The pose readers' companion node is the middleware's teardown, not on_exit's (spin's
        # guard covers it; an orphan skips it): its destroy can wait on a dead process's port.
        if self._poses is not None:
            self._poses.destroy()  # rclpy defers it while a wait or a take still holds a handle
        super().destroy_node()


def main(args=None) -> int:
    return run_node(CameraNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
