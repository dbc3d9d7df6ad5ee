"""Message <-> numpy conversions. ROS quaternions are xyzw; our arrays are wxyz (rotations.py).

Images are filled and read with buffer copies (`tobytes` / `np.frombuffer`): per-element
conversions of a 640x480 image cost 15-46 ms.
"""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseStamped
from sensor_msgs.msg import Image


def stamp_to_s(stamp: Time) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def stamp_to_ns(stamp: Time) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def ns_to_stamp(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def pose_to_array(pose: Pose) -> np.ndarray:
    """`[x, y, z, qw, qx, qy, qz]` of a geometry_msgs/Pose."""
    p, q = pose.position, pose.orientation
    return np.array([p.x, p.y, p.z, q.w, q.x, q.y, q.z], dtype=float)


def array_to_pose(values, out: Pose | None = None) -> Pose:
    v = [float(x) for x in values]
    pose = out if out is not None else Pose()
    pose.position.x, pose.position.y, pose.position.z = v[0], v[1], v[2]
    pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = v[3], v[4], v[5], v[6]
    return pose


def pose_stamped(values, frame_id: str, stamp: Time) -> PoseStamped:
    msg = PoseStamped()
    msg.header.frame_id = frame_id
    msg.header.stamp = stamp
    array_to_pose(values, msg.pose)
    return msg


def image_to_array(msg: Image) -> np.ndarray:
    """Zero-copy (H, W, 3) view of an rgb8 Image."""
    if msg.encoding != "rgb8":
        raise ValueError(f"expected rgb8 image, got {msg.encoding!r}")
    return np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3)


def fill_image(msg: Image, rgb: np.ndarray) -> Image:
    """Fill an rgb8 Image from an (H, W, 3) uint8 array with one buffer copy."""
    h, w = rgb.shape[:2]
    msg.height, msg.width, msg.encoding, msg.is_bigendian, msg.step = h, w, "rgb8", 0, w * 3
    msg.data = rgb.tobytes()
    return msg
