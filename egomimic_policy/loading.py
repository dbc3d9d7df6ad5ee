"""The `policy` launch argument -> a ChunkPolicy. One explicit table, lazy imports.

Values (docs/interfaces.md launch arguments): `scripted` (the known motion, no model), `expert`
(the simulated box task's scripted expert, egomimic_policy.expert), `fold` / `pi` / `moe` (that
family, seeded untrained weights: rehearsals and benchmarks), a checkpoint path, or a policy
server address `tcp://host:port`. `none` means "no policy node" and is refused
here: the graph does not start one. Families and the remote client are imported only when
asked for, so the scripted and expert runs need neither torch nor a server.

`inject_latency_ms` wraps the result in DelayedPolicy: every query takes that much longer, so
operators can rehearse a slow model (and the executor's hold/stop behaviour) in simulation.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

from egomimic_hw.errors import ConfigError
from egomimic_policy.interface import Chunk, ChunkPolicy, Observation

FAMILIES = ("fold", "pi", "moe")
SCRIPTED = ("scripted", "expert")
"""Policies that run no model: no torch, no device."""
CHOICES = (*SCRIPTED, *FAMILIES, "<checkpoint path>", "tcp://host:port")


class DelayedPolicy:
    """A policy whose every query takes `latency_s` longer (sleeps before inferring)."""

    def __init__(self, policy: ChunkPolicy, latency_s: float):
        if not (math.isfinite(latency_s) and 0 <= latency_s <= 60):
            raise ConfigError(f"inject_latency_ms must be in [0, 60000] ms, got {latency_s * 1e3}")
        self.inner = policy
        self.latency_s = latency_s
        self.spec = policy.spec

    def reset(self) -> None:
        self.inner.reset()

    def infer(self, observation: Observation) -> Chunk:
        time.sleep(self.latency_s)
        return self.inner.infer(observation)

    def status(self) -> dict:
        """The wrapped policy's status (a remote client's connection state), plus the delay."""
        inner = getattr(self.inner, "status", None)
        return {**(inner() if inner is not None else {}), "inject_latency_ms": self.latency_s * 1e3}

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


def choose_device(value: str, device: str, allow_cpu: bool = False) -> tuple[str, str]:
    """The torch device for policy `value` and a warning ("" if none). A model family asked to
    run on CUDA where there is none is refused unless `allow_cpu`: upstream's models take
    98-535 ms per chunk on a 4090, seconds on a CPU, so a robot that silently fell back would
    run a policy far slower than it was trained to be queried. Scripted, expert and remote policies
    run no model here: their device is left as it is."""
    value = value.strip()
    if value in SCRIPTED or value.startswith("tcp://") or not device.startswith("cuda"):
        return device, ""
    import torch

    if torch.cuda.is_available():
        return device, ""
    if not allow_cpu:
        raise ConfigError(
            f"policy {value!r} asks for device {device!r} but this machine has no CUDA device "
            "(torch.cuda.is_available() is False); refusing to run the model on the CPU. Set "
            "allow_cpu_policy:=true to run it on the CPU anyway (seconds per chunk), or device:=cpu"
        )
    return "cpu", (
        f"policy {value!r}: device {device!r} unavailable (no CUDA device); running on the CPU because "
        "allow_cpu_policy is true: expect seconds per chunk"
    )


def preflight(value: str, cache_dir: str | Path | None = None) -> str | None:
    """Why `value` cannot be loaded, in one line, checked before anything starts (None: it can,
    as far as can be told without building it). For a checkpoint path: it exists, reads as a
    checkpoint (not empty, truncated or random bytes), and its cache directory is writable.
    The launcher calls this so that a bad policy:= stops the start before the drivers run."""
    import os

    value = value.strip()
    if value in ("", "none", *SCRIPTED, *FAMILIES) or value.startswith("tcp://"):
        return None
    if "://" in value:
        return f"policy:={value}: only tcp:// server addresses are supported"
    path = Path(value).expanduser()
    if not path.exists():
        return f"policy:={value} is neither a known policy nor an existing checkpoint; choices: {', '.join(CHOICES)}"
    from egomimic_policy.checkpoints import CheckpointError, default_cache_dir, load_checkpoint
    from egomimic_policy.checkpoints.cache import entry_stem

    try:
        load_checkpoint(path)
    except CheckpointError as exc:
        return f"policy:={value}: {exc}"
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    existing = next((p for p in (cache, *cache.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return (
            f"policy:={value}: the checkpoint cache {str(cache)!r} cannot be written "
            f"({str(existing)!r} is {'not a directory' if existing and not existing.is_dir() else 'not writable'}); "
            "set $EGOMIMIC_CACHE_DIR to a writable directory"
        )
    prepared = cache.is_dir() and any(cache.glob(f"{entry_stem(path)}.rollout-*.ckpt"))
    need, free = path.stat().st_size, shutil.disk_usage(existing).free
    if not prepared and free < need:  # the prepared artifact is about the weights' size
        return (
            f"policy:={value}: the checkpoint cache {str(cache)!r} has {free / 1e6:.0f} MB free; preparing this "
            f"checkpoint needs about {need / 1e6:.0f} MB (free space or set $EGOMIMIC_CACHE_DIR)"
        )
    return None


def load_policy(
    value: str,
    *,
    inject_latency_ms: float = 0.0,
    scripted=None,
    expert=None,
    remote=None,
    cache_dir: str | None = None,
    seed: int = 0,
    device: str = "cpu",
    pin_config_sha256: str = "",
) -> ChunkPolicy:
    """Build the policy named by `value`.

    scripted: a `ScriptedChunkPolicy` to use for `scripted` (default: the default motion).
    expert: an `ExpertChunkPolicy` to use for `expert` (default: task seed 0).
    remote: a `RemoteConfig` template for `tcp://` values (its address is replaced).
    """
    value = value.strip()
    if value in ("", "none"):
        raise ConfigError("policy:=none runs no policy node; choose one of " + ", ".join(CHOICES))
    if value == "scripted":
        from egomimic_policy.scripted import ScriptedChunkPolicy

        policy = scripted if scripted is not None else ScriptedChunkPolicy()
    elif value == "expert":
        from egomimic_policy.expert import ExpertChunkPolicy

        policy = expert if expert is not None else ExpertChunkPolicy()
    elif value.startswith("tcp://"):
        from dataclasses import replace

        from egomimic_policy.remote.client import RemoteConfig, RemotePolicy

        policy = RemotePolicy(replace(remote, address=value) if remote is not None else RemoteConfig(address=value))
    elif value in FAMILIES or Path(value).exists():
        from egomimic_policy.families import make_policy

        policy = make_policy(
            value,
            cache_dir=Path(cache_dir) if cache_dir else None,
            seed=seed,
            device=device,
            pin_config_sha256=pin_config_sha256 or None,
        )
    elif "://" in value:
        raise ConfigError(f"policy:={value!r}: only tcp:// server addresses are supported")
    else:
        raise ConfigError(
            f"policy:={value!r} is neither a known policy nor an existing checkpoint; choices: {', '.join(CHOICES)}"
        )
    if inject_latency_ms:
        policy = DelayedPolicy(policy, inject_latency_ms / 1e3)
    return policy
