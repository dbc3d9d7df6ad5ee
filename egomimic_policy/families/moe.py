"""MoE: the Fold diffusion policy with mixture-of-experts feed-forward layers in its denoiser.

Upstream experiment `rh_fold_pipeline_sampler_moe_e8k4`: each
denoiser block's FFN becomes E experts with top-k token routing, trained with an auxiliary
load-balancing loss (logged as `loss/moe_lb`, with expert fractions). Everything else (inputs,
schedule, DDIM sampler, action layout) is Fold's, so the live pipeline is identical.

Defaults are small (4 experts, top-2, expert width x2, d_model 64); upstream: n_experts=8, top_k=4.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from egomimic_hw.errors import ConfigError
from egomimic_policy.families.base import FamilyConfig, TrainBatch
from egomimic_policy.families.fold import FoldAlgorithm, FoldConfig
from egomimic_policy.families.layers import MoEFeedForward


@dataclass(frozen=True)
class MoEConfig(FoldConfig):
    n_experts: int = 4
    top_k: int = 2
    expert_ffn_mult: int = 2
    """Each expert's hidden width = d_model * expert_ffn_mult: with top-2 of width x2 a token's
    active compute equals Fold's dense FFN (x4), so MoE adds capacity, not much latency."""
    load_balance_weight: float = 0.01
    """Weight of the load-balancing loss (1.0 = uniform routing) added to the diffusion loss."""

    REFUSED_FIELDS: ClassVar[Mapping[str, str]] = {
        "flow_steps": "MoE here is the diffusion (Fold) denoiser with expert FFNs; flow matching is family 'pi'",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.top_k <= self.n_experts:
            raise ConfigError(f"need 1 <= top_k <= n_experts, got top_k={self.top_k}, n_experts={self.n_experts}")
        if not self.load_balance_weight >= 0:
            raise ConfigError(f"load_balance_weight must be >= 0, got {self.load_balance_weight}")


class MoEAlgorithm(FoldAlgorithm):
    family: ClassVar[str] = "moe"
    config_type: ClassVar[type[FamilyConfig]] = MoEConfig
    config: MoEConfig
    compat_version: ClassVar[str] = "moe-v1"

    def make_ffn(self) -> nn.Module:
        c = self.config
        return MoEFeedForward(c.d_model, c.d_model * c.expert_ffn_mult, c.n_experts, c.top_k)

    def moe_layers(self) -> list[MoEFeedForward]:
        return [m for m in self.modules() if isinstance(m, MoEFeedForward)]

    def loss(
        self, batch: TrainBatch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        mse, _ = self.diffusion_loss(batch, generator)
        layers = self.moe_layers()
        balance = torch.stack([m.aux_loss for m in layers]).mean()
        fractions = torch.stack([m.expert_fraction for m in layers]).mean(0)
        logs = {"loss/diffusion": float(mse.detach()), "loss/moe_lb": float(balance.detach())}
        logs.update({f"moe/expert_fraction_{i}": float(f) for i, f in enumerate(fractions)})
        return mse + self.config.load_balance_weight * balance, logs
