"""Stage 0 of upstream's Fold pipeline: built from a checkpoint's config tree it has exactly the
checkpoint's stage-0 tensors (names, shapes, dtypes), and its condition is upstream's fusion of
the centre-cropped cameras and the proprioception, step by step."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import yaml

from egomimic_policy.upstream.encoders import (
    CondEncoderModule,
    FusedObsEncoder,
    MultiEmbodimentCondEncoder,
    ObsToken,
    SharedAdapterObsEncoder,
)
from egomimic_policy.upstream.targets import instantiate
from egomimic_policy.upstream.vision import VisualCore

torch.set_num_threads(1)

RESEARCH = Path(__file__).parents[3] / "fixtures" / "upstream"
"""Upstream's key lists and config trees of real-size checkpoints (tests/fixtures/upstream/README.md)."""
STAGE0 = "nets.policy.stages.0."


def read_keys(path: Path, prefix: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """`name<TAB>(shape)<TAB>dtype` lines -> {name without prefix: (shape, dtype)} for one prefix."""
    entries = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        name, rest = line.split(None, 1)
        shape, dtype = rest.rsplit(None, 1)
        if name.startswith(prefix):
            entries[name[len(prefix) :]] = (tuple(ast.literal_eval(shape)), dtype)
    return entries


def test_stage0_built_from_the_real_fold_config_has_the_checkpoints_tensors():
    keys, config = RESEARCH / "keys_fold.txt", RESEARCH / "config_tree_fold.yaml"
    expected = read_keys(keys, STAGE0)
    tree = yaml.safe_load(config.read_text())
    stage_config = tree["model"]["robomimic_model"]["stages"][0]
    with torch.device("meta"):  # names and shapes only: nothing allocated, nothing initialised
        stage = instantiate(stage_config, "stages.0")
    assert isinstance(stage, FusedObsEncoder)
    ours = {name: (tuple(t.shape), str(t.dtype)) for name, t in stage.state_dict().items()}
    assert len(expected) == 395
    assert sorted(set(expected) - set(ours)) == []
    assert sorted(set(ours) - set(expected)) == []
    assert {k: v for k, v in ours.items() if expected[k] != v} == {}
    # the real config's crop (128 x 128) gives a 4 x 4 keypoint grid
    assert ours["encoder.shared_encoder.obs_encoder.img_encoders.front_img_1.pool.pos_x"][0] == (1, 16)


TINY_STAGE0 = """
_target_: egomimic.pipeline.stages_sampler.FusedObsEncoder
n_obs_steps: 2
encoder:
  _target_: egomimic.pipeline.stages_sampler.SharedAdapterObsEncoder
  shared_encoder:
    _target_: egomimic.models.stems.input_modules.ObsToken
    d_model: 32
    obs_encoder:
      _target_: egomimic.models.stems.cond_encoders.CondEncoderModule
      d_cond: 32
      output_key: fused_cond
      cond_proj_widths: [32, 32]
      obs_specs: {}
      img_encoders:
        front_img_1: &camera
          _target_: egomimic.models.stems.visual_core.VisualCore
          in_channels: 3
          image_size: 480
          num_kp: 8
          feature_dimension: 16
          pretrained: false
          crop_aug: true
          crop_height: 64
          crop_width: 64
          crop_eval_mode: center
          crop_sample_mode: v02
  embodiment_adapter:
    _target_: egomimic.models.stems.input_modules.ObsToken
    d_model: 16
    obs_encoder:
      _target_: egomimic.models.stems.cond_encoders.MultiEmbodimentCondEncoder
      encoders:
        eva_bimanual:
          _target_: egomimic.models.stems.cond_encoders.CondEncoderModule
          d_cond: 16
          output_key: fused_cond
          cond_proj_widths: [16, 16]
          obs_specs:
            state_ee_pose: {input_dim: 20, input_slice: [0, 20], embed_dim: 16}
          img_encoders:
            left_wrist_img: *camera
            right_wrist_img: *camera
"""
"""Stage 0 of the tiny Fold checkpoint upstream wrote for the fixture (its config tree's values)."""

CAMERAS = ("front_img_1", "left_wrist_img", "right_wrist_img")


@pytest.fixture(scope="module")
def tiny_stage() -> FusedObsEncoder:
    torch.manual_seed(0)
    stage = instantiate(yaml.safe_load(TINY_STAGE0), "stages.0")
    assert isinstance(stage, FusedObsEncoder)
    return stage.eval()


def rollout_batch(batch_size: int = 2, n_obs: int = 2, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    batch: dict = {"embodiment": "eva_bimanual", "rollout_t": 0}
    batch["obs/state_ee_pose"] = torch.randn(batch_size, n_obs, 20, generator=gen)
    for camera in CAMERAS:
        batch[f"obs/{camera}"] = torch.rand(batch_size, n_obs, 3, 120, 160, generator=gen)
    return batch


def test_tiny_stage0_is_built_with_upstreams_structure(tiny_stage):
    shared, adapter = tiny_stage.encoder.shared_encoder, tiny_stage.encoder.embodiment_adapter
    assert isinstance(tiny_stage.encoder, SharedAdapterObsEncoder)
    assert isinstance(shared, ObsToken) and isinstance(adapter, ObsToken)
    assert isinstance(shared.obs_encoder, CondEncoderModule)
    assert isinstance(adapter.obs_encoder, MultiEmbodimentCondEncoder)
    arm = adapter.obs_encoder.encoders["eva_bimanual"]
    assert arm.obs_keys == ["state_ee_pose"] and arm.img_keys == ["left_wrist_img", "right_wrist_img"]
    assert all(isinstance(arm.img_encoders[k], VisualCore) for k in arm.img_keys)
    names = dict(tiny_stage.state_dict())
    assert len(names) == 395
    assert names["encoder.embodiment_adapter.obs_encoder.encoders.eva_bimanual.cond_proj.0.weight"].shape == (16, 48)
    assert names["encoder.shared_encoder.obs_encoder.cond_proj.0.weight"].shape == (32, 16)
    assert tiny_stage.contract("rollout") == (("obs/*", "embodiment"), ("condition",))
    assert tiny_stage.rollout_obs_steps == 2


def test_condition_is_each_steps_shared_then_adapter_features(tiny_stage):
    batch = rollout_batch()
    with torch.no_grad():
        out = tiny_stage(dict(batch))
        again = tiny_stage(dict(batch))
    condition = out["condition"]
    assert condition.shape == (2, 2 * (32 + 16)) and condition.dtype == torch.float32
    assert torch.equal(condition, again["condition"])  # eval: centre crop, no dropout, deterministic
    assert "target" not in out

    # upstream's math, written out: per (sample, step), shared = cond_proj(front camera); adapter =
    # cond_proj(cat(state MLP, left wrist, right wrist)) (low-dim first, then cameras sorted)
    shared = tiny_stage.encoder.shared_encoder.obs_encoder
    arm = tiny_stage.encoder.embodiment_adapter.obs_encoder.encoders["eva_bimanual"]
    with torch.no_grad():
        front = shared.cond_proj(shared.img_encoders["front_img_1"](batch["obs/front_img_1"]))
        features = [
            arm.obs_encoders["state_ee_pose"](batch["obs/state_ee_pose"][..., 0:20]),
            arm.img_encoders["left_wrist_img"](batch["obs/left_wrist_img"]),
            arm.img_encoders["right_wrist_img"](batch["obs/right_wrist_img"]),
        ]
        adapter = arm.cond_proj(torch.cat(features, dim=-1))
    expected = torch.cat([front, adapter], dim=-1).reshape(2, 2 * 48)  # (B, T, 48) -> step 0, then step 1
    assert torch.allclose(condition, expected, atol=1e-6)

    # one sample alone gives its own row: nothing mixes across the batch
    single = {k: (v[1:] if torch.is_tensor(v) else v) for k, v in batch.items()}
    with torch.no_grad():
        assert torch.allclose(tiny_stage(single)["condition"][0], condition[1], atol=1e-6)


def test_cameras_are_centre_cropped_not_resized(tiny_stage):
    seen = []
    front = tiny_stage.encoder.shared_encoder.obs_encoder.img_encoders["front_img_1"]
    handle = front.backbone.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
    try:
        batch = rollout_batch()
        with torch.no_grad():
            tiny_stage(dict(batch))
    finally:
        handle.remove()
    top, left = (120 - 64) // 2, (160 - 64) // 2
    packed = batch["obs/front_img_1"].reshape(4, 3, 120, 160)  # row b * n_obs + t
    assert torch.equal(seen[0], packed[:, :, top : top + 64, left : left + 64])


def test_training_and_rollout_batches(tiny_stage):
    batch = rollout_batch()
    del batch["rollout_t"]
    with pytest.raises(ValueError, match="no actions target"):
        tiny_stage(dict(batch))
    actions = torch.zeros(2, 10, 20)
    with torch.no_grad():
        out = tiny_stage(dict(batch, actions=actions))
    assert out["target"] is actions and "actions" not in out
    with pytest.raises(ValueError, match="expected"):
        tiny_stage(rollout_batch(n_obs=3))
    wrong = rollout_batch()
    wrong["obs/left_wrist_img"] = wrong["obs/left_wrist_img"][:, :1]  # the first obs key sets (B, T)
    with pytest.raises(ValueError, match="leading dimensions"):
        tiny_stage(wrong)
    with pytest.raises(KeyError, match="No cond encoder"):
        tiny_stage(dict(rollout_batch(), embodiment="human_bimanual"))


def test_cond_encoder_contracts():
    with pytest.raises(ValueError, match="d_cond == d_model"):
        ObsToken(d_model=8, obs_encoder=CondEncoderModule(d_cond=4, obs_specs={"s": {"input_dim": 2, "embed_dim": 3}}))
    encoder = CondEncoderModule(
        d_cond=4, obs_specs={"a.b": {"input_dim": 3, "embed_dim": 2, "widths": [5]}}, cond_proj_widths=None
    )
    # a dotted data key gets upstream's hex registration name; default fusion widths [max(d_cond, fused)]
    assert list(encoder.obs_encoders) == ["__dotted_" + b"a.b".hex()]
    assert [tuple(p.shape) for p in encoder.cond_proj.parameters()] == [(4, 2), (4,), (4, 4), (4,)]
    with pytest.raises(KeyError, match="declared obs key"):
        encoder.encode({}, T_action=1)
    flat = encoder.encode({"a.b": torch.zeros(2, 3)}, T_action=5)["fused_cond"]  # (B, D) repeated over T
    assert flat.shape == (2, 5, 4)
    with pytest.raises(ValueError, match="share output_key"):
        MultiEmbodimentCondEncoder({"x": CondEncoderModule(d_cond=2, output_key="a"), "y": CondEncoderModule(2)})
