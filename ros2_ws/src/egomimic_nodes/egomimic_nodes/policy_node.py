"""Policy node (foundation: the scripted policy). Publishes `policy/action` (dataset frame)
at `rate_hz` = 30 Hz.

`policy:=scripted` runs egomimic_policy.scripted.ScriptedMotion: not a model, a known smooth
bimanual path anchored at the measured dataset-frame poses (`<arm>/ee_pose_dataset`) and the
measured grippers (`<arm>/joint_states`). Stale inputs are never used silently: until both arms
have been seen, and whenever an input is older than `max_input_age_s`, nothing is published
(the gate then sees a stale command and holds). `policy/reset` re-anchors at the current pose.
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from egomimic_hw.description import ARMS, JOINTS_PER_ARM, Arm
from egomimic_msgs.msg import BimanualCommand
from egomimic_nodes import qos
from egomimic_nodes.msg_convert import array_to_pose, pose_to_array, stamp_to_ns
from egomimic_nodes.params import declare_config
from egomimic_nodes.spin import run_node
from egomimic_policy.scripted import ScriptedMotion, ScriptedMotionConfig


class PolicyNode(Node):
    def __init__(self):
        super().__init__("policy")
        self.policy = self.declare_parameter("policy", "scripted").value
        if self.policy != "scripted":
            raise ValueError(f"policy {self.policy!r} is not available yet; choices: ['scripted']")
        rate_hz = float(self.declare_parameter("rate_hz", 30.0).value)
        self.max_input_age_s = float(self.declare_parameter("max_input_age_s", 0.2).value)
        self.motion_config = declare_config(self, ScriptedMotionConfig, prefix="scripted.")
        self._pose: dict[Arm, tuple[int, np.ndarray]] = {}
        self._gripper: dict[Arm, tuple[int, float]] = {}
        for arm in ARMS:
            self.create_subscription(PoseStamped, f"{arm.value}/ee_pose_dataset", self._pose_cb(arm), qos.SENSOR)
            self.create_subscription(JointState, f"{arm.value}/joint_states", self._joint_cb(arm), qos.SENSOR)
        self._pub = self.create_publisher(BimanualCommand, "policy/action", qos.COMMAND)
        self.create_service(Trigger, "policy/reset", self._on_reset)
        self._motion: ScriptedMotion | None = None
        self._t_anchor_ns = 0
        self._tick = 0
        self._withheld = 0
        self.create_timer(1.0 / rate_hz, self._on_tick)
        self.get_logger().info(f"scripted policy (not a model) at {rate_hz} Hz")

    def _pose_cb(self, arm):
        def cb(msg: PoseStamped) -> None:
            self._pose[arm] = (stamp_to_ns(msg.header.stamp), pose_to_array(msg.pose))
        return cb

    def _joint_cb(self, arm):
        def cb(msg: JointState) -> None:
            if len(msg.position) > JOINTS_PER_ARM:
                self._gripper[arm] = (stamp_to_ns(msg.header.stamp), float(msg.position[JOINTS_PER_ARM]))
        return cb

    def _inputs_fresh(self, now_ns: int) -> tuple[bool, str]:
        limit_ns = int(self.max_input_age_s * 1e9)
        for arm in ARMS:
            for name, table in (("ee_pose_dataset", self._pose), ("joint_states", self._gripper)):
                if arm not in table:
                    return False, f"waiting for {arm.value}/{name}"
                if now_ns - table[arm][0] > limit_ns:
                    return False, f"{arm.value}/{name} is {(now_ns - table[arm][0]) / 1e6:.0f} ms old"
        return True, ""

    def _on_reset(self, request, response):
        self._motion = None
        response.success, response.message = True, "re-anchoring at the next fresh observation"
        return response

    def _on_tick(self) -> None:
        now = self.get_clock().now()
        now_ns = now.nanoseconds
        fresh, why = self._inputs_fresh(now_ns)
        if not fresh:
            self._withheld += 1
            self.get_logger().warning(f"not publishing: {why}", throttle_duration_sec=2.0)
            return
        if self._motion is None:
            self._motion = ScriptedMotion(
                self.motion_config,
                {a: self._pose[a][1] for a in ARMS},
                {a: self._gripper[a][1] for a in ARMS},
            )
            self._t_anchor_ns = now_ns
            self.get_logger().info("anchored the scripted motion at the measured poses")
        targets = self._motion.sample((now_ns - self._t_anchor_ns) * 1e-9)
        msg = BimanualCommand()
        msg.header.stamp = now.to_msg()
        msg.header.frame_id = "dataset"
        for arm in ARMS:
            pose, gripper = targets[arm]
            ps: PoseStamped = getattr(msg, arm.value)
            ps.header.stamp = msg.header.stamp
            ps.header.frame_id = arm.dataset_frame
            array_to_pose(pose, ps.pose)
            setattr(msg, f"{arm.value}_gripper", gripper)
        newest_obs_ns = max(self._pose[a][0] for a in ARMS)
        msg.observation_stamp.sec, msg.observation_stamp.nanosec = divmod(newest_obs_ns, 1_000_000_000)
        msg.chunk_id = 0
        msg.row = self._tick
        self._tick += 1
        self._pub.publish(msg)


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
