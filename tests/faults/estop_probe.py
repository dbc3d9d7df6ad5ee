"""Call safety/estop N times from a process of its own and print the round trips (ms) as JSON:

    python tests/faults/estop_probe.py N [PAUSE_S]

What an operator's e-stop button sees: the fault battery's rig is a busy process (it records
every stream), so measuring from it would add its own queueing to the gate's latency. A call
that gets no answer within 2 s counts as 2000 ms.

Before the first e-stop, WARMUP_CALLS calls of the e-stop node's list_parameters (same node,
same executor thread, nothing latched) from each participant let its discovery with every node
of the graph settle, which an operator's console, started long before the e-stop is pressed, has
behind it. The first counted call is still the one that latches ESTOP.

Each answer carries the gate's own handling time (callback entry to reply, lock wait included:
"[answered in X ms; in T1 out T2]"), printed as gate_ms beside the round trips, and the round
trip's other two parts: request_ms (first send to the gate's callback) and reply_ms (the
callback's return to the answer here).

Like an operator console should, the probe re-sends an e-stop that is not answered within
RESEND_S, through another DDS participant (see main), and counts the time to the first answer.

The probe runs at the gate's priority (SCHED_FIFO where permitted, spin.raise_priority), as an
operator's e-stop console should: the e-stop path must not queue behind cameras, policy and
monitoring on a busy machine. Measured under the flood plus one CPU hog (2 cores), before the
gate stopped logging inside the reply path: 40.6 ms at p99 at normal priority, 38.6 at FIFO."""

from __future__ import annotations

import json
import re
import sys
import threading
import time

import rclpy
from rcl_interfaces.srv import ListParameters
from rclpy.executors import SingleThreadedExecutor
from std_srvs.srv import Trigger

from egomimic_nodes import topics
from egomimic_nodes.spin import raise_priority

WARMUP_CALLS = 3
RESEND_S = 0.015
"""An unanswered e-stop is sent again after this long (e-stop is idempotent)."""
PARTICIPANTS = 2
GATE_TIMES = r"\[answered in ([0-9.]+) ms; in ([0-9.]+) out ([0-9.]+)\]"
"""The gate's handling time and its callback's entry and exit (wall clock) in each reply."""


class Participant:
    """One rclpy context (one DDS participant) with its node, executor thread and e-stop client."""

    def __init__(self, name: str):
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.spinner = threading.Thread(target=self.executor.spin, daemon=True)
        self.spinner.start()
        self.client = self.node.create_client(topics.SAFETY_ESTOP.type, topics.SAFETY_ESTOP.resolve("eva"))

    def warm_up(self, calls: int, pause_s: float) -> None:
        warm = self.node.create_client(ListParameters, "/eva/safety_gate_estop/list_parameters")
        if warm.wait_for_service(timeout_sec=5):
            for _ in range(calls):
                done = threading.Event()
                warm.call_async(ListParameters.Request()).add_done_callback(lambda _f: done.set())
                done.wait(2.0)
                time.sleep(pause_s)

    def close(self) -> None:
        # Leave DDS cleanly: a process that dies with its spin thread still inside the middleware
        # aborts ("terminate called without an active exception") and leaves its participant and
        # shared-memory port for the graph to keep writing to until its lease expires.
        self.executor.shutdown()
        self.spinner.join(2.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


def main() -> None:
    n, pause_s = int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
    scheduling = raise_priority("fifo")  # before rclpy starts its threads: they inherit it
    # About 1 reply in 200 reached a single participant 240-330 ms after the gate wrote it (DDS
    # source vs reception timestamps), every reply to that participant held back together,
    # while the gate answered each resent request within 3 ms. A resend therefore alternates
    # between PARTICIPANTS independent DDS participants (rclpy contexts).
    participants = [Participant(f"estop_probe_{i}") for i in range(PARTICIPANTS)]
    try:
        for p in participants:
            if not p.client.wait_for_service(timeout_sec=20):
                print(json.dumps({"error": "safety/estop is not served"}), flush=True)
                return
            p.warm_up(WARMUP_CALLS, pause_s)
        clients = [p.client for p in participants]
        measure(clients, n, pause_s, scheduling)
    finally:
        for p in participants:
            p.close()


def measure(clients, n: int, pause_s: float, scheduling: str) -> None:
    latencies, gate_ms, request_ms, reply_ms = [], [], [], []
    resends = 0
    for _ in range(n):
        done = threading.Event()
        answers = []
        t0 = time.perf_counter()
        t0_wall = time.time()
        deadline = t0 + 2.0
        sent = 0
        while not done.is_set() and time.perf_counter() < deadline:
            future = clients[sent % len(clients)].call_async(Trigger.Request())
            future.add_done_callback(lambda f, a=answers, d=done: (a.append((f.result(), time.time())), d.set()))
            sent += 1
            done.wait(RESEND_S)
        resends += sent - 1
        answered = done.is_set() and any(a.success for a, _ in answers)
        latencies.append((time.perf_counter() - t0) * 1e3 if answered else 2000.0)
        found = re.search(GATE_TIMES, answers[0][0].message) if answers else None
        gate_ms.append(float(found.group(1)) if found else 2000.0)
        if found:  # the round trip split at the gate's callback (same machine, same wall clock)
            request_ms.append((float(found.group(2)) - t0_wall) * 1e3)
            reply_ms.append((answers[0][1] - float(found.group(3))) * 1e3)
        time.sleep(pause_s)
    print(
        json.dumps(
            {
                "latencies_ms": latencies,
                "gate_ms": gate_ms,
                "request_ms": request_ms,
                "reply_ms": reply_ms,
                "resends": resends,
                "scheduling": scheduling,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
