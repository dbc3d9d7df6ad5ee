"""Upstream PI (openpi PI0Pytorch inside EgoVerse's `PI`): checkpoint keys -> PI0Pytorch names, the
refusal without openpi, and the boundary conversions against hand-computed values."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from egomimic_hw.errors import ConfigError
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.upstream.pi import (
    PI_CAMERA_SLOTS,
    TIED_WEIGHTS,
    actions_to_eva,
    build_prompt,
    check_action_layout,
    eva_image_to_pi,
    is_upstream_pi,
    load_upstream_pi,
    openpi_state_dict,
    pad_state,
    parameter_count,
    pi_images,
    pi_spec,
    resize_with_pad,
    state_bins,
)


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


PG = "paligemma_with_expert.paligemma."
EX = "paligemma_with_expert.gemma_expert."


def _pi05_names() -> dict[str, tuple[int, ...]]:
    """A representative slice of PI0Pytorch(pi05=True)'s state dict (transformers 4.53 names)."""
    vision = PG + "model.vision_tower.vision_model."
    lang = PG + "model.language_model."
    names = {
        vision + "embeddings.patch_embedding.weight": (4, 3, 2, 2),
        vision + "embeddings.patch_embedding.bias": (4,),
        vision + "embeddings.position_embedding.weight": (9, 4),
        vision + "encoder.layers.0.self_attn.q_proj.weight": (4, 4),
        vision + "encoder.layers.0.self_attn.out_proj.bias": (4,),
        vision + "encoder.layers.0.layer_norm1.weight": (4,),
        vision + "encoder.layers.0.mlp.fc1.weight": (8, 4),
        vision + "post_layernorm.weight": (4,),
        PG + "model.multi_modal_projector.linear.weight": (6, 4),
        lang + "embed_tokens.weight": (10, 6),
        lang + "layers.0.self_attn.q_proj.weight": (6, 6),
        lang + "layers.0.self_attn.k_proj.weight": (2, 6),
        lang + "layers.0.self_attn.v_proj.weight": (2, 6),
        lang + "layers.0.self_attn.o_proj.weight": (6, 6),
        lang + "layers.0.mlp.gate_proj.weight": (12, 6),
        lang + "layers.0.mlp.down_proj.weight": (6, 12),
        lang + "layers.0.input_layernorm.weight": (6,),
        lang + "layers.0.post_attention_layernorm.weight": (6,),
        lang + "norm.weight": (6,),
        EX + "model.layers.0.self_attn.q_proj.weight": (6, 5),
        EX + "model.layers.0.mlp.up_proj.weight": (7, 5),
        EX + "model.layers.0.input_layernorm.dense.weight": (15, 5),
        EX + "model.layers.0.input_layernorm.dense.bias": (15,),
        EX + "model.layers.0.post_attention_layernorm.dense.weight": (15, 5),
        EX + "model.norm.dense.weight": (15, 5),
        EX + "lm_head.weight": (10, 5),
        "action_in_proj.weight": (5, 32),
        "action_in_proj.bias": (5,),
        "action_out_proj.weight": (32, 5),
        "action_out_proj.bias": (32,),
        "time_mlp_in.weight": (5, 5),
        "time_mlp_in.bias": (5,),
        "time_mlp_out.weight": (5, 5),
        "time_mlp_out.bias": (5,),
    }
    return names


def _upstream_state_dict(prefix: str = "nets.policy.", tie: bool = True) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    sd = {prefix + name: torch.randn(shape, generator=gen) for name, shape in _pi05_names().items()}
    if tie:  # torch.save keeps the tied embedding under both names, one storage
        sd[prefix + TIED_WEIGHTS[0]] = sd[prefix + TIED_WEIGHTS[1]]
    return sd


def test_keys_map_to_pi0pytorch_names():
    sd = _upstream_state_dict()
    mapped = openpi_state_dict(sd)
    assert set(mapped) == set(_pi05_names()) | {TIED_WEIGHTS[0]}
    for key, tensor in sd.items():
        assert mapped[key.removeprefix("nets.policy.")] is tensor
    assert mapped[TIED_WEIGHTS[0]] is mapped[TIED_WEIGHTS[1]]


def test_compiled_prefix_is_dropped_and_tied_weight_filled():
    sd = _upstream_state_dict(prefix="nets.policy._orig_mod.", tie=False)
    mapped = openpi_state_dict(sd)
    assert "action_in_proj.weight" in mapped and not any("_orig_mod" in k for k in mapped)
    assert mapped[TIED_WEIGHTS[0]] is mapped[TIED_WEIGHTS[1]]
    # the tied embedding counts once
    assert parameter_count(mapped) == sum(int(np.prod(s)) for s in _pi05_names().values())


def test_pi0_module_names_are_accepted():
    gen = torch.Generator().manual_seed(1)
    sd = {
        f"nets.policy.{k}": torch.randn(2, 2, generator=gen)
        for k in ("state_proj.weight", "action_time_mlp_in.weight", "action_time_mlp_out.weight")
    }
    assert set(openpi_state_dict(sd)) == {
        "state_proj.weight",
        "action_time_mlp_in.weight",
        "action_time_mlp_out.weight",
    }


@pytest.mark.parametrize(
    ("key", "named"),
    [
        ("nets.policy.value_head.weight", "value_head"),
        ("nets.policy.paligemma.lm_head.weight", "'paligemma'"),
        ("model.nets.policy.action_in_proj.weight", "model.nets.policy.action_in_proj.weight"),
        ("action_in_proj.weight", "action_in_proj.weight"),
    ],
)
def test_unknown_keys_are_refused_by_name(key, named):
    sd = _upstream_state_dict()
    sd[key] = torch.zeros(1)
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        openpi_state_dict(sd)


def test_colliding_and_non_tensor_entries_are_refused():
    sd = _upstream_state_dict()
    sd["nets.policy._orig_mod.action_in_proj.bias"] = torch.zeros(5)
    with pytest.raises(CheckpointError, match="collide"):
        openpi_state_dict(sd)
    with pytest.raises(CheckpointError, match="not a tensor"):
        openpi_state_dict({"nets.policy.action_in_proj.weight": [1.0]})
    with pytest.raises(CheckpointError, match="no state_dict"):
        openpi_state_dict({})


def _ckpt(robomimic_overrides: dict | None = None, action_width: int = 20) -> dict:
    robomimic = {
        "_target_": "egomimic.algo.pi.algo.PI",
        "config": {
            "pytorch_training_precision": "bfloat16",
            "pytorch_weight_path": "/storage/pi05_base_pytorch",
            "model": {"pi05": True, "action_dim": 32, "action_horizon": 100, "max_token_len": 180},
        },
        "domains": ["eva_bimanual"],
        "ac_keys": {"eva_bimanual": "actions_cartesian"},
        "tokenizer_model_name": "google/paligemma-3b-mix-224",
        "tokenizer_max_length": 128,
        "default_prompt": "This is a bad action.",
        "proprio_in_prompt": True,
        "embodiment_label": True,
        "state_num_bins": 256,
        "control_mode": None,
        **(robomimic_overrides or {}),
    }
    stats = {k: torch.zeros(action_width) for k in ("min", "max", "mean", "std", "quantile_1", "quantile_99")}
    return {
        "hyper_parameters": {
            "config_tree": {
                "model": {"_target_": "egomimic.pl_utils.pl_model.ModelWrapper", "robomimic_model": robomimic}
            },
            "norm_stats_state": {"norm_mode": "quantile", "norm_stats": {6: {"actions_cartesian": stats}}},
        },
        "state_dict": _upstream_state_dict(),
    }


def test_is_upstream_pi_reads_the_algorithm_target():
    assert is_upstream_pi(_ckpt())
    for target in ("egomimic.algo.pi.PI", "egomimic.algo.zoo.pi.PI"):
        assert is_upstream_pi(_ckpt({"_target_": target}))
    assert not is_upstream_pi(_ckpt({"_target_": "egomimic.pipeline.algo.PipelineAlgo"}))
    assert not is_upstream_pi({})
    assert not is_upstream_pi({"hyper_parameters": {"config_tree": {"model": "x"}}})


def test_spec_reads_the_config_with_upstream_defaults():
    spec = pi_spec(_ckpt())
    assert (spec.pi05, spec.action_dim, spec.action_horizon, spec.max_token_len) == (True, 32, 100, 180)
    assert (spec.paligemma_variant, spec.action_expert_variant, spec.precision) == (
        "gemma_2b",
        "gemma_300m",
        "bfloat16",
    )
    assert (spec.num_steps, spec.image_size, spec.ac_key, spec.variant) == (
        10,
        (224, 224),
        "actions_cartesian",
        "pi0.5",
    )
    assert spec.proprio_in_prompt and spec.embodiment_label and spec.control_mode is None
    bare = _ckpt()
    del bare["hyper_parameters"]["config_tree"]["model"]["robomimic_model"]["config"]["model"]["action_dim"]
    with pytest.raises(CheckpointError, match=r"config\.model\.action_dim"):
        pi_spec(bare)
    with pytest.raises(CheckpointError, match="pi_camera_slots"):
        pi_spec(_ckpt({"pi_camera_slots": {"base_0_rgb": "observations.images.left_wrist_img"}}))


def test_action_layout_other_than_eva_20d_is_refused():
    check_action_layout(_ckpt(), pi_spec(_ckpt()))
    legacy = _ckpt({"action_encoding": "legacy_normalized_ypr_rot6d"})
    with pytest.raises(CheckpointError, match="legacy_normalized_ypr_rot6d"):
        check_action_layout(legacy, pi_spec(legacy))
    ypr = _ckpt(action_width=14)
    with pytest.raises(CheckpointError, match="14-wide"):
        check_action_layout(ypr, pi_spec(ypr))


def test_without_openpi_loading_says_what_is_needed(monkeypatch):
    monkeypatch.setitem(sys.modules, "openpi", None)  # import openpi... raises ImportError even where installed
    with pytest.raises(CheckpointError) as err:
        load_upstream_pi(_ckpt(), "cpu")
    message = str(err.value)
    n = sum(int(np.prod(s)) for s in _pi05_names().values())
    for needed in (
        "openpi",
        "pi0.5",
        f"{n:,} parameters",
        "transformers==4.53.2",
        "PaliGemma tokenizer",
        "git+https://github.com/Physical-Intelligence/openpi",
        "`pi` family",
        "egomimic_policy/families/pi.py",
    ):
        assert needed in message


def test_loading_checks_the_keys_before_openpi(monkeypatch):
    monkeypatch.setitem(sys.modules, "openpi", None)
    ckpt = _ckpt()
    ckpt["state_dict"]["nets.policy.value_head.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match="value_head"):
        load_upstream_pi(ckpt, "cpu")


# ---- boundary conversions ----

LOW = 128 / 255 * 2 - 1  # uint8 128 in [-1, 1]


def test_480x640_frame_is_resized_to_168_rows_and_padded_28_28():
    img = np.zeros((480, 640, 3), np.uint8)
    img[:240, :, 0] = 255  # R: top half 255, bottom half 128
    img[240:, :, 0] = 128
    img[:, :320, 2] = 255  # B: left half 255, right half 0; G stays 0
    out = eva_image_to_pi(img)
    assert out.shape == (3, 224, 224) and out.dtype == torch.float32
    x = out.numpy()
    # scale 640/224 = 480/168: 168 content rows, (224 - 168) / 2 = 28 pad rows above and below, -1
    assert np.all(x[:, :28] == -1.0) and np.all(x[:, 196:] == -1.0)
    # bilinear, align_corners=False: output row i samples source row (i + 0.5) * 20/7 - 0.5, so
    # rows 0..83 read only the top half (83 -> 238.07) and 84..167 only the bottom (84 -> 240.93)
    np.testing.assert_allclose(x[0, 28:112], 1.0, atol=1e-6)
    np.testing.assert_allclose(x[0, 112:196], LOW, atol=1e-6)
    np.testing.assert_allclose(x[1, 28:196], -1.0, atol=1e-6)
    # the same along columns, no antialiasing (which would blend columns 111 and 112)
    np.testing.assert_allclose(x[2, 28:196, :112], 1.0, atol=1e-6)
    np.testing.assert_allclose(x[2, 28:196, 112:], -1.0, atol=1e-6)


def test_odd_padding_goes_to_the_bottom_and_portrait_pads_columns():
    # 101 x 300: 101 * 224 / 300 = 75.41 -> 75 rows; 149 pad rows: 74 above, 75 below
    x = eva_image_to_pi(np.full((101, 300, 3), 255, np.uint8)).numpy()
    assert np.all(x[:, :74] == -1.0) and np.all(x[:, 149:] == -1.0)
    np.testing.assert_allclose(x[:, 74:149], 1.0, atol=1e-6)
    # 640 x 480 (portrait): 168 columns, 28 pad columns each side
    y = eva_image_to_pi(np.full((640, 480, 3), 255, np.uint8)).numpy()
    assert np.all(y[:, :, :28] == -1.0) and np.all(y[:, :, 196:] == -1.0)
    np.testing.assert_allclose(y[:, :, 28:196], 1.0, atol=1e-6)


def test_224_frame_is_only_mapped_to_minus1_1():
    img = np.arange(224 * 224 * 3, dtype=np.int64).reshape(224, 224, 3).astype(np.uint8)
    out = eva_image_to_pi(img).numpy()
    expected = img.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0) * np.float32(2.0) - np.float32(1.0)
    np.testing.assert_array_equal(out, expected)


def test_resize_with_pad_keeps_the_batch_and_refuses_other_inputs():
    batch = torch.zeros(2, 3, 100, 50)
    assert resize_with_pad(batch, 224, 224).shape == (2, 3, 224, 224)
    with pytest.raises(ConfigError):
        resize_with_pad(torch.zeros(3, 10, 10, dtype=torch.float64), 224, 224)
    with pytest.raises(ConfigError, match="uint8"):
        eva_image_to_pi(np.zeros((480, 640, 3), np.float32))


def test_cameras_go_to_openpi_slots():
    frames = {cam: np.full((480, 640, 3), i * 100, np.uint8) for i, cam in enumerate(PI_CAMERA_SLOTS)}
    slots = pi_images(frames)
    assert list(slots) == ["base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"]
    np.testing.assert_allclose(slots["left_wrist_0_rgb"][:, 100, 100].numpy(), 100 / 255 * 2 - 1, atol=1e-6)
    with pytest.raises(ConfigError, match="right_wrist"):
        pi_images({k: v for k, v in frames.items() if k != "right_wrist"})


def test_state_is_zero_padded_to_32():
    state = np.arange(20, dtype=np.float64) / 10
    padded = pad_state(state)
    assert padded.shape == (32,) and padded.dtype == np.float32
    np.testing.assert_array_equal(padded[:20], state.astype(np.float32))
    assert np.all(padded[20:] == 0.0)
    assert pad_state(np.ones((2, 20))).shape == (2, 32)
    with pytest.raises(ConfigError):
        pad_state(np.zeros(33))


def test_actions_keep_the_first_20_of_32_columns():
    actions = np.arange(100 * 32, dtype=np.float32).reshape(100, 32)
    eva = actions_to_eva(actions)
    assert eva.shape == (100, 20) and eva.dtype == np.float64
    np.testing.assert_array_equal(eva[3], np.arange(3 * 32, 3 * 32 + 20))  # left 0..9, right 10..19
    np.testing.assert_array_equal(actions_to_eva(torch.from_numpy(actions)), eva)
    with pytest.raises(ConfigError):
        actions_to_eva(np.zeros((100, 19)))


def test_state_bins_follow_upstream_digitize():
    # bin k covers [-1 + k/128, -1 + (k+1)/128); clipped to [-1, 1] first
    assert state_bins(np.array([-1.0, -0.999, 0.0, 0.49, 0.5, 1.0, 2.0, -3.0])) == "0 0 128 190 192 255 255 0"
    assert state_bins(np.array([0.0, 0.99]), num_bins=4) == "2 3"


def test_prompt_blocks():
    spec = pi_spec(_ckpt())
    prompt = build_prompt("fold the towel", spec, state_normalized=np.array([-1.0, 0.0, 1.0]))
    assert prompt == "Task: fold the towel, Embodiment: eva bimanual, State: 0 128 255;\nAction: "
    plain = pi_spec(_ckpt({"proprio_in_prompt": False, "embodiment_label": False}))
    assert build_prompt("fold the towel", plain, state_normalized=None) == "fold the towel"
    assert build_prompt("", plain, state_normalized=None) == "This is a bad action."
    mode = pi_spec(_ckpt({"proprio_in_prompt": False, "control_mode": {"eva": "wrist frame xyz 6d gripper per arm"}}))
    assert build_prompt("t", mode, state_normalized=None) == (
        "Task: t, Embodiment: eva bimanual, Control mode: wrist frame xyz 6d gripper per arm;\nAction: "
    )
    other = pi_spec(_ckpt({"control_mode": {"aria": "x"}}))
    with pytest.raises(CheckpointError, match="control_mode"):
        build_prompt("t", other, state_normalized=None)


def test_the_policy_node_path_refuses_an_upstream_pi_with_what_it_needs(monkeypatch, tmp_path):
    """make_policy (what the node calls) routes an upstream PI file to openpi, not to the
    project's small `pi` family, and says what is missing."""
    from egomimic_policy.families import make_policy
    from egomimic_policy.upstream.policy import is_upstream_checkpoint, is_upstream_pi_checkpoint

    monkeypatch.setitem(sys.modules, "openpi", None)
    path = tmp_path / "pi05.ckpt"
    torch.save(_ckpt(), path)
    assert is_upstream_pi_checkpoint(path) and not is_upstream_checkpoint(path)
    with pytest.raises(CheckpointError, match="openpi"):
        make_policy(path, cache_dir=tmp_path / "cache")
