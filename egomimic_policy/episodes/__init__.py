"""EVA episodes on disk (EVA.md "Episodes"): one zarr v3 store per episode; see `format`."""

from egomimic_policy.episodes.format import (
    ARM_SIDES,
    NUMERIC_FIELDS,
    EpisodeError,
    EpisodeMeta,
    EpisodeReader,
    EpisodeWriter,
    episode_name,
)

__all__ = [
    "ARM_SIDES",
    "NUMERIC_FIELDS",
    "EpisodeError",
    "EpisodeMeta",
    "EpisodeReader",
    "EpisodeWriter",
    "episode_name",
]
