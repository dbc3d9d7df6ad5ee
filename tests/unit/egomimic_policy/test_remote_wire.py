"""msgpack wire format: round trips of the policy schema, and what it refuses (no pickle)."""

import pickle
from dataclasses import replace

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from egomimic_policy.interface import Observation
from egomimic_policy.remote.wire import (
    WireError,
    chunk_from_dict,
    chunk_to_dict,
    observation_from_dict,
    observation_to_dict,
    pack,
    spec_from_dict,
    spec_to_dict,
    unpack,
)
from egomimic_policy.scripted import ScriptedChunkPolicy

DTYPES = st.sampled_from([np.uint8, np.int16, np.int64, np.float32, np.float64, np.bool_, np.dtype(">f8")])


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, max_side=5)))
def test_arrays_round_trip_exactly(arr):
    out = unpack(pack({"a": arr}))["a"]
    assert out.dtype == arr.dtype and out.shape == arr.shape
    assert np.array_equal(out, arr, equal_nan=arr.dtype.kind == "f")


def test_observation_chunk_and_spec_round_trip():
    rng = np.random.default_rng(0)
    obs = Observation(
        stamp_ns=1_700_000_000_123_456_789,
        images={"front_1": rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)},
        left_pose=np.array([0.3, 0.1, 0.2, 1.0, 0.0, 0.0, 0.0]),
        right_pose=np.array([0.3, -0.1, 0.2, 0.0, 1.0, 0.0, 0.0]),
        left_gripper=0.25,
        right_gripper=0.75,
        left_joints=rng.normal(size=6),
    )
    back = observation_from_dict(unpack(pack(observation_to_dict(obs))))
    assert back.stamp_ns == obs.stamp_ns and np.array_equal(back.images["front_1"], obs.images["front_1"])
    assert np.array_equal(back.left_pose, obs.left_pose) and np.array_equal(back.left_joints, obs.left_joints)
    assert back.right_joints is None and back.right_gripper == 0.75
    policy = ScriptedChunkPolicy()
    chunk = policy.infer(obs)
    c2 = chunk_from_dict(unpack(pack(chunk_to_dict(chunk))))
    assert c2.observation_stamp_ns == chunk.observation_stamp_ns and c2.period_s == chunk.period_s
    assert np.array_equal(c2.left_pose, chunk.left_pose) and np.array_equal(c2.right_gripper, chunk.right_gripper)
    assert spec_from_dict(unpack(pack(spec_to_dict(policy.spec)))) == policy.spec


def test_object_arrays_are_refused_both_ways():
    with pytest.raises(WireError, match="dtype"):
        pack({"a": np.array([object()], dtype=object)})
    forged = msgpack.packb({"a": {"__ndarray__": True, "dtype": "|O", "shape": [1], "data": b"\0" * 8}})
    with pytest.raises(WireError, match="dtype"):
        unpack(forged)


def test_pickle_and_extension_types_are_refused():
    with pytest.raises(WireError):
        unpack(pickle.dumps({"type": "hello", "id": 1}))
    with pytest.raises(WireError, match="extension"):
        unpack(msgpack.packb({"a": msgpack.ExtType(42, b"payload")}))


def test_byte_count_must_match_dtype_and_shape():
    forged = msgpack.packb({"a": {"__ndarray__": True, "dtype": "<f8", "shape": [4], "data": b"\0" * 16}})
    with pytest.raises(WireError, match="needs 32"):
        unpack(forged)


def test_only_maps_with_string_keys():
    with pytest.raises(WireError):
        unpack(msgpack.packb([1, 2, 3]))
    with pytest.raises(WireError):
        unpack(msgpack.packb({1: "x"}))


def test_malformed_observation_names_the_field():
    d = observation_to_dict(Observation(1, {}, np.zeros(7), np.zeros(7), 0.0, 0.0))
    d["left_pose"] = np.zeros(6)
    with pytest.raises(WireError, match="left_pose"):
        observation_from_dict(unpack(pack(d)))
    d = observation_to_dict(
        Observation(1, {"front_1": np.zeros((4, 4, 3), np.float32)}, np.zeros(7), np.zeros(7), 0.0, 0.0)
    )
    with pytest.raises(WireError, match="uint8"):
        observation_from_dict(unpack(pack(d)))


def test_spec_image_size_must_be_height_and_width():
    """A peer's spec with an image_size other than (H, W) is refused at the handshake; before,
    it was accepted and the policy node then dropped every camera frame as misshapen."""
    d = spec_to_dict(ScriptedChunkPolicy().spec)
    for bad in ([480, 640, 3], [480]):
        d["image_size"] = bad
        with pytest.raises(WireError, match="image_size"):
            spec_from_dict(unpack(pack(d)))


def test_observation_with_a_committed_prefix_round_trips():
    """blend inpaint: the committed prefix travels to a remote model exactly; without one the
    message carries no `prefix` key (old servers see the same message as before)."""
    obs = Observation(
        stamp_ns=1_700_000_000_000_000_000,
        images={},
        left_pose=np.array([0.3, 0.1, 0.2, 1.0, 0.0, 0.0, 0.0]),
        right_pose=np.array([0.3, -0.1, 0.2, 0.0, 1.0, 0.0, 0.0]),
        left_gripper=0.25,
        right_gripper=0.75,
    )
    assert "prefix" not in observation_to_dict(obs)
    assert observation_from_dict(unpack(pack(observation_to_dict(obs)))).prefix is None
    prefix = ScriptedChunkPolicy(chunk_length=7).infer(obs)
    back = observation_from_dict(unpack(pack(observation_to_dict(replace(obs, prefix=prefix))))).prefix
    assert back is not None and len(back) == 7
    assert back.observation_stamp_ns == prefix.observation_stamp_ns and back.period_s == prefix.period_s
    for name in ("left_pose", "right_pose", "left_gripper", "right_gripper"):
        assert np.array_equal(getattr(back, name), getattr(prefix, name)), name
