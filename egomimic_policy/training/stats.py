"""Normalization statistics of the training data, in the NormStats form rollout reads back.

What is reduced (upstream `MultiDataset`, reduce_all_but_last): every axis but the last.
- state_ee_pose: every frame of every episode once (a window's history only repeats frames);
- actions_cartesian: the REAL rows (action_mask 1) of the windows' chunks; the rows repeated
  past an episode end are padding, not data. Windows are subsampled to at most `max_windows`
  (seeded), as upstream samples a fraction of the data: neighbouring windows share most rows.
Numeric arrays only: no image is decoded.

A dimension that barely varies in the data (a gripper never moved, a rotation never changed)
would have q99 - q1 near 0, and the normalization would blow float round-off and any
later variation up by ~1e6. Such spans are widened to MIN_SPAN around their centre, so a
constant dimension normalizes to about 0 and stays bounded.
"""

from __future__ import annotations

import numpy as np

from egomimic_hw.errors import ConfigError
from egomimic_policy.features import ACTION_KEY, EMBODIMENT, STATE_KEY
from egomimic_policy.normalization import KeyStats, NormMode, NormStats
from egomimic_policy.training.dataset import EpisodeWindows

MIN_SPAN = 2e-3
"""Smallest q99 - q1 (and max - min; std at least half of it): 2 mm in xyz, about 0.1 degree in
rot6d, 0.2 % of the gripper range. Real demonstrations vary far more in every dimension."""


def widen_degenerate(stats: KeyStats, min_span: float = MIN_SPAN) -> KeyStats:
    """`stats` with every span below `min_span` widened to it, centred where the data are."""

    def widen(lo: np.ndarray, hi: np.ndarray, centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        narrow = (hi - lo) < min_span
        return np.where(narrow, centre - min_span / 2, lo), np.where(narrow, centre + min_span / 2, hi)

    median = stats.median if stats.median is not None else (stats.quantile_1 + stats.quantile_99) / 2
    q1, q99 = widen(stats.quantile_1, stats.quantile_99, median)
    lo, hi = widen(stats.min, stats.max, (stats.min + stats.max) / 2)
    return KeyStats(
        mean=stats.mean,
        std=np.maximum(stats.std, min_span / 2),
        min=lo,
        max=hi,
        median=stats.median,
        quantile_1=q1,
        quantile_99=q99,
    )


def window_sample(n_windows: int, max_windows: int, seed: int) -> np.ndarray:
    """Indices of the windows the action statistics use: all, or `max_windows` drawn without
    replacement (seeded), sorted."""
    if max_windows < 1:
        raise ConfigError(f"stats_max_windows must be >= 1, got {max_windows}")
    if n_windows <= max_windows:
        return np.arange(n_windows)
    return np.sort(np.random.default_rng(seed).choice(n_windows, size=max_windows, replace=False))


def compute_norm_stats(
    dataset: EpisodeWindows, *, mode: NormMode | str = NormMode.QUANTILE, max_windows: int = 5000, seed: int = 0
) -> NormStats:
    """NormStats of EVA's state and action keys from `dataset` (module docstring)."""
    state = np.concatenate([ep.state for ep in dataset.episodes])
    rows = []
    for index in window_sample(len(dataset), max_windows, seed):
        actions, mask = dataset.actions(int(index))
        rows.append(actions[mask > 0])
    return NormStats(
        mode=NormMode.parse(mode),
        stats={
            int(EMBODIMENT): {
                STATE_KEY: widen_degenerate(KeyStats.from_samples(state)),
                ACTION_KEY: widen_degenerate(KeyStats.from_samples(np.concatenate(rows))),
            }
        },
    )
