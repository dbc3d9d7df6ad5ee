"""Taking samples without the GIL (egomimic_nodes.taken.take_one): the same message and the same
info as rclpy's take_message, raw or not, None when nothing waits, and the middleware call made
through ctypes.CDLL, which releases the GIL (bench/take_stall.py measures a blocked take)."""

import os
import time

import pytest
from geometry_msgs.msg import PoseStamped
from rclpy.serialization import deserialize_message

from egomimic_nodes import qos, taken
from egomimic_nodes.taken import TakenSubscriptions, take_one


@pytest.fixture
def context():
    import rclpy
    from rclpy.context import Context

    ctx = Context()
    rclpy.init(context=ctx, domain_id=int(os.environ.get("ROS_DOMAIN_ID", "0")))
    yield ctx
    rclpy.shutdown(context=ctx)


def pose(i: int) -> PoseStamped:
    msg = PoseStamped()
    msg.header.frame_id = "left_base"
    msg.header.stamp.sec = i
    msg.pose.position.x = 0.1 * i
    msg.pose.orientation.w = 1.0
    return msg


def test_take_one_gives_what_rclpy_gives(context):
    subs = TakenSubscriptions(context, "taken_probe")
    pub_node = __import__("rclpy").create_node("taken_probe_pub", context=context)
    try:
        reader = subs.subscribe(PoseStamped, "/taken_probe/pose", qos.SENSOR)
        raw_reader = subs.subscribe(PoseStamped, "/taken_probe/pose", qos.SENSOR, raw=True)
        ref_reader = subs.subscribe(PoseStamped, "/taken_probe/pose", qos.SENSOR)
        pub = pub_node.create_publisher(PoseStamped, "/taken_probe/pose", qos.SENSOR)
        readers = [reader, raw_reader, ref_reader]
        deadline = time.monotonic() + 10
        while any(r.handle.get_publisher_count() == 0 for r in readers) or pub.get_subscription_count() < 3:
            assert time.monotonic() < deadline, "no match"
            subs.wait(readers, 0.05)
        assert take_one(reader) is None, "nothing published yet"
        for i in (1, 2):
            pub.publish(pose(i))
        got = []
        for sub in readers:
            deadline = time.monotonic() + 10
            samples = []
            while len(samples) < 2:
                assert time.monotonic() < deadline, f"{len(samples)} of 2 samples arrived"
                subs.wait([sub], 0.05)
                samples += TakenSubscriptions.take(sub)
            got.append(samples)
        with ref_reader.handle:
            assert ref_reader.handle.take_message(PoseStamped, False) is None
        ours, raw, ref = got
        for i, ((msg, info), (raw_bytes, raw_info)) in enumerate(zip(ours, raw, strict=True), start=1):
            assert msg == pose(i)
            assert isinstance(raw_bytes, bytes) and deserialize_message(raw_bytes, PoseStamped) == pose(i)
            assert info.keys() == raw_info.keys()
            assert info["publisher_gid"] == raw_info["publisher_gid"]
        # rclpy's own take of the same samples (a third reader): the info as rclpy lays it out
        for (msg, info), (ref_msg, ref_info) in zip(ours, ref, strict=True):
            assert msg == ref_msg
            assert info.keys() == ref_info.keys()
            assert info["publisher_gid"] == ref_info["publisher_gid"]
            assert info["publisher_gid"]["implementation_identifier"] == "rmw_fastrtps_cpp"
            assert len(info["publisher_gid"]["data"]) == taken.GID_STORAGE_SIZE
            assert info["publication_sequence_number"] == ref_info["publication_sequence_number"]
            assert abs(info["source_timestamp"] - ref_info["source_timestamp"]) == 0
            assert info["received_timestamp"] > 0 and ref_info["received_timestamp"] > 0
        assert ours[1][1]["publication_sequence_number"] == ours[0][1]["publication_sequence_number"] + 1
        assert take_one(reader) is None and take_one(raw_reader) is None
    finally:
        pub_node.destroy_node()
        subs.destroy()


def test_the_middleware_call_is_made_without_the_gil():
    """rcl_take_serialized_message is a CDLL function: ctypes releases the GIL around it (a
    PyDLL function, like rclpy's take_message, would keep it)."""
    import ctypes

    fn = taken._lib()[0]
    assert isinstance(fn, ctypes._CFuncPtr) and fn.__name__ == "rcl_take_serialized_message"
    assert not type(fn)._flags_ & ctypes._FUNCFLAG_PYTHONAPI, "the GIL would be held during the take"
