"""The checkpoint layout this project reads and writes: upstream EgoVerse's Lightning layout.

A checkpoint is one `torch.save`d dict, what PyTorch Lightning writes for upstream's
`egomimic.pl_utils.pl_model.ModelWrapper` (docs/eva.md "Policies"), so the lab's files and this
project's go through the same reader:

    state_dict        {"nets.policy.<param>": tensor}   upstream's wrapper holds the network as
                                                        nets["policy"]; here the Algorithm itself
    hyper_parameters  {"config_tree": {"model": {"_target_": WRAPPER_TARGET,
                                                 "robomimic_model": {"_target_": "<module>.<Class>", ...}}},
                       "norm_stats_state": NormStats.to_state(),
                       "format_version": FORMAT_VERSION}
    epoch, global_step
    (optional, dropped by preparation) optimizer_states, lr_schedulers, loops, callbacks

Neither `pytorch-lightning_version` nor `hparams_name` is written: this trainer is not Lightning
and has no version of it to claim (a source's own version is kept by preparation). The config is plain data (dicts, lists, numbers), not
OmegaConf objects, so `weights_only=True` reads it.

`format_version` marks a checkpoint written by this code base: its embodiment ids are CURRENT
ones. 2: this layout. 1: the project's first layout (`model.<param>` keys, config at
`hyper_parameters.model_config`), read through the `rename_model_prefix` / `relocate_model_config`
migrations. A checkpoint without it is upstream's or legacy (ids decide, `migrations.is_legacy`).

Loading uses `torch.load(weights_only=True)`: a checkpoint is data, and unpickling arbitrary
objects from a file is code execution. Everything above is plain dicts, lists, numbers and
tensors, so nothing legitimate is lost. (Upstream's own files hold OmegaConf objects: the
stage-pipeline ones are read by egomimic_policy.upstream through an allow-listed unpickler.)
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from egomimic_policy.checkpoints.errors import CheckpointError

FORMAT_VERSION = 2
"""2: upstream's layout (`nets.policy.`, config_tree). 1: `model.` + `model_config` (migrated).
Both mark current embodiment ids; a reader older than 2 refuses a 2 by its version."""
MODEL_PREFIX = "nets.policy."
"""Every state_dict key of the algorithm starts with it (upstream's ModelWrapper: nets["policy"])."""
CONFIG_PATH = ("config_tree", "model", "robomimic_model")
"""Where the model config (with `_target_`) sits inside hyper_parameters, as upstream keeps it."""
WRAPPER_TARGET = "egomimic.pl_utils.pl_model.ModelWrapper"
"""`config_tree.model._target_`: upstream's Lightning module around the algorithm."""
V1_MODEL_PREFIX = "model."
V1_CONFIG_KEY = "model_config"
"""format_version 1 (the project's first layout): `model.<param>`, `hyper_parameters.model_config`."""

KEPT_TOP_LEVEL_KEYS = ("state_dict", "hyper_parameters", "epoch", "global_step", "pytorch-lightning_version")
"""What a prepared rollout artifact keeps; optimizer state, loops and callbacks are training-only."""


def canonical_json(value: Any) -> str:
    """The one serialization hashes are taken of: sorted keys, no spaces, ASCII (as upstream)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("ascii")).hexdigest()


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint dict on the CPU, memory-mapped where the file format allows it (a
    multi-GB file is then not copied into RAM just to read its metadata)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    try:
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            ckpt = torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except Exception as exc:
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {_unreadable_because(path, exc)}") from exc
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "hyper_parameters" not in ckpt:
        raise CheckpointError(
            f"{str(path)!r} is not a Lightning-style checkpoint (need a dict with 'state_dict' and 'hyper_parameters')"
        )
    return ckpt


def _unreadable_because(path: Path, exc: Exception) -> str:
    """Why torch.load failed, in one line (torch's own messages run to paragraphs)."""
    try:
        size = path.stat().st_size
    except OSError as err:
        return err.strerror or type(err).__name__
    if size == 0:
        return "the file is empty (0 bytes)"
    if isinstance(exc, pickle.UnpicklingError):
        return (
            f"corrupted, or it holds objects other than tensors and plain data ({size} bytes; such objects are "
            "never unpickled here: that would run code from the file)"
        )
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"truncated or not a torch file ({size} bytes; {type(exc).__name__}: {first[:200]})"


def model_config_of(ckpt: Mapping) -> dict:
    """The model config dict (with `_target_`): `hyper_parameters.config_tree.model.robomimic_model`,
    or, in a format_version 1 file not yet migrated, `hyper_parameters.model_config` (the same dict,
    so its canonical-JSON SHA-256, the pin, is the same in both layouts)."""
    hp = ckpt.get("hyper_parameters") or {}
    node: Any = hp
    for part in CONFIG_PATH:
        node = node.get(part) if isinstance(node, Mapping) else None
    config = node if node is not None else hp.get(V1_CONFIG_KEY)
    if not isinstance(config, Mapping) or not isinstance(config.get("_target_"), str):
        raise CheckpointError(
            "checkpoint has no model config with a '_target_' (looked at hyper_parameters."
            + ".".join(CONFIG_PATH)
            + f" and the format_version 1 hyper_parameters.{V1_CONFIG_KEY})"
        )
    return dict(config)


def config_tree(model_config: Mapping) -> dict:
    """`hyper_parameters.config_tree` holding `model_config` as upstream's wrapper does."""
    return {"model": {"_target_": WRAPPER_TARGET, "robomimic_model": dict(model_config)}}


def state_schema(state_dict: Mapping[str, torch.Tensor]) -> list[list]:
    """[(key, shape, dtype)] of every tensor, sorted: identifies the weights' structure without
    hashing gigabytes."""
    return [[k, list(v.shape), str(v.dtype)] for k, v in sorted(state_dict.items()) if isinstance(v, torch.Tensor)]


def model_state_dict(ckpt: Mapping) -> dict[str, torch.Tensor]:
    """The algorithm's own state dict (the `nets.policy.` prefix removed) of a checkpoint in the
    current layout (a source in another goes through migrations.upgrade_layout first)."""
    sd = ckpt["state_dict"]
    bad = [k for k in sd if not k.startswith(MODEL_PREFIX)]
    if bad:
        raise CheckpointError(f"state_dict keys outside '{MODEL_PREFIX}': {bad[:5]}{' ...' if len(bad) > 5 else ''}")
    return {k[len(MODEL_PREFIX) :]: v for k, v in sd.items()}


def build_checkpoint(
    *,
    model_state: Mapping[str, torch.Tensor],
    model_config: Mapping,
    norm_stats_state: Mapping,
    epoch: int,
    global_step: int,
    optimizer_states: list | None = None,
    loops: Mapping | None = None,
) -> dict:
    """The dict `save_checkpoint` writes (exposed for tests that build legacy variants of it):
    upstream's layout, module docstring."""
    if "_target_" not in model_config:
        raise CheckpointError("model_config needs a '_target_' naming the algorithm class")
    ckpt = {
        "state_dict": {MODEL_PREFIX + k: v.detach().cpu().clone() for k, v in model_state.items()},
        "hyper_parameters": {
            "config_tree": config_tree(model_config),
            "norm_stats_state": dict(norm_stats_state),
            "format_version": FORMAT_VERSION,
        },
        "epoch": int(epoch),
        "global_step": int(global_step),
    }
    if optimizer_states is not None:
        ckpt["optimizer_states"] = list(optimizer_states)
    if loops is not None:
        ckpt["loops"] = dict(loops)
    return ckpt


def atomic_torch_save(obj: Any, path: Path) -> None:
    """Write via a temp file in the same directory + fsync + os.replace: readers see the old
    file or the whole new one, never half of it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.partial")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_checkpoint(
    path: str | os.PathLike,
    algorithm,
    norm_stats,
    *,
    epoch: int,
    global_step: int,
    optimizer=None,
    loops: Mapping | None = None,
) -> Path:
    """Write a trained algorithm (a families Algorithm: `state_dict()`, `model_config()`) and its
    NormStats as a current-format checkpoint (upstream's layout, module docstring); with `optimizer`, its state is kept too, and `loops`
    (plain data: the trainer's own state) under Lightning's key of that name; rollout preparation
    drops both. Atomic: a crash leaves no half-written file."""
    path = Path(path)
    ckpt = build_checkpoint(
        model_state=algorithm.state_dict(),
        model_config=algorithm.model_config(),
        norm_stats_state=norm_stats.to_state(),
        epoch=epoch,
        global_step=global_step,
        optimizer_states=None if optimizer is None else [optimizer.state_dict()],
        loops=loops,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_torch_save(ckpt, path)
    return path
