"""The exact length of a serialized ROS message, so that bytes we publish are the bytes
publish() would have sent.

Why: rclpy's serialize_message (rmw_serialize in rmw_fastrtps) returns a buffer as long as the
type support's *estimate* of the message's size, which leaves a few bytes of slack after
sequences: a JointState of 7 names and 7 positions serializes to 212 bytes of which 204 are the
message, and publish() sends those 204. Everything this project sends through an Outbox or a
serialized template went out with the slack, so a rosbag2 of the run held JointStates and other
messages that rosbags refuses ("CDR message size mismatch": it accepts at most the padding to a
multiple of 4) although every ROS subscriber reads them. `exact(data, cls)` cuts the slack.

How: the message's fields are walked in the bytes with CDR's rules (plain CDR, as Fast DDS
writes it: each primitive aligned to its size up to 8, from the start of the body after the
4-byte encapsulation header; a string or a sequence is a uint32 count, then its elements). The
walk per message class is planned once from its rosidl definition (SLOT_TYPES); a JointState
takes about 10 us, a 100-row ActionChunk about 1 ms.
"""

from __future__ import annotations

import importlib
import struct

from rclpy.serialization import serialize_message
from rosidl_parser.definition import (
    AbstractNestedType,
    AbstractSequence,
    AbstractString,
    AbstractWString,
    Array,
    BasicType,
    NamespacedType,
)

ENCAPSULATION = 4
_U32 = struct.Struct("<I")
PRIMITIVE_SIZE = {
    "boolean": 1, "octet": 1, "char": 1, "uint8": 1, "int8": 1,
    "wchar": 2, "int16": 2, "uint16": 2,
    "int32": 4, "uint32": 4, "float": 4,
    "int64": 8, "uint64": 8, "double": 8, "long double": 16,
}  # fmt: skip

_PLANS: dict[type, tuple] = {}


def serialize(msg) -> bytes:
    """rclpy's serialize_message without the slack after the message: the bytes publish() sends."""
    return exact(serialize_message(msg), type(msg))


def exact(data: bytes | bytearray, cls: type) -> bytes | bytearray:
    """`data` (a CDR message of ROS type `cls`) without the bytes after its end; `data` as it is
    for a type with a field this module has no rule for (a wstring)."""
    try:
        n = cdr_length(data, cls)
    except TypeError:
        return data
    return data if n == len(data) else data[:n]


def cdr_length(data: bytes | bytearray, cls: type) -> int:
    """Where the CDR message of type `cls` at the start of `data` ends (with its encapsulation
    header). ValueError when `data` is not little-endian plain CDR or ends before the message."""
    if len(data) < ENCAPSULATION or data[:2] != b"\x00\x01":
        raise ValueError("not little-endian plain CDR")
    body = memoryview(data)[ENCAPSULATION:]
    try:
        end = _walk(body, 0, _plan(cls))
    except struct.error as exc:
        raise ValueError(f"{cls.__name__}: the bytes end inside the message ({exc})") from None
    if end > len(body):
        raise ValueError(f"{cls.__name__}: the message needs {end} bytes of body, the data has {len(body)}")
    return ENCAPSULATION + end


def _plan(cls: type) -> tuple:
    plan = _PLANS.get(cls)
    if plan is None:
        steps = tuple(_step(t) for t in cls.SLOT_TYPES)
        plan = _PLANS[cls] = steps or (("prim", 1),)  # an empty message is one byte in CDR
    return plan


def _element(t) -> tuple:
    """How one value of type `t` is walked: ("prim", size), ("str", char size) or ("msg", plan)."""
    if isinstance(t, BasicType):
        return ("prim", PRIMITIVE_SIZE[t.typename])
    if isinstance(t, AbstractWString):
        raise TypeError("wstring: its CDR length rule is not implemented here")
    if isinstance(t, AbstractString):
        return ("str", 1)
    if isinstance(t, NamespacedType):
        module = importlib.import_module(".".join(t.namespaces))
        return ("msg", _plan(getattr(module, t.name)))
    raise TypeError(f"no CDR rule here for {t!r}")


def _step(t) -> tuple:
    if isinstance(t, AbstractNestedType):
        kind = "seq" if isinstance(t, AbstractSequence) else "array"
        return (kind, _element(t.value_type), t.size if isinstance(t, Array) else None)
    return _element(t)


def _walk(body: memoryview, pos: int, plan: tuple) -> int:
    for step in plan:
        kind = step[0]
        if kind == "prim":
            size = step[1]
            a = min(size, 8)
            pos = (pos + a - 1) & -a
            pos += size
        elif kind == "str":
            pos = _string(body, pos, step[1])
        elif kind == "msg":
            pos = _walk(body, pos, step[1])
        else:
            if kind == "seq":
                pos = (pos + 3) & -4
                count = _U32.unpack_from(body, pos)[0]
                pos += 4
            else:
                count = step[2]
            pos = _elements(body, pos, step[1], count)
    return pos


def _elements(body: memoryview, pos: int, element: tuple, count: int) -> int:
    if count == 0:
        return pos
    kind = element[0]
    if kind == "prim":
        size = element[1]
        a = min(size, 8)
        return ((pos + a - 1) & -a) + size * count
    for _ in range(count):
        pos = _string(body, pos, element[1]) if kind == "str" else _walk(body, pos, element[1])
    return pos


def _string(body: memoryview, pos: int, char_size: int) -> int:
    pos = (pos + 3) & -4
    n = _U32.unpack_from(body, pos)[0]  # the count includes the NUL
    return pos + 4 + n * char_size
