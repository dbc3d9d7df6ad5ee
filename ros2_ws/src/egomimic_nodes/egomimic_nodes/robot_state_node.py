"""Robot state node: TF and the robot description, as robot_state_publisher does (that package
is C++ and not on PyPI), from the URDF the library generates (egomimic_hw.urdf, tools/make_urdf.py).

  sub  <arm>/joint_states (both arms)
  pub  /tf (tf2_msgs/TFMessage): per joint_states message, one transform per moving joint it
       names, parent -> child link, stamped with the joint_states stamp (so a TF lookup at an
       ee_pose stamp uses the very joints that pose was computed from)
  pub  /tf_static (latched): the fixed joints (arm mounts, eef links, camera mounts and optical
       frames), once at start
  pub  robot_description (std_msgs/String, latched): the URDF text, for rviz

Names on joint_states that are not joints of the description are ignored, said once in the log:
`<arm>_gripper` is the normalized opening, not a joint position (egomimic_hw/urdf.py). A
non-finite position leaves that joint out of the message and is counted on /diagnostics.

Off the control path: nothing here feeds the gate, the drivers or the policy; the launcher starts
it not required and at normal priority (below the stack's), so under load it is what waits. Its
work per message is bounded: a dictionary look-up and one quaternion product per named joint, in
plain floats, and one publish.

Parameters: RobotStateConfig (egomimic_hw.urdf): `robot_description` (URDF text) or `urdf_path`;
neither: the shipped `egomimic_bringup/urdf/eva.urdf`.

Frames that are NOT on TF: the dataset frames `<arm>_base_dataset` of ee_pose_dataset, policy
actions and episodes are `R_ds = M R_hw` with the translation unchanged (egomimic_hw.frames), not
a rigid transform of `<arm>_base`; no transform is published for them and a TF consumer must not
try to resolve that frame id (README, "TF and robot description").
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import TransformStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from tf2_msgs.msg import TFMessage

from egomimic_hw.description import ARMS
from egomimic_hw.urdf import RobotStateConfig, UrdfJoint, UrdfModel
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.params import declare_config
from egomimic_nodes.spin import run_node

SHIPPED_URDF = "urdf/eva.urdf"
"""Relative to the egomimic_bringup package (its source or share directory)."""


def shipped_urdf_path() -> Path:
    from egomimic_bringup import PACKAGE_DIR

    return PACKAGE_DIR / SHIPPED_URDF


def transform_stamped(joint: UrdfJoint, xyz, quat_wxyz) -> TransformStamped:
    t = TransformStamped()
    t.header.frame_id = joint.parent
    t.child_frame_id = joint.child
    set_transform(t, xyz, quat_wxyz)
    return t


def set_transform(t: TransformStamped, xyz, quat_wxyz) -> None:
    tr, rot = t.transform.translation, t.transform.rotation
    tr.x, tr.y, tr.z = (float(v) for v in xyz)
    rot.w, rot.x, rot.y, rot.z = (float(v) for v in quat_wxyz)


class RobotStateNode(Node):
    PARAMETERS = ((RobotStateConfig, "", ()),)

    def __init__(self):
        super().__init__("robot_state")
        config = declare_config(self, RobotStateConfig)
        if config.robot_description.strip():
            text, source = config.robot_description, "the robot_description parameter"
        else:
            path = Path(config.urdf_path) if config.urdf_path.strip() else shipped_urdf_path()
            text, source = path.read_text(), str(path)
        self.model = UrdfModel.from_string(text)
        # Per moving joint: the joint, its origin quaternion (cached) and a reusable message.
        self._moving = {
            j.name: (j, j.origin_quat, transform_stamped(j, j.xyz, j.origin_quat)) for j in self.model.moving_joints
        }
        self.counts: Counter[str] = Counter()
        self._ignored: set[str] = set()
        self._pub_tf = self.create_publisher(TFMessage, topics.TF.name(), topics.TF.qos)
        self._pub_static = self.create_publisher(TFMessage, topics.TF_STATIC.name(), topics.TF_STATIC.qos)
        self._pub_description = self.create_publisher(
            String, topics.ROBOT_DESCRIPTION.name(), topics.ROBOT_DESCRIPTION.qos
        )
        self._pub_diag = self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        self._publish_static()
        self._pub_description.publish(String(data=text))
        for arm in ARMS:
            self.create_subscription(
                JointState, topics.JOINT_STATES.name(arm), self._on_joint_states, topics.JOINT_STATES.qos
            )
        self.create_timer(1.0, self._publish_diagnostics)
        self.get_logger().info(
            f"robot {self.model.name!r} from {source}: root {self.model.root}, {len(self.model.links)} links, "
            f"{len(self._moving)} moving joints on {topics.TF.name()}, {len(self.model.fixed_joints)} fixed on "
            f"{topics.TF_STATIC.name()}"
        )

    def _publish_static(self) -> None:
        stamp = self.get_clock().now().to_msg()
        msg = TFMessage()
        for joint in self.model.fixed_joints:
            t = transform_stamped(joint, joint.xyz, joint.origin_quat)
            t.header.stamp = stamp
            msg.transforms.append(t)
        self._pub_static.publish(msg)

    def _on_joint_states(self, msg: JointState) -> None:
        out = TFMessage()
        for name, position in zip(msg.name, msg.position):
            entry = self._moving.get(name)
            if entry is None:
                if name not in self._ignored:
                    self._ignored.add(name)
                    self.get_logger().info(f"{name!r} on joint_states is not a joint of the robot description: ignored")
                continue
            if not math.isfinite(position):
                self.counts["non_finite_positions"] += 1
                continue
            joint, origin_quat, t = entry
            xyz, quat = joint.transform_quat(position, origin_quat)
            set_transform(t, xyz, quat)
            t.header.stamp = msg.header.stamp
            out.transforms.append(t)
        if out.transforms:
            self._pub_tf.publish(out)
            self.counts["tf_published"] += 1

    def _publish_diagnostics(self) -> None:
        bad = self.counts["non_finite_positions"]
        values = dict(sorted(self.counts.items()))
        values["ignored_names"] = ",".join(sorted(self._ignored))
        self._pub_diag.publish(
            diagnostics.array(
                self,
                diagnostics.status(
                    "robot_state",
                    "robot_state",
                    diagnostics.WARN if bad else diagnostics.OK,
                    f"{bad} non-finite joint position(s) left out" if bad else "publishing",
                    values,
                ),
            )
        )


def main(args=None) -> int:
    return run_node(RobotStateNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
