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
"""

from __future__ import annotations

import contextlib

from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node


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
            with sub.handle:
                taken = sub.handle.take_message(sub.msg_type, sub.raw)
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
