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
"""

from __future__ import annotations

import time

from egomimic_nodes import topics

FAST_PERIOD_S = 2.0
FAST_FOR_S = 30.0
SLOW_PERIOD_S = 30.0


class GraphRefresh:
    """Call `tick()` from the node's spin loop; it refreshes when one is due."""

    def __init__(self, node, clock=time.monotonic):
        self._node = node
        self._clock = clock
        self._start = clock()
        self._next = self._start + FAST_PERIOD_S
        self.count = 0

    def period_s(self, now: float) -> float:
        return FAST_PERIOD_S if now - self._start < FAST_FOR_S else SLOW_PERIOD_S

    def tick(self) -> bool:
        """Refresh if due; True when it did."""
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.period_s(now)
        t = topics.GRAPH_REFRESH
        self._node.destroy_publisher(self._node.create_publisher(t.type, t.name(), t.qos))
        self.count += 1
        return True
