"""egomimic-policy: look inside a policy checkpoint, and run one inference offline.

    egomimic-policy inspect CHECKPOINT [--json]
    egomimic-policy infer CHECKPOINT --inputs in.npz --out out.npz [--cache-dir DIR] [--seed N]

`inspect` reads the checkpoint (nothing is built on real weights, nothing is written) and prints
its family, sizes, observation and action keys with shapes, embodiments, norm stats, the config
SHA-256 (what `pin_config_sha256` compares) and the migrations preparation would apply.
`infer` loads an upstream EgoVerse Fold/MoE checkpoint exactly as the policy node does
(families.make_policy -> upstream.policy.make_upstream_policy, through the cache) and runs one
`upstream.pipeline.rollout` on the observation in `in.npz`.

Exit codes: 0 done; 2 bad input (a missing or unreadable file, a checkpoint that cannot be used,
in.npz keys or shapes that do not fit the checkpoint), with one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
import textwrap
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from egomimic_hw.errors import ConfigError

PROG = "egomimic-policy"
EXIT_OK, EXIT_USAGE = 0, 2
NOISE_INPUT = "noise"
"""The optional in.npz array that replaces the sampler's initial random latent."""
INTERPOLATION = re.compile(rb"\$\{[^${}]*\}")


# ---- inspect: upstream stage pipeline (Fold / MoE) ----------------------------------------------


def _embodiment_name(emb_id: int, legacy: bool) -> str:
    from egomimic_hw.embodiment import LegacyEmbodiment, embodiment_by_id

    try:
        return LegacyEmbodiment(emb_id).name.lower() if legacy else embodiment_by_id(emb_id).key
    except (ValueError, ConfigError):
        return "unknown"


def _norm_summary(norm: Any) -> dict:
    """{mode, per embodiment id: {key: dim, q1, q99, range, narrowest dim}} of a NormStats."""
    out: dict[str, Any] = {"mode": norm.mode.value, "embodiments": {}}
    for emb_id, keys in norm.stats.items():
        entry = {}
        for key, stats in keys.items():
            q1, q99 = np.asarray(stats.quantile_1), np.asarray(stats.quantile_99)
            width = q99 - q1
            narrow = int(np.argmin(width))
            entry[key] = {
                "dim": stats.dim,
                "q1": [float(v) for v in q1],
                "q99": [float(v) for v in q99],
                "range": [float(q1.min()), float(q99.max())],
                "narrowest_dim": narrow,
                "narrowest_width": float(width[narrow]),
            }
        out["embodiments"][str(int(emb_id))] = entry
    return out


def camera_crops(algo: Any) -> dict[str, tuple[int, int]]:
    """Camera key -> (crop_height, crop_width) of its VisualCore, for the encoders that crop."""
    from egomimic_policy.upstream.vision import VisualCore

    return {
        name.rsplit(".", 1)[-1]: (int(m.crop_height), int(m.crop_width))
        for name, m in algo.named_modules()
        if isinstance(m, VisualCore) and m.crop_aug and m.crop_height is not None and m.crop_width is not None
    }


def inspect_upstream(path: Path) -> dict:
    import torch

    from egomimic_policy.checkpoints.errors import CheckpointError
    from egomimic_policy.features import EMBODIMENT
    from egomimic_policy.upstream.checkpoint import load_upstream
    from egomimic_policy.upstream.pipeline import PipelineAlgo, norm_stats_of, weight_problems
    from egomimic_policy.upstream.policy import (
        IMAGE_SIZE,
        config_sha256,
        observation_keys,
        pickle_text,
        prepare_artifact,
    )
    from egomimic_policy.upstream.samplers import GaussianLatentNoise, MoEMultiJActionSampler, MultiJActionSampler
    from egomimic_policy.upstream.targets import instantiate

    ckpt = load_upstream(path)
    hp = ckpt.get("hyper_parameters") or {}
    try:
        robomimic_model = hp["config_tree"]["model"]["robomimic_model"]
    except (KeyError, TypeError):
        raise CheckpointError(f"{path}: no hyper_parameters.config_tree.model.robomimic_model") from None
    with torch.device("meta"):  # the model's structure without memory or time for its weights
        algo = instantiate(robomimic_model, "config_tree.model.robomimic_model")
    if not isinstance(algo, PipelineAlgo):
        raise CheckpointError(f"{path}: robomimic_model builds a {type(algo).__name__}, not a PipelineAlgo")
    state = hp.get("norm_stats_state") or {}
    norm, remap_notes = norm_stats_of(state, algo.domains)
    steps = algo.observation_steps()

    stage_configs = list(robomimic_model.get("stages") or [])
    stages: list[dict[str, Any]] = []
    sampler: MultiJActionSampler | None = None
    latent: list[int] | None = None
    for i, stage in enumerate(algo.policy.stages):
        target = str(stage_configs[i].get("_target_", "")) if i < len(stage_configs) else type(stage).__name__
        if isinstance(stage, MultiJActionSampler):
            sampler = stage
        if isinstance(stage, GaussianLatentNoise):
            latent = [stage.num_tokens, stage.latent_dim]
        stages.append(
            {
                "index": i,
                "class": target.rsplit(".", 1)[-1],
                "parameters": int(sum(p.numel() for p in stage.parameters())),
                "training_only": bool(getattr(stage, "train_only", False)),
            }
        )
    family = None if sampler is None else "moe" if isinstance(sampler, MoEMultiJActionSampler) else "fold"
    sizes: dict[str, Any] = {
        "parameters": int(sum(s["parameters"] for s in stages)),
        "stages": stages,
        "action_horizon": algo.action_horizon,
        "obs_steps": steps,
        "num_inference_steps": None if sampler is None else sampler.num_inference_steps,
        "latent_shape": latent,
    }
    problems = weight_problems(algo.state_dict(), ckpt.get("state_dict") or {})

    # keys: every embodiment's key_types, with the dataset (zarr) key and the shape the boundary provides
    crops = camera_crops(algo)
    key_types = state.get("key_types") or {}
    zarr_keys = state.get("zarr_keys") or {}
    shapes = state.get("shapes") or {}
    observation: list[dict] = []
    actions: list[dict] = []
    for emb_id, types in key_types.items():
        for key, kind in (types or {}).items():
            zarr = (zarr_keys.get(emb_id) or {}).get(key)
            dataset_shape = (shapes.get(emb_id) or {}).get(key)
            row: dict[str, Any] = {
                "embodiment": int(emb_id),
                "key": key,
                "dataset_key": zarr or key,
                "dataset_shape": None if dataset_shape is None else [int(v) for v in dataset_shape],
            }
            if kind == "camera_keys":
                row.update(type="camera", shape=[steps, 3, *IMAGE_SIZE], dtype="float32 RGB in [0, 1]")
                if key in crops:
                    row["center_crop"] = list(crops[key])
                observation.append(row)
            elif kind == "action_keys":
                row["type"] = "action"
                row["shape"] = row["dataset_shape"]
                actions.append(row)
            else:
                last = row["dataset_shape"][-1] if row["dataset_shape"] else None
                kind_name = "proprio" if kind == "proprio_keys" else str(kind)
                row.update(type=kind_name, shape=[steps, last], dtype="float32, physical units (not normalized)")
                observation.append(row)
    notes = []
    try:
        observation_keys(ckpt, int(EMBODIMENT))
    except ConfigError as exc:
        notes.append(f"the EVA boundary cannot fill this checkpoint: {exc}")
    if problems:
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        notes.append(f"the weights do not fit the model the config builds: {'; '.join(problems[:8])}{more}")

    # embodiments: the stats' ids, legacy ones with their current id
    current_ids = list(norm.stats)
    embodiments = []
    for raw, current in zip([int(k) for k in (state.get("norm_stats") or {})], current_ids):
        legacy = raw != int(current)
        embodiments.append(
            {"id": raw, "name": _embodiment_name(raw, legacy), "legacy": legacy, "current_id": int(current)}
        )
        if legacy:
            embodiments[-1]["current_name"] = _embodiment_name(int(current), False)

    # migrations: what make_upstream_policy's preparation does to this file
    _, record = prepare_artifact(ckpt)
    migrations = list(remap_notes)
    dropped = list(record["dropped"]) + sorted(
        f"hyper_parameters.{k}" for k in hp if k not in ("config_tree", "norm_stats_state")
    )
    if dropped:
        migrations.append("dropped from the cached artifact: " + ", ".join(dropped))
    interpolations = sorted({m.decode("utf-8", "replace") for m in INTERPOLATION.findall(pickle_text(path))})
    if interpolations:
        shown = ", ".join(interpolations[:4]) + (", ..." if len(interpolations) > 4 else "")
        migrations.append(f"{len(interpolations)} config interpolation(s) resolved: {shown}")
    return {
        "checkpoint": str(path),
        "kind": "upstream stage pipeline",
        "family": family,
        "implementation": "upstream EgoVerse PipelineAlgo (egomimic_policy.upstream)",
        "sizes": sizes,
        "domains": list(algo.domains),
        "observation_keys": observation,
        "action_keys": actions,
        "embodiments": embodiments,
        "norm_stats": _norm_summary(norm),
        "config_sha256": config_sha256(ckpt),
        "migrations": migrations,
        "training": {k: ckpt.get(k) for k in ("epoch", "global_step", "pytorch-lightning_version")},
        "infer": "supported",
        "notes": notes,
    }


# ---- inspect: upstream PI (openpi) ----------------------------------------------------------------


def inspect_upstream_pi(path: Path, ckpt: Mapping) -> dict:
    from egomimic_policy.upstream.pi import describe, parameter_count, pi_spec
    from egomimic_policy.upstream.pipeline import norm_stats_of
    from egomimic_policy.upstream.policy import config_sha256

    hp = ckpt.get("hyper_parameters") or {}
    state_dict = ckpt.get("state_dict") or {}
    notes: list[str] = []
    sizes: dict[str, Any] = {"parameters": parameter_count(state_dict)}
    try:
        spec = pi_spec(ckpt)
        sizes.update(
            variant=spec.variant,
            action_dim=spec.action_dim,
            action_horizon=spec.action_horizon,
            num_inference_steps=spec.num_steps,
            image_size=list(spec.image_size),
        )
        notes.append(describe(spec, state_dict))
    except ConfigError as exc:
        notes.append(f"not loadable here: {exc}")
    norm_summary = None
    embodiments = []
    migrations: list[str] = []
    node: Any = hp
    for part in ("config_tree", "model", "robomimic_model", "domains"):
        node = node.get(part) if isinstance(node, Mapping) else None
    domains = [str(d) for d in node] if isinstance(node, list) else []
    try:
        norm, migrations = norm_stats_of(hp.get("norm_stats_state"), domains or ["eva_bimanual"])
        norm_summary = _norm_summary(norm)
        embodiments = [{"id": int(e), "name": _embodiment_name(int(e), False)} for e in norm.stats]
    except ConfigError as exc:
        notes.append(f"norm stats: {exc}")
    return {
        "checkpoint": str(path),
        "kind": "upstream PI",
        "family": "pi",
        "implementation": "upstream PI (openpi PI0Pytorch): needs the openpi extra (pyproject.toml); "
        "not the project's own `pi` family, a small self-trained CPU model",
        "sizes": sizes,
        "domains": domains,
        "observation_keys": [],
        "action_keys": [],
        "embodiments": embodiments,
        "norm_stats": norm_summary,
        "config_sha256": config_sha256(ckpt),
        "migrations": migrations,
        "training": {k: ckpt.get(k) for k in ("epoch", "global_step", "pytorch-lightning_version")},
        "infer": "not supported: upstream PI runs only with the openpi extra, not through this command",
        "notes": notes,
    }


# ---- inspect: the project's own checkpoints (families) ------------------------------------------


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """The migrations log each change as a warning; inspect lists them instead."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def inspect_project(path: Path, ckpt: dict) -> dict:
    import torch

    from egomimic_hw.description import CAMERAS
    from egomimic_policy.checkpoints import migrations as migrations_module
    from egomimic_policy.checkpoints.errors import CheckpointError
    from egomimic_policy.checkpoints.layout import model_config_of, model_state_dict, sha256_of
    from egomimic_policy.checkpoints.migrations import is_legacy, migrate_checkpoint
    from egomimic_policy.families import algorithm_for_target
    from egomimic_policy.features import ACTION_DIM, ACTION_KEY, EMBODIMENT, STATE_DIM, STATE_KEY
    from egomimic_policy.normalization import NormStats
    from egomimic_policy.upstream.policy import IMAGE_SIZE

    source_target = model_config_of(ckpt)["_target_"]
    cls = algorithm_for_target(source_target)
    legacy = is_legacy(ckpt)
    notes = []
    with _quiet(migrations_module.__name__):  # in memory: nothing is written
        try:
            migrated, record = migrate_checkpoint(ckpt)
        except CheckpointError as exc:  # refused unpinned (a legacy Fold): what would apply once pinned
            migrated, record = migrate_checkpoint(ckpt, pin_config_sha256=sha256_of(model_config_of(ckpt)))
            notes.append(str(exc))
    config = cls.config_from_model_config(model_config_of(migrated))
    try:
        cls.check_structure(migrated)
    except ConfigError as exc:
        notes.append(str(exc))
    with torch.device("meta"):
        algo = cls(config)
    frame = np.zeros((*IMAGE_SIZE, 3), dtype=np.uint8)  # an EVA camera frame
    model_image = list(algo.image_input(frame).shape)
    steps, horizon = int(config.n_obs_steps), int(config.chunk_length)
    observation: list[dict[str, Any]] = [
        {
            "key": cam,
            "type": "camera",
            "shape": [steps, *model_image],
            "dtype": f"uint8 RGB frame (H, W, 3) resized to the model's {model_image[1]}x{model_image[2]}",
        }
        for cam in CAMERAS
    ]
    observation.append(
        {"key": STATE_KEY, "type": "proprio", "shape": [steps, STATE_DIM], "dtype": "physical units (not normalized)"}
    )
    norm = NormStats.from_state(migrated["hyper_parameters"]["norm_stats_state"])
    embodiments = []
    reverse = {v: k for k, v in record.embodiment_remap.items()}
    for emb_id in norm.stats:
        raw = reverse.get(int(emb_id), int(emb_id))
        row: dict[str, Any] = {"id": raw, "name": _embodiment_name(raw, legacy), "legacy": legacy}
        if legacy:
            row.update(current_id=int(emb_id), current_name=_embodiment_name(int(emb_id), False))
        embodiments.append(row)
    applied = list(record.applied)
    if record.dropped_keys:
        applied.append("dropped from the cached artifact: " + ", ".join(record.dropped_keys))
    implementation = f"project family {cls.family} ({cls.target()})"
    if cls.family == "pi":
        implementation += ": the project's small self-trained CPU PI, not upstream's openpi PI0"
    return {
        "checkpoint": str(path),
        "kind": "project",
        "family": cls.family,
        "implementation": implementation,
        "target": source_target,
        "sizes": {
            "parameters": int(sum(v.numel() for v in model_state_dict(migrated).values())),
            **config.to_dict(),
        },
        "domains": [EMBODIMENT.key],
        "observation_keys": observation,
        "action_keys": [{"key": ACTION_KEY, "type": "action", "shape": [horizon, ACTION_DIM]}],
        "embodiments": embodiments,
        "norm_stats": _norm_summary(norm),
        "config_sha256": record.source_model_config_sha256,
        "format": "legacy (no format_version)"
        if legacy
        else f"format_version {ckpt['hyper_parameters']['format_version']}",
        "migrations": applied,
        "training": {k: ckpt.get(k) for k in ("epoch", "global_step", "pytorch-lightning_version")},
        "infer": f"not supported for the project's {cls.family} family yet (its input is the node's Observation)",
        "notes": notes,
    }


def inspect(path: Path) -> dict:
    """The report of a checkpoint of any kind this project reads, routed as make_policy routes it."""
    from egomimic_policy.checkpoints.errors import CheckpointError
    from egomimic_policy.checkpoints.layout import load_checkpoint
    from egomimic_policy.upstream.checkpoint import load_upstream
    from egomimic_policy.upstream.policy import is_upstream_checkpoint, is_upstream_pi_checkpoint

    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    if is_upstream_pi_checkpoint(path):
        return inspect_upstream_pi(path, load_upstream(path))
    if is_upstream_checkpoint(path):
        return inspect_upstream(path)
    try:
        ckpt = load_checkpoint(path)
    except CheckpointError as first:
        try:  # a Lightning checkpoint with OmegaConf objects, which weights_only refuses
            plain = load_upstream(path)
        except CheckpointError as second:  # says what it refused without torch's weights_only advice
            raise CheckpointError(f"cannot read checkpoint {second}") from first
        node: Any = plain
        for part in ("hyper_parameters", "config_tree", "model", "robomimic_model", "_target_"):
            node = node.get(part) if isinstance(node, Mapping) else None
        raise CheckpointError(
            f"{path}: an upstream EgoVerse checkpoint that is neither a stage pipeline (Fold/MoE) nor PI "
            f"(robomimic_model._target_ {node!r}); the policy node cannot load it"
        ) from None
    return inspect_project(path, ckpt)


def _shape(shape: Any) -> str:
    return "?" if shape is None else "(" + ", ".join("?" if v is None else str(v) for v in shape) + ")"


def render(report: Mapping) -> str:
    """The text form of an inspect report."""
    lines = []

    def field(label: str, value: Any) -> None:
        lines.append(f"{label + ':':<16}{value}")

    field("checkpoint", report["checkpoint"])
    field("family", report["family"])
    field("implementation", report["implementation"])
    if "target" in report:
        field("target", report["target"])
    if "format" in report:
        field("format", report["format"])
    sizes = dict(report["sizes"])
    field("parameters", f"{sizes.pop('parameters'):,}")
    for stage in sizes.pop("stages", []):
        extra = " (training only, not run at rollout)" if stage["training_only"] else ""
        lines.append(f"  stage {stage['index']} {stage['class']:<28}{stage['parameters']:>14,}{extra}")
    field("sizes", ", ".join(f"{k} {_shape(v) if isinstance(v, list) else v}" for k, v in sizes.items()))
    if report.get("domains"):
        field("domains", ", ".join(report["domains"]))
    if report["observation_keys"]:
        lines.append("observation keys" + (" (in.npz of `infer`):" if report["infer"] == "supported" else ":"))
        for row in report["observation_keys"]:
            text = f"  {row['key']:<18}{row['type']:<9}{_shape(row['shape']):<20}{row.get('dtype', '')}"
            if "dataset_key" in row:
                text += f"; dataset {row['dataset_key']}"
                text += f" {_shape(row['dataset_shape'])}" if row.get("dataset_shape") else ""
            if "center_crop" in row:
                text += f"; centre crop {row['center_crop'][0]}x{row['center_crop'][1]}"
            lines.append(text)
    for row in report["action_keys"]:
        field("action key", f"{row['key']} {_shape(row['shape'])}")
    embodiments = []
    for e in report["embodiments"]:
        text = f"{e['id']} {e['name']}"
        if e.get("legacy") and "current_id" in e:
            text += f" (legacy id -> {e['current_id']} {e['current_name']})"
        embodiments.append(text)
    field("embodiments", ", ".join(embodiments) or "none")
    norm = report.get("norm_stats")
    if norm:
        field("norm stats", f"{norm['mode']} (q1..q99: overall range; narrowest dim)")
        for emb_id, keys in norm["embodiments"].items():
            for key, s in keys.items():
                lines.append(
                    f"  {emb_id} {key:<20}dim {s['dim']:<4}[{s['range'][0]:.4g}, {s['range'][1]:.4g}]; "
                    f"narrowest dim {s['narrowest_dim']} width {s['narrowest_width']:.3g}"
                )
    field("config SHA-256", report["config_sha256"])
    training = report.get("training") or {}
    field("trained", ", ".join(f"{k} {v}" for k, v in training.items() if v is not None) or "?")
    if report["migrations"]:
        lines.append("migrations that would apply (in the cache, never to the file):")
        lines += [f"  - {m}" for m in report["migrations"]]
    else:
        field("migrations", "none")
    field("infer", report["infer"])
    lines += [f"note: {n}" for n in report["notes"]]
    return "\n".join(lines)


# ---- infer --------------------------------------------------------------------------------------


def load_inputs(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ConfigError(f"inputs file {str(path)!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as raw:
            return {k: np.asarray(raw[k]) for k in raw.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ConfigError(f"inputs file {str(path)!r} is not a readable .npz ({exc})") from None


def check_inputs(
    inputs: Mapping[str, np.ndarray], keys: Mapping[str, str], policy: Any, source: str
) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The observation (float32, the checkpoint's keys) and the optional noise, or ConfigError
    naming every missing or extra key, or the key whose shape, dtype or values are wrong."""
    from egomimic_policy.features import STATE_KEY

    expected = set(keys)
    missing = sorted(expected - set(inputs))
    extra = sorted(set(inputs) - expected - {NOISE_INPUT})
    if missing or extra:
        parts = ([f"missing {missing}"] if missing else []) + ([f"unexpected {extra}"] if extra else [])
        raise ConfigError(
            f"{source}: {'; '.join(parts)}; the checkpoint's observation keys are {sorted(expected)} "
            f"(plus optional {NOISE_INPUT!r})"
        )
    steps = policy.obs_steps
    crops = camera_crops(policy.algo)
    observation = {}
    for key, origin in keys.items():
        arr = inputs[key]
        if not np.issubdtype(arr.dtype, np.floating):
            raise ConfigError(f"{source}: {key!r} is {arr.dtype}; need float32 (images RGB in [0, 1])")
        if origin == STATE_KEY:
            dim = policy.norm.key_stats(policy.embodiment_id, key).dim
            if arr.shape != (steps, dim):
                raise ConfigError(f"{source}: {key!r} has shape {arr.shape}; the checkpoint takes ({steps}, {dim})")
        else:
            ch, cw = crops.get(key, (1, 1))
            if arr.ndim != 4 or arr.shape[0] != steps or arr.shape[1] != 3 or arr.shape[2] < ch or arr.shape[3] < cw:
                raise ConfigError(
                    f"{source}: {key!r} has shape {arr.shape}; the checkpoint takes ({steps}, 3, H, W) "
                    f"RGB with H >= {ch}, W >= {cw}"
                )
            if arr.size and (arr.min() < 0.0 or arr.max() > 1.0):
                raise ConfigError(f"{source}: {key!r} has values outside [0, 1] (images are RGB floats in [0, 1])")
        if not np.all(np.isfinite(arr)):
            raise ConfigError(f"{source}: {key!r} has non-finite values")
        observation[key] = arr.astype(np.float32, copy=False)
    noise = inputs.get(NOISE_INPUT)
    if noise is not None:
        if tuple(noise.shape) != tuple(policy.latent_shape) or not np.all(np.isfinite(noise)):
            raise ConfigError(
                f"{source}: {NOISE_INPUT!r} has shape {noise.shape}; the sampler's latent is "
                f"{tuple(policy.latent_shape)} (finite floats)"
            )
        noise = noise.astype(np.float32, copy=False)
    return observation, noise


def infer(path: Path, inputs_path: Path, out_path: Path, *, cache_dir: Path | None, seed: int = 0) -> str:
    """One rollout through the policy node's own path; writes out_path; returns a summary line."""
    import torch

    from egomimic_policy.checkpoints.errors import CheckpointError
    from egomimic_policy.upstream.pipeline import rollout
    from egomimic_policy.upstream.policy import is_upstream_checkpoint, make_upstream_policy

    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    if not is_upstream_checkpoint(path):
        report = inspect(path)  # names the family (or refuses the file) before saying why not
        raise ConfigError(f"infer of {path}: {report['infer']}")
    raw = load_inputs(inputs_path)  # before the (slower) checkpoint load
    if not out_path.parent.is_dir():
        raise ConfigError(f"output directory {str(out_path.parent)!r} does not exist")
    policy = make_upstream_policy(path, cache_dir=cache_dir, seed=seed)  # CPU, 1 thread: the node's defaults
    observation, noise = check_inputs(raw, policy.keys, policy, str(inputs_path))
    if noise is None:  # what the node draws on its first query after reset()
        noise = torch.randn(policy.latent_shape, generator=torch.Generator("cpu").manual_seed(seed)).numpy()
    result = rollout(policy.algo, policy.norm, policy.embodiment_id, observation, noise=noise)
    try:
        with open(out_path, "wb") as f:  # np.savez(path) would append ".npz" to another suffix
            np.savez(
                f,
                pred_action_normalized=result.pred_action_normalized,
                pred_action=result.pred_action,
                noise=np.asarray(noise, dtype=np.float32),
            )
    except OSError as exc:
        raise ConfigError(f"cannot write {str(out_path)!r}: {exc.strerror or exc}") from None
    spec = policy.spec
    return (
        f"{out_path}: pred_action {result.pred_action.shape} ({spec.family}, {spec.embodiment}, "
        f"config SHA-256 {spec.extra['config_sha256'][:12]}, noise {'given' if NOISE_INPUT in raw else f'seed {seed}'}, "
        f"cache {spec.extra['cache']}, model {spec.extra.get('artifact')})"
    )


# ---- command line -------------------------------------------------------------------------------


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=88)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Look inside a policy checkpoint, or run one inference offline.",
        epilog=f"examples:\n  {PROG} inspect /ckpts/fold/last.ckpt\n"
        f"  {PROG} infer /ckpts/fold/last.ckpt --inputs in.npz --out out.npz\n\n"
        "exit codes: 0 done; 2 bad input (one line on stderr)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{inspect,infer}")
    p = sub.add_parser(
        "inspect",
        help="family, sizes, keys, embodiments, norm stats, config SHA-256, migrations",
        description=_wrap(
            "Print what a checkpoint holds: family, sizes, observation and action keys with shapes, "
            "embodiments, norm stats summary, config SHA-256 and the migrations preparation would apply. "
            "Reads only; nothing is written."
        ),
        epilog=f"example:\n  {PROG} inspect /ckpts/fold/last.ckpt --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", type=Path, help="an upstream EgoVerse or a project checkpoint (.ckpt)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p = sub.add_parser(
        "infer",
        help="one offline inference of an upstream Fold/MoE checkpoint, as the policy node runs it",
        description=_wrap(
            "Run one inference through the policy node's own path (make_upstream_policy, through the "
            "cache, then upstream.pipeline.rollout). in.npz: the checkpoint's observation keys as `inspect` lists "
            "them, images float32 (T_obs, 3, H, W) RGB in [0, 1], proprio (T_obs, D) in physical units (not "
            f"normalized); optional {NOISE_INPUT!r} (the sampler's initial latent) replaces the random draw. "
            "out.npz: pred_action_normalized (what the network returns), pred_action (unnormalized) and the "
            "noise used."
        ),
        epilog=f"example:\n  {PROG} infer /ckpts/fold/last.ckpt --inputs in.npz --out out.npz",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", type=Path, help="an upstream EgoVerse Fold or MoE checkpoint (.ckpt)")
    p.add_argument("--inputs", type=Path, required=True, metavar="IN.npz", help="the observation (and optional noise)")
    p.add_argument("--out", type=Path, required=True, metavar="OUT.npz", help="where to write the actions")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="checkpoint cache (default $EGOMIMIC_CACHE_DIR or ~/.cache/egomimic/checkpoints)",
    )
    p.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seeds the latent when in.npz has no noise (default 0)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "inspect":
            report = inspect(args.checkpoint)
            print(json.dumps(report, indent=1) if args.json else render(report))
        else:
            print(infer(args.checkpoint, args.inputs, args.out, cache_dir=args.cache_dir, seed=args.seed))
    except ConfigError as exc:  # CheckpointError is one
        message = str(exc).strip().splitlines() or [type(exc).__name__]
        print(f"{PROG}: {message[0]}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
