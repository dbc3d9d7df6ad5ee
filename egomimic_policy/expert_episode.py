"""Record a demonstration of the simulated box task offline: training data without the ROS graph.

Why: a policy that must find the box in the images learns from many demonstrations, one per
task seed, and running the whole graph for each is slow. This drives the scripted expert
(egomimic_policy.expert) the way the live loop does: a chunk per `chunk_length` ticks anchored
at the observation of its tick, each row turned into joints by the ARX SDK's IK seeded with the
previous joints (as the gate does), the measured pose being FK of the joints (as a driver
reports it). The images are the synthetic cameras' with the task's box (SyntheticScene's
`target`), rendered from the measured poses. Stored as the recorder stores a live episode
(dataset frame, docs/eva.md); the episode ends `hold_after_success_s` after the task succeeds
(egomimic_hw.sim_task.TaskSuccess on the measured poses), or at `max_seconds` as "partial": a
demonstration that failed is kept out of upstream's training sets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from egomimic_data.episode_format import STATUS_COMPLETE, STATUS_PARTIAL, EpisodeWriter
from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.driver.sim import SimConfig
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import pose_ds_from_hw, pose_hw_from_ds
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.sim_task import TASK_DESCRIPTION, TASK_NAME, TaskSuccess
from egomimic_policy.expert import ExpertChunkPolicy, ExpertConfig
from egomimic_policy.interface import Chunk, Observation
from egomimic_policy.sim_episode import START_STAMP_NS, sim_episode_setup

START_GRIPPER = 0.5
"""The sim gripper's start (SimConfig.initial_gripper_m 0.04 m of the uncalibrated 0.08 m)."""


@dataclass(frozen=True)
class ExpertEpisode:
    """What was recorded: its length, and the step the task succeeded at (None: it did not)."""

    frames: int
    success_step: int | None
    status: str


def _row(chunk: Chunk, i: int) -> dict[Arm, tuple[np.ndarray, float]]:
    return {
        Arm.LEFT: (chunk.left_pose[i], float(chunk.left_gripper[i])),
        Arm.RIGHT: (chunk.right_pose[i], float(chunk.right_gripper[i])),
    }


def render_expert_episode(
    path: str | Path,
    task_seed: int,
    *,
    expert: ExpertConfig | None = None,
    fps: float = 30.0,
    width: int = 640,
    height: int = 480,
    max_seconds: float = 15.0,
    hold_after_success_s: float = 1.0,
    overwrite: bool = False,
    block_steps: int = 30,
) -> ExpertEpisode:
    """Write one expert demonstration of task `task_seed` to `path` (`expert`: its speeds and
    chunking; its own task seed is replaced by `task_seed`)."""
    if not 0 < max_seconds <= 600 or not 0 <= hold_after_success_s <= max_seconds:
        raise ConfigError(
            "need 0 < max_seconds <= 600 and 0 <= hold_after_success_s <= max_seconds, "
            f"got {max_seconds}, {hold_after_success_s}"
        )
    policy = ExpertChunkPolicy(replace(expert or ExpertConfig(), task_seed=task_seed), rate_hz=fps)
    success = TaskSuccess(policy.target)
    kin = ArmKinematics()
    meta, scenes = sim_episode_setup(
        TASK_NAME,
        f"{TASK_DESCRIPTION} (synthetic scene, task seed {task_seed}, scripted expert)",
        fps=fps,
        width=width,
        height=height,
        target=policy.target,
    )
    joints = dict.fromkeys(ARMS, np.asarray(SimConfig().initial_joints_rad, float))
    grippers = dict.fromkeys(ARMS, START_GRIPPER)
    last = int(round(max_seconds * fps))
    chunk: Chunk | None = None
    chunk_step = 0
    with EpisodeWriter(path, meta, overwrite=overwrite, block_steps=block_steps) as writer:
        t = 0
        while t < last:
            stamp = START_STAMP_NS + int(round(t * 1e9 / fps))
            obs_hw = {arm: kin.forward(joints[arm]) for arm in ARMS}
            obs_ds = {arm: pose_ds_from_hw(obs_hw[arm]) for arm in ARMS}
            if chunk is None or t - chunk_step >= len(chunk):
                chunk = policy.infer(
                    Observation(
                        stamp_ns=stamp,
                        images={},
                        left_pose=obs_ds[Arm.LEFT],
                        right_pose=obs_ds[Arm.RIGHT],
                        left_gripper=grippers[Arm.LEFT],
                        right_gripper=grippers[Arm.RIGHT],
                    )
                )
                chunk_step = t
            values: dict[str, np.ndarray] = {}
            for arm, (target_ds, gripper) in _row(chunk, t - chunk_step).items():
                ik = kin.inverse(pose_hw_from_ds(target_ds), joints[arm])
                if not ik.ok:
                    raise ConfigError(f"task seed {task_seed}: IK failed at step {t} for {arm.value}: {ik.detail}")
                side = arm.value
                values[f"{side}.obs_ee_pose"] = obs_ds[arm]
                values[f"{side}.cmd_ee_pose"] = target_ds
                values[f"{side}.obs_joints"] = joints[arm]
                values[f"{side}.cmd_joints"] = ik.joints_rad
                values[f"{side}.obs_gripper"] = np.array([grippers[arm]])
                values[f"{side}.cmd_gripper"] = np.array([gripper])
                joints[arm], grippers[arm] = ik.joints_rad, gripper
            ee_hw = {arm: obs_hw[arm][:3] for arm in ARMS}
            writer.add(stamp, {cam: scenes[cam].render(ee_hw, t) for cam in CAMERAS}, values)
            success.update(
                obs_ds[Arm.LEFT], values["left.obs_gripper"][0], obs_ds[Arm.RIGHT], values["right.obs_gripper"][0]
            )
            t += 1
            if success.success_step is not None:
                last = min(last, success.success_step + 1 + int(round(hold_after_success_s * fps)))
        status = STATUS_COMPLETE if success.succeeded else STATUS_PARTIAL
        frames = writer.close(status)
    return ExpertEpisode(frames, success.success_step, status)
