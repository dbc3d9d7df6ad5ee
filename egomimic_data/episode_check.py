"""What `egomimic-episodes` does: list episodes, check them against the documented contract,
finalize the ones a crash left open.

The contract (docs/eva.md "Episodes") is upstream EgoVerse's v3.1 episode schema
(`egomimic/rldb/zarr/schema/episode_v3.yaml`, interpreted by its `validate.py`) where it applies
to EVA, plus this project's commit marker:
- errors are what upstream's validator reports as errors (a missing required attribute or array,
  a wrong type or shape, a degenerate pose track or calibration, a non-increasing clock, bad
  annotations), what its readers need (features naming every array, JPEG that decodes, arrays at
  least `total_frames` long), and this project's own invariants (a finalized episode has
  total_frames == frames_committed; `cameras` matches the images);
- warnings are upstream's `required: strict` rules (schema_version, data_status, the RGB clock,
  one camera matrix per image stream) and a "partial" status (upstream's resolvers skip it);
  `strict` makes them errors, as upstream's --strict does.
Repair never deletes committed data: it trims arrays to the commit marker (what lies past it was
never committed) and writes total_frames and data_status, in that order, so a repair cut short
is simply run again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import simplejpeg
import zarr

from egomimic_data import calibration as calib
from egomimic_data.episode_format import (
    ANNOTATIONS_KEY,
    IMAGE_PREFIX,
    NUMERIC_FIELDS,
    RGB_CLOCK_KEY,
    STATUS_COMPLETE,
    STATUS_PARTIAL,
    STATUS_RECORDING,
    UPSTREAM_STATUSES,
    EpisodeError,
    EpisodeReader,
    _vlen_bytes_accepted,
    recording_in_progress,
)
from egomimic_hw.description import ARMS, CAMERAS

KNOWN_SCHEMA_VERSIONS = ("v3.0", "v3.1")
REQUIRED_PER_SIDE = {"obs_ee_pose": 7, "obs_gripper": 1, "cmd_gripper": 1}
"""Upstream's required arrays for a parallel-jaw robot side: (T, width) float."""
OPTIONAL_PER_SIDE = {name: NUMERIC_FIELDS[name] for name in ("cmd_ee_pose", "obs_joints", "cmd_joints")}
POSE_SUFFIXES = ("obs_ee_pose", "cmd_ee_pose")
IDENTITY_ROTATION_FRACTION = 0.01
BANNED_KEY_SUBSTRING = "relative_timestamp"
BANNED_TEXT_DELIMITER = " | "
EVA_EMBODIMENT = "eva_bimanual"


@dataclass
class CheckReport:
    path: Path
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    frames: int = 0
    status: str = "invalid"

    def ok(self, strict: bool = False) -> bool:
        return not self.errors and not (strict and self.warnings)


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _kind(dtype: np.dtype) -> str:
    return {"i": "int", "u": "int", "f": "float", "O": "object", "S": "object", "V": "object"}.get(dtype.kind, "any")


def _check_attributes(a: Mapping[str, Any], r: CheckReport, finalized: bool) -> None:
    if not isinstance(a.get("embodiment"), str) or not a.get("embodiment"):
        r.errors.append(f"attribute embodiment must be a non-empty string, got {a.get('embodiment')!r}")
    total = a.get("total_frames")
    if finalized and not (_is_int(total) and total >= 1):
        r.errors.append(f"attribute total_frames must be an int >= 1, got {total!r}")
    fps = a.get("fps")
    if not (_is_int(fps) and fps >= 1):
        r.errors.append(f"attribute fps must be an int >= 1 (upstream's schema), got {fps!r}")
    if not isinstance(a.get("task_name"), str) or not a.get("task_name"):
        r.errors.append(f"attribute task_name must be a non-empty string, got {a.get('task_name')!r}")
    description = a.get("task_description", "")
    if not isinstance(description, str):
        r.errors.append("attribute task_description must be a string")
    elif BANNED_TEXT_DELIMITER in description:
        r.errors.append(f"task_description encodes metadata after {BANNED_TEXT_DELIMITER!r}: {description!r}")
    if not isinstance(a.get("features"), Mapping):
        r.errors.append("attribute features must be a mapping {key: {dtype, shape, names}}")
    version = a.get("schema_version")
    if version is None:
        r.warnings.append("attribute schema_version is absent (upstream: required under --strict)")
    elif version not in KNOWN_SCHEMA_VERSIONS:
        r.errors.append(f"schema_version {version!r} is not one of {list(KNOWN_SCHEMA_VERSIONS)}")
    status = a.get("data_status")
    if status is None:
        r.warnings.append("attribute data_status is absent (reads as complete; upstream: required under --strict)")
    elif status == STATUS_PARTIAL:
        r.warnings.append(
            "data_status is 'partial': the episode was cut short; upstream's resolvers skip it and its "
            f"validator accepts only {list(UPSTREAM_STATUSES)}"
        )
    elif status not in (*UPSTREAM_STATUSES, STATUS_RECORDING):
        r.errors.append(f"data_status {status!r} is not one of {[*UPSTREAM_STATUSES, STATUS_PARTIAL]}")
    for legacy in ("intrinsics", "extrinsics"):
        if a.get(legacy) is not None and not isinstance(a[legacy], Mapping):
            r.errors.append(f"attribute {legacy} must be a mapping (upstream's schema)")


def _check_calibration(a: Mapping[str, Any], reader: EpisodeReader, r: CheckReport) -> None:
    stored = a.get("calibration")
    if stored and not calib.is_block(stored):
        r.errors.append(
            "calibration is in the project's format_version 1 form, which upstream's parser refuses "
            "(re-record, or rewrite it as {reference_frame, cameras, arm_bases})"
        )
    elif stored:
        problems = calib.block_problems(stored)
        if problems:
            r.errors.extend(f"calibration: {p}" for p in problems)
            return
    else:
        r.warnings.append("attribute calibration is absent (upstream: required under --strict)")
    try:
        block = calib.effective_block(a)
    except calib.CalibrationError as exc:
        r.errors.append(f"calibration: {exc}")
        return
    cameras = (block or {}).get("cameras", {})
    if not any(cam.get("K") is not None for cam in cameras.values()):
        r.errors.append("the episode states no camera matrix (upstream's calibration_present)")
        return
    uncovered = [c for c in reader.cameras if (cameras.get(c) or {}).get("K") is None]
    if uncovered:
        r.warnings.append(f"no camera matrix for image stream(s) {uncovered} (upstream's camera_coverage)")
    ref = str((block or {}).get("reference_frame", ""))
    ref_cam = ref[len(calib.CAMERA_PREFIX) :] if ref.startswith(calib.CAMERA_PREFIX) else None
    for name, cam in cameras.items():
        if cam.get("ref_T_cam") is not None and name != ref_cam and np.array_equal(cam["ref_T_cam"], np.eye(4)):
            r.errors.append(f"calibration: cameras[{name!r}].ref_T_cam is exactly the identity (never measured)")
        if cam.get("K") is None:
            continue
        k = np.asarray(cam["K"], dtype=np.float64)
        hw = reader.image_hw(name)
        size = tuple(cam["resolution"]) if cam.get("resolution") else ((hw[1], hw[0]) if hw else None)
        if size is not None and k[0, 0] == k[1, 1] == size[0] and k[0, 2] == size[0] / 2 and k[1, 2] == size[1] / 2:
            r.errors.append(f"calibration: cameras[{name!r}].K is a synthesized centred pinhole (fx = fy = W)")
        if hw is not None and cam.get("resolution") and list(cam["resolution"]) != [hw[1], hw[0]]:
            r.errors.append(
                f"calibration: cameras[{name!r}] is calibrated at {cam['resolution']} but its images are "
                f"{hw[1]}x{hw[0]}: K does not describe the stored frames"
            )
    for side, base in ((block or {}).get("arm_bases") or {}).items():
        ref_T_cam = np.asarray((cameras.get(ref_cam) or {}).get("ref_T_cam", np.eye(4)), dtype=np.float64)
        if ref_cam is not None and np.allclose(np.linalg.inv(np.asarray(base)) @ ref_T_cam, np.eye(4), atol=0.0):
            r.errors.append(f"calibration: the camera sits exactly at the {side} arm base (base_T_cam is the identity)")


def _check_arrays(reader: EpisodeReader, arrays: Mapping[str, zarr.Array], r: CheckReport) -> None:
    t = reader.length
    for key, arr in arrays.items():
        if key != ANNOTATIONS_KEY and arr.shape[0] < t:
            r.errors.append(f"{key} holds {arr.shape[0]} frames for an episode of {t}")
        if BANNED_KEY_SUBSTRING in key:
            r.errors.append(f"{key} stores a second time base; keep one clock per episode")
    wanted = {f"{a.value}.{n}": (w, True) for a in ARMS for n, w in REQUIRED_PER_SIDE.items()}
    wanted |= {f"{a.value}.{n}": (w, False) for a in ARMS for n, w in OPTIONAL_PER_SIDE.items()}
    for key, (width, required) in wanted.items():
        if key not in arrays:
            if required:
                r.errors.append(f"{key} is missing (upstream requires it for a parallel-jaw arm)")
            continue
        arr = arrays[key]
        if arr.ndim != 2 or arr.shape[1] != width or _kind(arr.dtype) != "float":
            r.errors.append(f"{key} must be (T, {width}) float, got {arr.shape} {arr.dtype}")
    for key, arr in arrays.items():
        if key.startswith(IMAGE_PREFIX) and (arr.ndim != 1 or _kind(arr.dtype) != "object"):
            r.errors.append(f"{key} must be (T,) variable-length bytes, got {arr.shape} {arr.dtype}")
    if reader.attrs.get("embodiment") == EVA_EMBODIMENT:
        missing = [IMAGE_PREFIX + c for c in CAMERAS if IMAGE_PREFIX + c not in arrays]
        if missing:
            r.errors.append(f"{missing} missing: the Fold EVA key map reads them (docs/eva.md)")
    for key in (k for k in arrays if k.endswith(POSE_SUFFIXES)):
        arr = arrays[key]
        if arr.ndim != 2 or arr.shape[1] != 7 or t < 2:
            continue
        poses = np.asarray(arr[:t])
        if len(np.unique(poses, axis=0)) == 1:
            r.errors.append(f"{key} is constant across all {t} frames (upstream's pose_degeneracy)")
        q = poses[:, 3:7]
        identity = np.all(q == (1, 0, 0, 0), axis=1) | np.all(q == (-1, 0, 0, 0), axis=1)
        if identity.mean() > IDENTITY_ROTATION_FRACTION:
            r.errors.append(f"{key} holds an exact identity rotation on {identity.mean():.0%} of frames")
    if RGB_CLOCK_KEY not in arrays:
        r.warnings.append(f"{RGB_CLOCK_KEY} is absent (upstream: required under --strict)")
    else:
        clock = arrays[RGB_CLOCK_KEY]
        if clock.ndim != 1 or _kind(clock.dtype) != "int":
            r.errors.append(f"{RGB_CLOCK_KEY} must be (T,) int, got {clock.shape} {clock.dtype}")
        elif t >= 2:
            steps = np.diff(np.asarray(clock[:t]).astype(np.int64))
            if np.any(steps <= 0):
                r.errors.append(f"{RGB_CLOCK_KEY} does not increase on {int(np.sum(steps <= 0))} of {len(steps)} steps")
            quantum = int(np.gcd.reduce(np.abs(steps)))
            if quantum >= 64 and quantum & (quantum - 1) == 0:
                r.errors.append(f"{RGB_CLOCK_KEY} is quantized to {quantum} ns: float seconds converted to ns")
    if ANNOTATIONS_KEY in arrays:
        try:
            spans = reader.annotations()
        except EpisodeError as exc:
            r.errors.append(str(exc))
            spans = []
        for i, s in enumerate(spans):
            start, end = int(s.get("start_idx", -1)), int(s.get("end_idx", -1))
            if not 0 <= start < end <= t:
                r.errors.append(f"annotation {i} spans [{start}, {end}), outside [0, {t}) or empty")
            if BANNED_TEXT_DELIMITER in str(s.get("text", "")):
                r.errors.append(f"annotation {i} encodes metadata after {BANNED_TEXT_DELIMITER!r}")


def _check_features(a: Mapping[str, Any], arrays: Mapping[str, zarr.Array], r: CheckReport) -> None:
    features = a.get("features")
    if not isinstance(features, Mapping):
        return
    for key, arr in arrays.items():
        entry = features.get(key)
        if not isinstance(entry, Mapping) or not {"dtype", "shape", "names"} <= set(entry):
            r.errors.append(f"features has no {{dtype, shape, names}} entry for array {key}")
            continue
        if _kind(arr.dtype) == "object":
            expected = "json" if key == ANNOTATIONS_KEY else "jpeg"
            if entry["dtype"] != expected:
                r.errors.append(f"features[{key!r}].dtype is {entry['dtype']!r}, expected {expected!r}")
        else:
            if entry["dtype"] != str(arr.dtype):
                r.errors.append(f"features[{key!r}].dtype is {entry['dtype']!r}, the array's {arr.dtype}")
            if list(entry["shape"]) != list(arr.shape[1:]):
                r.errors.append(f"features[{key!r}].shape is {entry['shape']}, the array's {list(arr.shape[1:])}")
    extra = sorted(set(features) - set(arrays))
    if extra:
        r.warnings.append(f"features name arrays the store lacks: {extra}")


def _check_images(reader: EpisodeReader, r: CheckReport) -> None:
    for cam in reader.cameras:
        hw = reader.image_hw(cam)
        for t in sorted({0, reader.length - 1}):
            if t < 0:
                continue
            try:
                img = simplejpeg.decode_jpeg(reader.jpeg(cam, t), colorspace="RGB")
            except (ValueError, EpisodeError) as exc:
                r.errors.append(f"images.{cam}[{t}] is not a decodable JPEG: {exc}")
                continue
            if hw is not None and img.shape[:2] != hw:
                r.errors.append(f"images.{cam}[{t}] is {img.shape[1]}x{img.shape[0]}, features say {hw[1]}x{hw[0]}")


def _arrays(path: Path) -> dict[str, zarr.Array]:
    group = zarr.open_group(str(path), mode="r", zarr_format=3)
    with _vlen_bytes_accepted():
        return dict(group.arrays())


def check_episode(path: str | Path, *, decode_images: bool = True) -> CheckReport:
    """Every problem of one episode against the contract (module docstring); never raises for a
    bad episode, it reports it."""
    r = CheckReport(Path(path))
    try:
        reader = EpisodeReader(path)
        arrays = _arrays(r.path)
    except (EpisodeError, ValueError, OSError) as exc:
        r.errors.append(f"cannot open: {exc}")
        return r
    r.frames, r.status = reader.length, reader.data_status
    a = reader.attrs
    if not reader.finalized:
        live = recording_in_progress(r.path)
        r.status = STATUS_RECORDING if live else STATUS_PARTIAL
        r.errors.append(
            "still being recorded (a live writer holds it)"
            if live
            else "never closed (its writer died): `egomimic-episodes repair` finalizes it as partial"
        )
    _check_attributes(a, r, reader.finalized)
    if reader.has_commit_marker:
        committed = a.get("frames_committed")
        if not (_is_int(committed) and committed >= 0):
            r.errors.append(f"frames_committed must be an int >= 0, got {committed!r}")
        elif reader.finalized and a.get("total_frames") != committed:
            r.errors.append(f"total_frames {a.get('total_frames')} differs from the commit marker {committed}")
    if "cameras" in a:
        stored = sorted(k[len(IMAGE_PREFIX) :] for k in arrays if k.startswith(IMAGE_PREFIX))
        if sorted(a["cameras"]) != stored:
            r.errors.append(f"attribute cameras {a['cameras']} does not match the images stored {stored}")
    _check_calibration(a, reader, r)
    _check_arrays(reader, arrays, r)
    _check_features(a, arrays, r)
    if decode_images and reader.length > 0:
        _check_images(reader, r)
    return r


# -- listing -------------------------------------------------------------------------------------


@dataclass
class EpisodeSummary:
    path: Path
    status: str
    frames: int = 0
    duration_s: float = 0.0
    cameras: tuple[str, ...] = ()
    size_bytes: int = 0
    note: str = ""


def store_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def is_store(path: Path) -> bool:
    return path.is_dir() and (path / "zarr.json").is_file()


def find_episodes(directory: Path) -> list[Path]:
    """`directory` itself when it is a store, else its child stores, by name."""
    if is_store(directory):
        return [directory]
    return sorted(p for p in directory.iterdir() if is_store(p))


def summarize(path: Path) -> EpisodeSummary:
    """Status is complete, partial, recording (a live writer holds it) or invalid; an episode
    whose writer died reads partial, with a note to repair it."""
    try:
        reader = EpisodeReader(path)
    except EpisodeError as exc:
        return EpisodeSummary(path, "invalid", size_bytes=store_size(path), note=str(exc))
    status, note = reader.data_status, ""
    if not reader.finalized:
        if recording_in_progress(path):
            status = STATUS_RECORDING
        else:
            status, note = STATUS_PARTIAL, "never closed (writer died): run `egomimic-episodes repair`"
    return EpisodeSummary(
        path,
        status,
        frames=reader.length,
        duration_s=reader.length / reader.fps,
        cameras=reader.cameras,
        size_bytes=store_size(path),
        note=note,
    )


# -- repair --------------------------------------------------------------------------------------


class RepairRefused(EpisodeError):
    """Repair would not be safe or cannot help; nothing was changed."""


@dataclass
class RepairResult:
    path: Path
    frames: int
    status: str
    actions: list[str] = field(default_factory=list)
    applied: bool = False
    note: str = ""


def repair_episode(path: str | Path, *, dry_run: bool = False) -> RepairResult:
    """Finalize an episode a crash left open (or closed without trimming): every per-frame array
    is trimmed to the commit marker, then total_frames = frames_committed and data_status
    "partial" (a "complete" or "partial" status is kept). Idempotent; with `dry_run`, only says
    what it would do. An upstream episode (no commit marker) needs nothing. Raises RepairRefused
    (nothing changed) for a live recording or a store whose arrays hold fewer frames than were
    committed."""
    path = Path(path)
    if recording_in_progress(path):
        raise RepairRefused(f"{path} is being recorded by a live writer; stop the recorder first")
    reader = EpisodeReader(path)
    if not reader.has_commit_marker:  # upstream's ZarrWriter writes an episode whole: nothing to finalize
        note = "no commit marker (upstream's writer): total_frames is its length"
        return RepairResult(path, reader.length, reader.data_status, note=note)
    committed = int(reader.attrs["frames_committed"])
    arrays = _arrays(path)
    short = {k: a.shape[0] for k, a in arrays.items() if k != ANNOTATIONS_KEY and a.shape[0] < committed}
    if short:
        raise RepairRefused(
            f"{path}: {short} hold fewer frames than the {committed} committed; the store is damaged "
            "beyond what repair does (it never invents data)"
        )
    status = reader.stored_status if reader.stored_status in (STATUS_COMPLETE, STATUS_PARTIAL) else STATUS_PARTIAL
    result = RepairResult(path, committed, str(status))
    for key, arr in sorted(arrays.items()):
        if key != ANNOTATIONS_KEY and arr.shape[0] > committed:
            result.actions.append(f"trim {key} from {arr.shape[0]} to {committed} frames (the commit marker)")
    if reader.attrs.get("total_frames") != committed:
        result.actions.append(f"total_frames {reader.attrs.get('total_frames')} -> {committed}")
    if reader.stored_status != status:
        result.actions.append(f"data_status {reader.stored_status!r} -> {status!r}")
    if dry_run or not result.actions:
        return result
    group = zarr.open_group(str(path), mode="r+", zarr_format=3)
    with _vlen_bytes_accepted():
        for key, arr in group.arrays():
            if key != ANNOTATIONS_KEY and arr.shape[0] > committed:
                arr.resize((committed, *arr.shape[1:]))
    group.attrs.update({"total_frames": committed, "data_status": status})  # last: the finalization
    result.applied = True
    return result


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
