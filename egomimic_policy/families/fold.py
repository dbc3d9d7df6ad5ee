"""Fold: DDPM-trained diffusion over wrist-relative action chunks, sampled by deterministic DDIM.

Upstream (docs/eva.md "Policies"): cosine alpha-bar schedule over 100
training levels (offset s = 0.008, clamped to [1e-8, 1]); AdaLN transformer denoiser predicting
eps over the 100 chunk positions (learned positional embedding, sinusoidal level embedding,
condition = Linear(image features) + level embedding + Linear(state)); 2-frame window of the
three RGB images in [0, 1] and `state_ee_pose` (2, 20); output (100, 20).

Sampling, per level k with the next level k' (alpha-bar 1 after the last):
    eps = denoiser(x, k);  x0 = clamp((x - sqrt(1 - ab_k) eps) / sqrt(ab_k), -1, 1)
    x = sqrt(ab_k') x0 + sqrt(1 - ab_k') eps
then a final clamp to [-1, 1]. Live rollout uses `num_inference_steps` levels
round(linspace(99, 0, n)): 16 by default = [99, 92, 86, ..., 7, 0], one denoiser call each
(upstream: 535 ms at 100 steps vs 98 ms at 16 on an RTX 4090). The 100-level alpha-bar buffer
stays in the state dict; the live schedule is config, changeable on trained weights.

Inpainting (real-time chunking, Black et al. 2025; executor blend `inpaint`): given a committed
prefix of n normalized rows, x_t's first n rows are REPLACED by the prefix noised to x_t's level,
q(x_k | prefix) = sqrt(ab_k) prefix + sqrt(1 - ab_k) z with z the sampler's own initial noise of
those rows (RePaint-style x_t replacement, not the "replace the x0 prediction" variant; with the
sampler's own z it draws no extra random numbers, so the free rows' noise is the one a query
without a prefix gets). Done before the first denoiser call and after every step, so the
denoiser sees a consistent noisy chunk at each level and the free rows are denoised conditioned
on it through attention; after the last step (ab = 1) the first n rows ARE the prefix. Rows
beyond the prefix are free (hard mask, no soft decay: the executor crossfades the seam after the
prefix instead). Prefix rows are exempt from the final [-1, 1] clamp.

Defaults are small (d_model 64, 2 layers, 96x128 images, tiny keypoint CNN) so a query takes
tens of ms on one CPU core; upstream size: d_model=256, n_layers=4, n_heads=4 (and a larger
image encoder) via config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from egomimic_hw.errors import ConfigError
from egomimic_policy.families.base import Algorithm, FamilyConfig, TrainBatch, resize_area
from egomimic_policy.families.layers import (
    AdaLNBlock,
    AdaLNOutput,
    FeedForward,
    SpatialSoftmaxEncoder,
    timestep_embedding,
)
from egomimic_policy.features import ACTION_DIM, STATE_DIM

ALPHA_BAR_CLAMP = (1e-8, 1.0)


def cosine_alpha_bar(train_timesteps: int, offset: float = 0.008) -> torch.Tensor:
    """alpha-bar of levels 0..T-1: f((k+1)/T) / f(0), f(u) = cos^2((u + s)/(1 + s) * pi/2)."""
    u = torch.arange(1, train_timesteps + 1, dtype=torch.float64) / train_timesteps
    f = torch.cos((u + offset) / (1 + offset) * math.pi / 2) ** 2
    f0 = math.cos(offset / (1 + offset) * math.pi / 2) ** 2
    return (f / f0).clamp(*ALPHA_BAR_CLAMP).float()


def live_levels(num_inference_steps: int, train_timesteps: int) -> tuple[int, ...]:
    """round(linspace(T-1, 0, n)): the levels a live query visits, noisiest first."""
    if not 1 <= num_inference_steps <= train_timesteps:
        raise ConfigError(f"num_inference_steps must be in [1, {train_timesteps}], got {num_inference_steps}")
    if num_inference_steps == 1:
        return (train_timesteps - 1,)
    return tuple(int(v) for v in np.round(np.linspace(train_timesteps - 1, 0, num_inference_steps)))


@dataclass(frozen=True)
class FoldConfig(FamilyConfig):
    image_height: int = 96
    image_width: int = 128
    """Model input size; camera frames (640x480) are resized to it with cv2.INTER_AREA."""
    cnn_channels: tuple[int, ...] = (16, 32, 32)
    keypoints: int = 16
    image_feature_dim: int = 64
    train_timesteps: int = 100
    num_inference_steps: int = 16
    cosine_offset: float = 0.008

    REFUSED_FIELDS: ClassVar[Mapping[str, str]] = {
        "n_experts": "Fold's denoiser is dense (upstream's frozen Fold head rejects MoE); use family 'moe'",
        "top_k": "Fold's denoiser is dense; use family 'moe'",
        "flow_steps": "Fold is a diffusion policy (num_inference_steps); flow matching is family 'pi'",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.cnn_channels or any(not isinstance(c, int) or c < 1 for c in self.cnn_channels):
            raise ConfigError(f"cnn_channels must be positive ints, got {self.cnn_channels!r}")
        if not 0.0 <= self.cosine_offset < 1.0:
            raise ConfigError(f"cosine_offset must be in [0, 1), got {self.cosine_offset}")
        live_levels(self.num_inference_steps, self.train_timesteps)


class FoldAlgorithm(Algorithm):
    family: ClassVar[str] = "fold"
    config_type: ClassVar[type[FamilyConfig]] = FoldConfig
    config: FoldConfig
    alpha_bar: torch.Tensor
    """Buffer (train_timesteps,) registered in __init__; declared so it reads as a tensor, not
    nn.Module.__getattr__'s Tensor | Module."""
    compat_version: ClassVar[str] = "fold-v1"
    rollout_overridable: ClassVar[frozenset[str]] = frozenset({"num_inference_steps"})

    def __init__(self, config: FoldConfig):
        super().__init__(config)
        d, n_cams = config.d_model, len(self.cameras)
        self.image_encoders = nn.ModuleList(
            SpatialSoftmaxEncoder(config.cnn_channels, config.keypoints, config.image_feature_dim) for _ in self.cameras
        )
        self.image_proj = nn.Linear(config.n_obs_steps * n_cams * config.image_feature_dim, d)
        self.state_proj = nn.Linear(config.n_obs_steps * STATE_DIM, d)
        self.time_mlp = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.action_in = nn.Linear(ACTION_DIM, d)
        self.position = nn.Parameter(torch.randn(1, config.chunk_length, d) * 0.02)
        self.blocks = nn.ModuleList(AdaLNBlock(d, config.n_heads, self.make_ffn()) for _ in range(config.n_layers))
        self.head = AdaLNOutput(d, ACTION_DIM)
        self.register_buffer("alpha_bar", cosine_alpha_bar(config.train_timesteps, config.cosine_offset))

    def make_ffn(self) -> nn.Module:
        return FeedForward(self.config.d_model, self.config.d_model * self.config.ffn_mult)

    @property
    def levels(self) -> tuple[int, ...]:
        return live_levels(self.config.num_inference_steps, self.config.train_timesteps)

    # --- inputs ---

    def image_input(self, rgb: np.ndarray) -> np.ndarray:
        """RGB uint8 -> (3, h, w) float32 in [0, 1] at the configured size."""
        small = resize_area(rgb, self.config.image_height, self.config.image_width)
        return np.ascontiguousarray(small.transpose(2, 0, 1), dtype=np.float32) / 255.0

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return torch.cat([enc(images[:, i]) for i, enc in enumerate(self.image_encoders)], dim=-1)

    def condition(self, features: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self.image_proj(features.flatten(1)) + self.state_proj(state.flatten(1))

    # --- denoiser and sampler ---

    def denoise(self, x: torch.Tensor, level: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """eps prediction (B, H, 20) of noisy actions x at integer levels (B,)."""
        c = cond + self.time_mlp(timestep_embedding(level, self.config.d_model))
        h = self.action_in(x) + self.position
        for block in self.blocks:
            h = block(h, c)
        return self.head(h, c)

    def sample(
        self, context: torch.Tensor, generator: torch.Generator, prefix: torch.Tensor | None = None
    ) -> torch.Tensor:
        """DDIM from seeded noise; `prefix` (B, n, 20) normalized, n <= chunk_length: inpaint
        (module docstring, "Inpainting"). Without a prefix the ops are exactly the plain sampler's."""
        b = context.shape[0]
        x = torch.randn((b, self.config.chunk_length, ACTION_DIM), generator=generator, device=context.device)
        levels = self.levels
        if prefix is not None:
            n, noise = prefix.shape[1], x[:, : prefix.shape[1]].clone()
            x[:, :n] = (
                torch.sqrt(self.alpha_bar[levels[0]]) * prefix + torch.sqrt(1 - self.alpha_bar[levels[0]]) * noise
            )
        for i, level in enumerate(levels):
            ab = self.alpha_bar[level]
            ab_next = self.alpha_bar[levels[i + 1]] if i + 1 < len(levels) else torch.ones((), device=x.device)
            eps = self.denoise(x, torch.full((b,), level, device=x.device, dtype=torch.long), context)
            x0 = ((x - torch.sqrt(1 - ab) * eps) / torch.sqrt(ab)).clamp(-1.0, 1.0)
            x = torch.sqrt(ab_next) * x0 + torch.sqrt(1 - ab_next) * eps
            if prefix is not None:  # the known rows, noised to the level x is now at (exact at the end)
                x[:, :n] = torch.sqrt(ab_next) * prefix + torch.sqrt(1 - ab_next) * noise
        out = x.clamp(-1.0, 1.0)
        if prefix is not None:
            out[:, :n] = prefix  # committed rows are not clamped: they may lie outside the stats' range
        return out

    # --- training ---

    def diffusion_loss(self, batch: TrainBatch, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(masked eps MSE, conditioning) with random levels and noise (DDPM training)."""
        cond = self.condition(self.window_features(batch.images), batch.state)
        b, device = batch.actions.shape[0], batch.actions.device
        # drawn on the CPU generator, then moved: the same draws on every device
        level = torch.randint(0, self.config.train_timesteps, (b,), generator=generator).to(device)
        noise = torch.randn(batch.actions.shape, generator=generator).to(device)
        ab = self.alpha_bar[level][:, None, None]
        noisy = torch.sqrt(ab) * batch.actions + torch.sqrt(1 - ab) * noise
        err = (self.denoise(noisy, level, cond) - noise) ** 2
        if batch.action_mask is not None:
            mask = batch.action_mask[:, :, None].expand_as(err)
            return (err * mask).sum() / mask.sum().clamp(min=1.0), cond
        return err.mean(), cond

    def loss(
        self, batch: TrainBatch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        mse, _ = self.diffusion_loss(batch, generator)
        return mse, {"loss/diffusion": float(mse.detach())}
