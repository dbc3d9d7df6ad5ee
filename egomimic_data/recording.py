"""Recording episodes without ever holding up the caller: a bounded queue and a writer thread
around EpisodeWriter, disk-space checks, and a clean stop that says why.

The caller (the recorder node's 30 Hz tick) hands over whole steps with `submit()`, which never
blocks: a full queue refuses the step and counts it. The writer thread owns the EpisodeWriter:
it JPEG-encodes and buffers each step and writes a block every `block_steps` (1 s) behind the
episode's commit marker (`frames_committed`), so a crash or a SIGKILL loses at most the block
being filled (episode_format.py). A slow disk fills the queue (`queue_steps`, 2 s); it never
delays the tick.

Disk space: `start()` refuses when the episode's directory has less than `min_free_mb` free,
and the writer thread checks again every `disk_check_period_s` while recording. Below the
minimum it stops writing, and the caller, which sees `halt_reason`, ends the episode: the
committed data stay intact, and the margin (1 GiB by default, minutes of 3-camera recording)
absorbs the queue and the block in flight. A write that fails anyway (disk full, I/O error)
ends the episode the same way, as "partial".

Outcomes: `stop()` closes the episode ("complete" when asked for, "partial" after a halt) and
adds the `recording_stats` attribute (per-stream counts, recording_stats.py; why it stopped).
States: IDLE (nothing open), RECORDING, ERROR (the last start was refused or the last episode
ended on a fault: `detail` says which and what to do; the next successful start clears it).
Nothing here reads a ROS clock; `free_bytes` and `monotonic` are injectable for tests.
"""

from __future__ import annotations

import enum
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zarr

from egomimic_data.episode_format import EpisodeError, EpisodeMeta, EpisodeWriteError, EpisodeWriter, episode_name
from egomimic_data.recording_config import RecorderConfig
from egomimic_data.step_assembly import Step

MB = 1_000_000
STATS_ATTRIBUTE = "recording_stats"
"""The episode attribute that carries the per-stream counts and the stop reason."""


class RecorderError(EpisodeError):
    """An episode could not be started (disk space, record_dir, already recording); the message
    says what to change."""


class RecorderState(enum.IntEnum):
    """The values of egomimic_msgs/RecorderStatus's constants (a unit test keeps them equal)."""

    IDLE = 0
    RECORDING = 1
    ERROR = 2


@dataclass(frozen=True)
class RecorderStatus:
    """A snapshot for recorder/status and /diagnostics."""

    state: RecorderState
    episode_path: str
    """The open episode, else the last one ('' before the first)."""
    frames: int
    """Steps the writer accepted into the episode (committed or buffered)."""
    frames_committed: int
    """Steps behind the commit marker (whole blocks while recording; all of them once closed)."""
    queue_dropped: int
    refused: int
    """Steps the writer refused (a non-finite value, a wrong image size): counted, not written."""
    detail: str
    free_mb: float


@dataclass(frozen=True)
class EpisodeResult:
    path: Path
    frames: int
    """Steps behind the commit marker: what a reader gets."""
    data_status: str
    detail: str


def free_bytes(path: Path) -> int:
    """Free bytes on the file system of `path` (its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


@dataclass
class _Stop:
    reason: str
    data_status: str
    attributes: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)


class EpisodeRecorder:
    """One episode at a time. `start`, `submit`, `stop` and `status` come from one thread (the
    node's); the writer thread is internal."""

    def __init__(
        self,
        config: RecorderConfig,
        *,
        free_bytes: Callable[[Path], int] = free_bytes,
        monotonic: Callable[[], float] = time.monotonic,
        on_writer_start: Callable[[], None] | None = None,
    ):
        """`on_writer_start` runs first in each writer thread (the node lowers that thread's
        priority there: encoding can wait behind the cameras and the control loop, the queue
        absorbs it)."""
        self.config = config
        self._on_writer_start = on_writer_start
        self._free_bytes = free_bytes
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._state = RecorderState.IDLE
        self._detail = "idle"
        self._path: Path | None = None
        self._queue: queue.Queue[Step | _Stop] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._halt = ""
        self._failed = False
        self._frames = self._committed_frames = self._queue_dropped = self._refused = 0
        self._free_mb = float("nan")
        self.last_result: EpisodeResult | None = None

    # ---------------------------------------------------------------- control
    @property
    def recording(self) -> bool:
        return self._state is RecorderState.RECORDING

    @property
    def halt_reason(self) -> str:
        """Why the writer stopped writing on its own (disk low, a failed write); '' while it
        writes. The caller then ends the episode with stop(halt_reason)."""
        return self._halt

    def start(self, meta: EpisodeMeta, start_ns: int) -> Path:
        """Open `<record_dir>/<UTC start time>.zarr`. RecorderError, with the fix, when it cannot
        (and the state is then ERROR)."""
        if self.recording:
            raise RecorderError(f"already recording {self._path}; stop it first (recorder/stop)")
        directory = Path(self.config.record_dir).expanduser()
        try:
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RecorderError(f"cannot create record_dir {directory}: {exc}") from None
            if not os.access(directory, os.W_OK | os.X_OK):
                raise RecorderError(f"record_dir {directory} is not writable by this process (set record_dir)")
            self._check_space(directory, starting=True)
            path = directory / episode_name(start_ns)
            try:
                writer = EpisodeWriter(path, meta, block_steps=self.config.block_steps)
            except (OSError, EpisodeError) as exc:
                raise RecorderError(f"cannot create the episode {path}: {exc}") from None
        except RecorderError as exc:
            with self._lock:
                self._state, self._detail = RecorderState.ERROR, f"start refused: {exc}"
            raise
        with self._lock:
            self._state, self._path = RecorderState.RECORDING, path
            self._detail = f"recording {path.name}"
            self._halt, self._failed = "", False
            self._frames = self._committed_frames = self._queue_dropped = self._refused = 0
            self._queue = queue.Queue()
        self._thread = threading.Thread(
            target=self._write_loop, args=(writer, self._queue), name="episode-writer", daemon=True
        )
        self._thread.start()
        return path

    def refuse(self, why: str) -> None:
        """A start the caller refused before asking (a stream not live): ERROR with the reason."""
        if self.recording:
            raise RecorderError(f"recording {self._path}: refuse() is for a start that did not happen")
        with self._lock:
            self._state, self._detail = RecorderState.ERROR, f"start refused: {why}"

    def submit(self, step: Step) -> bool:
        """Hand a step to the writer; False (and counted) when the queue is full or the writer
        halted. Never blocks."""
        if not self.recording:
            return False
        if self._halt or self._queue.qsize() >= self.config.queue_steps:
            with self._lock:
                self._queue_dropped += 1
            return False
        self._queue.put(step)
        return True

    def stop(
        self, reason: str = "stopped", *, data_status: str = "complete", attributes: Mapping[str, Any] | None = None
    ) -> EpisodeResult | None:
        """Write what is queued and close the episode; None when none is open. `data_status` is
        "complete" unless the writer halted (then "partial"); `attributes` (the per-stream counts)
        go into `recording_stats` with the reason. Waits up to `stop_timeout_s`: a writer still
        busy after that finishes on its own thread (its committed blocks are safe either way)."""
        if not self.recording or self._thread is None:
            return None
        halted = self._halt
        stop = _Stop(reason, "partial" if halted else data_status, dict(attributes or {}))
        self._queue.put(stop)
        if not stop.done.wait(self.config.stop_timeout_s):
            path = self._path
            with self._lock:
                self._state = RecorderState.ERROR
                self._detail = (
                    f"the writer did not close {path} within {self.config.stop_timeout_s:.1f} s (slow disk?); "
                    "its committed blocks are readable, it closes the episode when it can"
                )
            return EpisodeResult(Path(str(path)), self._committed(), "partial", self._detail)
        result = self.last_result
        assert result is not None  # set by the writer thread before `done`
        return result

    def status(self) -> RecorderStatus:
        with self._lock:
            closed = self._state is not RecorderState.RECORDING and self.last_result is not None
            return RecorderStatus(
                state=self._state,
                episode_path=str(self._path) if self._path else "",
                frames=self._frames,
                frames_committed=self.last_result.frames if closed and self.last_result else self._committed(),
                queue_dropped=self._queue_dropped,
                refused=self._refused,
                detail=self._detail,
                free_mb=self._free_mb,
            )

    def _committed(self) -> int:
        return self._committed_frames

    # ----------------------------------------------------------- disk space
    def _check_space(self, directory: Path, starting: bool = False) -> str:
        """'' when there is room; else the reason (and RecorderError when starting)."""
        try:
            free = self._free_bytes(directory)
        except OSError as exc:
            why = f"cannot read the free space of {directory}: {exc}"
        else:
            self._free_mb = free / MB
            if free >= self.config.min_free_mb * MB:
                return ""
            why = (
                f"only {free / MB:.0f} MB free in {directory}, below min_free_mb {self.config.min_free_mb:.0f} MB: "
                + (
                    "free some space or set record_dir elsewhere"
                    if starting
                    else "recording stopped before the disk fills"
                )
            )
        if starting:
            raise RecorderError(why)
        return why

    # ----------------------------------------------------------- the thread
    def _write_loop(self, writer: EpisodeWriter, steps: queue.Queue[Step | _Stop]) -> None:
        """Owns `writer`: adds steps, checks the disk, closes the episode on a _Stop."""
        if self._on_writer_start is not None:
            try:
                self._on_writer_start()
            except Exception:  # noqa: BLE001 - a priority change is an optimization, never a reason to stop
                pass
        last_check = self._monotonic()
        while True:
            try:
                item: Step | _Stop | None = steps.get(timeout=self.config.disk_check_period_s)
            except queue.Empty:
                item = None
            if self._monotonic() - last_check >= self.config.disk_check_period_s:
                last_check = self._monotonic()
                if not self._halt:
                    why = self._check_space(writer.path.parent)
                    if why:
                        self._halt_writing(why, failed=False)
            if isinstance(item, _Stop):
                self._close(writer, item)
                return
            if item is None:
                continue
            if self._halt:
                with self._lock:
                    self._queue_dropped += 1
                continue
            try:
                writer.add(item.stamp_ns, item.images, item.values, item.image_stamps_ns)
            except EpisodeWriteError as exc:
                self._halt_writing(f"writing failed: {exc.__cause__ or exc}", failed=True)
                with self._lock:
                    self._frames = writer.frames
            except EpisodeError as exc:
                with self._lock:
                    self._refused += 1
                    self._detail = f"recording {writer.path.name}; a step was refused: {exc}"
            except Exception as exc:  # noqa: BLE001 - the thread must never die silently
                self._halt_writing(f"writing failed: {type(exc).__name__}: {exc}", failed=True)
            else:
                with self._lock:
                    self._frames = writer.frames
                    if self._frames % self.config.block_steps == 0:  # add() wrote a block and committed it
                        self._committed_frames = self._frames

    def _halt_writing(self, why: str, failed: bool) -> None:
        with self._lock:
            self._halt = why
            self._failed = self._failed or failed
            self._detail = why

    def _close(self, writer: EpisodeWriter, stop: _Stop) -> None:
        status = "partial" if self._failed else stop.data_status
        detail = ""
        try:
            frames = writer.close(status)
        except Exception as exc:  # noqa: BLE001 - e.g. the disk is full: the committed blocks stay readable
            frames, status = self._committed(), "partial"
            detail = f"closing failed ({type(exc).__name__}: {exc}); the {frames} committed frames stay readable"
        stats: dict[str, Any] = {
            "stop_reason": stop.reason,
            "queue_dropped": self._queue_dropped,
            "refused_steps": self._refused,
        }
        stats.update(stop.attributes)
        try:
            zarr.open_group(str(writer.path), mode="r+", zarr_format=3).attrs[STATS_ATTRIBUTE] = stats
        except Exception as exc:  # noqa: BLE001 - the counts are a report; the episode is intact without them
            detail = (detail + "; " if detail else "") + f"{STATS_ATTRIBUTE} not written ({type(exc).__name__}: {exc})"
        error = self._failed or bool(self._halt) or bool(detail)
        summary = f"{writer.path.name}: {frames} frames ({status}); {stop.reason}" + (f"; {detail}" if detail else "")
        with self._lock:
            if self._path == writer.path:  # not a late close after a stop timed out and a new start
                self._frames = max(self._frames, frames)
                self.last_result = EpisodeResult(writer.path, frames, status, summary)
                self._state = RecorderState.ERROR if error else RecorderState.IDLE
                self._detail = summary
        stop.done.set()
