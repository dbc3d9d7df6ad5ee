"""egomimic_nodes.outbox: what goes out is what publish() would have sent, and a send that
blocks in the middleware holds up only the outbox's own thread (bench/publish_stall.py measures
the real block: a subscriber stopped inside its shared-memory port's lock)."""

from __future__ import annotations

import ctypes
import gc
import threading
import time

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def node():
    import rclpy

    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=["--ros-args", "--disable-external-lib-logs"])
    n = rclpy.create_node("outbox_test", context=ctx)
    try:
        yield n
    finally:
        n.destroy_node()
        rclpy.try_shutdown(context=ctx)
        gc.collect()  # the participant goes with the test (conftest.ros_node says why)


def test_the_subscriber_receives_exactly_the_message(node):
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState

    from egomimic_nodes import qos
    from egomimic_nodes.outbox import Outbox

    got, arrived = [], threading.Event()
    node.create_subscription(JointState, "/outbox_test/js", lambda m: (got.append(m), arrived.set()), qos.COMMAND)
    box = Outbox(node.create_publisher(JointState, "/outbox_test/js", qos.COMMAND))
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    msg = JointState()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 12, 345
    msg.header.frame_id = "left_base"
    msg.name = [f"joint{i}" for i in range(7)]
    msg.position = [0.1 * i - 0.3 for i in range(7)]
    deadline = time.monotonic() + 20.0
    while not arrived.is_set() and time.monotonic() < deadline:  # until discovery matched the two
        box.publish(msg)
        executor.spin_once(timeout_sec=0.05)
    executor.shutdown()
    box.close()
    assert got, "nothing arrived within 20 s"
    m = got[0]
    assert (m.header.stamp.sec, m.header.stamp.nanosec, m.header.frame_id) == (12, 345, "left_base")
    assert list(m.name) == list(msg.name) and list(m.position) == pytest.approx(list(msg.position), abs=0)
    assert box.failed == 0 and box.sent >= 1


def test_a_blocked_send_holds_up_only_its_own_thread(node):
    """The send is replaced by a C call that blocks for 0.4 s (usleep, through ctypes as the
    real send is): meanwhile the caller's publish() returns at once, Python keeps running, only
    the newest message waits (keep=1) and the outbox says how long it has been blocked."""
    from std_msgs.msg import Header

    from egomimic_nodes.outbox import Outbox

    usleep = ctypes.CDLL(None).usleep
    usleep.argtypes = [ctypes.c_uint]
    box = Outbox(node.create_publisher(Header, "/outbox_test/h", 10), keep=1)
    entered = threading.Event()

    def blocking_send(_publisher, _data):
        entered.set()
        usleep(400_000)  # a C call through ctypes: the GIL is released, as in the real send
        return True

    box.send = blocking_send
    box.publish(Header())
    assert entered.wait(5.0)
    t0 = time.monotonic()
    slowest_call, spins = 0.0, 0
    while time.monotonic() - t0 < 0.2:
        t = time.perf_counter()
        box.publish(Header())
        slowest_call = max(slowest_call, time.perf_counter() - t)
        spins += 1
    blocked = box.blocked_s()
    assert blocked >= 0.2, f"the send was not in progress ({blocked:.3f} s)"
    assert spins > 100, f"Python stalled while the send was blocked ({spins} publish() calls in 0.2 s)"
    assert slowest_call < 0.1, f"publish() waited for the blocked send ({slowest_call * 1e3:.0f} ms)"
    assert box.flush(5.0)
    box.close()
    assert box.sent == 2 and box.dropped == spins - 1 and box.slowest_s >= 0.4


def test_close_all_waits_once_for_every_blocked_sender(node):
    """Three outboxes, each blocked in a 2 s send: close_all(timeout_s=0.5) returns after about
    0.5 s in all, not 0.5 s per outbox (a driver's three behind a dead subscriber's port), and
    each thread still finishes its send and ends on its own."""
    from std_msgs.msg import Header

    from egomimic_nodes.outbox import Outbox, close_all

    usleep = ctypes.CDLL(None).usleep
    usleep.argtypes = [ctypes.c_uint]
    entered = threading.Semaphore(0)

    def blocking_send(_publisher, _data):
        entered.release()
        usleep(2_000_000)
        return True

    boxes = []
    for i in range(3):
        box = Outbox(node.create_publisher(Header, f"/outbox_test/c{i}", 10))
        box.send = blocking_send
        box.publish(Header())
        boxes.append(box)
    for _ in boxes:
        assert entered.acquire(timeout=5.0)
    t0 = time.monotonic()
    close_all(boxes, timeout_s=0.5)
    took = time.monotonic() - t0
    assert 0.45 <= took < 1.2, f"close_all took {took:.2f} s for three blocked senders (0.5 s deadline)"
    assert all(b._thread.is_alive() for b in boxes)  # still inside the blocked send
    for box in boxes:
        box._thread.join(10.0)
        assert not box._thread.is_alive() and box.sent == 1
