"""An upstream EgoVerse Fold or MoE checkpoint as a live ChunkPolicy: the EVA contract at the boundary.

In: the newest synchronized observation and its history. The checkpoint's own observation keys
(its `norm_stats_state`) say what it reads: camera keys whose dataset key is `images.<camera>`
get that camera's frame as RGB floats in [0, 1], (T_obs, 3, H, W) at the native size (upstream
never resizes; its encoder centre-crops); `state_ee_pose` gets (T_obs, 20) per arm
[xyz, rot6d, gripper] in the dataset frame at link6 (egomimic_policy.features), physical units,
normalized here once with the checkpoint's stats. The window is oldest first, padded at episode
start by repeating the oldest frame, as upstream's rollout does.
Out: `pred_action` (horizon, 20) unnormalized with the checkpoint's stats, decoded against the
query tick's poses (wrist-relative, egomimic_policy.features.decode_action_chunk).

The initial latent comes from a generator seeded by `seed` and restarted by reset(), so a
replayed episode gets the same chunks; `egomimic-policy infer` can pass one explicitly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from egomimic_hw.description import CAMERAS, CONTROL_RATE_HZ
from egomimic_hw.errors import ConfigError, PoseError
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.checkpoints.layout import sha256_of
from egomimic_policy.features import (
    ACTION_DIM,
    ACTION_KEY,
    ACTION_LAYOUT,
    STATE_KEY,
    chunk_answering,
    state_ee_pose,
)
from egomimic_policy.interface import Chunk, Observation, PolicySpec, phase_timings_ms
from egomimic_policy.normalization import NormStats
from egomimic_policy.upstream.pipeline import PipelineAlgo, domain_name, rollout
from egomimic_policy.upstream.samplers import GaussianLatentNoise, MoEMultiJActionSampler

IMAGE_SIZE = (480, 640)
"""(H, W) of EVA's dataset images (docs/eva.md): what the lab's checkpoints were trained on."""
CAMERA_PREFIX = "images."
"""A camera key's dataset (zarr) name is `images.<camera>` (upstream's EVA key map)."""


def config_sha256(ckpt: Mapping) -> str:
    """The pin upstream uses: SHA-256 of the canonical JSON of `model.robomimic_model`."""
    return sha256_of(ckpt["hyper_parameters"]["config_tree"]["model"]["robomimic_model"])


def observation_keys(ckpt: Mapping, embodiment_id: int) -> dict[str, str]:
    """The checkpoint's observation keys -> where each comes from here: a camera name, or
    `state_ee_pose`. Anything else is refused by name (this boundary cannot fill it)."""
    state = ckpt["hyper_parameters"].get("norm_stats_state") or {}
    key_types = _for_embodiment(state.get("key_types"), embodiment_id)
    zarr_keys = _for_embodiment(state.get("zarr_keys"), embodiment_id)
    if not key_types:
        raise CheckpointError(f"norm_stats_state has no key_types for embodiment {embodiment_id}")
    out = {}
    for key, kind in key_types.items():
        if kind == "camera_keys":
            zarr = str(zarr_keys.get(key) or "")
            camera = zarr[len(CAMERA_PREFIX) :] if zarr.startswith(CAMERA_PREFIX) else ""
            if camera not in CAMERAS:
                raise CheckpointError(f"camera key {key!r} reads {zarr!r}; EVA's cameras are {list(CAMERAS)}")
            out[key] = camera
        elif kind == "proprio_keys":
            if key != STATE_KEY:
                raise CheckpointError(f"proprio key {key!r} is not supported at the EVA boundary (only {STATE_KEY})")
            out[key] = STATE_KEY
        elif kind == "action_keys":
            if key != ACTION_KEY:
                raise CheckpointError(f"action key {key!r}: only {ACTION_KEY} ({ACTION_LAYOUT}) decodes here")
        else:
            raise CheckpointError(f"observation key {key!r} of type {kind!r} is not supported at the EVA boundary")
    return out


def _for_embodiment(table, embodiment_id: int) -> Mapping:
    """`table[embodiment_id]`; a table with a single (possibly legacy-id) entry is that entry."""
    table = table or {}
    if embodiment_id in table:
        return table[embodiment_id] or {}
    return next(iter(table.values())) if len(table) == 1 else {}


def image_input(image: np.ndarray, camera: str) -> np.ndarray:
    """uint8 (H, W, 3) RGB -> float32 (3, H, W) in [0, 1]."""
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise ConfigError(f"camera {camera}: need uint8 (H, W, 3) RGB, got {arr.dtype} {arr.shape}")
    return np.ascontiguousarray(arr.transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)


class UpstreamRolloutPolicy:
    """ChunkPolicy over an upstream PipelineAlgo (Fold or MoE). infer() and reset() are serialized
    by a lock: the executor queries from a worker thread and may reset from another."""

    def __init__(
        self,
        algo: PipelineAlgo,
        norm: NormStats,
        ckpt_meta: Mapping,
        *,
        embodiment_id: int,
        fingerprint: str,
        seed: int = 0,
        device: str = "cpu",
        num_threads: int = 1,
        extra: Mapping[str, str] | None = None,
    ):
        torch.set_num_threads(int(num_threads))
        self._device = torch.device(device)
        self.algo = algo.eval().to(self._device)
        self.norm = norm
        self.embodiment_id = int(embodiment_id)
        self.keys = observation_keys(ckpt_meta, self.embodiment_id)
        self.obs_steps = algo.observation_steps()
        noise = next((s for s in algo.policy.stages if isinstance(s, GaussianLatentNoise)), None)
        if noise is None:
            raise CheckpointError("the pipeline has no GaussianLatentNoise stage: no sampler to seed")
        self.latent_shape = (noise.num_tokens, noise.latent_dim)
        self._seed = int(seed)
        self._generator = torch.Generator("cpu")
        self._lock = threading.Lock()
        self.last_timing_ms: dict[str, float] = {}
        moe = any(isinstance(s, MoEMultiJActionSampler) for s in algo.policy.stages)
        self.spec = PolicySpec(
            family="moe" if moe else "fold",
            fingerprint=fingerprint,
            embodiment=domain_name(self.embodiment_id),
            action_layout=ACTION_LAYOUT,
            chunk_length=int(algo.action_horizon),
            rate_hz=CONTROL_RATE_HZ,
            cameras=tuple(c for c in CAMERAS if c in self.keys.values()),
            image_size=IMAGE_SIZE,
            obs_steps=self.obs_steps,
            extra={
                "implementation": "upstream EgoVerse PipelineAlgo (egomimic_policy.upstream)",
                "config_sha256": config_sha256(ckpt_meta),
                "seed": str(self._seed),
                "device": str(self._device),
                **dict(extra or {}),
            },
        )
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._generator.manual_seed(self._seed)

    def observation_inputs(self, observation: Observation) -> dict[str, np.ndarray]:
        """The checkpoint's observation keys, (T_obs, ...), physical units, oldest first."""
        history = list(observation.history[-(self.obs_steps - 1) :]) if self.obs_steps > 1 else []
        frames = [history[0] if history else observation] * (self.obs_steps - 1 - len(history))
        frames += history + [observation]
        out = {}
        for key, source in self.keys.items():
            if source == STATE_KEY:
                rows = [state_ee_pose(f.left_pose, f.left_gripper, f.right_pose, f.right_gripper) for f in frames]
                out[key] = np.stack(rows)
            else:
                missing = [f.stamp_ns for f in frames if source not in f.images]
                if missing:
                    raise ConfigError(f"camera {source} missing from observation(s) {missing}")
                out[key] = np.stack([image_input(f.images[source], source) for f in frames])
        return out

    def infer(self, observation: Observation, noise: np.ndarray | None = None) -> Chunk:
        with self._lock:
            t0 = time.monotonic()
            inputs = self.observation_inputs(observation)
            if noise is None:
                noise = torch.randn(self.latent_shape, generator=self._generator).numpy()
            t1 = time.monotonic()
            result = rollout(self.algo, self.norm, self.embodiment_id, inputs, noise=noise)
            t2 = time.monotonic()
        actions = result.pred_action
        if actions.shape != (self.spec.chunk_length, ACTION_DIM) or not np.all(np.isfinite(actions)):
            raise PoseError(f"upstream policy returned {actions.shape} actions (finite: {np.isfinite(actions).all()})")
        chunk = chunk_answering(observation, actions)
        t3 = time.monotonic()
        self.last_timing_ms = phase_timings_ms(t0, t1, t2, t3)
        return chunk


UPSTREAM_MARKERS = (b"egomimic.pipeline.algo.PipelineAlgo", b"egomimic.pipeline.stages_sampler.")
"""Both appear in the pickle of a stage-pipeline checkpoint. The legacy pinned Fold also names
PipelineAlgo, with the project's own Fold config (checkpoints.migrations), but no stage classes."""


def pickle_text(path: str | Path) -> bytes:
    """data.pkl of a torch zip checkpoint (names and strings, no tensor data), or b""."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            pickles = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            return z.read(pickles[0]) if pickles else b""
    except (OSError, zipfile.BadZipFile):
        return b""


UPSTREAM_PI_MARKERS = (b"egomimic.algo", b"paligemma_with_expert")
"""An upstream PI checkpoint: upstream's algorithm and openpi's PI0Pytorch weights."""


def is_upstream_pi_checkpoint(path: str | Path) -> bool:
    data = pickle_text(path)
    return all(marker in data for marker in UPSTREAM_PI_MARKERS)


def is_upstream_checkpoint(path: str | Path) -> bool:
    """Whether `path` is an upstream stage-pipeline checkpoint (read from the pickle's text,
    nothing unpickled): a Lightning zip whose data.pkl names UPSTREAM_MARKERS."""
    data = pickle_text(path)
    return all(marker in data for marker in UPSTREAM_MARKERS)


COMPAT_VERSION = "upstream-1"
"""Cache entries of upstream checkpoints; bump when the preparation below changes."""
KEPT = ("state_dict", "epoch", "global_step", "pytorch-lightning_version")


def prepare_artifact(ckpt: Mapping) -> tuple[dict, dict]:
    """What the policy loads: the weights, the config tree and norm stats as plain data (readable
    with weights_only=True), without optimizer state, loops and callbacks."""
    hp = ckpt["hyper_parameters"]
    artifact = {k: ckpt[k] for k in KEPT if k in ckpt}
    artifact["hyper_parameters"] = {"config_tree": hp["config_tree"], "norm_stats_state": hp["norm_stats_state"]}
    dropped = sorted(k for k in ckpt if k not in KEPT and k != "hyper_parameters")
    return artifact, {
        "layout": "upstream EgoVerse PipelineAlgo",
        "config_sha256": config_sha256(ckpt),
        "dropped": dropped,
    }


def make_upstream_policy(
    path: str | Path,
    *,
    cache_dir: Path | None = None,
    pin_config_sha256: str | None = None,
    seed: int = 0,
    device: str = "cpu",
    num_threads: int = 1,
    embodiment_id: int | None = None,
) -> UpstreamRolloutPolicy:
    """The live policy of an upstream checkpoint, through the cache: the source is read through
    the allow-listed unpickler and never written; the prepared artifact is built once and the
    next start reuses it (writes nothing)."""
    from egomimic_policy.checkpoints.cache import prepare_cached
    from egomimic_policy.checkpoints.layout import load_checkpoint
    from egomimic_policy.features import EMBODIMENT
    from egomimic_policy.upstream.checkpoint import load_upstream
    from egomimic_policy.upstream.pipeline import build

    source = load_upstream(path)
    pinned = config_sha256(source)
    if pin_config_sha256 and pin_config_sha256 != pinned:
        raise CheckpointError(
            f"{path}: model config SHA-256 is {pinned}, the pin (config_sha256) says {pin_config_sha256}"
        )
    prepared = prepare_cached(
        path,
        compat_version=COMPAT_VERSION,
        prepare=prepare_artifact,
        cache_dir=cache_dir,
        pin_config_sha256=pin_config_sha256,
        source_checkpoint=source,
    )
    del source
    artifact = load_checkpoint(prepared.artifact_path)
    algo, norm, notes = build(artifact)
    emb = int(EMBODIMENT) if embodiment_id is None else int(embodiment_id)
    extra = {
        "checkpoint": str(path),
        "artifact": str(prepared.artifact_path),
        "cache": "reused" if prepared.reused else "built",
        "epoch": str(artifact.get("epoch")),
        "global_step": str(artifact.get("global_step")),
    }
    if notes:
        extra["migrations"] = "; ".join(notes)
    return UpstreamRolloutPolicy(
        algo,
        norm,
        artifact,
        embodiment_id=emb,
        fingerprint=prepared.fingerprint,
        seed=seed,
        device=device,
        num_threads=num_threads,
        extra=extra,
    )
