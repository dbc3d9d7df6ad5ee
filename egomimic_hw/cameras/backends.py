"""Camera backend selection: one explicit table keyed by the `camera_backend` value.

Each opener imports its module lazily, so OpenCV's V4L2 path or pyrealsense2 are only touched
when chosen; unknown names raise with the choices. A grep for a backend name finds it here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from egomimic_hw.cameras.base import (
    CameraBackend,
    ClockNs,
    Intrinsics,
    default_intrinsics,
    load_calibration,
    wall_clock_ns,
)
from egomimic_hw.description import Arm
from egomimic_hw.errors import ConfigError


@dataclass(frozen=True)
class CameraSource:
    """Everything a backend may need for one camera; unused fields are ignored by the others."""

    camera: str
    width: int = 640
    height: int = 480
    """Requested source size (v4l2, realsense); the published size is the node's width/height."""
    rate_hz: float = 30.0
    device: str = ""
    """v4l2: /dev/videoN, a /dev/v4l/by-id/ path, or an index."""
    serial: str = ""
    """realsense: the device's serial number."""
    calibration_file: str = ""
    """A ROS camera calibration YAML; overrides the backend's intrinsics."""
    replay_path: str = ""
    replay_loop: bool = True
    replay_fps: float = 30.0
    """Timing of an image directory without timestamps.txt (episodes carry their own)."""
    task_seed: int = -1
    """synthetic: the simulated task's box from this seed (egomimic_hw.sim_task); -1 = no task."""


def _calibration(src: CameraSource) -> Intrinsics | None:
    return load_calibration(src.calibration_file) if src.calibration_file else None


def _open_synthetic(src, clock_ns, ee_positions, start_monotonic):
    from egomimic_hw.cameras.synthetic import SyntheticCamera
    from egomimic_hw.sim_task import target_for

    if ee_positions is None:
        raise ConfigError("synthetic cameras need the arms' end-effector positions (ee_positions)")
    k = _calibration(src) or default_intrinsics(src.camera, src.width, src.height)
    return SyntheticCamera(
        src.camera,
        k.scaled(src.width, src.height),
        src.rate_hz,
        ee_positions,
        clock_ns=clock_ns,
        target=target_for(src.task_seed),
    )


def _open_replay(src, clock_ns, ee_positions, start_monotonic):
    from egomimic_hw.cameras.replay import ReplayCamera

    cam = ReplayCamera(
        src.camera,
        src.replay_path,
        loop=src.replay_loop,
        fps=src.replay_fps,
        clock_ns=clock_ns,
        start_monotonic=start_monotonic,
    )
    k = _calibration(src)
    if k is not None:
        cam.intrinsics = k
    return cam


def _open_v4l2(src, clock_ns, ee_positions, start_monotonic):
    from egomimic_hw.cameras.v4l2 import V4l2Camera

    return V4l2Camera(
        src.camera,
        src.device,
        width=src.width,
        height=src.height,
        rate_hz=src.rate_hz,
        intrinsics=_calibration(src),
        clock_ns=clock_ns,
    )


def _open_realsense(src, clock_ns, ee_positions, start_monotonic):
    from egomimic_hw.cameras.realsense import RealsenseCamera

    return RealsenseCamera(
        src.camera,
        src.serial,
        width=src.width,
        height=src.height,
        rate_hz=src.rate_hz,
        intrinsics=_calibration(src),
        clock_ns=clock_ns,
    )


OPENERS = {
    "synthetic": _open_synthetic,
    "replay": _open_replay,
    "v4l2": _open_v4l2,
    "realsense": _open_realsense,
}
BACKENDS = tuple(OPENERS)


def open_camera(
    backend: str,
    source: CameraSource,
    *,
    clock_ns: ClockNs = wall_clock_ns,
    ee_positions: Callable[[], dict[Arm, np.ndarray]] | None = None,
    start_monotonic: float | None = None,
) -> CameraBackend:
    """Open `source.camera` with `backend`. Raises ConfigError (bad settings) or
    BackendUnavailable (library/device missing), each saying what to fix."""
    opener = OPENERS.get(backend)
    if opener is None:
        raise ConfigError(f"unknown camera backend {backend!r}; choices: {list(BACKENDS)}")
    return opener(source, clock_ns, ee_positions, start_monotonic)
