"""Call safety/estop N times from a process of its own and print the round trips (ms) as JSON:

    python tests/faults/estop_probe.py N [PAUSE_S]

What an operator's e-stop button sees: the fault battery's rig is a busy process (it records
every stream), so measuring from it would add its own queueing to the gate's latency. A call
that gets no answer within 2 s counts as 2000 ms.

Before the first e-stop, WARMUP_CALLS calls of the e-stop node's list_parameters (same node,
same executor thread, nothing latched) let this new participant's discovery with every node of
the graph settle, which an operator's console, started long before the e-stop is pressed, has
behind it. The first counted call is still the one that latches ESTOP."""

from __future__ import annotations

import json
import sys
import threading
import time

import rclpy
from rcl_interfaces.srv import ListParameters
from rclpy.executors import SingleThreadedExecutor
from std_srvs.srv import Trigger

WARMUP_CALLS = 3


def main() -> None:
    n, pause_s = int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
    rclpy.init()
    node = rclpy.create_node("estop_probe")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    client = node.create_client(Trigger, "/eva/safety/estop")
    if not client.wait_for_service(timeout_sec=20):
        print(json.dumps({"error": "safety/estop is not served"}), flush=True)
        return
    warm = node.create_client(ListParameters, "/eva/safety_gate_estop/list_parameters")
    if warm.wait_for_service(timeout_sec=5):
        for _ in range(WARMUP_CALLS):
            done = threading.Event()
            warm.call_async(ListParameters.Request()).add_done_callback(lambda _f: done.set())
            done.wait(2.0)
            time.sleep(pause_s)
    latencies = []
    for _ in range(n):
        done = threading.Event()
        t0 = time.perf_counter()
        future = client.call_async(Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        answered = done.wait(2.0) and future.result().success
        latencies.append((time.perf_counter() - t0) * 1e3 if answered else 2000.0)
        time.sleep(pause_s)
    print(json.dumps({"latencies_ms": latencies}), flush=True)
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()
