"""Learned policy families (Fold, PI, MoE) and `make_policy`, the one way to get a live policy.

    make_policy("fold")                  # default size, seeded untrained weights, neutral stats
    make_policy("/ckpts/run/last.ckpt")  # prepared through the cache; family from `_target_`

The family table is an explicit dict (no import-time registry): a grep finds every option.
`save_checkpoint` (egomimic_policy.checkpoints) writes what `make_policy` reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import torch

from egomimic_hw.errors import ConfigError
from egomimic_policy.checkpoints import (
    CheckpointError,
    load_checkpoint,
    model_config_of,
    resolve_target,
    save_checkpoint,
    sha256_of,
)
from egomimic_policy.families.base import Algorithm, FamilyConfig, TrainBatch
from egomimic_policy.families.fold import FoldAlgorithm, FoldConfig
from egomimic_policy.families.moe import MoEAlgorithm, MoEConfig
from egomimic_policy.families.pi import PIAlgorithm, PIConfig
from egomimic_policy.features import neutral_norm_stats
from egomimic_policy.interface import ChunkPolicy

FAMILIES: MappingProxyType[str, type[Algorithm]] = MappingProxyType(
    {"fold": FoldAlgorithm, "pi": PIAlgorithm, "moe": MoEAlgorithm}
)
"""Family name -> algorithm class."""

DEFAULT_NUM_THREADS = 1
"""torch intra-op threads of a rollout (process-wide); the control graph shares the CPU."""


def algorithm_for_target(target: str) -> type[Algorithm]:
    """The family class a checkpoint's `_target_` (possibly a renamed legacy one) names."""
    current = resolve_target(target)
    for cls in FAMILIES.values():
        if cls.target() == current:
            return cls
    raise CheckpointError(
        f"checkpoint algorithm {target!r} is not a known family; known: "
        + ", ".join(f"{name} ({cls.target()})" for name, cls in FAMILIES.items())
    )


def build_algorithm(family: str, *, seed: int = 0, overrides: Mapping | None = None) -> Algorithm:
    """A family at its default size (plus `overrides`), weights initialized from `seed` without
    touching the global torch RNG."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown policy family {family!r}; choices: {sorted(FAMILIES)}")
    cls = FAMILIES[family]
    config = cls.config_type.from_dict(dict(overrides or {}))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return cls(config)


def make_policy(
    spec: str,
    *,
    cache_dir: Path | None = None,
    seed: int = 0,
    device: str = "cpu",
    num_threads: int = DEFAULT_NUM_THREADS,
    overrides: Mapping | None = None,
    pin_config_sha256: str | None = None,
) -> ChunkPolicy:
    """A live ChunkPolicy.

    spec: a family name ("fold" | "pi" | "moe": default size, weights from `seed`, stats from
    features.neutral_norm_stats) or the path of a checkpoint file (prepared once into
    `cache_dir`, default $EGOMIMIC_CACHE_DIR or ~/.cache/egomimic/checkpoints; the family comes
    from its model config's `_target_`).
    overrides: config fields; on a checkpoint only the family's `rollout_overridable` ones
    (e.g. Fold's num_inference_steps). pin_config_sha256: refuse a checkpoint whose model config
    hashes differently. seed: also seeds the sampler noise (reset() restarts it).
    """
    if not isinstance(spec, (str, os.PathLike)) or not str(spec).strip():
        raise ConfigError(f"policy spec must be a family name or a checkpoint path, got {spec!r}")
    name = str(spec).strip()
    if name in FAMILIES:
        algo = build_algorithm(name, seed=seed, overrides=overrides)
        norm = neutral_norm_stats()
        fingerprint = sha256_of({"model_config": algo.model_config(), "seed": int(seed), "norm_stats": norm.to_state()})
        return algo.create_rollout_policy(
            norm,
            fingerprint=fingerprint,
            seed=seed,
            num_threads=num_threads,
            device=device,
            extra={"weights": "untrained (seeded)"},
        )
    path = Path(name).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"policy spec {name!r} is neither a family ({', '.join(sorted(FAMILIES))}) nor a checkpoint file"
        )
    from egomimic_policy.upstream.policy import is_upstream_checkpoint, is_upstream_pi_checkpoint, make_upstream_policy

    if is_upstream_pi_checkpoint(path):  # openpi's PI0Pytorch: refused with what it needs unless installed
        from egomimic_policy.upstream.checkpoint import load_upstream
        from egomimic_policy.upstream.pi import load_upstream_pi

        load_upstream_pi(load_upstream(path), device=device)
        raise CheckpointError(
            f"{path}: upstream PI loaded through openpi, but the live policy-node adapter for it is not "
            "implemented; run it offline with egomimic_policy.upstream.pi.UpstreamPI"
        )

    if is_upstream_checkpoint(path):  # the lab's own EgoVerse checkpoint (egomimic_policy.upstream)
        if overrides:
            raise ConfigError(f"overrides {sorted(overrides)} are not supported on an upstream checkpoint")
        return make_upstream_policy(
            path,
            cache_dir=cache_dir,
            pin_config_sha256=pin_config_sha256,
            seed=seed,
            device=device,
            num_threads=num_threads,
        )
    source = load_checkpoint(path)
    cls = algorithm_for_target(model_config_of(source)["_target_"])
    prepared = cls.prepare_rollout_checkpoint(
        path, cache_dir=cache_dir, pin_config_sha256=pin_config_sha256, source_checkpoint=source
    )
    config_sha = sha256_of(model_config_of(source))  # what policy_sha256:= pins (upstream's pin)
    del source
    algo, norm, info = cls.load_prepared(prepared)
    fingerprint = prepared.fingerprint
    extra = {
        "config_sha256": config_sha,
        "checkpoint": str(path),
        "artifact": str(prepared.artifact_path),
        "epoch": str(info["epoch"]),
        "global_step": str(info["global_step"]),
        "cache": "reused" if prepared.reused else "built",
    }
    if overrides:
        algo.with_rollout_overrides(overrides)
        fingerprint = sha256_of({"artifact": prepared.fingerprint, "overrides": dict(overrides)})
        extra["overrides"] = (
            sha256_of(dict(overrides))[:12] + " " + ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
        )
    return algo.create_rollout_policy(
        norm, fingerprint=fingerprint, seed=seed, num_threads=num_threads, device=device, extra=extra
    )


__all__ = [
    "FAMILIES",
    "Algorithm",
    "FamilyConfig",
    "FoldAlgorithm",
    "FoldConfig",
    "MoEAlgorithm",
    "MoEConfig",
    "PIAlgorithm",
    "PIConfig",
    "TrainBatch",
    "algorithm_for_target",
    "build_algorithm",
    "make_policy",
    "save_checkpoint",
]
