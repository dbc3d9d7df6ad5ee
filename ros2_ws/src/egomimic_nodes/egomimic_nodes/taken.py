"""Subscriptions whose messages are taken in a batch when their owner is ready, instead of
delivered one executor callback at a time.

Why: an rclpy executor callback costs about 0.7 ms of CPU with the SingleThreadedExecutor on
the 2-core machine, and a third of that with the EventsExecutor (bench/graph_cpu.py). A
consumer that acts at its own rhythm (the gate's 100 Hz watchdog, the launcher's heartbeat and
run summary) pays that for every sample of every stream for nothing. Here the readers live on a
companion node that no executor spins; DDS queues each sample in the reader history (`depth`
of the QoS), and `take()` returns (message, info) pairs, oldest first. The info carries what a
callback would have had: the publisher's id (`publisher_gid`, for sources.py), its sequence
number and the DDS reception time (`received_timestamp`, ns of the system clock), so taking late
loses nothing but the wake-up. A thread that must act on a sample at once (the driver's state
loop, on a joint command) blocks in `wait()` on its few readers instead: a wait set of its own,
without the GIL, and no executor pass over the whole node.

A take runs without the GIL too (`rcl_take_serialized_message` through ctypes, then rclpy's
deserializer). rclpy's take_message keeps the GIL through rcl_take, and Fast DDS's take waits
for the reader's mutex (up to the QoS max_blocking_time, 100 ms), which the reader's event
thread holds while it sends an ACKNACK: into a writer's shared-memory port that a stopped
process (SIGSTOP, a debugger) holds locked, that send waits. The camera process stopped so:
all three capture threads without a frame for 281 ms the moment a driver was SIGSTOPped
(fresh clone fc73, a STALE_CAMERA HOLD), then 465 ms. Now such a take holds up its own thread only.
"""

from __future__ import annotations

import contextlib
import ctypes

from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.serialization import deserialize_message

from egomimic_nodes.rcl_ctypes import Allocator, SerializedMessage, loaded_library, rcutils_errors

RCL_RET_SUBSCRIPTION_TAKE_FAILED = 401
"""rcl/types.h: no sample was waiting."""
RCL_RET_BAD_ALLOC = 10
"""rcl/types.h: rclpy raises MemoryError for it; so does take_one."""
SEQUENCE_NUMBER_UNSUPPORTED = 2**64 - 1
"""rmw/types.h RMW_MESSAGE_INFO_SEQUENCE_NUMBER_UNSUPPORTED."""
GID_STORAGE_SIZE = 16
"""rmw/types.h RMW_GID_STORAGE_SIZE (16 since ROS 2 Iron)."""
INITIAL_CAPACITY = 4096
"""Bytes first allocated for a taken sample; rmw grows the buffer for a larger one."""


class _MessageInfo(ctypes.Structure):
    """rmw_message_info_t."""

    _fields_ = [
        ("source_timestamp", ctypes.c_int64),
        ("received_timestamp", ctypes.c_int64),
        ("publication_sequence_number", ctypes.c_uint64),
        ("reception_sequence_number", ctypes.c_uint64),
        ("gid_implementation_identifier", ctypes.c_char_p),
        ("gid_data", ctypes.c_uint8 * GID_STORAGE_SIZE),
        ("from_intra_process", ctypes.c_bool),
    ]

    def as_dict(self) -> dict:
        """The dict rclpy's take_message returns beside the message."""

        def seq(n: int) -> int | None:
            return None if n == SEQUENCE_NUMBER_UNSUPPORTED else n

        gid = None
        if self.gid_implementation_identifier is not None:
            gid = {
                "implementation_identifier": self.gid_implementation_identifier.decode(),
                "data": bytes(self.gid_data),
            }
        return {
            "source_timestamp": self.source_timestamp,
            "received_timestamp": self.received_timestamp,
            "publication_sequence_number": seq(self.publication_sequence_number),
            "reception_sequence_number": seq(self.reception_sequence_number),
            "publisher_gid": gid,
        }


_LIB = None


def _lib():
    """rcl's and rcutils' entry points, through CDLL: the GIL is released for each call."""
    global _LIB
    if _LIB is None:
        rcl = ctypes.CDLL(loaded_library("rcl"))
        take = rcl.rcl_take_serialized_message
        take.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(SerializedMessage),
            ctypes.POINTER(_MessageInfo),
            ctypes.c_void_p,
        ]
        take.restype = ctypes.c_int32
        rcutils, error, reset_error = rcutils_errors()
        rcutils.rcutils_get_default_allocator.argtypes = []
        rcutils.rcutils_get_default_allocator.restype = Allocator
        rcutils.rcutils_uint8_array_init.argtypes = [
            ctypes.POINTER(SerializedMessage),
            ctypes.c_size_t,
            ctypes.POINTER(Allocator),
        ]
        rcutils.rcutils_uint8_array_init.restype = ctypes.c_int32
        rcutils.rcutils_uint8_array_fini.argtypes = [ctypes.POINTER(SerializedMessage)]
        rcutils.rcutils_uint8_array_fini.restype = ctypes.c_int32
        _LIB = (take, rcutils, error, reset_error, rcutils.rcutils_get_default_allocator())
    return _LIB


def take_one(sub) -> tuple | None:
    """One (message, info) from `sub`'s history, or None; rclpy's take_message without the GIL
    (a raw subscription gives the CDR bytes). One thread per subscription: rcl_take is not
    thread-safe on one subscription, and without the GIL nothing serializes two takes (every
    owner here takes a reader from one thread, or under a lock of its own). About 5 us more per sample than take_message
    (20-25 against 17-21 us for a PoseStamped or a JointState on the 2-core machine)."""
    take, rcutils, error, reset_error, allocator = _lib()
    data = SerializedMessage()
    if rcutils.rcutils_uint8_array_init(ctypes.byref(data), INITIAL_CAPACITY, ctypes.byref(allocator)) != 0:
        reset_error()
        raise MemoryError(f"cannot allocate {INITIAL_CAPACITY} bytes to take a sample into")
    info = _MessageInfo()
    try:
        with sub.handle:  # keeps the rcl subscription alive during the call
            ret = take(sub.handle.pointer, ctypes.byref(data), ctypes.byref(info), None)
        if ret == RCL_RET_SUBSCRIPTION_TAKE_FAILED:
            return None
        if ret != 0:
            why = error().text.decode(errors="replace")
            reset_error()
            if ret == RCL_RET_BAD_ALLOC:
                raise MemoryError(f"taking a sample: {why}")
            raise _rclpy.RCLError(f"failed to take a message: {why} (rcl {ret})")
        payload = ctypes.string_at(data.buffer, data.buffer_length)
    finally:
        rcutils.rcutils_uint8_array_fini(ctypes.byref(data))
    return (payload if sub.raw else deserialize_message(payload, sub.msg_type)), info.as_dict()


class TakenSubscriptions:
    def __init__(self, context, name: str, namespace: str = ""):
        # use_global_arguments=False: a `-r __node:=` remap on the command line would otherwise
        # rename this companion to its owner's name too.
        self.context = context
        self.node = Node(
            name,
            namespace=namespace or "/",
            context=context,
            use_global_arguments=False,
            start_parameter_services=False,
        )
        self._wake = GuardCondition(None, None, context=context)
        self._wait_set = None

    def wait(self, subs: list, timeout_s: float) -> bool:
        """Block, without the GIL, until one of `subs` holds a sample (True), or `timeout_s`
        passed or wake() was called (False). For a thread that serves a few readers itself:
        a sample costs no executor pass (the driver's state loop takes its commands so)."""
        with contextlib.ExitStack() as handles:
            handles.enter_context(self.context.handle)
            for sub in subs:
                handles.enter_context(sub.handle)
            handles.enter_context(self._wake.handle)
            if self._wait_set is None or self._wait_set[0] != len(subs):
                self._wait_set = (len(subs), _rclpy.WaitSet(len(subs), 1, 0, 0, 0, 0, self.context.handle))
            ws = self._wait_set[1]
            ws.clear_entities()
            for sub in subs:
                ws.add_subscription(sub.handle)
            ws.add_guard_condition(self._wake.handle)
            ws.wait(max(0, int(timeout_s * 1e9)))
            return bool(ws.get_ready_entities("subscription"))

    def wake(self) -> None:
        """End a wait() in progress (or the next one) at once."""
        self._wake.trigger()

    def subscribe(self, msg_type, topic: str, qos, raw: bool = False):
        """A reader; nothing is called when a sample arrives: take() it."""
        return self.node.create_subscription(msg_type, topic, _never_called, qos, raw=raw)

    @staticmethod
    def take(sub, limit: int | None = None) -> list[tuple]:
        """Every (message, info) waiting in `sub`'s history (at most `limit`), oldest first."""
        out = []
        limit = sub.qos_profile.depth if limit is None else limit
        while len(out) < limit:
            taken = take_one(sub)
            if taken is None:
                break
            out.append(taken)
        return out

    def destroy(self) -> None:
        self._wake.destroy()
        self.node.destroy_node()


def _never_called(_msg) -> None:  # the node is never spun
    raise AssertionError("a taken subscription was spun by an executor")


class SequenceGaps:
    """Samples a reader never took, from the gaps in each publisher's sequence numbers (the info
    take() returns): missed in the reader's history or before it. One table for all of an
    owner's readers, keyed by what the owner names them by."""

    def __init__(self):
        self._last: dict[tuple[object, bytes], int] = {}

    def count(self, reader_key, info: dict) -> int:
        """How many of this publisher's samples came between its previous one and this one."""
        seq, gid = info.get("publication_sequence_number"), info.get("publisher_gid")
        if not seq or gid is None:
            return 0
        key = (reader_key, bytes(gid["data"]) if isinstance(gid, dict) else bytes(gid))
        last = self._last.get(key)
        self._last[key] = seq
        return seq - last - 1 if last is not None and seq > last + 1 else 0
