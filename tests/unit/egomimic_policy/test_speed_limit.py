"""The executor's speed limits: a step beyond them is moved back along its own direction, a step
within them passes bit for bit, and what the executor publishes is what the gate's own rate
check accepts (egomimic_safety.checks.check_command_step, at the gate's default limits)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import pose_hw_from_ds
from egomimic_hw.rotations import quat_angle
from egomimic_policy.interface import Chunk
from egomimic_policy.rollout.scheduler import ChunkScheduler, ExecutorConfig, TickStatus
from egomimic_policy.rollout.speed_limit import SpeedLimiter, limit_step
from egomimic_safety.checks import check_command_step
from egomimic_safety.config import REJECT, GateConfig

from .scheduler_helpers import LEFT0, P_NS, RIGHT0, T0

DT_S = P_NS * 1e-9


def _about_z(angle_rad: float) -> np.ndarray:
    return np.array([np.cos(angle_rad / 2), 0.0, 0.0, np.sin(angle_rad / 2)])


def test_a_step_within_the_limits_passes_unchanged():
    pose = LEFT0 + np.array([0.005, 0, 0, 0, 0, 0, 0])
    assert limit_step(LEFT0, pose, 0.018, 0.054) is None


def test_a_long_step_is_shortened_along_its_own_direction():
    pose = LEFT0.copy()
    pose[:3] += [0.024, 0.0, 0.018]  # 30 mm
    out = limit_step(LEFT0, pose, 0.018, 0.054)
    step = out[:3] - LEFT0[:3]
    assert np.linalg.norm(step) == pytest.approx(0.018, abs=1e-12)
    assert np.allclose(step / np.linalg.norm(step), [0.8, 0.0, 0.6])
    assert np.array_equal(out[3:], pose[3:])


def test_a_fast_turn_is_shortened_on_the_shortest_arc():
    prev = np.r_[LEFT0[:3], _about_z(0.0)]
    pose = np.r_[LEFT0[:3], -3.0 * _about_z(0.2)]  # the same rotation as q, any norm, either sign
    out = limit_step(prev, pose, 0.018, 0.054)
    assert quat_angle(prev[3:], out[3:]) == pytest.approx(0.054, abs=1e-9)
    assert quat_angle(out[3:], _about_z(0.2)) == pytest.approx(0.2 - 0.054, abs=1e-9)
    assert np.array_equal(out[:3], pose[:3])


def test_dt_is_capped_a_gap_grants_no_larger_step():
    lim = ExecutorConfig().speed_limiter()
    left, right = LEFT0.copy(), RIGHT0.copy()
    lim.apply(T0, left, right)
    far = left.copy()
    far[0] += 0.2
    out, _, changed = lim.apply(T0 + 10 * P_NS, far, right)  # 10 periods later: dt counts as 2
    assert changed and lim.limited == 1
    assert np.linalg.norm(out[:3] - left[:3]) == pytest.approx(0.54 * 2 / 30, rel=1e-9)


def test_reset_lets_the_next_pose_pass_as_it_is():
    lim = ExecutorConfig().speed_limiter()
    lim.apply(T0, LEFT0, RIGHT0)
    lim.reset()
    far = LEFT0 + np.array([0.1, 0, 0, 0, 0, 0, 0])
    out, _, changed = lim.apply(T0 + P_NS, far, RIGHT0)
    assert not changed and out is far


def test_limits_above_the_x5s_are_refused():
    with pytest.raises(ConfigError, match="max_ee_speed_m_s"):
        ExecutorConfig(max_ee_speed_m_s=0.7)
    with pytest.raises(ConfigError, match="max_ee_angular_speed_rad_s"):
        ExecutorConfig(max_ee_angular_speed_rad_s=2.0)


def _uneven_chunk(stamp_ns: int, jump_row: int, jump_m: float) -> Chunk:
    """A 0.3 m/s plan along x whose row `jump_row` and after are `jump_m` further on: one uneven
    row, as a sampled plan has now and then (0.3 m/s x 33 ms + 18 mm = 28 mm: 0.84 m/s)."""
    n = 30
    x = 0.3 * np.arange(n) * DT_S + np.where(np.arange(n) >= jump_row, jump_m, 0.0)
    left = np.tile(LEFT0, (n, 1))
    right = np.tile(RIGHT0, (n, 1))
    left[:, 0] += x
    right[:, 0] += x
    return Chunk(stamp_ns, 1 / 30, left, right, np.full(n, 0.5), np.full(n, 0.5))


def _gate_accepts(prev_ds: np.ndarray, pose_ds: np.ndarray, dt_s: float) -> bool:
    """The gate's own rate check on the two commands, in its frame, at its default limits."""
    try:
        check_command_step(pose_hw_from_ds(pose_ds), pose_hw_from_ds(prev_ds), dt_s, GateConfig(), REJECT, [])
    except Exception:  # noqa: BLE001 - the gate's refusal type is private to it
        return False
    return True


def test_the_executor_follows_an_uneven_plan_at_the_limit_and_the_gate_accepts_every_step():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend="none"))
    chunk = _uneven_chunk(T0, jump_row=10, jump_m=0.018)
    s.accept(s.query_started(T0), chunk, T0)
    assert not _gate_accepts(chunk.left_pose[9], chunk.left_pose[10], DT_S)  # unlimited: TRANSLATION_RATE
    published = []
    for i in range(25):
        now = T0 + i * P_NS + (P_NS // 2 if i % 3 == 1 else 0)  # uneven ticks too
        r = s.tick(now)
        assert r.status is TickStatus.RUNNING
        published.append((now, r.target.left_pose, r.target.right_pose))
    for (t0, l0, r0), (t1, l1, r1) in zip(published, published[1:]):
        dt = (t1 - t0) * 1e-9
        assert np.linalg.norm(l1[:3] - l0[:3]) <= 0.54 * dt + 1e-12
        assert _gate_accepts(l0, l1, dt) and _gate_accepts(r0, r1, dt)
    assert s.counters.speed_limited > 0 and s.stats(T0)["speed_limited"] == s.counters.speed_limited
    # The plan slowed again (0.3 m/s): the published target met it.
    assert np.allclose(published[-1][1], chunk.left_pose[24], atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.floats(-0.05, 0.05),
            st.floats(-0.05, 0.05),
            st.floats(-0.05, 0.05),
            st.floats(-0.3, 0.3),
            st.integers(1_000_000, 3 * P_NS),
        ),
        min_size=2,
        max_size=20,
    )
)
def test_property_every_published_step_is_one_the_gate_accepts(steps):
    """Whatever the proposed poses (steps of up to 87 mm and 0.3 rad) and the ticks' spacing
    (1 ms to 3 periods), every step the limiter lets out passes the gate's rate check. (Below a
    microsecond the 10 % margin is smaller than the gate's own rounding of an angle, ~2e-8 rad:
    ticks are never that close.)"""
    lim = SpeedLimiter(0.54, 1.62, 2 * DT_S, max_lag_m=1.0, max_lag_rad=3.0)  # no runaway: any step
    t, pose = T0, LEFT0.copy()
    prev = None
    for dx, dy, dz, turn, dt_ns in steps:
        t += dt_ns
        pose = pose.copy()
        pose[:3] += (dx, dy, dz)
        pose[3:] = turned(pose[3:], turn)
        out, _, _ = lim.apply(t, pose, RIGHT0)
        if prev is not None:
            assert _gate_accepts(prev[1], out, (t - prev[0]) * 1e-9)
        prev = (t, out)


def turned(quat: np.ndarray, turn: float) -> np.ndarray:
    """`quat` turned by `turn` rad about z."""
    w, x, y, z = quat
    c, s = np.cos(turn / 2), np.sin(turn / 2)
    return np.array([c * w - s * z, c * x - s * y, c * y + s * x, c * z + s * w])


def test_a_plan_that_keeps_outrunning_the_limits_stops_the_executor_until_reset():
    """A 1 m/s plan (a policy gone wrong): followed at 0.54 m/s, the lag grows 15 mm a period;
    past 30 mm nothing is published (the gate then holds on the silence) and no new query is
    made, until reset."""
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend="none"))
    n = 30
    left = np.tile(LEFT0, (n, 1))
    left[:, 0] += 1.0 * np.arange(n) * DT_S
    chunk = Chunk(T0, 1 / 30, left, np.tile(RIGHT0, (n, 1)), np.full(n, 0.5), np.full(n, 0.5))
    s.accept(s.query_started(T0), chunk, T0)
    statuses = [s.tick(T0 + i * P_NS) for i in range(6)]
    assert [r.target is not None for r in statuses] == [True, True, False, False, False, False]
    assert statuses[-1].status is TickStatus.STOPPED and not statuses[-1].want_query
    assert s.counters.runaway_ticks == 4 and "ahead of the speed limits" in s.last_problem
    assert "left: the plan ran 31 mm" in s.last_problem  # (33.3 - 18) mm a period, twice
    s.reset()
    assert s.tick(T0 + 7 * P_NS).status is TickStatus.WAITING and s.query_due(T0 + 7 * P_NS)


def test_an_uneven_row_is_not_a_runaway():
    s = ChunkScheduler(ExecutorConfig(cadence="every_n", query_every_n_ticks=1000, blend="none"))
    s.accept(s.query_started(T0), _uneven_chunk(T0, jump_row=5, jump_m=0.028), T0)  # 38 mm in one row
    assert all(s.tick(T0 + i * P_NS).target is not None for i in range(25))
    assert s.counters.runaway_ticks == 0 and s.counters.speed_limited >= 2
