"""The exact end of a serialized message (egomimic_nodes.cdr_length): what we publish is what
publish() sends, and rosbags, which refuses a message with bytes after its end, reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped, TransformStamped
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.msg import get_types_from_msg
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, JointState
from std_msgs.msg import String
from tf2_msgs.msg import TFMessage

from egomimic_msgs.msg import ActionChunk, BimanualCommand, CameraHealth, GateStatus, RecorderStatus
from egomimic_nodes.cdr_length import cdr_length, exact, serialize

MSG_DIR = Path(__file__).resolve().parents[3] / "ros2_ws" / "src" / "egomimic_msgs" / "msg"


def _typestore():
    store = get_typestore(Stores.LATEST)
    types = {}
    for path in sorted(MSG_DIR.glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(), f"egomimic_msgs/msg/{path.stem}"))
    store.register(types)
    return store


def _joint_state(n: int, velocities: bool) -> JointState:
    msg = JointState(name=[f"left_joint{i}" for i in range(n)], position=[0.1 * i for i in range(n)])
    msg.header.frame_id = "left_base"
    msg.velocity = [0.2] * n if velocities else []
    return msg


def _chunk(rows: int) -> ActionChunk:
    chunk = ActionChunk(chunk_id=7, period=0.25)  # exact in any float width
    for i in range(rows):
        row = BimanualCommand(chunk_id=7, row=i, left_gripper=0.25 * i)
        row.header.frame_id = "dataset"
        row.left.header.frame_id, row.right.header.frame_id = "left_dataset", "right_dataset"
        chunk.rows.append(row)
    return chunk


def _diagnostics() -> DiagnosticArray:
    status = DiagnosticStatus(name="safety_gate", message="armed", hardware_id="eva")
    status.values = [KeyValue(key=f"k{i}", value="x" * i) for i in range(5)]
    return DiagnosticArray(status=[status, DiagnosticStatus(name="driver_left")])


MESSAGES = [
    String(data=""),
    String(data="abc"),
    _joint_state(7, velocities=False),
    _joint_state(7, velocities=True),
    _joint_state(0, velocities=False),
    Image(height=2, width=3, encoding="rgb8", step=9, data=bytes(range(18))),
    CompressedImage(format="jpeg", data=bytes(101)),
    CameraInfo(distortion_model="plumb_bob", d=[0.0] * 5),
    PoseStamped(),
    TFMessage(transforms=[TransformStamped(child_frame_id="left_link6"), TransformStamped()]),
    _diagnostics(),
    BimanualCommand(),
    _chunk(3),
    _chunk(100),
    CameraHealth(),
    GateStatus(),
    RecorderStatus(),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_the_exact_bytes_read_back_here_and_in_rosbags(msg):
    store = _typestore()
    raw = serialize(msg)
    assert len(raw) <= len(serialize_message(msg))  # (alignment padding is not initialized: bytes may differ)
    assert deserialize_message(raw, type(msg)) == msg
    typename = type(msg).__module__.split(".")[0] + "/msg/" + type(msg).__name__
    store.deserialize_cdr(raw, typename)  # strict: it refuses bytes after the end of the message
    assert cdr_length(raw, type(msg)) == len(raw)


def test_rclpy_serializes_a_joint_state_with_slack_and_the_cut_is_what_publish_sends():
    """Measured over DDS (2026-12-07): publish() sent 204 bytes of this message, serialize_message
    gave 212, and an Outbox sent the 212; rosbags refused them."""
    msg = JointState(name=["a" * 11] * 7, position=[1.0] * 7)
    assert len(serialize_message(msg)) == 212
    assert len(serialize(msg)) == 204


def test_bad_bytes_are_refused_with_what_is_wrong():
    raw = serialize(_joint_state(7, velocities=True))
    with pytest.raises(ValueError, match="end inside|needs"):
        cdr_length(raw[:40], JointState)
    with pytest.raises(ValueError, match="little-endian"):
        cdr_length(b"\x00\x00" + raw[2:], JointState)
    assert exact(raw + b"\xff" * 8, JointState) == raw


def test_a_message_with_a_stamp_only_is_cut_nowhere():
    raw = serialize_message(Time(sec=1, nanosec=2))
    assert serialize(Time(sec=1, nanosec=2)) == raw and len(raw) == 12
