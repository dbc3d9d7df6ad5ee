"""Upstream EgoVerse's side of the episode interchange, re-implemented here from its source so the
tests run without it (it needs torch, S3 and its registry). Written from, in GaTech-RL2/EgoVerse:

- READER: `egomimic/rldb/zarr/zarr_dataset_multi.py` @ 00581e772147906be359de123bc0638b61f34236
  (`ZarrEpisode`: open_group("r"), `metadata` = attrs, `keys` = metadata["features"],
  read((start, end)) = arr[start:end] or arr[start:start+1][0]; `ZarrDataset`: len =
  total_frames, `embodiment` looked up by name, image keys = features dtype "jpeg", a key with a
  horizon reads [t, min(t+h, total_frames)) and repeats its last row up to h, JPEG decoded to CHW
  in [0, 1]), and the resolver's status filter of `episode_attrs.py` @
  1c49f2652917e12c8faec2dc87f8828a5001b8da (a missing data_status is "complete"; only "complete"
  episodes are loaded).
- RULES: `schema/episode_v3.yaml` @ 5fc82f368f7f0e0cc0fd6d90c677b40441ee89dd (attribute types and
  choices, array shapes with T a lower bound on axis 0, the RGB clock strictly increasing) and
  `calibration.py` @ 06335502ab8da7b3e372ebbe27176cc7def975fc (the block's fields).
- WRITER: `zarr_writer.py` @ 1c49f2652917e12c8faec2dc87f8828a5001b8da (`ZarrWriter.write`: numeric
  arrays zero-padded to a multiple of `chunk_timesteps` (100), chunks of 100, one shard per array;
  images JPEG q85, variable-length bytes, one frame per chunk, padded with the last frame;
  `annotations` JSON bytes {text, start_idx, end_idx}; features {dtype, shape, names ["dim_i"] /
  ["height", "width", "channel"]}; attrs embodiment, data_status, total_frames, fps (int),
  task_name, task_description, features, calibration, intrinsics, extrinsics; no commit marker).
The key map is the Fold EVA one of docs/eva.md.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
import zarr
from zarr.dtype import VariableLengthBytes

from egomimic_hw.description import ARMS, CAMERAS
from egomimic_hw.embodiment import embodiment_by_name

FOLD_EVA_KEY_MAP: dict[str, dict[str, Any]] = {
    **{f"cam.{c}": {"key_type": "camera_keys", "zarr_key": f"images.{c}"} for c in CAMERAS},
    **{
        f"{a.value}.{n}": {"key_type": "proprio_keys", "zarr_key": f"{a.value}.{n}", "horizon": 2}
        for a in ARMS
        for n in ("obs_ee_pose", "obs_gripper")
    },
    **{
        f"{a.value}.{n}": {"key_type": "action_keys", "zarr_key": f"{a.value}.{n}", "horizon": 101}
        for a in ARMS
        for n in ("cmd_ee_pose", "cmd_gripper")
    },
}
CHUNK = 100
JPEG_QUALITY = 85


class UpstreamDataset:
    """ZarrEpisode + ZarrDataset, as far as loading and reading one episode goes."""

    def __init__(self, path: Path, key_map: dict[str, dict[str, Any]]):
        self.store = zarr.open_group(str(path), mode="r")
        self.metadata = dict(self.store.attrs)
        self.keys = self.metadata["features"]  # ZarrEpisode's constructor reads it: required
        self.total_frames = self.metadata["total_frames"]
        self.embodiment_id = int(embodiment_by_name(self.metadata["embodiment"]))
        self.image_keys = {k for k, info in self.keys.items() if info.get("dtype") == "jpeg"}
        self.key_map = key_map

    @staticmethod
    def loads(attrs: dict) -> bool:
        """The resolver's filter: a missing status is complete; only complete episodes load."""
        return (attrs.get("data_status") or "complete") == "complete"

    def __len__(self) -> int:
        return self.total_frames

    def _read(self, key: str, start: int, end: int | None):
        arr = self.store[key]
        return arr[start:end] if end is not None else arr[start : start + 1][0]

    def __getitem__(self, idx: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, spec in self.key_map.items():
            horizon = spec.get("horizon")
            end = min(idx + horizon, self.total_frames) if horizon is not None else None
            value = self._read(spec["zarr_key"], idx, end)
            if horizon is not None and isinstance(value, np.ndarray) and value.shape[0] < horizon:
                value = np.concatenate([value, np.repeat(value[-1:], horizon - value.shape[0], axis=0)])
            if spec["zarr_key"] in self.image_keys:
                value = np.transpose(simplejpeg.decode_jpeg(bytes(value), colorspace="RGB"), (2, 0, 1)) / 255.0
            out[name] = value
        out["embodiment"] = self.embodiment_id
        return out


def upstream_rule_errors(path: Path, *, strict: bool = True) -> list[str]:
    """What the v3.1 schema's rules, applied to EVA (a bimanual parallel-jaw robot), call errors
    (with `strict`, the strict-only rules too)."""
    store = zarr.open_group(str(path), mode="r")
    a = dict(store.attrs)
    errors = []

    def need(name: str, kind: type, required: bool | str, **rule):
        if name not in a:
            if required is True or (required == "strict" and strict):
                errors.append(f"attrs.{name}: missing")
            return
        v = a[name]
        if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
            errors.append(f"attrs.{name}: expected {kind.__name__}, got {type(v).__name__}")
        elif "min" in rule and v < rule["min"]:
            errors.append(f"attrs.{name}: below {rule['min']}")
        elif "choices" in rule and v not in rule["choices"]:
            errors.append(f"attrs.{name}: {v!r} not in {rule['choices']}")

    need("embodiment", str, True)
    need("total_frames", int, True, min=1)
    need("fps", int, True, min=1)
    need("data_status", str, "strict", choices=["complete", "structural_sample"])
    need("task_name", str, True)
    need("features", dict, True)
    need("schema_version", str, "strict", choices=["v3.0", "v3.1"])
    need("calibration", dict, "strict")
    block = a.get("calibration") or {}
    if block:
        if set(block) - {"reference_frame", "cameras", "arm_bases"}:
            errors.append(f"calibration: unknown fields {set(block)}")
        cams = block.get("cameras") or {}
        for name, cam in cams.items():
            if set(cam) - {"K", "model", "distortion", "resolution", "rectified", "ref_T_cam"}:
                errors.append(f"calibration.cameras[{name}]: unknown fields {set(cam)}")
            if "K" in cam and np.asarray(cam["K"]).shape != (3, 4):
                errors.append(f"calibration.cameras[{name}].K is not 3x4")
        ref = block.get("reference_frame", "")
        if not (ref in ("robot_base", "slam_world") or ref.removeprefix("camera:") in cams):
            errors.append(f"calibration.reference_frame {ref!r}")
        for side, m in (block.get("arm_bases") or {}).items():
            if np.asarray(m).shape != (4, 4):
                errors.append(f"calibration.arm_bases[{side}] is not 4x4")
    t = a.get("total_frames") or 0
    arrays = dict(store.arrays())
    for side in (arm.value for arm in ARMS):
        for name, width, required in (
            ("obs_ee_pose", 7, True),
            ("cmd_ee_pose", 7, False),
            ("obs_joints", 6, False),
            ("cmd_joints", 6, False),
            ("obs_gripper", 1, True),
            ("cmd_gripper", 1, True),
        ):
            arr = arrays.get(f"{side}.{name}")
            if arr is None:
                if required:
                    errors.append(f"{side}.{name}: missing")
            elif arr.ndim != 2 or arr.shape[0] < t or arr.shape[1] != width or arr.dtype.kind != "f":
                errors.append(f"{side}.{name}: shape {arr.shape} {arr.dtype}")
    for key, arr in arrays.items():
        if key.startswith("images.") and (arr.ndim != 1 or arr.shape[0] < t or arr.dtype.kind not in "OSV"):
            errors.append(f"{key}: shape {arr.shape} {arr.dtype}")
    clock = arrays.get("obs_rgb_timestamps_ns")
    if clock is None:
        if strict:
            errors.append("obs_rgb_timestamps_ns: missing")
    elif clock.dtype.kind not in "iu" or clock.shape[0] < t or np.any(np.diff(np.asarray(clock[:t])) <= 0):
        errors.append("obs_rgb_timestamps_ns: not strictly increasing int over [0, T)")
    return errors


def write_like_upstream(
    path: Path,
    numeric: dict[str, np.ndarray],
    images: dict[str, np.ndarray],
    *,
    fps: int = 30,
    task_name: str = "fold_clothes",
    annotations: list[tuple[str, int, int]] | None = None,
    attrs: dict[str, Any] | None = None,
) -> Path:
    """One episode laid out as upstream's ZarrWriter.write lays it out (module docstring).
    `attrs` adds to (or, with None values, removes from) the attributes it writes."""
    lengths = {len(v) for v in (*numeric.values(), *images.values())}
    assert len(lengths) == 1, lengths
    total = lengths.pop()
    padded = -(-total // CHUNK) * CHUNK
    store = zarr.open_group(str(path), mode="w", zarr_format=3)
    features: dict[str, dict[str, Any]] = {}
    for key, data in numeric.items():
        data = np.concatenate([data, np.zeros((padded - total, *data.shape[1:]), data.dtype)])
        store.create_array(key, data=data, chunks=(min(CHUNK, padded), *data.shape[1:]), shards=data.shape)
        features[key] = {
            "dtype": str(data.dtype),
            "shape": list(data.shape[1:]),
            "names": [f"dim_{i}" for i in range(data.ndim - 1)],
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=zarr.errors.UnstableSpecificationWarning)
        for key, frames in images.items():
            blobs = np.empty(padded, dtype=object)
            for i in range(padded):
                blobs[i] = simplejpeg.encode_jpeg(frames[min(i, total - 1)], quality=JPEG_QUALITY, colorspace="RGB")
            arr = store.create_array(key, shape=(padded,), chunks=(1,), shards=(padded,), dtype=VariableLengthBytes())
            arr[:] = blobs
            features[key] = {"dtype": "jpeg", "shape": list(frames.shape[1:]), "names": ["height", "width", "channel"]}
        spans = annotations or []
        encoded = np.array(
            [json.dumps({"text": s, "start_idx": int(b), "end_idx": int(e)}).encode() for s, b, e in spans],
            dtype=object,
        )
        arr = store.create_array(
            "annotations",
            shape=(len(spans),),
            chunks=(max(1, len(spans)),),
            shards=(max(1, len(spans)),),
            dtype=VariableLengthBytes(),
        )
        if spans:
            arr[:] = encoded
    features["annotations"] = {"dtype": "json", "shape": [len(spans)], "names": ["json"], "format": "annotation_v1"}
    meta: dict[str, Any] = {
        "embodiment": "eva_bimanual",
        "data_status": "complete",
        "total_frames": total,
        "fps": fps,
        "task_name": task_name,
        "task_description": "",
        "features": features,
    }
    for key, value in (attrs or {}).items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    store.attrs.update(meta)
    return path


def pinhole_block(cameras: dict[str, tuple[int, int]], fx: float = 266.5) -> dict[str, Any]:
    """A calibration block in the form upstream's Calibration.to_jsonable() writes."""
    return {
        "reference_frame": "camera:front_1",
        "cameras": {
            name: {
                "model": "PINHOLE",
                "rectified": True,
                "K": [[fx, 0.0, w / 2 + 0.5, 0.0], [0.0, fx, h / 2 - 0.5, 0.0], [0.0, 0.0, 1.0, 0.0]],
                "resolution": [w, h],
            }
            for name, (w, h) in cameras.items()
        },
    }
