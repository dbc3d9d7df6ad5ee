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
            stamp_ns=int(d["stamp_ns"]),
            images=images,
            left_pose=_vector(d["left_pose"], 7, "left_pose"),
            right_pose=_vector(d["right_pose"], 7, "right_pose"),
            left_gripper=float(d["left_gripper"]),
            right_gripper=float(d["right_gripper"]),
            left_joints=d.get("left_joints"),
            right_joints=d.get("right_joints"),
            history=tuple(_history_entry(h) for h in d.get("history", ())),
            prefix=chunk_from_dict(d["prefix"]) if d.get("prefix") is not None else None,
        )
    except (KeyError, TypeError) as exc:
        raise WireError(f"malformed observation: {exc!r}") from None


def _history_entry(d) -> Observation:
    if not isinstance(d, dict) or "history" in d:
        raise WireError("observation history entries must be observations without their own history")
    return observation_from_dict(d)


def _vector(value, n: int, what: str) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.shape != (n,):
        raise WireError(f"{what}: expected shape ({n},), got {arr.shape}")
    return arr


def chunk_to_dict(chunk: Chunk) -> dict:
    return {
        "observation_stamp_ns": int(chunk.observation_stamp_ns),
        "period_s": float(chunk.period_s),
        "left_pose": np.asarray(chunk.left_pose, float),
        "right_pose": np.asarray(chunk.right_pose, float),
        "left_gripper": np.asarray(chunk.left_gripper, float),
        "right_gripper": np.asarray(chunk.right_gripper, float),
    }


def chunk_from_dict(d: dict) -> Chunk:
    try:
        return Chunk(
            observation_stamp_ns=int(d["observation_stamp_ns"]),
            period_s=float(d["period_s"]),
            left_pose=np.asarray(d["left_pose"]),
            right_pose=np.asarray(d["right_pose"]),
            left_gripper=np.asarray(d["left_gripper"]),
            right_gripper=np.asarray(d["right_gripper"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"malformed chunk: {exc!r}") from None


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
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"malformed policy spec: {exc!r}") from None
