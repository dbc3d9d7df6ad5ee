"""The training loop: AdamW over a family's own loss, with checkpoints a resume continues exactly.

Determinism, so that a resumed run is the run it continues (same weights, same next loss):
- the window order of epoch e is a permutation drawn from (seed, e); step s takes batch
  s mod (batches per epoch) of epoch s // (batches per epoch), so any step's batch is known
  without replaying the ones before it;
- the diffusion / flow noise of step s comes from a generator seeded by (seed, s), drawn on
  the CPU (the same numbers on a GPU);
- the learning rate is a function of the step (linear warmup, then constant);
- the checkpoint holds the weights, the optimizer state (AdamW moments and step counts) and the
  step; the norm stats of a resumed run are the checkpoint's, never recomputed.

Checkpoints: `step_<N>.ckpt` every `checkpoint_every` steps (the oldest beyond `keep_checkpoints`
deleted) and `last.ckpt`, always the newest; each written atomically (temp file + rename), so a
crash or Ctrl-C mid-write leaves the previous one whole. Ctrl-C saves `last.ckpt` at the last
finished step before it stops.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
import torch

from egomimic_hw.errors import ConfigError
from egomimic_policy.checkpoints import (
    CheckpointError,
    load_checkpoint,
    model_config_of,
    save_checkpoint,
    upgrade_layout,
)
from egomimic_policy.checkpoints.layout import model_state_dict
from egomimic_policy.families import FAMILIES, Algorithm, algorithm_for_target, build_algorithm
from egomimic_policy.normalization import NormStats
from egomimic_policy.training.config import TrainConfig
from egomimic_policy.training.dataset import EpisodeWindows, RawBatch, collate_windows
from egomimic_policy.training.progress import Progress
from egomimic_policy.training.stats import compute_norm_stats

LAST = "last.ckpt"
METRICS = "metrics.jsonl"
RUN_INFO = "run.json"


def resolve_train_device(name: str) -> torch.device:
    """`auto` is CUDA when torch finds a device, else the CPU; `cuda` without one is refused."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device cuda requested, but torch finds no CUDA device here; use cpu or auto")
    if name not in ("cpu", "cuda"):
        raise ConfigError(f"device must be cpu, cuda or auto, got {name!r}")
    return torch.device(name)


def step_seed(seed: int, step: int) -> int:
    """The seed of step `step`'s noise generator (independent streams per step)."""
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1, dtype=np.uint64)[0] >> 1)


class WindowBatches(torch.utils.data.Sampler[list[int]]):
    """Window indices of steps [start, stop): batch s is a pure function of (seed, s) (module
    docstring). An epoch is max(1, n // batch_size) batches: the remainder of a shuffled epoch
    is left out (it is in the next epoch's), and fewer windows than a batch make one batch of all."""

    def __init__(self, n_windows: int, batch_size: int, seed: int, start: int, stop: int):
        if n_windows < 1:
            raise ConfigError("no training windows")
        self.n, self.batch_size, self.seed = int(n_windows), int(batch_size), int(seed)
        self.start, self.stop = int(start), int(stop)
        self.batches_per_epoch = max(1, self.n // self.batch_size)
        self._epoch: tuple[int, np.ndarray] | None = None

    def permutation(self, epoch: int) -> np.ndarray:
        if self._epoch is None or self._epoch[0] != epoch:
            self._epoch = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.n))
        return self._epoch[1]

    def batch(self, step: int) -> list[int]:
        epoch, position = divmod(int(step), self.batches_per_epoch)
        order = self.permutation(epoch)
        if self.n < self.batch_size:
            return order.tolist()
        return order[position * self.batch_size : (position + 1) * self.batch_size].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start, self.stop):
            yield self.batch(step)

    def __len__(self) -> int:
        return max(0, self.stop - self.start)


def learning_rate(config: TrainConfig, step: int, total: int | None = None) -> float:
    """The rate of step `step` (0-based): linear warmup over warmup_steps, then constant, or with
    lr_schedule cosine a half cosine from lr after the warmup to 0 at step `total` (the run's
    step count; train.steps when not given)."""
    if config.warmup_steps and step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.lr_schedule == "cosine":
        total = config.steps if total is None else int(total)
        if total < 1:
            raise ConfigError("lr_schedule cosine needs the run's step count")
        span = max(1, total - config.warmup_steps)
        progress = min(1.0, max(0.0, (step - config.warmup_steps) / span))
        return config.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.lr


def make_optimizer(algorithm: Algorithm, config: TrainConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(algorithm.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def to_device(batch, device: torch.device):
    """A TrainBatch with every tensor on `device`."""
    for name in ("images", "state", "actions", "action_mask"):
        value = getattr(batch, name)
        if value is not None:
            setattr(batch, name, value.to(device, non_blocking=True))
    return batch


@dataclass
class Resumed:
    """What a checkpoint gives a run that continues it."""

    path: Path
    family: str
    model_config: dict
    model_state: dict[str, torch.Tensor]
    optimizer_state: dict
    norm_stats: NormStats
    step: int
    loops: dict


def _clone(value):
    """Deep copy of a checkpoint's nested state with tensors cloned (a loaded checkpoint may be
    memory-mapped from a file the next save replaces)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, Mapping):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_clone(v) for v in value)
    return value


def read_resume(path: str | os.PathLike) -> Resumed:
    """The training state of a checkpoint this trainer wrote (a prepared rollout artifact has
    no optimizer state and is refused: it cannot continue exactly)."""
    ckpt, _ = upgrade_layout(load_checkpoint(path))  # a format_version 1 file too (model., model_config)
    cls = algorithm_for_target(model_config_of(ckpt)["_target_"])
    states = ckpt.get("optimizer_states") or []
    if not states:
        raise CheckpointError(f"{path}: no optimizer state (a rollout artifact?): cannot resume training from it")
    try:
        norm = NormStats.from_state(ckpt["hyper_parameters"]["norm_stats_state"])
    except KeyError:
        raise CheckpointError(f"{path}: no hyper_parameters.norm_stats_state") from None
    return Resumed(
        path=Path(path),
        family=cls.family,
        model_config=model_config_of(ckpt),
        model_state=_clone(model_state_dict(ckpt)),
        optimizer_state=_clone(states[0]),
        norm_stats=norm,
        step=int(ckpt["global_step"]),
        loops=dict(ckpt.get("loops") or {}),
    )


@dataclass
class TrainResult:
    step: int
    """Optimizer steps done in all (a resumed run counts the checkpoint's)."""
    losses: list[float]
    """The training loss of each step of this run, in order."""
    last_checkpoint: Path
    steps_per_s: float
    device: str
    windows: int
    skipped: list[str] = field(default_factory=list)


@dataclass
class Run:
    """Everything the loop needs, built and checked before the first step."""

    family: str
    algorithm: Algorithm
    dataset: EpisodeWindows
    norm_stats: NormStats
    config: TrainConfig
    device: torch.device
    start_step: int = 0
    optimizer_state: dict | None = None
    episodes: list[str] = field(default_factory=list)


def prepare_run(
    *,
    family: str | None,
    model_overrides: Mapping | None,
    config: TrainConfig,
    episodes: Sequence[str | os.PathLike],
    resume: str | os.PathLike | None = None,
) -> Run:
    """Build the algorithm (from `family` + `model_overrides`, or the checkpoint to resume, which
    must agree with them), open the episodes and compute (or take over) the norm stats."""
    resumed = read_resume(resume) if resume is not None else None
    if resumed is not None:
        if family is not None and family != resumed.family:
            raise ConfigError(f"--resume {resumed.path} is a {resumed.family!r} checkpoint, not {family!r}")
        family = resumed.family
    if family is None:
        raise ConfigError(f"no policy family: pass --family ({'|'.join(FAMILIES)}) or set family: in the config")
    algorithm = build_algorithm(family, seed=config.seed, overrides=model_overrides)
    if resumed is not None:
        wanted = algorithm.model_config()
        if wanted != resumed.model_config:
            diff = sorted(
                k for k in set(wanted) | set(resumed.model_config) if wanted.get(k) != resumed.model_config.get(k)
            )
            raise ConfigError(
                f"the config's model differs from the checkpoint's in {diff}: "
                + ", ".join(f"{k} {wanted.get(k)!r} vs {resumed.model_config.get(k)!r}" for k in diff)
                + "; resume with the model section it was trained with"
            )
        algorithm.load_state_dict(resumed.model_state, strict=True)
    dataset = EpisodeWindows(
        episodes,
        n_obs_steps=algorithm.config.n_obs_steps,
        chunk_length=algorithm.config.chunk_length,
        cameras=algorithm.cameras,
        include_partial=config.include_partial,
        frame_cache_mb=config.frame_cache_mb,
        image_size=algorithm.input_frame_size() if config.prepare_frames else None,
    )
    if config.preload_workers and dataset.image_size is not None:
        dataset.preload(config.preload_workers)
    norm = (
        resumed.norm_stats
        if resumed is not None
        else compute_norm_stats(dataset, mode=config.norm_mode, max_windows=config.stats_max_windows, seed=config.seed)
    )
    return Run(
        family=family,
        algorithm=algorithm,
        dataset=dataset,
        norm_stats=norm,
        config=config,
        device=resolve_train_device(config.device),
        start_step=resumed.step if resumed is not None else 0,
        optimizer_state=resumed.optimizer_state if resumed is not None else None,
        episodes=[str(e.path) for e in dataset.episodes],
    )


class _Checkpoints:
    """Writes step_<N>.ckpt / last.ckpt into `out_dir` and prunes old step files."""

    def __init__(self, out_dir: Path, run: Run, optimizer: torch.optim.Optimizer, batches_per_epoch: int):
        self.out_dir, self.run, self.optimizer = out_dir, run, optimizer
        self.batches_per_epoch = batches_per_epoch

    def _write(self, path: Path, step: int) -> Path:
        return save_checkpoint(
            path,
            self.run.algorithm,
            self.run.norm_stats,
            epoch=step // self.batches_per_epoch,
            global_step=step,
            optimizer=self.optimizer,
            loops={"train_config": self.run.config.to_dict(), "windows": len(self.run.dataset)},
        )

    def save(self, step: int, *, periodic: bool) -> Path:
        last = self.out_dir / LAST
        if not periodic:
            return self._write(last, step)
        path = self._write(self.out_dir / f"step_{step:08d}.ckpt", step)
        tmp = self.out_dir / f".{LAST}.{os.getpid()}.link"
        try:  # last.ckpt: the same file, swapped in atomically (a copy where links are refused)
            tmp.unlink(missing_ok=True)
            os.link(path, tmp)
            os.replace(tmp, last)
        except OSError:
            tmp.unlink(missing_ok=True)
            self._write(last, step)
        self._prune()
        return path

    def _prune(self) -> None:
        keep = self.run.config.keep_checkpoints
        if keep:
            for old in sorted(self.out_dir.glob("step_*.ckpt"))[:-keep]:
                old.unlink(missing_ok=True)


def train(run: Run, out_dir: str | os.PathLike, *, stream: TextIO | None = None) -> TrainResult:
    """Train `run` to its configured step count, writing checkpoints and metrics into `out_dir`."""
    config, algorithm, device = run.config, run.algorithm, run.device
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    per_epoch = max(1, len(run.dataset) // config.batch_size)
    total = config.total_steps(per_epoch)
    if run.start_step >= total:
        raise ConfigError(f"the checkpoint is at step {run.start_step}, the run ends at step {total}: nothing to do")
    algorithm.to(device).train()
    optimizer = make_optimizer(algorithm, config)
    if run.optimizer_state is not None:
        optimizer.load_state_dict(run.optimizer_state)
    sampler = WindowBatches(len(run.dataset), config.batch_size, config.seed, run.start_step, total)
    loader = torch.utils.data.DataLoader(
        run.dataset,
        batch_sampler=sampler,
        collate_fn=collate_windows,
        num_workers=config.num_workers,
        prefetch_factor=2 if config.num_workers else None,
    )
    (out / RUN_INFO).write_text(
        json.dumps(
            {
                "family": run.family,
                "model_config": algorithm.model_config(),
                "train": config.to_dict(),
                "episodes": run.episodes,
                "skipped": [f"{s.path}: {s.reason}" for s in run.dataset.skipped],
                "windows": len(run.dataset),
                "batches_per_epoch": per_epoch,
                "total_steps": total,
                "start_step": run.start_step,
                "device": str(device),
            },
            indent=1,
        )
        + "\n"
    )
    checkpoints = _Checkpoints(out, run, optimizer, per_epoch)
    progress = Progress(total, stream=stream, every=config.log_every)
    losses: list[float] = []
    step = run.start_step
    last_path = out / LAST
    saved_at = -1
    try:
        with open(out / METRICS, "a") as metrics:
            progress.start(step)
            for raw in loader:
                loss, logs = _step(run, optimizer, raw, step, total)
                step += 1
                losses.append(loss)
                progress.update(step, loss)
                if step % config.log_every == 0 or step == total:
                    row = {"step": step, "loss": loss, "lr": learning_rate(config, step - 1, total)}
                    row["steps_per_s"] = round(progress.steps_per_s(step), 3)
                    metrics.write(json.dumps({**row, **logs}) + "\n")
                    metrics.flush()
                if config.checkpoint_every and step % config.checkpoint_every == 0:
                    last_path = checkpoints.save(step, periodic=True)
                    saved_at = step
                    progress.message(f"checkpoint {last_path} (step {step}, loss {loss:.4f})")
    except KeyboardInterrupt:
        progress.close()
        if step > run.start_step and saved_at != step:
            path = checkpoints.save(step, periodic=False)
            progress.message(f"interrupted: saved {path} at step {step}; --resume it to continue")
        raise
    progress.close()
    if saved_at != step:
        checkpoints.save(step, periodic=False)
    last_path = out / LAST
    rate = progress.steps_per_s(step)
    progress.message(f"done: step {step}, loss {losses[-1]:.4f}, {rate:.2f} steps/s, {last_path}")
    return TrainResult(
        step=step,
        losses=losses,
        last_checkpoint=last_path,
        steps_per_s=rate,
        device=str(device),
        windows=len(run.dataset),
        skipped=[f"{s.path}: {s.reason}" for s in run.dataset.skipped],
    )


def _step(
    run: Run, optimizer: torch.optim.Optimizer, raw: RawBatch, step: int, total: int | None = None
) -> tuple[float, dict[str, float]]:
    """One optimizer step (0-based `step`) on a collated raw batch; returns (loss, logs)."""
    algorithm, config = run.algorithm, run.config
    batch = algorithm.batch_from_raw(raw.images, raw.state, raw.actions, run.norm_stats, raw.action_mask)
    batch = to_device(batch, run.device)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(config, step, total)
    generator = torch.Generator().manual_seed(step_seed(config.seed, step))
    loss, logs = algorithm.loss(batch, generator=generator)
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(f"training loss is {value} at step {step + 1}; lower train.lr or check the data")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if config.grad_clip_norm:
        torch.nn.utils.clip_grad_norm_(algorithm.parameters(), config.grad_clip_norm)
    optimizer.step()
    return value, logs


def evaluate_loss(algorithm: Algorithm, raw: RawBatch, norm_stats: NormStats, *, seed: int = 1234) -> float:
    """The loss of `raw` with fixed noise and no gradient: comparable before and after training."""
    device = next(algorithm.parameters()).device
    batch = to_device(algorithm.batch_from_raw(raw.images, raw.state, raw.actions, norm_stats, raw.action_mask), device)
    with torch.no_grad():
        return float(algorithm.loss(batch, generator=torch.Generator().manual_seed(seed))[0])
