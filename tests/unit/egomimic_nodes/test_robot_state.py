"""The robot_state node in-process (no DDS traffic needed) and the locally built tf2_msgs.

- tf2_msgs/msg/TFMessage built here has ROS Kilted's type hash, so rviz and tf2 on a real ROS 2
  install accept our /tf: the reference is the hash live ROS 2 nodes report (`ros2 topic info
  --verbose /tf`, robot_state_publisher and tf2 listeners in a public Nav2 log; the same value is
  in rmw_zenoh-style liveliness keys and golden-hash tables of other ROS clients), checked three
  ways: rosidl's generated type description, rclpy's endpoint info, and rosbags' own RIHS01
  implementation over its Kilted type store.
- The node's /tf for a joint_states message, walked from `<arm>_base` to `<arm>_link6` with the
  node's own /tf_static, is the SDK's link6 FK of those joints.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from egomimic_hw.description import ARMS, EEF_LINK, X5_LIMITS, Arm
from egomimic_hw.frames import pose_to_matrix
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.rotations import geodesic_angle, quat_to_mat
from egomimic_nodes import topics

KILTED_HASHES = {
    "tf2_msgs/msg/TFMessage": "RIHS01_e369d0f05a23ae52508854b66f6aa0437f3449d652e8cbf22d5abe85d020f087",
    "tf2_msgs/msg/TF2Error": "RIHS01_db2485e7d6a0ec75bf087e058ee45df682acc3a621ca7780503d10aac141809a",
}


def _share() -> Path:
    import sys

    return Path(sys.prefix) / "share" / "tf2_msgs" / "msg"


@pytest.mark.parametrize("type_name", sorted(KILTED_HASHES))
def test_generated_type_description_hash_is_kilted(type_name):
    desc = json.loads((_share() / f"{type_name.rsplit('/', 1)[-1]}.json").read_text())
    own = next(h["hash_string"] for h in desc["type_hashes"] if h["type_name"] == type_name)
    assert own == KILTED_HASHES[type_name]


@pytest.mark.parametrize("type_name", sorted(KILTED_HASHES))
def test_rosbags_computes_the_same_hash(type_name):
    from rosbags.typesys import Stores, get_typestore

    assert get_typestore(Stores.ROS2_KILTED).hash_rihs01(type_name) == KILTED_HASHES[type_name]


def test_interface_text_is_upstreams():
    """ros2/geometry2 tf2_msgs/msg/TFMessage.msg, byte for byte (the hash ignores comments; this does not)."""
    assert (_share() / "TFMessage.msg").read_text() == "geometry_msgs/TransformStamped[] transforms\n"


@pytest.fixture
def rs_node(monkeypatch):
    import rclpy

    from egomimic_nodes.robot_state_node import RobotStateNode

    rclpy.init(args=["--ros-args", "--disable-external-lib-logs"])
    node = RobotStateNode()
    sent: dict[str, list] = {"dynamic": []}
    monkeypatch.setattr(node._pub_tf, "publish", sent["dynamic"].append)
    node.sent = sent
    yield node
    node.destroy_node()
    rclpy.try_shutdown()


def test_live_type_hash_of_the_tf_publisher(rs_node):
    infos = rs_node.get_publishers_info_by_topic(topics.TF.name())
    assert infos, "the node's own /tf publisher"
    assert str(infos[0].topic_type_hash) == KILTED_HASHES["tf2_msgs/msg/TFMessage"]


def _walk(edges: dict[str, tuple[str, np.ndarray]], base: str, tip: str) -> np.ndarray:
    """base_T_tip from child -> (parent, parent_T_child) edges, as a TF buffer composes them."""
    t = np.eye(4)
    link = tip
    while link != base:
        parent, parent_T_child = edges[link]
        t = parent_T_child @ t
        link = parent
    return t


def _edges(msgs) -> dict[str, tuple[str, np.ndarray]]:
    edges = {}
    for msg in msgs:
        for tr in msg.transforms:
            p, r = tr.transform.translation, tr.transform.rotation
            m = np.eye(4)
            m[:3, :3] = quat_to_mat([r.w, r.x, r.y, r.z])
            m[:3, 3] = [p.x, p.y, p.z]
            edges[tr.child_frame_id] = (tr.header.frame_id, m)
    return edges


def test_tf_walk_is_the_sdk_fk_and_carries_the_joint_states_stamp(rs_node):
    from sensor_msgs.msg import JointState
    from tf2_msgs.msg import TFMessage

    statics: list[TFMessage] = []
    rs_node._pub_static.publish = statics.append
    rs_node._publish_static()  # what the node latches on /tf_static
    static = statics[-1]
    assert len(static.transforms) == len(rs_node.model.fixed_joints)
    kin = ArmKinematics()
    rng = np.random.default_rng(7)
    worst_m = worst_rad = 0.0
    for i in range(20):
        arm = ARMS[i % 2]
        q = rng.uniform(X5_LIMITS.pos_min, X5_LIMITS.pos_max)
        msg = JointState()
        msg.header.stamp.sec, msg.header.stamp.nanosec = 100 + i, 12345
        msg.name = arm.joint_names
        msg.position = [*map(float, q), 0.7]
        rs_node._on_joint_states(msg)
        out = rs_node.sent["dynamic"][-1]
        assert [t.child_frame_id for t in out.transforms] == [f"{arm.value}_link{k}" for k in range(1, 7)]
        assert all((t.header.stamp.sec, t.header.stamp.nanosec) == (100 + i, 12345) for t in out.transforms)
        walk = _walk(_edges([static, out]), arm.hw_frame, f"{arm.value}_{EEF_LINK}")
        ref = pose_to_matrix(kin.forward(q))
        worst_m = max(worst_m, float(np.linalg.norm(walk[:3, 3] - ref[:3, 3])))
        worst_rad = max(worst_rad, float(geodesic_angle(walk[:3, :3], ref[:3, :3])))
    print(f"/tf walk vs {kin.backend} FK at link6: {worst_m:.1e} m, {worst_rad:.1e} rad")
    assert worst_m <= 1e-6 and worst_rad <= 1e-6
    assert rs_node._ignored == {a.joint_names[-1] for a in ARMS}, "the grippers are not joints"


def test_a_non_finite_position_is_left_out_and_counted(rs_node):
    from sensor_msgs.msg import JointState

    msg = JointState()
    msg.name = Arm.LEFT.joint_names[:6]
    msg.position = [0.0, float("nan"), 0.0, 0.0, 0.0, 0.0]
    rs_node._on_joint_states(msg)
    assert len(rs_node.sent["dynamic"][-1].transforms) == 5 and rs_node.counts["non_finite_positions"] == 1
