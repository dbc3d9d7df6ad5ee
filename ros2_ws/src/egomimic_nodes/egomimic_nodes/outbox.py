"""Publishing that cannot hold up its node: each writer sends from a thread of its own, outside
Python's GIL.

Why: between processes on one machine Fast DDS delivers through shared memory, and pushing a
sample into a subscriber's port takes that port's interprocess mutex. A subscriber process
that is stopped, or descheduled on a loaded machine, while its listener holds that mutex blocks
every publisher to it until it runs again: 1.0-3.1 s per stop with a SIGSTOPped subscriber
(bench/publish_stall.py; gdb shows the publisher in SharedMemManager::Port::try_push ->
boost::interprocess::interprocess_mutex::lock). rclpy's publish() keeps the GIL through that
call, so the whole node stopped with it: the gate's watchdog, its other topics and its e-stop
thread (a CI run held the gate's main thread ~300 ms: a false "no command for 305 ms" HOLD).

An Outbox serializes the message in the caller's thread (a snapshot: the caller may reuse the
message) and hands the bytes to its own thread, which calls `rcl_publish_serialized_message`
through ctypes; ctypes releases the GIL for the call. A blocked receiver then holds up only that
writer's thread. While it is blocked, at most `keep` messages wait, oldest dropped first (and
counted): a joint target or a pose is superseded by the next one, so `keep=1` sends the newest.
The same bytes reach every subscriber as with publish() (the same CDR, the same writer).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import deque

from egomimic_nodes.cdr_length import serialize
from egomimic_nodes.rcl_ctypes import Allocator, SerializedMessage, loaded_library, rcutils_errors

_RCL = None


def flush_all(boxes, timeout_s: float) -> bool:
    """flush() each of `boxes` within one deadline of `timeout_s` for all; False if one timed out."""
    deadline = time.monotonic() + timeout_s
    done = True
    for box in boxes:
        if box is not None:
            done &= box.flush(max(deadline - time.monotonic(), 0.0))
    return done


def close_all(boxes, timeout_s: float = 0.5) -> None:
    """Stop the sending threads of `boxes` together, waiting at most `timeout_s` for all of them
    (a send blocked in the middleware finishes on its own: the threads are daemons). One
    deadline, not one per box: a driver closing its three one after the other behind a dead
    subscriber's port took 1.5 s of the 3 s a node has to leave once its launcher is gone."""
    boxes = [b for b in boxes if b is not None]
    for box in boxes:
        box._stop()
    deadline = time.monotonic() + timeout_s
    for box in boxes:
        box._thread.join(max(deadline - time.monotonic(), 0.0))


def _rcl():
    global _RCL
    if _RCL is None:
        import rclpy.impl.implementation_singleton  # noqa: F401 - loads librcl into this process

        lib = ctypes.CDLL(loaded_library("rcl"))  # CDLL (not PyDLL): the GIL is released per call
        fn = lib.rcl_publish_serialized_message
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(SerializedMessage), ctypes.c_void_p]
        fn.restype = ctypes.c_int32
        _RCL = (fn, rcutils_errors()[2])
    return _RCL


class Outbox:
    """A publisher's sending thread. `publish(msg)` returns at once; `flush()` waits for what is
    queued; `close()` stops the thread. `stats()` says what was sent, dropped and failed, the
    slowest send, and how long the send in progress has been blocked."""

    def __init__(self, publisher, keep: int = 1, name: str | None = None):
        self.publisher = publisher
        self.topic = publisher.topic_name
        _rcl()  # load librcl's entry points now, not in the sending thread
        self.send = publish_serialized
        """How the thread hands bytes to the middleware: (publisher, data) -> ok."""
        self._queue: deque[bytes] = deque(maxlen=keep)
        self._cv = threading.Condition()
        self._closed = False
        self._in_flight_since: float | None = None
        self.sent = self.dropped = self.failed = 0
        self.slowest_s = 0.0
        self._thread = threading.Thread(target=self._run, name=name or f"outbox {self.topic}", daemon=True)
        self._thread.start()

    @property
    def native_id(self) -> int | None:
        """The sending thread's kernel id (its scheduling priority: spin.raise_after_init)."""
        return self._thread.native_id

    def publish(self, msg) -> None:
        self.publish_bytes(serialize(msg))

    def publish_bytes(self, data: bytes) -> None:
        """Queue CDR bytes that are already a message of the publisher's type (serialized.py)."""
        with self._cv:
            if self._closed:
                return
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append(data)
            self._cv.notify()

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued has been handed to the middleware; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._queue or self._in_flight_since is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def blocked_s(self) -> float:
        """How long the send in progress has taken so far (0 when idle)."""
        since = self._in_flight_since
        return time.monotonic() - since if since is not None else 0.0

    def stats(self) -> dict:
        return {
            "sent": self.sent,
            "dropped": self.dropped,
            "failed": self.failed,
            "slowest_ms": round(self.slowest_s * 1e3, 1),
            "blocked_ms": round(self.blocked_s() * 1e3, 1),
        }

    def close(self, timeout_s: float = 0.5) -> None:
        close_all([self], timeout_s)

    def _stop(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return  # closed and empty
                data = self._queue.popleft()
                self._in_flight_since = start = time.monotonic()
            try:
                ok = self._send(data)
            except Exception:  # noqa: BLE001 - a destroyed publisher (shutdown): stop sending
                ok = None
            took = time.monotonic() - start
            with self._cv:
                self._in_flight_since = None
                self.slowest_s = max(self.slowest_s, took)
                if ok:
                    self.sent += 1
                else:
                    self.failed += 1
                self._cv.notify_all()
                if ok is None:
                    self._closed = True
                    self._queue.clear()
                    return

    def _send(self, data: bytes) -> bool:
        return self.send(self.publisher, data)


def publish_serialized(publisher, data: bytes | bytearray) -> bool:
    """Publish CDR bytes that are already a message of the publisher's type, here and now,
    without the GIL during the middleware call (rcl_publish_serialized_message through ctypes).
    For a message built once and patched per sample (serialized.py) and for the Outbox's
    thread. The middleware has copied `data` when this returns, so the caller may reuse it.
    False when rcl refused (its error state is reset)."""
    publish, reset_error = _rcl()
    n = len(data)
    # `view` points at the caller's bytes (no copy) and lives until the call has returned
    if isinstance(data, bytearray):
        view = (ctypes.c_char * n).from_buffer(data)
        address = ctypes.addressof(view)
    else:
        view = ctypes.c_char_p(data)
        address = ctypes.cast(view, ctypes.c_void_p).value
    msg = SerializedMessage(address, n, n, Allocator())  # the allocator is not used by a publish
    with publisher.handle:  # keeps the rcl publisher alive during the call
        ret = publish(publisher.handle.pointer, ctypes.byref(msg), None)
    if ret != 0:
        reset_error()
    return ret == 0
