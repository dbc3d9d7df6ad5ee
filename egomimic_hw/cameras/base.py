"""What a camera backend delivers, and the intrinsics published with it.

Every backend (synthetic, replay, v4l2, realsense) implements `CameraBackend`: a blocking
`read(timeout_s)` that returns the next `Frame` at the SOURCE resolution, stamped at capture
with the caller's clock, and `close()` that also unblocks a pending read. Resizing to the
published size and the one BGR->RGB conversion happen after, in `processing.FrameShaper`,
so every backend is shaped the same way and a backend cannot feed the wrong size downstream.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import yaml

from egomimic_hw.errors import ConfigError, EgomimicHwError

ClockNs = Callable[[], int]
"""The stamping clock (ns): the node passes its ROS clock so sim time works; default wall time."""


def wall_clock_ns() -> int:
    return time.time_ns()


class CameraError(EgomimicHwError, RuntimeError):
    """A running camera failed (device lost, decode error); the health state becomes ERROR."""


@dataclass(frozen=True)
class Frame:
    """One captured image. `image` is (H, W, 3) uint8 in `encoding` channel order ("rgb8" or
    "bgr8"); it may be a buffer the backend reuses on the next read, so use it before then.
    capture_ns: capture time on the stamping clock (on arrival for v4l2)."""

    image: np.ndarray
    capture_ns: int
    index: int
    encoding: str = "rgb8"


class CameraBackend(Protocol):
    camera: str
    intrinsics: Intrinsics
    """Intrinsics of the SOURCE image (before FrameShaper resizes it)."""

    def read(self, timeout_s: float) -> Frame | None:
        """Block until the next frame; None after `timeout_s` without one or once closed.
        Raises CameraError when the device fails."""

    def close(self) -> None:
        """Release the device; a blocked read returns None promptly."""


HEAD_CAMERA = "front_1"
HEAD_FX_PX = 266.50860444
"""Dataset intrinsics of front_1 at 640x480 (docs/eva.md): fx = fy, principal point at the centre."""


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics of an image (plumb-bob model). `distortion` = (k1, k2, p1, p2, k3) in
    normalized coordinates, so it is unchanged when the image is resampled."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        values = (self.fx, self.fy, self.cx, self.cy, *self.distortion)
        if self.width <= 0 or self.height <= 0 or self.fx <= 0 or self.fy <= 0 or not all(map(math.isfinite, values)):
            raise ConfigError(f"invalid intrinsics {self}")

    def as_dict(self) -> dict:
        return {
            "width": self.width,
            "height": self.height,
            "fx": self.fx,
            "fy": self.fy,
            "cx": self.cx,
            "cy": self.cy,
            "distortion": list(self.distortion),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Intrinsics:
        try:
            return cls(
                int(d["width"]),
                int(d["height"]),
                float(d["fx"]),
                float(d["fy"]),
                float(d["cx"]),
                float(d["cy"]),
                tuple(float(x) for x in d.get("distortion", (0.0,) * 5)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"intrinsics need width, height, fx, fy, cx, cy: {exc} in {d}") from None

    @property
    def k(self) -> np.ndarray:
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def scaled(self, width: int, height: int) -> Intrinsics:
        """The same camera resampled to `width` x `height` (intrinsics scale with the image)."""
        sx, sy = width / self.width, height / self.height
        return Intrinsics(width, height, self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy, self.distortion)


def load_calibration(path: str | Path) -> Intrinsics:
    """Intrinsics from a ROS camera calibration YAML (camera_calibration_parsers format: what
    `cameracalibrator` writes): image_width, image_height, camera_matrix, distortion_coefficients."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"calibration file {path}: {exc}") from None
    try:
        k = [float(x) for x in data["camera_matrix"]["data"]]
        d = tuple(float(x) for x in data.get("distortion_coefficients", {}).get("data", [0.0] * 5))
        model = data.get("distortion_model", "plumb_bob")
        if len(k) != 9:
            raise ValueError(f"camera_matrix needs 9 values, got {len(k)}")
        if model != "plumb_bob":
            raise ValueError(f"distortion_model {model!r} is not supported (plumb_bob only)")
        return Intrinsics(int(data["image_width"]), int(data["image_height"]), k[0], k[4], k[2], k[5], d)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"calibration file {path} is not a camera calibration YAML: {exc}") from None


def default_intrinsics(camera: str, width: int = 640, height: int = 480) -> Intrinsics:
    """EVA's dataset intrinsics for the head camera; a 90-degree-FOV guess for wrist cameras
    until their YAML calibration is loaded (the D405's factory values differ per unit)."""
    if camera == HEAD_CAMERA:
        base = Intrinsics(640, 480, HEAD_FX_PX, HEAD_FX_PX, 320.0, 240.0)
    else:
        base = Intrinsics(640, 480, 320.0, 320.0, 320.0, 240.0)
    return base.scaled(width, height)
