"""An offline expert demonstration of the box task: it succeeds, stops shortly after, and is
recorded consistently (the box in the head images, FK-consistent poses, commands leading)."""

from __future__ import annotations

import numpy as np

from egomimic_data.episode_format import EpisodeReader
from egomimic_hw.cameras.base import default_intrinsics
from egomimic_hw.cameras.synthetic import SyntheticScene
from egomimic_hw.description import ARMS
from egomimic_hw.frames import pose_ds_from_hw
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.sim_task import TASK_NAME, TaskSuccess, place_target
from egomimic_policy.expert_episode import render_expert_episode


def test_expert_episode_succeeds_and_is_consistent(tmp_path):
    path = tmp_path / "expert.zarr"
    episode = render_expert_episode(path, 5, width=160, height=120, hold_after_success_s=0.5)
    assert episode.status == "complete" and episode.success_step is not None
    assert episode.frames == episode.success_step + 1 + 15
    r = EpisodeReader(path)
    assert len(r) == episode.frames and r.data_status == "complete" and r.meta().task_name == TASK_NAME
    assert "task seed 5" in r.meta().task_description
    kin = ArmKinematics()
    for t in (0, episode.frames // 2, episode.frames - 1):
        for arm in ARMS:
            fk = pose_ds_from_hw(kin.forward(r.array(f"{arm.value}.obs_joints")[t].astype(float)))
            np.testing.assert_allclose(r.array(f"{arm.value}.obs_ee_pose")[t], fk, atol=1e-5)
    np.testing.assert_allclose(r.array("right.obs_joints")[1:], r.array("right.cmd_joints")[:-1], atol=1e-6)
    np.testing.assert_allclose(r.array("left.obs_gripper")[1:], r.array("left.cmd_gripper")[:-1], atol=1e-6)
    # the recorded measurements alone say the task succeeded, at the same step
    tracker = TaskSuccess(place_target(5))
    for t in range(len(r)):
        tracker.update(
            r.array("left.obs_ee_pose")[t], r.array("left.obs_gripper")[t, 0],
            r.array("right.obs_ee_pose")[t], r.array("right.obs_gripper")[t, 0],
        )  # fmt: skip
    assert tracker.success_step == episode.success_step
    # the head camera shows the box: frame 0 differs from the same view without it
    no_box = SyntheticScene("front_1", default_intrinsics("front_1", 160, 120))
    ee = {arm: kin.forward(r.array(f"{arm.value}.obs_joints")[0].astype(float))[:3] for arm in ARMS}
    diff = np.abs(r.image("front_1", 0).astype(int) - no_box.render(ee, 0).astype(int)).sum(axis=-1)
    assert (diff > 60).sum() > 20


def test_an_episode_cut_before_success_is_partial(tmp_path):
    episode = render_expert_episode(tmp_path / "short.zarr", 1, width=160, height=120, max_seconds=2.0)
    assert episode == type(episode)(60, None, "partial")
    assert EpisodeReader(tmp_path / "short.zarr").data_status == "partial"
