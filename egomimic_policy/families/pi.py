"""PI: a pi0-style flow-matching action expert over padded actions.

Upstream (docs/eva.md "Policies"): actions padded to 32 dims, horizon 100,
images resized WITH PADDING to 224x224 and mapped to [-1, 1] in the camera slots base /
left_wrist / right_wrist (here front_1 -> base), flow matching integrated in 10 Euler steps.
The 3B PaliGemma prefix is out of reach on a CPU; here the prefix is a small ViT-style patch
encoder (one learned slot embedding per camera) plus a state token, and the action expert is
an AdaLN transformer that cross-attends to the prefix. Upstream size is reached by config
(d_model, n_layers, prefix_layers, patch_size), not by weights.

Flow matching (pi0 convention): x_t = t * noise + (1 - t) * actions, target velocity
u = noise - actions, t ~ Beta(1.5, 1) * 0.999 + 0.001 during training; sampling starts from
noise at t = 1 and integrates x += dt * v with dt = -1 / flow_steps down to t = 0. The padded
action dims (20..31) carry no loss and are dropped at the output. State is padded to 32 too.
Inpainting (real-time chunking, Black et al. 2025; executor blend `inpaint`): given a committed
prefix of n normalized rows, before every Euler step at time t the first n rows (action dims
0..19; the padding dims stay free) are set to the point of the training path at t,
t * z + (1 - t) * prefix, with z the sampler's own initial noise of those rows (no extra random
draws); the velocity of the free rows is computed against them, and at t = 0 they are the
prefix exactly. Rows beyond the prefix are free (hard mask, no soft decay: the executor
crossfades the seam after the prefix instead).
No torch.compile (its wrapper cost ~50 s on the first call upstream).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from egomimic_hw.errors import ConfigError
from egomimic_policy.families.base import Algorithm, FamilyConfig, TrainBatch, resize_area
from egomimic_policy.families.layers import AdaLNBlock, AdaLNOutput, FeedForward, PatchEncoder, timestep_embedding
from egomimic_policy.features import ACTION_DIM, STATE_DIM

CAMERA_SLOTS = {"front_1": "base_0_rgb", "left_wrist": "left_wrist_0_rgb", "right_wrist": "right_wrist_0_rgb"}
"""Our camera names -> upstream openpi image slots (base / left_wrist / right_wrist)."""
TIME_SCALE = 1000.0
"""Flow time t in [0, 1] is scaled before the sinusoidal embedding (its frequencies expect ~1e3)."""


def resize_with_pad(rgb: np.ndarray, size: int) -> np.ndarray:
    """Fit the longer side to `size` with cv2.INTER_AREA, keep the aspect ratio, pad with black
    (openpi's resize_with_pad): a 640x480 frame becomes 224x168 centred in 224x224."""
    h, w = rgb.shape[:2]
    scale = size / max(h, w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    small = resize_area(rgb, nh, nw)
    out = np.zeros((size, size, 3), dtype=np.uint8)
    top, left = (size - nh) // 2, (size - nw) // 2
    out[top : top + nh, left : left + nw] = small
    return out


@dataclass(frozen=True)
class PIConfig(FamilyConfig):
    n_obs_steps: int = 1
    """pi0 conditions on the current frame only; 2 is allowed (the window then has two frames)."""
    image_size: int = 224
    patch_size: int = 32
    prefix_layers: int = 1
    action_pad_dim: int = 32
    flow_steps: int = 10

    REFUSED_FIELDS: ClassVar[Mapping[str, str]] = {
        "n_experts": "this PI action expert is dense; the MoE denoiser is family 'moe'",
        "top_k": "this PI action expert is dense; the MoE denoiser is family 'moe'",
        "num_inference_steps": "PI integrates flow_steps Euler steps; num_inference_steps is Fold's DDIM schedule",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.image_size % self.patch_size:
            raise ConfigError(f"image_size {self.image_size} must be a multiple of patch_size {self.patch_size}")
        if self.action_pad_dim < max(ACTION_DIM, STATE_DIM):
            raise ConfigError(f"action_pad_dim {self.action_pad_dim} must be >= {max(ACTION_DIM, STATE_DIM)}")


class PIAlgorithm(Algorithm):
    family: ClassVar[str] = "pi"
    config_type: ClassVar[type[FamilyConfig]] = PIConfig
    config: PIConfig
    compat_version: ClassVar[str] = "pi-v1"
    rollout_overridable: ClassVar[frozenset[str]] = frozenset({"flow_steps"})

    def __init__(self, config: PIConfig):
        super().__init__(config)
        d, c = config.d_model, config
        self.patches = PatchEncoder(c.image_size, c.patch_size, d)
        self.camera_slot = nn.Parameter(torch.randn(len(self.cameras), 1, d) * 0.02)
        self.state_in = nn.Linear(c.action_pad_dim, d)
        self.obs_step = nn.Parameter(torch.randn(c.n_obs_steps, 1, d) * 0.02)
        self.prefix = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, c.n_heads, d * c.ffn_mult, dropout=0.0, batch_first=True, norm_first=True),
            num_layers=c.prefix_layers,
            enable_nested_tensor=False,
        )
        self.time_mlp = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.action_in = nn.Linear(c.action_pad_dim, d)
        self.position = nn.Parameter(torch.randn(1, c.chunk_length, d) * 0.02)
        self.blocks = nn.ModuleList(
            AdaLNBlock(d, c.n_heads, FeedForward(d, d * c.ffn_mult), cross_attention=True) for _ in range(c.n_layers)
        )
        self.head = AdaLNOutput(d, c.action_pad_dim)

    # --- inputs ---

    def image_input(self, rgb: np.ndarray) -> np.ndarray:
        """RGB uint8 -> (3, 224, 224) float32 in [-1, 1], letterboxed."""
        padded = resize_with_pad(rgb, self.config.image_size)
        return np.ascontiguousarray(padded.transpose(2, 0, 1), dtype=np.float32) / 127.5 - 1.0

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, 3, S, S) -> (B, C * patches, d) tokens tagged with their camera slot."""
        tokens = [self.patches(images[:, i]) + self.camera_slot[i] for i in range(images.shape[1])]
        return torch.cat(tokens, dim=1)

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (0, self.config.action_pad_dim - x.shape[-1]))

    def condition(self, features: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Prefix memory (B, T * (C * P + 1), d): image tokens and one state token per obs step."""
        state_tok = self.state_in(self._pad(state))[:, :, None]  # (B, T, 1, d)
        tokens = torch.cat([features, state_tok], dim=2) + self.obs_step[None]
        return self.prefix(tokens.flatten(1, 2))

    # --- action expert ---

    def velocity(self, x: torch.Tensor, t: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        cond = self.time_mlp(timestep_embedding(t * TIME_SCALE, self.config.d_model))
        h = self.action_in(x) + self.position
        for block in self.blocks:
            h = block(h, cond, memory)
        return self.head(h, cond)

    def sample(
        self, context: torch.Tensor, generator: torch.Generator, prefix: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Euler from seeded noise at t = 1 to t = 0; `prefix` (B, n, 20) normalized: inpaint
        (module docstring, "Inpainting"). Without a prefix the ops are exactly the plain sampler's."""
        b = context.shape[0]
        x = torch.randn(
            (b, self.config.chunk_length, self.config.action_pad_dim), generator=generator, device=context.device
        )
        if prefix is not None:
            n = prefix.shape[1]
            noise = x[:, :n, :ACTION_DIM].clone()
        dt = -1.0 / self.config.flow_steps
        for step in range(self.config.flow_steps):
            t_now = 1.0 + step * dt
            if prefix is not None:  # the known rows on the straight path noise -> prefix at time t
                x[:, :n, :ACTION_DIM] = t_now * noise + (1.0 - t_now) * prefix
            t = torch.full((b,), t_now, device=x.device)
            x = x + dt * self.velocity(x, t, context)
        if prefix is not None:
            x[:, :n, :ACTION_DIM] = prefix  # t = 0: exactly the prefix
        return x[..., :ACTION_DIM]

    # --- training ---

    def loss(
        self, batch: TrainBatch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        memory = self.condition(self.window_features(batch.images), batch.state)
        actions = self._pad(batch.actions)
        b, device = actions.shape[0], actions.device
        # drawn on the CPU generator, then moved: the same draws on every device
        u = torch.rand((b,), generator=generator).to(device)
        t = u ** (1.0 / 1.5) * 0.999 + 0.001  # inverse CDF of Beta(1.5, 1)
        noise = torch.randn(actions.shape, generator=generator).to(device)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
        err = (self.velocity(x_t, t, memory) - (noise - actions))[..., :ACTION_DIM] ** 2
        if batch.action_mask is not None:
            mask = batch.action_mask[:, :, None].expand_as(err)
            mse = (err * mask).sum() / mask.sum().clamp(min=1.0)
        else:
            mse = err.mean()
        return mse, {"loss/flow": float(mse.detach())}
