"""Make every peer re-learn which nodes this process holds: a periodic graph refresh.

Why: the ROS graph's node names (and which node owns which writer) travel on rmw's
`ros_discovery_info` topic, which a process publishes only when its entities change, keeping
the last sample for late joiners. A peer that misses that sample while a graph starts on a busy
machine never learns this process's nodes for the whole run, although its data arrives. The
safety gate and the drivers accept a message only from the expected node (sources.SourceCheck),
so such a gap froze arming ("cannot arm: no fresh state from left": the gate refused
joint_states "from a writer whose node the ROS graph does not know yet" for 38 s) or left a
driver applying no command. In loops of test_robot_state (2026-12-05) that was at least 6 of
the 8 failures in about 30 runs; with this refresh no run failed to arm (28 runs). What it
does not fix: the shared-memory port that Fast DDS declares dead and keeps regenerating while a
graph starts (README, "Open"), which then shows as a HOLD instead.

How: creating and destroying a publisher makes rmw (rmw_dds_common, used by every DDS RMW)
publish the process's full node list twice; a peer that missed the last one gets it then.
Often while a graph starts (FAST_PERIOD_S for FAST_FOR_S), rarely after (a tool that joins
later can miss it too). Nothing is ever sent on the topic; it is hidden (leading underscore).

Off the node's thread and outside the GIL: rmw sends that node list while it creates the
publisher, and a send into the shared-memory port of a peer that is descheduled holding the
port's lock waits for it (outbox.py). rclpy's create_publisher keeps the GIL through that
wait: in a fresh-clone run (fc67) the policy's spin loop sat 635 ms in it with 2 ms of CPU,
every other thread of the process stopped with it, and the gate, hearing no command, held
("no command for 305 ms"). So the spin loop only says when a refresh is due (`tick()`); a
thread of its own creates and destroys the publisher through rcl with ctypes (RclRefresh, on a
hidden companion node), which releases the GIL for each call: a blocked send then holds up that
thread, and any entity the process creates meanwhile (rmw sends the node list under a lock of
the participant; the nodes create theirs at start), never the spin loop's other work, and a
refresh due while the previous one still waits is skipped (counted).
"""

from __future__ import annotations

import ctypes
import threading
import time

from egomimic_nodes import topics
from egomimic_nodes.rcl_ctypes import loaded_library, rcutils_errors

FAST_PERIOD_S = 2.0
FAST_FOR_S = 30.0
SLOW_PERIOD_S = 30.0


class _Options(ctypes.Structure):
    """rcl_publisher_options_t, opaque: only rcl reads and writes it. Larger than the real
    struct (~150 bytes in Kilted); a struct returned by value this large is written through a
    hidden pointer on x86-64 and aarch64, so rcl fills the first part and leaves the rest."""

    _fields_ = [("data", ctypes.c_uint64 * 128)]


class RclRefresh:
    """One refresh = rcl_publisher_init + rcl_publisher_fini on the hidden topic, each a ctypes
    call (the GIL released), on a hidden companion node of the same context that nothing but the
    refresh thread touches: rcl's calls on one node are not thread-safe (the node's type cache
    among them), and the owner node's executor, its lifecycle callbacks and its shutdown run on
    the main thread meanwhile. rmw sends the whole participant's node list, the owner's included,
    whichever node the publisher belongs to. The companion's handle is held across both calls,
    so a companion destroyed meanwhile (`close()`) is finalized after the publisher."""

    def __init__(self, owner):
        from rclpy.node import Node
        from rclpy.parameter import Parameter

        # use_global_arguments=False: a `-r __node:=` remap would rename it to its owner's name.
        self.node = Node(
            f"_{owner.get_name()}_graph_refresh",
            namespace=owner.get_namespace(),
            context=owner.context,
            use_global_arguments=False,
            enable_rosout=False,
            start_parameter_services=False,
            parameter_overrides=[Parameter("start_type_description_service", value=False)],
        )
        rcl = ctypes.CDLL(loaded_library("rcl"))  # CDLL, not PyDLL: no GIL during each call
        self._init = rcl.rcl_publisher_init
        self._init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self._init.restype = ctypes.c_int32
        self._fini = rcl.rcl_publisher_fini
        self._fini.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._fini.restype = ctypes.c_int32
        defaults = rcl.rcl_publisher_get_default_options
        defaults.argtypes = []
        defaults.restype = _Options
        self._options = defaults()
        _, self._error, self._reset_error = rcutils_errors()
        self._type_support = message_type_support(topics.GRAPH_REFRESH.type)
        self._name = topics.GRAPH_REFRESH.name().encode()

    def __call__(self) -> None:
        with self.node.handle:
            self.destroy(self.create())

    def create(self) -> ctypes.c_void_p:
        """rcl_publisher_init: rmw creates the writer and publishes the node list."""
        publisher = ctypes.c_void_p(None)  # rcl_publisher_t: one pointer, zero-initialized
        with self.node.handle:
            ret = self._init(
                ctypes.byref(publisher),
                self.node.handle.pointer,
                self._type_support,
                self._name,
                ctypes.byref(self._options),
            )
        self._check(ret, "rcl_publisher_init")
        return publisher

    def destroy(self, publisher: ctypes.c_void_p) -> None:
        with self.node.handle:
            ret = self._fini(ctypes.byref(publisher), self.node.handle.pointer)
        self._check(ret, "rcl_publisher_fini")

    def close(self) -> None:
        """Destroy the companion node (after a refresh still running, which holds its handle)."""
        self.node.destroy_node()

    def _check(self, ret: int, call: str) -> None:
        if ret != 0:
            why = self._error().text.decode(errors="replace")
            self._reset_error()
            raise RuntimeError(f"{call} returned {ret}: {why}")


def message_type_support(msg_type) -> int:
    """The rosidl_message_type_support_t* of a generated message class (rclpy's own capsule)."""
    from rclpy.type_support import check_for_type_support

    check_for_type_support(msg_type)
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get.restype = ctypes.c_void_p
    return get(msg_type._TYPE_SUPPORT, None)


class GraphRefresh:
    """Call `tick()` from the node's spin loop; when a refresh is due it wakes the refresh
    thread, which runs `refresh()` (default RclRefresh(node)). `stop()` ends the refreshes at
    once, `close()` also waits for the thread and releases the refresh's node."""

    def __init__(self, node, clock=time.monotonic, refresh=None, log=None):
        self._clock = clock
        self._start = clock()
        self._next = self._start + FAST_PERIOD_S
        self._refresh = refresh if refresh is not None else RclRefresh(node)
        self._log = log
        self.count = self.skipped = self.failed = 0
        self.slowest_s = 0.0
        self._cv = threading.Condition()
        self._due = self._busy = self._closed = False
        self._thread = threading.Thread(target=self._run, name="graph refresh", daemon=True)
        self._thread.start()

    def period_s(self, now: float) -> float:
        return FAST_PERIOD_S if now - self._start < FAST_FOR_S else SLOW_PERIOD_S

    def tick(self) -> bool:
        """Ask for a refresh if one is due; True when it did (False also when the previous one
        is still running: that one is skipped)."""
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.period_s(now)
        with self._cv:
            if self._busy or self._due:
                self.skipped += 1
                return False
            self._due = True
            self._cv.notify()
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Until no refresh is asked for or running; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._due or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def stop(self) -> None:
        """No refresh from now on; returns at once (a node that is stopping must not wait for
        one blocked in the middleware before it sends its last hold)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def close(self, timeout_s: float = 0.5) -> None:
        """stop(), wait up to `timeout_s` for a refresh still running (a blocked one ends on its
        own: the thread is a daemon), then release the refresh's companion node."""
        self.stop()
        self._thread.join(timeout_s)
        release = getattr(self._refresh, "close", None)
        if release is not None:
            release()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._due and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                self._due, self._busy = False, True
            start = time.monotonic()
            error = None
            try:
                self._refresh()
            except Exception as exc:  # noqa: BLE001 - a refresh that fails is logged, the node goes on
                error = exc
            took = time.monotonic() - start
            with self._cv:
                self._busy = False
                self.slowest_s = max(self.slowest_s, took)
                if error is None:
                    self.count += 1
                else:
                    self.failed += 1
                self._cv.notify_all()
            if error is not None and self._log is not None:
                self._log(f"[WARN] graph refresh failed: {error}")
