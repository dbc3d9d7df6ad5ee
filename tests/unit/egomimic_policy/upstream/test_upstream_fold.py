"""The lab's own checkpoint, end to end: a tiny Fold written by upstream's trainer loads
strictly and returns upstream's reference actions for upstream's reference inputs."""

from __future__ import annotations

import hashlib
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from egomimic_hw.embodiment import Embodiment
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.upstream.checkpoint import load_upstream
from egomimic_policy.upstream.pipeline import PipelineAlgo, build, rollout
from egomimic_policy.upstream.targets import instantiate

FIXTURES = Path(__file__).parents[3] / "fixtures" / "upstream"
TOLERANCE = 1e-4
"""The acceptance bound against upstream's output (measured: ~2e-6)."""


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("upstream") / "fold_tiny.ckpt"
    with lzma.open(FIXTURES / "fold_tiny.ckpt.xz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return path


@pytest.fixture(scope="module")
def tiny(tiny_path):
    torch.set_num_threads(1)
    return load_upstream(tiny_path)


def observation():
    raw = np.load(FIXTURES / "fold_tiny.inputs.npz")
    return {k: raw[k] for k in ("front_img_1", "left_wrist_img", "right_wrist_img", "state_ee_pose")}, raw["noise"]


def test_upstream_tiny_fold_reproduces_upstreams_actions(tiny, tiny_path):
    before = hashlib.sha256(tiny_path.read_bytes()).hexdigest()
    algo, norm, notes = build(tiny)
    obs, noise = observation()
    out = rollout(algo, norm, int(Embodiment.EVA_BIMANUAL), obs, noise=noise)
    ref = np.load(FIXTURES / "fold_tiny.ref.npz")
    assert out.pred_action_normalized.shape == (10, 20)
    np.testing.assert_allclose(out.pred_action_normalized, ref["pred_action_normalized"], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(out.pred_action, ref["pred_action"], atol=TOLERANCE, rtol=0)
    assert notes == []  # post-collapse id 6: nothing to remap
    assert hashlib.sha256(tiny_path.read_bytes()).hexdigest() == before, "the source checkpoint was modified"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (runs on the GPU machine)")
def test_on_cuda_the_tiny_fold_reproduces_upstreams_actions(tiny):
    """The inputs follow the weights to the GPU; with TF32 off, fp32 on CUDA meets the same bound."""
    algo, norm, _ = build(tiny)
    obs, noise = observation()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        out = rollout(algo.to("cuda"), norm, int(Embodiment.EVA_BIMANUAL), obs, noise=noise)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    ref = np.load(FIXTURES / "fold_tiny.ref.npz")
    np.testing.assert_allclose(out.pred_action, ref["pred_action"], atol=TOLERANCE, rtol=0)


def test_same_noise_same_actions_and_drawn_noise_differs(tiny):
    algo, norm, _ = build(tiny)
    obs, noise = observation()
    a = rollout(algo, norm, 6, obs, noise=noise).pred_action
    b = rollout(algo, norm, 6, obs, noise=noise).pred_action
    np.testing.assert_array_equal(a, b)
    torch.manual_seed(0)
    c = rollout(algo, norm, 6, obs).pred_action
    assert np.abs(c - a).max() > 1e-3


def test_a_renamed_tensor_is_refused_with_its_name(tiny):
    sd = dict(tiny["state_dict"])
    key = "nets.policy.stages.2.denoising_module.proj_u.weight"
    sd[key.replace("proj_u", "proj_up")] = sd.pop(key)
    with pytest.raises(CheckpointError, match=r"missing: nets\.policy\.stages\.2\.denoising_module\.proj_u\.weight"):
        build({**tiny, "state_dict": sd})


def test_a_reshaped_tensor_is_refused_with_its_name(tiny):
    sd = dict(tiny["state_dict"])
    key = "nets.policy.stages.2.condition_projection.weight"
    sd[key] = torch.zeros(25, 96)
    with pytest.raises(
        CheckpointError, match=r"shape: nets\.policy\.stages\.2\.condition_projection\.weight \(25, 96\)"
    ):
        build({**tiny, "state_dict": sd})


def test_legacy_embodiment_ids_are_remapped_only_when_legacy(tiny):
    hp = tiny["hyper_parameters"]
    state = hp["norm_stats_state"]
    legacy = {**state, "norm_stats": {8: state["norm_stats"][6]}, "embodiments": [8]}
    _, norm, notes = build({**tiny, "hyper_parameters": {**hp, "norm_stats_state": legacy}})
    assert set(norm.stats) == {6} and notes == ["legacy embodiment ids remapped: {8: 6}"]


def expected_keys(name: str) -> dict[str, tuple[int, ...]]:
    out = {}
    for line in (FIXTURES / f"keys_{name}.txt").read_text().splitlines():
        key, shape, _dtype = line.split("\t")
        out[key] = tuple(int(x) for x in shape.strip("()").split(",") if x.strip())
    return out


@pytest.mark.parametrize("name", ["fold", "moe"])
def test_real_size_config_builds_every_tensor_of_a_real_checkpoint(name):
    """The 306M Fold and the 358M MoE build through the same code from their own config trees,
    with every tensor name and shape of a real checkpoint (on the meta device: nothing allocated)."""
    config = yaml.safe_load((FIXTURES / f"config_tree_{name}.yaml").read_text())
    with torch.device("meta"):
        algo = instantiate(config["model"]["robomimic_model"])
    assert isinstance(algo, PipelineAlgo)
    ours = {k: tuple(v.shape) for k, v in algo.state_dict().items()}
    theirs = expected_keys(name)
    assert sorted(set(theirs) - set(ours)) == [] and sorted(set(ours) - set(theirs)) == []
    assert {k: s for k, s in ours.items() if theirs[k] != s} == {}
