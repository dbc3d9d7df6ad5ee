"""msgpack encoding of the policy protocol: numpy arrays as typed maps, never pickle.

Why msgpack and this encoding: pickle executes code on load, so a client that unpickles what a
server sends (or the reverse) runs whatever that peer chooses; msgpack carries data only. An
array travels as `{"__ndarray__": True, "dtype": "<f4", "shape": [..], "data": <bytes>}` (the
openpi layout): packing is one buffer copy, about 30 us for 450 kB of images.
Refused on both sides: object, void and other
non-numeric dtypes, msgpack extension types (the route pickle-based libraries use), a byte
count that does not match dtype x shape, and non-string map keys.

Decoded arrays are read-only views of the message buffer: copy before writing into one.
Also here: Observation / Chunk / PolicySpec <-> plain dicts, so both ends speak one schema.
"""

from __future__ import annotations

import math

import msgpack
import numpy as np

from egomimic_hw.description import ARMS
from egomimic_policy.interface import Chunk, Observation, PolicySpec

PROTOCOL_VERSION = 1
ALLOWED_KINDS = frozenset("biuf")  # bool, signed, unsigned, float
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Largest message either side accepts (3 full-resolution frames are ~2.8 MB)."""


class WireError(ValueError):
    """A message that cannot be encoded or is refused on decoding; says what and why."""


def _encode(obj):
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in ALLOWED_KINDS:
            raise WireError(f"refusing to encode an array of dtype {obj.dtype} (only bool/int/uint/float)")
        return {
            "__ndarray__": True,
            "dtype": obj.dtype.str,
            "shape": list(obj.shape),
            "data": np.ascontiguousarray(obj).tobytes(),
        }
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, tuple):
        return list(obj)
    raise WireError(f"cannot encode {type(obj).__name__}")


def _decode(obj: dict):
    if obj.get("__ndarray__") is not True:
        return obj
    try:
        dtype = np.dtype(obj["dtype"])
        shape = tuple(int(n) for n in obj["shape"])
        data = obj["data"]
    except (KeyError, TypeError) as exc:
        raise WireError(f"malformed array map: {exc}") from None
    if dtype.kind not in ALLOWED_KINDS or dtype.hasobject:
        raise WireError(f"refusing array of dtype {dtype} (only bool/int/uint/float)")
    if any(n < 0 for n in shape) or not isinstance(data, bytes):
        raise WireError(f"malformed array map: shape {shape}, data {type(data).__name__}")
    if len(data) != dtype.itemsize * math.prod(shape):
        raise WireError(
            f"array data is {len(data)} bytes, dtype {dtype} x shape {shape} needs {dtype.itemsize * math.prod(shape)}"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _refuse_ext(code: int, data: bytes):
    raise WireError(f"refusing msgpack extension type {code} (no pickle, no custom types)")


def pack(message: dict) -> bytes:
    return msgpack.packb(message, default=_encode, use_bin_type=True)


def unpack(payload: bytes) -> dict:
    if len(payload) > MAX_MESSAGE_BYTES:
        raise WireError(f"message of {len(payload)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        message = msgpack.unpackb(payload, raw=False, object_hook=_decode, ext_hook=_refuse_ext, strict_map_key=True)
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise WireError(f"undecodable message: {exc}") from None
    if not isinstance(message, dict):
        raise WireError(f"a message must be a map, got {type(message).__name__}")
    return message


# ------------------------------------------------------------- request fields
INT64_MAX = 2**63 - 1
MAX_TIMEOUT_MS = 60_000.0


def request_id(value) -> int:
    """A request id: an integer in [0, 2**63) (msgpack may carry floats, inf, bools or text)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
        raise WireError(f"id must be an integer in [0, 2**63), got {value!r:.40}")
    return value


def finite_number(value, what: str, lo: float = -math.inf, hi: float = math.inf) -> float:
    """A finite int or float within [lo, hi] (never bool, text, inf or NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{what} must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or not lo <= number <= hi:
        raise WireError(f"{what} must be finite and within [{lo:g}, {hi:g}], got {value!r:.40}")
    return number


def timeout_ms(value) -> float:
    return finite_number(value, "timeout_ms", 0.0, MAX_TIMEOUT_MS)


def _stamp_ns(value, what: str = "stamp_ns") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
        raise WireError(f"{what} must be an integer of nanoseconds in [0, 2**63), got {value!r:.40}")
    return value


# ------------------------------------------------------------- schema <-> dicts
def observation_to_dict(obs: Observation) -> dict:
    out = {
        "stamp_ns": int(obs.stamp_ns),
        "images": dict(obs.images),
        "left_pose": np.asarray(obs.left_pose, float),
        "right_pose": np.asarray(obs.right_pose, float),
        "left_gripper": float(obs.left_gripper),
        "right_gripper": float(obs.right_gripper),
    }
    for arm in ARMS:
        joints = getattr(obs, f"{arm.value}_joints")
        if joints is not None:
            out[f"{arm.value}_joints"] = np.asarray(joints, float)
    if obs.history:
        out["history"] = [observation_to_dict(h) for h in obs.history]
    if obs.prefix is not None:  # blend inpaint: the committed rows travel to the remote model
        out["prefix"] = chunk_to_dict(obs.prefix)
    return out


def observation_from_dict(d: dict) -> Observation:
    try:
        images = d["images"]
        if not isinstance(images, dict) or not all(
            isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 3 for v in images.values()
        ):
            raise WireError("observation images must map camera name -> uint8 (H, W, 3) array")
        return Observation(
            stamp_ns=_stamp_ns(d["stamp_ns"]),
            images=images,
            left_pose=_vector(d["left_pose"], 7, "left_pose"),
            right_pose=_vector(d["right_pose"], 7, "right_pose"),
            left_gripper=finite_number(d["left_gripper"], "left_gripper"),
            right_gripper=finite_number(d["right_gripper"], "right_gripper"),
            left_joints=_optional_vector(d.get("left_joints"), "left_joints"),
            right_joints=_optional_vector(d.get("right_joints"), "right_joints"),
            history=tuple(_history_entry(h) for h in d.get("history", ())),
            prefix=chunk_from_dict(d["prefix"]) if d.get("prefix") is not None else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"malformed observation: {exc!r}") from None


def _history_entry(d) -> Observation:
    if not isinstance(d, dict) or "history" in d:
        raise WireError("observation history entries must be observations without their own history")
    return observation_from_dict(d)


def _vector(value, n: int | None, what: str) -> np.ndarray:
    """A 1-D float vector of finite numbers (of length n where given)."""
    if isinstance(value, str | bytes | dict):
        raise WireError(f"{what}: expected a vector of numbers, got {type(value).__name__}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"{what}: not a vector of numbers ({exc})") from None
    if arr.ndim != 1 or (n is not None and arr.shape != (n,)):
        raise WireError(f"{what}: expected shape ({n if n is not None else 'n'},), got {arr.shape}")
    if not np.isfinite(arr).all():
        raise WireError(f"{what}: non-finite values")
    return arr


def _optional_vector(value, what: str) -> np.ndarray | None:
    return None if value is None else _vector(value, None, what)


def chunk_to_dict(chunk: Chunk) -> dict:
    return {
        "observation_stamp_ns": int(chunk.observation_stamp_ns),
        "period_s": float(chunk.period_s),
        "left_pose": np.asarray(chunk.left_pose, float),
        "right_pose": np.asarray(chunk.right_pose, float),
        "left_gripper": np.asarray(chunk.left_gripper, float),
        "right_gripper": np.asarray(chunk.right_gripper, float),
    }


def chunk_from_dict(d: object) -> Chunk:
    try:
        if not isinstance(d, dict):
            raise WireError(f"a chunk must be a map, got {type(d).__name__}")
        return Chunk(
            observation_stamp_ns=_stamp_ns(d["observation_stamp_ns"], "observation_stamp_ns"),
            period_s=finite_number(d["period_s"], "period_s", 1e-4, 10.0),
            left_pose=_rows(d["left_pose"], 7, "left_pose"),
            right_pose=_rows(d["right_pose"], 7, "right_pose"),
            left_gripper=_rows(d["left_gripper"], None, "left_gripper"),
            right_gripper=_rows(d["right_gripper"], None, "right_gripper"),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"malformed chunk: {exc!r}") from None


def _rows(value, width: int | None, what: str) -> np.ndarray:
    """A chunk's column: finite floats, (N, width) or (N,) with N >= 1."""
    arr = np.asarray(value, dtype=float)
    shape_ok = arr.ndim == 2 and arr.shape[1] == width if width is not None else arr.ndim == 1
    if not shape_ok or arr.shape[0] < 1:
        raise WireError(f"chunk {what}: expected shape (N, {width}) " if width else f"chunk {what}: expected (N,) ")
    if not np.isfinite(arr).all():
        raise WireError(f"chunk {what}: non-finite values")
    return arr


def spec_to_dict(spec: PolicySpec) -> dict:
    return {
        "family": spec.family,
        "fingerprint": spec.fingerprint,
        "embodiment": spec.embodiment,
        "action_layout": spec.action_layout,
        "chunk_length": int(spec.chunk_length),
        "rate_hz": float(spec.rate_hz),
        "cameras": list(spec.cameras),
        "image_size": list(spec.image_size),
        "obs_steps": int(spec.obs_steps),
        "extra": {str(k): str(v) for k, v in spec.extra.items()},
        "clock_driven": bool(spec.clock_driven),
    }


def _image_size(value) -> tuple[int, int]:
    """(H, W) of a spec: anything but two numbers is refused here, at the handshake, instead of
    every camera frame being dropped later for not matching it."""
    size = [int(n) for n in value]
    if len(size) != 2:
        raise ValueError(f"image_size must be [height, width], got {value!r}")
    return size[0], size[1]


def spec_from_dict(d: dict) -> PolicySpec:
    try:
        return PolicySpec(
            family=str(d["family"]),
            fingerprint=str(d["fingerprint"]),
            embodiment=str(d["embodiment"]),
            action_layout=str(d["action_layout"]),
            chunk_length=int(d["chunk_length"]),
            rate_hz=float(d["rate_hz"]),
            cameras=tuple(str(c) for c in d["cameras"]),
            image_size=_image_size(d["image_size"]),
            obs_steps=int(d.get("obs_steps", 1)),
            extra={str(k): str(v) for k, v in dict(d.get("extra", {})).items()},
            clock_driven=bool(d.get("clock_driven", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"malformed policy spec: {exc!r}") from None
