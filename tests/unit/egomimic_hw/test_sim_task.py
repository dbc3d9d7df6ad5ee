"""The simulated box task: reproducible, reachable placement; the box in the synthetic images;
the success tracker."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_hw.cameras.backends import CameraSource, open_camera
from egomimic_hw.cameras.base import default_intrinsics
from egomimic_hw.cameras.config import CameraDeviceConfig, CameraNodeConfig
from egomimic_hw.cameras.synthetic import TARGET_FRAME_ARM, SyntheticScene, project_to_head_camera
from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.driver.sim import SimConfig
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import pose_ds_from_hw
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.sim_task import (
    ARM_BASE_T_TASK,
    BOX_WIDTH_RANGE_M,
    GRASP_TOLERANCE_M,
    SUCCESS_HOLD_STEPS,
    TaskSuccess,
    place_target,
    reach_problems,
    target_for,
)
from egomimic_safety.config import GateConfig

START_EE = np.array([0.2124, 0.001, 0.3508])
"""link6 at the sim arms' start pose (FK of SimConfig.initial_joints_rad), each in its own base."""


def test_placement_is_reproducible_per_seed_and_varies_across_seeds():
    assert place_target(3) == place_target(3)
    boxes = [place_target(s) for s in range(20)]
    assert len({b.centre_m for b in boxes}) == 20
    assert all(BOX_WIDTH_RANGE_M[0] <= b.width_m <= BOX_WIDTH_RANGE_M[1] for b in boxes)
    assert target_for(-1) is None and target_for(None) is None and target_for(5) == place_target(5)
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError):
            place_target(bad)


def test_grasp_points_are_on_opposite_faces_of_the_box():
    """Carried into one frame, the two grasp points are one box width apart, through its centre;
    each lies on its own arm's side (the right base is at -y of the left one)."""
    box = place_target(11)
    right_in_task = np.linalg.inv(ARM_BASE_T_TASK[Arm.RIGHT]) @ np.append(box.grasp_point(Arm.RIGHT), 1.0)
    left_in_task = box.grasp_point(Arm.LEFT)
    assert np.linalg.norm(left_in_task - right_in_task[:3]) == pytest.approx(box.width_m, abs=1e-9)
    np.testing.assert_allclose(0.5 * (left_in_task + right_in_task[:3]), box.centre_m, atol=1e-9)
    assert left_in_task[1] > box.centre_m[1] > right_in_task[1]
    assert box.grasp_point(Arm.RIGHT)[1] > 0 > box.grasp_point(Arm.LEFT)[1]  # both reach inward


def test_every_seed_is_reachable_inside_the_gate_workspace():
    """Approach and grasp poses solve by IK from the sim start joints, inside the gate's
    default workspace boxes, for 200 seeds."""
    kin = ArmKinematics()
    gate = GateConfig()
    workspaces = {arm: gate.workspace(arm.value) for arm in ARMS}
    q0 = SimConfig().initial_joints_rad
    problems = {s: p for s in range(200) if (p := reach_problems(place_target(s), kin, q0, workspaces))}
    assert not problems, problems


def test_reach_problems_names_an_unreachable_box():
    kin = ArmKinematics()
    box = place_target(0)
    far = type(box)(0, (2.0, box.centre_m[1], box.centre_m[2]), 0.0, box.width_m)
    assert any("IK" in p for p in reach_problems(far, kin, SimConfig().initial_joints_rad))
    tight = dict.fromkeys(ARMS, ((-0.1, -0.1, 0.3), (0.6, 0.6, 0.7)))
    assert any("workspace" in p for p in reach_problems(box, kin, SimConfig().initial_joints_rad, tight))


def _render(camera: str, target, ee=None, index: int = 7) -> np.ndarray:
    scene = SyntheticScene(camera, default_intrinsics(camera), seed=CAMERAS.index(camera), target=target)
    return scene.render(ee or dict.fromkeys(ARMS, START_EE), index).copy()


def test_head_camera_shows_the_box_where_it_projects_and_nowhere_else():
    box = place_target(4)
    plain, with_box = _render("front_1", None), _render("front_1", box)
    changed = np.any(plain != with_box, axis=-1)
    intrinsics = default_intrinsics("front_1")
    uv = np.array([project_to_head_camera(TARGET_FRAME_ARM, c, intrinsics)[:2] for c in box.corners(TARGET_FRAME_ARM)])
    u, v = uv.mean(axis=0)
    assert changed[int(v), int(u)]  # the centre of the projected box
    ys, xs = np.nonzero(changed)
    assert xs.size > 400  # tens of pixels across
    assert uv[:, 0].min() - 1 <= xs.min() and xs.max() <= uv[:, 0].max() + 1
    assert uv[:, 1].min() - 1 <= ys.min() and ys.max() <= uv[:, 1].max() + 1
    np.testing.assert_array_equal(with_box, _render("front_1", place_target(4)))  # same seed, same image
    assert np.any(with_box != _render("front_1", place_target(5)))


def test_no_target_renders_as_before_and_the_target_is_settable():
    scene = SyntheticScene("front_1", default_intrinsics("front_1"))
    plain = scene.render(dict.fromkeys(ARMS, START_EE), 2).copy()
    scene.target = place_target(1)
    assert np.any(scene.render(dict.fromkeys(ARMS, START_EE), 2) != plain)
    scene.target = None
    np.testing.assert_array_equal(scene.render(dict.fromkeys(ARMS, START_EE), 2), plain)


@pytest.mark.parametrize("camera", ["left_wrist", "right_wrist"])
def test_wrist_camera_shows_the_box_near_it_and_not_far_from_it(camera):
    box = place_target(2)
    arm = Arm.LEFT if camera.startswith("left") else Arm.RIGHT
    above = {a: box.approach_point(a) for a in ARMS}
    near = np.any(_render(camera, None, above) != _render(camera, box, above), axis=-1)
    assert near.mean() > 0.05  # a large part of the view above the grasp point
    away = 0.7 if arm is Arm.LEFT else -0.7  # beyond the arm's own side, high above the table
    far = dict.fromkeys(ARMS, START_EE)
    far[arm] = box.grasp_point(arm) + np.array([0.0, away, 0.25])
    assert not np.any(_render(camera, None, far) != _render(camera, box, far))


def test_the_camera_config_passes_the_task_seed_to_the_synthetic_backend():
    assert CameraNodeConfig().task_seed == -1
    with pytest.raises(ConfigError):
        CameraNodeConfig(task_seed=-2)
    config = CameraNodeConfig(task_seed=9)
    source = config.source("front_1", CameraDeviceConfig())
    assert source.task_seed == 9
    ee = dict.fromkeys(ARMS, START_EE)
    cameras = {
        seed: open_camera("synthetic", CameraSource("front_1", task_seed=seed), ee_positions=lambda: ee)
        for seed in (-1, 9)
    }
    try:
        assert cameras[-1]._scene.target is None
        assert cameras[9]._scene.target == place_target(9)
    finally:
        for cam in cameras.values():
            cam.close()


def _feed(tracker: TaskSuccess, left, lg, right, rg, steps: int) -> list[bool]:
    return [tracker.update(left, lg, right, rg) for _ in range(steps)]


def test_success_needs_both_arms_there_and_closed_for_k_consecutive_steps():
    box = place_target(6)
    left, right = box.grasp_pose_ds(Arm.LEFT), box.grasp_pose_ds(Arm.RIGHT)
    k = SUCCESS_HOLD_STEPS
    tracker = TaskSuccess(box)
    assert _feed(tracker, left, 0.05, right, 0.1, k - 1) == [False] * (k - 1)
    assert tracker.update(left, 0.05, right, 0.1) and tracker.success_step == k - 1
    assert _feed(tracker, left, 1.0, right, 1.0, 3) == [True] * 3  # latched
    assert tracker.errors_m[Arm.LEFT] < 1e-9

    off = left.copy()
    off[2] += 1.5 * GRASP_TOLERANCE_M
    nudged = left.copy()
    nudged[0] += 0.8 * GRASP_TOLERANCE_M
    cases = {
        "left gripper open": (left, 0.6, right, 0.0),
        "right gripper open": (left, 0.0, right, 0.6),
        "left arm above": (off, 0.0, right, 0.0),
        "arms swapped": (right, 0.0, left, 0.0),
        "not finite": (np.full(7, np.nan), 0.0, right, 0.0),
    }
    for name, args in cases.items():
        tracker = TaskSuccess(box)
        assert not any(_feed(tracker, *args, 3 * k)), name
    assert TaskSuccess(box).update(nudged, 0.0, right, 0.0) is False
    tracker = TaskSuccess(box, hold_steps=1)
    assert tracker.update(nudged, 0.0, right, 0.0)  # within tolerance


def test_success_streak_restarts_after_a_miss_and_accepts_hardware_poses():
    box = place_target(8)
    hw = {arm: box.grasp_pose_hw(arm) for arm in ARMS}
    np.testing.assert_allclose(pose_ds_from_hw(hw[Arm.LEFT])[:3], hw[Arm.LEFT][:3])  # positions agree
    tracker = TaskSuccess(box, hold_steps=5)
    pattern = [True] * 4 + [False] + [True] * 4
    for grasping in pattern:
        assert not tracker.update(hw[Arm.LEFT], 0.0 if grasping else 0.9, hw[Arm.RIGHT][:3], 0.0)
    assert tracker.streak == 4
    assert tracker.update(hw[Arm.LEFT], 0.0, hw[Arm.RIGHT][:3], 0.0) and tracker.success_step == len(pattern)
    tracker.reset()
    assert not tracker.succeeded and tracker.steps == 0
    with pytest.raises(ConfigError):
        TaskSuccess(box, hold_steps=0)
