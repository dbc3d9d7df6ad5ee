"""Stages 1-2 of upstream's Fold and MoE pipelines: the noise, the flow sampler and its denoisers.

Built from the real configs, stage 2 has exactly the checkpoints' tensor names and shapes; the
Euler flow is deterministic given the noise, calls the denoiser num_inference_steps times on a
uniform grid from t = 0; the time embedding and the MoE routing match hand computations."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import yaml

from egomimic_policy.upstream.denoisers import (
    CrossTransformer,
    DDPSafeMoEFFN,
    MoECrossTransformer,
    MoEFFN,
    posemb_sincos,
)
from egomimic_policy.upstream.samplers import (
    NOISE_KEY,
    GaussianLatentNoise,
    MoEMultiJActionSampler,
    MultiJActionSampler,
)

torch.set_num_threads(1)

RESEARCH = Path(__file__).parents[3] / "fixtures" / "upstream"
"""Upstream's key lists and config trees of real-size checkpoints (tests/fixtures/upstream/README.md)."""
STAGE2 = "nets.policy.stages.2."
CLASSES = {
    "egomimic.pipeline.stages_sampler.GaussianLatentNoise": GaussianLatentNoise,
    "egomimic.pipeline.stages_sampler.MultiJActionSampler": MultiJActionSampler,
    "egomimic.pipeline.stages_sampler_moe.MoEMultiJActionSampler": MoEMultiJActionSampler,
    "egomimic.models.denoising_nets.CrossTransformer": CrossTransformer,
    "egomimic.models.moe_denoising_nets.MoECrossTransformer": MoECrossTransformer,
}


def build(node):
    """Hydra-style instantiation of a stage subtree (children first) with this module's classes."""
    if isinstance(node, dict):
        kwargs = {k: build(v) for k, v in node.items() if k != "_target_"}
        return CLASSES[node["_target_"]](**kwargs) if "_target_" in node else kwargs
    if isinstance(node, list):
        return [build(v) for v in node]
    return node


TINY_STAGES = [
    {"_target_": "egomimic.pipeline.stages_sampler.GaussianLatentNoise", "action_horizon": 10, "latent_dim": 16},
    {
        "_target_": "egomimic.pipeline.stages_sampler.MultiJActionSampler",
        "condition_input_dim": 96,
        "condition_dim": 24,
        "gradient_accumulation_steps": 1,
        "schedule_anchor_domain": "eva_bimanual",
        "action_horizon": 10,
        "action_dims": {"eva_bimanual": 20},
        "latent_dim": 16,
        "decoder_hidden_dim": 32,
        "denoiser_hidden_dim": 32,
        "num_inference_steps": 4,
        "sampling_schedule": {1: {1: 0.5, 2: 0.5}, 2001: {2: 0.8, 4: 0.15, 8: 0.05}},
        "gradient_checkpointing": True,
        "denoising_module": {
            "_target_": "egomimic.models.denoising_nets.CrossTransformer",
            "nblocks": 2,
            "cond_dim": 24,
            "hidden_dim": 32,
            "act_dim": 16,
            "act_seq": 10,
            "n_heads": 2,
            "dropout": 0.1,
            "mlp_layers": 4,
            "mlp_ratio": 4,
            "time_conditioning": "additive",
        },
    },
]
"""Stages 1 and 2 of the tiny Fold checkpoint upstream wrote for the reference fixture."""


def tiny_sampler(seed: int = 0) -> tuple[GaussianLatentNoise, MultiJActionSampler]:
    torch.manual_seed(seed)
    noise, sampler = build(TINY_STAGES)
    with torch.no_grad():  # pos_emb starts at zero upstream; make it count
        sampler.denoising_module.pos_emb.normal_()
    return noise, sampler.eval()


# ---------------------------------------------------------------- names and shapes


def checkpoint_keys(name: str) -> dict[str, tuple[int, ...]]:
    keys = {}
    for line in (RESEARCH / f"keys_{name}.txt").read_text().splitlines():
        parts = line.split("\t") if "\t" in line else re.split(r"\s(?=\()|\)\s", line)
        if len(parts) < 2 or not parts[0].startswith(STAGE2):
            continue
        dims = parts[1].strip().strip("()").replace(" ", "")
        keys[parts[0][len(STAGE2) :]] = tuple(int(d) for d in dims.split(",") if d)
    return keys


@pytest.mark.parametrize(
    ("name", "sampler_class", "denoiser_class"),
    [
        ("fold", MultiJActionSampler, CrossTransformer),
        ("moe", MoEMultiJActionSampler, MoECrossTransformer),
    ],
)
def test_real_config_builds_the_checkpoints_stage2_names_and_shapes(name, sampler_class, denoiser_class):
    config = yaml.safe_load((RESEARCH / f"config_tree_{name}.yaml").read_text())
    stages = config["model"]["robomimic_model"]["stages"]
    with torch.device("meta"):  # ~300M parameters: shapes only
        noise, sampler = build(stages[1]), build(stages[2])
    assert isinstance(noise, GaussianLatentNoise) and not list(noise.state_dict())
    assert type(sampler) is sampler_class and type(sampler.denoising_module) is denoiser_class
    ours = {k: tuple(v.shape) for k, v in sampler.state_dict().items()}
    theirs = checkpoint_keys(name)
    assert len(theirs) > 400
    assert sorted(set(theirs) - set(ours)) == [], "missing"
    assert sorted(set(ours) - set(theirs)) == [], "unexpected"
    assert {k: v for k, v in ours.items() if theirs[k] != v} == {}
    assert sampler.state_dict()["training_batches_seen"].dtype == torch.int64
    assert noise.num_tokens == sampler.latent_horizon and noise.latent_dim == sampler.latent_dim


# ---------------------------------------------------------------- the flow


class CountingDenoiser(torch.nn.Module):
    """v(x, t, c) = t + mean(c): records every call's time."""

    def __init__(self):
        super().__init__()
        self.times: list[torch.Tensor] = []

    def forward(self, x, t, c):
        self.times.append(t.clone())
        return torch.ones_like(x) * (t[:, None, None] + c.mean(dim=(1, 2))[:, None, None])


def test_euler_is_deterministic_given_the_noise_and_calls_the_denoiser_once_per_step():
    noise_stage, sampler = tiny_sampler()
    calls = []
    sampler.denoising_module.register_forward_hook(lambda module, args, out: calls.append(args[1].clone()))
    condition = torch.randn(3, 96)
    latent = torch.randn(3, 10, 16)

    def run():
        batch = {"condition": condition.clone(), "embodiment": "eva_bimanual", NOISE_KEY: latent.clone()}
        with torch.inference_mode():
            return sampler(noise_stage(batch))

    first = run()
    assert len(calls) == sampler.num_inference_steps == 4
    torch.testing.assert_close(torch.stack(calls), torch.tensor([0.0, 0.25, 0.5, 0.75])[:, None].expand(4, 3))
    second = run()
    assert len(calls) == 8
    assert first["pred_action"].shape == (3, 10, 20)
    assert first["sampler/endpoint"].shape == (3, 10, 16)
    assert torch.equal(first["sampler/noise"], latent)
    assert torch.equal(first["pred_action"], second["pred_action"])
    assert not torch.equal(first["sampler/endpoint"], latent)
    # another condition, another action; a row's action depends on its row only
    other = {"condition": condition.clone(), "embodiment": "eva_bimanual", NOISE_KEY: latent.clone()}
    other["condition"][1] += 1.0
    with torch.inference_mode():
        other = sampler(other)
    torch.testing.assert_close(other["pred_action"][0], first["pred_action"][0])
    assert not torch.allclose(other["pred_action"][1], first["pred_action"][1])


def test_euler_steps_uniformly_from_zero_without_clamping():
    _, sampler = tiny_sampler()
    sampler.denoising_module = CountingDenoiser()
    condition = sampler.condition_projection.weight.new_zeros(2, 1, 24)
    condition[1] += 3.0
    x0 = torch.randn(2, 10, 16)
    with torch.inference_mode():
        end = sampler.integrate(x0, condition, num_steps=4)
    # sum over steps of dt * (t_k + mean c) = (0 + .25 + .5 + .75) / 4 + mean c
    torch.testing.assert_close(end[0], x0[0] + 0.375)
    torch.testing.assert_close(end[1], x0[1] + 3.375)  # far beyond [-1, 1]: no clamp
    assert len(sampler.denoising_module.times) == 4
    torch.testing.assert_close(sampler.last_integration_step_sizes, torch.full((2, 4), 0.25))


def test_noise_stage_draws_its_shape_and_keeps_a_given_latent():
    noise_stage, _ = tiny_sampler()
    drawn = noise_stage({"condition": torch.zeros(5, 96)})[NOISE_KEY]
    assert drawn.shape == (5, 10, 16) and drawn.dtype == torch.float32
    given = torch.randn(2, 10, 16, dtype=torch.float64)
    kept = noise_stage({"condition": torch.zeros(2, 96), NOISE_KEY: given})[NOISE_KEY]
    assert kept.dtype == torch.float32 and torch.equal(kept, given.float())
    with pytest.raises(ValueError, match="shape"):
        noise_stage({"condition": torch.zeros(2, 96), NOISE_KEY: torch.zeros(10, 16)})


def test_condition_is_projected_plus_the_domain_embedding():
    _, sampler = tiny_sampler()
    condition = torch.randn(2, 96)
    got = sampler.condition_from_batch({"condition": condition}, "eva_bimanual")
    want = condition @ sampler.condition_projection.weight.T + sampler.condition_projection.bias
    torch.testing.assert_close(got, (want + sampler.domain_embeddings["eva_bimanual"])[:, None])
    with pytest.raises(KeyError):
        sampler.condition_from_batch({"condition": condition}, "human_bimanual")


def test_training_schedule_cycles_and_counts_anchor_batches():
    _, sampler = tiny_sampler()
    assert [sampler.unroll_steps_at(s) for s in (1, 2, 3, 2000)] == [1, 2, 1, 2]
    cycle = [sampler.unroll_steps_at(2001 + i) for i in range(20)]
    assert cycle == [2] * 16 + [4] * 3 + [8]
    sampler.train()
    batch = {"condition": torch.randn(2, 96), "embodiment": "eva_bimanual", NOISE_KEY: torch.randn(2, 10, 16)}
    sampler(batch)
    sampler(dict(batch))
    assert int(sampler.training_batches_seen) == 2
    assert batch["log/optimizer_step"] == 1.0


# ---------------------------------------------------------------- the pieces


def test_posemb_sincos_matches_hand_computed_values():
    # 4 channels: periods 4e-3 and 4.0; sin first, then cos
    got = posemb_sincos(torch.tensor([0.001, 0.0], dtype=torch.float64), 4, min_period=4e-3, max_period=4.0)
    quarter, tiny = math.pi / 2, 2 * math.pi * 0.001 / 4.0
    want = torch.tensor(
        [[math.sin(quarter), math.sin(tiny), math.cos(quarter), math.cos(tiny)], [0.0, 0.0, 1.0, 1.0]],
        dtype=torch.float64,
    )
    torch.testing.assert_close(got, want)
    assert got[0, 0].item() == pytest.approx(1.0) and got[0, 3].item() == pytest.approx(0.9999987663)
    # 6 channels: the middle period is the geometric mean, 4e-3 * 1000 ** 0.5
    t = 0.3
    periods = [4e-3, 4e-3 * 1000**0.5, 4.0]
    want6 = [math.sin(2 * math.pi * t / p) for p in periods] + [math.cos(2 * math.pi * t / p) for p in periods]
    got6 = posemb_sincos(torch.tensor([t], dtype=torch.float64), 6, 4e-3, 4.0)[0]
    torch.testing.assert_close(got6, torch.tensor(want6, dtype=torch.float64))
    with pytest.raises(ValueError):
        posemb_sincos(torch.tensor([t]), 5, 4e-3, 4.0)


def test_cross_transformer_adds_or_concatenates_the_time_embedding():
    torch.manual_seed(1)
    additive = CrossTransformer(1, 6, 8, 4, 3, 2, 0.0, 1, 2, time_conditioning="additive").eval()
    concat = CrossTransformer(1, 6, 8, 4, 3, 2, 0.0, 1, 2, time_conditioning="concat").eval()
    assert additive.proj_u.weight.shape == (8, 4) and additive.pos_emb.shape == (1, 3, 8)
    assert concat.proj_u.weight.shape == (4, 4) and concat.pos_emb.shape == (1, 3, 4)
    x, t, c = torch.randn(2, 3, 4), torch.rand(2), torch.randn(2, 1, 6)
    seen = []
    additive.layers[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    concat.layers[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    with torch.no_grad():
        assert additive(x, t, c).shape == (2, 3, 4) and concat(x, t, c).shape == (2, 3, 4)
        torch.testing.assert_close(seen[0], additive.proj_u(x) + posemb_sincos(t, 8, 4e-3, 4.0)[:, None])
        time4 = posemb_sincos(t, 4, 4e-3, 4.0)[:, None].expand(2, 3, 4)
        torch.testing.assert_close(seen[1], torch.cat([concat.proj_u(x), time4], dim=-1))
    block = additive.layers[0]
    assert [type(m).__name__ for m in block.mlp] == ["Linear", "GELU", "Linear"]
    assert block.mha.batch_first and block.cmha.batch_first


def test_moe_ffn_routes_each_token_to_its_renormalized_top_k_experts():
    torch.manual_seed(2)
    moe = MoEFFN(d_model=6, d_intermediate=5, num_experts=4, top_k=2)
    x = torch.randn(2, 3, 6)
    with torch.no_grad():
        got = moe(x)
        want = torch.zeros_like(x)
        for index in range(2 * 3):
            token = x.reshape(-1, 6)[index]
            p = torch.softmax(moe.gate(token), dim=-1)
            top = torch.topk(p, 2)
            for weight, expert in zip(top.values / top.values.sum(), top.indices.tolist()):
                e = moe.experts[expert]
                gate, value = e.gate_value(token).chunk(2)
                want.reshape(-1, 6)[index] += weight * e.output(torch.nn.functional.silu(gate) * value)
    torch.testing.assert_close(got, want)
    assert moe.last_expert_frac.sum().item() == pytest.approx(1.0)
    assert moe.gate.bias is None


def test_ddp_safe_moe_is_the_plain_moe_until_an_expert_parameter_is_not_finite():
    """Upstream's anchor (0.0 x the first element of every expert parameter, summed): the same
    output bit for bit, and NaN as soon as any of those elements is not finite."""
    torch.manual_seed(4)
    plain = MoEFFN(d_model=6, d_intermediate=5, num_experts=3, top_k=2)
    safe = DDPSafeMoEFFN(d_model=6, d_intermediate=5, num_experts=3, top_k=2)
    safe.load_state_dict(plain.state_dict())
    x = torch.randn(2, 4, 6)
    with torch.no_grad():
        assert torch.equal(safe(x), plain(x))
        for index, (name, parameter) in enumerate(safe.experts.named_parameters()):
            kept = parameter.reshape(-1)[0].item()
            parameter.reshape(-1)[0] = (float("inf"), float("nan"))[index % 2]
            assert torch.isnan(safe(x)).all(), f"a non-finite {name} left the output finite"
            parameter.reshape(-1)[0] = kept
        assert torch.equal(safe(x), plain(x))


def test_moe_sampler_reports_the_router_loss_and_the_same_keys():
    torch.manual_seed(3)
    denoiser = MoECrossTransformer(
        2, 24, 32, 16, 10, 2, 0.0, 2, 2, "additive", moe_experts=4, moe_top_k=2, moe_d_expert=8
    )
    sampler = MoEMultiJActionSampler(
        denoiser,
        condition_input_dim=96,
        action_horizon=10,
        action_dims={"eva_bimanual": 20, "human_bimanual": 126},
        latent_dim=16,
        condition_dim=24,
        decoder_hidden_dim=32,
        denoiser_hidden_dim=32,
        num_inference_steps=3,
        decoder_extra_hidden_layers_by_domain={"human_bimanual": 2},
    ).eval()
    assert [n for n, _ in sampler.decoders["human_bimanual"].named_children() if n.isdigit()] == [
        str(i) for i in range(9)
    ]
    batch = {"condition": torch.randn(2, 96), "embodiment": "human_bimanual", NOISE_KEY: torch.randn(2, 10, 16)}
    with torch.inference_mode():
        out = sampler(batch)
    assert out["pred_action"].shape == (2, 10, 126)
    assert out["loss/moe_lb"].ndim == 0 and "log/moe_gate_entropy" in out
    assert sorted(k for k in out if k.startswith("log/moe_expert_frac_e")) == [
        f"log/moe_expert_frac_e{i}" for i in range(4)
    ]
