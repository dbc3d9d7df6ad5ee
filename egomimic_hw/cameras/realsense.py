"""Backend `realsense`: an Intel RealSense D405 (EVA's wrist cameras) through pyrealsense2,
chosen by serial number so left and right can never be swapped by USB enumeration order.

pyrealsense2 is imported lazily, only when this backend is chosen, and every way it can be
missing becomes BackendUnavailable with the fix:
- the library is not installed (`pip install pyrealsense2`, cp311 x86_64 wheel 2.59.1.11053);
- it is installed but the system libusb is missing (`ImportError: libusb-1.0.so.0`:
  `apt install libusb-1.0-0`);
- no device with that serial is connected (lists the serials that are; needs USB 3 and the
  librealsense udev rules on the robot PC);
- `pipeline.start` raises (device busy, mode not supported).
Frames are requested as rgb8 (the D405's colour stream; no BGR swap needed), stamped on
arrival with the node's clock, and the intrinsics come from the device (per-unit factory
calibration) unless a calibration file is given.
"""

from __future__ import annotations

import numpy as np

from egomimic_hw.cameras.base import CameraError, ClockNs, Frame, Intrinsics, wall_clock_ns
from egomimic_hw.errors import BackendUnavailable, ConfigError


def import_pyrealsense2():
    """The pyrealsense2 module, or BackendUnavailable saying how to get it."""
    try:
        import pyrealsense2 as rs
    except ImportError as exc:
        if "libusb" in str(exc):
            raise BackendUnavailable(
                f"realsense: pyrealsense2 is installed but cannot load libusb ({exc}); install the system "
                "package libusb-1.0-0 (apt install libusb-1.0-0)"
            ) from None
        raise BackendUnavailable(
            f"realsense: pyrealsense2 is not installed ({exc}); install it on the robot PC "
            "(pip install pyrealsense2==2.59.1.11053, plus libusb-1.0-0 and the librealsense udev rules), "
            "or use camera_backend:=replay / synthetic"
        ) from None
    return rs


def color_data_to_array(data, width: int, height: int) -> np.ndarray:
    """The (H, W, 3) uint8 view of a colour frame buffer (`frame.get_data()`: a buffer object),
    refusing anything that is not the requested rgb8 size (a mode mismatch must not reach a model)."""
    array = np.asanyarray(data)
    if array.dtype != np.uint8 or array.size != width * height * 3:
        raise CameraError(f"realsense: expected {width}x{height} rgb8, got {array.dtype} with shape {array.shape}")
    return array.reshape(height, width, 3)


class RealsenseCamera:
    def __init__(
        self,
        camera: str,
        serial: str,
        *,
        width: int = 640,
        height: int = 480,
        rate_hz: float = 30.0,
        intrinsics: Intrinsics | None = None,
        clock_ns: ClockNs = wall_clock_ns,
    ):
        serial = str(serial).strip()
        if not serial:
            raise ConfigError(
                f"realsense: {camera} needs its serial number ({camera}.serial in the camera config; "
                "`rs-enumerate-devices -s` lists them)"
            )
        rs = import_pyrealsense2()
        self.camera = camera
        self.serial = serial
        self._clock_ns = clock_ns
        connected = [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]
        if serial not in connected:
            raise BackendUnavailable(
                f"realsense: no device with serial {serial} for {camera}; connected: "
                f"{connected or 'none'} (USB 3 port? udev rules?)"
            )
        self._rs = rs
        self._pipeline = rs.pipeline()
        config = rs.config()
        config.enable_device(serial)
        config.enable_stream(rs.stream.color, width, height, rs.format.rgb8, int(round(rate_hz)))
        try:
            profile = self._pipeline.start(config)
        except RuntimeError as exc:
            raise BackendUnavailable(
                f"realsense {serial}: cannot start {width}x{height} rgb8 at {rate_hz} Hz: {exc}"
            ) from None
        self.width, self.height = width, height
        if intrinsics is None:
            i = profile.get_stream(rs.stream.color).as_video_stream_profile().get_intrinsics()
            intrinsics = Intrinsics(i.width, i.height, i.fx, i.fy, i.ppx, i.ppy, tuple(float(c) for c in i.coeffs))
        self.intrinsics = intrinsics
        self._closed = False

    def read(self, timeout_s: float) -> Frame | None:
        if self._closed:
            return None
        try:
            ok, frames = self._pipeline.try_wait_for_frames(int(timeout_s * 1000))
        except RuntimeError as exc:
            raise CameraError(f"realsense {self.serial}: {exc}") from None
        if not ok:
            return None
        stamp = self._clock_ns()
        color = frames.get_color_frame()
        if not color:
            return None
        image = color_data_to_array(color.get_data(), self.width, self.height)
        return Frame(image, stamp, int(color.get_frame_number()), "rgb8")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pipeline.stop()
