"""Training settings and the YAML file they come from.

    family: fold            # optional here; `--family` on the command line wins
    model:                  # the family's config fields (FoldConfig / PIConfig / MoEConfig)
      chunk_length: 32
      d_model: 64
    train:                  # TrainConfig fields below
      steps: 2000
      batch_size: 8
      lr: 3.0e-4

Unknown keys are refused by name: a misspelt `weight_decay` silently left at its default would
train a different model than the one the file describes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from egomimic_hw.config_fields import check_ranges
from egomimic_hw.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")
LR_SCHEDULES = ("constant", "cosine")
FIELD_TYPES: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "bool": bool, "str": str}
"""What each annotated field accepts (a bool is refused where a number is meant)."""
TOP_LEVEL_KEYS = ("family", "model", "train")


def _field(default, help: str, range: tuple | None = None):
    metadata: dict[str, Any] = {"help": help}
    if range is not None:
        metadata["range"] = range
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = _field(1000, "optimizer steps in all; 0: use epochs", (0, 10**9))
    epochs: int = _field(0, "passes over every window (steps = epochs x batches per epoch); needs steps 0", (0, 10**6))
    batch_size: int = _field(8, "windows per optimizer step", (1, 4096))
    lr: float = _field(1e-4, "AdamW learning rate (constant after warmup)", (0.0, 1.0))
    lr_schedule: str = _field(
        "constant", "constant (after warmup), or cosine: from lr down to 0 at the last step (smoother late updates)"
    )
    weight_decay: float = _field(1e-6, "AdamW decoupled weight decay", (0.0, 1.0))
    warmup_steps: int = _field(0, "linear learning-rate warmup from 0 over these steps", (0, 10**9))
    grad_clip_norm: float = _field(1.0, "clip the gradient's global norm to this; 0: no clipping", (0.0, 1e6))
    seed: int = _field(0, "seeds the weights, the window order and the diffusion/flow noise", (0, 2**32 - 1))
    device: str = _field("cpu", "cpu, cuda, or auto (cuda when torch finds one, else cpu)")
    num_workers: int = _field(0, "DataLoader processes decoding images (0: in the training process)", (0, 64))
    num_threads: int = _field(0, "torch intra-op threads; 0 leaves torch's default", (0, 1024))
    checkpoint_every: int = _field(
        500, "write step_<N>.ckpt (and last.ckpt) every N steps; 0: only at the end", (0, 10**9)
    )
    keep_checkpoints: int = _field(3, "step checkpoints kept (the oldest are deleted); 0 keeps all", (0, 10**6))
    log_every: int = _field(
        10, "steps between progress lines (when stderr is not a terminal) and metrics rows", (1, 10**9)
    )
    norm_mode: str = _field("quantile", "quantile, minmax or zscore (quantile: upstream's Fold experiments)")
    stats_max_windows: int = _field(5000, "windows sampled for the action statistics", (1, 10**9))
    include_partial: bool = _field(False, "also train on episodes closed early (data_status partial)")
    frame_cache_mb: float = _field(
        64.0, "full-size decoded frames kept per process (LRU), MiB; unused with prepare_frames", (0.0, 1e6)
    )
    prepare_frames: bool = _field(
        True,
        "keep every frame decoded once, resized to the model's input size as the family does "
        "(families with image_height/image_width, e.g. fold): no JPEG decode after the first pass",
    )
    preload_workers: int = _field(
        0, "with prepare_frames: decode every frame before the first step in N processes; 0: on first use", (0, 64)
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            want = FIELD_TYPES[str(f.type)]
            if isinstance(value, bool) and want is not bool or not isinstance(value, want):
                raise ConfigError(f"train.{f.name} must be {str(f.type)}, got {value!r}")
        check_ranges(self)
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"train.lr_schedule must be one of {list(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        if self.device not in DEVICES:
            raise ConfigError(f"train.device must be one of {list(DEVICES)}, got {self.device!r}")
        if (self.steps > 0) == (self.epochs > 0):
            raise ConfigError(
                f"set exactly one of train.steps and train.epochs (got steps={self.steps}, epochs={self.epochs})"
            )

    @classmethod
    def from_dict(cls, values: Mapping) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"train: unknown setting(s) {unknown}; known: {sorted(names)}")
        kwargs = dict(values)
        if "epochs" in kwargs and "steps" not in kwargs:
            kwargs["steps"] = 0  # epochs named alone replace the default step count
        for f in dataclasses.fields(cls):  # YAML 1.1 reads 1e-4 (no dot) as a string
            if f.type == "float" and isinstance(kwargs.get(f.name), str):
                try:
                    kwargs[f.name] = float(kwargs[f.name])
                except ValueError:
                    pass  # refused with its name by __post_init__
        return cls(**kwargs)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def total_steps(self, batches_per_epoch: int) -> int:
        return self.steps if self.steps > 0 else self.epochs * batches_per_epoch


@dataclass(frozen=True)
class TrainFile:
    """A parsed training YAML: the family (or None), the family's config overrides and the rest."""

    family: str | None
    model: dict
    train: dict


def read_train_file(path: str | Path) -> TrainFile:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {str(path)!r}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping with keys {list(TOP_LEVEL_KEYS)}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; allowed: {list(TOP_LEVEL_KEYS)}")
    for key in ("model", "train"):
        if not isinstance(data.get(key) or {}, Mapping):
            raise ConfigError(f"{path}: {key!r} must be a mapping")
    family = data.get("family")
    if family is not None and not isinstance(family, str):
        raise ConfigError(f"{path}: family must be a string, got {family!r}")
    return TrainFile(family=family, model=dict(data.get("model") or {}), train=dict(data.get("train") or {}))
