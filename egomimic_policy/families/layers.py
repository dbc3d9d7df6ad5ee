"""Network building blocks shared by the families (torch only, no robot knowledge).

- `timestep_embedding`: sinusoidal embedding of a diffusion level / flow time.
- `AdaLNBlock`: transformer block whose LayerNorms are modulated (shift, scale, gate) by a
  condition vector (DiT-style AdaLN, upstream Fold denoiser); optional cross-attention to a
  memory of prefix tokens (the PI action expert attends to image and state tokens).
- `FeedForward` / `MoEFeedForward`: dense MLP or a mixture of experts with top-k routing and
  the Switch-Transformer load-balancing loss E * sum_i f_i P_i (f_i: share of routed slots,
  P_i: mean router probability), which is 1 when routing is uniform.
- `SpatialSoftmaxEncoder`: small CNN ending in keypoints (expected x, y of K softmax maps),
  the upstream VisualCore idea at toy size: cheap, and keeps WHERE things are.
- `PatchEncoder`: ViT-style patch embedding + position embedding (the PI image slots).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """(B,) float times -> (B, dim) sinusoidal features."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = F.pad(emb, (0, 1))
    return emb


class FeedForward(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MoEFeedForward(nn.Module):
    """Token-level mixture of experts. After each forward in training mode, `aux_loss` holds the
    load-balancing loss of that call and `expert_fraction` the share of routed slots per expert.

    Expert weights are stacked (E, ...) so two equivalent execution paths exist: up to
    `dense_token_limit` tokens every expert runs on every token and the (sparse, top-k) gate
    matrix combines them: a few large ops instead of ~10 tiny ones per expert, which is what a
    CPU query of 100 tokens needs; above it, each expert runs only on its routed tokens (the
    FLOP-saving path for training batches). Both give the same output (tested).
    """

    def __init__(self, d_model: int, hidden: int, n_experts: int, top_k: int, dense_token_limit: int = 2048):
        super().__init__()
        if not 1 <= top_k <= n_experts:
            raise ValueError(f"need 1 <= top_k <= n_experts, got top_k={top_k}, n_experts={n_experts}")
        self.n_experts, self.top_k, self.dense_token_limit = n_experts, top_k, dense_token_limit
        self.router = nn.Linear(d_model, n_experts)
        bound1, bound2 = 1.0 / math.sqrt(d_model), 1.0 / math.sqrt(hidden)  # nn.Linear's default init range
        self.w1 = nn.Parameter(torch.empty(n_experts, d_model, hidden).uniform_(-bound1, bound1))
        self.b1 = nn.Parameter(torch.empty(n_experts, 1, hidden).uniform_(-bound1, bound1))
        self.w2 = nn.Parameter(torch.empty(n_experts, hidden, d_model).uniform_(-bound2, bound2))
        self.b2 = nn.Parameter(torch.empty(n_experts, 1, d_model).uniform_(-bound2, bound2))
        self.aux_loss = torch.zeros(())
        self.expert_fraction = torch.zeros(n_experts)

    def expert(self, e: int, tokens: torch.Tensor) -> torch.Tensor:
        """Expert `e` on (N, d) tokens."""
        return F.gelu(tokens @ self.w1[e] + self.b1[e]) @ self.w2[e] + self.b2[e]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.router(tokens), dim=-1)  # (T, E)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # (T, k)
        weights = weights / weights.sum(-1, keepdim=True)
        if tokens.shape[0] <= self.dense_token_limit:
            gates = torch.zeros_like(probs).scatter(-1, chosen, weights)  # (T, E), k non-zeros per row
            every = F.gelu(torch.matmul(tokens, self.w1) + self.b1) @ self.w2 + self.b2  # (E, T, d)
            out = (gates.t()[:, :, None] * every).sum(0)
        else:
            out = torch.zeros_like(tokens)
            for e in range(self.n_experts):
                token_idx, slot = torch.nonzero(chosen == e, as_tuple=True)
                if token_idx.numel():
                    out.index_add_(0, token_idx, self.expert(e, tokens[token_idx]) * weights[token_idx, slot, None])
        if not self.training:  # the balance statistics are for training logs only
            return out.reshape(shape)
        counts = torch.bincount(chosen.reshape(-1), minlength=self.n_experts).to(probs.dtype)
        fraction = counts / counts.sum()
        self.expert_fraction = fraction.detach()
        self.aux_loss = self.n_experts * torch.sum(fraction * probs.mean(0))
        return out.reshape(shape)


class AdaLNBlock(nn.Module):
    """x <- x + g1 * SelfAttn(mod(LN(x))) [+ CrossAttn(LN(x), memory)] + g2 * FFN(mod(LN(x)))."""

    def __init__(self, d_model: int, n_heads: int, ffn: nn.Module, *, cross_attention: bool = False):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model, elementwise_affine=False)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.cross = nn.MultiheadAttention(d_model, n_heads, batch_first=True) if cross_attention else None
        self.norm_cross = nn.LayerNorm(d_model) if cross_attention else None
        self.norm2 = nn.LayerNorm(d_model, elementwise_affine=False)
        self.ffn = ffn
        self.modulation = nn.Linear(d_model, 6 * d_model)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(F.silu(cond))[:, None].chunk(6, dim=-1)
        h = self.norm1(x) * (1 + scale1) + shift1
        x = x + gate1 * self.attn(h, h, h, need_weights=False)[0]
        if self.cross is not None:
            if memory is None:
                raise ValueError("this block cross-attends: pass memory")
            assert self.norm_cross is not None  # built together with self.cross in __init__
            h = self.norm_cross(x)
            x = x + self.cross(h, memory, memory, need_weights=False)[0]
        h = self.norm2(x) * (1 + scale2) + shift2
        return x + gate2 * self.ffn(h)


class AdaLNOutput(nn.Module):
    """Final modulated LayerNorm + projection to the action width."""

    def __init__(self, d_model: int, out_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, elementwise_affine=False)
        self.modulation = nn.Linear(d_model, 2 * d_model)
        self.proj = nn.Linear(d_model, out_dim)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        shift, scale = self.modulation(F.silu(cond))[:, None].chunk(2, dim=-1)
        return self.proj(self.norm(x) * (1 + scale) + shift)


class SpatialSoftmaxEncoder(nn.Module):
    """(B, 3, H, W) image -> (B, feature_dim): strided convs, K keypoint maps, expected (x, y)."""

    def __init__(self, channels: tuple[int, ...], keypoints: int, feature_dim: int):
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for ch in channels:
            layers += [nn.Conv2d(in_ch, ch, 3, stride=2, padding=1), nn.GroupNorm(min(8, ch), ch), nn.SiLU()]
            in_ch = ch
        self.trunk = nn.Sequential(*layers)
        self.keypoint_maps = nn.Conv2d(in_ch, keypoints, 1)
        self.proj = nn.Linear(2 * keypoints, feature_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        maps = self.keypoint_maps(self.trunk(images))  # (B, K, h, w)
        b, k, h, w = maps.shape
        attention = torch.softmax(maps.reshape(b, k, h * w), dim=-1)
        ys = torch.linspace(-1.0, 1.0, h, device=images.device)
        xs = torch.linspace(-1.0, 1.0, w, device=images.device)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        ex = attention @ grid_x.reshape(-1, 1)
        ey = attention @ grid_y.reshape(-1, 1)
        return self.proj(torch.cat([ex, ey], dim=-1).reshape(b, 2 * k))


class PatchEncoder(nn.Module):
    """(B, 3, S, S) image -> (B, (S/p)^2, d_model) patch tokens with learned positions."""

    def __init__(self, image_size: int, patch_size: int, d_model: int):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} must be a multiple of patch_size {patch_size}")
        self.embed = nn.Conv2d(3, d_model, patch_size, stride=patch_size)
        self.position = nn.Parameter(torch.randn(1, (image_size // patch_size) ** 2, d_model) * 0.02)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.embed(images).flatten(2).transpose(1, 2) + self.position
