"""Messages built once and patched per frame are what publish() would send: the same length
and the same message when read back (CDR alignment padding is unspecified: rclpy leaves
whatever its buffer held there, so only those bytes may differ)."""

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import CameraInfo, Image

from egomimic_nodes.msg_convert import fill_image, ns_to_stamp
from egomimic_nodes.serialized import SerializedImage, serialized_camera_info


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
    template = serialized_camera_info(info)
    assert (info.header.stamp.sec, info.header.stamp.nanosec) == (0, 0), "the caller's message is left as it was"
    template.stamp(12_000_000_345)
    info.header.stamp = ns_to_stamp(12_000_000_345)
    assert len(template.buffer) == len(serialize_message(info))
    assert deserialize_message(bytes(template.buffer), CameraInfo) == info


def test_a_frame_of_the_wrong_shape_is_refused():
    template = SerializedImage("x", 4, 4)
    with pytest.raises(ValueError):
        template.fill(0, np.zeros((4, 5, 3), np.uint8))
