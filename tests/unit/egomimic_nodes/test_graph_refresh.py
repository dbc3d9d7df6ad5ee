"""The graph refresh (egomimic_nodes.graph_refresh): often while a graph starts, rarely after,
never in the spin loop's way (a refresh that blocks is skipped, not waited for), and each
refresh, made through rcl with ctypes, leaves no publisher behind."""

import threading

import pytest

from egomimic_nodes import topics
from egomimic_nodes.graph_refresh import FAST_FOR_S, FAST_PERIOD_S, SLOW_PERIOD_S, GraphRefresh, RclRefresh


class CountingRefresh:
    def __init__(self):
        self.calls = 0
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def __call__(self):
        self.entered.set()
        assert self.release.wait(10)
        self.calls += 1


def test_refreshes_often_at_start_then_rarely():
    now = [100.0]
    work = CountingRefresh()
    refresh = GraphRefresh(None, clock=lambda: now[0], refresh=work)
    times = []
    try:
        while now[0] < 100.0 + FAST_FOR_S + 3 * SLOW_PERIOD_S:
            now[0] += 0.1  # the spin loop's period
            if refresh.tick():
                times.append(now[0] - 100.0)
                assert refresh.wait_idle(10)
    finally:
        refresh.close()
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    fast = [g for t, g in zip(times, gaps, strict=False) if t < FAST_FOR_S]
    slow = [g for t, g in zip(times, gaps, strict=False) if t >= FAST_FOR_S]
    assert times[0] == pytest.approx(FAST_PERIOD_S, abs=0.11)
    assert fast and all(abs(g - FAST_PERIOD_S) < 0.11 for g in fast)
    assert len(slow) >= 2 and all(abs(g - SLOW_PERIOD_S) < 0.11 for g in slow)
    assert refresh.count == work.calls == len(times) and refresh.skipped == 0


def test_a_blocked_refresh_never_holds_up_the_spin_loop_and_the_next_one_is_skipped():
    now = [0.0]
    work = CountingRefresh()
    work.release.clear()  # the middleware call blocks (a peer's shared-memory port)
    refresh = GraphRefresh(None, clock=lambda: now[0], refresh=work)
    try:
        now[0] = FAST_PERIOD_S
        assert refresh.tick()
        assert work.entered.wait(10)
        now[0] += FAST_PERIOD_S
        assert not refresh.tick(), "due while the previous one still runs"  # returns at once
        assert refresh.skipped == 1 and refresh.count == 0
        work.release.set()
        assert refresh.wait_idle(10)
        assert refresh.count == 1
    finally:
        work.release.set()
        refresh.close()


def test_a_failed_refresh_is_counted_and_logged_and_the_thread_goes_on():
    lines = []
    calls = []

    def failing():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("rcl_publisher_init returned 1")

    now = [0.0]
    refresh = GraphRefresh(None, clock=lambda: now[0], refresh=failing, log=lines.append)
    try:
        for _ in range(2):
            now[0] += FAST_PERIOD_S
            assert refresh.tick()
            assert refresh.wait_idle(10)
    finally:
        refresh.close()
    assert refresh.failed == 1 and refresh.count == 1
    assert lines and "rcl_publisher_init returned 1" in lines[0]


def test_the_rcl_refresh_creates_the_hidden_publisher_and_leaves_none_behind():
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context, domain_id=int(__import__("os").environ.get("ROS_DOMAIN_ID", "0")))
    node = rclpy.create_node("graph_refresh_probe", namespace="/eva", context=context)
    try:
        work = RclRefresh(node)
        name = "/eva/" + topics.GRAPH_REFRESH.name()
        assert topics.GRAPH_REFRESH.name().startswith("_"), "a hidden topic"
        publisher = work.create()
        assert node.count_publishers(name) == 1
        work.destroy(publisher)
        assert node.count_publishers(name) == 0
        for _ in range(3):
            work()
        assert node.count_publishers(name) == 0
        assert work.node.get_name() == "_graph_refresh_probe_graph_refresh", "a hidden node of its own"
        work.close()
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
