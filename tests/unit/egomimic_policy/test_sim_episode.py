"""Synthetic sim episodes: consistent joints, poses and stamps, readable through the episode format."""

from __future__ import annotations

import numpy as np

from egomimic_data.episode_format import EpisodeReader
from egomimic_hw.description import ARMS
from egomimic_hw.frames import pose_ds_from_hw
from egomimic_hw.kinematics import ArmKinematics
from egomimic_policy.sim_episode import render_sim_episode


def test_sim_episode_is_consistent(tmp_path):
    """Observed poses are FK of the observed joints in the dataset frame; commands lead them."""
    path = tmp_path / "sim.zarr"
    n = render_sim_episode(path, seconds=1.0)
    r = EpisodeReader(path)
    assert n == len(r) == 30 and r.data_status == "complete"
    kin = ArmKinematics()
    for t in (0, 15, 29):
        for arm in ARMS:
            side = arm.value
            fk = pose_ds_from_hw(kin.forward(r.array(f"{side}.obs_joints")[t].astype(float)))
            np.testing.assert_allclose(r.array(f"{side}.obs_ee_pose")[t], fk, atol=1e-5)
    np.testing.assert_allclose(r.array("left.obs_joints")[1:], r.array("left.cmd_joints")[:-1], atol=1e-6)
    left_y = r.array("left.cmd_ee_pose")[:, 1]
    assert np.ptp(left_y) > 1e-3  # it moves
    gaps = np.diff(r.timestamps_ns)
    assert np.ptp(gaps) <= 1 and abs(gaps.mean() - 1e9 / 30) < 1  # steady 30 Hz stamps
