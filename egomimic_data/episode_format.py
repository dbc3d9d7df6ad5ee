"""The EVA episode format: one zarr v3 store per episode, written at 30 Hz, read by training and replay.

Layout (docs/eva.md "Episodes"; upstream EgoVerse's v3.1 contract where it applies, plus what
replay and crash recovery need):

    <YYYY-mm-dd-HH-MM-SS-ffffff>.zarr/        group, zarr_format 3
      {left,right}.obs_ee_pose, .cmd_ee_pose  (T, 7) float32  [x, y, z, qw, qx, qy, qz], DATASET frame
      {left,right}.obs_joints, .cmd_joints    (T, 6) float32  rad
      {left,right}.obs_gripper, .cmd_gripper  (T, 1) float32  normalized, 0 closed .. 1 open
      images.<cam>                            (T,) variable-length bytes: one JPEG (q85, RGB 640x480) per frame
      obs_rgb_timestamps_ns                   (T,) int64  capture stamp of the reference camera's (front_1)
                                              frame: upstream's one RGB clock, strictly increasing
                                              (a step that reuses the previous step's front_1
                                              frame, a bridged drop, carries its own stamp here)
      timestamps_ns                           (T,) int64  the step's stamp (observation time, ROS ns)
      stamps.<cam>                            (T,) int64  capture stamp of that camera's frame (ROS ns)
    attributes: schema_version ("v3.1"), embodiment, total_frames, fps (int when integral),
      task_name, task_description, features {key: {dtype (numpy dtype or "jpeg"), shape, names}},
      data_status ("recording" while open, then "complete" or "partial"), calibration (upstream's
      block, egomimic_data.calibration) with the legacy intrinsics/extrinsics derived from it,
      and the project's own: format_version, cameras, jpeg_quality, frames_committed (the commit marker).
Arm sides and default camera names are egomimic_hw.description's (ARMS, CAMERAS).

Upstream interchange, both ways:
- upstream's readers (ZarrEpisode/ZarrDataset) need `total_frames`, `embodiment` and `features`
  and read every array only up to `total_frames`, so this writer trims its arrays to T at close
  (no padding: a padded tail is allowed by the contract, never required).
- episodes written by upstream's ZarrWriter have no commit marker, no `cameras`, no per-camera
  stamps, and arrays padded to a multiple of 100: the reader takes `total_frames` as the length,
  derives the cameras from `images.*`, and the RGB clock from `obs_rgb_timestamps_ns`
  (an episode without a clock is taken at its declared fps). A missing data_status reads as
  complete (upstream's rule).

Why this layout (measured with zarr 3.1.6):
- JPEG bytes encoded in the app (simplejpeg, ~0.7 ms per frame) in a variable-length-bytes
  array: 15-20x smaller than raw RGB, while lossless codecs reach 1.0-1.7x. EgoVerse uses the
  same layout, so its loaders read these stores.
- zarr 3 costs ~1-5 ms per write call, so per-step writes of 3 frames + 12 arrays cannot keep
  up at 30 Hz on 2 cores. The writer buffers `block_steps` (30 = 1 s) in RAM and writes one
  block per array. Images: one frame per inner chunk (random access for training), sharded
  so that one block is exactly one shard file (a shard is never rewritten). Numeric arrays:
  chunks of 100 steps (docs/eva.md).
- Arrays are preallocated in capacity steps (growing x2) instead of resized per block, so a
  block costs only data writes, no metadata rewrite per array.
- Crash safety: each key is written atomically by zarr (temp file + rename), but array shapes
  cannot be trusted after a crash (a capacity, or a resize ahead of its data). The writer
  advances `frames_committed` only after a block's data are written; the reader truncates every
  array to it, and an episode whose data_status is not "complete" is reported partial. A crash
  loses at most the unflushed block (<= 1 s). `total_frames` stays 0 until close, so upstream's
  tools refuse an unfinished episode; `egomimic-episodes repair` finalizes one (episode_check).
  While open, the writer holds an exclusive flock on the store directory: the kernel drops it
  when the process dies, which is how `repair` tells a crashed recording from a live one.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import fcntl
import json
import math
import os
import shutil
import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
import zarr
from zarr.core.sync import sync as zarr_sync
from zarr.dtype import VariableLengthBytes

from egomimic_data import calibration as calib
from egomimic_data.file_locks import held_by_another
from egomimic_data.jpeg_frame import JpegFrame
from egomimic_hw.description import ARMS, CAMERAS

NUMERIC_FIELDS: dict[str, int] = {
    "obs_ee_pose": 7,
    "cmd_ee_pose": 7,
    "obs_joints": 6,
    "cmd_joints": 6,
    "obs_gripper": 1,
    "cmd_gripper": 1,
}
"""Per-arm numeric arrays and their width (docs/eva.md)."""
FIELD_NAMES = {
    "obs_ee_pose": ["x", "y", "z", "qw", "qx", "qy", "qz"],
    "cmd_ee_pose": ["x", "y", "z", "qw", "qx", "qy", "qz"],
    "obs_joints": [f"joint{i}" for i in range(1, 7)],
    "cmd_joints": [f"joint{i}" for i in range(1, 7)],
    "obs_gripper": ["gripper"],
    "cmd_gripper": ["gripper"],
}
FORMAT_VERSION = 2
"""The project's own revision of this layout. 2: upstream's v3.1 attributes (schema_version, the
calibration block, int fps, obs_rgb_timestamps_ns); 1: calibration in the project's form."""
SCHEMA_VERSION = "v3.1"
"""Upstream's contract version these episodes follow (egomimic/rldb/zarr/schema/episode_v3.yaml)."""
NUMERIC_CHUNK_STEPS = 100
INITIAL_CAPACITY_STEPS = 900
"""30 s at 30 Hz; doubled whenever an episode grows past it."""
NAME_FORMAT = "%Y-%m-%d-%H-%M-%S-%f"
RGB_CLOCK_KEY = "obs_rgb_timestamps_ns"
"""Upstream's one RGB clock per episode: capture stamps (int64 ns) of the reference camera."""
STEP_CLOCK_KEY = "timestamps_ns"
IMAGE_PREFIX = "images."
STAMPS_PREFIX = "stamps."
ANNOTATIONS_KEY = "annotations"
"""Upstream's optional language annotations: (N,) JSON bytes {text, start_idx, end_idx}."""
STATUS_RECORDING = "recording"
STATUS_COMPLETE = "complete"
STATUS_PARTIAL = "partial"
UPSTREAM_STATUSES = (STATUS_COMPLETE, "structural_sample")
"""The data_status values upstream's schema accepts; "partial" and "recording" are the project's."""


class EpisodeError(ValueError):
    """An episode cannot be written or read as asked; the message says what and where."""


class EpisodeWriteError(EpisodeError):
    """Writing a block failed after its steps were accepted (they stay buffered)."""


def episode_name(start_ns: int) -> str:
    """Store name from the episode's UTC start time (docs/eva.md): `2025-01-31-12-00-00-000000.zarr`."""
    when = _dt.datetime.fromtimestamp(start_ns / 1e9, tz=_dt.UTC)
    return when.strftime(NAME_FORMAT) + ".zarr"


def numeric_keys() -> list[str]:
    return [f"{arm.value}.{name}" for arm in ARMS for name in NUMERIC_FIELDS]


def fps_attribute(fps: float) -> int | float:
    """fps as stored: an int when integral (upstream's schema types it int), else as given."""
    return int(fps) if float(fps).is_integer() else float(fps)


def _lock(path: Path) -> int | None:
    """An exclusive flock on the store directory, held while a writer is open (None where the
    file system has no flock: then nothing can tell a live recording from a crashed one)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def recording_in_progress(path: str | Path) -> bool:
    """True while a live EpisodeWriter (any process) holds the store open. A writer killed with
    SIGKILL holds nothing: its episode reads data_status "recording" but is not in progress."""
    return held_by_another(path, exclusive_only=True)


@dataclass(frozen=True)
class EpisodeMeta:
    """What an episode declares about itself (written as attributes)."""

    task_name: str
    cameras: tuple[str, ...] = CAMERAS
    fps: float = 30.0
    embodiment: str = "eva_bimanual"
    task_description: str = ""
    image_width: int = 640
    image_height: int = 480
    jpeg_quality: int = 85
    calibration: dict = field(default_factory=dict)
    """Either the project's form, per camera egomimic_hw Intrinsics.as_dict() ({width, height, fx,
    fy, cx, cy, distortion}) plus optional "extrinsics": {"<side>_base_T_<cam>": 4x4 list}, or
    upstream's block ({reference_frame, cameras, arm_bases}); stored as upstream's block
    (egomimic_data.calibration)."""

    def __post_init__(self) -> None:
        if not self.task_name:
            raise EpisodeError("task_name must be a non-empty string")
        if not self.cameras or len(set(self.cameras)) != len(self.cameras):
            raise EpisodeError(f"cameras must be unique names, got {self.cameras}")
        if not (math.isfinite(self.fps) and self.fps > 0):
            raise EpisodeError(f"fps must be > 0, got {self.fps}")
        if not 1 <= self.jpeg_quality <= 100:
            raise EpisodeError(f"jpeg_quality must be in [1, 100], got {self.jpeg_quality}")

    @property
    def reference_camera(self) -> str:
        """The camera whose capture stamps are the RGB clock: front_1 when recorded, else the first."""
        return calib.REFERENCE_CAMERA if calib.REFERENCE_CAMERA in self.cameras else self.cameras[0]

    def features(self) -> dict[str, dict[str, Any]]:
        """Upstream's form: {key: {dtype (numpy dtype string, or "jpeg"), shape (per frame), names}}."""
        out: dict[str, dict[str, Any]] = {}
        for key in numeric_keys():
            name = key.split(".", 1)[1]
            out[key] = {"dtype": "float32", "shape": [NUMERIC_FIELDS[name]], "names": FIELD_NAMES[name]}
        for cam in self.cameras:
            out[IMAGE_PREFIX + cam] = {
                "dtype": "jpeg",
                "shape": [self.image_height, self.image_width, 3],
                "names": ["height", "width", "channel"],
            }
            out[STAMPS_PREFIX + cam] = {"dtype": "int64", "shape": [], "names": []}
        out[RGB_CLOCK_KEY] = {"dtype": "int64", "shape": [], "names": []}
        out[STEP_CLOCK_KEY] = {"dtype": "int64", "shape": [], "names": []}
        return out


async def _all(coroutines) -> None:
    """Await every coroutine concurrently, inside zarr's event loop (gather binds to the loop it
    is called in, so it must be called there)."""
    await asyncio.gather(*coroutines)


@contextlib.contextmanager
def _vlen_bytes_accepted():
    """zarr warns that variable-length bytes have no v3 spec yet; we know (zarr is pinned, and
    EgoVerse stores read the same way), so the warning is silenced here only."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=zarr.errors.UnstableSpecificationWarning)
        yield


class EpisodeWriter:
    """Writes one episode. Not thread-safe: one recorder thread owns it.

    `add()` encodes the frames (JPEG) and buffers the step; every `block_steps` it writes one
    block (~0.1-0.2 s with 3 cameras). A recorder running at 30 Hz calls it from a worker
    thread fed by a bounded queue, so a slow disk never stalls the control loop.
    Use as a context manager: an exception closes the episode as "partial".
    """

    def __init__(self, path: str | Path, meta: EpisodeMeta, *, block_steps: int = 30, overwrite: bool = False):
        if block_steps < 1:
            raise EpisodeError(f"block_steps must be >= 1, got {block_steps}")
        self.path = Path(path)
        try:  # validate before anything is created: a bad calibration must not leave a half store
            json.dumps(meta.calibration)
        except (TypeError, ValueError) as exc:
            raise EpisodeError(f"calibration must be JSON-serializable (lists, not numpy arrays): {exc}") from None
        try:
            block = calib.to_block(meta.calibration)
        except calib.CalibrationError as exc:
            raise EpisodeError(f"calibration: {exc}") from None
        if self.path.exists():
            if not overwrite:
                raise EpisodeError(f"{self.path} exists; refusing to overwrite an episode")
            if recording_in_progress(self.path):
                raise EpisodeError(f"{self.path} is being recorded by a live writer; refusing to overwrite it")
            shutil.rmtree(self.path)
        self.meta = meta
        self.block_steps = block_steps
        self._capacity = max(INITIAL_CAPACITY_STEPS, block_steps)
        self._committed = 0
        self._last_rgb_ns = -1
        """The RGB clock's last committed value (_rgb_clock)."""
        self._closed = False
        self._buffer: list[tuple[int, dict[str, bytes], dict[str, int], dict[str, np.ndarray]]] = []
        self._group = zarr.open_group(str(self.path), mode="w-", zarr_format=3)
        fd = _lock(self.path)
        self._unlock = weakref.finalize(self, os.close, fd) if fd is not None else None
        self._arrays: dict[str, zarr.Array] = {}
        with _vlen_bytes_accepted():
            for key in numeric_keys():
                width = NUMERIC_FIELDS[key.split(".", 1)[1]]
                self._arrays[key] = self._group.create_array(
                    key,
                    shape=(self._capacity, width),
                    chunks=(NUMERIC_CHUNK_STEPS, width),
                    dtype="float32",
                    fill_value=np.nan,
                )
            for key in (STEP_CLOCK_KEY, RGB_CLOCK_KEY):
                self._arrays[key] = self._group.create_array(
                    key, shape=(self._capacity,), chunks=(NUMERIC_CHUNK_STEPS,), dtype="int64", fill_value=0
                )
            for cam in meta.cameras:
                self._arrays[STAMPS_PREFIX + cam] = self._group.create_array(
                    STAMPS_PREFIX + cam,
                    shape=(self._capacity,),
                    chunks=(NUMERIC_CHUNK_STEPS,),
                    dtype="int64",
                    fill_value=0,
                )
                # JPEG does not compress further: no compressor. One shard per block.
                self._arrays[IMAGE_PREFIX + cam] = self._group.create_array(
                    IMAGE_PREFIX + cam,
                    shape=(self._capacity,),
                    chunks=(1,),
                    shards=(block_steps,),
                    dtype=VariableLengthBytes(),
                    compressors=None,
                )
        attrs: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "format_version": FORMAT_VERSION,
            "embodiment": meta.embodiment,
            "fps": fps_attribute(meta.fps),
            "task_name": meta.task_name,
            "task_description": meta.task_description,
            "cameras": list(meta.cameras),
            "jpeg_quality": meta.jpeg_quality,
            "features": meta.features(),
            "data_status": STATUS_RECORDING,
            "frames_committed": 0,
            "total_frames": 0,
        }
        if block is not None:
            attrs["calibration"] = block
            attrs.update(calib.legacy_attrs(block))
        self._group.attrs.update(attrs)

    @property
    def frames(self) -> int:
        """Steps accepted so far (committed + buffered)."""
        return self._committed + len(self._buffer)

    def add(
        self,
        stamp_ns: int,
        images: Mapping[str, np.ndarray | bytes],
        values: Mapping[str, np.ndarray],
        image_stamps_ns: Mapping[str, int] | None = None,
    ) -> None:
        """Buffer one step. images: camera -> RGB uint8 (H, W, 3) or JPEG bytes already encoded.
        values: every key of `numeric_keys()` ("left.obs_ee_pose", ...). A step with a missing,
        misshapen or non-finite value is refused whole (nothing half-written).
        image_stamps_ns: each camera's capture stamp; None states that every image was captured
        at `stamp_ns` (a renderer); a mapping must name every camera (no silent fallback).
        Once accepted, a step is kept: if writing its block fails, EpisodeWriteError says so and
        the block is retried at the next flush (do not add the step again)."""
        if self._closed:
            raise EpisodeError("episode already closed")
        missing = set(self.meta.cameras) - set(images)
        if missing:
            raise EpisodeError(f"step misses image(s) for {sorted(missing)}")
        row: dict[str, np.ndarray] = {}
        for key in numeric_keys():
            if key not in values:
                raise EpisodeError(f"step misses {key!r}")
            v = np.asarray(values[key], dtype=np.float32).reshape(-1)
            width = NUMERIC_FIELDS[key.split(".", 1)[1]]
            if v.shape != (width,):
                raise EpisodeError(f"{key} must have {width} values, got shape {np.shape(values[key])}")
            if not np.all(np.isfinite(v)):
                raise EpisodeError(f"{key} is not finite: {v}")
            row[key] = v
        if image_stamps_ns is None:
            stamps = {cam: int(stamp_ns) for cam in self.meta.cameras}
        else:
            missing = set(self.meta.cameras) - set(image_stamps_ns)
            if missing:
                raise EpisodeError(f"image_stamps_ns misses the capture stamp of {sorted(missing)}")
            stamps = {cam: int(image_stamps_ns[cam]) for cam in self.meta.cameras}
        jpegs = {cam: self._encode(cam, images[cam]) for cam in self.meta.cameras}
        self._buffer.append((int(stamp_ns), jpegs, stamps, row))
        if len(self._buffer) >= self.block_steps:
            try:
                self.flush()
            except Exception as exc:
                raise EpisodeWriteError(
                    f"step {self.frames - 1} is buffered, but writing its block failed ({type(exc).__name__}: {exc}); "
                    "the block is retried at the next flush: do not add the step again"
                ) from exc

    def _encode(self, cam: str, image: np.ndarray | bytes) -> bytes:
        expected = (self.meta.image_height, self.meta.image_width, 3)
        if isinstance(image, JpegFrame):  # a camera's JPEG, stored as it came (jpeg_frame.py)
            if image.quality != self.meta.jpeg_quality:
                raise EpisodeError(
                    f"images[{cam!r}] is a quality {image.quality} JPEG, the episode's is {self.meta.jpeg_quality}"
                )
            if image.shape != expected:
                raise EpisodeError(
                    f"images[{cam!r}] is a {image.shape[1]}x{image.shape[0]} JPEG, expected {expected[1]}x{expected[0]}"
                )
            return bytes(image)
        if isinstance(image, (bytes, bytearray, memoryview)):
            return bytes(image)
        img = np.asarray(image)
        if img.shape != expected or img.dtype != np.uint8:
            raise EpisodeError(f"images[{cam!r}] must be uint8 {expected} RGB, got {img.dtype} {img.shape}")
        return simplejpeg.encode_jpeg(np.ascontiguousarray(img), quality=self.meta.jpeg_quality, colorspace="RGB")

    def flush(self) -> None:
        """Write the buffered steps as one block, then advance the commit marker."""
        if not self._buffer:
            return
        start, n = self._committed, len(self._buffer)
        stop = start + n
        rows = slice(start, stop)
        rgb_clock, last_rgb_ns = self._rgb_clock()
        writes: list[tuple[str, np.ndarray]] = [
            (STEP_CLOCK_KEY, np.array([b[0] for b in self._buffer], dtype=np.int64)),
            (RGB_CLOCK_KEY, rgb_clock),
        ]
        for cam in self.meta.cameras:
            blob = np.empty(n, dtype=object)
            blob[:] = [b[1][cam] for b in self._buffer]
            writes.append((IMAGE_PREFIX + cam, blob))
            writes.append((STAMPS_PREFIX + cam, np.array([b[2][cam] for b in self._buffer], dtype=np.int64)))
        writes += [(key, np.stack([b[3][key] for b in self._buffer])) for key in numeric_keys()]
        with _vlen_bytes_accepted():
            if stop > self._capacity:
                self._grow(stop)
            # One round trip to zarr's event loop for the whole block (not one per array: each
            # costs a thread hand-off), the arrays written concurrently.
            zarr_sync(_all(self._arrays[key].async_array.setitem(rows, v) for key, v in writes))
        self._release_shards(start, stop)
        self._buffer.clear()
        self._last_rgb_ns = last_rgb_ns
        self._committed = stop
        self._group.attrs["frames_committed"] = stop  # the commit: after the data, its own write

    def _release_shards(self, start: int, stop: int) -> None:
        """Write the block's image shards to disk and drop them from the page cache (fdatasync,
        then POSIX_FADV_DONTNEED), so the next block's pages are these, reused, not fresh ones.
        Why, measured (2026-12-06, the 2-core Firecracker VM, whose balloon reports free memory
        to the host): writing a 1 s block of three cameras into fresh page-cache pages held a CPU
        in the kernel for 20-80 ms (a SCHED_FIFO 90 probe was late 17-63 times a minute, every
        time during a block write, against 0-2 idle); synced and dropped, 3-4 a minute. Best
        effort: a failure here loses no data, which zarr has already written."""
        block = self.block_steps
        for cam in self.meta.cameras:
            arr = self._arrays[IMAGE_PREFIX + cam]
            for shard in range(start // block, (stop - 1) // block + 1):
                try:
                    fd = os.open(self.path / arr.path / arr.metadata.encode_chunk_key((shard,)), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.fdatasync(fd)
                    if hasattr(os, "posix_fadvise"):
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass
                finally:
                    os.close(fd)

    def _rgb_clock(self) -> tuple[np.ndarray, int]:
        """The buffered steps' RGB clock (obs_rgb_timestamps_ns) and its last value: the reference
        camera's capture stamps; a step that reuses the previous step's reference frame (the
        recorder bridges one dropped frame: step_assembly) carries its own stamp there instead,
        so the clock increases strictly as upstream's readers require."""
        ref, last = self.meta.reference_camera, self._last_rgb_ns
        clock = np.empty(len(self._buffer), dtype=np.int64)
        for i, b in enumerate(self._buffer):
            stamp = b[2][ref] if b[2][ref] > last else b[0]
            clock[i] = last = stamp
        return clock, last

    def _grow(self, needed: int) -> None:
        while self._capacity < needed:
            self._capacity *= 2
        for arr in self._arrays.values():
            arr.resize((self._capacity, *arr.shape[1:]))

    def close(self, status: str = STATUS_COMPLETE) -> int:
        """Flush, trim every array to the episode length, write the final attributes. Returns T."""
        if status not in (STATUS_COMPLETE, STATUS_PARTIAL):
            raise EpisodeError(f"status must be 'complete' or 'partial', got {status!r}")
        if self._closed:
            return self._committed
        try:
            self.flush()
            with _vlen_bytes_accepted():
                for arr in self._arrays.values():
                    arr.resize((self._committed, *arr.shape[1:]))
            self._group.attrs.update({"total_frames": self._committed, "data_status": status})
            self._closed = True
        finally:  # a failed close leaves the episode to `repair` (a held lock would refuse it),
            # unless steps are still buffered: a retried close may yet write them
            if self._unlock is not None and not self._buffer:
                self._unlock()
        return self._committed

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.close(STATUS_COMPLETE)
            return
        try:  # keep what can be kept, but never hide the exception that ended the episode
            self.close(STATUS_PARTIAL)
        except Exception as close_exc:  # noqa: BLE001
            warnings.warn(f"episode {self.path}: closing as partial failed too: {close_exc}", stacklevel=2)


def _camera_order(cam: str) -> tuple[int, str]:
    return (CAMERAS.index(cam) if cam in CAMERAS else len(CAMERAS), cam)


class EpisodeReader:
    """Reads one episode, this project's or upstream's; every array is cut to the episode length.

    The length is the commit marker `frames_committed` when the episode has one (this project's
    writer), else `total_frames` (upstream's writer, whose arrays may be padded past it).
    `data_status`: "complete", "partial" (closed early, or never closed: a crash), or upstream's
    "structural_sample"; an upstream episode without the attribute is complete (upstream's rule).
    `finalized` is False for an episode never closed (stored data_status "recording").
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._group = zarr.open_group(str(self.path), mode="r", zarr_format=3)
        except (FileNotFoundError, zarr.errors.GroupNotFoundError) as exc:
            raise EpisodeError(f"{self.path} is not an EVA episode (no zarr v3 group): {exc}") from None
        except (ValueError, TypeError, KeyError, OSError) as exc:  # zarr.json truncated, random bytes, not JSON
            raise EpisodeError(
                f"{self.path} is not a readable episode (its zarr metadata is damaged: {type(exc).__name__}: {exc})"
            ) from None
        self.attrs: dict[str, Any] = dict(self._group.attrs)
        a = self.attrs
        self.has_commit_marker = "frames_committed" in a
        length_key = "frames_committed" if self.has_commit_marker else "total_frames"
        if length_key not in a:
            raise EpisodeError(
                f"{self.path} is not an episode: it has neither total_frames (upstream's length) "
                "nor frames_committed (this project's commit marker)"
            )
        try:
            self.length = int(a[length_key])
            self.fps = float(a["fps"])
        except KeyError:
            raise EpisodeError(f"{self.path} lacks the fps attribute") from None
        except (TypeError, ValueError) as exc:
            raise EpisodeError(f"{self.path}: {length_key} or fps is not a number: {exc}") from None
        if self.length < 0 or not (math.isfinite(self.fps) and self.fps > 0):
            raise EpisodeError(f"{self.path}: {length_key} {self.length} or fps {self.fps} out of range")
        stored = a.get("data_status") or None
        self.stored_status: str | None = stored
        if self.has_commit_marker:
            self.data_status = STATUS_COMPLETE if stored == STATUS_COMPLETE else STATUS_PARTIAL
        else:
            self.data_status = str(stored) if stored else STATUS_COMPLETE
        self.finalized = stored != STATUS_RECORDING
        with self._reading("the list of arrays"), _vlen_bytes_accepted():
            self.array_keys: frozenset[str] = frozenset(self._group.array_keys())
        self.cameras: tuple[str, ...] = tuple(a["cameras"]) if "cameras" in a else self._derive_cameras()
        self._cache: dict[str, zarr.Array] = {}
        self._calibration: dict[str, Any] | None = None
        self._calibration_read = False

    def _derive_cameras(self) -> tuple[str, ...]:
        """Upstream episodes name no cameras: every `images.<cam>` of the features or the store."""
        features = self.attrs.get("features") or {}
        keys = [k for k in features if k.startswith(IMAGE_PREFIX)]
        keys += sorted(k for k in self.array_keys if k.startswith(IMAGE_PREFIX) and k not in features)
        return tuple(sorted((k[len(IMAGE_PREFIX) :] for k in keys), key=_camera_order))

    def __len__(self) -> int:
        return self.length

    @contextlib.contextmanager
    def _reading(self, what: str):
        """Damage inside the store (a chunk or metadata file cut short, overwritten or deleted)
        surfaces from zarr and its codecs as ValueError, RuntimeError, OSError, ... (and from the
        JPEG decoder as ValueError; as MemoryError where noise lands on a variable-length
        chunk's item count): one EpisodeError naming the store and what was being read,
        so every consumer (training, replay, egomimic-episodes) reports it in one line."""
        try:
            yield
        except EpisodeError:
            raise
        except (ValueError, TypeError, KeyError, RuntimeError, OSError, AttributeError, MemoryError) as exc:
            # MemoryError: noise in a variable-length chunk's item count asks numpy for gigabytes
            raise EpisodeError(
                f"{self.path}: cannot read {what} (damaged store): {type(exc).__name__}: {exc}"
            ) from None

    def _array(self, key: str) -> zarr.Array:
        if key not in self._cache:
            with self._reading(f"array {key!r}"):
                try:
                    with _vlen_bytes_accepted():
                        node = self._group[key]
                except KeyError:
                    raise EpisodeError(f"{self.path} has no array {key!r}") from None
            if not isinstance(node, zarr.Array):
                raise EpisodeError(f"{self.path}: {key!r} is a group, not an array")
            if key != ANNOTATIONS_KEY and node.shape[0] < self.length:
                raise EpisodeError(f"{self.path}: {key!r} holds {node.shape[0]} frames, the episode {self.length}")
            self._cache[key] = node
        return self._cache[key]

    def array(self, key: str) -> np.ndarray:
        """A whole numeric array, (T, ...) cut to the episode length."""
        node = self._array(key)
        with self._reading(f"array {key!r}"):
            return np.asarray(node[: self.length])

    def _even_stamps(self) -> np.ndarray:
        return np.round(np.arange(self.length) * (1e9 / self.fps)).astype(np.int64)

    @property
    def timestamps_ns(self) -> np.ndarray:
        """The step stamps; an upstream episode's RGB clock; else evenly at fps (no clock stored)."""
        for key in (STEP_CLOCK_KEY, RGB_CLOCK_KEY):
            if key in self.array_keys:
                return self.array(key)
        return self._even_stamps()

    def image_stamps_ns(self, cam: str) -> np.ndarray:
        """Capture stamps of `cam`'s frames: its own (stamps.<cam>), else the episode's RGB
        clock (upstream's frames are aligned to it), else the step stamps, else evenly at fps."""
        for key in (STAMPS_PREFIX + cam, RGB_CLOCK_KEY, STEP_CLOCK_KEY):
            if key in self.array_keys:
                return self.array(key)
        return self._even_stamps()

    def jpeg(self, cam: str, t: int) -> bytes:
        if cam not in self.cameras:
            raise EpisodeError(f"{self.path} has no camera {cam!r}; it has {list(self.cameras)}")
        if not 0 <= t < self.length:
            raise IndexError(f"frame {t} outside [0, {self.length})")
        node = self._array(IMAGE_PREFIX + cam)
        with self._reading(f"{cam} frame {t}"):
            return bytes(np.asarray(node[t : t + 1])[0])  # arr[t] is a 0-d object array

    def image(self, cam: str, t: int) -> np.ndarray:
        """RGB uint8 (H, W, 3)."""
        jpeg = self.jpeg(cam, t)
        with self._reading(f"{cam} frame {t} (JPEG)"):
            return simplejpeg.decode_jpeg(jpeg, colorspace="RGB")

    def window(self, key: str, t: int, horizon: int) -> np.ndarray:
        """Rows [t, t + horizon) of a numeric array, padded past the end with the last row
        (what training reads, docs/eva.md)."""
        if not 0 <= t < self.length or horizon < 1:
            raise IndexError(f"window [{t}, {t}+{horizon}) outside an episode of {self.length}")
        node = self._array(key)
        with self._reading(f"array {key!r} rows {t}.."):
            rows = np.asarray(node[t : min(t + horizon, self.length)])
        if rows.shape[0] < horizon:
            rows = np.concatenate([rows, np.repeat(rows[-1:], horizon - rows.shape[0], axis=0)])
        return rows

    def image_hw(self, cam: str) -> tuple[int, int] | None:
        """(height, width) the features declare for `cam`'s images."""
        shape = ((self.attrs.get("features") or {}).get(IMAGE_PREFIX + cam) or {}).get("shape") or []
        return (int(shape[0]), int(shape[1])) if len(shape) >= 2 else None

    @property
    def calibration(self) -> dict[str, Any] | None:
        """The calibration as upstream's block, whichever form it was stored in (None: none)."""
        if not self._calibration_read:
            try:
                self._calibration = calib.effective_block(self.attrs)
            except calib.CalibrationError as exc:
                raise EpisodeError(f"{self.path}: calibration: {exc}") from None
            self._calibration_read = True
        return self._calibration

    def intrinsics(self, cam: str) -> dict | None:
        """`cam`'s intrinsics as egomimic_hw Intrinsics.as_dict(), or None when not calibrated."""
        try:
            return calib.intrinsics_of(self.calibration, cam, self.image_hw(cam))
        except calib.CalibrationError as exc:
            raise EpisodeError(f"{self.path}: {exc}") from None

    def annotations(self) -> list[dict[str, Any]]:
        """Upstream's language annotations ({text, start_idx, end_idx}, end exclusive); [] if none."""
        if ANNOTATIONS_KEY not in self.array_keys:
            return []
        out = []
        node = self._array(ANNOTATIONS_KEY)
        with self._reading("the annotations"):
            entries = np.asarray(node[:]).reshape(-1)
        for entry in entries:
            value = entry.item() if isinstance(entry, np.void) else entry
            if isinstance(value, (bytes, bytearray, memoryview)):
                value = bytes(value).decode("utf-8")
            try:
                value = json.loads(value) if isinstance(value, str) else value
            except json.JSONDecodeError as exc:
                raise EpisodeError(f"{self.path}: annotation {entry!r} is not JSON: {exc}") from None
            if isinstance(value, Mapping):
                out.append(dict(value))
        return out

    def meta(self) -> EpisodeMeta:
        a = self.attrs
        if not self.cameras:
            raise EpisodeError(f"{self.path} stores no images.* array")
        hw = self.image_hw(self.cameras[0])
        if hw is None:
            hw = self.image(self.cameras[0], 0).shape[:2] if self.length else (480, 640)
        return EpisodeMeta(
            task_name=a.get("task_name") or a.get("task") or "unnamed",
            cameras=self.cameras,
            fps=self.fps,
            embodiment=a.get("embodiment") or a.get("robot_type") or "",
            task_description=a.get("task_description", ""),
            image_width=int(hw[1]),
            image_height=int(hw[0]),
            jpeg_quality=a.get("jpeg_quality", 85),
            calibration=self.calibration or {},
        )
