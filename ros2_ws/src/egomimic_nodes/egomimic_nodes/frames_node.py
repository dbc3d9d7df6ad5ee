"""Frames node: the one place where poses cross between the hardware and dataset frames.

  <arm>/ee_pose (hardware, <arm>_base)        -> <arm>/ee_pose_dataset (<arm>_base_dataset)
  policy/action (dataset, <arm>_base_dataset) -> command/proposed (hardware, <arm>_base)
Stamps, grippers and chunk provenance (chunk_id, row, observation_stamp) pass through
unchanged. A message in any other frame_id, or with a malformed pose, is refused (not
forwarded) and counted on /diagnostics: guessing a frame is how an arm goes to the wrong place.

Each output goes through an Outbox (its own sending thread): a subscriber that blocks one
writer (outbox.py) delays neither the other writer nor this node's callbacks, so the gate's
commands do not wait for the policy's poses, nor the poses for the commands.
"""

from __future__ import annotations

from collections import Counter

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.errors import PoseError
from egomimic_hw.frames import pose_ds_from_hw, pose_hw_from_ds
from egomimic_msgs.msg import BimanualCommand
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.msg_convert import array_to_pose, pose_to_array
from egomimic_nodes.outbox import Outbox, close_all, flush_all
from egomimic_nodes.spin import run_node

EXIT_FLUSH_S = 0.2
"""On exit, each writer gets this long to hand over what is queued."""
COMMAND_KEEP = 2
"""Proposed commands that may wait while their writer is blocked (two control periods); older
ones are dropped and counted: the gate judges each command by its stamp, and one that waited
longer would be stale there anyway."""


def pose_ds_from_hw_msg(arm: Arm, msg: PoseStamped) -> PoseStamped:
    """An arm's ee_pose (hardware frame) as its ee_pose_dataset: the pose converted, the stamp
    unchanged. PoseError names a wrong frame_id or a malformed pose. Shared with the replay
    regression (egomimic_launch.replay)."""
    if msg.header.frame_id != arm.hw_frame:
        raise PoseError(f"frame_id {msg.header.frame_id!r}, expected {arm.hw_frame!r}")
    out = PoseStamped()
    out.header.stamp = msg.header.stamp
    out.header.frame_id = arm.dataset_frame
    array_to_pose(pose_ds_from_hw(pose_to_array(msg.pose)), out.pose)
    return out


def command_hw_from_ds(msg: BimanualCommand) -> BimanualCommand:
    """A policy/action (dataset frame) as a command/proposed (hardware frame): poses converted,
    stamps, grippers and chunk provenance unchanged. PoseError names a wrong frame_id or a
    malformed pose. Shared with the replay regression (egomimic_launch.replay)."""
    out = BimanualCommand()
    out.header = msg.header
    out.left_gripper, out.right_gripper = msg.left_gripper, msg.right_gripper
    out.chunk_id, out.row, out.observation_stamp = msg.chunk_id, msg.row, msg.observation_stamp
    for arm in ARMS:
        src: PoseStamped = getattr(msg, arm.value)
        if src.header.frame_id != arm.dataset_frame:
            raise PoseError(f"{arm.value} frame_id {src.header.frame_id!r}, expected {arm.dataset_frame!r}")
        try:
            pose_hw = pose_hw_from_ds(pose_to_array(src.pose))
        except PoseError as exc:
            raise PoseError(f"{arm.value}: {exc}") from exc
        dst: PoseStamped = getattr(out, arm.value)
        dst.header.stamp = src.header.stamp
        dst.header.frame_id = arm.hw_frame
        array_to_pose(pose_hw, dst.pose)
    return out


class FramesNode(Node):
    def __init__(self):
        super().__init__("frames")
        self._pub_pose_ds = {}
        for arm in ARMS:
            self._pub_pose_ds[arm] = Outbox(
                self.create_publisher(PoseStamped, topics.EE_POSE_DATASET.name(arm), topics.EE_POSE_DATASET.qos)
            )
            self.create_subscription(PoseStamped, topics.EE_POSE.name(arm), self._pose_cb(arm), topics.EE_POSE.qos)
        self._pub_cmd = Outbox(
            self.create_publisher(BimanualCommand, topics.COMMAND_PROPOSED.name(), topics.COMMAND_PROPOSED.qos),
            keep=COMMAND_KEEP,
        )
        self.create_subscription(
            BimanualCommand, topics.POLICY_ACTION.name(), self._on_action, topics.POLICY_ACTION.qos
        )
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        )
        self.counts: Counter[str] = Counter()
        self.last_refusal = ""
        self.create_timer(1.0, self._publish_diagnostics)

    def _refuse(self, what: str, why: str) -> None:
        self.counts[f"{what}_refused"] += 1
        self.last_refusal = f"{what}: {why}"
        self.get_logger().warning(f"refused {what}: {why}", throttle_duration_sec=2.0)

    def _pose_cb(self, arm: Arm):
        def cb(msg: PoseStamped) -> None:
            try:
                out = pose_ds_from_hw_msg(arm, msg)
            except PoseError as exc:
                self._refuse(topics.EE_POSE.name(arm), str(exc))
                return
            self._pub_pose_ds[arm].publish(out)
            self.counts[f"{topics.EE_POSE.name(arm)}_converted"] += 1

        return cb

    def _on_action(self, msg: BimanualCommand) -> None:
        try:
            out = command_hw_from_ds(msg)
        except PoseError as exc:
            self._refuse(topics.POLICY_ACTION.name(), str(exc))
            return
        self._pub_cmd.publish(out)
        self.counts[f"{topics.POLICY_ACTION.name()}_converted"] += 1

    def _publish_diagnostics(self) -> None:
        refused = sum(v for k, v in self.counts.items() if k.endswith("_refused"))
        level = diagnostics.WARN if refused else diagnostics.OK
        values = dict(sorted(self.counts.items()))
        for box in (self._pub_cmd, *self._pub_pose_ds.values()):
            values.update({f"{box.topic}.{k}": v for k, v in box.stats().items()})
        values["last_refusal"] = self.last_refusal
        self._pub_diag.publish(
            diagnostics.array(
                self,
                diagnostics.status(
                    "frames", "frames", level, f"{refused} message(s) refused" if refused else "converting", values
                ),
            )
        )

    def on_exit(self) -> None:
        """Hand what is queued to the middleware (briefly), then stop the sending threads."""
        boxes = (self._pub_cmd, *self._pub_pose_ds.values(), self._pub_diag)
        flush_all(boxes, EXIT_FLUSH_S)
        close_all(boxes)


def main(args=None) -> int:
    return run_node(FramesNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
