"""Checkpoints: the Lightning-style layout (`layout`), legacy migrations (`migrations`) and the
patched-checkpoint cache (`cache`). Which algorithm a checkpoint holds is the families' business:
each algorithm class prepares its own checkpoints through `prepare_cached`."""

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
from egomimic_policy.checkpoints.migrations import MigrationRecord, migrate_checkpoint, resolve_target

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
]
