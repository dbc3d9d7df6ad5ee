"""The executor core with explicit times: alignment, cadence, blending, running dry, reset.

The chunks come from the real ScriptedChunkPolicy (a known function of time), so "the target
at tick t" has an exact expected value: motion.sample(t - anchor).
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from egomimic_hw.description import Arm
from egomimic_hw.errors import ConfigError
from egomimic_policy.interface import Chunk
from egomimic_policy.rollout.scheduler import ChunkScheduler, ExecutorConfig, TickStatus
from egomimic_policy.scripted import ScriptedChunkPolicy

from .scheduler_helpers import LEFT0, MOTION, P_NS, RIGHT0, T0, obs, reference, row_ns, shifted  # noqa: F401


def run_query(s: ChunkScheduler, policy, obs_ns: int, arrive_ns: int, transform=lambda c: c):
    token = s.query_started(obs_ns)
    return s.accept(token, transform(policy.infer(obs(obs_ns))), arrive_ns)


def test_rows_are_aligned_to_their_observation_and_late_rows_dropped():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", blend="none"))
    policy = ScriptedChunkPolicy(MOTION, chunk_length=30)
    arrive = T0 + int(3.5 * P_NS)  # the model took 3.5 periods
    assert run_query(s, policy, T0, arrive) == 1
    for k, now in enumerate((arrive, arrive + 7 * P_NS + 1234, row_ns(29))):
        r = s.tick(now)
        if k == 0:  # merged by the first tick after it arrived: rows 0..3 were in the past
            assert [a.late_rows for a in r.new_chunks] == [4] and s.counters.rows_dropped_late == 4
        assert r.status is TickStatus.RUNNING
        expected = reference(now)
        # A circle of 0.04 m at 0.04 m/s, interpolated over 33 ms: chord error ~ 1e-5 m.
        # Off by one row would be 1.4 mm.
        assert np.allclose(r.target.left_pose[:3], expected[Arm.LEFT][0][:3], atol=2e-5)
        assert np.allclose(r.target.right_pose[:3], expected[Arm.RIGHT][0][:3], atol=2e-5)
        assert abs(r.target.left_gripper - expected[Arm.LEFT][1]) < 1e-3
        assert r.target.chunk_id == 1 and r.target.observation_stamp_ns == T0
        assert r.target.row == max(i for i in range(30) if row_ns(i) <= now)


def test_after_rest_a_chunk_starts_at_its_first_row_where_the_arm_stands():
    """delay_after_rest (a policy that is not clock-driven): the first chunk, answered 400 ms
    after its observation while the arm stood still, is delayed by those 400 ms: the first
    target is row 0 (the observed pose), nothing is dropped, and the rows follow one period apart."""
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend="none"), delay_after_rest=True)
    policy = ScriptedChunkPolicy(MOTION, chunk_length=30)
    arrive = T0 + 12 * P_NS  # 400 ms
    chunk = policy.infer(obs(T0))
    s.accept(s.query_started(T0), chunk, arrive)
    first = s.tick(arrive)
    assert first.status is TickStatus.RUNNING and first.target.row == 0 and s.counters.rows_dropped_late == 0
    assert np.allclose(first.target.left_pose, chunk.left_pose[0])
    later = s.tick(arrive + row_ns(5) - T0)
    assert later.target.row == 5 and np.allclose(later.target.left_pose[:3], chunk.left_pose[5, :3], atol=1e-9)


def test_after_rest_a_dry_queue_delays_by_the_time_held_only():
    """The queue ran dry at its last row (the arm held there) 200 ms before the answer to an
    observation made 100 ms after that: the chunk is delayed by the 100 ms since its observation
    (the later of the two), not by the whole 200 ms; while the queue still covers now, nothing is
    delayed (the arm was moving along it)."""
    cfg = ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend="none", max_dry_s=1.0)
    s = ChunkScheduler(cfg, delay_after_rest=True)
    policy = ScriptedChunkPolicy(MOTION, chunk_length=10)
    s.accept(s.query_started(T0), policy.infer(obs(T0)), T0)
    assert s.tick(T0).target.row == 0  # merged at once: nothing to delay
    end = row_ns(9)
    assert s.tick(end).target.row == 9
    obs_ns, arrive = end + 3 * P_NS, end + 6 * P_NS
    chunk = policy.infer(obs(obs_ns))
    s.accept(s.query_started(obs_ns), chunk, arrive)
    r = s.tick(arrive)
    assert r.target.chunk_id == 2 and r.target.row == 0
    moving = ChunkScheduler(cfg, delay_after_rest=True)
    moving.accept(moving.query_started(T0), policy.infer(obs(T0)), T0)
    moving.tick(T0)
    later_obs = T0 + 2 * P_NS
    moving.accept(moving.query_started(later_obs), policy.infer(obs(later_obs)), later_obs + 100_000_000)
    r = moving.tick(later_obs + 100_000_000)  # row 3's time exactly
    assert r.target.chunk_id == 2 and r.target.row == 3, "aligned: the queue covered now"


def test_running_dry_holds_then_stops_and_counts():
    cfg = ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, max_dry_s=0.2, blend="none")
    s = ChunkScheduler(cfg)
    policy = ScriptedChunkPolicy(MOTION, chunk_length=10)
    run_query(s, policy, T0, T0)
    last_row_ns = row_ns(9)
    last = s.tick(last_row_ns).target
    holding = [s.tick(last_row_ns + k * P_NS) for k in range(1, 7)]  # 33..200 ms dry
    assert all(r.status is TickStatus.HOLDING for r in holding)
    assert all(np.array_equal(r.target.left_pose, last.left_pose) for r in holding)
    stopped = s.tick(last_row_ns + 7 * P_NS)  # 233 ms dry > 200 ms
    assert stopped.status is TickStatus.STOPPED and stopped.target is None
    assert s.counters.dry_ticks == 6 and s.counters.stopped_ticks == 1 and s.counters.dry_episodes == 1
    assert s.stats(last_row_ns + 7 * P_NS)["status"] == "stopped"


def test_a_plan_from_old_inputs_stops_after_max_open_loop_s():
    """Inputs went stale (no new query): the queued chunk is not executed open loop forever."""
    cfg = ExecutorConfig(
        cadence="every_n",
        query_every_n_ticks=1000,
        replan_after_s=0.3,
        max_open_loop_s=0.5,
        max_dry_s=5.0,
        blend="none",
    )
    s = ChunkScheduler(cfg)
    policy = ScriptedChunkPolicy(MOTION, chunk_length=60)  # a 2 s plan
    run_query(s, policy, T0, T0)
    assert s.tick(T0).status is TickStatus.RUNNING  # merges the chunk
    assert not s.query_due(T0 + 8 * P_NS)
    assert s.query_due(T0 + 10 * P_NS), "a plan older than replan_after_s asks for a query whatever the cadence"
    assert s.tick(T0 + 15 * P_NS).status is TickStatus.RUNNING  # 0.5 s after the observation
    late = s.tick(T0 + 16 * P_NS)  # 0.53 s: still inside the plan, but the plan is too old
    assert late.status is TickStatus.STOPPED and late.target is None
    assert s.counters.open_loop_ticks == 1 and "open loop" in s.last_problem
    run_query(s, policy, T0 + 16 * P_NS, T0 + 17 * P_NS)  # a fresh observation resumes the plan
    assert s.tick(T0 + 17 * P_NS).status is TickStatus.RUNNING


def test_commit_rows_limits_what_is_executed():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, commit_rows=5, max_dry_s=0.0))
    run_query(s, ScriptedChunkPolicy(MOTION, chunk_length=30), T0, T0)
    assert s.tick(T0 + 4 * P_NS).status is TickStatus.RUNNING
    assert s.tick(T0 + 5 * P_NS).status is TickStatus.STOPPED


def test_cadence_every_n_counts_ticks_from_query_start():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=3))
    assert s.tick(T0).want_query  # nothing yet: query at once
    token = s.query_started(T0)
    assert not s.tick(T0 + P_NS).want_query  # in flight
    s.accept(token, ScriptedChunkPolicy(MOTION).infer(obs(T0)), T0 + P_NS)
    wants = [s.tick(T0 + k * P_NS).want_query for k in range(2, 6)]
    assert wants == [False, True, True, True]  # due 3 ticks after the tick that asked


def test_cadence_low_water_uses_measured_latency():
    cfg = ExecutorConfig(cadence="low_water", low_water_s=0.1)
    s = ChunkScheduler(cfg)
    policy = ScriptedChunkPolicy(MOTION, chunk_length=30)  # covers 0.967 s
    assert s.tick(T0).want_query
    token = s.query_started(T0)
    s.accept(token, policy.infer(obs(T0)), T0 + 300_000_000)  # 300 ms latency measured
    end = T0 + 29 * P_NS
    # Query when the queue covers <= 300 ms + 100 ms.
    assert not s.tick(end - 450_000_000).want_query
    assert s.tick(end - 390_000_000).want_query


def test_cadence_always_queries_whenever_idle():
    s = ChunkScheduler(ExecutorConfig(cadence="always"))
    assert s.tick(T0).want_query
    s.query_started(T0)
    assert not s.tick(T0 + P_NS).want_query


def test_failed_query_backs_off_then_retries():
    s = ChunkScheduler(ExecutorConfig(cadence="always", retry_backoff_s=0.1))
    token = s.query_started(T0)
    s.query_failed(token, "RemoteUnavailable: server gone", T0)
    assert not s.tick(T0 + 50_000_000).want_query
    assert s.tick(T0 + 100_000_000).want_query
    assert s.counters.query_errors == 1 and "server gone" in s.last_problem


def seam_steps(blend: str, dx_m: float, **kw):
    """Per-tick x steps (m) of the left target across a seam where the second chunk is shifted."""
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend=blend, **kw))
    policy = ScriptedChunkPolicy(MOTION, chunk_length=60)
    run_query(s, policy, T0, T0)
    xs = [s.tick(T0 + k * P_NS).target.left_pose[0] for k in range(10)]
    obs_ns = T0 + 8 * P_NS
    run_query(s, policy, obs_ns, T0 + 10 * P_NS - 1000, transform=lambda c: shifted(c, dx_m))
    xs += [s.tick(T0 + k * P_NS).target.left_pose[0] for k in range(10, 40)]
    return np.diff(xs), xs


def test_blend_none_jumps_at_the_seam():
    steps, xs = seam_steps("none", 0.01)
    assert steps.max() == pytest.approx(0.01, abs=1e-4)  # the scripted path moves along y/z only
    assert xs[-1] == pytest.approx(LEFT0[0] + 0.01)


def test_blend_ensemble_is_the_upstream_formula():
    steps, xs = seam_steps("ensemble", 0.01, ensemble_weight=0.5)
    # Where the old chunk still has rows (all 60 here), commit = 0.5 old + 0.5 new.
    assert xs[12] == pytest.approx(LEFT0[0] + 0.005, abs=1e-9)
    assert steps.max() == pytest.approx(0.005, abs=1e-4)


def test_blend_crossfade_spreads_the_change_over_its_window():
    steps, xs = seam_steps("crossfade", 0.01, crossfade_rows=8)
    assert steps.max() <= 0.01 / 8 + 1e-4
    assert xs[10] == pytest.approx(LEFT0[0], abs=1e-4)  # continuous at the seam
    assert xs[-1] == pytest.approx(LEFT0[0] + 0.01, abs=1e-9)  # then fully the new chunk


def test_crossfade_from_a_dry_hold_is_continuous():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend="crossfade", max_dry_s=1.0))
    policy = ScriptedChunkPolicy(MOTION, chunk_length=5)
    run_query(s, policy, T0, T0)
    s.tick(T0)
    held = s.tick(T0 + 7 * P_NS)
    assert held.status is TickStatus.HOLDING
    run_query(s, policy, T0 + 7 * P_NS, T0 + 8 * P_NS, transform=lambda c: shifted(c, 0.01))
    nxt = s.tick(T0 + 8 * P_NS)
    assert nxt.status is TickStatus.RUNNING
    assert abs(nxt.target.left_pose[0] - held.target.left_pose[0]) <= 0.01 / 8 + 1e-6


def test_quaternion_blend_treats_q_and_minus_q_alike():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend="ensemble"))
    policy = ScriptedChunkPolicy(MOTION, chunk_length=30)

    def negate(c: Chunk) -> Chunk:
        left = c.left_pose.copy()
        left[:, 3:] *= -1
        return replace(c, left_pose=left)

    run_query(s, policy, T0, T0)
    run_query(s, policy, T0 + P_NS, T0 + P_NS, transform=negate)
    q = s.tick(T0 + 5 * P_NS).target.left_pose[3:]
    expected = reference(T0 + 5 * P_NS)[Arm.LEFT][0][3:]
    assert np.linalg.norm(q) == pytest.approx(1.0)
    assert abs(abs(np.dot(q, expected)) - 1.0) < 1e-6


def test_reset_clears_the_queue_and_discards_the_answer_in_flight():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n"))
    policy = ScriptedChunkPolicy(MOTION)
    run_query(s, policy, T0, T0)
    assert s.tick(T0).status is TickStatus.RUNNING
    token = s.query_started(T0 + P_NS)
    s.reset()
    assert s.tick(T0 + 2 * P_NS).status is TickStatus.WAITING
    assert s.accept(token, policy.infer(obs(T0 + P_NS)), T0 + 3 * P_NS) is None
    assert s.counters.discarded_after_reset == 1
    assert s.tick(T0 + 4 * P_NS).status is TickStatus.WAITING


def test_malformed_and_late_chunks_are_refused_and_counted():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n"))
    policy = ScriptedChunkPolicy(MOTION, chunk_length=10)
    bad = policy.infer(obs(T0))
    left = bad.left_pose.copy()
    left[3, 1] = np.nan
    token = s.query_started(T0)
    assert s.accept(token, replace(bad, left_pose=left), T0) is None
    assert s.counters.rejected_chunks == 1 and "non-finite" in s.last_problem
    assert run_query(s, policy, T0, T0 + 20 * P_NS) is not None
    r = s.tick(T0 + 20 * P_NS)
    assert r.status is TickStatus.WAITING and s.counters.too_late_chunks == 1
    assert len(r.new_chunks) == 1  # still published on policy/chunk: the model did produce it


@pytest.mark.parametrize(
    "field,value",
    [
        ("cadence", "sometimes"),
        ("blend", "average"),
        ("rate_hz", 0.0),
        ("ensemble_weight", 1.5),
        ("commit_rows", -1),
        ("max_dry_s", -0.1),
    ],
)
def test_bad_config_is_refused_with_the_field_named(field, value):
    with pytest.raises(ConfigError, match=field):
        ExecutorConfig(**{field: value})


@settings(max_examples=40, deadline=None)
@given(
    latencies=st.lists(st.integers(0, 12 * P_NS), min_size=2, max_size=6),
    offsets=st.lists(st.floats(-0.02, 0.02), min_size=6, max_size=6),
)
@example(latencies=[0, 1, 1, 1, 1], offsets=[-0.01953125, 0.015625, 0.015625, 0.0, 0.0, 0.0])  # fades overlapping
def test_crossfade_keeps_every_seam_bounded_whatever_the_latency(latencies, offsets):
    """Chunks offset by up to +-2 cm, arriving after random latencies (several may arrive between
    two ticks): with crossfade a tick-to-tick step never exceeds the motion's own step plus
    1/crossfade_rows of the largest disagreement (4 cm) for each fade still running (a seam that
    arrives while the previous fade runs adds its own 1/rows: the old side is itself a blend),
    every quaternion is unit, and a tick never gets a row meant for another time."""
    rows = 8
    s = ChunkScheduler(
        ExecutorConfig(
            cadence="every_n", query_every_n_ticks=10**6, blend="crossfade", crossfade_rows=rows, max_dry_s=10.0
        )
    )
    policy = ScriptedChunkPolicy(MOTION, chunk_length=60)
    now, prev, obs_ns = T0, None, T0
    max_motion_step = 0.042 * P_NS / 1e9 * 1.5  # circle speed 0.042 m/s, with slack
    merge_ticks: list[int] = []
    tick = 0
    for k, latency in enumerate(latencies):
        arrive = obs_ns + latency
        while now < arrive:  # tick on until the answer arrives
            r = s.tick(now)
            merge_ticks += [tick] * sum(1 for c in r.new_chunks if c.late_rows >= 0)  # merged, not superseded
            fading = max(1, sum(1 for m in merge_ticks if tick - m < rows))
            if r.target is not None:
                x = r.target.left_pose[:3]
                assert abs(np.linalg.norm(r.target.left_pose[3:]) - 1.0) < 1e-9
                if prev is not None:
                    assert np.linalg.norm(x - prev) <= max_motion_step + fading * 0.04 / rows + 1e-9
                prev = x
            now += P_NS
            tick += 1
        run_query(s, policy, obs_ns, arrive, transform=lambda c, d=offsets[k]: shifted(c, d))
        obs_ns = now
    r = s.tick(now)
    assert r.status is TickStatus.RUNNING and r.target.observation_stamp_ns <= now


def test_answers_arriving_between_two_ticks_merge_once_newest_first():
    s = ChunkScheduler(ExecutorConfig(cadence="always", blend="none"))
    policy = ScriptedChunkPolicy(MOTION, chunk_length=30)
    first = run_query(s, policy, T0, T0 + 1000)
    second = run_query(s, policy, T0 + 1000, T0 + 2000, transform=lambda c: shifted(c, 0.01))
    r = s.tick(T0 + P_NS)
    assert [(a.chunk_id, a.late_rows >= 0) for a in r.new_chunks] == [(first, False), (second, True)]
    assert s.counters.superseded_chunks == 1 and r.target.chunk_id == second
    assert r.target.left_pose[0] == pytest.approx(LEFT0[0] + 0.01)
