"""The EVA episode format: one zarr v3 store per episode, written at 30 Hz, read by training and replay.

Layout (docs/eva.md "Episodes", plus what replay and crash recovery need):

    <YYYY-mm-dd-HH-MM-SS-ffffff>.zarr/        group, zarr_format 3
      {left,right}.obs_ee_pose, .cmd_ee_pose  (T, 7) float32  [x, y, z, qw, qx, qy, qz], DATASET frame
      {left,right}.obs_joints, .cmd_joints    (T, 6) float32  rad
      {left,right}.obs_gripper, .cmd_gripper  (T, 1) float32  normalized, 0 closed .. 1 open
      images.<cam>                            (T,) variable-length bytes: one JPEG (q85, RGB 640x480) per frame
      timestamps_ns                           (T,) int64  the step's stamp (observation time, ROS ns)
      stamps.<cam>                            (T,) int64  capture stamp of that camera's frame (ROS ns)
    attributes: embodiment, total_frames, fps, task_name, task_description, features,
      data_status ("recording" while open, then "complete" or "partial"), calibration,
      format_version, frames_committed (the commit marker).
Arm sides and default camera names are egomimic_hw.description's (ARMS, CAMERAS).

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
- Crash safety: each key is written atomically by zarr, but array shapes cannot be trusted
  after a crash (a capacity, or a resize ahead of its data). The writer advances
  `frames_committed` only after a block's data are written; the reader truncates every array
  to it, and an episode whose data_status is not "complete" is reported partial. A crash
  loses at most the unflushed block (<= 1 s).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import shutil
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
import zarr
from zarr.dtype import VariableLengthBytes

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
FORMAT_VERSION = 1
NUMERIC_CHUNK_STEPS = 100
INITIAL_CAPACITY_STEPS = 900
"""30 s at 30 Hz; doubled whenever an episode grows past it."""
NAME_FORMAT = "%Y-%m-%d-%H-%M-%S-%f"


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
    """Per camera: {width, height, fx, fy, cx, cy}; "extrinsics": {name: 4x4 list}."""

    def __post_init__(self) -> None:
        if not self.task_name:
            raise EpisodeError("task_name must be a non-empty string")
        if not self.cameras or len(set(self.cameras)) != len(self.cameras):
            raise EpisodeError(f"cameras must be unique names, got {self.cameras}")
        if not (math.isfinite(self.fps) and self.fps > 0):
            raise EpisodeError(f"fps must be > 0, got {self.fps}")
        if not 1 <= self.jpeg_quality <= 100:
            raise EpisodeError(f"jpeg_quality must be in [1, 100], got {self.jpeg_quality}")

    def features(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for key in numeric_keys():
            name = key.split(".", 1)[1]
            out[key] = {"dtype": "float32", "shape": [NUMERIC_FIELDS[name]], "names": FIELD_NAMES[name]}
        for cam in self.cameras:
            out[f"images.{cam}"] = {
                "dtype": "jpeg",
                "shape": [self.image_height, self.image_width, 3],
                "names": ["height", "width", "rgb"],
            }
            out[f"stamps.{cam}"] = {"dtype": "int64", "shape": [], "names": ["capture_stamp_ns"]}
        out["timestamps_ns"] = {"dtype": "int64", "shape": [], "names": ["stamp_ns"]}
        return out


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
        if self.path.exists():
            if not overwrite:
                raise EpisodeError(f"{self.path} exists; refusing to overwrite an episode")
            shutil.rmtree(self.path)
        self.meta = meta
        self.block_steps = block_steps
        self._capacity = max(INITIAL_CAPACITY_STEPS, block_steps)
        self._committed = 0
        self._closed = False
        self._buffer: list[tuple[int, dict[str, bytes], dict[str, int], dict[str, np.ndarray]]] = []
        self._group = zarr.open_group(str(self.path), mode="w-", zarr_format=3)
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
            self._arrays["timestamps_ns"] = self._group.create_array(
                "timestamps_ns", shape=(self._capacity,), chunks=(NUMERIC_CHUNK_STEPS,), dtype="int64", fill_value=0
            )
            for cam in meta.cameras:
                self._arrays[f"stamps.{cam}"] = self._group.create_array(
                    f"stamps.{cam}", shape=(self._capacity,), chunks=(NUMERIC_CHUNK_STEPS,), dtype="int64", fill_value=0
                )
                # JPEG does not compress further: no compressor. One shard per block.
                self._arrays[f"images.{cam}"] = self._group.create_array(
                    f"images.{cam}",
                    shape=(self._capacity,),
                    chunks=(1,),
                    shards=(block_steps,),
                    dtype=VariableLengthBytes(),
                    compressors=None,
                )
        self._group.attrs.update(
            {
                "format_version": FORMAT_VERSION,
                "embodiment": meta.embodiment,
                "fps": meta.fps,
                "task_name": meta.task_name,
                "task_description": meta.task_description,
                "cameras": list(meta.cameras),
                "jpeg_quality": meta.jpeg_quality,
                "features": meta.features(),
                "calibration": meta.calibration,
                "data_status": "recording",
                "frames_committed": 0,
                "total_frames": 0,
            }
        )

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
        if isinstance(image, (bytes, bytearray, memoryview)):
            return bytes(image)
        img = np.asarray(image)
        expected = (self.meta.image_height, self.meta.image_width, 3)
        if img.shape != expected or img.dtype != np.uint8:
            raise EpisodeError(f"images[{cam!r}] must be uint8 {expected} RGB, got {img.dtype} {img.shape}")
        return simplejpeg.encode_jpeg(np.ascontiguousarray(img), quality=self.meta.jpeg_quality, colorspace="RGB")

    def flush(self) -> None:
        """Write the buffered steps as one block, then advance the commit marker."""
        if not self._buffer:
            return
        start, n = self._committed, len(self._buffer)
        stop = start + n
        with _vlen_bytes_accepted():
            if stop > self._capacity:
                self._grow(stop)
            self._arrays["timestamps_ns"][start:stop] = np.array([b[0] for b in self._buffer], dtype=np.int64)
            for cam in self.meta.cameras:
                blob = np.empty(n, dtype=object)
                blob[:] = [b[1][cam] for b in self._buffer]
                self._arrays[f"images.{cam}"][start:stop] = blob
                self._arrays[f"stamps.{cam}"][start:stop] = np.array([b[2][cam] for b in self._buffer], dtype=np.int64)
            for key in numeric_keys():
                self._arrays[key][start:stop] = np.stack([b[3][key] for b in self._buffer])
        self._buffer.clear()
        self._committed = stop
        self._group.attrs["frames_committed"] = stop  # the commit: after the data, its own write

    def _grow(self, needed: int) -> None:
        while self._capacity < needed:
            self._capacity *= 2
        for arr in self._arrays.values():
            arr.resize((self._capacity, *arr.shape[1:]))

    def close(self, status: str = "complete") -> int:
        """Flush, trim every array to the episode length, write the final attributes. Returns T."""
        if status not in ("complete", "partial"):
            raise EpisodeError(f"status must be 'complete' or 'partial', got {status!r}")
        if self._closed:
            return self._committed
        self.flush()
        with _vlen_bytes_accepted():
            for arr in self._arrays.values():
                arr.resize((self._committed, *arr.shape[1:]))
        self._group.attrs.update({"total_frames": self._committed, "data_status": status})
        self._closed = True
        return self._committed

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.close("complete")
            return
        try:  # keep what can be kept, but never hide the exception that ended the episode
            self.close("partial")
        except Exception as close_exc:  # noqa: BLE001
            warnings.warn(f"episode {self.path}: closing as partial failed too: {close_exc}", stacklevel=2)


class EpisodeReader:
    """Reads one episode; every array is cut to the committed length (see module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._group = zarr.open_group(str(self.path), mode="r", zarr_format=3)
        except (FileNotFoundError, zarr.errors.GroupNotFoundError) as exc:
            raise EpisodeError(f"{self.path} is not an EVA episode (no zarr v3 group): {exc}") from None
        self.attrs: dict[str, Any] = dict(self._group.attrs)
        if "frames_committed" not in self.attrs or "cameras" not in self.attrs:
            raise EpisodeError(f"{self.path} lacks the EVA episode attributes (frames_committed, cameras)")
        self.length = int(self.attrs["frames_committed"])
        self.data_status = "complete" if self.attrs.get("data_status") == "complete" else "partial"
        self.cameras: tuple[str, ...] = tuple(self.attrs["cameras"])
        self.fps = float(self.attrs["fps"])
        self._cache: dict[str, zarr.Array] = {}

    def __len__(self) -> int:
        return self.length

    def _array(self, key: str) -> zarr.Array:
        if key not in self._cache:
            try:
                with _vlen_bytes_accepted():
                    node = self._group[key]
            except KeyError:
                raise EpisodeError(f"{self.path} has no array {key!r}") from None
            if not isinstance(node, zarr.Array):
                raise EpisodeError(f"{self.path}: {key!r} is a group, not an array")
            self._cache[key] = node
        return self._cache[key]

    def array(self, key: str) -> np.ndarray:
        """A whole numeric array, (T, ...) cut to the committed length."""
        return np.asarray(self._array(key)[: self.length])

    @property
    def timestamps_ns(self) -> np.ndarray:
        return self.array("timestamps_ns")

    def image_stamps_ns(self, cam: str) -> np.ndarray:
        return self.array(f"stamps.{cam}")

    def jpeg(self, cam: str, t: int) -> bytes:
        if cam not in self.cameras:
            raise EpisodeError(f"{self.path} has no camera {cam!r}; it has {list(self.cameras)}")
        if not 0 <= t < self.length:
            raise IndexError(f"frame {t} outside [0, {self.length})")
        return bytes(np.asarray(self._array(f"images.{cam}")[t : t + 1])[0])  # arr[t] is a 0-d object array

    def image(self, cam: str, t: int) -> np.ndarray:
        """RGB uint8 (H, W, 3)."""
        return simplejpeg.decode_jpeg(self.jpeg(cam, t), colorspace="RGB")

    def window(self, key: str, t: int, horizon: int) -> np.ndarray:
        """Rows [t, t + horizon) of a numeric array, padded past the end with the last row
        (what training reads, docs/eva.md)."""
        if not 0 <= t < self.length or horizon < 1:
            raise IndexError(f"window [{t}, {t}+{horizon}) outside an episode of {self.length}")
        rows = np.asarray(self._array(key)[t : min(t + horizon, self.length)])
        if rows.shape[0] < horizon:
            rows = np.concatenate([rows, np.repeat(rows[-1:], horizon - rows.shape[0], axis=0)])
        return rows

    def meta(self) -> EpisodeMeta:
        a = self.attrs
        shape = a["features"][f"images.{self.cameras[0]}"]["shape"]
        return EpisodeMeta(
            task_name=a["task_name"],
            cameras=self.cameras,
            fps=self.fps,
            embodiment=a["embodiment"],
            task_description=a.get("task_description", ""),
            image_width=shape[1],
            image_height=shape[0],
            jpeg_quality=a.get("jpeg_quality", 85),
            calibration=a.get("calibration", {}),
        )
