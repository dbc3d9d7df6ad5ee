"""Upstream EgoVerse's latent flow sampler (stages 1 and 2 of the Fold and MoE pipelines), rebuilt
with upstream's module and parameter names so that the lab's checkpoints load with
`load_state_dict(strict=True)` and give upstream's actions.

Reproduces, from GaTech-RL2/EgoVerse:
- `GaussianLatentNoise`, `TokenwiseMLPActionDecoder`, `TemporalConvActionDecoder`,
  `MultiJActionSampler` (with its base `LatentFlowSampler` folded in):
  `egomimic/pipeline/stages_sampler.py`;
- `MoEMultiJActionSampler`: `egomimic/pipeline/stages_sampler_moe.py`.

Why: stage 2 owns `condition_projection`, `domain_embeddings.<domain>`, the denoiser
(`denoisers.CrossTransformer` / `MoECrossTransformer`, passed in already built, Hydra style),
`decoders.<domain>` and the buffer `training_batches_seen`; its rollout is a plain Euler flow
whose exact arithmetic decides the actions.

Batch protocol (upstream `egomimic/pipeline/core.py`: `stage(batch: dict) -> dict`):
- `GaussianLatentNoise` reads `condition` (B, C) and writes `sampler/noise`
  (B, num_tokens, latent_dim) ~ N(0, 1). A caller that needs a given initial latent puts it
  in the batch under `sampler/noise` (NOISE_KEY) first: it is kept (checked, and moved to the
  condition's device). Upstream always draws; keeping a given one is this project's injection
  point and changes nothing when the key is absent.
- `MultiJActionSampler` reads `sampler/noise`, `condition` (B, condition_input_dim) and
  `embodiment` (domain name); writes `sampler/endpoint` (B, T, latent_dim), `pred_action`
  (B, action_horizon, action_dims[embodiment]) in normalized action units, and `log/*`
  scalars. `MoEMultiJActionSampler` adds `loss/moe_lb` and router `log/*` keys.

Eval-mode flow: c = condition_projection(condition)[:, None] + domain_embeddings[embodiment]
(B, 1, condition_dim); x = noise; t = 0; num_inference_steps times: x = x + dt * v(x, t, c),
t = t + dt, with dt = 1 / num_inference_steps in float32 (no clamp); then the domain's decoder.
Training mode draws the number of steps from `sampling_schedule` and a random grid, as upstream.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, cast

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from egomimic_policy.upstream.denoisers import MoEFFN

NOISE_KEY = "sampler/noise"
"""Where the initial latent travels between stage 1 and stage 2 (upstream's key)."""
CONDITION_KEY = "condition"
ENDPOINT_KEY = "sampler/endpoint"
PRED_ACTION_KEY = "pred_action"

DEFAULT_SAMPLING_SCHEDULE: Mapping[int, Mapping[int, float]] = {1: {1: 0.5, 2: 0.5}, 2001: {2: 0.8, 4: 0.15, 8: 0.05}}
SCHEDULE_STEP_COUNTS = frozenset({1, 2, 4, 8, 16, 128})


class _StageContract:
    """Upstream `Stage`'s key contract: `reads`/`writes`, optionally per mode (train|rollout)."""

    reads: Sequence[str] = ()
    writes: Sequence[str] = ()
    reads_by_mode: Mapping[str, Sequence[str]] = {}
    writes_by_mode: Mapping[str, Sequence[str]] = {}

    def contract(self, mode: str = "train") -> tuple[tuple[str, ...], tuple[str, ...]]:
        if mode not in ("train", "rollout"):
            raise ValueError(f"Stage contract mode must be train|rollout, got {mode!r}")
        return tuple(self.reads_by_mode.get(mode, self.reads)), tuple(self.writes_by_mode.get(mode, self.writes))


class GaussianLatentNoise(_StageContract, nn.Module):
    """Stage 1: the initial latent, torch.randn(B, num_tokens, latent_dim) (B from `condition`),
    in the autocast dtype when autocast is on, else the default dtype. `action_horizon` is the
    legacy spelling of `num_tokens` (give one). With num_samples > 1 a training batch (one with
    `target`) gets (B, num_samples, num_tokens, latent_dim). A `sampler/noise` already in the
    batch is kept (see the module docstring)."""

    reads = (CONDITION_KEY,)
    writes = (NOISE_KEY,)

    def __init__(
        self,
        num_tokens: int | None = None,
        latent_dim: int = 128,
        action_horizon: int | None = None,
        num_samples: int = 1,
    ) -> None:
        super().__init__()
        if num_tokens is not None and action_horizon is not None:
            raise ValueError("Configure num_tokens or legacy action_horizon, not both")
        tokens = num_tokens if num_tokens is not None else action_horizon
        if tokens is None:
            raise ValueError("num_tokens must be configured")
        self.num_tokens = int(tokens)
        self.latent_dim = int(latent_dim)
        self.num_samples = int(num_samples)
        if self.num_tokens <= 0 or self.latent_dim <= 0 or self.num_samples <= 0:
            raise ValueError("num_tokens, latent_dim, and num_samples must be positive")

    @property
    def action_horizon(self) -> int:
        return self.num_tokens

    def noise_shape(self, batch: Mapping[str, Any]) -> tuple[int, ...]:
        batch_size = int(batch[CONDITION_KEY].shape[0])
        if batch_size <= 0:
            raise ValueError("condition must describe at least one sample")
        if self.num_samples > 1 and "target" in batch:
            return (batch_size, self.num_samples, self.num_tokens, self.latent_dim)
        return (batch_size, self.num_tokens, self.latent_dim)

    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        condition = batch[CONDITION_KEY]
        shape = self.noise_shape(batch)
        device = condition.device
        dtype = (
            torch.get_autocast_dtype(device.type)
            if torch.is_autocast_enabled(device.type)
            else torch.get_default_dtype()
        )
        given = batch.get(NOISE_KEY)
        if given is not None:
            given = torch.as_tensor(given)
            if tuple(given.shape) != shape:
                raise ValueError(f"the given {NOISE_KEY} has shape {tuple(given.shape)}, expected {shape}")
            batch[NOISE_KEY] = given.to(device=device, dtype=dtype)
            return batch
        batch[NOISE_KEY] = torch.randn(*shape, dtype=dtype, device=device)
        return batch


def _decoder_layer_count(num_layers: int | None, extra_hidden_layers: int | None) -> int:
    if num_layers is None:
        return 3 + int(extra_hidden_layers or 0)
    if extra_hidden_layers is not None and int(num_layers) != 3 + int(extra_hidden_layers):
        raise ValueError("num_layers disagrees with deprecated extra_hidden_layers")
    return int(num_layers)


class TokenwiseMLPActionDecoder(nn.Sequential):
    """Each latent token to an action independently: num_layers Linear layers (latent -> hidden
    -> ... -> action_dim) with SiLU between them, at indices 0, 2, 4, ... (3 + extra_hidden_layers)."""

    def __init__(
        self,
        latent_dim: int,
        hidden_dim: int,
        action_dim: int,
        num_layers: int | None = None,
        extra_hidden_layers: int | None = None,
    ) -> None:
        self.latent_dim, self.hidden_dim, self.action_dim = int(latent_dim), int(hidden_dim), int(action_dim)
        self.temporal_factor = 1
        self.num_layers = _decoder_layer_count(num_layers, extra_hidden_layers)
        self.extra_hidden_layers = self.num_layers - 3
        if min(self.latent_dim, self.hidden_dim, self.action_dim) <= 0:
            raise ValueError("Tokenwise MLP decoder dimensions must be positive")
        if self.num_layers < 2:
            raise ValueError("Tokenwise MLP decoder num_layers must be at least 2")
        layers: list[nn.Module] = []
        for index in range(self.num_layers):
            last = index == self.num_layers - 1
            layers.append(
                nn.Linear(
                    self.latent_dim if index == 0 else self.hidden_dim, self.action_dim if last else self.hidden_dim
                )
            )
            if not last:
                layers.append(nn.SiLU())
        super().__init__(*layers)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        if latent.ndim != 3 or int(latent.shape[-1]) != self.latent_dim:
            raise ValueError(
                f"TokenwiseMLPActionDecoder expected latent shape (B, T, {self.latent_dim}), got {tuple(latent.shape)}"
            )
        return super().forward(latent)

    def output_num_tokens(self, input_num_tokens: int) -> int:
        return int(input_num_tokens)


class TemporalConvActionDecoder(nn.Module):
    """A latent sequence to a twice longer action sequence: `channel_projection` (num_layers - 1
    Linear layers, SiLU after each, the last one to action_dim when
    project_to_action_before_temporal, without its SiLU), then `temporal_upsampler`
    ConvTranspose1d(kernel 4, stride 2, padding 1) over time."""

    def __init__(
        self,
        latent_dim: int,
        hidden_dim: int,
        action_dim: int,
        num_layers: int | None = None,
        extra_hidden_layers: int | None = None,
        project_to_action_before_temporal: bool = True,
    ) -> None:
        super().__init__()
        self.latent_dim, self.hidden_dim, self.action_dim = int(latent_dim), int(hidden_dim), int(action_dim)
        self.temporal_factor = 2
        self.num_layers = _decoder_layer_count(num_layers, extra_hidden_layers)
        self.extra_hidden_layers = self.num_layers - 3
        self.project_to_action_before_temporal = bool(project_to_action_before_temporal)
        if min(self.latent_dim, self.hidden_dim, self.action_dim) <= 0:
            raise ValueError("Temporal decoder dimensions must be positive")
        if self.num_layers < 2:
            raise ValueError("Temporal decoder num_layers must be at least 2")
        count = self.num_layers - 1
        layers: list[nn.Module] = []
        for index in range(count):
            to_action = self.project_to_action_before_temporal and index == count - 1
            layers.append(
                nn.Linear(
                    self.latent_dim if index == 0 else self.hidden_dim,
                    self.action_dim if to_action else self.hidden_dim,
                )
            )
            if not to_action:
                layers.append(nn.SiLU())
        self.channel_projection = nn.Sequential(*layers)
        channels = self.action_dim if self.project_to_action_before_temporal else self.hidden_dim
        self.temporal_upsampler = nn.ConvTranspose1d(channels, self.action_dim, kernel_size=4, stride=2, padding=1)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        if latent.ndim != 3 or int(latent.shape[-1]) != self.latent_dim:
            raise ValueError(
                f"TemporalConvActionDecoder expected latent shape (B, T, {self.latent_dim}), got {tuple(latent.shape)}"
            )
        hidden = self.channel_projection(latent).transpose(1, 2)
        return self.temporal_upsampler(hidden).transpose(1, 2)

    def output_num_tokens(self, input_num_tokens: int) -> int:
        return 2 * int(input_num_tokens)


def compile_sampling_schedule(
    schedule: Mapping[Any, Mapping[Any, float]],
) -> tuple[dict[int, dict[int, float]], dict[int, tuple[int, ...]]]:
    """Upstream's training schedule {first optimizer step: {steps J: weight}} -> the normalized
    schedule and, per phase, the deterministic cycle of J values (weights as counts, J ascending)."""
    normalized: dict[int, dict[int, float]] = {}
    cycles: dict[int, tuple[int, ...]] = {}
    for raw_start, raw_split in dict(schedule).items():
        start = int(raw_start)
        split = {int(j): float(w) for j, w in dict(raw_split).items()}
        if start < 1:
            raise ValueError("sampling_schedule start steps must be positive")
        if not split or any(j not in SCHEDULE_STEP_COUNTS for j in split):
            raise ValueError(f"sampling_schedule supports J in {sorted(SCHEDULE_STEP_COUNTS)}")
        if any(w <= 0.0 for w in split.values()):
            raise ValueError("sampling_schedule weights must be positive")
        if not math.isclose(sum(split.values()), 1.0, rel_tol=0.0, abs_tol=1e-8):
            raise ValueError(f"sampling_schedule[{start}] weights must sum to 1, got {sum(split.values())}")
        fractions = {j: Fraction(str(w)).limit_denominator(1000) for j, w in split.items()}
        denominator = math.lcm(*(f.denominator for f in fractions.values()))
        counts = {j: f.numerator * (denominator // f.denominator) for j, f in fractions.items()}
        common = math.gcd(*counts.values())
        normalized[start] = split
        cycles[start] = tuple(j for j in sorted(counts) for _ in range(counts[j] // common))
    starts = sorted(normalized)
    if not starts or starts[0] != 1:
        raise ValueError("sampling_schedule must define a phase starting at step 1")
    return {s: normalized[s] for s in starts}, {s: cycles[s] for s in starts}


class MultiJActionSampler(_StageContract, nn.Module):
    """Stage 2: condition projection, per-domain embedding, Euler flow of the denoiser from the
    stage-1 noise, and the domain's decoder to `pred_action` (see the module docstring).

    Registration order (and so state_dict order) is upstream's: the buffer
    `training_batches_seen`, then `denoising_module`, `decoders`, `domain_embeddings`,
    `condition_projection`."""

    reads: Sequence[str] = (NOISE_KEY, CONDITION_KEY, "embodiment")
    writes: Sequence[str] = (ENDPOINT_KEY, PRED_ACTION_KEY, "log/*")
    training_batches_seen: torch.Tensor

    def __init__(
        self,
        denoising_module: nn.Module,
        condition_input_dim: int,
        action_horizon: int,
        action_dims: Mapping[str, int],
        latent_dim: int = 128,
        condition_dim: int = 384,
        decoder_hidden_dim: int = 512,
        decoder_extra_hidden_layers_by_domain: Mapping[str, int] | None = None,
        denoiser_hidden_dim: int = 512,
        num_inference_steps: int = 16,
        sampling_schedule: Mapping[Any, Mapping[Any, float]] | None = None,
        gradient_checkpointing: bool = True,
        gradient_accumulation_steps: int = 1,
        schedule_anchor_domain: str = "eva_bimanual",
        latent_horizon: int | None = None,
        decoder_type: str = "token_mlp",
    ) -> None:
        super().__init__()
        self.action_horizon = int(action_horizon)
        self.latent_horizon = int(self.action_horizon if latent_horizon is None else latent_horizon)
        self.action_dims = {str(k): int(v) for k, v in dict(action_dims).items()}
        self.domains = tuple(self.action_dims)
        self.latent_dim = int(latent_dim)
        self.condition_input_dim = int(condition_input_dim)
        self.condition_dim = int(condition_dim)
        self.decoder_hidden_dim = int(decoder_hidden_dim)
        self.denoiser_hidden_dim = int(denoiser_hidden_dim)
        self.num_inference_steps = int(num_inference_steps)
        self.gradient_checkpointing = bool(gradient_checkpointing)
        self.gradient_accumulation_steps = int(gradient_accumulation_steps)
        self.schedule_anchor_domain = str(schedule_anchor_domain)
        self.decoder_type = str(decoder_type)
        extra = dict(decoder_extra_hidden_layers_by_domain or {})
        unknown = set(extra) - set(self.action_dims)
        if unknown:
            raise ValueError(f"Decoder depth configured for unknown domains: {sorted(unknown)}")
        self.decoder_extra_hidden_layers_by_domain = {d: int(extra.get(d, 0)) for d in self.action_dims}
        self._validate_config()
        self.sampling_schedule, self._sampling_cycles = compile_sampling_schedule(
            DEFAULT_SAMPLING_SCHEDULE if sampling_schedule is None else sampling_schedule
        )

        self.register_buffer("training_batches_seen", torch.zeros((), dtype=torch.long))
        self.denoising_module = denoising_module
        self.decoders = nn.ModuleDict({domain: self._build_decoder(domain) for domain in self.action_dims})
        self.domain_embeddings = nn.ParameterDict(
            {d: nn.Parameter(torch.empty(self.condition_dim).normal_(std=0.02)) for d in self.action_dims}
        )
        self.condition_projection = nn.Linear(self.condition_input_dim, self.condition_dim)
        self.last_integration_step_sizes: torch.Tensor | None = None
        self._validate_denoiser()

    # ------------------------------------------------------------------ construction

    def _validate_config(self) -> None:
        if not self.action_dims:
            raise ValueError("action_dims must configure at least one embodiment")
        if self.action_horizon <= 0 or self.latent_horizon <= 0:
            raise ValueError("action_horizon and latent_horizon must be positive")
        if self.latent_dim <= 0 or self.num_inference_steps <= 0:
            raise ValueError("latent_dim and num_inference_steps must be positive")
        if self.decoder_hidden_dim <= 0:
            raise ValueError("decoder_hidden_dim must be positive")
        if any(v < 0 for v in self.decoder_extra_hidden_layers_by_domain.values()):
            raise ValueError("Decoder extra hidden-layer counts must be non-negative")
        if self.decoder_type not in ("token_mlp", "temporal_conv"):
            raise ValueError(f"decoder_type must be one of {{'token_mlp', 'temporal_conv'}}, got {self.decoder_type!r}")
        if self.decoder_type == "token_mlp" and self.latent_horizon != self.action_horizon:
            raise ValueError("token_mlp preserves sequence length, so latent_horizon must equal action_horizon")
        if self.decoder_type == "temporal_conv" and self.action_horizon != 2 * self.latent_horizon:
            raise ValueError("temporal_conv requires action_horizon == 2 * latent_horizon")
        if self.gradient_accumulation_steps <= 0:
            raise ValueError("gradient_accumulation_steps must be positive")
        if self.schedule_anchor_domain not in self.action_dims:
            raise ValueError("schedule_anchor_domain must name a configured domain")

    def _build_decoder(self, domain: str) -> nn.Module:
        common = dict(
            latent_dim=self.latent_dim,
            hidden_dim=self.decoder_hidden_dim,
            action_dim=self.action_dims[domain],
            extra_hidden_layers=self.decoder_extra_hidden_layers_by_domain[domain],
        )
        if self.decoder_type == "temporal_conv":
            return TemporalConvActionDecoder(**common, project_to_action_before_temporal=False)
        return TokenwiseMLPActionDecoder(**common)

    def _validate_denoiser(self) -> None:
        """The denoiser's widths against the sampler's (upstream's checks, same messages)."""
        proj_u = getattr(self.denoising_module, "proj_u", None)
        proj_d = getattr(self.denoising_module, "proj_d", None)
        if proj_u is not None:
            if proj_u.in_features != self.latent_dim:
                raise ValueError(f"Denoiser input is {proj_u.in_features}, expected latent_dim={self.latent_dim}")
            if proj_u.out_features < self.latent_dim:
                raise ValueError(
                    f"Rank-deficient denoiser input: latent_dim={self.latent_dim} projects to "
                    f"{proj_u.out_features} features"
                )
            concat = getattr(self.denoising_module, "time_conditioning", "concat") == "concat"
            hidden = proj_u.out_features * 2 if concat else proj_u.out_features
            if hidden != self.denoiser_hidden_dim:
                raise ValueError(f"Denoiser produces hidden_dim={hidden}, expected {self.denoiser_hidden_dim}")
        if proj_d is not None:
            if proj_d.out_features != self.latent_dim:
                raise ValueError(f"Denoiser output is {proj_d.out_features}, expected {self.latent_dim}")
            if proj_d.in_features != self.denoiser_hidden_dim:
                raise ValueError(f"Denoiser proj_d input is {proj_d.in_features}, expected {self.denoiser_hidden_dim}")
        pos_emb = getattr(self.denoising_module, "pos_emb", None)
        if pos_emb is not None and (pos_emb.ndim < 2 or int(pos_emb.shape[-2]) != self.latent_horizon):
            raise ValueError(
                f"Denoiser positional horizon is {tuple(pos_emb.shape)}, expected sequence length {self.latent_horizon}"
            )

    # ------------------------------------------------------------------ pieces

    def decoder(self, embodiment: str) -> nn.Module:
        embodiment = str(embodiment)
        if embodiment not in self.decoders:
            raise KeyError(f"Unknown embodiment {embodiment!r}")
        return self.decoders[embodiment]

    def condition_for_domain(self, condition: torch.Tensor, embodiment: str) -> torch.Tensor:
        """Add the domain's embedding to a projected condition (..., condition_dim)."""
        if embodiment not in self.domain_embeddings:
            raise KeyError(f"Unknown embodiment {embodiment!r}")
        if condition.shape[-1] != self.condition_dim:
            raise ValueError(f"Expected {self.condition_dim}-D sampler condition, got {condition.shape[-1]}")
        embedding = self.domain_embeddings[embodiment].to(condition)
        return condition + embedding.view(*([1] * (condition.ndim - 1)), self.condition_dim)

    def condition_from_batch(self, batch: Mapping[str, Any], embodiment: str) -> torch.Tensor:
        """(B, condition_input_dim) -> (B, 1, condition_dim): projected, one token, plus the domain's embedding."""
        condition = batch[CONDITION_KEY]
        if condition.shape[-1] != self.condition_input_dim:
            raise ValueError(f"Expected {self.condition_input_dim}-D pipeline condition, got {condition.shape[-1]}")
        return self.condition_for_domain(self.condition_projection(condition).unsqueeze(1), embodiment)

    def unroll_steps_at(self, optimizer_step: int) -> int:
        """Training: the number of Euler steps the schedule gives this optimizer step."""
        optimizer_step = max(int(optimizer_step), 1)
        start = max(s for s in self._sampling_cycles if s <= optimizer_step)
        cycle = self._sampling_cycles[start]
        return cycle[(optimizer_step - start) % len(cycle)]

    def _optimizer_step(self, embodiment: str) -> int:
        if self.training and embodiment == self.schedule_anchor_domain:
            self.training_batches_seen.add_(1)
        seen = max(int(self.training_batches_seen.item()), 1)
        return (seen - 1) // self.gradient_accumulation_steps + 1

    def sample_step_sizes(
        self, batch_size: int, num_steps: int, reference: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Training: a random grid per sample (sorted uniform cut points in float64), as float32 gaps."""
        if num_steps <= 0:
            raise ValueError("num_steps must be positive")
        device = reference.device
        if num_steps == 1:
            return torch.ones(batch_size, 1, device=device, dtype=torch.float32)
        cuts = torch.rand(batch_size, num_steps - 1, device=device, dtype=torch.float64, generator=generator)
        zeros = torch.zeros(batch_size, 1, device=device, dtype=torch.float64)
        ones = torch.ones(batch_size, 1, device=device, dtype=torch.float64)
        points = torch.cat((zeros, cuts.sort(dim=-1).values, ones), dim=-1)
        return points.diff(dim=-1).to(device=device, dtype=torch.float32)

    def _velocity(self, latent: torch.Tensor, time: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(self.denoising_module, latent, time, condition, use_reentrant=False)
        return self.denoising_module(latent, time, condition)

    def integrate(
        self,
        initial_latent: torch.Tensor,
        condition: torch.Tensor,
        num_steps: int,
        step_sizes: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Explicit Euler from t = 0 over `step_sizes` (B, num_steps) (default: uniform 1/num_steps,
        float32); time accumulates step by step (t = t + dt), the latent as x + dt * v(x, t, c)."""
        batch_size = initial_latent.shape[0]
        device = initial_latent.device
        if step_sizes is None:
            step_sizes = torch.full((batch_size, num_steps), 1.0 / num_steps, device=device, dtype=torch.float32)
        elif tuple(step_sizes.shape) != (batch_size, num_steps):
            raise ValueError(f"step_sizes must be ({batch_size}, {num_steps}), got {tuple(step_sizes.shape)}")
        step_sizes = step_sizes.to(device=device, dtype=torch.float32)
        if not bool(torch.all(step_sizes > 0.0)):
            raise ValueError("Every integration step must be positive")
        total = step_sizes.sum(dim=-1)
        if not torch.allclose(total, torch.ones_like(total), rtol=1e-6, atol=1e-6):
            raise ValueError("Every integration grid must sum to one")
        latent = initial_latent
        time = torch.zeros(batch_size, device=device, dtype=torch.float32)
        broadcast = (batch_size, *([1] * (latent.ndim - 1)))
        taken = []
        for index in range(num_steps):
            dt = step_sizes[:, index]
            latent = latent + dt.reshape(broadcast) * self._velocity(latent, time, condition)
            taken.append(dt.detach())
            time = time + dt
        self.last_integration_step_sizes = torch.stack(taken, dim=-1)
        return latent

    # ------------------------------------------------------------------ the stage

    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        embodiment = str(batch["embodiment"])
        noise = batch[NOISE_KEY]
        expected = (int(batch[CONDITION_KEY].shape[0]), self.latent_horizon, self.latent_dim)
        if tuple(noise.shape) != expected:
            raise ValueError(f"{NOISE_KEY} has shape {tuple(noise.shape)}, expected {expected}")
        condition = self.condition_from_batch(batch, embodiment)
        if self.training:
            optimizer_step = self._optimizer_step(embodiment)
            num_steps = self.unroll_steps_at(optimizer_step)
            step_sizes = self.sample_step_sizes(noise.shape[0], num_steps, noise)
            batch["log/optimizer_step"] = float(optimizer_step)
        else:
            num_steps, step_sizes = self.num_inference_steps, None
        endpoint = self.integrate(noise, condition, num_steps=num_steps, step_sizes=step_sizes)
        batch[ENDPOINT_KEY] = endpoint
        batch["log/sampler_unroll_steps"] = float(num_steps)
        batch["log/sampler_noise_rms"] = noise.detach().square().mean().sqrt()
        batch["log/sampler_endpoint_rms"] = endpoint.detach().square().mean().sqrt()

        prediction = self.decoder(embodiment)(endpoint)
        expected_action = (int(endpoint.shape[0]), self.action_horizon, self.action_dims[embodiment])
        if tuple(prediction.shape) != expected_action:
            raise RuntimeError(f"Decoder produced shape {tuple(prediction.shape)}, expected {expected_action}")
        batch[PRED_ACTION_KEY] = prediction
        batch["log/sampler_prediction_rms"] = prediction.detach().square().mean().sqrt()
        return batch


class MoEMultiJActionSampler(MultiJActionSampler):
    """MultiJActionSampler over a MoE denoiser; the same actions, plus the routers' load-balancing
    loss `loss/moe_lb` (mean over MoE layers, then over denoiser calls) and diagnostics
    (`log/moe_lb`, `log/moe_expert_frac_e<i>`, `log/moe_gate_entropy`)."""

    writes = (ENDPOINT_KEY, PRED_ACTION_KEY, "loss/moe_lb", "log/*")

    def _velocity(self, latent: torch.Tensor, time: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        velocity = super()._velocity(latent, time, condition)
        stats = [
            (m.last_aux_loss, m.last_expert_frac, m.last_gate_entropy)
            for m in self.denoising_module.modules()
            if isinstance(m, MoEFFN) and m.last_aux_loss is not None
        ]
        if stats:
            aux, frac, entropy = (cast(list[torch.Tensor], list(column)) for column in zip(*stats))
            self._moe_aux_calls.append(torch.stack(aux).mean())
            self._moe_frac_calls.append(torch.stack(frac).mean(0))
            self._moe_entropy_calls.append(torch.stack(entropy).mean())
        return velocity

    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        self._moe_aux_calls: list[torch.Tensor] = []
        self._moe_frac_calls: list[torch.Tensor] = []
        self._moe_entropy_calls: list[torch.Tensor] = []
        batch = super().forward(batch)
        if self._moe_aux_calls:
            aux = torch.stack(self._moe_aux_calls).mean()
            batch["loss/moe_lb"] = aux
            batch["log/moe_lb"] = aux.detach()
            for expert, fraction in enumerate(torch.stack(self._moe_frac_calls).mean(0)):
                batch[f"log/moe_expert_frac_e{expert}"] = fraction.detach()
            batch["log/moe_gate_entropy"] = torch.stack(self._moe_entropy_calls).mean().detach()
        return batch
