"""Real-time-chunking-style inpainting (Observation.prefix) in the learned families.

With a committed prefix, the chunk a family returns starts with exactly the committed rows
(after the encode -> normalize -> sample -> unnormalize -> decode round trip), the rest is
sampled around them; without one (or with an empty one) the sampler is untouched.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest
import torch

from egomimic_hw.description import ARMS
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import same_pose
from egomimic_hw.rotations import mat_to_quat, quat_to_mat, ypr_to_mat
from egomimic_policy.families import build_algorithm, make_policy
from egomimic_policy.interface import Chunk
from egomimic_policy.scripted import ScriptedChunkPolicy
from tests.unit.egomimic_policy.conftest import make_observation

FAMILIES = ("fold", "pi", "moe")
PREFIX_ROWS = 12


def chunk_digest(c: Chunk) -> str:
    arr = np.concatenate([c.left_pose, c.right_pose, c.left_gripper[:, None], c.right_gripper[:, None]], 1)
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def committed_prefix(obs, rows: int = PREFIX_ROWS) -> Chunk:
    """A smooth committed path leaving the observation's poses: 1.5 cm along x/z and a few
    degrees of rotation over `rows` rows (several times the neutral stats' +-3 mm range, so
    the normalized prefix lies well outside [-1, 1]), grippers closing."""
    s = np.linspace(0.0, 1.0, rows)[:, None]

    def path(pose, sign):
        xyz = pose[:3] + s * np.array([0.015, -0.004 * sign, -0.01])
        turn = np.array([0.05, 0.02 * sign, -0.03])
        quats = np.stack([mat_to_quat(quat_to_mat(pose[3:]) @ ypr_to_mat(turn * k)) for k in s[:, 0]])
        return np.concatenate([xyz, quats], 1)

    return Chunk(
        observation_stamp_ns=obs.stamp_ns,
        period_s=1.0 / 30.0,
        left_pose=path(obs.left_pose, 1.0),
        right_pose=path(obs.right_pose, -1.0),
        left_gripper=np.linspace(obs.left_gripper, 0.1, rows),
        right_gripper=np.linspace(obs.right_gripper, 0.9, rows),
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_an_empty_prefix_is_no_prefix(family):
    """Inpainting is inert without a prefix: the same seed gives the same bytes either way.
    (Bit-identity with the pre-inpainting sampler was checked against digests when the feature
    was added; such digests depend on the CPU's torch kernels, so they are not kept as a test.)"""
    obs = make_observation(seed=1)
    reference = chunk_digest(make_policy(family, seed=3).infer(obs))
    empty = Chunk(obs.stamp_ns, 1 / 30, np.zeros((0, 7)), np.zeros((0, 7)), np.zeros(0), np.zeros(0))
    assert chunk_digest(make_policy(family, seed=3).infer(replace(obs, prefix=empty))) == reference
    assert chunk_digest(make_policy(family, seed=3).infer(replace(obs, prefix=None))) == reference


@pytest.mark.parametrize("family", FAMILIES)
def test_with_a_prefix_the_first_rows_are_the_committed_ones(family):
    obs = make_observation(seed=1)
    prefix = committed_prefix(obs)
    free = make_policy(family, seed=3).infer(obs)
    chunk = make_policy(family, seed=3).infer(replace(obs, prefix=prefix))
    assert len(chunk) == len(free) == 100 and chunk.observation_stamp_ns == obs.stamp_ns
    n = PREFIX_ROWS
    for side in (arm.value for arm in ARMS):
        got, want = getattr(chunk, f"{side}_pose"), getattr(prefix, f"{side}_pose")
        assert np.abs(got[:n, :3] - want[:, :3]).max() < 1e-4, side  # m, float32 sampler round trip
        for k in range(n):
            assert same_pose(got[k], want[k], atol=1e-4), (side, k)
        np.testing.assert_allclose(getattr(chunk, f"{side}_gripper")[:n], getattr(prefix, f"{side}_gripper"), atol=1e-5)
        # The committed rows are far from what the model samples on its own ...
        assert np.abs(getattr(free, f"{side}_pose")[n - 1, :3] - want[n - 1, :3]).max() > 5e-3
    # ... and the free rows are sampled against them (attention sees the inpainted rows).
    assert not np.allclose(chunk.left_pose[n:], free.left_pose[n:])
    assert np.all(np.isfinite(chunk.left_pose)) and np.all(np.isfinite(chunk.right_gripper))


@pytest.mark.parametrize("family", FAMILIES)
def test_sampler_returns_the_normalized_prefix_exactly(family):
    """At the algorithm level: the prefix rows of the result ARE the prefix (also outside
    [-1, 1], exempt from Fold's clamp); the result keeps its shape."""
    algo = build_algorithm(family, seed=0).eval()
    feats = torch.stack([algo.frame_features(make_observation(seed=2).images)] * algo.config.n_obs_steps, dim=1)
    with torch.inference_mode():
        context = algo.condition(feats, torch.zeros(1, algo.config.n_obs_steps, 20))
        prefix = torch.linspace(-3.0, 3.0, 5 * 20).reshape(1, 5, 20)
        out = algo.sample(context, torch.Generator().manual_seed(0), prefix=prefix)
    assert out.shape == (1, algo.config.chunk_length, 20)
    assert torch.equal(out[:, :5], prefix)
    assert torch.isfinite(out).all()


def test_a_prefix_longer_than_the_chunk_is_cut_and_a_foreign_prefix_refused():
    obs = make_observation(seed=1)
    policy = make_policy("fold", seed=3, overrides={"chunk_length": 8, "num_inference_steps": 4})
    long_prefix = committed_prefix(obs, rows=11)
    chunk = policy.infer(replace(obs, prefix=long_prefix))
    assert len(chunk) == 8
    assert np.abs(chunk.left_pose[:, :3] - long_prefix.left_pose[:8, :3]).max() < 1e-4
    with pytest.raises(ConfigError, match="prefix answers observation"):
        policy.infer(replace(obs, prefix=replace(long_prefix, observation_stamp_ns=obs.stamp_ns - 1)))
    with pytest.raises(ConfigError, match="period"):
        policy.infer(replace(obs, prefix=replace(long_prefix, period_s=0.05)))


def test_a_family_that_cannot_inpaint_ignores_the_prefix():
    obs = make_observation(seed=1)
    policy = ScriptedChunkPolicy(chunk_length=20)
    plain = policy.infer(obs)
    with_prefix = policy.infer(replace(obs, prefix=committed_prefix(obs)))
    np.testing.assert_array_equal(plain.left_pose, with_prefix.left_pose)
