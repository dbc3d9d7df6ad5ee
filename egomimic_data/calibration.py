"""An episode's `calibration` attribute in upstream's v3.1 form, and the project's older form.

Upstream EgoVerse (`egomimic/rldb/zarr/calibration.py`, the `calibration` rule of
`schema/episode_v3.yaml`) stores one block per episode:

    {"reference_frame": "camera:front_1" | "robot_base" | "slam_world",
     "cameras": {cam: {"K": 3x4 [K | 0], "resolution": [W, H], "model": "PINHOLE" | "OPENCV" | ...,
                       "distortion": [...], "rectified": bool, "ref_T_cam": 4x4}},
     "arm_bases": {side: ref_T_armbase 4x4}}

plus, for older readers, `intrinsics` {cam: 3x4 K} and `extrinsics` {side: base_T_cam of the
reference camera}. Its parser rejects any other field, so the block carries nothing else.

The project describes a rig as `egomimic_hw.cameras.base.Intrinsics.as_dict()` per camera
({width, height, fx, fy, cx, cy, distortion (k1, k2, p1, p2, k3)}) and, optionally,
"extrinsics": {"<side>_base_T_<cam>": 4x4}. `to_block` turns that into the block (the plumb-bob
coefficients are OpenCV's first five, so nothing is lost); `intrinsics_of` turns a block back into
the project's per-camera dict for replay. Episodes written before the block (format_version 1)
stored the project's form as `calibration`; `effective_block` reads every form.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from egomimic_hw.description import ARMS

REFERENCE_CAMERA = "front_1"
"""The camera upstream's legacy attributes are expressed against (its LEGACY_REFERENCE_CAMERA)."""
CAMERA_PREFIX = "camera:"
STATIC_FRAMES = ("robot_base", "slam_world")
MODELS: dict[str, tuple[int, ...]] = {"PINHOLE": (0,), "OPENCV": (4, 5, 8, 12, 14), "KANNALA_BRANDT": (4,)}
"""Projection models and the distortion-coefficient counts each accepts (upstream's CAMERA_MODELS)."""
BLOCK_FIELDS = ("reference_frame", "cameras", "arm_bases")
CAMERA_FIELDS = ("K", "model", "distortion", "resolution", "rectified", "ref_T_cam")
PROJECT_FIELDS = ("width", "height", "fx", "fy", "cx", "cy")
_EXTRINSIC_KEY = re.compile(r"^(?P<side>" + "|".join(a.value for a in ARMS) + r")_base_T_(?P<cam>.+)$")


class CalibrationError(ValueError):
    """A calibration that cannot be stored or read; the message names the field."""


def _matrix(value: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{where}: not a numeric array ({exc})") from None
    if arr.shape != shape:
        raise CalibrationError(f"{where}: expected shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise CalibrationError(f"{where}: contains a non-finite value")
    return arr


def _camera_matrix(value: Any, where: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{where}: not a numeric array ({exc})") from None
    if arr.shape == (3, 3):
        arr = np.hstack([arr, np.zeros((3, 1))])
    return _matrix(arr, (3, 4), where)


def block_problems(block: Any) -> list[str]:
    """What upstream's `parse_calibration` would refuse in `block` (empty: it parses)."""
    if not isinstance(block, Mapping):
        return [f"calibration must be a mapping, got {type(block).__name__}"]
    problems = []
    unknown = sorted(set(block) - set(BLOCK_FIELDS))
    if unknown:
        problems.append(f"calibration has unknown field(s) {unknown}; upstream accepts only {list(BLOCK_FIELDS)}")
    cameras = block.get("cameras")
    if not isinstance(cameras, Mapping) or not cameras:
        return [*problems, "calibration.cameras must be a non-empty mapping from camera name to its calibration"]
    for name, cam in cameras.items():
        where = f"calibration.cameras[{name!r}]"
        if not isinstance(cam, Mapping):
            problems.append(f"{where} must be a mapping")
            continue
        unknown = sorted(set(cam) - set(CAMERA_FIELDS))
        if unknown:
            problems.append(f"{where} has unknown field(s) {unknown}; upstream accepts {list(CAMERA_FIELDS)}")
        model = cam.get("model", "PINHOLE")
        if model not in MODELS:
            problems.append(f"{where}.model {model!r} is not one of {sorted(MODELS)}")
        else:
            coefficients = cam.get("distortion") or []
            if not isinstance(coefficients, list) or len(coefficients) not in MODELS[model]:
                problems.append(f"{where}.distortion: model {model} takes {list(MODELS[model])} coefficients")
        resolution = cam.get("resolution")
        if resolution is not None and not (
            isinstance(resolution, list)
            and len(resolution) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in resolution)
        ):
            problems.append(f"{where}.resolution must be [width, height] positive ints, got {resolution!r}")
        if not isinstance(cam.get("rectified", True), bool):
            problems.append(f"{where}.rectified must be a boolean")
        try:
            if cam.get("K") is not None:
                _camera_matrix(cam["K"], f"{where}.K")
            if cam.get("ref_T_cam") is not None:
                _matrix(cam["ref_T_cam"], (4, 4), f"{where}.ref_T_cam")
        except CalibrationError as exc:
            problems.append(str(exc))
    ref = block.get("reference_frame")
    if not isinstance(ref, str) or not (
        ref in STATIC_FRAMES or (ref.startswith(CAMERA_PREFIX) and ref[len(CAMERA_PREFIX) :] in cameras)
    ):
        problems.append(
            f"calibration.reference_frame {ref!r} must be one of {list(STATIC_FRAMES)} or 'camera:<declared camera>'"
        )
    bases = block.get("arm_bases") or {}
    if not isinstance(bases, Mapping):
        problems.append("calibration.arm_bases must map an arm side to a 4x4 ref_T_armbase")
    else:
        for side, matrix in bases.items():
            try:
                _matrix(matrix, (4, 4), f"calibration.arm_bases[{side!r}]")
            except CalibrationError as exc:
                problems.append(str(exc))
    return problems


def is_block(calibration: Any) -> bool:
    return isinstance(calibration, Mapping) and "cameras" in calibration


def _project_camera(name: str, d: Any) -> dict[str, Any]:
    where = f"calibration[{name!r}]"
    if not isinstance(d, Mapping) or any(k not in d for k in PROJECT_FIELDS):
        raise CalibrationError(f"{where} must hold {list(PROJECT_FIELDS)} (egomimic_hw Intrinsics.as_dict())")
    try:
        width, height = int(d["width"]), int(d["height"])
        fx, fy, cx, cy = (float(d[k]) for k in ("fx", "fy", "cx", "cy"))
        distortion = [float(c) for c in d.get("distortion") or ()]
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{where}: {exc}") from None
    if width <= 0 or height <= 0 or fx <= 0 or fy <= 0 or not all(map(math.isfinite, (fx, fy, cx, cy, *distortion))):
        raise CalibrationError(f"{where}: invalid intrinsics {dict(d)}")
    out: dict[str, Any] = {"K": [[fx, 0.0, cx, 0.0], [0.0, fy, cy, 0.0], [0.0, 0.0, 1.0, 0.0]]}
    out["resolution"] = [width, height]
    if any(distortion):
        if len(distortion) not in MODELS["OPENCV"]:
            raise CalibrationError(f"{where}.distortion: {len(distortion)} coefficients, expected 5 (plumb-bob)")
        out.update(model="OPENCV", distortion=distortion, rectified=False)
    else:
        out.update(model="PINHOLE", rectified=True)
    return out


def from_project(calibration: Mapping[str, Any]) -> dict[str, Any] | None:
    """The project's form ({cam: Intrinsics dict}, "extrinsics": {"<side>_base_T_<cam>": 4x4}) as
    upstream's block. The reference frame is the camera the extrinsics are expressed against
    (front_1 when it is among them), else front_1 if calibrated, else the first camera."""
    extrinsics = calibration.get("extrinsics") or {}
    if not isinstance(extrinsics, Mapping):
        raise CalibrationError("calibration['extrinsics'] must map '<side>_base_T_<camera>' to a 4x4")
    cameras = {name: _project_camera(name, d) for name, d in calibration.items() if name != "extrinsics"}
    poses: dict[str, dict[str, np.ndarray]] = {}  # camera -> side -> base_T_cam
    for key, matrix in extrinsics.items():
        m = _EXTRINSIC_KEY.match(str(key))
        if not m:
            raise CalibrationError(f"calibration['extrinsics'] key {key!r} is not '<side>_base_T_<camera>'")
        base_T_cam = _matrix(matrix, (4, 4), f"calibration['extrinsics'][{key!r}]")
        poses.setdefault(m["cam"], {})[m["side"]] = base_T_cam
    if not cameras and not poses:
        return None
    named = list(poses) or list(cameras)
    ref = REFERENCE_CAMERA if REFERENCE_CAMERA in named else named[0]
    cameras.setdefault(ref, {})
    arm_bases = {side: np.linalg.inv(t) for side, t in poses.get(ref, {}).items()}
    for cam, by_side in poses.items():
        if cam == ref:
            continue
        side = next((s for s in by_side if s in arm_bases), None)
        if side is None:
            raise CalibrationError(
                f"calibration['extrinsics'] places {cam!r} in an arm base where the reference camera {ref!r} "
                "is not placed; give '<side>_base_T_{ref}' for the same side"
            )
        cameras.setdefault(cam, {})["ref_T_cam"] = (arm_bases[side] @ by_side[side]).tolist()
    block: dict[str, Any] = {"reference_frame": CAMERA_PREFIX + ref, "cameras": cameras}
    if arm_bases:
        block["arm_bases"] = {side: t.tolist() for side, t in arm_bases.items()}
    return block


def to_block(calibration: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Upstream's block from either form (None when the episode states no calibration).
    Raises CalibrationError with every problem named."""
    if not calibration:
        return None
    if is_block(calibration):
        problems = block_problems(calibration)
        if problems:
            raise CalibrationError("; ".join(problems))
        return dict(calibration)
    return from_project(calibration)


def legacy_attrs(block: Mapping[str, Any] | None) -> dict[str, Any]:
    """`intrinsics` {cam: 3x4 K} and `extrinsics` {side: base_T_cam of the reference camera}, as
    upstream's writer derives them for readers older than the block (absent ones left out)."""
    if not block:
        return {}
    out: dict[str, Any] = {}
    ks = {name: cam["K"] for name, cam in block["cameras"].items() if cam.get("K") is not None}
    if ks:
        out["intrinsics"] = ks
    ref = block.get("reference_frame", "")
    if ref.startswith(CAMERA_PREFIX) and block.get("arm_bases"):
        cam = block["cameras"].get(ref[len(CAMERA_PREFIX) :], {})
        ref_T_cam = np.asarray(cam.get("ref_T_cam", np.eye(4)), dtype=np.float64)
        out["extrinsics"] = {
            side: (np.linalg.inv(np.asarray(t, dtype=np.float64)) @ ref_T_cam).tolist()
            for side, t in block["arm_bases"].items()
        }
    return out


def _lift_legacy(intrinsics: Any, extrinsics: Any) -> dict[str, Any] | None:
    """Upstream's episodes older than the block: {cam: K} (a bare matrix is front_1's) and
    {side: base_T_cam} of front_1."""
    if not intrinsics and not extrinsics:
        return None
    if isinstance(intrinsics, Mapping):
        raw = dict(intrinsics)
    else:
        raw = {REFERENCE_CAMERA: intrinsics} if intrinsics is not None else {}
    cameras: dict[str, dict[str, Any]] = {
        str(name): {"K": _camera_matrix(k, f"intrinsics[{name!r}]").tolist()} for name, k in raw.items()
    }
    block: dict[str, Any] = {"cameras": cameras}
    if isinstance(extrinsics, Mapping) and extrinsics:
        cameras.setdefault(REFERENCE_CAMERA, {})
        block["arm_bases"] = {
            str(side): np.linalg.inv(_matrix(t, (4, 4), f"extrinsics[{side!r}]")).tolist()
            for side, t in extrinsics.items()
        }
    if not cameras:
        return None
    ref = REFERENCE_CAMERA if REFERENCE_CAMERA in cameras else next(iter(cameras))
    block["reference_frame"] = CAMERA_PREFIX + ref
    return block


def effective_block(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The episode's calibration as upstream's block, whichever form it was stored in: the block,
    the project's format_version 1 form, or upstream's legacy `intrinsics`/`extrinsics`."""
    stored = attrs.get("calibration")
    if stored:
        return to_block(stored)
    return _lift_legacy(attrs.get("intrinsics"), attrs.get("extrinsics"))


def intrinsics_of(block: Mapping[str, Any] | None, camera: str, image_hw: tuple[int, int] | None = None) -> dict | None:
    """One camera's intrinsics in the project's form (Intrinsics.as_dict()), or None when the
    block has no K for it (or a model the plumb-bob cannot express). The resolution comes from
    the block, else from the stored image shape `image_hw`."""
    if not block:
        return None
    cam = block.get("cameras", {}).get(camera)
    if not cam or cam.get("K") is None:
        return None
    k = _camera_matrix(cam["K"], f"calibration.cameras[{camera!r}].K")
    if cam.get("resolution"):
        width, height = (int(v) for v in cam["resolution"])
    elif image_hw is not None:
        height, width = image_hw
    else:
        return None
    model = cam.get("model", "PINHOLE")
    coefficients = [float(c) for c in cam.get("distortion") or ()]
    if model == "PINHOLE":
        coefficients = [0.0] * 5
    elif model != "OPENCV":
        return None
    elif len(coefficients) == 4:
        coefficients.append(0.0)
    return {
        "width": width,
        "height": height,
        "fx": float(k[0, 0]),
        "fy": float(k[1, 1]),
        "cx": float(k[0, 2]),
        "cy": float(k[1, 2]),
        "distortion": coefficients,
    }
