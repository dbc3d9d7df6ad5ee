"""Tiny synthetic EVA episodes for the training tests, written through the real EpisodeWriter.

Each step t is recognizable: every pixel of camera c at step t is `frame_value(t, c)` (a flat
image survives JPEG to within a grey level), the measured left x is `X0 + DX * t` and the
commanded pose leads the measured one by one step, with a slow yaw so the rotation part of the
wrist-relative encoding is not the identity.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from egomimic_data.episode_format import EpisodeMeta, EpisodeWriter
from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.rotations import mat_to_quat, ypr_to_mat

WIDTH, HEIGHT = 64, 48
X0, DX = 0.30, 0.002
YAW_PER_STEP = 0.01
STEP_NS = 33_333_333


def frame_value(t: int, camera: str) -> int:
    return (10 + 7 * t + 60 * CAMERAS.index(camera)) % 256


def measured_pose(arm: Arm, t: float) -> np.ndarray:
    y = 0.1 if arm is Arm.LEFT else -0.1
    quat = mat_to_quat(ypr_to_mat(np.array([YAW_PER_STEP * t, 0.1, -0.2])))
    return np.concatenate([[X0 + DX * t, y, 0.2 + 0.001 * t], quat])


def gripper(t: float) -> float:
    return float(0.5 + 0.4 * np.sin(0.3 * t))


def flat_image(t: int, camera: str, height: int, width: int) -> np.ndarray:
    return np.full((height, width, 3), frame_value(t, camera), np.uint8)


def write_episode(
    path: Path,
    frames: int,
    *,
    status: str = "complete",
    cameras=CAMERAS,
    height: int = HEIGHT,
    width: int = WIDTH,
    image=flat_image,
) -> Path:
    """`frames` steps of known poses and grippers; `image(t, camera, height, width)` draws each
    frame (default: one flat value per step and camera, frame_value)."""
    meta = EpisodeMeta(task_name="unit_train", cameras=tuple(cameras), image_width=width, image_height=height)
    writer = EpisodeWriter(path, meta, block_steps=8)
    for t in range(frames):
        values = {}
        for arm in ARMS:
            side = arm.value
            values[f"{side}.obs_ee_pose"] = measured_pose(arm, t)
            values[f"{side}.cmd_ee_pose"] = measured_pose(arm, t + 1)
            values[f"{side}.obs_joints"] = np.zeros(6)
            values[f"{side}.cmd_joints"] = np.zeros(6)
            values[f"{side}.obs_gripper"] = [gripper(t)]
            values[f"{side}.cmd_gripper"] = [gripper(t + 1)]
        images = {c: image(t, c, height, width) for c in cameras}
        writer.add(1_000_000_000 + t * STEP_NS, images, values)
    writer.close(status)
    return path
