"""Upstream `_target_` names -> this project's classes, and the instantiation of a config tree.

A checkpoint's config tree names upstream's Python classes (Hydra `_target_`). They are
retargeted through one table, never imported: a name missing from the table is refused by name,
so a checkpoint cannot make this process import anything. The table is append-only (a
checkpoint that loaded once must keep loading); tests/unit/egomimic_policy/upstream pins it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from egomimic_policy.checkpoints.errors import CheckpointError

UPSTREAM_TARGETS: Mapping[str, str] = {
    # the Lightning wrapper and the algorithm: built by pipeline.build_policy, not instantiated
    "egomimic.pl_utils.pl_model.ModelWrapper": "egomimic_policy.upstream.pipeline:ModelWrapper",
    "egomimic.pipeline.algo.PipelineAlgo": "egomimic_policy.upstream.pipeline:PipelineAlgo",
    # stage 0: observations -> condition
    "egomimic.pipeline.stages_sampler.FusedObsEncoder": "egomimic_policy.upstream.encoders:FusedObsEncoder",
    "egomimic.pipeline.stages_sampler.SharedAdapterObsEncoder": "egomimic_policy.upstream.encoders:SharedAdapterObsEncoder",
    "egomimic.models.stems.input_modules.ObsToken": "egomimic_policy.upstream.encoders:ObsToken",
    "egomimic.models.stems.cond_encoders.CondEncoderModule": "egomimic_policy.upstream.encoders:CondEncoderModule",
    "egomimic.models.stems.cond_encoders.MultiEmbodimentCondEncoder": (
        "egomimic_policy.upstream.encoders:MultiEmbodimentCondEncoder"
    ),
    "egomimic.models.stems.visual_core.VisualCore": "egomimic_policy.upstream.vision:VisualCore",
    # stage 1: the initial latent
    "egomimic.pipeline.stages_sampler.GaussianLatentNoise": "egomimic_policy.upstream.samplers:GaussianLatentNoise",
    # stage 2: the flow sampler and its denoisers
    "egomimic.pipeline.stages_sampler.MultiJActionSampler": "egomimic_policy.upstream.samplers:MultiJActionSampler",
    "egomimic.pipeline.stages_sampler_moe.MoEMultiJActionSampler": (
        "egomimic_policy.upstream.samplers:MoEMultiJActionSampler"
    ),
    "egomimic.models.denoising_nets.CrossTransformer": "egomimic_policy.upstream.denoisers:CrossTransformer",
    "egomimic.models.moe_denoising_nets.MoECrossTransformer": "egomimic_policy.upstream.denoisers:MoECrossTransformer",
    # training only: kept as a parameter-free placeholder so stage indices match the checkpoint
    "egomimic.pipeline.stages_sampler.NativeActionMSELoss": "egomimic_policy.upstream.pipeline:TrainingOnlyStage",
}


def resolve(target: str, where: str = "") -> type:
    """The class this project uses for upstream's `target`."""
    ours = UPSTREAM_TARGETS.get(target)
    if ours is None:
        raise CheckpointError(
            f"unsupported upstream class {target!r}{f' at {where}' if where else ''}: "
            f"this project reproduces {len(UPSTREAM_TARGETS)} upstream classes (egomimic_policy/upstream/targets.py)"
        )
    module, _, name = ours.partition(":")
    return getattr(importlib.import_module(module), name)


def instantiate(node: Any, where: str = "config") -> Any:
    """Hydra-style: a mapping with `_target_` becomes an instance of its retargeted class, its
    children built first and passed as keyword arguments; other mappings and lists recursively."""
    if isinstance(node, Mapping):
        special = sorted(k for k in node if isinstance(k, str) and k.startswith("_") and k != "_target_")
        if special:
            raise CheckpointError(f"{where}: Hydra option(s) {special} are not supported")
        kwargs = {k: instantiate(v, f"{where}.{k}") for k, v in node.items() if k != "_target_"}
        if "_target_" not in node:
            return kwargs
        cls = resolve(str(node["_target_"]), where)
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise CheckpointError(f"{where}: {node['_target_']} does not take this config: {exc}") from exc
    if isinstance(node, list):
        return [instantiate(v, f"{where}.{i}") for i, v in enumerate(node)]
    return node
