"""What a camera backend delivers, and the intrinsics published with it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egomimic_hw.errors import ConfigError

HEAD_CAMERA = "front_1"
HEAD_FX_PX = 266.50860444
"""Dataset intrinsics of front_1 at 640x480 (EVA.md): fx = fy, principal point at the centre."""


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics of the published image (plumb-bob model, no distortion)."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0 or self.fx <= 0 or self.fy <= 0:
            raise ConfigError(f"invalid intrinsics {self}")

    @property
    def k(self) -> np.ndarray:
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def scaled(self, width: int, height: int) -> "Intrinsics":
        """The same camera resampled to `width` x `height` (intrinsics scale with the image)."""
        sx, sy = width / self.width, height / self.height
        return Intrinsics(width, height, self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy)


def default_intrinsics(camera: str, width: int = 640, height: int = 480) -> Intrinsics:
    """EVA's dataset intrinsics for the head camera; a 90-degree-FOV guess for wrist cameras
    until their YAML calibration is loaded (the D405's factory values differ per unit)."""
    if camera == HEAD_CAMERA:
        base = Intrinsics(640, 480, HEAD_FX_PX, HEAD_FX_PX, 320.0, 240.0)
    else:
        base = Intrinsics(640, 480, 320.0, 320.0, 320.0, 240.0)
    return base.scaled(width, height)
