"""Upstream EgoVerse's flow denoisers (inside stage 2 of the Fold and MoE pipelines), rebuilt with
upstream's module and parameter names so that the lab's checkpoints load with
`load_state_dict(strict=True)` and give upstream's velocities.

Reproduces, from GaTech-RL2/EgoVerse:
- `posemb_sincos`, `CrossBlock`, `CrossTransformer`: `egomimic/models/denoising_nets.py` (the
  version with `time_conditioning`, concat or additive);
- `SwiGLU`, `MoEFFN`: `egomimic/models/moe_ffn.py`;
- `DDPSafeMoEFFN`, `SharedResidualMoEFFN`, `MoECrossBlock`, `MoECrossTransformer`:
  `egomimic/models/moe_denoising_nets.py`.

Why: a checkpoint is only a state dict; loading it strictly needs these exact names and shapes,
and reproducing upstream's actions needs the exact forward math (pre-norm blocks, GELU (erf)
then SiLU in the block MLP, the sin-then-cos time embedding, `nn.MultiheadAttention`
batch-first, top-k renormalized SwiGLU experts). Constructors take upstream's config keys.

Denoiser call: `denoiser(x, timesteps, cond)` with x (B, T, act_dim) the noisy latent,
timesteps (B,) flow time in [0, 1], cond (B, S, cond_dim) (the sampler passes S = 1);
returns the velocity (B, T, act_dim).
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

TIME_MIN_PERIOD = 4e-3
TIME_MAX_PERIOD = 4.0
"""The periods upstream's CrossTransformer gives `posemb_sincos` for the flow time."""


def posemb_sincos(pos: torch.Tensor, embedding_dim: int, min_period: float, max_period: float) -> torch.Tensor:
    """Sine-cosine embedding of the 1-D positions `pos` (B,) -> (B, embedding_dim).

    With n = embedding_dim // 2 and f_i = i / (n - 1) (torch.linspace(0, 1, n)), the period of
    channel i is min_period * (max_period / min_period) ** f_i; the first n channels are
    sin(2 pi pos / period_i), the last n cos(2 pi pos / period_i). Computed in `pos`'s dtype."""
    if embedding_dim % 2:
        raise ValueError(f"embedding_dim ({embedding_dim}) must be divisible by 2")
    fraction = torch.linspace(0.0, 1.0, embedding_dim // 2, device=pos.device, dtype=pos.dtype)
    period = min_period * (max_period / min_period) ** fraction
    angular_frequency = (1.0 / period) * 2 * math.pi
    phase = pos[:, None] * angular_frequency[None, :]
    return torch.cat([torch.sin(phase), torch.cos(phase)], dim=-1)


def _block_mlp(hidden_dim: int, mlp_layers: int, mlp_ratio: float) -> nn.Sequential:
    """Linear(h, m) GELU, then (mlp_layers - 1) x [Linear(m, m) SiLU], then Linear(m, h); m = int(h * ratio).
    Linear layers sit at the even indices 0, 2, ..., 2 * mlp_layers."""
    width = int(hidden_dim * mlp_ratio)
    layers: list[nn.Module] = [nn.Linear(hidden_dim, width), nn.GELU()]
    for _ in range(int(mlp_layers) - 1):
        layers += [nn.Linear(width, width), nn.SiLU()]
    layers.append(nn.Linear(width, hidden_dim))
    return nn.Sequential(*layers)


class CrossBlock(nn.Module):
    """Pre-norm transformer block: self-attention, cross-attention to the projected condition, MLP.

    x = x + mha(ln1(x)); x = x + cmha(ln2(x), c, c) with c = cond_proj(cond); x = x + mlp(ln3(x)).
    Attention dropout is upstream's `dropout` (inactive in eval mode)."""

    def __init__(
        self, cond_dim: int, hidden_dim: int, n_heads: int, dropout: float, mlp_layers: int, mlp_ratio: float
    ) -> None:
        super().__init__()
        self.hidden_dim = int(hidden_dim)
        self.ln1 = nn.LayerNorm(hidden_dim)
        self.mha = nn.MultiheadAttention(embed_dim=hidden_dim, num_heads=n_heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(hidden_dim)
        self.cmha = nn.MultiheadAttention(embed_dim=hidden_dim, num_heads=n_heads, dropout=dropout, batch_first=True)
        self.ln3 = nn.LayerNorm(hidden_dim)
        self.mlp: nn.Module = _block_mlp(hidden_dim, mlp_layers, mlp_ratio)
        self.cond_proj = nn.Linear(cond_dim, hidden_dim)

    def forward_cross(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """The block on an already projected condition (B, S, hidden_dim)."""
        normed = self.ln1(x)
        x = self.mha(normed, normed, normed)[0] + x
        x = self.cmha(self.ln2(x), cond, cond)[0] + x
        return self.mlp(self.ln3(x)) + x

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return self.forward_cross(x, self.cond_proj(cond))


class CrossTransformer(nn.Module):
    """Upstream's flow velocity network: `proj_u` lifts the latent tokens, `pos_emb` (learned, per
    token) is added, the flow time's `posemb_sincos` embedding (width `proj_u.out_features`) is
    concatenated (`time_conditioning="concat"`: proj_u and pos_emb are hidden_dim // 2 wide) or
    added ("additive": hidden_dim wide), `nblocks` CrossBlocks attend to the condition, and
    `proj_d` maps back to the latent width."""

    def __init__(
        self,
        nblocks: int,
        cond_dim: int,
        hidden_dim: int,
        act_dim: int,
        act_seq: int,
        n_heads: int,
        dropout: float,
        mlp_layers: int,
        mlp_ratio: float,
        time_conditioning: str = "concat",
    ) -> None:
        super().__init__()
        if time_conditioning not in ("concat", "additive"):
            raise ValueError("time_conditioning must be either 'concat' or 'additive'")
        if time_conditioning == "concat" and hidden_dim % 2:
            raise ValueError("concat time conditioning requires an even hidden_dim")
        self.nblocks = int(nblocks)
        self.cond_dim = int(cond_dim)
        self.hidden_dim = int(hidden_dim)
        self.act_dim = int(act_dim)
        self.act_seq = int(act_seq)
        self.time_conditioning = time_conditioning
        self.layers = nn.ModuleList(
            CrossBlock(cond_dim, hidden_dim, n_heads, dropout, mlp_layers, mlp_ratio) for _ in range(self.nblocks)
        )
        embedding_width = self.hidden_dim // 2 if time_conditioning == "concat" else self.hidden_dim
        if embedding_width < self.act_dim:
            raise ValueError(
                f"Rank-deficient denoiser input: action embedding width {embedding_width} is smaller than the "
                f"noisy action dimension {self.act_dim}"
            )
        self.proj_u = nn.Linear(self.act_dim, embedding_width)
        self.proj_d = nn.Linear(self.hidden_dim, self.act_dim)
        self.pos_emb = nn.Parameter(torch.zeros(1, self.act_seq, embedding_width))

    def time_embedding(self, timesteps: torch.Tensor, batch_size: int) -> torch.Tensor:
        """posemb_sincos of the flow time (B,), width proj_u.out_features."""
        if timesteps.ndim == 0:
            timesteps = timesteps.reshape(1).expand(batch_size)
        return posemb_sincos(
            timesteps, self.proj_u.out_features, min_period=TIME_MIN_PERIOD, max_period=TIME_MAX_PERIOD
        )

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        tokens = self.proj_u(x) + self.pos_emb
        batch_size, seq_len = tokens.shape[0], tokens.shape[1]
        time = self.time_embedding(timesteps, batch_size)[:, None, :].expand(batch_size, seq_len, -1).to(tokens.device)
        if self.time_conditioning == "concat":
            tokens = torch.cat([tokens, time], dim=-1)
        else:
            tokens = tokens + time
        for layer in self.layers:
            tokens = layer(tokens, cond)
        return self.proj_d(tokens)


class SwiGLU(nn.Module):
    """One expert: `gate_value` (d_model -> 2 * d_hidden; first half gate, second half value),
    output(silu(gate) * value)."""

    def __init__(self, d_model: int, d_hidden: int) -> None:
        super().__init__()
        self.gate_value = nn.Linear(d_model, 2 * d_hidden)
        self.output = nn.Linear(d_hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = self.gate_value(x).chunk(2, dim=-1)
        return self.output(F.silu(gate) * value)


class MoEFFN(nn.Module):
    """Token-routed sparse experts: a bias-free `gate` Linear(d_model -> num_experts), softmax (in
    float32), the top_k probabilities renormalized to sum to one, and the routed experts' outputs
    summed with those weights. Every expert is evaluated (batched) and the top_k gathered, as
    upstream does. After each call `last_aux_loss` (load-balancing loss, scaled by aux_weight),
    `last_expert_frac` and `last_gate_entropy` hold upstream's router diagnostics."""

    def __init__(
        self, d_model: int, d_intermediate: int, num_experts: int = 8, top_k: int = 4, aux_weight: float = 1.0e-3
    ) -> None:
        super().__init__()
        self.d_model = int(d_model)
        self.d_expert = int(d_intermediate)
        self.num_experts = int(num_experts)
        self.top_k = int(top_k)
        self.aux_weight = float(aux_weight)
        if self.num_experts <= 0:
            raise ValueError("num_experts must be positive")
        if not 0 < self.top_k <= self.num_experts:
            raise ValueError("top_k must be in [1, num_experts]")
        if self.d_expert <= 0:
            raise ValueError("d_intermediate must be positive")
        self.gate = nn.Linear(self.d_model, self.num_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(self.d_model, self.d_expert) for _ in range(self.num_experts))
        self.last_aux_loss: torch.Tensor | None = None
        self.last_expert_frac: torch.Tensor | None = None
        self.last_gate_entropy: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._route(x)[0]

    def _route(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The output, and the experts' weights stacked (w_in, b_in, w_out, b_out)."""
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        probabilities = F.softmax(self.gate(tokens).float(), dim=-1)
        top_probabilities, top_experts = torch.topk(probabilities, self.top_k, dim=-1)
        weights = top_probabilities / top_probabilities.sum(dim=-1, keepdim=True).clamp_min(1e-9)

        # all experts at once: (N, E, 2H) -> (N, E, H) -> (N, E, D)
        experts = cast(list[SwiGLU], list(self.experts))
        w_in = torch.stack([e.gate_value.weight for e in experts])
        b_in = torch.stack([e.gate_value.bias for e in experts])
        gate, value = (torch.einsum("nd,ehd->neh", tokens, w_in) + b_in[None]).chunk(2, dim=-1)
        w_out = torch.stack([e.output.weight for e in experts])
        b_out = torch.stack([e.output.bias for e in experts])
        every_expert = torch.einsum("neh,edh->ned", F.silu(gate) * value, w_out) + b_out[None]
        routed = every_expert.gather(1, top_experts[..., None].expand(-1, -1, self.d_model))
        output = (routed * weights.to(routed)[..., None]).sum(dim=1).to(tokens)

        dispatched = torch.zeros_like(probabilities).scatter_(1, top_experts, weights) > 0
        fractions = dispatched.to(probabilities.dtype).sum(dim=0) / max(tokens.shape[0] * self.top_k, 1)
        mean_probability = probabilities.mean(dim=0)
        self.last_aux_loss = self.aux_weight * self.num_experts * torch.sum(fractions.detach() * mean_probability)
        self.last_expert_frac = fractions.detach()
        p = mean_probability.detach()
        self.last_gate_entropy = -torch.sum(p * p.clamp_min(1e-9).log())
        return output.reshape(shape), (w_in, b_in, w_out, b_out)


class DDPSafeMoEFFN(MoEFFN):
    """Upstream's DDP variant: adds 0.0 x one element of every expert parameter (so that DDP sees
    every expert used); the output is the same (unless a parameter is not finite)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output, (w_in, b_in, w_out, b_out) = self._route(x)
        # The first element of each expert parameter, from the stacks already made: one kernel
        # instead of one multiply and one add per parameter (thousands per query on a GPU).
        firsts = torch.cat([w_in[:, 0, 0], b_in[:, 0], w_out[:, 0, 0], b_out[:, 0]])
        anchor = output.new_zeros(()) + (firsts * 0.0).sum()
        return output + anchor.to(output)


class SharedResidualMoEFFN(nn.Module):
    """The block MLP of the MoE denoiser: shared_ffn(x) + expert_scale * expert_ffn(x)."""

    def __init__(
        self,
        shared_ffn: nn.Module,
        d_model: int,
        moe_experts: int = 8,
        moe_top_k: int = 4,
        moe_d_expert: int = 256,
        moe_aux_weight: float = 1.0e-3,
        expert_scale_init: float = 0.1,
    ) -> None:
        super().__init__()
        self.shared_ffn = shared_ffn
        self.expert_ffn = DDPSafeMoEFFN(
            d_model=int(d_model),
            d_intermediate=int(moe_d_expert),
            num_experts=int(moe_experts),
            top_k=int(moe_top_k),
            aux_weight=float(moe_aux_weight),
        )
        self.expert_scale = nn.Parameter(torch.tensor(float(expert_scale_init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared_ffn(x) + self.expert_scale.to(x) * self.expert_ffn(x)


class MoECrossBlock(CrossBlock):
    """CrossBlock whose `mlp` is a SharedResidualMoEFFN around the dense block MLP."""

    def __init__(
        self,
        cond_dim: int,
        hidden_dim: int,
        n_heads: int,
        dropout: float,
        mlp_layers: int,
        mlp_ratio: float,
        moe_experts: int = 8,
        moe_top_k: int = 4,
        moe_d_expert: int = 256,
        moe_aux_weight: float = 1.0e-3,
        expert_scale_init: float = 0.1,
    ) -> None:
        super().__init__(cond_dim, hidden_dim, n_heads, dropout, mlp_layers, mlp_ratio)
        self.mlp = SharedResidualMoEFFN(
            shared_ffn=self.mlp,
            d_model=hidden_dim,
            moe_experts=moe_experts,
            moe_top_k=moe_top_k,
            moe_d_expert=moe_d_expert,
            moe_aux_weight=moe_aux_weight,
            expert_scale_init=expert_scale_init,
        )


class MoECrossTransformer(CrossTransformer):
    """CrossTransformer whose every block is a MoECrossBlock (upstream `moe_denoising_nets`)."""

    def __init__(
        self,
        nblocks: int,
        cond_dim: int,
        hidden_dim: int,
        act_dim: int,
        act_seq: int,
        n_heads: int,
        dropout: float,
        mlp_layers: int,
        mlp_ratio: float,
        time_conditioning: str = "concat",
        moe_experts: int = 8,
        moe_top_k: int = 4,
        moe_d_expert: int = 256,
        moe_aux_weight: float = 1.0e-3,
        expert_scale_init: float = 0.1,
    ) -> None:
        # Upstream lets the parent build dense blocks and then replaces them; building none
        # (nblocks=0) gives the same module tree without allocating the discarded blocks.
        super().__init__(
            nblocks=0,
            cond_dim=cond_dim,
            hidden_dim=hidden_dim,
            act_dim=act_dim,
            act_seq=act_seq,
            n_heads=n_heads,
            dropout=dropout,
            mlp_layers=mlp_layers,
            mlp_ratio=mlp_ratio,
            time_conditioning=time_conditioning,
        )
        self.layers = nn.ModuleList(
            MoECrossBlock(
                cond_dim=cond_dim,
                hidden_dim=hidden_dim,
                n_heads=n_heads,
                dropout=dropout,
                mlp_layers=mlp_layers,
                mlp_ratio=mlp_ratio,
                moe_experts=moe_experts,
                moe_top_k=moe_top_k,
                moe_d_expert=moe_d_expert,
                moe_aux_weight=moe_aux_weight,
                expert_scale_init=expert_scale_init,
            )
            for _ in range(int(nblocks))
        )
        self.nblocks = int(nblocks)
