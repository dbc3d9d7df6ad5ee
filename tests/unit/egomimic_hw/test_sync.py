"""ObservationSynchronizer: freshness, agreement and the edge cases its docstring decides."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egomimic_hw.errors import ConfigError
from egomimic_hw.sync import ObservationSynchronizer, SyncResult

MS = 1_000_000
T0 = 1_000_000 * MS  # an arbitrary ROS time


def make(depth: int = 1) -> ObservationSynchronizer:
    return ObservationSynchronizer({"front_1": 0.1, "left_wrist": 0.1, "state": 0.05}, 0.04, history_depth=depth)


def feed_all(sync: ObservationSynchronizer, stamp_ns: int) -> None:
    for stream in sync.streams:
        sync.update(stream, stamp_ns, f"{stream}@{stamp_ns}")


def test_builds_when_all_fresh_and_agreeing():
    sync = make()
    feed_all(sync, T0)
    sync.update("state", T0 + 5 * MS, "newer state")
    result = sync.build(T0 + 10 * MS)
    assert result.ok and result.stale is None
    assert result.values == {"front_1": f"front_1@{T0}", "left_wrist": f"left_wrist@{T0}", "state": "newer state"}
    assert result.stamps["state"] == T0 + 5 * MS
    assert result.stamp_ns == T0 + 5 * MS


def test_missing_stream_is_named():
    sync = make()
    sync.update("front_1", T0, 1)
    sync.update("state", T0, 2)
    result = sync.build(T0)
    assert not result.ok and result.stale == "left_wrist"
    assert "no message yet on left_wrist" in result.reason
    assert result.values == {} and result.stamps == {}
    with pytest.raises(ValueError):
        _ = result.stamp_ns


def test_stale_stream_is_named_with_its_age():
    sync = make()
    feed_all(sync, T0)
    sync.update("front_1", T0 + 60 * MS, "f")
    sync.update("left_wrist", T0 + 60 * MS, "w")
    # state limit is 50 ms: at T0 + 51 ms it is stale although the others are fine
    result = sync.build(T0 + 51 * MS)
    assert not result.ok and result.stale == "state"
    assert "51.0 ms old (limit 50.0 ms)" in result.reason


def test_age_limit_is_inclusive_and_one_ns_past_refuses():
    sync = make()
    feed_all(sync, T0)
    assert sync.build(T0 + 50 * MS).ok
    assert sync.build(T0 + 50 * MS + 1).stale == "state"


def test_disagreeing_stamps_name_the_laggard():
    sync = make()
    sync.update("front_1", T0, "old frame")
    sync.update("left_wrist", T0 + 45 * MS, "w")
    sync.update("state", T0 + 45 * MS, "s")
    result = sync.build(T0 + 46 * MS)
    assert not result.ok and result.stale == "front_1"
    assert "disagree by 45.0 ms" in result.reason


def test_out_of_order_message_does_not_replace_newer():
    sync = make()
    feed_all(sync, T0)
    sync.update("front_1", T0 - 20 * MS, "late")
    assert sync.out_of_order["front_1"] == 1
    result = sync.build(T0 + 1 * MS)
    assert result.ok and result.values["front_1"] == f"front_1@{T0}"


def test_equal_stamp_replaces_value():
    sync = make()
    feed_all(sync, T0)
    sync.update("front_1", T0, "republished")
    assert sync.build(T0).values["front_1"] == "republished"
    assert sync.out_of_order["front_1"] == 0


def test_clock_jump_backwards_refuses_until_every_stream_crossed():
    sync = make()
    feed_all(sync, T0)
    jumped = T0 - 10_000 * MS  # sim time reset by 10 s
    sync.update("front_1", jumped, "new timeline")
    assert sync.clock_jumps["front_1"] == 1 and sync.out_of_order["front_1"] == 0
    result = sync.build(jumped + 1 * MS)
    # the other streams still hold stamps from the old timeline: 10 s "in the future"
    assert not result.ok and result.stale in ("left_wrist", "state")
    assert "ahead of now" in result.reason
    sync.update("left_wrist", jumped, "w")
    sync.update("state", jumped, "s")
    result = sync.build(jumped + 1 * MS)
    assert result.ok and result.values["front_1"] == "new timeline"


def test_clock_jump_forward_makes_everything_stale():
    sync = make()
    feed_all(sync, T0)
    result = sync.build(T0 + 5_000 * MS)
    assert not result.ok and "old" in result.reason


def test_future_stamp_within_tolerance_is_accepted():
    sync = make()
    feed_all(sync, T0)
    assert sync.build(T0 - 30 * MS).ok  # another process' clock read 30 ms "later" (tolerance 40)
    assert not sync.build(T0 - 41 * MS).ok


def test_history_aligns_fast_stream_to_slow_capture_time():
    sync = ObservationSynchronizer({"cam": 0.1, "state": 0.1}, 0.004, history_depth=8)
    sync.update("cam", T0, "frame")
    for i in range(8):  # 100 Hz state, newest 30 ms after the frame
        sync.update("state", T0 - 40 * MS + i * 10 * MS, i)
    result = sync.build(T0 + 31 * MS)
    assert result.ok
    assert result.values["state"] == 4 and result.stamps["state"] == T0
    # latest-only: the same inputs disagree by 30 ms
    latest = ObservationSynchronizer({"cam": 0.1, "state": 0.1}, 0.004)
    latest.update("cam", T0, "frame")
    latest.update("state", T0 + 30 * MS, 7)
    assert latest.build(T0 + 31 * MS).stale == "cam"


def test_history_never_picks_a_sample_older_than_its_limit():
    sync = ObservationSynchronizer({"cam": 0.2, "state": 0.02}, 0.2, history_depth=8)
    sync.update("state", T0, "too old")
    sync.update("state", T0 + 60 * MS, "fresh")
    sync.update("cam", T0, "frame")
    result = sync.build(T0 + 70 * MS)
    assert result.ok and result.values["state"] == "fresh"  # T0 would match better but is 70 ms old


def test_reset_forgets_everything():
    sync = make()
    feed_all(sync, T0)
    sync.reset()
    assert sync.build(T0).reason.startswith("no message yet")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_age_s": {}, "tolerance_s": 0.01},
        {"max_age_s": {"a": 0.0}, "tolerance_s": 0.01},
        {"max_age_s": {"a": float("nan")}, "tolerance_s": 0.01},
        {"max_age_s": {"a": 0.1}, "tolerance_s": -1.0},
        {"max_age_s": {"a": 0.1}, "tolerance_s": float("inf")},
        {"max_age_s": {"a": 0.1}, "tolerance_s": 0.01, "history_depth": 0},
    ],
)
def test_bad_configuration_raises_config_error(kwargs):
    with pytest.raises(ConfigError):
        ObservationSynchronizer(**kwargs)


def test_unknown_stream_raises_config_error():
    with pytest.raises(ConfigError, match="unknown stream 'nope'"):
        make().update("nope", T0, 0)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.sampled_from(["front_1", "left_wrist", "state"]), st.integers(-300, 300)), max_size=40
    ),
    now_offset_ms=st.integers(-300, 300),
    depth=st.integers(1, 4),
)
def test_never_builds_from_a_stale_or_disagreeing_stream(events, now_offset_ms, depth):
    """Property: whatever arrives in whatever order, an ok result only holds fresh, agreeing,
    actually-offered messages."""
    sync = make(depth)
    limits = {"front_1": 100 * MS, "left_wrist": 100 * MS, "state": 50 * MS}
    offered: dict[str, set[int]] = {s: set() for s in limits}
    for stream, offset_ms in events:
        stamp = T0 + offset_ms * MS
        sync.update(stream, stamp, (stream, stamp))
        offered[stream].add(stamp)
    now = T0 + now_offset_ms * MS
    result: SyncResult = sync.build(now)
    if result.ok:
        assert set(result.stamps) == set(limits)
        for stream, stamp in result.stamps.items():
            assert stamp in offered[stream]
            assert result.values[stream] == (stream, stamp)
            assert now - stamp <= limits[stream]
        assert max(result.stamps.values()) - min(result.stamps.values()) <= 40 * MS
    else:
        assert result.stale in limits and result.reason and not result.values


def test_concurrent_updates_and_builds_do_not_corrupt_state():
    """Builds while two threads update: every built observation pairs each stream's value with
    its own stamp. The writers stop at a bound (stamps up to T0 + 5 ms, all before `now`), so a
    loaded machine that lets them run ahead of the builder cannot turn them into future samples;
    builds go on until both are done, and once more after."""
    sync = ObservationSynchronizer({"a": 1.0, "b": 1.0}, 1.0, history_depth=4)
    updates = 5000

    def writer(stream):
        for k in range(1, updates + 1):
            sync.update(stream, T0 + 1000 * k, T0 + 1000 * k)

    threads = [threading.Thread(target=writer, args=(s,)) for s in ("a", "b")]
    for t in threads:
        t.start()
    built, builds = 0, 0
    while True:
        writing = any(t.is_alive() for t in threads)
        result = sync.build(T0 + 10_000_000)
        builds += 1
        if result.ok:
            built += 1
            assert all(result.values[s] == result.stamps[s] for s in ("a", "b"))
        if not writing:
            break
    for t in threads:
        t.join()
    assert result.ok and result.stamps == {"a": T0 + 1000 * updates, "b": T0 + 1000 * updates}, result
    assert built >= 1 and builds >= 1


def test_a_late_message_is_out_of_order_not_a_clock_jump():
    """A message delayed past max_age (a loaded machine) must not wipe the stream's newer data."""
    sync = make()
    feed_all(sync, T0)
    sync.update("front_1", T0 - 60 * MS, "late")  # older than the newest by more than its max_age
    assert sync.clock_jumps["front_1"] == 0 and sync.out_of_order["front_1"] == 1
    result = sync.build(T0 + 1 * MS)
    assert result.ok and result.values["front_1"] != "late"
