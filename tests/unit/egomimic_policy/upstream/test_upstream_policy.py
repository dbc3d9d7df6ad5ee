"""An upstream checkpoint as the policy node loads it: through the cache (built once, then reused
without a write), pinned by its config SHA-256, with the EVA conversions at the boundary."""

from __future__ import annotations

import hashlib
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from egomimic_hw.description import Arm
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.families import build_algorithm, make_policy, save_checkpoint
from egomimic_policy.features import decode_action_chunk, neutral_norm_stats, state_ee_pose
from egomimic_policy.interface import Observation
from egomimic_policy.upstream.checkpoint import load_upstream
from egomimic_policy.upstream.pipeline import rollout
from egomimic_policy.upstream.policy import (
    UpstreamRolloutPolicy,
    config_sha256,
    image_input,
    is_upstream_checkpoint,
    is_upstream_pi_checkpoint,
)

FIXTURES = Path(__file__).parents[3] / "fixtures" / "upstream"
CAMERA_OF_KEY = {"front_img_1": "front_1", "left_wrist_img": "left_wrist", "right_wrist_img": "right_wrist"}


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("upstream") / "fold_tiny.ckpt"
    with lzma.open(FIXTURES / "fold_tiny.ckpt.xz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    path.chmod(0o444)  # the source is only ever read
    return path


def listing(folder: Path) -> dict:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino) for p in sorted(folder.iterdir())}


def frames(seed: int = 0, n: int = 2) -> list[Observation]:
    """n observations 33 ms apart: 120x160 RGB frames and poses near the arms' workspace."""
    rng = np.random.default_rng(seed)
    out: list[Observation] = []
    for i in range(n):
        images = {cam: rng.integers(0, 256, (120, 160, 3), dtype=np.uint8) for cam in CAMERA_OF_KEY.values()}
        q = rng.normal(size=4)
        pose = np.concatenate([[0.3 + 0.01 * i, 0.1, 0.2], q / np.linalg.norm(q)])
        out.append(
            Observation(
                stamp_ns=1_000_000_000 + i * 33_333_333,
                images=images,
                left_pose=pose,
                right_pose=pose * [1, -1, 1, 1, 1, 1, 1],
                left_gripper=0.4,
                right_gripper=0.6,
                history=tuple(out),
            )
        )
    return out


def test_is_upstream_checkpoint(tiny_path, tmp_path):
    assert is_upstream_checkpoint(tiny_path)
    other = tmp_path / "own.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"model_config": {"_target_": "x"}}}, other)
    assert not is_upstream_checkpoint(other)


@pytest.mark.parametrize("family", ["fold", "moe", "pi"])
def test_a_project_checkpoint_in_upstreams_layout_is_routed_to_its_family(family, tmp_path):
    """The project writes upstream's layout too (`nets.policy.`, config_tree under upstream's
    ModelWrapper): routing goes by the algorithm `_target_`s, so it stays a family checkpoint."""
    algo = build_algorithm(family, overrides={"d_model": 32, "n_layers": 1, "n_heads": 2})
    path = save_checkpoint(tmp_path / "own.ckpt", algo, neutral_norm_stats(), epoch=0, global_step=1)
    assert not is_upstream_checkpoint(path) and not is_upstream_pi_checkpoint(path)
    policy = make_policy(str(path), cache_dir=tmp_path / "cache")
    assert not isinstance(policy, UpstreamRolloutPolicy) and policy.spec.family == family


def test_cache_built_once_then_reused_without_a_write_source_unchanged(tiny_path, tmp_path):
    cache = tmp_path / "cache"
    before = hashlib.sha256(tiny_path.read_bytes()).hexdigest()
    first = make_policy(tiny_path, cache_dir=cache)
    assert isinstance(first, UpstreamRolloutPolicy)
    assert first.spec.extra["cache"] == "built"
    entries = listing(cache)
    second = make_policy(tiny_path, cache_dir=cache)
    assert second.spec.extra["cache"] == "reused"
    assert listing(cache) == entries  # nothing written, renamed or touched
    assert second.spec.fingerprint == first.spec.fingerprint
    assert hashlib.sha256(tiny_path.read_bytes()).hexdigest() == before
    artifact = Path(first.spec.extra["artifact"])
    plain = torch.load(artifact, weights_only=True)  # the cached artifact is plain data
    assert "optimizer_states" not in plain and "config_tree" in plain["hyper_parameters"]
    assert first.spec.family == "fold" and first.spec.chunk_length == 10 and first.spec.obs_steps == 2


def test_config_pin_refuses_another_model_and_accepts_its_own(tiny_path, tmp_path):
    pin = config_sha256(load_upstream(tiny_path))
    policy = make_policy(tiny_path, cache_dir=tmp_path / "c", pin_config_sha256=pin)
    assert policy.spec.extra["config_sha256"] == pin
    with pytest.raises(CheckpointError, match=f"model config SHA-256 is {pin}"):
        make_policy(tiny_path, cache_dir=tmp_path / "c", pin_config_sha256="0" * 64)


def test_observation_boundary_cameras_state_and_window(tiny_path, tmp_path):
    policy = make_policy(tiny_path, cache_dir=tmp_path / "c")
    first, current = frames(n=2)
    inputs = policy.observation_inputs(current)
    for key, cam in CAMERA_OF_KEY.items():
        assert inputs[key].shape == (2, 3, 120, 160) and inputs[key].dtype == np.float32
        np.testing.assert_array_equal(inputs[key][0], first.images[cam].transpose(2, 0, 1) / np.float32(255))
        np.testing.assert_array_equal(inputs[key][1], current.images[cam].transpose(2, 0, 1) / np.float32(255))
    expected = [state_ee_pose(f.left_pose, f.left_gripper, f.right_pose, f.right_gripper) for f in (first, current)]
    np.testing.assert_array_equal(inputs["state_ee_pose"], np.stack(expected))
    start = policy.observation_inputs(first)  # episode start: the oldest frame repeated
    np.testing.assert_array_equal(start["state_ee_pose"][0], start["state_ee_pose"][1])


def test_image_input_refuses_what_is_not_uint8_rgb():
    with pytest.raises(Exception, match="uint8"):
        image_input(np.zeros((4, 4, 3), dtype=np.float32), "front_1")
    assert image_input(np.full((2, 2, 3), 255, np.uint8), "front_1").max() == 1.0


def test_chunk_is_upstreams_action_decoded_against_the_query_tick(tiny_path, tmp_path):
    policy = make_policy(tiny_path, cache_dir=tmp_path / "c")
    _, current = frames(n=2)
    noise = np.random.default_rng(1).normal(size=policy.latent_shape).astype(np.float32)
    chunk = policy.infer(current, noise=noise)
    raw = rollout(policy.algo, policy.norm, policy.embodiment_id, policy.observation_inputs(current), noise=noise)
    decoded = decode_action_chunk(
        {Arm.LEFT: np.asarray(current.left_pose), Arm.RIGHT: np.asarray(current.right_pose)}, raw.pred_action
    )
    np.testing.assert_array_equal(chunk.left_pose, decoded[Arm.LEFT][0])
    np.testing.assert_array_equal(chunk.right_gripper, decoded[Arm.RIGHT][1])
    assert chunk.left_pose.shape == (10, 7) and chunk.observation_stamp_ns == current.stamp_ns


def test_reset_replays_the_same_noise(tiny_path, tmp_path):
    policy = make_policy(tiny_path, cache_dir=tmp_path / "c", seed=3)
    _, current = frames(n=2)
    a = policy.infer(current)
    policy.reset()
    b = policy.infer(current)
    np.testing.assert_array_equal(a.left_pose, b.left_pose)
    assert not np.array_equal(policy.infer(current).left_pose, a.left_pose)  # the next draw differs
