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
loses nothing but the wake-up.
"""

from __future__ import annotations

from rclpy.node import Node


class TakenSubscriptions:
    def __init__(self, context, name: str, namespace: str = ""):
        # use_global_arguments=False: a `-r __node:=` remap on the command line would otherwise
        # rename this companion to its owner's name too.
        self.node = Node(name, namespace=namespace or "/", context=context, use_global_arguments=False,
                         start_parameter_services=False)

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
        self.node.destroy_node()


def _never_called(_msg) -> None:  # the node is never spun
    raise AssertionError("a taken subscription was spun by an executor")
