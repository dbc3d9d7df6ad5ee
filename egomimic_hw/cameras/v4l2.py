"""Backend `v4l2`: a UVC camera through OpenCV's V4L2 backend (EVA's head camera on the robot PC).

Settings, each for a reason:
- MJPG requested: raw YUYV at 640x480 saturates USB 2 at 30 fps on many cameras;
- buffer size 1: the driver otherwise queues 4+ frames and `read` hands out a frame ~100 ms
  old while its stamp says "now";
- stamped on arrival (right after `grab()` returns, before decoding), with the node's clock;
- frames come out of OpenCV in BGR: marked "bgr8" and converted exactly once by FrameShaper.
Without a device, OpenCV returns an unopened capture in ~1 ms (no exception): that becomes
BackendUnavailable naming the device and what to check.
`capture=` accepts any object with OpenCV's VideoCapture interface; tests pass a real
cv2.VideoCapture on a recorded MJPG file to run the same frame handling without a camera.
"""

from __future__ import annotations

import glob

import cv2
import numpy as np

from egomimic_hw.cameras.base import CameraError, ClockNs, Frame, Intrinsics, default_intrinsics, wall_clock_ns
from egomimic_hw.errors import BackendUnavailable, ConfigError

READ_FAILURES_BEFORE_ERROR = 3
"""Consecutive failed grabs before the camera is reported lost (one can be a USB hiccup)."""


def _device_arg(device: str) -> int | str:
    device = str(device).strip()
    if not device:
        raise ConfigError("v4l2 needs a device: '/dev/video0', a /dev/v4l/by-id/... path, or an index '0'")
    return int(device) if device.isdigit() else device


class V4l2Camera:
    def __init__(
        self,
        camera: str,
        device: str,
        *,
        width: int = 640,
        height: int = 480,
        rate_hz: float = 30.0,
        intrinsics: Intrinsics | None = None,
        clock_ns: ClockNs = wall_clock_ns,
        capture=None,
    ):
        self.camera = camera
        self.device = device
        self._clock_ns = clock_ns
        if capture is None:
            capture = cv2.VideoCapture(_device_arg(device), cv2.CAP_V4L2)
            if not capture.isOpened():
                present = sorted(glob.glob("/dev/video*")) or "none"
                raise BackendUnavailable(
                    f"v4l2: cannot open {device!r} for {camera} (video devices present: {present}); check the "
                    "cable, the device path in the camera config, and that the user is in the 'video' group"
                )
            capture.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter.fourcc(*"MJPG"))
            capture.set(cv2.CAP_PROP_FRAME_WIDTH, width)
            capture.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
            capture.set(cv2.CAP_PROP_FPS, rate_hz)
            capture.set(cv2.CAP_PROP_BUFFERSIZE, 1)
            if hasattr(cv2, "CAP_PROP_READ_TIMEOUT_MSEC"):
                capture.set(cv2.CAP_PROP_READ_TIMEOUT_MSEC, 1000)
        elif not capture.isOpened():
            raise BackendUnavailable(f"v4l2: the capture given for {camera} is not open")
        self._capture = capture
        w = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)) or width
        h = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)) or height
        self.source_size = (w, h)
        # No factory intrinsics over V4L2: a calibration file should be given (node parameter).
        self.intrinsics = intrinsics.scaled(w, h) if intrinsics else default_intrinsics(camera, w, h)
        self._buffer: np.ndarray | None = None
        self._index = 0
        self._failures = 0
        self._closed = False

    def read(self, timeout_s: float) -> Frame | None:
        """Blocks for the next frame (the device paces it). `timeout_s` is bounded by the
        driver's read timeout (1 s) rather than by this call."""
        if self._closed:
            return None
        if not self._capture.grab():
            self._failures += 1
            if self._closed:
                return None
            if self._failures >= READ_FAILURES_BEFORE_ERROR:
                raise CameraError(f"v4l2 {self.device}: no frame in {self._failures} attempts (device lost?)")
            return None
        stamp = self._clock_ns()  # on arrival, before the decode
        ok, image = self._capture.retrieve(self._buffer)
        if not ok or image is None:
            raise CameraError(f"v4l2 {self.device}: frame {self._index} could not be decoded")
        if image.ndim != 3 or image.shape[2] != 3:
            raise CameraError(f"v4l2 {self.device}: expected a 3-channel frame, got shape {image.shape}")
        self._buffer = image
        self._failures = 0
        frame = Frame(image, stamp, self._index, "bgr8")
        self._index += 1
        return frame

    def close(self) -> None:
        self._closed = True
        self._capture.release()
