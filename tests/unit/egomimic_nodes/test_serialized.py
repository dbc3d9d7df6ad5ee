"""Messages built once and patched per frame are what publish() would send: the same length
and the same message when read back (CDR alignment padding is unspecified: rclpy leaves
whatever its buffer held there, so only those bytes may differ)."""

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from egomimic_nodes.cdr_length import serialize
from egomimic_nodes.msg_convert import fill_image, ns_to_stamp
from egomimic_nodes.serialized import (
    JointStateLayout,
    SerializedImage,
    SerializedJointState,
    SerializedTemplate,
    read_compressed_image,
    read_header,
    read_image,
    read_joint_state,
    read_pose_stamped,
)


@pytest.mark.parametrize("height,width", [(480, 640), (7, 5)])  # 5 px: rows of 15 bytes, odd lengths
def test_serialized_image_equals_the_serialized_message(height, width):
    rng = np.random.default_rng(1)
    template = SerializedImage("front_1_optical", height, width)
    for stamp_ns in (0, 1_796_321_441_837_479_832, 2**31 * 1_000_000_000 - 1):
        rgb = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        msg = Image()
        msg.header.frame_id = "front_1_optical"
        msg.header.stamp = ns_to_stamp(stamp_ns)
        fill_image(msg, rgb)
        raw, reference = bytes(template.fill(stamp_ns, rgb)), serialize_message(msg)
        assert len(raw) == len(reference)
        back = deserialize_message(raw, Image)
        assert back == msg
        assert (back.header.stamp.sec, back.header.stamp.nanosec) == divmod(stamp_ns, 1_000_000_000)
        assert np.array_equal(np.frombuffer(back.data, np.uint8).reshape(height, width, 3), rgb)


def test_camera_info_template_keeps_everything_but_the_stamp():
    info = CameraInfo()
    info.header.frame_id = "left_wrist_optical"
    info.width, info.height, info.distortion_model = 640, 480, "plumb_bob"
    info.k = [400.0, 0.0, 320.0, 0.0, 400.0, 240.0, 0.0, 0.0, 1.0]
    template = SerializedTemplate(info)
    assert (info.header.stamp.sec, info.header.stamp.nanosec) == (0, 0), "the caller's message is left as it was"
    template.stamp(12_000_000_345)
    info.header.stamp = ns_to_stamp(12_000_000_345)
    assert len(template.buffer) == len(serialize(info))
    assert deserialize_message(bytes(template.buffer), CameraInfo) == info


def test_a_frame_of_the_wrong_shape_is_refused():
    template = SerializedImage("x", 4, 4)
    with pytest.raises(ValueError):
        template.fill(0, np.zeros((4, 5, 3), np.uint8))


def _joint_state(names, position, velocity=(), effort=(), frame_id="left_base", stamp_ns=1_796_000_000_123_456_789):
    from sensor_msgs.msg import JointState

    msg = JointState()
    msg.header.frame_id = frame_id
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.name, msg.position, msg.velocity, msg.effort = list(names), list(position), list(velocity), list(effort)
    return msg


def test_serialized_joint_state_reads_back_as_the_message():
    from sensor_msgs.msg import JointState

    names = [f"left_joint{k}" for k in range(1, 7)] + ["left_gripper"]
    template = SerializedJointState("left_base", names)
    rng = np.random.default_rng(2)
    for stamp_ns in (5, 1_796_321_441_837_479_832):
        p, v = rng.normal(size=7), rng.normal(size=7)
        raw = template.fill(stamp_ns, p, v)
        reference = _joint_state(names, p, v, stamp_ns=stamp_ns)
        assert len(raw) == len(serialize(reference))  # what publish() sends: no slack after the message
        assert deserialize_message(raw, JointState) == reference


@pytest.mark.parametrize(
    "names,position,velocity,effort,frame_id",
    [
        ([f"left_joint{k}" for k in range(1, 7)] + ["left_gripper"], np.arange(7) * 0.1, np.ones(7), (), "left_base"),
        (["a"], [1.5], (), (), ""),  # one short name, no frame_id
        (["ab", "abc", "abcd", "abcde"], [1.0, 2.0, 3.0, 4.0], [1.0], [2.0], "x"),  # every name length mod 4
        (["j1", "j2"], [], [0.5, 0.5], (), "odd"),  # no positions
        ([], [], (), (), "nothing"),
    ],
)
def test_read_joint_state_matches_deserialization(names, position, velocity, effort, frame_id):
    msg = _joint_state(names, position, velocity, effort, frame_id)
    stamp_ns, got_names, got_position = read_joint_state(serialize_message(msg))
    assert stamp_ns == 1_796_000_000_123_456_789
    assert got_names == list(names) and np.array_equal(got_position, np.asarray(position, float))


def test_read_joint_state_refuses_what_is_not_one():
    raw = serialize_message(_joint_state(["left_joint1", "left_joint2"], [0.1, 0.2]))
    positions_end = raw.find(np.asarray([0.1, 0.2], "<f8").tobytes()) + 16
    # truncated (in the header; in the last position), big-endian, empty
    for bad in (raw[:10], raw[: positions_end - 1], b"\x00\x00" + raw[2:], b"", raw[:4]):
        with pytest.raises(ValueError):
            read_joint_state(bad)
    names_count = 4 + 24  # encapsulation; stamp 8, frame_id 4 + len("left_base\0") = 22, aligned to 24
    assert raw[names_count : names_count + 4] == (2).to_bytes(4, "little")
    huge = raw[:names_count] + (10**6).to_bytes(4, "little") + raw[names_count + 4 :]
    with pytest.raises(ValueError, match="joint names"):
        read_joint_state(huge)


@pytest.mark.parametrize("frame_id,height,width", [("front_1_optical", 480, 640), ("x", 7, 5), ("", 1, 1)])
def test_read_image_returns_the_stamp_and_a_view_of_the_pixels(frame_id, height, width):
    rgb = np.random.default_rng(2).integers(0, 256, (height, width, 3), dtype=np.uint8)
    msg = Image()
    msg.header.frame_id = frame_id
    msg.header.stamp = ns_to_stamp(1_796_321_441_837_479_832)
    raw = serialize_message(fill_image(msg, rgb))
    stamp_ns, pixels = read_image(raw)
    assert stamp_ns == 1_796_321_441_837_479_832 and np.array_equal(pixels, rgb)
    assert pixels.base is not None and not pixels.flags.writeable, "a view of the bytes, not a copy"


def test_read_image_refuses_what_it_cannot_take_as_rgb8():
    msg = Image(height=2, width=2, encoding="bgr8", step=6, data=bytes(12))
    with pytest.raises(ValueError, match="encoding 'bgr8'"):
        read_image(serialize_message(msg))
    msg = Image(height=2, width=2, encoding="rgb8", step=8, data=bytes(16))  # padded rows
    with pytest.raises(ValueError, match="step 8"):
        read_image(serialize_message(msg))
    raw = serialize_message(Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(12)))
    with pytest.raises(ValueError):
        read_image(raw[:-3])
    with pytest.raises(ValueError, match="little-endian"):
        read_image(b"\x00\x00" + raw[2:])


@pytest.mark.parametrize("frame_id", ["left_base_dataset", "", "abc"])  # lengths that move the pose's alignment
def test_read_pose_stamped_matches_deserialization(frame_id):
    from geometry_msgs.msg import PoseStamped

    from egomimic_nodes.msg_convert import pose_stamped, pose_to_array

    pose = np.array([0.1, -0.2, 0.3, 0.5, 0.5, -0.5, 0.5])
    raw = serialize_message(pose_stamped(pose, frame_id, ns_to_stamp(1_796_321_441_837_479_832)))
    stamp_ns, got_frame, got = read_pose_stamped(raw)
    assert stamp_ns == 1_796_321_441_837_479_832 and got_frame == frame_id
    np.testing.assert_array_equal(got, pose_to_array(deserialize_message(raw, PoseStamped).pose))
    with pytest.raises(ValueError):
        read_pose_stamped(raw[:30])


def test_a_joint_state_layout_reads_like_read_joint_state_and_follows_a_change():
    from sensor_msgs.msg import JointState

    layout = JointStateLayout()
    template = SerializedJointState("left_base", [f"left_joint{i}" for i in range(1, 7)] + ["left_gripper"])
    for k in range(3):  # the driver's messages: the fast path after the first
        raw = template.fill(1_000 + k, np.arange(7) * 0.1 + k, np.zeros(7))
        assert layout.read(raw)[0] == read_joint_state(raw)[0]
        np.testing.assert_array_equal(layout.read(raw)[2], read_joint_state(raw)[2])
        assert layout.read(raw)[1] == read_joint_state(raw)[1]
    other = serialize_message(JointState(name=["a", "b"], position=[1.0, 2.0]))  # another layout: read in full
    assert layout.read(other)[1] == ["a", "b"] and list(layout.read(other)[2]) == [1.0, 2.0]


@pytest.mark.parametrize("encoding,frame_id", [("rgb8", "front_1_optical"), ("bgr8", ""), ("16UC1", "a" * 37)])
def test_read_header_reads_the_stamp_and_frame_of_any_image(encoding, frame_id):
    msg = Image(height=3, width=5, encoding=encoding, step=15, data=bytes(45))
    msg.header.stamp = ns_to_stamp(1_796_000_000_123_456_789)
    msg.header.frame_id = frame_id
    assert read_header(serialize_message(msg)) == (1_796_000_000_123_456_789, frame_id)


def test_read_header_refuses_what_is_not_a_message():
    for bad in (b"", b"\x00\x01\x00\x00", b"\x00\x01\x00\x00" + bytes(6), b"\x00\x00\x00\x00" + bytes(20)):
        with pytest.raises(ValueError):
            read_header(bad)


@pytest.mark.parametrize("frame_id,fmt,n", [("front_1_optical", "rgb8; jpeg compressed bgr8", 5001), ("", "jpeg", 0)])
def test_read_compressed_image_returns_the_stamp_format_and_data(frame_id, fmt, n):
    data = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8).tobytes()
    msg = CompressedImage(format=fmt, data=data)
    msg.header.frame_id = frame_id
    msg.header.stamp = ns_to_stamp(1_796_321_441_837_479_832)
    raw = serialize_message(msg)
    stamp_ns, got_fmt, got = read_compressed_image(raw)
    assert (stamp_ns, got_fmt, bytes(got)) == (1_796_321_441_837_479_832, fmt, data)
    with pytest.raises(ValueError):
        read_compressed_image(raw[: len(raw) - 1]) if n else read_compressed_image(raw[:10])
