"""Bring-up stage 3 check: the poses on the topics are link6 of the measured joints.

Listens to `<ns>/<arm>/joint_states` and `<ns>/<arm>/ee_pose` of a running graph (real arms
powered, gate disarmed) for --seconds, pairs samples by their stamp (the driver stamps a pose
with its joints' stamp) and compares each pose with an independent link6 FK of the joints
(Pinocchio on the URDF; the driver uses the SDK's solver where it imports). Exit 0 when every
pair agrees within --tol-m and --tol-rad, 1 otherwise, 2 when too few pairs arrived (is the
graph running on this ROS_DOMAIN_ID?). Sets ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and
ROS_DOMAIN_ID=42 unless they are set, like egomimic-launch.

Run: `.venv/bin/python tools/pose_check.py [--seconds 5] [--namespace eva]`.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))

MIN_PAIRS = 20


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="how long to listen (default 5)")
    ap.add_argument("--namespace", default="eva", help="robot namespace (default eva)")
    ap.add_argument("--tol-m", type=float, default=1e-6, help="position tolerance, metres (default 1e-6)")
    ap.add_argument("--tol-rad", type=float, default=1e-6, help="rotation tolerance, radians (default 1e-6)")
    args = ap.parse_args()

    from egomimic_launch.environment import apply_to_this_process

    apply_to_this_process()
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState

    from egomimic_hw.description import ARMS
    from egomimic_hw.pinocchio_kinematics import PinocchioArm
    from egomimic_hw.rotations import geodesic_angle, quat_to_mat
    from egomimic_nodes import topics

    reference = PinocchioArm()
    lock = threading.Lock()
    joints = {arm: {} for arm in ARMS}
    poses = {arm: {} for arm in ARMS}

    def stamp(msg) -> int:
        return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec

    rclpy.init()
    node = rclpy.create_node("pose_check")
    for arm in ARMS:

        def on_joints(msg, arm=arm):
            with lock:
                joints[arm][stamp(msg)] = np.array(msg.position[:6], dtype=float)

        def on_pose(msg, arm=arm):
            p, o = msg.pose.position, msg.pose.orientation
            with lock:
                poses[arm][stamp(msg)] = np.array([p.x, p.y, p.z, o.w, o.x, o.y, o.z])

        node.create_subscription(
            JointState, topics.JOINT_STATES.resolve(args.namespace, arm=arm), on_joints, topics.JOINT_STATES.qos
        )
        node.create_subscription(
            PoseStamped, topics.EE_POSE.resolve(args.namespace, arm=arm), on_pose, topics.EE_POSE.qos
        )
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()

    status = 0
    for arm in ARMS:
        pairs = [(q, poses[arm][s]) for s, q in joints[arm].items() if s in poses[arm]]
        if len(pairs) < MIN_PAIRS:
            print(
                f"{arm.value}: only {len(pairs)} joint_states/ee_pose pairs in {args.seconds:.0f} s (need {MIN_PAIRS})"
            )
            status = max(status, 2)
            continue
        errors = []
        for q, pose in pairs:
            ref = reference.forward(q)
            errors.append(
                (
                    float(np.linalg.norm(pose[:3] - ref[:3])),
                    float(geodesic_angle(quat_to_mat(pose[3:]), quat_to_mat(ref[3:]))),
                )
            )
        worst_m, worst_rad = np.max(errors, axis=0)
        ok = worst_m <= args.tol_m and worst_rad <= args.tol_rad
        print(
            f"{arm.value}: {len(pairs)} pairs; worst disagreement with link6 FK {worst_m:.2e} m, {worst_rad:.2e} rad: "
            f"{'PASS' if ok else 'FAIL'}"
        )
        if not ok:
            status = max(status, 1)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
