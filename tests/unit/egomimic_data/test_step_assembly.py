"""StepAssembler: one step per head-camera frame, the measured pose paired with its own joint
sample, skips named by stream, and the per-stream counts. Time is driven by hand: a simulated
graph (cameras, drivers, policy, gate) delivers samples with latency and jitter, and the
recorder's 30 Hz tick calls assemble()."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from egomimic_data.episode_format import numeric_keys
from egomimic_data.recording_config import RecordingConfigError
from egomimic_data.step_assembly import (
    CMD_POSE_STREAM,
    AssemblyConfig,
    StepAssembler,
    cmd_joints_stream,
    image_stream,
    obs_pose_stream,
)
from egomimic_hw.description import ARMS, CAMERAS, Arm

MS = 1_000_000
PERIOD = 33_333_333
T0 = 10_000 * MS


def fake_fk(joints: np.ndarray) -> np.ndarray:
    """A pose that is a function of the joints, so a mismatched pair shows."""
    return np.array([joints[0], joints[1], joints[2], 1.0, 0.0, 0.0, 0.0]) * 0.5


class Graph:
    """Samples as the graph sends them: (arrival ns, order, what). Cameras at 30 Hz from T0 (+ a
    per-camera capture offset), joint_states at 100 Hz with the FK pose on every third tick (same
    stamp), policy/action and joint_command at `command_hz`. Arrival = stamp + latency + jitter."""

    def __init__(
        self,
        seconds: float,
        seed: int = 0,
        command_hz: float = 30.0,
        pose_first: bool = False,
        capture_offset_ms=lambda cam, k: 2.0 * CAMERAS.index(cam),
    ):
        rng = np.random.default_rng(seed)
        self.events: list[tuple[int, int, tuple]] = []
        n = 0

        def add(arrival: float, what: tuple) -> None:
            nonlocal n
            heapq.heappush(self.events, (int(arrival), n, what))
            n += 1

        end = T0 + int(seconds * 1e9)
        for cam in CAMERAS:
            for k in range(int(seconds * 30)):
                t = T0 + k * PERIOD + int(capture_offset_ms(cam, k) * MS)
                add(t + 4 * MS + rng.uniform(-3, 6) * MS, ("image", cam, t))
        for k, t in enumerate(range(T0, end, 10 * MS)):
            q = np.array([np.sin(k / 50), np.cos(k / 70), k / 1000, 0.0, 0.0, 0.0])
            for arm in ARMS:
                joints_at = t + 1 * MS + rng.uniform(0, 2) * MS
                add(joints_at, ("joints", arm, t, q))
                if k % 3 == 0:  # one more hop (frames node): usually after its joints, or before
                    add(joints_at + (-0.5 if pose_first else 2) * MS, ("pose", arm, t, fake_fk(q)))
        t = T0 + 7 * MS
        while t < end:
            add(t + 2 * MS, ("command", t))
            for arm in ARMS:
                add(t + 4 * MS, ("command_joints", arm, t))
            t += int(1e9 / command_hz)

    def run(self, a: StepAssembler, until_ns: int, tick_phase_ns: int = 0, skip=lambda what: False):
        """Deliver what arrived before each 30 Hz tick, then assemble; returns the steps."""
        steps = []
        tick = T0 + tick_phase_ns
        while tick <= until_ns:
            while self.events and self.events[0][0] <= tick:
                arrival, _, what = heapq.heappop(self.events)
                if not skip(what):
                    deliver(a, what, arrival)
            steps += a.assemble(tick)
            tick += PERIOD
        return steps


def deliver(a: StepAssembler, what: tuple, arrival: int) -> None:
    kind = what[0]
    if kind == "image":
        _, cam, t = what
        a.image(cam, t, np.full((2, 2, 3), (t // PERIOD) % 256, np.uint8), arrival)
    elif kind == "joints":
        _, arm, t, q = what
        a.joints(arm, t, q, 0.25, arrival)
    elif kind == "pose":
        _, arm, t, pose = what
        a.pose(arm, t, pose, arrival)
    elif kind == "command":
        _, t = what
        poses = {arm: np.array([t / 1e9, 0, 0, 1, 0, 0, 0]) for arm in ARMS}
        a.command(t, poses, dict.fromkeys(ARMS, 0.5), arrival)
    else:
        _, arm, t = what
        a.command_joints(arm, t, np.full(6, t / 1e9), arrival)


WARM_UP = 1_000 * MS
"""The graph runs this long before an episode begins (every stream live, as the node requires)."""


def recorded(seconds=7.0, phase_ms=0.0, drop=None, **graph):
    """Steps of an episode begun after WARM_UP; `drop`: (camera, frame index) never delivered."""
    g = Graph(seconds, **graph)
    a = StepAssembler()

    def dropped(w):
        return (
            drop is not None and w[0] == "image" and w[1] == drop[0] and abs(w[2] - (T0 + drop[1] * PERIOD)) < 20 * MS
        )

    g.run(a, T0 + WARM_UP - PERIOD, int(phase_ms * MS), skip=dropped)
    a.begin(T0 + WARM_UP)
    steps = g.run(a, T0 + int(seconds * 1e9), int(phase_ms * MS), skip=dropped)
    return a, steps


@pytest.mark.parametrize("phase_ms", [0.0, 3.0, 5.0, 8.0, 16.7, 30.0])
def test_every_head_camera_frame_is_one_step_whatever_the_tick_phase(phase_ms):
    """Frames arrive 1-10 ms after capture; the tick sits anywhere, also right on the arrivals."""
    a, steps = recorded(phase_ms=phase_ms)
    counts = a.end()
    ref = [s.image_stamps_ns["front_1"] for s in steps]
    assert len(steps) >= 175 and a.skipped == {}, a.last_skip
    assert np.all(np.diff(ref) == PERIOD), "a head-camera frame was recorded twice or skipped"
    assert [s.stamp_ns for s in steps] == ref
    for cam in CAMERAS:
        stamps = [s.image_stamps_ns[cam] for s in steps]
        assert np.all(np.diff(stamps) == PERIOD), cam
        c = counts[image_stream(cam)]
        assert c.dropped == 0 and c.duplicated == 0, (cam, c)
    assert steps[0].stamp_ns >= T0 + WARM_UP and set(steps[0].values) == set(numeric_keys())


@pytest.mark.parametrize("pose_first", [False, True])
def test_the_measured_pose_is_the_fk_of_the_recorded_joints(pose_first):
    """obs_ee_pose and obs_joints come from one joint_states sample, whichever arrives first."""
    a, steps = recorded(pose_first=pose_first)
    assert len(steps) > 150
    for s in steps:
        for arm in ARMS:
            np.testing.assert_array_equal(
                s.values[f"{arm.value}.obs_ee_pose"], fake_fk(s.values[f"{arm.value}.obs_joints"])
            )
            assert s.values[f"{arm.value}.obs_gripper"][0] == 0.25
    assert np.ptp([s.values["left.obs_joints"][0] for s in steps]) > 0.5, "the joints moved"
    assert a.counts()[obs_pose_stream(Arm.LEFT)].dropped == 0


@pytest.mark.parametrize("offset_ms", [-17.0, -15.0, 12.0, 15.0, 17.0])
@pytest.mark.parametrize("seconds", [7.0, 7.02])
@pytest.mark.parametrize("jitter_ms", [0.0, 4.0])
def test_a_wrist_camera_half_a_period_off_loses_nothing_at_either_end(offset_ms, seconds, jitter_ms):
    """Cameras on their own clocks may sit up to half a period from the head camera. At the
    episode's start the first frame of such a camera was taken in order from before the episode
    (then realigned: one frame lost in the middle); at its end the frame after the last head
    frame, which pairs with the next head frame, counted as lost (one in a 600 s bench)."""
    rng = np.random.default_rng(7)
    jitter = rng.uniform(-jitter_ms, jitter_ms, 400)
    a, steps = recorded(
        seconds=seconds,
        capture_offset_ms=lambda cam, k: (
            jitter[k] + (offset_ms if cam == "right_wrist" else 0.0) if cam != "left_wrist" else 0.0
        ),
    )
    counts = a.end()
    assert a.skipped == {} and len(steps) > 170
    for cam in CAMERAS:
        c = counts[image_stream(cam)]
        assert (c.dropped, c.duplicated) == (0, 0), (cam, c)
        assert np.all(np.diff([s.image_stamps_ns[cam] for s in steps]) > PERIOD // 2), cam


def test_a_late_head_frame_does_not_take_the_next_wrist_frame():
    """front_1 captured 20 ms late now and then: its nearest wrist frames are the next ones, which
    the next head frame needs. The frames are paired in order: none recorded twice or lost."""
    late = {40, 41, 90, 150}
    a, steps = recorded(capture_offset_ms=lambda cam, k: 20.0 if cam == "front_1" and k in late else 2.0)
    counts = a.end()
    for cam in ("left_wrist", "right_wrist"):
        stamps = [s.image_stamps_ns[cam] for s in steps]
        assert np.all(np.diff(stamps) == PERIOD), cam
        assert counts[image_stream(cam)].duplicated == 0 and counts[image_stream(cam)].dropped == 0


@pytest.mark.parametrize("delay_ms", [60.0, 150.0, 250.0])
def test_a_wrist_frame_that_arrives_late_is_recorded_once_not_replaced_by_its_predecessor(delay_ms):
    """A loaded machine delivers a camera frame up to ~200 ms after its capture stamp (the bench
    measured 186 ms). A step decided before it arrives would take the camera's previous frame
    again (recorded twice) and this one late or never: the step waits for it (hold_back_s)."""
    g = Graph(7.0, capture_offset_ms=lambda cam, k: 8.0 if cam == "right_wrist" else 0.0)
    late = {T0 + k * PERIOD + 8 * MS for k in (60, 61, 120, 180)}
    events, previous = [], 0
    for arrival, n, what in sorted(
        g.events, key=lambda e: (e[2][0] != "image", e[2][1:3] if e[2][0] == "image" else ())
    ):
        if what[0] == "image" and what[1] == "right_wrist":
            # one publisher's samples arrive in order: a frame held up holds up those behind it
            arrival = previous = max(arrival + (int(delay_ms * MS) if what[2] in late else 0), previous)
        events.append((arrival, n, what))
    g.events = events
    heapq.heapify(g.events)
    a = StepAssembler()
    g.run(a, T0 + WARM_UP - PERIOD)
    a.begin(T0 + WARM_UP)
    steps = g.run(a, T0 + 7_000 * MS)
    counts = a.end()
    stamps = [s.image_stamps_ns["right_wrist"] for s in steps]
    assert a.skipped == {} and np.all(np.diff(stamps) == PERIOD)
    assert counts[image_stream("right_wrist")].duplicated == 0 and counts[image_stream("right_wrist")].dropped == 0


def test_after_a_dropped_wrist_frame_the_pairing_realigns():
    """left_wrist captures 8 ms before front_1 and drops one frame: one step repeats its previous
    frame (counted), then every step is paired with the frame 8 ms before it again, not with the
    next one 25 ms after it."""
    a, steps = recorded(capture_offset_ms=lambda cam, k: -8.0 if cam == "left_wrist" else 0.0)
    b, steps_gap = recorded(
        capture_offset_ms=lambda cam, k: -8.0 if cam == "left_wrist" else 0.0, drop=("left_wrist", 100)
    )
    offsets = np.array([s.image_stamps_ns["left_wrist"] - s.stamp_ns for s in steps_gap]) / MS
    assert np.all(np.abs(offsets[-50:] + 8.0) < 1.0), "realigned after the gap"
    assert b.end()[image_stream("left_wrist")].duplicated <= 1 and a.end()[image_stream("left_wrist")].duplicated == 0


@pytest.mark.parametrize("offset_ms", [-2.0, 0.0, 2.0])
def test_a_wrist_camera_that_drops_one_frame_loses_no_other_cameras_frame(offset_ms):
    """A camera drops a frame when its host is late (the sim camera's pacer skips a deadline, a
    UVC camera with one buffer likewise). With the cameras a few ms apart both neighbours of the
    missing frame are a period away, past image_tolerance_s: the step used to be skipped and the
    other cameras' frames of that slot lost (a 600 s bench: 10 frames). The camera's previous
    frame stands in once, counted as recorded twice, and nothing received is lost."""
    a, steps = recorded(
        capture_offset_ms=lambda cam, k: offset_ms if cam == "left_wrist" else 0.0, drop=("left_wrist", 100)
    )
    counts = a.end()
    assert a.skipped == {}
    assert all(counts[image_stream(cam)].dropped == 0 for cam in CAMERAS), counts
    assert counts[image_stream("left_wrist")].duplicated == 1
    head = [s.image_stamps_ns["front_1"] for s in steps]
    assert np.all(np.diff(head) == PERIOD)


def test_a_head_camera_that_drops_one_frame_loses_no_wrist_frame():
    """The head camera paces the steps: when it drops a frame, the slot still gets its step, with
    the head's previous frame standing in (counted as recorded twice), so the wrist cameras'
    frames of that slot are recorded, not lost."""
    a, steps = recorded(drop=("front_1", 100))
    counts = a.end()
    assert a.skipped == {}
    assert all(counts[image_stream(cam)].dropped == 0 for cam in CAMERAS), counts
    assert counts[image_stream("front_1")].duplicated == 1
    for cam in ("left_wrist", "right_wrist"):
        assert np.all(np.diff([s.image_stamps_ns[cam] for s in steps]) == PERIOD), cam
    assert np.all(np.diff([s.stamp_ns for s in steps]) == PERIOD), "one step per slot of the 30 Hz grid"


def test_a_stalled_camera_skips_steps_naming_it_and_their_frames_count_as_dropped():
    g = Graph(6.0)
    a = StepAssembler()
    g.run(a, T0 + WARM_UP - PERIOD)
    a.begin(T0 + WARM_UP)
    stall = (T0 + 2_000 * MS, T0 + 2_500 * MS)
    steps = g.run(
        a, T0 + 6_000 * MS, skip=lambda w: w[0] == "image" and w[1] == "left_wrist" and stall[0] <= w[2] < stall[1]
    )
    counts = a.end()
    assert 12 <= a.skipped[image_stream("left_wrist")] <= 16 and set(a.skipped) == {image_stream("left_wrist")}
    assert "left_wrist" in a.last_skip and "tolerance" in a.last_skip
    tolerance = a.config.image_tolerance_s * 1e9
    # the stall's first slot is taken as one dropped frame: the previous frame stands in, once
    bridged = [s for s in steps if abs(s.image_stamps_ns["left_wrist"] - s.stamp_ns) > tolerance]
    assert len(bridged) <= 1 and counts[image_stream("left_wrist")].duplicated == len(bridged)
    assert all(s.stamp_ns - s.image_stamps_ns["left_wrist"] <= tolerance + PERIOD for s in bridged)
    assert len([s for s in steps if stall[0] <= s.stamp_ns < stall[1]]) <= 2, "only at the stall's edges"
    assert 12 <= counts[image_stream("front_1")].dropped <= 16, "the head frames of the skipped steps"
    assert counts[image_stream("left_wrist")].max_gap_ms > 500


def test_a_silent_head_camera_is_counted_per_tick():
    g = Graph(3.0)
    a = StepAssembler()
    a.begin(T0)
    g.run(a, T0 + 3_000 * MS, skip=lambda w: w[0] == "image" and w[1] == "front_1" and w[2] > T0 + 1_000 * MS)
    assert a.skipped[image_stream("front_1")] >= 50 and "front_1: no frame for" in a.last_skip


def test_waiting_for_names_what_is_missing():
    a = StepAssembler()
    assert a.waiting_for(T0) == "images.front_1: no sample yet"
    g = Graph(1.0)
    g.run(a, T0 + 1_000 * MS, skip=lambda w: w[0] in ("command", "command_joints"))
    assert a.waiting_for(T0 + 1_000 * MS) == f"{CMD_POSE_STREAM}: no sample yet"
    assert "newest sample" in a.waiting_for(T0 + 2_000 * MS), "a stream gone quiet is stale"

    b = StepAssembler()
    Graph(1.0).run(b, T0 + 1_000 * MS, skip=lambda w: w[0] == "joints" and w[1] is Arm.RIGHT)
    assert b.waiting_for(T0 + 1_000 * MS) == "right.obs_joints: no sample yet"
    c = StepAssembler()
    Graph(1.0).run(c, T0 + 1_000 * MS, skip=lambda w: w[0] == "pose" and w[1] is Arm.RIGHT)
    for k in range(20):  # poses whose stamps match no joint sample: a wiring or stamping fault
        c.pose(Arm.RIGHT, T0 + 800 * MS + k * 10 * MS + 1, np.zeros(7), T0)
    assert c.waiting_for(T0 + 1_000 * MS).startswith("right arm state: no ee_pose_dataset sample matches")


def test_out_of_order_and_unpaired_samples_are_dropped_and_counted():
    a = StepAssembler()
    a.begin(0)
    a.command_joints(Arm.LEFT, 100, np.zeros(6), 100)
    a.command_joints(Arm.LEFT, 50, np.zeros(6), 100)  # older than one held
    for k in range(12):
        a.pose(Arm.LEFT, 1000 + k, np.zeros(7), 2000)  # never a joint sample with these stamps
    counts = a.end()
    assert counts[cmd_joints_stream(Arm.LEFT)].dropped == 1 and counts[cmd_joints_stream(Arm.LEFT)].received == 2
    assert counts[obs_pose_stream(Arm.LEFT)].dropped == 4, "evicted after POSE_HISTORY waiting poses"
    assert counts[cmd_joints_stream(Arm.LEFT)].latency_max_ms == pytest.approx(50 / 1e6)


def test_a_slow_command_stream_shows_as_duplicated():
    a, steps = recorded(command_hz=15.0)
    counts = a.end()
    assert len(steps) > 150
    assert 0.4 < counts[CMD_POSE_STREAM].duplicated / len(steps) < 0.6


def test_nothing_before_begin_is_recorded_or_counted():
    g = Graph(2.0)
    a = StepAssembler()
    assert g.run(a, T0 + 1_000 * MS) == [], "not recording: no steps"
    a.begin(T0 + 1_000 * MS)
    steps = g.run(a, T0 + 2_000 * MS)
    counts = a.end()
    assert steps and min(s.stamp_ns for s in steps) >= T0 + 1_000 * MS
    assert counts[image_stream("front_1")].received <= 31 and counts[image_stream("front_1")].dropped == 0


def test_config_refusals_name_the_field():
    with pytest.raises(RecordingConfigError, match="reference_camera"):
        AssemblyConfig(reference_camera="rear")
    with pytest.raises(RecordingConfigError, match="hold_back_s"):
        AssemblyConfig(hold_back_s=-1.0)
    with pytest.raises(RecordingConfigError, match="fps"):
        AssemblyConfig(fps=float("inf"))


def test_a_frame_whose_step_was_skipped_never_stands_in_for_a_dropped_one():
    """A fresh-clone run's episode began: the head frame A's step was skipped (a wrist frame 41 ms
    off), the head then dropped frame B, and A stood in for B's slot: recorded once, 43 ms from its
    step and not counted as a duplicate. Only a frame the episode recorded may stand in."""
    late = T0 + WARM_UP + 5 * PERIOD  # head frame A: left_wrist drops this frame and the one before
    g = Graph(3.0)
    a = StepAssembler()

    def skip(w):
        return w[0] == "image" and (
            (w[1] == "left_wrist" and -PERIOD - 20 * MS < w[2] - late < 20 * MS)
            or (w[1] == "front_1" and abs(w[2] - (late + PERIOD)) < 20 * MS)
        )

    g.run(a, T0 + WARM_UP - PERIOD, skip=skip)
    a.begin(T0 + WARM_UP)
    steps = g.run(a, T0 + 3_000 * MS, skip=skip)
    counts = a.end()
    tolerance = a.config.image_tolerance_s * 1e9
    for cam in CAMERAS:
        stamps = np.array([s.image_stamps_ns[cam] for s in steps])
        reused = np.concatenate([[False], np.diff(stamps) == 0])
        off = np.abs(stamps - np.array([s.stamp_ns for s in steps]))
        assert np.all(off[~reused] <= tolerance), cam
        assert counts[image_stream(cam)].duplicated == int(reused.sum()), cam
    assert all(abs(s.image_stamps_ns["front_1"] - late) > 20 * MS for s in steps), "A's step was skipped"
