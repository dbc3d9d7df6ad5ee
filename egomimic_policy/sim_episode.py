"""Render an EVA episode from the simulated scene along the scripted motion.

Why: replay demos and tests need a recorded episode with consistent images, poses and joints,
and a real robot is not always at hand. The motion is the scripted bimanual circle
(egomimic_policy.scripted) anchored at the sim driver's start pose; joints come from the ARX
SDK's own IK (seeded with the previous solution, as on the robot), the observed pose is FK of
those joints (what a driver would report), the commanded pose is the scripted target. Images
are the synthetic renderer's (egomimic_hw.cameras.synthetic), stamped at a steady `fps`.
Everything stored in the dataset frame (docs/eva.md), as the recorder will.

Why here and not in egomimic_data: it drives the scripted motion through the kinematics, the sim
driver's start pose and the synthetic cameras, none of which the data package may import; it only
writes through egomimic_data.episode_format.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from egomimic_data.episode_format import EpisodeMeta, EpisodeWriter
from egomimic_hw.cameras.base import default_intrinsics
from egomimic_hw.cameras.synthetic import BASE_T_HEAD_CAMERA, SceneBox, SyntheticScene
from egomimic_hw.description import ARMS, CAMERAS
from egomimic_hw.driver.sim import SimConfig
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import pose_ds_from_hw, pose_hw_from_ds
from egomimic_hw.kinematics import ArmKinematics
from egomimic_policy.scripted import ScriptedMotion, ScriptedMotionConfig

START_STAMP_NS = 1_700_000_000_000_000_000
"""Episode stamps start here (ROS time of a fixed date), so renders are reproducible."""


def sim_episode_setup(
    task_name: str,
    task_description: str,
    *,
    fps: float,
    width: int,
    height: int,
    target: SceneBox | None = None,
) -> tuple[EpisodeMeta, dict[str, SyntheticScene]]:
    """The episode's metadata (the synthetic cameras' intrinsics and the head camera's
    extrinsics as its calibration) and one synthetic scene per camera, showing `target`."""
    intrinsics = {cam: default_intrinsics(cam, width, height) for cam in CAMERAS}
    scenes = {cam: SyntheticScene(cam, intrinsics[cam], seed=CAMERAS.index(cam), target=target) for cam in CAMERAS}
    calibration = {cam: k.as_dict() for cam, k in intrinsics.items()}
    calibration["extrinsics"] = {f"{a.value}_base_T_front_1": BASE_T_HEAD_CAMERA[a].tolist() for a in ARMS}
    meta = EpisodeMeta(
        task_name=task_name,
        cameras=CAMERAS,
        fps=fps,
        image_width=width,
        image_height=height,
        task_description=task_description,
        calibration=calibration,
    )
    return meta, scenes


def render_sim_episode(
    path: str | Path,
    *,
    seconds: float = 10.0,
    fps: float = 30.0,
    width: int = 640,
    height: int = 480,
    task_name: str = "sim_scripted_circle",
    overwrite: bool = False,
    block_steps: int = 30,
) -> int:
    """Write one episode of `seconds` to `path`; returns the number of frames."""
    if not 0 < seconds <= 600:
        raise ConfigError(f"seconds must be in (0, 600], got {seconds}")
    kin = ArmKinematics()
    q0 = np.asarray(SimConfig().initial_joints_rad, float)
    anchor_hw = kin.forward(q0)
    motion = ScriptedMotion(
        ScriptedMotionConfig(), {a: pose_ds_from_hw(anchor_hw) for a in ARMS}, dict.fromkeys(ARMS, 0.5)
    )
    meta, scenes = sim_episode_setup(
        task_name,
        "synthetic scene, scripted bimanual circle (egomimic_policy.scripted)",
        fps=fps,
        width=width,
        height=height,
    )
    joints = {a: q0.copy() for a in ARMS}
    n = int(round(seconds * fps))
    with EpisodeWriter(path, meta, overwrite=overwrite, block_steps=block_steps) as writer:
        for t in range(n):
            targets = motion.sample(t / fps)
            values: dict[str, np.ndarray] = {}
            ee_hw = {}
            for arm in ARMS:
                target_ds, gripper = targets[arm]
                ik = kin.inverse(pose_hw_from_ds(target_ds), joints[arm])
                if not ik.ok:
                    raise ConfigError(f"IK failed at step {t} for {arm.value}: {ik.detail}")
                obs_ds = pose_ds_from_hw(kin.forward(joints[arm]))  # measured before this command
                ee_hw[arm] = kin.forward(joints[arm])[:3]
                side = arm.value
                values[f"{side}.obs_ee_pose"] = obs_ds
                values[f"{side}.cmd_ee_pose"] = target_ds
                values[f"{side}.obs_joints"] = joints[arm]
                values[f"{side}.cmd_joints"] = ik.joints_rad
                values[f"{side}.obs_gripper"] = np.array([gripper])
                values[f"{side}.cmd_gripper"] = np.array([gripper])
                joints[arm] = ik.joints_rad
            stamp = START_STAMP_NS + int(round(t * 1e9 / fps))
            images = {cam: scenes[cam].render(ee_hw, t) for cam in CAMERAS}
            writer.add(stamp, images, values)
    return n
