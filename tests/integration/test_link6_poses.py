"""Every published pose is link6 (description.EEF_LINK), checked against an independent FK.

The driver (sim backend, SDK kinematics where it imports) and the frames node run as real
processes over DDS. While the arm moves through a 0.3 rad step on every joint, each
`left/ee_pose` must equal Pinocchio's link6 FK of the joints published with the same stamp, and
each `left/ee_pose_dataset` the dataset-frame conversion of that FK, to 1e-6 m and 1e-6 rad.
Pinocchio is the independent reference: another library, built from the URDF, not the SDK's
KDL chain (egomimic_hw/pinocchio_kinematics.py). The gate's own FK is held to the same
reference in tests/unit/egomimic_safety/test_gate.py."""

import threading

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import JointState

from egomimic_hw.description import Arm
from egomimic_hw.frames import pose_ds_from_hw
from egomimic_hw.pinocchio_kinematics import PinocchioArm
from egomimic_hw.rotations import geodesic_angle, quat_to_mat
from egomimic_nodes import topics

from .conftest import wait_for
from .test_driver_node import START, DriverProbe

pytestmark = pytest.mark.integration

TOL_M = TOL_RAD = 1e-6


def _stamp(msg) -> int:
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def _pose(msg) -> np.ndarray:
    p, o = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z, o.w, o.x, o.y, o.z])


def _worst(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    return float(np.linalg.norm(a[:3] - b[:3])), float(geodesic_angle(quat_to_mat(a[3:]), quat_to_mat(b[3:])))


def test_pose_topics_are_link6_of_the_measured_joints(node_process, ros_node):
    pin = PinocchioArm()
    node_process("egomimic_nodes.frames_node", "-r", "__ns:=/eva", "-r", "__node:=frames")
    lock = threading.Lock()
    poses: dict[str, dict[int, np.ndarray]] = {"hw": {}, "ds": {}}

    def keep(kind):
        def cb(msg):
            with lock:
                poses[kind][_stamp(msg)] = _pose(msg)

        return cb

    joints: dict[int, np.ndarray] = {}

    def on_state(msg):  # the joints by their exact stamp: ee_pose carries the same one
        with lock:
            joints[_stamp(msg)] = np.array(msg.position[:6])

    ros_node.create_subscription(
        PoseStamped, topics.EE_POSE.resolve("eva", arm=Arm.LEFT), keep("hw"), topics.EE_POSE.qos
    )
    ros_node.create_subscription(
        PoseStamped, topics.EE_POSE_DATASET.resolve("eva", arm=Arm.LEFT), keep("ds"), topics.EE_POSE_DATASET.qos
    )
    ros_node.create_subscription(
        JointState, topics.JOINT_STATES.resolve("eva", arm=Arm.LEFT), on_state, topics.JOINT_STATES.qos
    )
    d = DriverProbe(node_process, ros_node)
    d.stream(START + 0.3, 1.5)
    assert wait_for(lambda: len(poses["ds"]) >= 50, 10), f"ee_pose_dataset samples: {len(poses['ds'])}"
    with lock:
        hw, ds, joints = dict(poses["hw"]), dict(poses["ds"]), dict(joints)
    pairs = [(stamp, q) for stamp, q in joints.items() if stamp in hw]
    assert len(pairs) >= 50, f"only {len(pairs)} ee_pose samples matched a joint_states stamp"
    moved = max(float(np.max(np.abs(q - START))) for _, q in pairs)
    assert moved > 0.2, f"the arm did not move through the step ({moved:.3f} rad)"
    err_hw = np.max([_worst(hw[s], pin.forward(q)) for s, q in pairs], axis=0)
    assert err_hw[0] <= TOL_M and err_hw[1] <= TOL_RAD, (
        f"ee_pose vs Pinocchio link6: {err_hw[0]:.2e} m, {err_hw[1]:.2e} rad"
    )
    pairs_ds = [(s, q) for s, q in pairs if s in ds]
    assert len(pairs_ds) >= 40, f"only {len(pairs_ds)} ee_pose_dataset samples matched"
    err_ds = np.max([_worst(ds[s], pose_ds_from_hw(pin.forward(q))) for s, q in pairs_ds], axis=0)
    assert err_ds[0] <= TOL_M and err_ds[1] <= TOL_RAD, (
        f"ee_pose_dataset vs Pinocchio: {err_ds[0]:.2e} m, {err_ds[1]:.2e} rad"
    )
    print(
        f"link6 agreement over {len(pairs)} ee_pose / {len(pairs_ds)} ee_pose_dataset samples: "
        f"{err_hw[0]:.1e} m {err_hw[1]:.1e} rad / {err_ds[0]:.1e} m {err_ds[1]:.1e} rad"
    )
