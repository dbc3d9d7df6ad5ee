"""Heartbeats: a node that stops answering is treated like a node that died.

A process can be alive and useless: stopped by a debugger or SIGSTOP, blocked in a system call,
spinning in a loop. The launcher listens to the streams that prove the safety-relevant nodes
work (the gate's `safety/status`, published on every change and at 2 Hz, and each driver's
`joint_states` at 100 Hz) and reports the first one silent for longer than the timeout. The
samples are taken raw in a batch on each check (egomimic_nodes/taken.py), never deserialized
and never one executor callback each: a beat is the DDS reception time of the newest sample.
The gate itself holds within 100 ms of a silent driver; this is what
makes the launcher stop the graph when the gate is the one that went silent.
"""

from __future__ import annotations

import threading
import time


class Heartbeats:
    def __init__(self, node, graph):
        """Subscribes at once (so the late-joiner status arrives); judged only after start()."""
        from egomimic_hw.description import ARMS
        from egomimic_nodes import topics
        from egomimic_nodes.taken import TakenSubscriptions

        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._topics: dict[str, str] = {}
        self._subs = {}
        self._started = False
        self._taken = TakenSubscriptions(node.context, f"{node.get_name()}_heartbeat")
        names = {spec.name for spec in graph.nodes}
        sources = [("safety_gate", topics.SAFETY_STATUS, topics.SAFETY_STATUS.resolve(graph.namespace))]
        sources += [
            (f"driver_{arm.value}", topics.JOINT_STATES, topics.JOINT_STATES.resolve(graph.namespace, arm=arm))
            for arm in ARMS
        ]
        for name, topic, fqn in sources:
            if name in names:
                self._topics[name] = fqn
                self._subs[name] = self._taken.subscribe(topic.type, fqn, topic.qos, raw=True)

    def _take(self) -> None:
        """A beat per source with a new sample: when DDS received the newest one (system clock,
        turned into this process's monotonic clock)."""
        offset = time.monotonic() - time.time()
        for name, sub in self._subs.items():
            taken = self._taken.take(sub, limit=1000)
            if taken:
                received = taken[-1][1].get("received_timestamp") or time.time_ns()
                with self._lock:
                    self._last[name] = max(self._last.get(name, 0.0), min(received * 1e-9 + offset, time.monotonic()))

    def start(self) -> None:
        """From now on silence counts; every source starts with a fresh beat."""
        now = time.monotonic()
        with self._lock:
            for name in self._topics:
                self._last[name] = max(self._last.get(name, now), now)
            self._started = True

    def silent(self, timeout_s: float) -> tuple[str, str] | None:
        """(node, what) for the first source silent longer than `timeout_s`, else None."""
        if not self._started:
            return None
        self._take()
        now = time.monotonic()
        with self._lock:
            for name, topic in self._topics.items():
                age = now - self._last[name]
                if age > timeout_s:
                    return name, f"no {topic} for {age:.1f} s, heartbeat timeout {timeout_s:.1f} s"
        return None
