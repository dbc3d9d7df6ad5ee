"""Upstream's `PipelineAlgo`, for rollout: the stage list, its normalization and its one query.

Upstream's convention (egomimic/pipeline/core.py): every stage is `stage(batch: dict) -> dict`
and reads and writes keys of one flat dict. A rollout seeds `embodiment` (the domain name),
`rollout_t` and `obs/<key>` (normalized, with the observation-step axis), runs the stages whose
reads are satisfied (training-only ones excluded) and unnormalizes `pred_action` with the
checkpoint's own stats (egomimic/pipeline/algo.py `forward_rollout`). The module tree is
`nets.policy.stages.N`, so a checkpoint's state dict loads as it is, `strict=True`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from egomimic_hw.embodiment import LEGACY_MIGRATION, embodiment_by_id, embodiment_by_name
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.normalization import NormStats
from egomimic_policy.upstream.samplers import NOISE_KEY
from egomimic_policy.upstream.targets import instantiate


class TrainingOnlyStage(nn.Module):
    """A stage upstream runs only in training (a loss): no parameters, excluded at rollout. It
    keeps its index so that the following stages' parameter names match the checkpoint."""

    train_only = True
    reads: Sequence[str] = ()
    writes: Sequence[str] = ()

    def __init__(self, **config):
        super().__init__()
        self.config = dict(config)

    def forward(self, batch: dict) -> dict:
        raise RuntimeError(f"{type(self).__name__} is a training stage; rollout excludes it")


class Pipeline(nn.Module):
    """The ordered stages (upstream `Pipeline`); `rollout` runs those a rollout can."""

    def __init__(self, stages: Sequence[nn.Module]):
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def rollout_stages(self) -> list[nn.Module]:
        return [s for s in self.stages if not getattr(s, "train_only", False)]

    def forward(self, batch: dict) -> dict:
        for stage in self.rollout_stages():
            batch = stage(batch)
        return batch


class PipelineAlgo(nn.Module):
    """Upstream's algorithm adapter, rollout half: the config's domains, action keys and horizon
    around `nets.policy`. `norm_stats` comes from the checkpoint, not the config."""

    def __init__(
        self,
        stages: Sequence[nn.Module],
        domains: Sequence[str],
        ac_keys: Mapping[str, str],
        action_horizon: int = 1,
        **unused_rollout_options,
    ):
        super().__init__()
        self.domains = [str(d) for d in domains]
        self.ac_keys = {str(k): str(v) for k, v in ac_keys.items()}
        self.action_horizon = int(action_horizon)
        self.options = dict(unused_rollout_options)
        self.nets = nn.ModuleDict({"policy": Pipeline(stages)})

    @property
    def policy(self) -> Pipeline:
        return self.nets["policy"]  # type: ignore[return-value]

    def observation_steps(self) -> int:
        steps = {int(getattr(s, "rollout_obs_steps", 0)) for s in self.policy.stages if hasattr(s, "rollout_obs_steps")}
        if len(steps) != 1:
            raise CheckpointError(f"the pipeline declares {sorted(steps)} observation horizons, need exactly one")
        return steps.pop()


class ModelWrapper:
    """Upstream's Lightning wrapper: only carries the algorithm config (`robomimic_model`)."""

    def __init__(self, robomimic_model, **unused):
        self.robomimic_model = robomimic_model


@dataclass
class RolloutResult:
    pred_action_normalized: np.ndarray
    """(horizon, action_dim): what the network returns."""
    pred_action: np.ndarray
    """The same unnormalized with the checkpoint's stats (wrist-relative for EVA, physical units)."""


def domain_name(embodiment_id: int) -> str:
    return embodiment_by_id(embodiment_id).key


@torch.inference_mode()
def rollout(
    algo: PipelineAlgo,
    norm: NormStats,
    embodiment_id: int,
    observation: Mapping[str, np.ndarray],
    *,
    noise: np.ndarray | None = None,
    rollout_t: int = 0,
) -> RolloutResult:
    """One query, as upstream's `forward_rollout` for one embodiment and a batch of one.

    observation: the checkpoint's observation keys, each (T_obs, ...) in physical units for
    proprio (normalized here) and RGB floats in [0, 1] (T_obs, 3, H, W) for cameras (never
    normalized). noise: the sampler's initial latent (horizon, latent_dim), or None to draw it."""
    domain = domain_name(embodiment_id)
    if domain not in algo.domains:
        raise CheckpointError(f"the checkpoint is for {algo.domains}, not {domain}")
    steps = algo.observation_steps()
    device = next(algo.parameters()).device  # inputs go where the weights are (cpu or cuda)
    seed: dict = {"embodiment": domain, "rollout_t": int(rollout_t)}
    normalized_keys = set(norm.stats.get(int(embodiment_id), {}))
    for key, value in observation.items():
        arr = np.asarray(value, dtype=np.float32)
        if arr.shape[0] != steps:
            raise CheckpointError(f"observation {key!r} has {arr.shape[0]} steps, the checkpoint takes {steps}")
        if key in normalized_keys:
            arr = norm.normalize(embodiment_id, key, arr).astype(np.float32)
        seed[f"obs/{key}"] = torch.from_numpy(np.ascontiguousarray(arr))[None].to(device)
    if noise is not None:
        seed[NOISE_KEY] = torch.as_tensor(np.asarray(noise, dtype=np.float32))[None].to(device)
    result = algo.policy(seed)
    normalized = result["pred_action"][0].detach().float().cpu().numpy().astype(np.float64)
    action_key = algo.ac_keys[domain]
    return RolloutResult(normalized, norm.unnormalize(embodiment_id, action_key, normalized))


def build(ckpt: Mapping) -> tuple[PipelineAlgo, NormStats, list[str]]:
    """The algorithm of a plain-data upstream checkpoint (checkpoint.load_upstream), its weights
    loaded strictly, and its normalization; plus what was migrated (for `inspect` and logs)."""
    notes: list[str] = []
    hp = ckpt.get("hyper_parameters")
    if not isinstance(hp, Mapping) or not isinstance(hp.get("config_tree"), Mapping):
        raise CheckpointError("not an upstream EgoVerse checkpoint: no hyper_parameters.config_tree")
    model = hp["config_tree"].get("model", {})
    if not isinstance(model, Mapping) or model.get("_target_") != "egomimic.pl_utils.pl_model.ModelWrapper":
        raise CheckpointError(
            f"config_tree.model is {model.get('_target_') if isinstance(model, Mapping) else model!r}, "
            "not upstream's ModelWrapper"
        )
    algo = instantiate(model["robomimic_model"], "config_tree.model.robomimic_model")
    if not isinstance(algo, PipelineAlgo):
        raise CheckpointError(f"config_tree.model.robomimic_model builds a {type(algo).__name__}, not a PipelineAlgo")
    norm, migrated = norm_stats_of(hp.get("norm_stats_state"), algo.domains)
    notes += migrated
    load_strict(algo, ckpt.get("state_dict"))
    algo.eval()
    return algo, norm, notes


def norm_stats_of(state, domains: Sequence[str]) -> tuple[NormStats, list[str]]:
    """NormStats with current embodiment ids. The legacy remap ({8: 6, 18: 3}) applies only when
    the ids are legacy, i.e. not the current ids of the checkpoint's own domains."""
    if not isinstance(state, Mapping) or not isinstance(state.get("norm_stats"), Mapping):
        raise CheckpointError("the checkpoint has no hyper_parameters.norm_stats_state.norm_stats")
    current = {int(embodiment_by_name(d)) for d in domains}
    ids = {int(k) for k in state["norm_stats"]}
    notes = []
    if ids - current and all(i in LEGACY_MIGRATION and int(LEGACY_MIGRATION[i]) in current for i in ids - current):
        remap = {i: int(LEGACY_MIGRATION[i]) if i not in current else i for i in ids}
        state = {**state, "norm_stats": {remap[int(k)]: v for k, v in state["norm_stats"].items()}}
        notes.append(f"legacy embodiment ids remapped: {dict(sorted((k, v) for k, v in remap.items() if k != v))}")
    try:
        return NormStats.from_state(state), notes
    except Exception as exc:
        raise CheckpointError(f"norm_stats_state: {exc}") from exc


def weight_problems(own: Mapping, state_dict: Mapping) -> list[str]:
    """Every tensor a strict load would refuse: missing, unexpected, or of another shape (shapes
    only, so it works on a model built on the meta device too)."""
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    reshaped = sorted(
        f"{k} {tuple(state_dict[k].shape)} (expected {tuple(own[k].shape)})"
        for k in set(own) & set(state_dict)
        if tuple(own[k].shape) != tuple(state_dict[k].shape)
    )
    problems = [f"missing: {k}" for k in missing] + [f"unexpected: {k}" for k in unexpected]
    return problems + [f"shape: {r}" for r in reshaped]


def load_strict(algo: nn.Module, state_dict) -> None:
    """`load_state_dict(strict=True)`, with every missing, unexpected or reshaped tensor named."""
    if not isinstance(state_dict, Mapping):
        raise CheckpointError("the checkpoint has no state_dict")
    problems = weight_problems(algo.state_dict(), state_dict)
    if problems:
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        raise CheckpointError(
            f"the checkpoint's weights do not fit the model its config builds: {'; '.join(problems[:8])}{more}"
        )
    algo.load_state_dict(dict(state_dict), strict=True)
