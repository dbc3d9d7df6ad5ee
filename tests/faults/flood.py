"""A command flood from its own process (own GIL, own DDS participant), for the fault battery:

    python tests/faults/flood.py RATE_HZ DURATION_S POSES_JSON

publishes valid `command/proposed` messages (hardware frame, the given left/right poses
[x, y, z, qw, qx, qy, qz]) at RATE_HZ for DURATION_S, prints "flooding" once matched, and at the
end "published N in T s"."""

from __future__ import annotations

import json
import sys
import time

import rclpy

from egomimic_hw.description import ARMS
from egomimic_msgs.msg import BimanualCommand
from egomimic_nodes import topics
from egomimic_nodes.msg_convert import array_to_pose


def main() -> None:
    rate_hz, duration_s, poses = float(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
    rclpy.init()
    node = rclpy.create_node("command_flood")
    pub = node.create_publisher(BimanualCommand, topics.COMMAND_PROPOSED.resolve("eva"), topics.COMMAND_PROPOSED.qos)
    deadline = time.time() + 10
    while pub.get_subscription_count() < 1 and time.time() < deadline:
        time.sleep(0.01)
    msg = BimanualCommand()
    for arm in ARMS:
        ps = getattr(msg, arm.value)
        ps.header.frame_id = arm.hw_frame
        array_to_pose(poses[arm.value], ps.pose)
        setattr(msg, f"{arm.value}_gripper", 0.5)
    print("flooding", flush=True)
    t0 = time.perf_counter()
    n = 0
    period = 1.0 / rate_hz
    while (now := time.perf_counter()) - t0 < duration_s:
        due = int((now - t0) / period) + 1  # publish what is due (catch up in bursts, never fall behind)
        while n < due:
            ns = time.time_ns()
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
            pub.publish(msg)
            n += 1
        time.sleep(max(0.0, t0 + n * period - time.perf_counter()))
    print(f"published {n} in {time.perf_counter() - t0:.3f} s", flush=True)
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()
