"""Checkpoints: the one layout, upstream EgoVerse's Lightning layout (`layout`: `nets.policy.`
weights, `hyper_parameters.config_tree.model.robomimic_model`, `norm_stats_state`), the migrations
of older and upstream files into it (`migrations`) and the patched-checkpoint cache (`cache`).
Which algorithm a checkpoint holds is the families' business: each algorithm class prepares its
own checkpoints through `prepare_cached`; upstream's stage-pipeline files (Fold/MoE graphs) go to
egomimic_policy.upstream, routed by their `_target_` names (families.make_policy)."""

from egomimic_policy.checkpoints.cache import PreparedCheckpoint, default_cache_dir, prepare_cached
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.checkpoints.layout import (
    FORMAT_VERSION,
    build_checkpoint,
    canonical_json,
    load_checkpoint,
    model_config_of,
    save_checkpoint,
    sha256_of,
)
from egomimic_policy.checkpoints.migrations import MigrationRecord, migrate_checkpoint, resolve_target, upgrade_layout

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "MigrationRecord",
    "PreparedCheckpoint",
    "build_checkpoint",
    "canonical_json",
    "default_cache_dir",
    "load_checkpoint",
    "migrate_checkpoint",
    "model_config_of",
    "prepare_cached",
    "resolve_target",
    "save_checkpoint",
    "sha256_of",
    "upgrade_layout",
]
