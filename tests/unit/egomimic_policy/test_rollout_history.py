"""The model's observation window (egomimic_policy.rollout.history): one observation per tick,
consecutive ticks only, never the current one, at most obs_steps - 1."""

import threading

import numpy as np
import pytest

from egomimic_policy.interface import Observation
from egomimic_policy.rollout.history import GAP_PERIODS, ObservationHistory

P_NS = 33_333_333
T0 = 1_000_000_000_000


def obs(stamp_ns: int) -> Observation:
    pose = np.array([0.3, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0])
    return Observation(
        stamp_ns=stamp_ns, images={}, left_pose=pose, right_pose=pose, left_gripper=0.5, right_gripper=0.5
    )


def stamps(observation: Observation) -> list[int]:
    return [h.stamp_ns for h in observation.history]


def test_the_window_holds_the_preceding_ticks_oldest_first():
    history = ObservationHistory(obs_steps=3, period_ns=P_NS)
    assert history.depth == 2
    for k in range(5):
        history.record(obs(T0 + k * P_NS))
    current = history.attach(obs(T0 + 5 * P_NS))
    assert stamps(current) == [T0 + 3 * P_NS, T0 + 4 * P_NS]
    assert all(h.history == () for h in current.history), "a past observation carries no history of its own"
    assert current.stamp_ns == T0 + 5 * P_NS


def test_the_current_observation_is_never_its_own_history():
    """The tick records the observation a query then uses: it is not in its own window."""
    history = ObservationHistory(obs_steps=3, period_ns=P_NS)
    history.record(obs(T0))
    history.record(obs(T0 + P_NS))
    assert stamps(history.attach(obs(T0 + P_NS))) == [T0]


@pytest.mark.parametrize("query_delay_ns", [0, 10_000_000])
def test_a_two_frame_model_sees_the_previous_tick_not_the_current_one_again(query_delay_ns):
    """Fold's 2-frame window: the tick at t records frame t, the query then builds its own
    observation at t (or ~10 ms later): its history is frame t-1, one period before."""
    history = ObservationHistory(obs_steps=2, period_ns=P_NS)
    for k in range(4):
        history.record(obs(T0 + k * P_NS))
    assert stamps(history.attach(obs(T0 + 3 * P_NS + query_delay_ns))) == [T0 + 2 * P_NS]


def test_a_repeated_observation_is_kept_once():
    """Ticks faster than the inputs change build the same observation again: one entry."""
    history = ObservationHistory(obs_steps=3, period_ns=P_NS)
    for stamp in (T0, T0, T0 + P_NS, T0 + P_NS):
        history.record(obs(stamp))
    assert len(history) == 2
    assert stamps(history.attach(obs(T0 + 2 * P_NS))) == [T0, T0 + P_NS]


def test_a_gap_ends_the_window():
    """Inputs stale in between: the frames before the gap are not the model's t-1, t-2."""
    history = ObservationHistory(obs_steps=4, period_ns=P_NS)
    history.record(obs(T0))
    history.record(obs(T0 + P_NS))
    late = T0 + P_NS + GAP_PERIODS * P_NS + 1  # just beyond the tolerated spacing
    history.record(obs(late))
    assert stamps(history.attach(obs(late + P_NS))) == [late]
    edge = ObservationHistory(obs_steps=2, period_ns=P_NS)
    edge.record(obs(T0))
    assert stamps(edge.attach(obs(T0 + GAP_PERIODS * P_NS))) == [T0], "exactly GAP_PERIODS apart is consecutive"
    assert stamps(edge.attach(obs(T0 + GAP_PERIODS * P_NS + 1))) == []


def test_one_frame_models_record_nothing_and_clear_starts_over():
    single = ObservationHistory(obs_steps=1, period_ns=P_NS)
    single.record(obs(T0))
    current = obs(T0 + P_NS)
    assert single.depth == 0 and len(single) == 0 and single.attach(current) is current
    assert ObservationHistory(obs_steps=0, period_ns=P_NS).depth == 0  # a spec saying less than one frame
    history = ObservationHistory(obs_steps=2, period_ns=P_NS)
    history.record(obs(T0))
    history.clear()
    assert stamps(history.attach(obs(T0 + P_NS))) == []
    with pytest.raises(ValueError, match="period_ns"):
        ObservationHistory(obs_steps=2, period_ns=0)


def test_recording_and_attaching_from_two_threads():
    """The tick records while the executor's worker attaches: every window it sees is
    consecutive and at most depth long."""
    history = ObservationHistory(obs_steps=3, period_ns=P_NS)
    done = threading.Event()
    seen, errors = [], []

    def worker():
        try:
            while not done.is_set():
                seen.append(stamps(history.attach(obs(T0 + 10_000 * P_NS))))
        except Exception as exc:  # noqa: BLE001 - e.g. a deque mutated while it was read
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        for k in range(10_000):
            history.record(obs(T0 + k * P_NS))
    finally:
        done.set()
        thread.join(timeout=5.0)
    assert not thread.is_alive() and not errors, errors
    final = stamps(history.attach(obs(T0 + 10_000 * P_NS)))
    assert final == [T0 + 9_998 * P_NS, T0 + 9_999 * P_NS]
    for window in seen:
        assert len(window) <= 2 and all(b - a == P_NS for a, b in zip(window, window[1:], strict=False))
