"""Messages as CDR bytes: built once and patched per sample (a camera's Image and CameraInfo,
a driver's JointState), or read without building the message (read_joint_state, read_image,
read_pose_stamped, JointStateLayout).

Why: converting a 640x480 rgb8 Image to its C struct and serializing it costs about 1 ms of
CPU in rclpy (serialize_message, and publish() does the same), four copies of 900 KB, for a
message in which only the stamp and the pixels change from frame to frame. Here rclpy's own
serializer writes the message once, with the camera's frame_id, size and encoding; each frame
then writes its stamp into those bytes and copies its pixels into the data field (one copy,
~30 us), and outbox.publish_serialized hands the bytes to the middleware. The bytes are the
message publish() would have sent: the same length (cut where publish() ends the message:
cdr_length.py) and the same fields when read back (tests/unit checks both; only CDR alignment
padding, which is unspecified, may differ), so every subscriber, rviz and a bag included, sees the
same message.

CDR layout used (little-endian, as rclpy writes on these machines): a 4-byte encapsulation
header, then the first field, std_msgs/Header, whose stamp (int32 sec, uint32 nanosec) sits
at bytes 4..12; for Image, the last field `data` is a uint32 length followed by the bytes.
Both are checked when a template is built, so a different encoding fails at start, not with a
wrong image.
"""

from __future__ import annotations

import struct

import numpy as np
from sensor_msgs.msg import Image, JointState

from egomimic_nodes.cdr_length import serialize

STAMP = struct.Struct("<iI")
STAMP_OFFSET = 4
"""header.stamp, right after the CDR encapsulation header."""
PROBE_STAMP = (0x01020304, 0x05060708)
CDR_LE = b"\x00\x01"
"""The encapsulation id of little-endian plain CDR."""


class SerializedTemplate:
    """A message serialized once; `stamp(ns)` rewrites header.stamp in place (a CameraInfo,
    which never changes but for its stamp, is published as one)."""

    def __init__(self, msg):
        stamp = msg.header.stamp
        saved = (stamp.sec, stamp.nanosec)
        stamp.sec, stamp.nanosec = PROBE_STAMP  # distinct values, found where the layout says
        try:
            self.buffer = bytearray(serialize(msg))
        finally:
            stamp.sec, stamp.nanosec = saved
        if bytes(self.buffer[:2]) != CDR_LE:
            raise RuntimeError(
                f"{type(msg).__name__}: serialized as {bytes(self.buffer[:2]).hex()}, expected little-endian CDR"
            )
        if STAMP.unpack_from(self.buffer, STAMP_OFFSET) != PROBE_STAMP:
            raise RuntimeError(f"{type(msg).__name__}: header.stamp is not at byte {STAMP_OFFSET} of the CDR")
        self.stamp(saved[0] * 1_000_000_000 + saved[1])

    def stamp(self, stamp_ns: int) -> None:
        STAMP.pack_into(self.buffer, STAMP_OFFSET, *divmod(int(stamp_ns), 1_000_000_000))


class SerializedImage(SerializedTemplate):
    """An rgb8 sensor_msgs/Image of a fixed size and frame_id; `fill(stamp_ns, rgb)` makes it
    the given frame."""

    def __init__(self, frame_id: str, height: int, width: int):
        msg = Image()
        msg.header.frame_id = frame_id
        msg.height, msg.width, msg.encoding, msg.is_bigendian, msg.step = height, width, "rgb8", 0, width * 3
        n = height * width * 3
        msg.data = bytes(n)
        super().__init__(msg)
        offset = len(self.buffer) - n
        if struct.unpack_from("<I", self.buffer, offset - 4)[0] != n:
            raise RuntimeError("sensor_msgs/Image: the data field is not the last n bytes of the CDR")
        self.pixels = np.frombuffer(self.buffer, np.uint8, count=n, offset=offset).reshape(height, width, 3)
        """A view of the data field: what is written here is what is published."""

    def fill(self, stamp_ns: int, rgb: np.ndarray) -> bytearray:
        self.stamp(stamp_ns)
        np.copyto(self.pixels, rgb)
        return self.buffer


class SerializedJointState(SerializedTemplate):
    """A sensor_msgs/JointState with fixed frame_id and names and `n` positions and velocities
    (effort empty): the driver's 100 Hz joint_states. `fill()` writes the stamp and the values."""

    def __init__(self, frame_id: str, names: list[str]):
        n = len(names)
        probe_p = [1e300 + k * 1e285 for k in range(n)]  # distinct doubles, found once in the bytes
        probe_v = [-1e300 - k * 1e285 for k in range(n)]
        msg = JointState()
        msg.header.frame_id = frame_id
        msg.name, msg.position, msg.velocity = list(names), probe_p, probe_v
        super().__init__(msg)
        raw = bytes(self.buffer)
        self.position = self._doubles(raw, probe_p)
        self.velocity = self._doubles(raw, probe_v)

    def _doubles(self, raw: bytes, probe: list[float]) -> np.ndarray:
        offset = raw.find(np.asarray(probe, "<f8").tobytes())
        counts = {struct.unpack_from("<I", raw, offset - back)[0] for back in (4, 8) if offset >= back}
        if offset < 0 or len(probe) not in counts:  # its length sits right before it, or before the padding
            raise RuntimeError("sensor_msgs/JointState: a double sequence is not where CDR puts it")
        return np.frombuffer(self.buffer, "<f8", count=len(probe), offset=offset)

    def fill(self, stamp_ns: int, position, velocity) -> bytes:
        """The message's bytes (a copy: the caller may hand them to another thread)."""
        self.stamp(stamp_ns)
        self.position[:] = position
        self.velocity[:] = velocity
        return bytes(self.buffer)


_U32 = struct.Struct("<I")
MAX_JOINT_NAMES = 64
"""A JointState with more names than this is malformed here (a robot arm has a handful)."""


def read_joint_state(raw: bytes) -> tuple[int, list[str], np.ndarray]:
    """(header.stamp in ns, names, positions) of a CDR sensor_msgs/JointState, without building
    the message (the gate reads 200 a second; rclpy's deserialization makes a dozen Python
    objects each). Velocity and effort are not read. ValueError, with what is wrong, on bytes
    that are not such a message: truncated, big-endian, absurd counts, bad UTF-8."""
    if len(raw) < 4 or raw[:2] != CDR_LE:
        raise ValueError("not little-endian CDR")
    body = memoryview(raw)[4:]
    try:
        sec, nanosec = STAMP.unpack_from(body, 0)
        pos = 8 + 4 + _U32.unpack_from(body, 8)[0]  # frame_id: length (with its NUL), bytes
        pos = (pos + 3) & ~3
        count = _U32.unpack_from(body, pos)[0]
        pos += 4
        if count > MAX_JOINT_NAMES:
            raise ValueError(f"{count} joint names")
        names = []
        for _ in range(count):
            pos = (pos + 3) & ~3
            length = _U32.unpack_from(body, pos)[0]
            if length < 1 or pos + 4 + length > len(body):
                raise ValueError("a joint name runs past the message")
            names.append(bytes(body[pos + 4 : pos + 3 + length]).decode())
            pos += 4 + length
        pos = (pos + 3) & ~3
        n = _U32.unpack_from(body, pos)[0]
        pos += 4
        if n > MAX_JOINT_NAMES:
            raise ValueError(f"{n} positions")
        if n:
            pos = (pos + 7) & ~7
        if pos + 8 * n > len(body):
            raise ValueError("the positions run past the message")
        positions = np.frombuffer(body, "<f8", count=n, offset=pos).astype(float)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed JointState: {exc}") from None
    return sec * 1_000_000_000 + nanosec, names, positions


def _string(body: memoryview, pos: int) -> tuple[str, int]:
    """A CDR string at `pos` (aligned to 4): (text, position after it)."""
    pos = (pos + 3) & ~3
    length = _U32.unpack_from(body, pos)[0]
    if length < 1 or pos + 4 + length > len(body):
        raise ValueError("a string runs past the message")
    return bytes(body[pos + 4 : pos + 3 + length]).decode(), pos + 4 + length


def _header(raw: bytes, what: str) -> tuple[memoryview, int, str, int]:
    """(the body after the CDR encapsulation, header.stamp in ns, header.frame_id, the position
    after the header) of a message that starts with a std_msgs/Header."""
    if len(raw) < 4 or raw[:2] != CDR_LE:
        raise ValueError("not little-endian CDR")
    body = memoryview(raw)[4:]
    try:
        sec, nanosec = STAMP.unpack_from(body, 0)
        frame_id, pos = _string(body, 8)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed {what}: {exc}") from None
    return body, sec * 1_000_000_000 + nanosec, frame_id, pos


def read_header(raw: bytes) -> tuple[int, str]:
    """(header.stamp in ns, header.frame_id) of any CDR message that starts with a std_msgs/Header
    (sensor_msgs/Image, CompressedImage, ...), reading only those bytes: the gate checks a stock
    camera's liveness from 90 frames a second without building one image. ValueError on bytes
    that are not such a message."""
    _, stamp_ns, frame_id, _ = _header(raw, "header")
    return stamp_ns, frame_id


def read_image(raw: bytes) -> tuple[int, np.ndarray]:
    """(header.stamp in ns, the pixels as an (height, width, 3) uint8 view of `raw`) of a CDR
    rgb8 sensor_msgs/Image, without building the message: rclpy's deserialization copies the
    900 KB of a 640x480 frame into a Python array, this copies nothing (the recorder takes 90
    frames a second). ValueError, with what is wrong, on anything else: another encoding,
    rows with padding, truncated or big-endian bytes."""
    body, stamp_ns, _frame_id, pos = _header(raw, "Image")
    try:
        pos = (pos + 3) & ~3
        height, width = struct.unpack_from("<II", body, pos)
        encoding, pos = _string(body, pos + 8)
        pos += 1  # is_bigendian (uint8): rgb8 has no byte order
        pos = (pos + 3) & ~3
        step, n = struct.unpack_from("<II", body, pos)
        pos += 8
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed Image: {exc}") from None
    if encoding != "rgb8":
        raise ValueError(f"encoding {encoding!r}, expected rgb8")
    if step != width * 3 or n != height * step or pos + n > len(body):
        raise ValueError(f"{width}x{height} rgb8 with step {step} and {n} data bytes ({len(body) - pos} present)")
    pixels = np.frombuffer(raw, np.uint8, count=n, offset=4 + pos).reshape(height, width, 3)
    return stamp_ns, pixels


def read_compressed_image(raw: bytes) -> tuple[int, str, memoryview]:
    """(header.stamp in ns, format, the data bytes as a view of `raw`) of a CDR
    sensor_msgs/CompressedImage, without building the message. ValueError on bytes that are not
    such a message."""
    body, stamp_ns, _frame_id, pos = _header(raw, "CompressedImage")
    try:
        fmt, pos = _string(body, pos)
        pos = (pos + 3) & ~3
        n = _U32.unpack_from(body, pos)[0]
        pos += 4
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed CompressedImage: {exc}") from None
    if pos + n > len(body):
        raise ValueError(f"CompressedImage with {n} data bytes ({len(body) - pos} present)")
    return stamp_ns, fmt, body[pos : pos + n]


_POSE = struct.Struct("<7d")


def read_pose_stamped(raw: bytes) -> tuple[int, str, np.ndarray]:
    """(header.stamp in ns, header.frame_id, [x, y, z, qw, qx, qy, qz]) of a CDR
    geometry_msgs/PoseStamped, without building its five Python objects (the recorder reads 66
    a second). ValueError on bytes that are not such a message."""
    body, stamp_ns, frame_id, pos = _header(raw, "PoseStamped")
    try:
        x, y, z, qx, qy, qz, qw = _POSE.unpack_from(body, (pos + 7) & ~7)
    except struct.error as exc:
        raise ValueError(f"malformed PoseStamped: {exc}") from None
    return stamp_ns, frame_id, np.array([x, y, z, qw, qx, qy, qz])


class JointStateLayout:
    """read_joint_state for a stream whose frame_id and names never change (a driver's): the
    first sample is read in full; a later one whose bytes from frame_id to the positions are the
    same (one comparison) is read at the known offset, without parsing the names again (200
    samples a second reach the recorder). Any other sample is read in full."""

    def __init__(self) -> None:
        self._key: bytes | None = None
        self._names: list[str] = []
        self._offset = 0
        self._count = 0

    def read(self, raw: bytes) -> tuple[int, list[str], np.ndarray]:
        key = self._key
        if key is not None and len(raw) >= self._offset + 8 * self._count and raw[12 : 12 + len(key)] == key:
            sec, nanosec = STAMP.unpack_from(raw, STAMP_OFFSET)
            positions = np.frombuffer(raw, "<f8", count=self._count, offset=self._offset).astype(float)
            return sec * 1_000_000_000 + nanosec, self._names, positions
        stamp_ns, names, positions = read_joint_state(raw)
        offset = bytes(raw).find(np.asarray(positions, "<f8").tobytes(), 12) if len(positions) else -1
        if offset > 12:  # frame_id, names and the positions' length precede the positions
            self._key, self._names, self._offset, self._count = bytes(raw[12:offset]), names, offset, len(positions)
        return stamp_ns, names, positions
