"""The graph refresh's schedule (egomimic_nodes.graph_refresh): often while a graph starts,
rarely after, and each refresh leaves no publisher behind."""

from egomimic_nodes import topics
from egomimic_nodes.graph_refresh import FAST_FOR_S, FAST_PERIOD_S, SLOW_PERIOD_S, GraphRefresh


class FakeNode:
    def __init__(self):
        self.alive: list[object] = []
        self.created: list[tuple] = []

    def create_publisher(self, msg_type, name, qos):
        pub = object()
        self.created.append((msg_type, name, qos))
        self.alive.append(pub)
        return pub

    def destroy_publisher(self, pub):
        self.alive.remove(pub)
        return True


def test_refreshes_often_at_start_then_rarely_and_leaves_nothing_behind():
    now = [100.0]
    node = FakeNode()
    refresh = GraphRefresh(node, clock=lambda: now[0])
    times = []
    while now[0] < 100.0 + FAST_FOR_S + 3 * SLOW_PERIOD_S:
        now[0] += 0.1  # the spin loop's period
        if refresh.tick():
            times.append(now[0] - 100.0)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    fast = [g for t, g in zip(times, gaps, strict=False) if t < FAST_FOR_S]
    slow = [g for t, g in zip(times, gaps, strict=False) if t >= FAST_FOR_S]
    assert times[0] == pytest_approx(FAST_PERIOD_S)
    assert fast and all(abs(g - FAST_PERIOD_S) < 0.11 for g in fast)
    assert len(slow) >= 2 and all(abs(g - SLOW_PERIOD_S) < 0.11 for g in slow)
    assert node.alive == [], "every refresh destroys its publisher"
    assert refresh.count == len(times) == len(node.created)
    name = node.created[0][1]
    assert name == topics.GRAPH_REFRESH.name() and name.startswith("_"), "a hidden topic"


def pytest_approx(x: float):
    import pytest

    return pytest.approx(x, abs=0.11)
