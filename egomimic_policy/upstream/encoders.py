"""Upstream EgoVerse's observation encoder (stage 0 of the Fold pipeline), rebuilt with upstream's
module and parameter names so that the lab's checkpoints load with `load_state_dict(strict=True)`
and give upstream's condition.

Reproduces, from GaTech-RL2/EgoVerse:
- `ObsToken`: `egomimic/models/stems/input_modules.py`;
- `CondEncoderModule`, `MultiEmbodimentCondEncoder`: `egomimic/models/stems/cond_encoders.py`;
- `SharedAdapterObsEncoder`, `FusedObsEncoder`: `egomimic/pipeline/stages_sampler.py`.

Constructors take upstream's config keys, with nested `_target_` children already built
(Hydra-instantiate style): `FusedObsEncoder(n_obs_steps=2, encoder=SharedAdapterObsEncoder(...))`.

Stage 0 follows upstream's batch-dict protocol (`egomimic/pipeline/core.py`): it reads
`obs/<key>` tensors (B, n_obs_steps, ...) (images (B, T, 3, H, W) RGB in [0, 1]; low-dim
observations already normalised) and `embodiment` (domain name), and writes `condition`
(B, n_obs_steps * (d_shared + d_adapter)), laid out step by step, each step's shared features
then its adapter features. A training batch's `actions` moves to `target`; a rollout batch
(marked by `rollout_t`) needs none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn


def _mlp(in_dim: int, out_dim: int, widths: Sequence[int] | None = None) -> nn.Sequential:
    """Linear -> GELU for every hidden width, then Linear to `out_dim` (indices 0, 2, 4, ...)."""
    layers: list[nn.Module] = []
    width_in = int(in_dim)
    for width in widths or ():
        layers.append(nn.Linear(width_in, int(width)))
        layers.append(nn.GELU())
        width_in = int(width)
    layers.append(nn.Linear(width_in, int(out_dim)))
    return nn.Sequential(*layers)


def _module_key(logical_key: str) -> str:
    """Registration name of a data key: itself, or a hex encoding when it holds a dot (which
    `nn.ModuleDict` reserves for the state_dict hierarchy), as upstream names them."""
    return logical_key if "." not in logical_key else "__dotted_" + logical_key.encode("utf-8").hex()


class CondEncoderModule(nn.Module):
    """Per-token fusion of low-dim and image observations (upstream's `CondEncoderModule`).

    Each `obs_specs` key (sorted) goes through its optional `input_slice` and an MLP
    (`obs_encoders.<key>`: input_dim -> widths -> embed_dim); each image key (sorted) through its
    encoder (`img_encoders.<key>`, exposing `.embed_dim`). The features, low-dim first, are
    concatenated and projected by `cond_proj` (widths `cond_proj_widths`, default
    [max(d_cond, fused)], GELU between) to `d_cond`, exposed under `output_key`.
    """

    def __init__(
        self,
        d_cond: int,
        obs_specs: Mapping[str, Mapping[str, Any]] | None = None,
        img_encoders: Mapping[str, nn.Module] | None = None,
        strict_keys: bool = True,
        cond_proj_widths: Sequence[int] | None = None,
        output_key: str = "fused_cond",
        per_obs_keys: bool = False,
    ) -> None:
        super().__init__()
        self.d_cond = int(d_cond)
        self.output_key = str(output_key)
        self.per_obs_keys = bool(per_obs_keys)
        self.strict_keys = bool(strict_keys)
        obs_specs = dict(obs_specs or {})
        img_encoders = dict(img_encoders or {})

        fused_dim = 0
        self.obs_keys = sorted(obs_specs)
        self._obs_module_keys = {key: _module_key(key) for key in self.obs_keys}
        self.obs_encoders = nn.ModuleDict()
        self.obs_input_slices: dict[str, slice] = {}
        for key in self.obs_keys:
            spec = obs_specs[key]
            self.obs_encoders[self._obs_module_keys[key]] = _mlp(
                int(spec["input_dim"]), int(spec["embed_dim"]), list(spec.get("widths", []))
            )
            if "input_slice" in spec:
                start, end = spec["input_slice"]
                self.obs_input_slices[key] = slice(int(start), int(end))
            fused_dim += int(spec["embed_dim"])

        self.img_keys = sorted(img_encoders)
        self._img_module_keys = {key: _module_key(key) for key in self.img_keys}
        self.img_encoders = nn.ModuleDict({self._img_module_keys[key]: img_encoders[key] for key in self.img_keys})
        for key in self.img_keys:
            encoder = img_encoders[key]
            if not hasattr(encoder, "embed_dim"):
                raise AttributeError(f"img_encoders[{key!r}] must expose `.embed_dim` (got {type(encoder).__name__}).")
            fused_dim += int(cast(Any, encoder).embed_dim)

        self.cond_proj: nn.Sequential | None = None
        if fused_dim:
            widths = [max(self.d_cond, fused_dim)] if cond_proj_widths is None else list(cond_proj_widths)
            self.cond_proj = _mlp(fused_dim, self.d_cond, widths)

    def encode(
        self, obs: Mapping[str, torch.Tensor], T_action: int, embodiment_id: str | None = None
    ) -> dict[str, torch.Tensor]:
        """{output_key: (B, T, d_cond)} (plus each key's features when `per_obs_keys`). Inputs are
        (B, T, D) and (B, T, C, H, W); a (B, D) or (B, C, H, W) one is repeated over `T_action`.
        `embodiment_id` is accepted and ignored (one encoder for every embodiment)."""
        del embodiment_id
        out: dict[str, torch.Tensor] = {}
        if self.cond_proj is None:
            return out
        features: list[torch.Tensor] = []
        for key in self.obs_keys:
            if key not in obs:
                if self.strict_keys:
                    raise KeyError(
                        f"CondEncoderModule: declared obs key {key!r} is not in the batch (have: {sorted(obs)[:12]})"
                    )
                continue
            x = obs[key]
            if key in self.obs_input_slices:
                x = x[..., self.obs_input_slices[key]]
            if x.dim() == 2:
                x = x.unsqueeze(1).expand(-1, T_action, -1)
            features.append(self.obs_encoders[self._obs_module_keys[key]](x))
            if self.per_obs_keys:
                out[key] = features[-1]
        for key in self.img_keys:
            if key not in obs:  # upstream skips a missing camera silently (no strict check)
                continue
            x = obs[key]
            if x.dim() == 4:
                x = x.unsqueeze(1).expand(-1, T_action, -1, -1, -1)
            features.append(self.img_encoders[self._img_module_keys[key]](x))
            if self.per_obs_keys:
                out[key] = features[-1]
        if features:
            out[self.output_key] = self.cond_proj(torch.cat(features, dim=-1))
        return out


class MultiEmbodimentCondEncoder(nn.Module):
    """One `CondEncoderModule` per embodiment (`encoders.<domain>`), chosen by `embodiment_id`."""

    def __init__(self, encoders: Mapping[str, CondEncoderModule]) -> None:
        super().__init__()
        if not encoders:
            raise ValueError("MultiEmbodimentCondEncoder needs at least one encoder.")
        self.encoders = nn.ModuleDict(dict(encoders))
        first = next(iter(encoders.values()))
        self.output_key = first.output_key
        self.d_cond = first.d_cond
        for domain, encoder in encoders.items():
            if encoder.output_key != self.output_key:
                raise ValueError(
                    f"All per-embodiment encoders must share output_key; "
                    f"got {encoder.output_key!r} for {domain!r} vs {self.output_key!r}."
                )

    def encode(
        self, obs: Mapping[str, torch.Tensor], T_action: int, embodiment_id: str | None = None
    ) -> dict[str, torch.Tensor]:
        if embodiment_id is None:
            raise RuntimeError("MultiEmbodimentCondEncoder.encode requires embodiment_id.")
        if embodiment_id not in self.encoders:
            raise KeyError(f"No cond encoder for embodiment {embodiment_id!r}; available: {list(self.encoders)}.")
        encoder = self.encoders[embodiment_id]
        assert isinstance(encoder, CondEncoderModule)
        return encoder.encode(obs, T_action)


ObsEncoder = CondEncoderModule | MultiEmbodimentCondEncoder


class ObsToken(nn.Module):
    """Observations as tokens (upstream's `ObsToken`): its `obs_encoder`'s fused output, width
    `d_model` (which must equal the encoder's `d_cond`)."""

    def __init__(self, d_model: int, obs_encoder: ObsEncoder) -> None:
        super().__init__()
        if obs_encoder.d_cond != d_model:
            raise ValueError(
                f"ObsToken expects obs_encoder.d_cond == d_model (got {obs_encoder.d_cond} vs {d_model}). "
                f"Set d_cond={d_model} in the obs_encoder config."
            )
        self.d_model = int(d_model)
        self.obs_encoder = obs_encoder
        self._output_key = obs_encoder.output_key

    def _encode(self, obs: Mapping[str, torch.Tensor], T_action: int, embodiment_id: str | None) -> torch.Tensor:
        out = self.obs_encoder.encode(obs, T_action, embodiment_id=embodiment_id)
        if self._output_key not in out:
            raise KeyError(
                f"ObsToken: obs_encoder did not produce {self._output_key!r} (got keys {list(out)}). "
                f"Check that obs_specs/img_encoders are populated."
            )
        return out[self._output_key]

    def forward_padded(
        self,
        *,
        actions: torch.Tensor | None,
        obs: Mapping[str, torch.Tensor],
        B: int,
        T: int,
        device: torch.device,
        dtype: torch.dtype,
        embodiment_id: str | None = None,
    ) -> torch.Tensor:
        """(B, T, d_model) from (B, T, ...) observations."""
        return self._encode(obs, T, embodiment_id).to(dtype)

    def forward_packed(
        self,
        *,
        actions_packed: torch.Tensor | None,
        obs_packed: Mapping[str, torch.Tensor],
        cu_seqlens: torch.Tensor,
        T_total: int,
        device: torch.device,
        dtype: torch.dtype,
        embodiment_id: str | None = None,
    ) -> torch.Tensor:
        """(T_total, d_model) from packed (T_total, ...) observations (encoded as one batch row)."""
        obs_row = {key: value.unsqueeze(0) for key, value in obs_packed.items()}
        return self._encode(obs_row, T_total, embodiment_id).squeeze(0).to(dtype)

    def step(
        self,
        *,
        prev_action_norm: torch.Tensor | None,
        obs_norm: Mapping[str, torch.Tensor],
        t: int,
        B: int,
        device: torch.device,
        dtype: torch.dtype,
        embodiment_id: str | None = None,
    ) -> torch.Tensor:
        """(B, 1, d_model) for one step's observations."""
        return self._encode(obs_norm, 1, embodiment_id).to(dtype)


class SharedAdapterObsEncoder(nn.Module):
    """A shared branch (same weights for every embodiment) and an embodiment adapter, both
    `ObsToken`s on the same packed observations, concatenated: (T_total, d_shared + d_adapter)."""

    def __init__(self, shared_encoder: ObsToken, embodiment_adapter: ObsToken) -> None:
        super().__init__()
        self.shared_encoder = shared_encoder
        self.embodiment_adapter = embodiment_adapter

    def forward_packed(
        self, *, obs_packed: Mapping[str, torch.Tensor], embodiment_id: str, T_total: int, **kwargs: Any
    ) -> torch.Tensor:
        call = dict(obs_packed=obs_packed, embodiment_id=embodiment_id, T_total=T_total, **kwargs)
        shared = self.shared_encoder.forward_packed(**call)
        adapter = self.embodiment_adapter.forward_packed(**call)
        if shared.shape[:-1] != adapter.shape[:-1]:
            raise ValueError(
                "Shared and embodiment-adapter features have incompatible shapes: "
                f"{tuple(shared.shape)} vs {tuple(adapter.shape)}"
            )
        return torch.cat((shared, adapter), dim=-1)


class FusedObsEncoder(nn.Module):
    """Stage 0 of the Fold pipeline (upstream's `FusedObsEncoder` stage).

    `forward(batch) -> batch`: every `obs/<key>` tensor (B, n_obs_steps, ...) is packed to
    (B * n_obs_steps, ...) (row b * n_obs_steps + t), encoded by `encoder.forward_packed` with
    `embodiment_id=str(batch["embodiment"])` to (B * n_obs_steps, D), and written as
    `batch["condition"]` (B, n_obs_steps * D). With n_obs_steps == 1 a rollout batch's singleton
    history axis is dropped and a training batch's obs are taken as (B, ...). `actions`, when
    present, moves to `target`; without it the batch must be a rollout one (`rollout_t`).
    """

    reads: Sequence[str] = ("obs/*", "embodiment", "actions")
    writes: Sequence[str] = ("condition", "target")
    reads_by_mode: Mapping[str, Sequence[str]] = {"rollout": ("obs/*", "embodiment")}
    writes_by_mode: Mapping[str, Sequence[str]] = {"rollout": ("condition",)}

    def __init__(
        self, encoder: SharedAdapterObsEncoder, n_obs_steps: int = 2, required_obs_keys: Sequence[str] | None = None
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.n_obs_steps = int(n_obs_steps)
        self.rollout_obs_steps = self.n_obs_steps
        if self.n_obs_steps <= 0:
            raise ValueError("n_obs_steps must be positive")
        if required_obs_keys is not None:
            required = tuple(str(k) if str(k).startswith("obs/") else f"obs/{k}" for k in required_obs_keys)
            if not required:
                raise ValueError("required_obs_keys cannot be empty")
            self.reads = (*required, "embodiment", "actions")
            self.reads_by_mode = {"rollout": (*required, "embodiment")}

    def contract(self, mode: str = "train") -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The keys this stage reads and writes in `mode` (train|rollout), as upstream's Stage."""
        if mode not in ("train", "rollout"):
            raise ValueError(f"Stage contract mode must be train|rollout, got {mode!r}")
        return tuple(self.reads_by_mode.get(mode, self.reads)), tuple(self.writes_by_mode.get(mode, self.writes))

    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        obs = {key.split("/", 1)[1]: value for key, value in batch.items() if key.startswith("obs/")}
        tensors = [value for value in obs.values() if torch.is_tensor(value)]
        if not tensors:
            raise ValueError("FusedObsEncoder: the batch has no obs/* tensor")
        reference = tensors[0]
        batch_size, n_obs = int(reference.shape[0]), self.n_obs_steps
        for key, value in list(obs.items()):
            if not torch.is_tensor(value):
                continue
            if n_obs == 1:
                if int(value.shape[0]) != batch_size:
                    raise ValueError(f"FusedObsEncoder: obs/{key} has batch {value.shape[0]}; expected {batch_size}")
                if "rollout_t" in batch:
                    if value.ndim < 2 or value.shape[1] != 1:
                        raise ValueError(
                            f"FusedObsEncoder rollout obs/{key} must have an explicit singleton history axis, "
                            f"got {tuple(value.shape)}"
                        )
                    obs[key] = value[:, 0]
            else:
                if reference.ndim < 2 or reference.shape[1] != n_obs:
                    raise ValueError(f"FusedObsEncoder got shape {tuple(reference.shape)}; expected (B, {n_obs}, ...)")
                if tuple(value.shape[:2]) != (batch_size, n_obs):
                    raise ValueError(
                        f"FusedObsEncoder: obs/{key} has shape {tuple(value.shape)}; "
                        f"expected leading dimensions {(batch_size, n_obs)}"
                    )
                obs[key] = value.reshape(batch_size * n_obs, *value.shape[2:])
        total, device = batch_size * n_obs, reference.device
        dtype = reference.dtype if reference.is_floating_point() else torch.float32
        encoded = self.encoder.forward_packed(
            actions_packed=torch.zeros((total, 1), device=device, dtype=dtype),  # unused by ObsToken
            obs_packed=obs,
            cu_seqlens=torch.arange(0, total + 1, n_obs, device=device, dtype=torch.long),
            T_total=total,
            device=device,
            dtype=dtype,
            embodiment_id=str(batch["embodiment"]),
        )
        batch["condition"] = encoded.reshape(batch_size, n_obs * encoded.shape[-1])
        target = batch.pop("actions", None)
        if target is None and "rollout_t" not in batch:
            raise ValueError("FusedObsEncoder: training batch has no actions target")
        if target is not None:
            batch["target"] = target
        return batch
