"""blend `inpaint`: the committed prefix built from the queue with the measured latency, passed
to the policy by the executor, and the merge that keeps the committed rows exactly."""

import numpy as np
import pytest

from egomimic_hw.description import Arm
from egomimic_policy.interface import Observation
from egomimic_policy.rollout import AsyncChunkExecutor
from egomimic_policy.rollout.scheduler import ChunkScheduler, ExecutorConfig
from egomimic_policy.scripted import ScriptedChunkPolicy

from .scheduler_helpers import LEFT0, MOTION, P_NS, RIGHT0, T0, obs, reference, shifted  # noqa: F401


def started_scheduler(latency_ns: int, blend: str = "inpaint", **kw) -> tuple[ChunkScheduler, ScriptedChunkPolicy]:
    """A scheduler whose queue holds a 60-row scripted chunk observed at T0 that took
    `latency_ns` to answer (the measured latency)."""
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend=blend, **kw))
    policy = ScriptedChunkPolicy(MOTION, chunk_length=60)
    token = s.query_started(T0 - latency_ns)
    s.accept(token, policy.infer(obs(T0)), T0)
    s.tick(T0)
    return s, policy


def test_prefix_is_the_queue_from_the_observation_over_the_measured_latency():
    latency = 200_000_000  # 200 ms measured
    s, _ = started_scheduler(latency)
    now = T0 + 5 * P_NS
    s.tick(now)
    obs_ns = now - 4_000_000  # the observation is 4 ms old when the query starts
    prefix = s.inpaint_prefix(obs_ns, now)
    # Rows from the observation's time until now + latency + one period (the merge tick).
    expected_rows = (now + latency + P_NS - obs_ns) // P_NS + 1
    assert len(prefix) == expected_rows == 8
    assert prefix.observation_stamp_ns == obs_ns and prefix.period_s == pytest.approx(1 / 30)
    for i in range(len(prefix)):
        ref = reference(obs_ns + round(i * 1e9 / 30))
        # the queue is evaluated between its rows (linear interpolation of a curved path: ~3 um)
        np.testing.assert_allclose(prefix.left_pose[i, :3], ref[Arm.LEFT][0][:3], atol=1e-5)
        np.testing.assert_allclose(prefix.right_gripper[i], ref[Arm.RIGHT][1], atol=1e-5)
    # A longer measured latency commits more rows.
    s2, _ = started_scheduler(400_000_000)
    s2.tick(now)
    assert len(s2.inpaint_prefix(obs_ns, now)) == (now + 400_000_000 + P_NS - obs_ns) // P_NS + 1


def test_prefix_stops_at_the_queue_end_and_is_none_when_nothing_is_committed():
    s, _ = started_scheduler(100_000_000)
    late = T0 + 55 * P_NS
    s.tick(late)
    prefix = s.inpaint_prefix(late, late)
    assert len(prefix) == 5  # rows 55..59 of the queue; nothing beyond its last row is committed
    assert s.inpaint_prefix(T0 + 70 * P_NS, T0 + 70 * P_NS) is None  # the queue has run out
    assert ChunkScheduler(ExecutorConfig(blend="inpaint")).inpaint_prefix(T0, T0) is None  # empty queue
    crossfade, _ = started_scheduler(100_000_000, blend="crossfade")
    assert crossfade.inpaint_prefix(T0, T0) is None  # only blend inpaint builds a prefix


def test_merge_takes_committed_rows_from_the_queue_then_crossfades():
    s, policy = started_scheduler(100_000_000, crossfade_rows=4)
    xs = [s.tick(T0 + k * P_NS).target.left_pose[0] for k in range(1, 9)]
    obs_ns = T0 + 8 * P_NS
    prefix = s.inpaint_prefix(obs_ns, obs_ns)
    n = len(prefix)  # 100 ms + one period at 30 Hz -> rows 0..4 of the new chunk
    assert n == 5
    token = s.query_started(obs_ns, prefix)
    # A model that ignores the prefix and changed its mind by 1 cm (the worst case for the seam).
    s.accept(token, shifted(policy.infer(obs(obs_ns)), 0.01), obs_ns + 2 * P_NS)
    for k in range(10, 40):
        xs.append(s.tick(T0 + k * P_NS).target.left_pose[0])
    ticks = list(range(1, 9)) + list(range(10, 40))
    x_at = dict(zip(ticks, xs))
    # Every tick up to the prefix's last row is the committed plan, exactly.
    for k in range(10, 8 + n):
        assert x_at[k] == pytest.approx(LEFT0[0], abs=1e-12), k
    # Then the old plan fades out over crossfade_rows periods: steps of 1 cm / 4 at most.
    after = [x_at[k] for k in range(8 + n - 1, 40)]
    assert np.abs(np.diff(after)).max() <= 0.01 / 4 + 1e-9
    assert x_at[39] == pytest.approx(LEFT0[0] + 0.01, abs=1e-12)


def test_a_model_that_honours_the_prefix_gives_a_seam_without_any_jump():
    """If the new chunk's first rows are the prefix (what fold/pi/moe return) and it continues
    smoothly, the command across the seam is the smooth scripted path itself."""
    s, policy = started_scheduler(100_000_000)
    obs_ns = T0 + 8 * P_NS
    for k in range(1, 9):
        s.tick(T0 + k * P_NS)
    token = s.query_started(obs_ns, s.inpaint_prefix(obs_ns, obs_ns))
    s.accept(token, policy.infer(obs(T0 + 8 * P_NS)), obs_ns + 2 * P_NS)  # continues the same path
    # The scripted policy anchors its motion at its observation: map back to T0's path.
    got = [s.tick(T0 + k * P_NS).target.left_pose[:3] for k in range(10, 14)]
    want = [reference(T0 + k * P_NS)[Arm.LEFT][0][:3] for k in range(10, 13)]
    np.testing.assert_allclose(got[:3], want, atol=1e-9)  # committed rows: the old plan exactly


class RecordingPolicy:
    def __init__(self):
        self.inner = ScriptedChunkPolicy(MOTION, chunk_length=60)
        self.spec = self.inner.spec
        self.seen: list[Observation] = []

    def reset(self):
        self.inner.reset()

    def infer(self, observation):
        self.seen.append(observation)
        return self.inner.infer(observation)


@pytest.mark.parametrize("blend", ["inpaint", "crossfade"])
def test_executor_passes_the_prefix_only_with_blend_inpaint(blend):
    clock = {"now": T0}
    policy = RecordingPolicy()
    ex = AsyncChunkExecutor(
        policy,
        ExecutorConfig(cadence="always", blend=blend),
        lambda now: obs(now - 5_000_000),
        clock_ns=lambda: clock["now"],
        start=False,
    )
    ex.tick(clock["now"])
    ex._query_once()  # the worker's body, run inline with the fake clock
    assert policy.seen[0].prefix is None  # nothing committed yet
    for k in range(1, 4):
        clock["now"] = T0 + k * P_NS
        ex.tick(clock["now"])
    ex._query_once()
    second = policy.seen[1]
    if blend == "crossfade":
        assert second.prefix is None
        return
    assert second.prefix is not None and second.prefix.observation_stamp_ns == second.stamp_ns
    # The fake clock did not move during the first query: measured latency 0, so the prefix
    # covers the observation's age plus one period.
    assert len(second.prefix) == (clock["now"] + P_NS - second.stamp_ns) // P_NS + 1
