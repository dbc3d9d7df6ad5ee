"""Camera node: publishes `cameras/<camera>/image_raw` (rgb8, stamp = capture time) and
`cameras/<camera>/camera_info` at `rate_hz`, for each camera in `cameras`.

Backends by parameter `backend`: `synthetic` renders the simulated scene from the arms'
measured end-effector poses (`left/ee_pose`, `right/ee_pose`), so the picture moves with the
arms. In simulation one process serves all three cameras (one pose subscription instead of
three: on 2 cores every 100 Hz subscription counts); hardware cameras run one process each.
Hardware backends (v4l2, realsense) and replay arrive with the ingestion issue; asking for
them now fails at start with that message rather than publishing something fake.
"""

from __future__ import annotations

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image

from egomimic_hw.cameras.base import Intrinsics, default_intrinsics
from egomimic_hw.cameras.synthetic import SyntheticScene
from egomimic_hw.description import ARMS, CAMERAS
from egomimic_hw.errors import ConfigError
from egomimic_nodes import diagnostics, qos
from egomimic_nodes.msg_convert import fill_image, pose_to_array
from egomimic_nodes.spin import run_node

BACKENDS = ("synthetic",)


def camera_info(camera: str, k: Intrinsics) -> CameraInfo:
    info = CameraInfo()
    info.header.frame_id = f"{camera}_optical"
    info.width, info.height = k.width, k.height
    info.distortion_model = "plumb_bob"
    info.d = [0.0] * 5
    info.k = k.k.ravel().tolist()
    info.r = np.eye(3).ravel().tolist()
    info.p = [k.fx, 0.0, k.cx, 0.0, 0.0, k.fy, k.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return info


class _Stream:
    """One camera's publishers, scene and counters."""

    def __init__(self, node: Node, camera: str, width: int, height: int):
        self.camera = camera
        self.intrinsics = default_intrinsics(camera, width, height)
        self.scene = SyntheticScene(camera, self.intrinsics, seed=CAMERAS.index(camera))
        prefix = f"cameras/{camera}"
        self.pub_image = node.create_publisher(Image, f"{prefix}/image_raw", qos.SENSOR)
        self.pub_info = node.create_publisher(CameraInfo, f"{prefix}/camera_info", qos.SENSOR)
        self.info = camera_info(camera, self.intrinsics)
        self.image = Image()
        self.image.header.frame_id = f"{camera}_optical"
        self.frames = 0
        self.publish_errors = 0


class CameraNode(Node):
    def __init__(self):
        super().__init__("camera")
        cameras = list(self.declare_parameter("cameras", ["front_1"]).value)
        backend = self.declare_parameter("backend", "synthetic").value
        width = self.declare_parameter("width", 640).value
        height = self.declare_parameter("height", 480).value
        rate_hz = float(self.declare_parameter("rate_hz", 30.0).value)
        unknown = [c for c in cameras if c not in CAMERAS]
        if unknown or not cameras:
            raise ConfigError(f"unknown camera(s) {unknown or cameras}; choices: {list(CAMERAS)}")
        if backend not in BACKENDS:
            raise ConfigError(f"camera backend {backend!r} is not available yet; choices: {list(BACKENDS)}")
        if not 1.0 <= rate_hz <= 120.0:
            raise ConfigError(f"rate_hz must be in [1, 120], got {rate_hz}")
        self._streams = [_Stream(self, cam, width, height) for cam in cameras]
        self._ee = {arm: np.array([0.3, 0.0, 0.3]) for arm in ARMS}
        for arm in ARMS:
            self.create_subscription(PoseStamped, f"{arm.value}/ee_pose", self._pose_cb(arm), qos.SENSOR)
        self._pub_diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(1.0 / rate_hz, self._on_tick)
        self.create_timer(1.0, self._publish_diagnostics)
        self.get_logger().info(f"{', '.join(cameras)}: {backend} {width}x{height} rgb8 at {rate_hz} Hz")

    def _pose_cb(self, arm):
        def cb(msg: PoseStamped) -> None:
            self._ee[arm] = pose_to_array(msg.pose)[:3]
        return cb

    def _on_tick(self) -> None:
        for s in self._streams:
            frame = s.scene.render(self._ee, s.frames)
            stamp = self.get_clock().now().to_msg()  # capture time of the synthetic frame
            s.image.header.stamp = stamp
            fill_image(s.image, frame)
            s.info.header.stamp = stamp
            try:
                s.pub_image.publish(s.image)
                s.pub_info.publish(s.info)
                s.frames += 1
            except Exception as exc:  # noqa: BLE001 - a reliable writer can refuse under overload
                s.publish_errors += 1
                self.get_logger().warning(f"{s.camera}: publish failed: {exc}", throttle_duration_sec=5.0)

    def _publish_diagnostics(self) -> None:
        self._pub_diag.publish(diagnostics.array(self, *[
            diagnostics.status(f"camera/{s.camera}", s.camera, diagnostics.OK if not s.publish_errors else diagnostics.WARN,
                               "publishing", {"frames": s.frames, "publish_errors": s.publish_errors})
            for s in self._streams
        ]))


def main(args=None) -> int:
    return run_node(CameraNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
