"""Wait until a node's view of the ROS graph has stopped changing (discovery has settled).

Why: on these machines DDS delivery to a participant can pause for ~300 ms while the graph is
still discovering it or a newcomer (measured: a reader in its first seconds saw no sample for
270-370 ms in 2-13 of 20-40 lives, reliable and best-effort alike, over shared memory or UDP;
an e-stop client's replies went missing for 300-660 ms). A gate armed in that window holds on a
stale stream ("no command for 304 ms", "no health report for 300 ms"). So whoever arms the
robot, and every measurement of latency, first waits for a quiet graph.
"""

from __future__ import annotations

import threading
import time

QUIET_S = 1.0
"""Discovery has settled when the endpoint view has not changed for this long."""
TIMEOUT_S = 15.0


def endpoint_view(node) -> tuple:
    """(topic, publishers, subscribers) for every topic `node` sees."""
    return tuple(
        (name, node.count_publishers(name), node.count_subscribers(name))
        for name, _ in sorted(node.get_topic_names_and_types())
    )


def wait_settled(
    nodes, quiet_s: float = QUIET_S, timeout_s: float = TIMEOUT_S, stop: threading.Event | None = None
) -> tuple[bool, float]:
    """Poll every node's endpoint view until none changed for quiet_s; (settled, seconds waited).
    Not settled by timeout_s (a graph that keeps changing): the caller decides, and logs it."""
    nodes = list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]
    t0 = last_change = time.monotonic()
    seen = None
    while time.monotonic() - t0 < timeout_s and not (stop is not None and stop.is_set()):
        now = [endpoint_view(n) for n in nodes]
        if now != seen:
            seen, last_change = now, time.monotonic()
        elif time.monotonic() - last_change >= quiet_s:
            return True, time.monotonic() - t0
        time.sleep(0.05)
    return False, time.monotonic() - t0
