"""What every policy family is: an `Algorithm` (torch module + config) that owns its input
pipeline, its training loss, its sampler, its checkpoint preparation and its rollout policy.

Why the algorithm owns all of it (upstream `prepare_rollout_checkpoint` / `create_rollout_policy`):
only the family knows which checkpoints it can run, how its images must look and how its
sampler is scheduled, so an unsupported combination is refused there, with its reason, before
anything is written or any arm moves.

The input pipeline is shared by training (`batch_from_raw`) and rollout (FamilyRolloutPolicy),
so both see identical preprocessing: images resized with cv2.INTER_AREA to the model's size and
mapped to its range, state normalized ONCE with the checkpoint's stats.

Tensor shapes: B batch, T observation steps (window), C cameras (`CAMERAS` order), H chunk
length, 20 = features.STATE_DIM / ACTION_DIM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np
import torch
from torch import nn

from egomimic_hw.description import CAMERAS
from egomimic_hw.errors import ConfigError
from egomimic_policy.checkpoints.cache import PreparedCheckpoint, prepare_cached
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.checkpoints.layout import load_checkpoint, model_config_of, model_state_dict
from egomimic_policy.checkpoints.migrations import check_pin, migrate_checkpoint
from egomimic_policy.features import ACTION_DIM, ACTION_KEY, EMBODIMENT, STATE_DIM, STATE_KEY
from egomimic_policy.normalization import NormStats


@dataclass(frozen=True)
class FamilyConfig:
    """Fields every family has. Subclasses add theirs and may name REFUSED_FIELDS: fields that
    belong to another family, refused with the reason instead of a bare 'unknown field'."""

    chunk_length: int = 100
    """Rows per chunk (upstream horizon 100 at 30 Hz = 3.3 s)."""
    n_obs_steps: int = 2
    """Observation window length (previous + current frame upstream)."""
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ffn_mult: int = 4

    REFUSED_FIELDS: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{type(self).__name__}.{f.name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} must be divisible by n_heads {self.n_heads}")

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, values: Mapping) -> FamilyConfig:
        names = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key in cls.REFUSED_FIELDS:
                raise ConfigError(f"{cls.__name__} does not support {key!r}: {cls.REFUSED_FIELDS[key]}")
            if key not in names:
                raise ConfigError(f"{cls.__name__} has no field {key!r}; fields: {sorted(names)}")
            kwargs[key] = tuple(value) if isinstance(value, list) else value
        return cls(**kwargs)


@dataclass
class TrainBatch:
    """Model-ready tensors: images (B, T, C, 3, h, w) in the model's range, state (B, T, 20) and
    actions (B, H, 20) normalized, action_mask (B, H) 1 where a row is real (padding is 0)."""

    images: torch.Tensor
    state: torch.Tensor
    actions: torch.Tensor
    action_mask: torch.Tensor | None = None


def resize_area(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize with cv2.INTER_AREA (the averaging filter: no aliasing when shrinking camera frames)."""
    if rgb.shape[0] == height and rgb.shape[1] == width:
        return rgb
    return cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA)


def check_rgb(image, camera: str) -> np.ndarray:
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3 or arr.shape[0] < 2 or arr.shape[1] < 2:
        raise ConfigError(f"camera {camera!r}: expected an RGB uint8 image (H, W, 3), got {arr.dtype} {arr.shape}")
    return arr


class Algorithm(nn.Module):
    """Base of the families. Subclasses set the class attributes and implement the hooks, and
    redeclare `config` as their `config_type` (`config: FoldConfig`): __init__ refuses any other
    config, so the narrower annotation states what is checked, and the type checker sees the
    family's own fields."""

    family: ClassVar[str]
    config_type: ClassVar[type[FamilyConfig]]
    config: FamilyConfig
    compat_version: ClassVar[str]
    """Names the checkpoint preparation of this class; part of the cache fingerprint, so changing
    what preparation does means bumping it."""
    rollout_overridable: ClassVar[frozenset[str]] = frozenset()
    """Config fields a rollout may change on a trained checkpoint (sampler schedule, not weights)."""
    cameras: ClassVar[tuple[str, ...]] = CAMERAS

    def __init__(self, config: FamilyConfig):
        super().__init__()
        if not isinstance(config, self.config_type):
            raise ConfigError(f"{type(self).__name__} needs a {self.config_type.__name__}, got {type(config).__name__}")
        self.config = config

    # --- identity ---------------------------------------------------------------------------

    @classmethod
    def target(cls) -> str:
        """The `_target_` naming this class in a checkpoint's model config."""
        return f"{cls.__module__}.{cls.__qualname__}"

    def model_config(self) -> dict:
        return {"_target_": self.target(), **self.config.to_dict()}

    @classmethod
    def config_from_model_config(cls, model_config: Mapping) -> FamilyConfig:
        values = dict(model_config)
        target = values.pop("_target_", None)
        if target != cls.target():
            raise ConfigError(f"model config targets {target!r}, not {cls.target()!r}")
        return cls.config_type.from_dict(values)

    # --- hooks --------------------------------------------------------------------------------

    def image_input(self, rgb: np.ndarray) -> np.ndarray:
        """(3, h, w) float32 model input of one RGB uint8 frame of any size."""
        raise NotImplementedError

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, 3, h, w) one frame of every camera -> (B, ...) per-frame features (cached by the
        rollout window, so a frame is encoded once however long it stays in the window)."""
        raise NotImplementedError

    def condition(self, features: torch.Tensor, state: torch.Tensor) -> Any:
        """(B, T, ...) frame features and (B, T, 20) normalized state -> sampler context."""
        raise NotImplementedError

    def sample(self, context: Any, generator: torch.Generator, prefix: torch.Tensor | None = None) -> torch.Tensor:
        """(B, H, 20) normalized action chunk. prefix (B, n, 20), n <= H, normalized like the
        actions: the first n rows of the result equal it (inpainting, Observation.prefix)."""
        raise NotImplementedError

    def loss(
        self, batch: TrainBatch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss of a batch and scalar logs."""
        raise NotImplementedError

    def with_rollout_overrides(self, overrides: Mapping) -> Algorithm:
        """Apply `rollout_overridable` fields (same weights, e.g. a different sampler schedule)."""
        bad = sorted(set(overrides) - self.rollout_overridable)
        if bad:
            raise ConfigError(
                f"{self.family}: {bad} cannot change on trained weights; allowed: {sorted(self.rollout_overridable)}"
            )
        self.config = dataclasses.replace(self.config, **dict(overrides))
        return self

    # --- shared pipeline ---------------------------------------------------------------------

    def input_frame_size(self) -> tuple[int, int] | None:
        """(height, width) a family whose `image_input` starts with `resize_area` to its config's
        `image_height` x `image_width` shrinks every frame to, else None. Training may keep frames
        prepared at this size (`resize_area` to it, as `image_input` does): `image_input` of such
        a frame is that of the full frame (its resize to the same size returns the frame as is),
        so the prepared path and rollout's full frames give the model identical input."""
        height = getattr(self.config, "image_height", None)
        width = getattr(self.config, "image_width", None)
        if isinstance(height, int) and isinstance(width, int):
            return height, width
        return None

    def frame_features(self, images: Mapping[str, np.ndarray]) -> torch.Tensor:
        """Per-frame features (1, ...) of one observation's camera images (rollout path)."""
        missing = [c for c in self.cameras if c not in images]
        if missing:
            raise ConfigError(
                f"observation lacks cameras {missing} (has {sorted(images)}); {self.family} needs {list(self.cameras)}"
            )
        stacked = np.stack([self.image_input(check_rgb(images[c], c)) for c in self.cameras])
        device = next(self.parameters()).device
        return self.encode_images(torch.from_numpy(stacked)[None].to(device))

    def batch_from_raw(
        self, images: Mapping[str, np.ndarray], state_raw, actions_raw, norm_stats: NormStats, action_mask=None
    ) -> TrainBatch:
        """Training batch from raw data: images cam -> (B, T, H, W, 3) uint8 RGB, full camera frames
        or frames already prepared at `input_frame_size` (then the resize is a no-op), state
        (B, T, 20) and actions (B, H, 20) in raw units; the same preprocessing as rollout."""
        state = np.asarray(state_raw, dtype=np.float64)
        actions = np.asarray(actions_raw, dtype=np.float64)
        b, t = state.shape[:2]
        if state.shape != (b, t, STATE_DIM) or actions.shape != (b, self.config.chunk_length, ACTION_DIM):
            raise ConfigError(
                f"need state (B, T, {STATE_DIM}) and actions (B, {self.config.chunk_length}, {ACTION_DIM}); "
                f"got {state.shape}, {actions.shape}"
            )
        per_cam = []
        for cam in self.cameras:
            frames = np.asarray(images[cam])
            if frames.shape[:2] != (b, t):
                raise ConfigError(f"images[{cam!r}] must be (B, T, H, W, 3) with B={b}, T={t}; got {frames.shape}")
            per_cam.append(np.stack([[self.image_input(check_rgb(f, cam)) for f in row] for row in frames]))
        return TrainBatch(
            images=torch.from_numpy(np.stack(per_cam, axis=2)),
            state=torch.as_tensor(norm_stats.normalize(EMBODIMENT, STATE_KEY, state), dtype=torch.float32),
            actions=torch.as_tensor(norm_stats.normalize(EMBODIMENT, ACTION_KEY, actions), dtype=torch.float32),
            action_mask=None if action_mask is None else torch.as_tensor(action_mask, dtype=torch.float32),
        )

    def window_features(self, images: torch.Tensor) -> torch.Tensor:
        """(B, T, C, 3, h, w) -> (B, T, ...) by encoding every frame (training path)."""
        b, t = images.shape[:2]
        feats = self.encode_images(images.reshape(b * t, *images.shape[2:]))
        return feats.reshape(b, t, *feats.shape[1:])

    # --- checkpoints ------------------------------------------------------------------------

    @classmethod
    def check_structure(cls, migrated: Mapping) -> None:
        """Refuse a migrated checkpoint this class cannot load (config or tensors), before it is
        written to the cache. The model is built on the meta device: no memory, no time."""
        config = cls.config_from_model_config(model_config_of(migrated))
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in cls(config).state_dict().items()}
        have = {k: tuple(v.shape) for k, v in model_state_dict(migrated).items()}
        missing = sorted(set(expected) - set(have))
        unexpected = sorted(set(have) - set(expected))
        shapes = sorted(k for k in set(expected) & set(have) if expected[k] != have[k])
        if missing or unexpected or shapes:
            raise CheckpointError(
                f"weights do not fit {cls.__name__}({config}): missing {missing[:5]}, unexpected {unexpected[:5]}, "
                f"shape mismatch {[(k, have[k], expected[k]) for k in shapes[:5]]}"
            )

    @classmethod
    def prepare_rollout_checkpoint(
        cls,
        path: str | Path,
        *,
        cache_dir: str | Path | None = None,
        pin_config_sha256: str | None = None,
        source_checkpoint: dict | None = None,
        verify_sha256: bool = True,
    ) -> PreparedCheckpoint:
        """Migrate `path` into the cache once (see checkpoints.cache); reuse it afterwards."""

        def prepare(ckpt: dict) -> tuple[dict, dict]:
            migrated, record = migrate_checkpoint(ckpt, pin_config_sha256=pin_config_sha256)
            if record.target != cls.target():
                raise CheckpointError(f"checkpoint is a {record.target!r}, not a {cls.target()!r}")
            cls.check_structure(migrated)
            return migrated, record.to_json()

        source_checkpoint = source_checkpoint if source_checkpoint is not None else load_checkpoint(path)
        check_pin(source_checkpoint, pin_config_sha256)  # before the cache is touched
        return prepare_cached(
            path,
            compat_version=cls.compat_version,
            prepare=prepare,
            cache_dir=cache_dir,
            pin_config_sha256=pin_config_sha256,
            source_checkpoint=source_checkpoint,
            verify_sha256=verify_sha256,
        )

    @classmethod
    def load_prepared(cls, prepared: PreparedCheckpoint) -> tuple[Algorithm, NormStats, dict]:
        """(algorithm in eval mode, its NormStats, info {epoch, global_step}) from a prepared artifact."""
        ckpt = load_checkpoint(prepared.artifact_path)
        algo = cls(cls.config_from_model_config(model_config_of(ckpt)))
        try:
            algo.load_state_dict(model_state_dict(ckpt), strict=True)
        except RuntimeError as exc:
            raise CheckpointError(f"{prepared.artifact_path}: weights do not load into {cls.__name__}: {exc}") from exc
        norm = NormStats.from_state(ckpt["hyper_parameters"]["norm_stats_state"])
        return algo.eval(), norm, {"epoch": ckpt["epoch"], "global_step": ckpt["global_step"]}

    def create_rollout_policy(
        self,
        norm_stats: NormStats,
        *,
        fingerprint: str,
        seed: int = 0,
        num_threads: int = 1,
        device: str = "cpu",
        extra: Mapping[str, str] | None = None,
    ):
        """The live ChunkPolicy of this algorithm (EVA bimanual, wrist-relative 20-D actions)."""
        from egomimic_policy.families.rollout import FamilyRolloutPolicy

        for key, dim in ((STATE_KEY, STATE_DIM), (ACTION_KEY, ACTION_DIM)):
            stats = norm_stats.key_stats(EMBODIMENT, key)  # refuses a checkpoint without EVA stats
            if stats.dim != dim:
                raise ConfigError(
                    f"norm stats {key!r} of {EMBODIMENT.key} are {stats.dim}-D; {self.family} needs {dim}-D"
                )
        return FamilyRolloutPolicy(
            self, norm_stats, fingerprint=fingerprint, seed=seed, num_threads=num_threads, device=device, extra=extra
        )
