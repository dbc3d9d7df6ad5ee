"""Backend `replay`: frames of a recorded EVA episode (zarr) or a directory of images, released
at their recorded timing, so the whole graph runs on real recorded data without a robot.

Sources:
- an episode store (`*.zarr`, egomimic_data.episode_format), this project's or one written by
  upstream EgoVerse: `images.<cam>` JPEG frames, timing from `stamps.<cam>` (capture stamps;
  else the episode's RGB clock `obs_rgb_timestamps_ns`, else `timestamps_ns`, else evenly at the
  episode's fps), intrinsics from the episode's calibration when it has this camera;
- a directory of images (`*.png`, `*.jpg`, `*.jpeg`, sorted by name): if it has a subdirectory
  named after the camera, that one is used; timing from `timestamps.txt` (one capture stamp
  in ns per line, one line per image) or else evenly at `fps`.
Each frame is stamped, on the replay clock, with the instant it was due on the recording's
timeline (header.stamp = the time the graph "captured" it), as a real camera stamps its capture,
not its delivery: the stamps keep the recorded intervals exactly, and a frame released late
reads as late to freshness checks downstream. The recorded intervals are reproduced relative to
`start_monotonic` (pass the same value to every camera of one process to keep them in step).
A frame due more than LATE_RESYNC_S ago (a paused process) shifts the timeline instead, so the
stamps never go backwards and never come closer than the recording's. With `loop`, the
sequence restarts after its last interval.
"""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import simplejpeg

from egomimic_hw.cameras.base import ClockNs, Frame, Intrinsics, default_intrinsics, wall_clock_ns
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.pacing import Pacer

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
LATE_RESYNC_S = 0.1
"""A frame due more than this long ago re-anchors the timeline instead of being rushed out."""


class _EpisodeSource:
    def __init__(self, path: Path, camera: str):
        from egomimic_data.episode_format import EpisodeError, EpisodeReader  # replay only

        try:
            self._reader = EpisodeReader(path)
        except EpisodeError as exc:
            raise ConfigError(f"replay_path {path}: {exc}") from None
        if camera not in self._reader.cameras:
            raise ConfigError(f"episode {path} has no camera {camera!r}; it has {list(self._reader.cameras)}")
        if len(self._reader) == 0:
            raise ConfigError(f"episode {path} has no committed frames")
        self._camera = camera
        try:  # the reader falls back from the camera's own stamps to the episode's clock
            self.stamps_ns = np.asarray(self._reader.image_stamps_ns(camera), dtype=np.int64)
            calibration = self._reader.intrinsics(camera)
        except EpisodeError as exc:
            raise ConfigError(f"replay_path {path}: {exc}") from None
        first = self.image(0)
        h, w = first.shape[:2]
        self.intrinsics = Intrinsics.from_dict(calibration) if calibration else default_intrinsics(camera, w, h)
        self.encoding = "rgb8"

    def __len__(self) -> int:
        return len(self.stamps_ns)

    def image(self, index: int) -> np.ndarray:
        return simplejpeg.decode_jpeg(self._reader.jpeg(self._camera, index), colorspace="RGB")


class _DirectorySource:
    def __init__(self, path: Path, camera: str, fps: float):
        if (path / camera).is_dir():
            path = path / camera
        self._files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self._files:
            raise ConfigError(f"replay_path {path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        stamps_file = path / "timestamps.txt"
        if stamps_file.exists():
            lines = [ln for ln in stamps_file.read_text().split() if ln]
            if len(lines) != len(self._files):
                raise ConfigError(f"{stamps_file} has {len(lines)} stamps for {len(self._files)} images")
            self.stamps_ns = np.array([int(x) for x in lines], dtype=np.int64)
            if np.any(np.diff(self.stamps_ns) <= 0):
                raise ConfigError(f"{stamps_file}: stamps must increase strictly")
        else:
            self.stamps_ns = (np.arange(len(self._files)) * (1e9 / fps)).astype(np.int64)
        first = self.image(0)
        self.intrinsics = default_intrinsics(camera, first.shape[1], first.shape[0])
        self.encoding = "bgr8"  # cv2.imread; FrameShaper converts once

    def __len__(self) -> int:
        return len(self._files)

    def image(self, index: int) -> np.ndarray:
        img = cv2.imread(str(self._files[index]), cv2.IMREAD_COLOR)
        if img is None:
            raise ConfigError(f"cannot decode {self._files[index]}")
        return img


class ReplayCamera:
    """Replays one camera of a recording at its recorded timing (see module docstring)."""

    def __init__(
        self,
        camera: str,
        path: str | Path,
        *,
        loop: bool = True,
        fps: float = 30.0,
        clock_ns: ClockNs = wall_clock_ns,
        start_monotonic: float | None = None,
    ):
        path = Path(path)
        if not str(path) or not path.exists():
            raise BackendUnavailable(
                f"replay_path {str(path)!r} does not exist; give an episode (*.zarr) "
                "or a directory of images (tools/make_sim_episode.py writes one)"
            )
        if not fps > 0:
            raise ConfigError(f"replay fps must be > 0, got {fps}")
        is_episode = (path / "zarr.json").exists()
        self._source = _EpisodeSource(path, camera) if is_episode else _DirectorySource(path, camera, fps)
        self.camera = camera
        self.intrinsics = self._source.intrinsics
        self.loop = loop
        stamps = self._source.stamps_ns
        self._offsets_s = (stamps - stamps[0]) / 1e9
        gaps = np.diff(stamps)
        self._cycle_s = float(self._offsets_s[-1] + (np.median(gaps) / 1e9 if len(gaps) else 1.0 / fps))
        self._start = time.monotonic() if start_monotonic is None else start_monotonic
        self._pacer = Pacer(fps)  # only its stop event and waits are used: timing is the recording's
        self._position = 0
        self._cycle = 0
        self._clock_ns = clock_ns

    def __len__(self) -> int:
        return len(self._source)

    @property
    def finished(self) -> bool:
        return not self.loop and self._position >= len(self._source)

    def read(self, timeout_s: float) -> Frame | None:
        if self.finished or self._pacer.stopped:
            if self.finished:
                self._pacer.wait_until(time.monotonic() + timeout_s, timeout_s)
            return None
        due = self._start + self._cycle * self._cycle_s + self._offsets_s[self._position]
        late_s = time.monotonic() - due
        if late_s > LATE_RESYNC_S:  # paused (SIGSTOP, overload): shift the timeline, no burst
            self._start += late_s
            due += late_s
        if not self._pacer.wait_until(due, timeout_s):
            return None
        # The due instant, on the stamping clock: released late (load), the frame keeps its
        # place on the recording's timeline (fc26 stamped releases: 31.3 ms median for 33.3 ms).
        stamp_ns = self._clock_ns() - max(0, int((time.monotonic() - due) * 1e9))
        image = self._source.image(self._position)
        frame = Frame(image, stamp_ns, self._cycle * len(self._source) + self._position, self._source.encoding)
        self._position += 1
        if self._position >= len(self._source) and self.loop:
            self._position = 0
            self._cycle += 1
        return frame

    def close(self) -> None:
        self._pacer.stop()
