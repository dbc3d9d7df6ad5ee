"""EVA's URDF: the committed file is the generator's output, its names are the graph's, its FK walk
is the SDK's link6 FK, and its mounts reproduce the calibration they were derived from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from egomimic_hw.cameras.synthetic import BASE_T_HEAD_CAMERA
from egomimic_hw.description import ARMS, CAMERAS, EEF_LINK, JOINTS_PER_ARM, X5_LIMITS, Arm
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import pose_to_matrix
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.rotations import geodesic_angle
from egomimic_hw.sim_task import ARM_BASE_T_TASK
from egomimic_hw.urdf import (
    LINK6_T_WRIST_OPTICAL,
    ROOT_FRAME,
    EvaMounts,
    UrdfModel,
    eva_urdf,
    optical_frame,
)

REPO = Path(__file__).resolve().parents[3]


def _load_tool():
    spec = importlib.util.spec_from_file_location("make_urdf", REPO / "tools" / "make_urdf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_urdf = _load_tool()
URDF_PATH, main = make_urdf.URDF_PATH, make_urdf.main

FK_TOL_M = 1e-6
FK_TOL_RAD = 1e-6
SAMPLES_PER_ARM = 25


@pytest.fixture(scope="module")
def model() -> UrdfModel:
    return UrdfModel.from_file(URDF_PATH)


def lookup(model: UrdfModel, target: str, source: str, positions=None) -> np.ndarray:
    """target_T_source through the root: any two frames of the tree (the TF walk)."""
    positions = positions or {j.name: 0.0 for j in model.moving_joints}
    return np.linalg.inv(model.transform(model.root, target, positions)) @ model.transform(
        model.root, source, positions
    )


def test_the_committed_urdf_is_the_generated_one():
    assert URDF_PATH.read_text() == eva_urdf(), "regenerate: .venv/bin/python tools/make_urdf.py"
    assert main(["--check"]) == 0


def test_the_generator_is_deterministic_and_check_catches_a_stale_file(tmp_path):
    out = tmp_path / "eva.urdf"
    assert main(["--out", str(out)]) == 0 and out.read_text() == eva_urdf()
    out.write_text(out.read_text().replace("0.0603", "0.0604", 1))
    assert main(["--check", "--out", str(out)]) == 1


def test_names_are_the_graphs(model):
    assert model.root == ROOT_FRAME
    moving = [j.name for j in model.moving_joints]
    assert moving == [n for a in ARMS for n in a.joint_names[:JOINTS_PER_ARM]], "joint_states names"
    for arm in ARMS:
        assert arm.hw_frame in model.links, "the frame id of ee_pose and joint_states"
        assert f"{arm.value}_{EEF_LINK}" in model.links
        assert arm.joint_names[-1] not in [j.name for j in model.joints], "the gripper is not a joint"
        assert arm.dataset_frame not in model.links, "the dataset frame is not rigid: not on TF"
    for cam in CAMERAS:
        assert optical_frame(cam) == f"{cam}_optical" and optical_frame(cam) in model.links


def test_joint_limits_are_the_drivers(model):
    import xml.etree.ElementTree as ET

    robot = ET.fromstring(URDF_PATH.read_text())
    for arm in ARMS:
        for i, name in enumerate(arm.joint_names[:JOINTS_PER_ARM]):
            limit = robot.find(f"joint[@name='{name}']/limit")
            assert limit is not None
            assert float(limit.get("lower")) == X5_LIMITS.joint_pos_min_rad[i]
            assert float(limit.get("upper")) == X5_LIMITS.joint_pos_max_rad[i]
            assert float(limit.get("velocity")) == X5_LIMITS.joint_vel_max_rad_s[i]


def test_fk_walk_agrees_with_the_sdk_kinematics_at_link6(model):
    kin = ArmKinematics()
    rng = np.random.default_rng(16)
    worst_m = worst_rad = 0.0
    for arm in ARMS:
        for _ in range(SAMPLES_PER_ARM):
            q = rng.uniform(X5_LIMITS.pos_min, X5_LIMITS.pos_max)
            positions = dict(zip(arm.joint_names, q))
            walk = model.transform(arm.hw_frame, f"{arm.value}_{EEF_LINK}", positions)
            ref = pose_to_matrix(kin.forward(q))
            worst_m = max(worst_m, float(np.linalg.norm(walk[:3, 3] - ref[:3, 3])))
            worst_rad = max(worst_rad, float(geodesic_angle(walk[:3, :3], ref[:3, :3])))
    print(
        f"URDF walk vs {kin.backend} FK at link6, {2 * SAMPLES_PER_ARM} samples: {worst_m:.1e} m, {worst_rad:.1e} rad"
    )
    assert worst_m <= FK_TOL_M and worst_rad <= FK_TOL_RAD


def test_fk_at_zero_is_the_documented_point(model):
    t = model.transform(Arm.LEFT.hw_frame, f"left_{EEF_LINK}", dict.fromkeys(Arm.LEFT.joint_names, 0.0))
    assert np.allclose(t[:3, 3], [0.0952, 0.001, 0.1565], atol=1e-4)  # README "End-effector point"


def test_mounts_reproduce_both_head_camera_extrinsics(model):
    for arm in ARMS:
        urdf_T = lookup(model, arm.hw_frame, optical_frame(CAMERAS[0]))
        assert np.allclose(urdf_T, BASE_T_HEAD_CAMERA[arm], atol=2e-7), arm  # printed to 8 digits
    right_in_left = lookup(model, Arm.LEFT.hw_frame, Arm.RIGHT.hw_frame)
    assert np.allclose(right_in_left, np.linalg.inv(ARM_BASE_T_TASK[Arm.RIGHT]), atol=1e-7), "as sim_task derives it"
    assert np.allclose(lookup(model, ROOT_FRAME, Arm.LEFT.hw_frame), np.eye(4), atol=1e-12), "root = left base"


def test_wrist_cameras_hang_from_link6_at_their_nominal_mount(model):
    for arm in ARMS:
        t = lookup(model, f"{arm.value}_{EEF_LINK}", optical_frame(CAMERAS[1 + ARMS.index(arm)]))
        assert np.allclose(t, LINK6_T_WRIST_OPTICAL, atol=1e-12)


def test_optical_frames_look_along_the_body_x_axis(model):
    t = lookup(model, "front_1_link", optical_frame("front_1"))
    assert np.allclose(t[:3, 2], [1, 0, 0]) and np.allclose(t[:3, 0], [0, -1, 0]) and np.allclose(t[:3, 1], [0, 0, -1])


def test_mounts_from_a_calibration_file():
    ext = {f"{a.hw_frame}_T_front_1": BASE_T_HEAD_CAMERA[a].tolist() for a in ARMS}
    wrist = np.eye(4)
    wrist[:3, 3] = [0.01, 0.02, 0.03]
    ext["left_link6_T_left_wrist"] = wrist.tolist()
    model = UrdfModel.from_string(eva_urdf(EvaMounts.from_extrinsics(ext)))
    assert np.allclose(lookup(model, "left_link6", "left_wrist_optical"), wrist, atol=1e-12)
    assert np.allclose(lookup(model, "right_link6", "right_wrist_optical"), LINK6_T_WRIST_OPTICAL, atol=1e-12)
    with pytest.raises(ConfigError, match="right_base_T_front_1"):
        EvaMounts.from_extrinsics({"left_base_T_front_1": ext["left_base_T_front_1"]})


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('<link name="a"/><link name="b"/>', "exactly one root"),
        (
            '<link name="a"/><link name="b"/><joint name="j" type="floating"><parent link="a"/><child link="b"/></joint>',
            "not supported",
        ),
        (
            '<link name="a"/><link name="b"/><joint name="j" type="revolute"><parent link="a"/><child link="b"/>'
            '<mimic joint="k"/></joint>',
            "mimic",
        ),
        ('<link name="a"/><joint name="j" type="fixed"><parent link="a"/><child link="c"/></joint>', "not declared"),
    ],
)
def test_the_reader_refuses_what_it_cannot_publish(body, why):
    with pytest.raises(ConfigError, match=why):
        UrdfModel.from_string(f'<robot name="r">{body}</robot>')
