"""The frames node as a real process: converts hardware <-> dataset, refuses wrong frames."""

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.frames import pose_ds_from_hw, pose_hw_from_ds
from egomimic_msgs.msg import BimanualCommand
from egomimic_nodes import topics
from egomimic_nodes.msg_convert import array_to_pose, pose_to_array

from .conftest import wait_for

pytestmark = pytest.mark.integration

POSE_DS = np.array([0.3, 0.05, 0.25, 0.5, 0.5, 0.5, 0.5])


def action(frame_suffix: str) -> BimanualCommand:
    msg = BimanualCommand()
    for arm in (a.value for a in ARMS):
        ps = getattr(msg, arm)
        ps.header.frame_id = f"{arm}_base{frame_suffix}"
        array_to_pose(POSE_DS, ps.pose)
    msg.chunk_id, msg.row, msg.left_gripper = 7, 3, 0.25
    return msg


def test_frames_node_converts_and_refuses_wrong_frame(node_process, ros_node):
    node_process("egomimic_nodes.frames_node", "-r", "__ns:=/eva")
    received, poses_ds = [], []
    ros_node.create_subscription(
        BimanualCommand, topics.COMMAND_PROPOSED.resolve("eva"), received.append, topics.COMMAND_PROPOSED.qos
    )
    ros_node.create_subscription(
        PoseStamped, topics.EE_POSE_DATASET.resolve("eva", arm=Arm.LEFT), poses_ds.append, topics.EE_POSE_DATASET.qos
    )
    pub = ros_node.create_publisher(BimanualCommand, topics.POLICY_ACTION.resolve("eva"), topics.POLICY_ACTION.qos)
    pub_pose = ros_node.create_publisher(PoseStamped, topics.EE_POSE.resolve("eva", arm=Arm.LEFT), topics.EE_POSE.qos)
    assert wait_for(lambda: pub.get_subscription_count() > 0 and pub_pose.get_subscription_count() > 0, 20)

    for _ in range(5):
        pub.publish(action(""))  # hardware frame ids on policy/action: wrong, must be refused
    wrong_hw = PoseStamped()
    wrong_hw.header.frame_id = "left_base_dataset"
    array_to_pose(POSE_DS, wrong_hw.pose)
    pub_pose.publish(wrong_hw)
    good = action("_dataset")
    pub.publish(good)
    assert wait_for(lambda: len(received) >= 1, 10)
    assert wait_for(lambda: False, 0.5) is False  # give any wrongly forwarded message time to arrive
    assert len(received) == 1, "a wrong-frame action was forwarded"
    out = received[0]
    assert out.left.header.frame_id == "left_base" and out.right.header.frame_id == "right_base"
    assert out.chunk_id == 7 and out.row == 3 and abs(out.left_gripper - 0.25) < 1e-6
    assert np.allclose(pose_to_array(out.left.pose), pose_hw_from_ds(POSE_DS), atol=1e-9)
    assert not poses_ds, "an ee_pose in the wrong frame was converted"

    ok_hw = PoseStamped()
    ok_hw.header.frame_id = "left_base"
    array_to_pose(pose_hw_from_ds(POSE_DS), ok_hw.pose)
    pub_pose.publish(ok_hw)
    assert wait_for(lambda: len(poses_ds) == 1, 10)
    assert poses_ds[0].header.frame_id == "left_base_dataset"
    assert np.allclose(pose_to_array(poses_ds[0].pose), pose_ds_from_hw(pose_hw_from_ds(POSE_DS)), atol=1e-9)
