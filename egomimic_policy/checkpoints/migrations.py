"""Migrations from legacy / training checkpoints to the current rollout layout (pure functions).

Every checkpoint of a project family, whatever wrote it, goes through `migrate_checkpoint` (the
policy node, via the prepared cache) or, to resume training, `upgrade_layout` (its layout steps
only): upstream's files, this project's (format_version 2, the same layout) and its first
layout (format_version 1) all come out in layout.py's layout.

Each migration is named, applied only when needed, logged when applied and recorded in the
prepared artifact's marker, so an operator can see what was changed and why:

- `strip_orig_mod`: torch.compile wraps modules as `_orig_mod`, so compiled training runs save
  `nets.policy._orig_mod.x`; the rollout model is built uncompiled and needs `nets.policy.x`.
- `rename_model_prefix`: format_version 1 saved the algorithm's weights as `model.<param>`;
  upstream's layout (and this project's since format_version 2) has `nets.policy.<param>`.
- `relocate_model_config`: format_version 1 kept the model config at
  `hyper_parameters.model_config`; it belongs at `hyper_parameters.config_tree.model.robomimic_model`
  (under upstream's wrapper `_target_`). The config dict itself is unchanged, so a pin still holds.
- `retarget`: renamed algorithm classes (`RENAMED_TARGETS`, append-only).
- `remap_embodiment_ids`: legacy ids through egomimic_hw.embodiment.LEGACY_MIGRATION (8 -> 6,
  18 -> 3), a table checked against both enums at import; any other legacy id is refused.
- `drop_training_state`: optimizer states, LR schedulers, loops, callbacks (often most of the
  file; never needed to act).
- optional pin: the SOURCE model config's canonical-JSON SHA-256 must equal what the operator
  pinned, or preparation refuses ("this is not the checkpoint you meant").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from egomimic_hw.embodiment import LEGACY_MIGRATION, embodiment_by_id, migrate_legacy_id
from egomimic_hw.errors import ConfigError
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.checkpoints.layout import (
    CONFIG_PATH,
    FORMAT_VERSION,
    KEPT_TOP_LEVEL_KEYS,
    MODEL_PREFIX,
    V1_CONFIG_KEY,
    V1_MODEL_PREFIX,
    config_tree,
    model_config_of,
    sha256_of,
)
from egomimic_policy.normalization import NormStats

log = logging.getLogger(__name__)

ORIG_MOD = "_orig_mod."

# Append-only: old `_target_` -> current one. Upstream's PipelineAlgo hosted the frozen Fold graph.
RENAMED_TARGETS: MappingProxyType[str, str] = MappingProxyType(
    {
        "egomimic.pipeline.algo.PipelineAlgo": "egomimic_policy.families.fold.FoldAlgorithm",
        "egomimic.algo.pi.PI": "egomimic_policy.families.pi.PIAlgorithm",
    }
)

UNSUPPORTED_TARGETS: MappingProxyType[str, str] = MappingProxyType(
    {
        "egomimic.algo.hpt.HPT": "HPT is not ported to this runtime (its actions are legacy absolute/cam-frame poses)",
        "egomimic.algo.act.ACT": "ACT is explicitly unsupported for live EVA upstream",
    }
)


@dataclass
class MigrationRecord:
    """What preparation changed; stored in the artifact marker."""

    source_model_config_sha256: str
    target: str
    applied: list[str] = field(default_factory=list)
    embodiment_remap: dict[int, int] = field(default_factory=dict)
    dropped_keys: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "source_model_config_sha256": self.source_model_config_sha256,
            "target": self.target,
            "applied": list(self.applied),
            "embodiment_remap": {str(k): v for k, v in sorted(self.embodiment_remap.items())},
            "dropped_keys": list(self.dropped_keys),
        }


def resolve_target(target: str) -> str:
    """Current class path of a (possibly renamed) `_target_`; refuses known-unsupported ones."""
    if target in UNSUPPORTED_TARGETS:
        raise CheckpointError(f"checkpoint algorithm {target!r} is not supported: {UNSUPPORTED_TARGETS[target]}")
    return RENAMED_TARGETS.get(target, target)


LEGACY_FOLD_TARGET = "egomimic_policy.families.fold.FoldAlgorithm"
"""A legacy-layout checkpoint of this family must be pinned (config_sha256), as upstream's
deployment of it is: its observation encoder's config was never published, so only the pin
says that the file is the model the lab validated."""


def is_legacy(ckpt: Mapping) -> bool:
    """True when the checkpoint predates this layout and its embodiment ids are legacy ones.

    Without `format_version` the ids decide: a checkpoint written after upstream collapsed its
    ids (eva_bimanual = 6, human_bimanual = 3) carries only current ids and is taken as it is;
    the legacy remap ({8: 6, 18: 3}) applies when any id is one of its legacy ids."""
    version = (ckpt.get("hyper_parameters") or {}).get("format_version")
    if version is None:
        stats = ((ckpt.get("hyper_parameters") or {}).get("norm_stats_state") or {}).get("norm_stats") or {}
        ids = set()
        for raw in stats:
            try:
                ids.add(int(raw))
            except (TypeError, ValueError):
                return True  # refused with its reason by the remap
        return not ids or bool(ids & set(LEGACY_MIGRATION))
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint format_version {version!r} is newer than this code ({FORMAT_VERSION}); update it"
        )
    return False


def _strip_orig_mod(state_dict: Mapping) -> tuple[dict, int]:
    out: dict = {}
    stripped = 0
    for key, value in state_dict.items():
        new = key.replace(ORIG_MOD, "")
        stripped += new != key
        if new in out:
            raise CheckpointError(
                f"state_dict has both {key!r} and an un-prefixed twin {new!r}; cannot tell which is real"
            )
        out[new] = value
    return out, stripped


def _rename_model_prefix(state_dict: Mapping) -> tuple[dict, int]:
    out: dict = {}
    renamed = 0
    for key, value in state_dict.items():
        new = MODEL_PREFIX + key[len(V1_MODEL_PREFIX) :] if key.startswith(V1_MODEL_PREFIX) else key
        renamed += new != key
        if new in out:
            raise CheckpointError(f"state_dict has {key!r} and {new!r} (both '{V1_MODEL_PREFIX}' and '{MODEL_PREFIX}')")
        out[new] = value
    return out, renamed


def _config_at_path(hp: Mapping):
    node: Any = hp
    for part in CONFIG_PATH:
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def upgrade_layout(ckpt: Mapping) -> tuple[dict, list[str]]:
    """`ckpt` in the current layout (layout.py) and the names of the layout migrations applied:
    strip_orig_mod, rename_model_prefix (format_version 1 `model.`), relocate_model_config
    (format_version 1 `model_config`). Everything else (ids, optimizer state, format_version) is
    left as it is. A new dict; the input is not modified, tensors are shared, not copied."""
    applied: list[str] = []
    state_dict, stripped = _strip_orig_mod(ckpt["state_dict"])
    if stripped:
        applied.append(f"strip_orig_mod({stripped} keys)")
    state_dict, renamed = _rename_model_prefix(state_dict)
    if renamed:
        applied.append(f"rename_model_prefix({renamed} keys)")
        log.info("checkpoint migration: %d state_dict keys '%s' -> '%s'", renamed, V1_MODEL_PREFIX, MODEL_PREFIX)
    hp = dict(ckpt.get("hyper_parameters") or {})
    if V1_CONFIG_KEY in hp:
        v1_config = hp.pop(V1_CONFIG_KEY)
        current = _config_at_path(hp)
        if current is not None and current != v1_config:
            raise CheckpointError(
                f"hyper_parameters has both {V1_CONFIG_KEY} and " + ".".join(CONFIG_PATH) + ", and they differ"
            )
        if current is None:
            if not isinstance(v1_config, Mapping):
                raise CheckpointError(f"hyper_parameters.{V1_CONFIG_KEY} is not a mapping")
            hp["config_tree"] = {**(hp.get("config_tree") or {}), **config_tree(v1_config)}
        applied.append("relocate_model_config")
        log.info(
            "checkpoint migration: hyper_parameters.%s -> hyper_parameters.%s", V1_CONFIG_KEY, ".".join(CONFIG_PATH)
        )
    return {**ckpt, "state_dict": state_dict, "hyper_parameters": hp}, applied


def _remap_norm_stats(state: Mapping, legacy: bool, record: MigrationRecord) -> dict:
    stats = state.get("norm_stats")
    if not isinstance(stats, Mapping) or not stats:
        raise CheckpointError("norm_stats_state.norm_stats is missing or empty")
    remapped = {}
    for raw_id, keys in stats.items():
        try:
            emb_id = int(raw_id)
        except (TypeError, ValueError):
            raise CheckpointError(f"norm stats embodiment id {raw_id!r} is not an integer") from None
        try:
            current = migrate_legacy_id(emb_id) if legacy else embodiment_by_id(emb_id)
        except ConfigError as exc:
            raise CheckpointError(f"norm stats: {exc}") from None
        if int(current) in remapped:
            raise CheckpointError(f"norm stats: two ids map to {current.key}={int(current)}")
        if legacy:
            record.embodiment_remap[emb_id] = int(current)
            log.warning("checkpoint migration: legacy embodiment id %d -> %s=%d", emb_id, current.key, int(current))
        remapped[int(current)] = keys
    try:
        stats_obj = NormStats.from_state({**state, "norm_stats": remapped})
    except ConfigError as exc:
        raise CheckpointError(f"norm stats: {exc}") from None
    return stats_obj.to_state()


def check_pin(ckpt: Mapping, pin_config_sha256: str | None) -> str:
    """The checkpoint's config SHA-256, after refusing a pin it does not match and a legacy Fold
    started without one (LEGACY_FOLD_TARGET). Called before anything is written."""
    source_config = model_config_of(ckpt)
    source_sha = sha256_of(source_config)
    if pin_config_sha256 is not None and pin_config_sha256.lower() != source_sha:
        raise CheckpointError(
            f"model config fingerprint mismatch: pinned {pin_config_sha256}, checkpoint has {source_sha} "
            "(canonical-JSON SHA-256 of its model config); refusing to run a checkpoint you did not pin"
        )
    if (
        pin_config_sha256 is None
        and is_legacy(ckpt)
        and resolve_target(source_config["_target_"]) == LEGACY_FOLD_TARGET
    ):
        raise CheckpointError(
            f"a legacy Fold checkpoint runs only pinned: pass config_sha256:={source_sha} if this is the model "
            "you validated (the SHA-256 of its model config's canonical JSON, as upstream pins it)"
        )
    return source_sha


def migrate_checkpoint(ckpt: Mapping, *, pin_config_sha256: str | None = None) -> tuple[dict, MigrationRecord]:
    """A new dict in the current layout (the input is not modified) and the record of what changed.
    The artifact keeps the weights, `config_tree.model` (upstream's wrapper `_target_` and the
    retargeted `robomimic_model`), the norm stats (current ids) and format_version; any other
    config_tree entry, like training state, is dropped and listed in `dropped_keys`."""
    source_sha = check_pin(ckpt, pin_config_sha256)
    legacy = is_legacy(ckpt)
    ckpt, applied = upgrade_layout(ckpt)
    hp = ckpt["hyper_parameters"]
    config = model_config_of(ckpt)
    record = MigrationRecord(source_model_config_sha256=source_sha, target=config["_target_"], applied=applied)
    target = resolve_target(config["_target_"])
    if target != config["_target_"]:
        record.applied.append(f"retarget({config['_target_']} -> {target})")
        log.warning("checkpoint migration: retarget %s -> %s", config["_target_"], target)
        config["_target_"] = target
    record.target = target
    if "norm_stats_state" not in hp:
        raise CheckpointError(
            "checkpoint has no hyper_parameters.norm_stats_state (a model is meaningless without its stats)"
        )
    norm_state = _remap_norm_stats(hp["norm_stats_state"], legacy, record)
    if record.embodiment_remap:
        record.applied.append(
            "remap_embodiment_ids(" + ", ".join(f"{k}->{v}" for k, v in sorted(record.embodiment_remap.items())) + ")"
        )
    record.dropped_keys = sorted(str(k) for k in ckpt if k not in KEPT_TOP_LEVEL_KEYS)
    record.dropped_keys += sorted(
        f"hyper_parameters.{k}" for k in hp if k not in ("config_tree", "norm_stats_state", "format_version")
    )
    tree = hp["config_tree"]
    record.dropped_keys += sorted(f"hyper_parameters.config_tree.{k}" for k in tree if k != "model")
    record.dropped_keys += sorted(
        f"hyper_parameters.config_tree.model.{k}" for k in tree["model"] if k not in ("_target_", "robomimic_model")
    )
    if any(not k.startswith("hyper_parameters.") for k in record.dropped_keys):
        record.applied.append("drop_training_state")
    for key in ("epoch", "global_step"):
        if not isinstance(ckpt.get(key), int):
            raise CheckpointError(f"checkpoint {key!r} must be an int, got {ckpt.get(key)!r}")
    out = {
        "state_dict": ckpt["state_dict"],
        "hyper_parameters": {
            "config_tree": config_tree(config),
            "norm_stats_state": norm_state,
            "format_version": FORMAT_VERSION,
        },
        "epoch": ckpt["epoch"],
        "global_step": ckpt["global_step"],
    }
    if "pytorch-lightning_version" in ckpt:
        out["pytorch-lightning_version"] = ckpt["pytorch-lightning_version"]
    return out, record
