"""The executor with its real worker thread around the real scripted ChunkPolicy.

Latency is controlled by a gate the test opens (not by timing), so "the tick does not wait for
the model" is checked as a fact: ticks return while infer() is provably still inside.
"""

import threading
import time

import numpy as np
import pytest

from egomimic_policy.interface import Observation
from egomimic_policy.loading import DelayedPolicy
from egomimic_policy.rollout import AsyncChunkExecutor, ExecutorConfig, ObservationUnavailable, TickStatus
from egomimic_policy.scripted import ScriptedChunkPolicy, ScriptedMotionConfig

P_NS = 33_333_333
T0 = 1_700_000_000_000_000_000
LEFT0 = np.array([0.30, 0.05, 0.25, 1.0, 0.0, 0.0, 0.0])
RIGHT0 = np.array([0.30, -0.05, 0.25, 0.0, 1.0, 0.0, 0.0])


class GatedPolicy:
    """The scripted policy, but infer() waits until the test opens the gate (model latency
    under the test's control) and every call is recorded."""

    def __init__(self, chunk_length=30):
        self.inner = ScriptedChunkPolicy(ScriptedMotionConfig(ramp_s=0.0), chunk_length=chunk_length)
        self.spec = self.inner.spec
        self.gate = threading.Semaphore(0)
        self.inside = threading.Event()
        self.calls: list[int] = []
        self.resets = 0
        self.fail_next = False

    def reset(self):
        self.resets += 1
        self.inner.reset()

    def infer(self, observation):
        self.calls.append(observation.stamp_ns)
        self.inside.set()
        assert self.gate.acquire(timeout=10), "test never opened the gate"
        self.inside.clear()
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("server went away")
        return self.inner.infer(observation)


class Clock:
    def __init__(self):
        self.now_ns = T0

    def __call__(self):
        return self.now_ns


def wait_until(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.002)
    return False


@pytest.fixture
def rig():
    clock = Clock()
    policy = GatedPolicy()
    fresh = {"ok": True}

    def observe(now_ns):
        if not fresh["ok"]:
            raise ObservationUnavailable("left/ee_pose_dataset is 250.0 ms old (limit 200.0 ms)")
        return Observation(now_ns, {}, LEFT0, RIGHT0, 0.5, 0.5)

    ex = AsyncChunkExecutor(
        policy, ExecutorConfig(cadence="every_n", query_every_n_ticks=10, max_dry_s=0.2), observe, clock
    )
    yield ex, policy, clock, fresh
    for _ in range(5):
        policy.gate.release()
    ex.stop()


def test_tick_returns_while_the_model_is_inside_infer(rig):
    ex, policy, clock, _ = rig
    assert ex.tick(T0).status is TickStatus.WAITING
    assert policy.inside.wait(5)  # the worker took the observation and is inferring
    for k in range(1, 20):  # 19 ticks while infer is blocked: every one returns
        clock.now_ns = T0 + k * P_NS
        assert ex.tick(clock.now_ns).status is TickStatus.WAITING
    assert policy.inside.is_set() and len(policy.calls) == 1
    clock.now_ns = T0 + 500_000_000  # the answer arrives 0.5 s after its observation
    policy.gate.release()
    assert wait_until(lambda: ex.stats(clock.now_ns)["chunks"] == 1)
    clock.now_ns = T0 + 20 * P_NS
    r = ex.tick(clock.now_ns)
    assert r.status is TickStatus.RUNNING and r.target.observation_stamp_ns == T0
    # Merged by this tick: rows 0..19 are in the past (row 20 is due 7 ns after this tick).
    assert len(r.new_chunks) == 1 and r.new_chunks[0].late_rows == 20
    assert ex.stats(clock.now_ns)["rows_dropped_late"] == 20


def test_a_learned_policys_first_chunk_starts_where_the_arm_stands():
    """A policy that is not clock-driven (every learned family): the first answer, 0.5 s after
    its observation, starts at its row 0 (the arm stood still meanwhile), not 15 rows in; the
    scripted policy above keeps its rows on the clock."""
    from dataclasses import replace

    clock = Clock()
    policy = GatedPolicy()
    policy.spec = replace(policy.spec, clock_driven=False)
    ex = AsyncChunkExecutor(
        policy,
        ExecutorConfig(cadence="every_n", query_every_n_ticks=1000),
        lambda now_ns: Observation(now_ns, {}, LEFT0, RIGHT0, 0.5, 0.5),
        clock,
    )
    try:
        assert ex.tick(T0).status is TickStatus.WAITING
        assert policy.inside.wait(5)
        clock.now_ns = T0 + 15 * P_NS + 1
        policy.gate.release()
        assert wait_until(lambda: ex.stats(clock.now_ns)["chunks"] == 1)
        r = ex.tick(clock.now_ns)
        assert r.status is TickStatus.RUNNING and r.target.row == 0 and r.new_chunks[0].late_rows == 0
        assert np.allclose(
            r.target.left_pose,
            ScriptedChunkPolicy(ScriptedMotionConfig(ramp_s=0.0))
            .infer(Observation(T0, {}, LEFT0, RIGHT0, 0.5, 0.5))
            .left_pose[0],
        )
    finally:
        policy.gate.release()
        ex.stop()


def test_stale_observation_is_never_queried(rig):
    ex, policy, clock, fresh = rig
    fresh["ok"] = False
    for k in range(5):
        clock.now_ns = T0 + k * P_NS
        ex.tick(clock.now_ns)
        assert wait_until(lambda: ex.stats(clock.now_ns)["stale_observations"] >= k + 1)
    assert policy.calls == []
    stats = ex.stats(clock.now_ns)
    assert "250.0 ms old" in stats["last_problem"] and stats["status"] == "waiting"


def test_failed_query_drains_to_stopped_then_recovers(rig):
    ex, policy, clock, _ = rig
    ex.tick(T0)
    policy.gate.release()
    assert wait_until(lambda: ex.stats(T0)["chunks"] == 1)
    policy.fail_next = True
    for k in range(1, 11):  # the 10th tick after the first is due: that query fails
        clock.now_ns = T0 + k * P_NS
        ex.tick(clock.now_ns)
    policy.gate.release()
    assert wait_until(lambda: ex.stats(clock.now_ns)["query_errors"] == 1)
    statuses = []
    for k in range(11, 45):
        clock.now_ns = T0 + k * P_NS
        statuses.append(ex.tick(clock.now_ns).status)
        time.sleep(0.001)
    # The 30-row chunk covers up to row 29; 0.2 s of holding, then stopped.
    assert TickStatus.HOLDING in statuses and statuses[-1] is TickStatus.STOPPED
    assert "server went away" in ex.stats(clock.now_ns)["last_problem"]
    policy.gate.release()  # the retry succeeds
    assert wait_until(lambda: ex.stats(clock.now_ns)["chunks"] == 2)
    clock.now_ns += P_NS
    assert ex.tick(clock.now_ns).status is TickStatus.RUNNING


def test_reset_resets_the_policy_on_the_worker_and_drops_the_old_answer(rig):
    ex, policy, clock, _ = rig
    ex.tick(T0)
    assert policy.inside.wait(5)
    ex.reset()  # while infer runs: the answer to the old observation must not be used
    assert policy.resets == 0  # never reset while inferring
    policy.gate.release()
    clock.now_ns = T0 + P_NS
    assert wait_until(lambda: ex.stats(clock.now_ns)["discarded_after_reset"] == 1)
    ex.tick(clock.now_ns)
    assert wait_until(lambda: policy.resets == 1 and policy.inside.is_set())
    policy.gate.release()
    assert wait_until(lambda: ex.stats(clock.now_ns)["chunks"] == 1)
    clock.now_ns += P_NS
    r = ex.tick(clock.now_ns)
    assert r.status is TickStatus.RUNNING and r.target.observation_stamp_ns == T0 + P_NS


def test_injected_latency_delays_every_query_on_a_real_clock():
    policy = DelayedPolicy(ScriptedChunkPolicy(), latency_s=0.15)

    def observe(now_ns):
        return Observation(now_ns, {}, LEFT0, RIGHT0, 0.5, 0.5)

    ex = AsyncChunkExecutor(policy, ExecutorConfig(cadence="every_n", query_every_n_ticks=100), observe)
    try:
        start = time.time_ns()
        ex.tick(start)
        assert wait_until(lambda: ex.stats(time.time_ns())["chunks"] == 1)
        ex.tick(time.time_ns())  # merges it
        stats = ex.stats(time.time_ns())
        assert stats["latency_max_ms"] >= 150.0
        assert stats["rows_dropped_late"] >= 4  # 150 ms at 30 Hz: at least rows 0..4 had passed
    finally:
        ex.stop()


def test_on_worker_start_runs_in_the_worker_before_any_query():
    import threading

    seen = []
    started = threading.Event()

    def on_start():
        seen.append(threading.current_thread().name)
        started.set()

    ex = AsyncChunkExecutor(
        ScriptedChunkPolicy(),
        ExecutorConfig(),
        lambda now_ns: Observation(now_ns, {}, LEFT0, RIGHT0, 0.5, 0.5),
        on_worker_start=on_start,
    )
    try:
        assert started.wait(5.0)
        assert seen == ["chunk-executor-worker"] and ex.stats(time.time_ns())["chunks"] == 0
    finally:
        ex.stop()
