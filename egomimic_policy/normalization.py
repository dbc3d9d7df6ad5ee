"""Per-embodiment normalization of model inputs and outputs, in the checkpoint's own stats.

Why one module: a model only makes sense in the units it was trained in, and normalizing twice
(or not at all) gives plausible-looking nonsense. So the stats travel inside the checkpoint
(`hyper_parameters.norm_stats_state`), and the rollout policy calls `normalize` exactly once
per query on the state and `unnormalize` once on the chunk (tests count the calls).

Layout (docs/eva.md "Policies", upstream `MultiDataset.from_state`): stats per embodiment id and key,
each key with mean, std, min, max, median, quantile_1, quantile_99 of the LAST axis (every
leading axis is reduced when the stats are computed: "reduce_all_but_last"). Modes, eps 1e-6:
    quantile: x_n = 2 (x - q1) / (q99 - q1 + eps) - 1
    minmax:   x_n = 2 (x - min) / (max - min + eps) - 1
    zscore:   x_n = (x - mean) / (std + eps)
`unnormalize` is the exact inverse of each.

Embodiment ids in a state are CURRENT ids (egomimic_hw.embodiment.Embodiment); legacy ids are
remapped by checkpoint migration before a NormStats is built, never here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from egomimic_hw.embodiment import Embodiment, embodiment_by_id
from egomimic_hw.errors import ConfigError

EPS = 1e-6
"""Added to every denominator (upstream `egomimic/rldb/zarr/utils.py`)."""

STAT_NAMES = ("mean", "std", "min", "max", "median", "quantile_1", "quantile_99")
"""The per-key statistics a checkpoint stores (docs/eva.md)."""
OPTIONAL_STATS = ("median",)
"""Not used by any mode, and absent from upstream EgoVerse's checkpoints."""


class NormMode(str, enum.Enum):
    QUANTILE = "quantile"
    MINMAX = "minmax"
    ZSCORE = "zscore"

    @classmethod
    def parse(cls, value: str | NormMode) -> NormMode:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ConfigError(f"unknown norm mode {value!r}; choices: {[m.value for m in cls]}") from None


@dataclass(frozen=True)
class KeyStats:
    """Statistics of one key over its last axis; every field has the same shape (D,)."""

    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    median: np.ndarray | None
    quantile_1: np.ndarray
    quantile_99: np.ndarray

    def __post_init__(self) -> None:
        shape = None
        for name in STAT_NAMES:
            if name in OPTIONAL_STATS and getattr(self, name) is None:
                continue
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            if arr.ndim != 1 or arr.size == 0:
                raise ConfigError(f"norm stat {name!r} must be a non-empty 1-D vector, got shape {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise ConfigError(f"norm stat {name!r} has non-finite values: {arr.tolist()}")
            if shape is not None and arr.shape != shape:
                raise ConfigError(f"norm stat {name!r} has shape {arr.shape}, the others {shape}")
            shape = arr.shape
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        if np.any(self.std < 0) or np.any(self.max < self.min) or np.any(self.quantile_99 < self.quantile_1):
            raise ConfigError("norm stats need std >= 0, max >= min and quantile_99 >= quantile_1")

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def from_samples(cls, samples) -> KeyStats:
        """Stats of an (..., D) array reduced over every axis but the last (how training computes them)."""
        x = np.asarray(samples, dtype=np.float64)
        if x.ndim < 1 or x.shape[-1] == 0 or x.size == 0:
            raise ConfigError(f"need samples of shape (..., D), got {x.shape}")
        flat = x.reshape(-1, x.shape[-1])
        return cls(
            mean=flat.mean(0),
            std=flat.std(0),
            min=flat.min(0),
            max=flat.max(0),
            median=np.median(flat, 0),
            quantile_1=np.quantile(flat, 0.01, axis=0),
            quantile_99=np.quantile(flat, 0.99, axis=0),
        )

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "norm stats") -> KeyStats:
        missing = [n for n in STAT_NAMES if n not in d and n not in OPTIONAL_STATS]
        if missing:
            raise ConfigError(f"{where}: missing statistics {missing} (need {list(STAT_NAMES)})")
        return cls(
            mean=_as_vector(d["mean"]),
            std=_as_vector(d["std"]),
            min=_as_vector(d["min"]),
            max=_as_vector(d["max"]),
            median=_as_vector(d["median"]) if "median" in d else None,
            quantile_1=_as_vector(d["quantile_1"]),
            quantile_99=_as_vector(d["quantile_99"]),
        )

    def to_dict(self) -> dict[str, list[float]]:
        return {n: [float(v) for v in getattr(self, n)] for n in STAT_NAMES if getattr(self, n) is not None}


@dataclass(frozen=True)
class NormStats:
    """Stats per CURRENT embodiment id and key, plus the mode that uses them."""

    mode: NormMode
    stats: Mapping[int, Mapping[str, KeyStats]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", NormMode.parse(self.mode))
        frozen = {}
        for emb_id, keys in self.stats.items():
            embodiment_by_id(emb_id)  # refuses legacy / unknown ids with the reason
            frozen[int(emb_id)] = MappingProxyType(dict(keys))
        object.__setattr__(self, "stats", MappingProxyType(frozen))

    def key_stats(self, embodiment: Embodiment | int, key: str) -> KeyStats:
        emb = embodiment_by_id(embodiment)
        if int(emb) not in self.stats:
            have = ", ".join(embodiment_by_id(e).key for e in self.stats) or "none"
            raise ConfigError(f"no norm stats for embodiment {emb.key}={int(emb)} (have: {have})")
        keys = self.stats[int(emb)]
        if key not in keys:
            raise ConfigError(f"no norm stats for key {key!r} of {emb.key} (have: {sorted(keys)})")
        return keys[key]

    def _check(self, ks: KeyStats, x: np.ndarray, key: str) -> np.ndarray:
        arr = np.asarray(x, dtype=np.float64)
        if arr.ndim < 1 or arr.shape[-1] != ks.dim:
            raise ConfigError(f"{key}: last axis must be {ks.dim} wide, got shape {arr.shape}")
        return arr

    def normalize(self, embodiment: Embodiment | int, key: str, x) -> np.ndarray:
        """Raw units -> model units for `key` of `embodiment` (last axis)."""
        ks = self.key_stats(embodiment, key)
        arr = self._check(ks, x, key)
        if self.mode is NormMode.QUANTILE:
            return 2.0 * (arr - ks.quantile_1) / (ks.quantile_99 - ks.quantile_1 + EPS) - 1.0
        if self.mode is NormMode.MINMAX:
            return 2.0 * (arr - ks.min) / (ks.max - ks.min + EPS) - 1.0
        return (arr - ks.mean) / (ks.std + EPS)

    def unnormalize(self, embodiment: Embodiment | int, key: str, x) -> np.ndarray:
        """Model units -> raw units; the exact inverse of `normalize`."""
        ks = self.key_stats(embodiment, key)
        arr = self._check(ks, x, key)
        if self.mode is NormMode.QUANTILE:
            return (arr + 1.0) / 2.0 * (ks.quantile_99 - ks.quantile_1 + EPS) + ks.quantile_1
        if self.mode is NormMode.MINMAX:
            return (arr + 1.0) / 2.0 * (ks.max - ks.min + EPS) + ks.min
        return arr * (ks.std + EPS) + ks.mean

    # --- the checkpoint form (`hyper_parameters.norm_stats_state`) -------------------------------

    def to_state(self) -> dict:
        """Plain dicts/lists/ints only, so `torch.load(weights_only=True)` can read it back."""
        return {
            "norm_mode": self.mode.value,
            "embodiments": sorted(self.stats),
            "norm_stats": {
                e: {k: ks.to_dict() for k, ks in sorted(keys.items())} for e, keys in sorted(self.stats.items())
            },
            "reduce_all_but_last": True,
        }

    @classmethod
    def from_state(cls, state: Mapping) -> NormStats:
        if not isinstance(state, Mapping) or "norm_stats" not in state or "norm_mode" not in state:
            raise ConfigError("norm_stats_state must be a dict with 'norm_mode' and 'norm_stats'")
        if state.get("reduce_all_but_last", True) is not True:
            raise ConfigError("only reduce_all_but_last=True norm stats are supported (per-last-axis stats)")
        stats = {}
        for emb_id, keys in state["norm_stats"].items():
            stats[int(emb_id)] = {
                str(k): KeyStats.from_dict(v, where=f"norm stats of embodiment {emb_id}, key {k!r}")
                for k, v in keys.items()
            }
        return cls(mode=NormMode.parse(state["norm_mode"]), stats=stats)


def _as_vector(value) -> np.ndarray:
    """A stat as float64, from a list or a tensor (upstream stores torch tensors)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


def key_stats_from_range(low, high, *, median=None) -> KeyStats:
    """Stats describing a uniform-ish range [low, high] (q1/min = low, q99/max = high): used for the
    neutral defaults, where no data exists, so every mode maps [low, high] onto about [-1, 1]."""
    lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    mid = (lo + hi) / 2.0 if median is None else np.asarray(median, dtype=np.float64)
    return KeyStats(mean=mid, std=(hi - lo) / 2.0, min=lo, max=hi, median=mid, quantile_1=lo, quantile_99=hi)
