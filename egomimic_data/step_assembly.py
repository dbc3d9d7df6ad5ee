"""Episode steps from the samples of every input stream, one step per head-camera frame.

Streams, named by the episode keys they fill (docs/eva.md "Episodes"):
  images.<cam>        an RGB frame and its capture stamp, per camera
  <arm>.obs_joints    measured joints and gripper (the driver's joint_states, 100 Hz)
  <arm>.obs_ee_pose   measured EE pose, dataset frame (ee_pose_dataset: FK of one joint_states
                      sample in three, with that sample's stamp)
  cmd_ee_pose         commanded EE poses and grippers of both arms, dataset frame (policy/action)
  <arm>.cmd_joints    commanded joints (the safety gate's joint_command)

Pacing: one step per frame of `reference_camera` (the head camera), stamped with its capture
time; the caller looks at the control rate (`assemble(now_ns)` from a 30 Hz timer). Why not a
step per tick taking the newest frame: the camera and the recorder each run at 30 Hz on their own
clocks, and wherever a frame's arrival jitters across a tick, "the newest frame" is recorded
twice and its successor never. Paced by the frames, each frame is recorded once whatever the
phase; the tick only decides when to look. A frame waits until every other stream has a sample
at or after its stamp, or `hold_back_s` at most, so nothing is chosen before its neighbours
arrived.

Each other stream contributes its sample nearest the frame's capture stamp (another camera's
frames are taken in order, one to one: StepAssembler._pick_frame says why); one further away than
its tolerance (`image_tolerance_s`, `state_tolerance_s`, `command_tolerance_s`) makes the step
skipped, counted under that stream, with the reason in `last_skip`. A step is never built from a
stream that is not live, and never half-built. One dropped camera frame (a late host: the
synthetic camera's pacer skips a deadline, a UVC camera with one buffer likewise) is bridged with
that camera's previous frame, counted as recorded twice, so that the other cameras' frames of its
slot are recorded rather than lost; a dropped head frame gets its slot's step the same way. Only
a frame the episode recorded stands in (a previous frame whose own step was skipped, or one from
before the episode, would be recorded once, a period away from its step). Two or more missing in
a row is a stalled camera: those steps are skipped.

The measured pose and joints of a step are one measurement: the driver stamps a tick's
joint_states and the FK pose of those joints alike, so a pose is paired with the joint sample of
exactly its stamp and the pair is one `obs` sample. Hence the recorded obs_ee_pose is the FK of the
recorded obs_joints (through the dataset rotation M), not of a neighbouring sample 10 ms away.

Counts per stream follow recording_stats. The assembler reads no clock (stamps and `now_ns` are
arguments) and is used from one thread.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from egomimic_data.recording_config import RecordingConfigError, check_ranges
from egomimic_data.recording_stats import StreamCounts, StreamStats
from egomimic_hw.description import ARMS, CAMERAS, CONTROL_RATE_HZ, JOINTS_PER_ARM, Arm

NS = 1_000_000_000
POSE_WIDTH = 7
"""[x, y, z, qw, qx, qy, qz]"""
JOINT_HISTORY = 32
"""joint_states kept for pairing: 320 ms at 100 Hz, far more than a pose's extra hop takes."""
POSE_HISTORY = 8
"""Poses waiting for their joint sample."""
SAMPLE_RATE_MAX_HZ = 40.0
"""Arm states (33 Hz: a pose every third joint_states tick) and commands (30 Hz) come at most
this fast: their histories hold hold_back_s of them, plus SAMPLE_HISTORY_EXTRA."""
SAMPLE_HISTORY_EXTRA = 4
IMAGE_HISTORY_EXTRA = 3
"""Frames kept beyond those a hold-back can pin (the tick's own period and jitter)."""


def image_stream(cam: str) -> str:
    return f"images.{cam}"


def obs_joints_stream(arm: Arm | str) -> str:
    return f"{Arm(arm).value}.obs_joints"


def obs_pose_stream(arm: Arm | str) -> str:
    return f"{Arm(arm).value}.obs_ee_pose"


CMD_POSE_STREAM = "cmd_ee_pose"


def cmd_joints_stream(arm: Arm | str) -> str:
    return f"{Arm(arm).value}.cmd_joints"


def _meta(help_: str, lo: float, hi: float) -> dict:
    return {"help": help_, "range": (lo, hi)}


@dataclass(frozen=True)
class AssemblyConfig:
    """How steps are assembled (the recorder node's `sync.*` parameters)."""

    fps: float = field(
        default=CONTROL_RATE_HZ,
        metadata=_meta("steps per second: the control rate, at which the reference camera runs", 1.0, 1000.0),
    )
    cameras: tuple[str, ...] = CAMERAS
    reference_camera: str = field(
        default=CAMERAS[0],
        metadata={"help": "the camera whose frames pace the steps (one step per frame; the head camera)"},
    )
    image_tolerance_s: float = field(
        default=0.03,
        metadata=_meta(
            "another camera's frame must be this close to the reference frame: half a period (16.7 ms, the "
            "most two unsynchronized 30 Hz cameras are apart) plus capture jitter (a loaded machine delays "
            "renders and USB reads by 10 ms and more); a stalled camera is then skipped after one period",
            0.0,
            1.0,
        ),
    )
    state_tolerance_s: float = field(
        default=0.05,
        metadata=_meta(
            "the measured arm state (a pose with its joint sample) must be this close to the frame", 0.0, 1.0
        ),
    )
    command_tolerance_s: float = field(
        default=0.1,
        metadata=_meta("the commands (policy/action, joint_command) must be this close to the frame", 0.0, 5.0),
    )
    hold_back_s: float = field(
        default=0.5,
        metadata=_meta(
            "a frame waits at most this long for every other stream to reach its stamp before its step is decided "
            "(on a loaded machine a camera frame reaches the recorder up to ~200 ms after its capture stamp: a step "
            "decided before it would record the camera's previous frame twice and this one late or never)",
            0.0,
            2.0,
        ),
    )
    stale_after_s: float = field(
        default=0.25,
        metadata=_meta(
            "a stream whose newest sample is older than this is not live (start refused, steps skipped)", 0.01, 10.0
        ),
    )

    def __post_init__(self) -> None:
        if not self.cameras or len(set(self.cameras)) != len(self.cameras):
            raise RecordingConfigError(f"cameras must be unique names, got {self.cameras}")
        if self.reference_camera not in self.cameras:
            raise RecordingConfigError(f"reference_camera {self.reference_camera!r} is not one of {list(self.cameras)}")
        check_ranges(self)


@dataclass(frozen=True)
class Sample:
    stamp_ns: int
    value: Any


class _History:
    """Recent samples of one stream, stamps strictly increasing, at most `depth`."""

    def __init__(self, depth: int):
        self.depth = depth
        self._items: deque[Sample] = deque()

    def offer(self, stamp_ns: int, value: Any) -> tuple[bool, Sample | None]:
        """(accepted, the sample evicted to make room). A stamp not newer than the newest held
        is refused: out of order, or the same sample again."""
        if self._items and stamp_ns <= self._items[-1].stamp_ns:
            return False, None
        self._items.append(Sample(stamp_ns, value))
        return True, self._items.popleft() if len(self._items) > self.depth else None

    @property
    def newest(self) -> Sample | None:
        return self._items[-1] if self._items else None

    def nearest(self, stamp_ns: int) -> Sample | None:
        return min(self._items, key=lambda s: abs(s.stamp_ns - stamp_ns), default=None)

    def reaches(self, stamp_ns: int) -> bool:
        return bool(self._items) and self._items[-1].stamp_ns >= stamp_ns

    def __iter__(self) -> Iterator[Sample]:
        return iter(self._items)

    def clear(self) -> None:
        self._items.clear()


@dataclass(frozen=True)
class ArmObservation:
    """One measurement of one arm: the joints and gripper of a joint_states sample and the FK
    pose the driver computed from those joints (same stamp)."""

    pose_ds: np.ndarray
    joints_rad: np.ndarray
    gripper_norm: float


class _Pairer:
    """Pairs an arm's poses with its joint samples of the same stamp (either may come first)."""

    def __init__(self) -> None:
        self._joints: dict[int, tuple[np.ndarray, float]] = {}
        self._joint_order: deque[int] = deque()
        self._poses: dict[int, np.ndarray] = {}
        self._pose_order: deque[int] = deque()

    def joints(self, stamp_ns: int, joints: np.ndarray, gripper: float) -> tuple[ArmObservation | None, int]:
        """(the pair completed by this sample, poses given up as unpairable meanwhile)."""
        pose = self._poses.pop(stamp_ns, None)
        if pose is not None:
            return ArmObservation(pose, joints, gripper), 0
        self._joints[stamp_ns] = (joints, gripper)
        self._joint_order.append(stamp_ns)
        while len(self._joint_order) > JOINT_HISTORY:
            self._joints.pop(self._joint_order.popleft(), None)
        return None, 0

    def pose(self, stamp_ns: int, pose: np.ndarray) -> tuple[ArmObservation | None, int]:
        found = self._joints.get(stamp_ns)
        if found is not None:
            return ArmObservation(pose, found[0], found[1]), 0
        self._poses[stamp_ns] = pose
        self._pose_order.append(stamp_ns)
        unpaired = 0
        while len(self._pose_order) > POSE_HISTORY:
            if self._poses.pop(self._pose_order.popleft(), None) is not None:
                unpaired += 1
        return None, unpaired

    def clear(self) -> None:
        self._joints.clear()
        self._joint_order.clear()
        self._poses.clear()
        self._pose_order.clear()


@dataclass(frozen=True)
class Step:
    """One step, ready for EpisodeWriter.add: `values` has every key of numeric_keys()."""

    stamp_ns: int
    images: dict[str, np.ndarray]
    image_stamps_ns: dict[str, int]
    values: dict[str, np.ndarray]


class StepAssembler:
    """Feed it every sample (`image`, `joints`, `pose`, `command`, `command_joints`); between
    `begin()` and `end()` each `assemble(now_ns)` returns the steps that became decidable."""

    def __init__(self, config: AssemblyConfig | None = None):
        self.config = config or AssemblyConfig()
        c = self.config
        self._period_ns = int(round(NS / c.fps))
        image_depth = math.ceil(c.hold_back_s * c.fps) + IMAGE_HISTORY_EXTRA + 1
        self._images = {cam: _History(image_depth) for cam in c.cameras}
        # A step waits up to hold_back_s for a late frame; the states and commands near its stamp
        # must still be held then (12 samples, 0.36 s, were not: a stalled camera's first step
        # was skipped for want of an arm state instead of being recorded).
        sample_depth = math.ceil(c.hold_back_s * SAMPLE_RATE_MAX_HZ) + SAMPLE_HISTORY_EXTRA
        self._obs = {arm: _History(sample_depth) for arm in ARMS}
        self._pairers = {arm: _Pairer() for arm in ARMS}
        self._cmd_pose = _History(sample_depth)
        self._cmd_joints = {arm: _History(sample_depth) for arm in ARMS}
        self.streams: tuple[str, ...] = (
            *(image_stream(cam) for cam in c.cameras),
            *(s for arm in ARMS for s in (obs_joints_stream(arm), obs_pose_stream(arm))),
            CMD_POSE_STREAM,
            *(cmd_joints_stream(arm) for arm in ARMS),
        )
        self.stats = {name: StreamStats() for name in self.streams}
        self._newest_raw_ns: dict[str, int] = {}
        """Newest stamp seen per stream, paired or not (liveness says which half is missing)."""
        self.active = False
        self._start_ns = 0
        self._decided_ns = -1
        """Stamp of the newest reference frame whose step was decided (written or skipped)."""
        self._last_ref: Sample | None = None
        """The newest reference frame decided in this episode (a dropped one is bridged with it)."""
        self._used: dict[str, set[int]] = {cam: set() for cam in c.cameras}
        self._last_used: dict[str, int] = {}
        self._first_used: dict[str, int] = {}
        """Each camera's first frame a step of this episode carries: its older frames belong to
        reference frames before the episode (or to steps skipped at its start), not to it."""
        self.steps = 0
        self.skipped: Counter[str] = Counter()
        """Steps not built, by the stream that prevented them."""
        self.unrecorded = 0
        """Steps built that the writer did not take (its queue was full)."""
        self.last_skip = ""

    # ------------------------------------------------------------------ inputs
    def _seen(self, stream: str, stamp_ns: int, received_ns: int) -> None:
        self._newest_raw_ns[stream] = max(stamp_ns, self._newest_raw_ns.get(stream, stamp_ns))
        if self.active:
            self.stats[stream].sample(stamp_ns, received_ns)

    def _drop(self, stream: str, n: int = 1) -> None:
        if self.active and n:
            self.stats[stream].dropped += n

    def image(self, cam: str, stamp_ns: int, rgb: np.ndarray, received_ns: int) -> None:
        stream = image_stream(cam)
        self._seen(stream, stamp_ns, received_ns)
        accepted, evicted = self._images[cam].offer(stamp_ns, rgb)
        if not accepted:
            self._drop(stream)
        if evicted is not None:
            used = self._used[cam]
            if evicted.stamp_ns in used:
                used.discard(evicted.stamp_ns)
            elif self._counts_as_dropped(stream, evicted.stamp_ns):
                self._drop(stream)

    def _counts_as_dropped(self, stream: str, stamp_ns: int) -> bool:
        """A frame that no step carries although a step after it carries its camera's newer one
        (passed over). One older than its camera's first recorded frame belongs to a reference
        frame from before the episode (or to a step skipped at its start, counted as skipped)."""
        first = self._first_used.get(stream)
        return self.active and first is not None and stamp_ns > first

    def joints(
        self, arm: Arm | str, stamp_ns: int, joints_rad: np.ndarray, gripper_norm: float, received_ns: int
    ) -> None:
        arm = Arm(arm)
        self._seen(obs_joints_stream(arm), stamp_ns, received_ns)
        pair, unpaired = self._pairers[arm].joints(
            stamp_ns, np.asarray(joints_rad, float)[:JOINTS_PER_ARM], float(gripper_norm)
        )
        self._drop(obs_pose_stream(arm), unpaired)
        if pair is not None:
            self._observe(arm, stamp_ns, pair)

    def pose(self, arm: Arm | str, stamp_ns: int, pose_ds: np.ndarray, received_ns: int) -> None:
        arm = Arm(arm)
        self._seen(obs_pose_stream(arm), stamp_ns, received_ns)
        pair, unpaired = self._pairers[arm].pose(stamp_ns, np.asarray(pose_ds, float)[:POSE_WIDTH])
        self._drop(obs_pose_stream(arm), unpaired)
        if pair is not None:
            self._observe(arm, stamp_ns, pair)

    def _observe(self, arm: Arm, stamp_ns: int, pair: ArmObservation) -> None:
        accepted, _ = self._obs[arm].offer(stamp_ns, pair)
        if not accepted:
            self._drop(obs_pose_stream(arm))

    def command(
        self, stamp_ns: int, poses_ds: Mapping[Arm, np.ndarray], grippers_norm: Mapping[Arm, float], received_ns: int
    ) -> None:
        """One bimanual command (both arms' poses and grippers, dataset frame)."""
        self._seen(CMD_POSE_STREAM, stamp_ns, received_ns)
        value = {Arm(a): (np.asarray(poses_ds[a], float)[:POSE_WIDTH], float(grippers_norm[a])) for a in poses_ds}
        if set(value) != set(ARMS):
            raise KeyError(f"a command needs both arms' poses and grippers, got {sorted(a.value for a in value)}")
        accepted, _ = self._cmd_pose.offer(stamp_ns, value)
        if not accepted:
            self._drop(CMD_POSE_STREAM)

    def command_joints(self, arm: Arm | str, stamp_ns: int, joints_rad: np.ndarray, received_ns: int) -> None:
        arm = Arm(arm)
        stream = cmd_joints_stream(arm)
        self._seen(stream, stamp_ns, received_ns)
        accepted, _ = self._cmd_joints[arm].offer(stamp_ns, np.asarray(joints_rad, float)[:JOINTS_PER_ARM])
        if not accepted:
            self._drop(stream)

    def reject(self, stream: str, why: str) -> None:
        """A sample that could not be read (wrong encoding or size, too few joints): dropped."""
        if stream not in self.stats:
            raise KeyError(f"unknown stream {stream!r}; streams: {list(self.streams)}")
        self._drop(stream)
        self.last_skip = f"{stream}: sample refused: {why}"

    # ------------------------------------------------------------ the episode
    def begin(self, start_ns: int) -> None:
        """Open an episode: steps from reference frames captured at or after `start_ns`."""
        for s in self.stats.values():
            s.reset()
        for used in self._used.values():
            used.clear()
        self._last_used.clear()
        self._first_used.clear()
        self.steps = self.unrecorded = 0
        self.skipped.clear()
        self.last_skip = ""
        self._start_ns = int(start_ns)
        self._last_ref = None
        self._decided_ns = max(self._decided_ns, self._start_ns - 1)
        self.active = True

    def end(self) -> dict[str, StreamCounts]:
        """Close the episode; frames that no step carries count as dropped: those between the
        first and the newest frame of their camera that steps carry (passed over), and after the
        newest one per reference frame decided at the end whose step was not recorded (skipped
        or not taken by the writer). A camera's frame newer than that belongs to a step after the
        end: frames are paired in order (_pick_frame), so a wrist camera capturing 17 ms before
        the head camera gives the last head frame the wrist frame before it, and the one 16 ms
        after it is the next head frame's, not a loss (a 600 s bench counted one such)."""
        if self.active and self._last_ref is not None:  # a reference frame was decided
            span_end = self._decided_ns + self._period_ns // 2
            last_ref = self._last_used.get(image_stream(self.config.reference_camera), -1)
            owed = sum(
                1 for s in self._images[self.config.reference_camera] if last_ref < s.stamp_ns <= self._decided_ns
            )
            for cam, history in self._images.items():
                last = self._last_used.get(image_stream(cam), -1)
                unused = [
                    s.stamp_ns
                    for s in history
                    if self._counts_as_dropped(image_stream(cam), s.stamp_ns)
                    and s.stamp_ns <= span_end
                    and s.stamp_ns not in self._used[cam]
                ]
                passed_over = sum(1 for t in unused if t < last)
                self.stats[image_stream(cam)].dropped += passed_over + min(len(unused) - passed_over, owed)
        counts = self.counts()
        self.active = False
        return counts

    def unrecorded_step(self, step: Step) -> None:
        """The writer did not take `step` (queue full): its frames count as dropped (when they
        leave the history, or at end(), as every frame no step carries)."""
        self.unrecorded += 1
        for cam in step.images:
            self._used[cam].discard(step.image_stamps_ns[cam])

    def frame_size(self, cam: str) -> tuple[int, int] | None:
        """(height, width) of the newest frame of `cam`, None before the first."""
        newest = self._images[cam].newest
        return None if newest is None else (int(newest.value.shape[0]), int(newest.value.shape[1]))

    def counts(self) -> dict[str, StreamCounts]:
        return {name: s.counts() for name, s in self.stats.items()}

    def waiting_for(self, now_ns: int) -> str:
        """'' when every stream is live at `now_ns`; else what is missing, one line."""
        limit = int(self.config.stale_after_s * NS)
        checks: list[tuple[str, Sample | None]] = [
            (image_stream(cam), self._images[cam].newest) for cam in self.config.cameras
        ]
        for arm in ARMS:
            checks.append((f"{arm.value} arm state", self._obs[arm].newest))
        checks.append((CMD_POSE_STREAM, self._cmd_pose.newest))
        checks += [(cmd_joints_stream(arm), self._cmd_joints[arm].newest) for arm in ARMS]
        for name, newest in checks:
            if newest is None:
                return self._never(name)
            age = now_ns - newest.stamp_ns
            if age > limit:
                return f"{name}: newest sample {age / 1e6:.0f} ms old (stale after {limit / 1e6:.0f} ms)"
        return ""

    def _never(self, name: str) -> str:
        if not name.endswith(" arm state"):
            return f"{name}: no sample yet"
        arm = name.split(" ", 1)[0]
        have = [s for s in (obs_joints_stream(arm), obs_pose_stream(arm)) if s in self._newest_raw_ns]
        if len(have) == 2:
            return f"{arm} arm state: no ee_pose_dataset sample matches the stamp of a joint_states sample"
        missing = {obs_joints_stream(arm), obs_pose_stream(arm)} - set(have)
        return f"{', '.join(sorted(missing))}: no sample yet"

    def assemble(self, now_ns: int) -> list[Step]:
        """The steps decidable at `now_ns`, oldest first (call it at the control rate)."""
        ref = self._images[self.config.reference_camera]
        pending = [s for s in ref if s.stamp_ns > self._decided_ns]
        if not self.active:
            if pending:
                self._decided_ns = pending[-1].stamp_ns
            return []
        steps: list[Step] = []
        hold_ns = int(self.config.hold_back_s * NS)
        for frame in pending:
            if now_ns - frame.stamp_ns < hold_ns and not self._neighbours_arrived(frame.stamp_ns):
                break
            self._decided_ns = frame.stamp_ns
            bridged = self._bridge_dropped_reference(frame)
            if bridged is not None:
                steps.append(bridged)
            step = self._step(frame)
            if step is not None:
                steps.append(step)
            self._last_ref = frame
        if not pending:
            newest = ref.newest
            limit = int(self.config.stale_after_s * NS)
            if newest is None or now_ns - newest.stamp_ns > limit:
                stream = image_stream(self.config.reference_camera)
                age = "no frame yet" if newest is None else f"no frame for {(now_ns - newest.stamp_ns) / 1e6:.0f} ms"
                self._skip(stream, f"{stream}: {age}")
        return steps

    def _bridge_dropped_reference(self, frame: Sample) -> Step | None:
        """The step of a slot whose reference frame the camera dropped (its host was late: the
        synthetic camera's pacer skips a deadline, a UVC camera with one buffer likewise): the
        previous reference frame stands in (counted as recorded twice), so the other cameras'
        frames of that slot are recorded, not lost. One missing frame only: a longer gap is a
        stalled camera, whose slots stay unrecorded."""
        prev = self._last_ref
        if prev is None or self._last_used.get(image_stream(self.config.reference_camera)) != prev.stamp_ns:
            return None  # only a frame this episode recorded stands in (recorded twice, never shifted)
        gap = frame.stamp_ns - prev.stamp_ns
        tolerance_ns = int(self.config.image_tolerance_s * NS)
        if not self._period_ns + tolerance_ns < gap <= 2 * self._period_ns + tolerance_ns:
            return None  # the next frame (captured late or early within the tolerance), or a stall
        return self._step(prev, at_ns=prev.stamp_ns + gap // 2)

    def _neighbours_arrived(self, stamp_ns: int) -> bool:
        histories: list[_History] = [h for cam, h in self._images.items() if cam != self.config.reference_camera]
        histories += [*self._obs.values(), self._cmd_pose, *self._cmd_joints.values()]
        return all(h.reaches(stamp_ns) for h in histories)

    def _skip(self, stream: str, why: str) -> None:
        self.skipped[stream] += 1
        self.last_skip = why

    def _pick(self, stream: str, history: _History, stamp_ns: int, tolerance_s: float) -> Sample | None:
        sample = history.nearest(stamp_ns)
        ref = self.config.reference_camera
        if sample is None:
            self._skip(stream, f"{stream}: no sample yet")
            return None
        offset_ms = (sample.stamp_ns - stamp_ns) / 1e6
        if abs(offset_ms) > tolerance_s * 1e3:
            self._skip(
                stream,
                f"{stream}: nearest sample {offset_ms:+.0f} ms from the {ref} frame (tolerance {tolerance_s * 1e3:.0f} ms)",
            )
            return None
        return sample

    def _pick_frame(self, cam: str, stamp_ns: int) -> Sample | None:
        """Another camera's frame for the reference frame at `stamp_ns`: the oldest one not yet
        recorded (newer than this camera's last recorded frame) within tolerance, unless it is
        more than half a period further from `stamp_ns` than the nearest frame. Why not simply
        the nearest: a reference frame captured late (a loaded machine delays a render or a USB
        read by 20 ms) is nearer to the other camera's next frame, which the next reference frame
        then takes again: one frame recorded twice, its predecessor never. Taking frames in order
        keeps the pairing one to one; the half-period escape realigns after a camera dropped a
        frame (one frame recorded twice) instead of pairing every later frame one period late."""
        stream, history = image_stream(cam), self._images[cam]
        tolerance_ns = int(self.config.image_tolerance_s * NS)
        nearest = history.nearest(stamp_ns)
        if nearest is not None and abs(nearest.stamp_ns - stamp_ns) > tolerance_ns:
            # The camera dropped this slot's frame: its previous one stands in (counted as
            # recorded twice) when it is at most one period further than the tolerance, i.e.
            # one frame is missing; else the camera is stalled and the step is skipped.
            # Only the frame this episode recorded last stands in: one it never recorded (its step
            # was skipped) would be recorded once, a period or more away from its step.
            before = [s for s in history if s.stamp_ns <= stamp_ns]
            if (
                before
                and stamp_ns - before[-1].stamp_ns <= tolerance_ns + self._period_ns
                and self._last_used.get(stream) == before[-1].stamp_ns
            ):
                return before[-1]
        nearest = self._pick(stream, history, stamp_ns, self.config.image_tolerance_s)
        if nearest is None:
            return None
        last = self._last_used.get(stream)
        if last is None:  # the episode's first frame of this camera: the nearest, no order yet
            return nearest
        in_order = next((s for s in history if s.stamp_ns > last and abs(s.stamp_ns - stamp_ns) <= tolerance_ns), None)
        if (
            in_order is not None
            and abs(in_order.stamp_ns - stamp_ns) <= abs(nearest.stamp_ns - stamp_ns) + self._period_ns // 2
        ):
            return in_order
        return nearest

    def _step(self, frame: Sample, at_ns: int | None = None) -> Step | None:
        """The step of reference `frame`, stamped `at_ns` (default: the frame's capture stamp;
        a bridged slot's own stamp when the frame stands in for a dropped one)."""
        c, t = self.config, frame.stamp_ns if at_ns is None else at_ns
        chosen: dict[str, Sample] = {image_stream(c.reference_camera): frame}
        for cam in c.cameras:
            if cam != c.reference_camera:
                s = self._pick_frame(cam, t)
                if s is None:
                    return None
                chosen[image_stream(cam)] = s
        for arm in ARMS:
            s = self._pick(obs_pose_stream(arm), self._obs[arm], t, c.state_tolerance_s)
            if s is None:
                return None
            chosen[obs_pose_stream(arm)] = s
        s = self._pick(CMD_POSE_STREAM, self._cmd_pose, t, c.command_tolerance_s)
        if s is None:
            return None
        chosen[CMD_POSE_STREAM] = s
        for arm in ARMS:
            s = self._pick(cmd_joints_stream(arm), self._cmd_joints[arm], t, c.command_tolerance_s)
            if s is None:
                return None
            chosen[cmd_joints_stream(arm)] = s
        for stream, sample in chosen.items():
            if self._last_used.get(stream) == sample.stamp_ns:
                self.stats[stream].duplicated += 1
            self._last_used[stream] = sample.stamp_ns
            self._first_used.setdefault(stream, sample.stamp_ns)
        for cam in c.cameras:
            self._used[cam].add(chosen[image_stream(cam)].stamp_ns)
        values: dict[str, np.ndarray] = {}
        commands = chosen[CMD_POSE_STREAM].value
        for arm in ARMS:
            obs: ArmObservation = chosen[obs_pose_stream(arm)].value
            pose_cmd, gripper_cmd = commands[arm]
            a = arm.value
            values[f"{a}.obs_ee_pose"] = obs.pose_ds
            values[f"{a}.obs_joints"] = obs.joints_rad
            values[f"{a}.obs_gripper"] = np.array([obs.gripper_norm])
            values[f"{a}.cmd_ee_pose"] = pose_cmd
            values[f"{a}.cmd_joints"] = chosen[cmd_joints_stream(arm)].value
            values[f"{a}.cmd_gripper"] = np.array([gripper_cmd])
        self.steps += 1
        return Step(
            stamp_ns=t,
            images={cam: chosen[image_stream(cam)].value for cam in c.cameras},
            image_stamps_ns={cam: chosen[image_stream(cam)].stamp_ns for cam in c.cameras},
            values=values,
        )
