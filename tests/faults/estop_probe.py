"""Call safety/estop from a process of its own and print the round trips (ms) as JSON:

    python tests/faults/estop_probe.py N [PAUSE_S]     one measurement of N calls, then exit
    python tests/faults/estop_probe.py --serve         one JSON line per "N PAUSE_S" line read

What an operator's e-stop button sees: the fault battery's rig is a busy process (it records
every stream), so measuring from it would add its own queueing to the gate's latency. A call
that gets no answer within 2 s counts as 2000 ms.

The rig keeps one probe per graph (`--serve`), started as soon as the graph is ready, as an
operator's console runs long before its e-stop is pressed. Why not a fresh probe per
measurement, as before: in a process's first seconds the gate's replies can stop reaching it
for 0.6-2.3 s, both of its participants at once, while the gate takes and answers every
request within 3 ms (each answer's "in/out" stamps); the replies then arrive together, and only
the last 10 (the readers' KEEP_LAST 10). A CI run failed on it (1646 ms) and 2 of 6 local runs
of the three e-stop rows saw it, always in a fresh probe's first or second call; the e-stop
itself was latched at the first request each time. Not the writers' heartbeat period (3 s by
default: 50 ms left it, 1 in 12 runs) and not the gate's reply path (no "failed to send
response" in its log); the cause inside the middleware is still open, and the README states
the behaviour. The price: a console's first seconds are no longer measured here.

Before the first e-stop, WARMUP_CALLS calls of the e-stop node's list_parameters (same node,
same executor thread, nothing latched) from each participant, then a wait until the probe's
view of the graph has stopped changing (wait_discovery_settled).

Each answer carries the gate's own handling time (callback entry to reply, lock wait included:
"[answered in X ms; in T1 out T2]"), printed as gate_ms beside the round trips, and the round
trip's other two parts for the first request answered: request_ms (its send to the gate's
callback) and reply_ms (the callback's return to its answer here).

Like an operator console should, the probe re-sends an e-stop that is not answered within
RESEND_S, alternating between PARTICIPANTS DDS participants, and counts the time to the first
answer. With EGOMIMIC_ESTOP_TRACE=<dir> it writes every call's sends and answers there
(trace_<pid>_<k>.json, one per measurement), for a post-mortem of a slow call.

The probe runs at the gate's priority (SCHED_FIFO where permitted, spin.raise_priority), as an
operator's e-stop console should: the e-stop path must not queue behind cameras, policy and
monitoring on a busy machine. Measured under the flood plus one CPU hog (2 cores), before the
gate stopped logging inside the reply path: 40.6 ms at p99 at normal priority, 38.6 at FIFO."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import rclpy
from rcl_interfaces.srv import ListParameters
from rclpy.executors import SingleThreadedExecutor
from std_srvs.srv import Trigger

from egomimic_nodes import topics
from egomimic_nodes.graph_settle import wait_settled
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
    serve = sys.argv[1:2] == ["--serve"]
    scheduling = raise_priority("fifo")  # before rclpy starts its threads: they inherit it
    started = time.monotonic()
    participants = [Participant(f"estop_probe_{i}") for i in range(PARTICIPANTS)]
    try:
        for p in participants:
            if not p.client.wait_for_service(timeout_sec=20):
                print(json.dumps({"error": "safety/estop is not served"}), flush=True)
                return
            p.warm_up(WARMUP_CALLS, 0.02)
        settle_s = wait_discovery_settled(participants)
        clients = [p.client for p in participants]
        if not serve:
            n, pause_s = int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
            measure(clients, n, pause_s, scheduling, settle_s, started, 0)
            return
        print(json.dumps({"ready": True, "settle_s": settle_s}), flush=True)
        for k, line in enumerate(sys.stdin):
            words = line.split()
            if not words:
                continue
            measure(
                clients, int(words[0]), float(words[1]) if len(words) > 1 else 0.02, scheduling, settle_s, started, k
            )
    finally:
        for p in participants:
            p.close()


def wait_discovery_settled(participants) -> float:
    """Seconds until every participant's view of the graph was quiet for graph_settle.QUIET_S
    (deadline graph_settle.TIMEOUT_S: measuring then is still valid, only pessimistic)."""
    _, waited = wait_settled([p.node for p in participants])
    return waited


def measure(clients, n: int, pause_s: float, scheduling: str, settle_s: float, started: float, index: int) -> None:
    latencies, gate_ms, request_ms, reply_ms = [], [], [], []
    resends = 0
    trace = []
    for _ in range(n):
        done = threading.Event()
        answers = []  # (request index, answer, wall time received), in the order received
        sends = []  # wall time of each send
        t0 = time.perf_counter()
        deadline = t0 + 2.0
        while not done.is_set() and time.perf_counter() < deadline:
            i = len(sends)
            sends.append(time.time())
            future = clients[i % len(clients)].call_async(Trigger.Request())
            future.add_done_callback(
                lambda f, i=i, a=answers, d=done: (a.append((i, f.result(), time.time())), d.set())
            )
            done.wait(RESEND_S)
        resends += len(sends) - 1
        answered = done.is_set() and any(a.success for _, a, _ in answers)
        latencies.append((time.perf_counter() - t0) * 1e3 if answered else 2000.0)
        found = re.search(GATE_TIMES, answers[0][1].message) if answers else None
        gate_ms.append(float(found.group(1)) if found else 2000.0)
        if found:  # the first answer's round trip split at the gate's callback (one wall clock)
            i, _, received = answers[0]
            request_ms.append((float(found.group(2)) - sends[i]) * 1e3)
            reply_ms.append((received - float(found.group(3))) * 1e3)
        trace.append({"sends": sends, "answers": answers})
        time.sleep(pause_s)
    if os.environ.get("EGOMIMIC_ESTOP_TRACE"):
        write_trace(Path(os.environ["EGOMIMIC_ESTOP_TRACE"]), trace, index)
    print(
        json.dumps(
            {
                "latencies_ms": latencies,
                "gate_ms": gate_ms,
                "request_ms": request_ms,
                "reply_ms": reply_ms,
                "resends": resends,
                "scheduling": scheduling,
                "settle_s": settle_s,
                "measurement": index,
                "probe_age_s": time.monotonic() - started,
            }
        ),
        flush=True,
    )


def write_trace(folder: Path, trace: list[dict], index: int, late_s: float = 1.0) -> None:
    """Every call's send times and answers (request index, received, gate's message), after
    waiting up to late_s for the answers still owed (late ones are the post-mortem's subject)."""
    deadline = time.monotonic() + late_s
    while time.monotonic() < deadline and any(len(c["answers"]) < len(c["sends"]) for c in trace):
        time.sleep(0.05)
    calls = [
        {"sends": c["sends"], "answers": [(i, received, a.message) for i, a, received in list(c["answers"])]}
        for c in trace
    ]
    (folder / f"trace_{os.getpid()}_{index}.json").write_text(json.dumps(calls))


if __name__ == "__main__":
    main()
