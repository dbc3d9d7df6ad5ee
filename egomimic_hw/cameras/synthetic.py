"""Synthetic camera: renders the simulated EVA scene from the arms' measured poses.

Not a static picture: the head camera (front_1) sees two markers at the projections of the
left and right end effectors (link6, `description.EEF_LINK`, the point of every pose here)
through EVA's camera-to-arm-base extrinsics and intrinsics, and each wrist camera sees a
textured table that slides and scales with its own end effector. A
small time code block changes every frame, as sensor noise does on a real camera, so a frozen
renderer is distinguishable from a still scene.

Optional `target` (the simulated task's box, egomimic_hw.sim_task): the head camera draws it
through the same extrinsics and intrinsics as the markers, each wrist camera draws it from
above, growing as the end effector comes down to it, when it falls in the view. The images are
the only place a policy can learn where the box is.

Cost: one precomputed texture per camera; each frame is a crop (a view) plus drawing two
markers in their bounding boxes: well under a millisecond, so three streams fit on 2 cores.
The box is static in the head camera, so it is drawn once into that camera's background; a
wrist camera projects 8 corners and fills two polygons per frame.

`SyntheticCamera` is the backend: it paces rendering at `rate_hz` (monotonic deadlines, a late
frame skips ahead instead of bursting) and stamps each frame when it is rendered.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

import cv2
import numpy as np

from egomimic_hw.cameras.base import HEAD_CAMERA, ClockNs, Frame, Intrinsics, wall_clock_ns
from egomimic_hw.description import CAMERAS, Arm
from egomimic_hw.errors import ConfigError
from egomimic_hw.pacing import Pacer

BASE_T_HEAD_CAMERA = {
    Arm.LEFT: np.array(
        [
            [0.01329544, -0.71757193, 0.69635749, -0.04409191],
            [-0.99959782, -0.02698416, -0.00872107, -0.23221381],
            [0.02504862, -0.69596148, -0.7176421, 0.57323278],
            [0.0, 0.0, 0.0, 1.0],
        ]
    ),
    Arm.RIGHT: np.array(
        [
            [-0.04733948, -0.76631195, 0.64072222, -0.01998031],
            [-0.9983006, 0.05811952, -0.00424732, 0.32539554],
            [-0.0339837, -0.63983444, -0.76776103, 0.64809634],
            [0.0, 0.0, 0.0, 1.0],
        ]
    ),
}
"""Camera-to-arm-base extrinsics of the head camera (base_T_cam, docs/eva.md)."""

MARKER_COLOURS = {Arm.LEFT: (230, 60, 40), Arm.RIGHT: (40, 90, 230)}
TEXTURE_MARGIN_PX = 160
WRIST_PX_PER_M = 800.0
WRIST_SCENE_CENTRE_X_M = 0.21
WRIST_SCENE_CENTRE_Z_M = 0.35
"""Where the wrist view is centred (texture unshifted, mid-grey height band): the link6 x and z
of the sim arms' start pose (FK of `SimConfig.initial_joints_rad`: 0.212, 0.351 m), so the scene
starts centred and keeps 0.2 m of travel (TEXTURE_MARGIN_PX / WRIST_PX_PER_M) either way."""


HEAD_CAMERA_T_BASE = {arm: np.linalg.inv(t) for arm, t in BASE_T_HEAD_CAMERA.items()}

TARGET_SIDE_COLOUR = (200, 170, 30)
TARGET_TOP_COLOUR = (250, 225, 90)
"""The box's sides and top face: a yellow unlike the markers, lit from above."""
TARGET_FRAME_ARM = Arm.LEFT
"""The head camera projects the box through this arm's extrinsics (the task frame's base)."""
WRIST_REFERENCE_DEPTH_M = 0.3
WRIST_MIN_DEPTH_M = 0.12
"""A wrist view draws the box at WRIST_PX_PER_M where it lies this far below the end effector
(about the start pose above the table), larger as it comes nearer, up to 2.5x at the minimum
depth: the camera sits behind link6, so the box never fills its view."""


class SceneBox(Protocol):
    """A box in the scene (egomimic_hw.sim_task.TargetBox): 8 corners in an arm's base frame,
    bottom face then top face, each face's corners in polygon order."""

    def corners(self, arm: Arm) -> np.ndarray: ...


def project_to_head_camera(
    arm: Arm, position_base_m: np.ndarray, intrinsics: Intrinsics
) -> tuple[float, float, float] | None:
    """Pixel (u, v) and depth of a point in `arm`'s base frame, or None when behind the camera."""
    cam_t_base = HEAD_CAMERA_T_BASE[arm]
    p = cam_t_base[:3, :3] @ np.asarray(position_base_m, float) + cam_t_base[:3, 3]
    if p[2] <= 1e-3:
        return None
    return intrinsics.fx * p[0] / p[2] + intrinsics.cx, intrinsics.fy * p[1] / p[2] + intrinsics.cy, float(p[2])


def _texture(height: int, width: int, seed: int, checker_px: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    checker = ((yy // checker_px + xx // checker_px) % 2).astype(np.float32)
    base = rng.integers(60, 200, size=3).astype(np.float32)
    img = base[None, None, :] * (0.75 + 0.25 * checker[..., None])
    img[..., 0] += 40.0 * xx / width
    img[..., 2] += 40.0 * yy / height
    return np.clip(img, 0, 255).astype(np.uint8)


class SyntheticScene:
    """Renders one camera's frame from the latest end-effector positions (hardware frame),
    and the task's box where one is given (`target`, settable; None: no box)."""

    def __init__(self, camera: str, intrinsics: Intrinsics, seed: int = 0, target: SceneBox | None = None):
        self.camera = camera
        self.intrinsics = intrinsics
        h, w = intrinsics.height, intrinsics.width
        m = TEXTURE_MARGIN_PX
        self._texture = _texture(h + 2 * m, w + 2 * m, seed, checker_px=max(8, w // 16))
        self._frame = np.empty((h, w, 3), dtype=np.uint8)
        self._wrist_arm = Arm.LEFT if camera.startswith("left") else Arm.RIGHT
        self.target = target

    @property
    def target(self) -> SceneBox | None:
        return self._target

    @target.setter
    def target(self, target: SceneBox | None) -> None:
        """Place (or remove) the box: the head camera's background is redrawn once here."""
        self._target = target
        h, w = self.intrinsics.height, self.intrinsics.width
        m = TEXTURE_MARGIN_PX
        self._head_background = self._texture[m : m + h, m : m + w]
        self._target_corners = None  # a wrist camera's box, in its arm's base
        if target is not None and self.camera != HEAD_CAMERA:
            self._target_corners = np.asarray(target.corners(self._wrist_arm), float)
        if target is not None and self.camera == HEAD_CAMERA:
            corners = target.corners(TARGET_FRAME_ARM)
            pixels = [project_to_head_camera(TARGET_FRAME_ARM, c, self.intrinsics) for c in corners]
            if all(p is not None for p in pixels):
                uv = np.array([p[:2] for p in pixels if p is not None])
                self._frame[:] = self._head_background
                self._fill_box(uv)
                self._head_background = self._frame.copy()

    def render(self, ee_positions_m: dict[Arm, np.ndarray], frame_index: int) -> np.ndarray:
        """RGB frame (H, W, 3) uint8; the returned array is reused by the next call."""
        h, w = self.intrinsics.height, self.intrinsics.width
        m = TEXTURE_MARGIN_PX
        if self.camera == HEAD_CAMERA:
            self._frame[:] = self._head_background
            for arm, pos in ee_positions_m.items():
                pix = project_to_head_camera(arm, pos, self.intrinsics)
                if pix is not None:
                    radius = int(np.clip(40.0 / pix[2], 6, 60))
                    self._draw_disc(pix[0], pix[1], radius, MARKER_COLOURS[arm])
        else:
            pos = ee_positions_m.get(self._wrist_arm, np.zeros(3))
            dx = int(np.clip(pos[1] * WRIST_PX_PER_M, -m, m))
            dy = int(np.clip((pos[0] - WRIST_SCENE_CENTRE_X_M) * WRIST_PX_PER_M, -m, m))
            self._frame[:] = self._texture[m + dy : m + dy + h, m + dx : m + dx + w]
            if self._target_corners is not None:
                self._draw_box_from_above(self._target_corners, np.asarray(pos, float))
            shade = int(np.clip(128 + (pos[2] - WRIST_SCENE_CENTRE_Z_M) * 400.0, 0, 255))
            self._frame[h - 24 :, :, 1] = shade  # a band whose brightness tracks the height
        self._draw_timecode(frame_index)
        return self._frame

    def _draw_box_from_above(self, c: np.ndarray, ee: np.ndarray) -> None:
        """The box as the wrist camera sees it looking down from link6: a table point (x, y)
        lies where the sliding texture puts it (WRIST_PX_PER_M at the reference depth), scaled
        by reference depth / depth, so the box grows as the end effector comes down."""
        h, w = self.intrinsics.height, self.intrinsics.width
        scale = WRIST_PX_PER_M * WRIST_REFERENCE_DEPTH_M / np.maximum(ee[2] - c[:, 2], WRIST_MIN_DEPTH_M)
        u = 0.5 * w + (c[:, 1] - ee[1]) * scale
        v = 0.5 * h + (c[:, 0] - ee[0]) * scale
        if u.max() < 0 or v.max() < 0 or u.min() >= w or v.min() >= h:
            return  # out of view
        self._fill_box(np.stack([u, v], axis=1))

    def _fill_box(self, uv: np.ndarray) -> None:
        """Sides (the hull of all 8 corners), then the top face over them."""
        pts = np.clip(np.rint(uv), -1e5, 1e5).astype(np.int32)  # cv2 wants int32 pixels
        cv2.fillConvexPoly(self._frame, cv2.convexHull(pts), TARGET_SIDE_COLOUR, lineType=cv2.LINE_8)
        cv2.fillConvexPoly(self._frame, pts[4:], TARGET_TOP_COLOUR, lineType=cv2.LINE_8)

    def _draw_disc(self, u: float, v: float, radius: int, colour: tuple[int, int, int]) -> None:
        """A filled disc centred on the pixel nearest (u, v) (OpenCV: a per-frame mgrid and
        mask made the head camera's frame 1.9 ms instead of about 0.2 ms)."""
        h, w = self.intrinsics.height, self.intrinsics.width
        cu, cv = math.floor(u + 0.5), math.floor(v + 0.5)
        if cu + radius < 0 or cv + radius < 0 or cu - radius >= w or cv - radius >= h:
            return  # outside the image (cv2 wants int32 centres)
        cv2.circle(self._frame, (cu, cv), radius, colour, thickness=-1, lineType=cv2.LINE_8)

    def _draw_timecode(self, frame_index: int) -> None:
        # 8 px per bit: the health fingerprint samples every 8th column, so it sees every bit
        # and a still scene is never mistaken for a frozen camera.
        bits = (frame_index >> np.arange(16)) & 1
        block = np.repeat(np.where(bits, 255, 0).astype(np.uint8), 8)
        self._frame[0:8, 0 : block.size, :] = block[None, :, None]


class SyntheticCamera:
    """Backend `synthetic`: renders `camera` at `rate_hz` from `ee_positions()` (hardware frame,
    per arm), i.e. the latest measured end-effector positions the node received, with the
    task's box `target` in view where one is given."""

    def __init__(
        self,
        camera: str,
        intrinsics: Intrinsics,
        rate_hz: float,
        ee_positions: Callable[[], dict[Arm, np.ndarray]],
        *,
        clock_ns: ClockNs = wall_clock_ns,
        target: SceneBox | None = None,
    ):
        if camera not in CAMERAS:
            raise ConfigError(f"unknown camera {camera!r}; choices: {list(CAMERAS)}")
        self.camera = camera
        self.intrinsics = intrinsics
        self._scene = SyntheticScene(camera, intrinsics, seed=CAMERAS.index(camera), target=target)
        self._ee_positions = ee_positions
        self._clock_ns = clock_ns
        self._pacer = Pacer(rate_hz)
        self._index = 0
        self._new_target: tuple[SceneBox | None] | None = None
        self._target_lock = threading.Lock()

    @property
    def target(self) -> SceneBox | None:
        return self._scene.target

    def set_target(self, target: SceneBox | None) -> None:
        """Show `target` (None: no box) from the next frame on. Safe from any thread: the box is
        placed by the capture thread before it renders, never under a frame being published."""
        with self._target_lock:
            self._new_target = (target,)

    def read(self, timeout_s: float) -> Frame | None:
        if not self._pacer.wait(timeout_s):
            return None
        with self._target_lock:
            new, self._new_target = self._new_target, None
        if new is not None:
            self._scene.target = new[0]
        image = self._scene.render(self._ee_positions(), self._index)
        frame = Frame(image, self._exposure_ns(), self._index)
        self._index += 1
        return frame

    def _exposure_ns(self) -> int:
        """The frame's capture stamp: the instant its exposure was due, on the stamping clock.
        A hardware camera exposes on its own clock whatever the host does and is stamped then
        (the replay backend keeps the recording's stamps alike); stamping when the render ends
        instead put the host's wake-up and render delays into the stamps: a 600 s recording on
        the 2-core machine saw one camera's stamps 70-75 ms apart (a 33 ms period), and the
        recorder, which pairs cameras by capture stamp within 30 ms, lost 11 of 53,838 frames."""
        late_s = time.monotonic() - self._pacer.last_due if self._pacer.last_due is not None else 0.0
        return self._clock_ns() - int(max(0.0, late_s) * 1e9)

    def close(self) -> None:
        self._pacer.stop()
