"""Shape every source frame into what the graph publishes: RGB uint8 at the output size.

Why here and not in each backend: the upstream rollout fed 960x720 frames to a model trained
on 640x480. One shaper after every backend makes the published size a parameter of the node
(default 640x480) that no backend can bypass. Resizing uses area interpolation (the right
filter for downscaling: it averages, so no aliasing), and the channel swap of BGR sources
(OpenCV) happens exactly once, after the resize, on the fewer pixels. Both write into
preallocated buffers: no per-frame allocation besides the message copy.
"""

from __future__ import annotations

import cv2
import numpy as np

from egomimic_hw.cameras.base import Frame, Intrinsics
from egomimic_hw.errors import ConfigError

ENCODINGS = ("rgb8", "bgr8")
OUTPUT_SIZE_RANGE_PX = (16, 4096)
"""Published width and height, inclusive (the node's `width`/`height` range): 4096 x 4096 rgb8
is already 48 MiB per message."""


class FrameShaper:
    """Source frames of any size -> (height, width, 3) RGB. The returned array is reused."""

    def __init__(self, width: int, height: int):
        lo, hi = OUTPUT_SIZE_RANGE_PX
        if not (lo <= width <= hi and lo <= height <= hi):
            raise ConfigError(f"output size must be within {lo}..{hi} px, got {width}x{height}")
        self.width, self.height = int(width), int(height)
        self._resized = np.empty((self.height, self.width, 3), np.uint8)
        self._rgb = np.empty((self.height, self.width, 3), np.uint8)

    def output_intrinsics(self, source: Intrinsics) -> Intrinsics:
        """Intrinsics of the published image given the source camera's."""
        if (source.width, source.height) == (self.width, self.height):
            return source
        return source.scaled(self.width, self.height)

    def aspect_changes(self, source_width: int, source_height: int) -> bool:
        """True when resizing would stretch the image (fx/fy then scale differently: correct
        intrinsics, but a model trained on undistorted aspect sees a stretched scene)."""
        return abs(source_width * self.height - source_height * self.width) > max(source_width, source_height) // 100

    def shape(self, frame: Frame) -> np.ndarray:
        image = frame.image
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ConfigError(f"frames must be (H, W, 3) uint8, got {image.dtype} {image.shape}")
        if frame.encoding not in ENCODINGS:
            raise ConfigError(f"frame encoding {frame.encoding!r} is not one of {ENCODINGS}")
        if image.shape[:2] != (self.height, self.width):
            cv2.resize(image, (self.width, self.height), dst=self._resized, interpolation=cv2.INTER_AREA)
            image = self._resized
        if frame.encoding == "bgr8":
            cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=self._rgb)
            return self._rgb
        return image


def fingerprint(image: np.ndarray, samples_per_row: int = 80) -> np.ndarray:
    """A small int16 copy of `image` (every k-th row and column, ~80 x 60 for 640x480) for the
    frozen/duplicate checks: ~15 us per frame instead of comparing 921 600 bytes."""
    step = max(1, image.shape[1] // samples_per_row)
    return image[::step, ::step].astype(np.int16)
