"""Upstream EgoVerse's PI policy: openpi's `PI0Pytorch` (pi0 / pi0.5) inside upstream's `PI` algorithm.

Followed (GaTech-RL2/EgoVerse): `egomimic/algo/pi.py` and `egomimic/algo/pi/algo.py` (class `PI`, the
`_target_` of `robomimic_model`; `egomimic.algo.zoo.pi.PI` in later trees, with the old paths kept as
shims), `egomimic/models/preprocess_pi_obs.py`, `egomimic/utils/action_utils.py` (commit 18c48e2),
`egomimic/robot/rollout.py` (`PolicyRollout._load_policy`); openpi (Physical-Intelligence/openpi):
`src/openpi/models_pytorch/pi0_pytorch.py`, `src/openpi/shared/image_tools.py`.

- Model: `PI.__init__` builds `PI0Pytorch(Pi0Config(dtype=config.pytorch_training_precision,
  action_dim, action_horizon, max_token_len, paligemma_variant="gemma_2b",
  action_expert_variant="gemma_300m", pi05))` from `robomimic_model.config[.model]` and stores it
  as `nets["policy"]`; Lightning saves its weights as `nets.policy.<PI0Pytorch key>`. pi0.5:
  PaliGemma (SigLIP + gemma_2b) prefix, a gemma_300m action expert with adaRMS time conditioning,
  `time_mlp_in/out`; pi0 has `state_proj` and `action_time_mlp_in/out` instead. Sampling: Euler
  flow from noise at t=1 to t=0 in `num_sampling_steps` (10) steps, (B, horizon, action_dim).
- Images: the three EVA cameras go to openpi's slots (`PI_CAMERA_SLOTS`) as RGB floats in [0, 1]
  at their native size, are mapped to [-1, 1] (x * 2 - 1) and only then resized with pad to
  224x224 (`resize_with_pad_torch`: aspect kept, `int(size / ratio)`, bilinear with
  align_corners=False and no antialiasing, clamp to [-1, 1], centred pad of -1.0 with the odd
  row/column at the bottom/right). A 480x640 frame becomes rows 28..195 of content.
- State: upstream hands the (normalized) 20-D `state_ee_pose` to the model unpadded; pi0.5 never
  reads it (no `state_proj`), it sees the state only in the prompt (`State: <bins>`, below).
  `pad_state` zero-pads to the action width as openpi's `PadStatesAndActions` does, which pi0's
  `state_proj` (Linear(32, width)) needs.
- Prompt: `_build_prompts`: "Task: {task}, Embodiment: eva bimanual, Control mode: ..., State:
  {bins};\\nAction: " with the blocks the config enables (the bare task when none is), the state
  clipped to [-1, 1] and digitized into `state_num_bins` bins; tokenized by the HF PaliGemma
  tokenizer padded to `tokenizer_max_length`.
- Actions: `from32_norm_6d`: the normalized EVA action is the first 20 of the action_dim outputs
  (left [xyz, rot6d, gripper] 0..9, right 10..19; 20.. are padding); the caller unnormalizes it
  with the checkpoint's `actions_cartesian` stats. Older trees' `legacy_normalized_ypr_rot6d` /
  `cartesian_ypr_raw_rot6d` encodings decode to 14-D xyz+ypr instead: refused.

Everything but `load_upstream_pi` runs without openpi. That needs openpi's PyTorch port, its
patched transformers==4.53.2 and the PaliGemma tokenizer, none of which is on this project's
package registry; without them it refuses with what the checkpoint is and what to install. The
project's own `pi` family (egomimic_policy/families/pi.py) is a small self-trained CPU model,
not this one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from egomimic_hw.embodiment import LEGACY_MIGRATION, Embodiment
from egomimic_hw.errors import ConfigError
from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.features import ACTION_DIM, ACTION_KEY
from egomimic_policy.upstream.pipeline import load_strict

PI_TARGETS = frozenset({"egomimic.algo.pi.PI", "egomimic.algo.pi.algo.PI", "egomimic.algo.zoo.pi.PI"})
"""`_target_` of `config_tree.model.robomimic_model` in an upstream PI checkpoint."""
WRAPPER_PREFIX = "nets.policy."
"""What upstream's wrapper puts before every PI0Pytorch key (`ModelWrapper.nets = PI.nets`)."""
COMPILED_SEGMENT = "_orig_mod"
"""The key segment `torch.compile(module)` adds (upstream compiles in place, but older runs did not)."""
PI0_MODULES = frozenset(
    {
        "paligemma_with_expert",
        "action_in_proj",
        "action_out_proj",
        "time_mlp_in",  # pi0.5
        "time_mlp_out",
        "state_proj",  # pi0
        "action_time_mlp_in",
        "action_time_mlp_out",
    }
)
"""The top-level submodules of openpi's PI0Pytorch (pi0_pytorch.py `PI0Pytorch.__init__`)."""
TIED_WEIGHTS = (
    "paligemma_with_expert.paligemma.lm_head.weight",
    "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight",
)
"""One tensor under two names in PI0Pytorch's state dict (openpi `save_model` deduplicates them)."""

PI_CAMERA_SLOTS: Mapping[str, str] = {
    "front_1": "base_0_rgb",
    "left_wrist": "left_wrist_0_rgb",
    "right_wrist": "right_wrist_0_rgb",
}
"""EVA camera -> openpi image slot (upstream preprocess_pi_obs.PI_CAMERA_SLOTS: front_img_1,
left_wrist_img, right_wrist_img, i.e. dataset keys images.front_1 / left_wrist / right_wrist)."""
IMAGE_SIZE = (224, 224)
PAD_VALUE = -1.0
"""openpi pads float images with -1 (black in [-1, 1])."""
REFUSED_ACTION_ENCODINGS = {
    "legacy_normalized_ypr_rot6d": "rot6d of the NORMALIZED yaw/pitch/roll, decoded to 14-D xyz+ypr",
    "cartesian_ypr_raw_rot6d": "raw-rotation rot6d, decoded to 14-D xyz+ypr",
}
"""Older upstream `action_encoding`s: their output is not EVA's 20-D wrist-relative layout."""


@dataclass(frozen=True)
class PISpec:
    """What the checkpoint's `robomimic_model` config says, with upstream `PI.__init__` defaults."""

    pi05: bool
    action_dim: int
    action_horizon: int
    max_token_len: int
    paligemma_variant: str
    action_expert_variant: str
    precision: str
    num_steps: int
    image_size: tuple[int, int]
    ac_key: str
    action_encoding: str | None
    tokenizer_model_name: str
    tokenizer_max_length: int | None
    default_prompt: str
    proprio_in_prompt: bool
    embodiment_label: bool
    state_num_bins: int
    control_mode: Mapping[str, str] | None

    @property
    def variant(self) -> str:
        return "pi0.5" if self.pi05 else "pi0"


def _robomimic_model(ckpt_plain: Mapping) -> Mapping | None:
    hp = ckpt_plain.get("hyper_parameters") if isinstance(ckpt_plain, Mapping) else None
    tree = hp.get("config_tree") if isinstance(hp, Mapping) else None
    model = tree.get("model") if isinstance(tree, Mapping) else None
    node = model.get("robomimic_model") if isinstance(model, Mapping) else None
    return node if isinstance(node, Mapping) else None


def is_upstream_pi(ckpt_plain: Mapping) -> bool:
    """Whether a plain-data upstream checkpoint (checkpoint.load_upstream) holds upstream's PI."""
    node = _robomimic_model(ckpt_plain)
    return node is not None and node.get("_target_") in PI_TARGETS


def pi_spec(ckpt_plain: Mapping) -> PISpec:
    """The PI config of an upstream checkpoint; a missing required field is refused by path."""
    node = _robomimic_model(ckpt_plain)
    if node is None or node.get("_target_") not in PI_TARGETS:
        raise CheckpointError("not an upstream EgoVerse PI checkpoint (config_tree.model.robomimic_model._target_)")
    config = node.get("config")
    model = config.get("model") if isinstance(config, Mapping) else None
    if not isinstance(config, Mapping) or not isinstance(model, Mapping):
        raise CheckpointError("upstream PI checkpoint without robomimic_model.config.model")

    def required(table: Mapping, key: str, where: str) -> Any:
        if table.get(key) is None:
            raise CheckpointError(f"upstream PI checkpoint: robomimic_model.{where}{key} is missing")
        return table[key]

    # openpi's fixed camera tuple; upstream lets the config rename or reorder it (pi_camera_slots,
    # formerly pi_cam_keys), which this boundary does not reproduce.
    slots = node.get("pi_camera_slots")
    if slots is not None and dict(slots) != {
        "base_0_rgb": "observations.images.front_img_1",
        "left_wrist_0_rgb": "observations.images.left_wrist_img",
        "right_wrist_0_rgb": "observations.images.right_wrist_img",
    }:
        raise CheckpointError(f"upstream PI checkpoint with custom pi_camera_slots {dict(slots)} is not supported")
    cam_keys = node.get("pi_cam_keys")
    if cam_keys is not None and list(cam_keys) != list(PI_CAMERA_SLOTS.values()):
        raise CheckpointError(f"upstream PI checkpoint with custom pi_cam_keys {list(cam_keys)} is not supported")
    ac_keys = node.get("ac_keys")
    max_length = node.get("tokenizer_max_length", 128)
    control_mode = node.get("control_mode")
    return PISpec(
        pi05=bool(model.get("pi05", False)),
        action_dim=int(required(model, "action_dim", "config.model.")),
        action_horizon=int(required(model, "action_horizon", "config.model.")),
        max_token_len=int(required(model, "max_token_len", "config.model.")),
        paligemma_variant=str(model.get("paligemma_variant") or "gemma_2b"),
        action_expert_variant=str(model.get("action_expert_variant") or "gemma_300m"),
        precision=str(required(config, "pytorch_training_precision", "config.")),
        num_steps=int(config.get("num_sampling_steps") or 10),
        image_size=(int(size[0]), int(size[1])) if (size := node.get("image_resolution")) else IMAGE_SIZE,
        ac_key=str(ac_keys.get("eva_bimanual", ACTION_KEY)) if isinstance(ac_keys, Mapping) else ACTION_KEY,
        action_encoding=str(enc) if (enc := node.get("action_encoding")) is not None else None,
        tokenizer_model_name=str(node.get("tokenizer_model_name") or "google/paligemma-3b-mix-224"),
        tokenizer_max_length=None if max_length is None else int(max_length),
        default_prompt=str(node.get("default_prompt") or ""),
        proprio_in_prompt=bool(node.get("proprio_in_prompt", False)),
        embodiment_label=bool(node.get("embodiment_label", False)),
        state_num_bins=int(node.get("state_num_bins", 256)),
        control_mode={str(k): str(v) for k, v in control_mode.items()} if isinstance(control_mode, Mapping) else None,
    )


def check_action_layout(ckpt_plain: Mapping, spec: PISpec) -> None:
    """Refuse a checkpoint whose actions do not decode to EVA's 20-D layout: an older encoding, a
    different action key, or EVA action stats of another width (14: xyz+ypr per arm)."""
    if spec.action_encoding in REFUSED_ACTION_ENCODINGS:
        raise CheckpointError(
            f"upstream PI action_encoding {spec.action_encoding!r} "
            f"({REFUSED_ACTION_ENCODINGS[spec.action_encoding]}) is not EVA's 20-D layout"
        )
    if spec.ac_key != ACTION_KEY:
        raise CheckpointError(f"upstream PI action key {spec.ac_key!r}: only {ACTION_KEY} decodes here")
    hp = ckpt_plain.get("hyper_parameters") or {}
    stats = (hp.get("norm_stats_state") or {}).get("norm_stats") or {}
    eva_ids = {int(Embodiment.EVA_BIMANUAL)} | {k for k, v in LEGACY_MIGRATION.items() if v is Embodiment.EVA_BIMANUAL}
    for emb_id, keys in stats.items():
        is_eva = str(emb_id).isdigit() and int(emb_id) in eva_ids
        entry = keys.get(spec.ac_key) if is_eva and isinstance(keys, Mapping) else None
        bound = entry.get("quantile_1", entry.get("min")) if isinstance(entry, Mapping) else None
        if bound is not None and int(np.asarray(_numpy(bound)).size) != ACTION_DIM:
            raise CheckpointError(
                f"upstream PI {spec.ac_key} stats of embodiment {emb_id} are {np.asarray(_numpy(bound)).size}-wide, "
                f"not EVA's {ACTION_DIM}-D xyz+rot6d+gripper layout"
            )


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def openpi_state_dict(state_dict: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Upstream checkpoint keys -> the names `PI0Pytorch.load_state_dict` takes: `_orig_mod`
    segments dropped, `nets.policy.` stripped, the tied embedding filled in when only one of its
    two names was saved. A key outside `nets.policy.<PI0Pytorch submodule>` is refused by name."""
    if not isinstance(state_dict, Mapping) or not state_dict:
        raise CheckpointError("the upstream PI checkpoint has no state_dict")
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        name = ".".join(part for part in str(key).split(".") if part != COMPILED_SEGMENT)
        if not name.startswith(WRAPPER_PREFIX):
            raise CheckpointError(f"state_dict key {key!r} is not under upstream PI's {WRAPPER_PREFIX!r}")
        name = name[len(WRAPPER_PREFIX) :]
        top = name.split(".", 1)[0]
        if top not in PI0_MODULES:
            raise CheckpointError(
                f"state_dict key {key!r}: {top!r} is not a module of openpi's PI0Pytorch ({', '.join(sorted(PI0_MODULES))})"
            )
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"state_dict key {key!r} holds a {type(value).__name__}, not a tensor")
        if name in out:
            raise CheckpointError(f"state_dict keys collide once {COMPILED_SEGMENT!r} is dropped: {key!r}")
        out[name] = value
    present = [k for k in TIED_WEIGHTS if k in out]
    if len(present) == 1:
        (other,) = set(TIED_WEIGHTS) - set(present)
        out[other] = out[present[0]]
    return out


def parameter_count(state_dict: Mapping[str, torch.Tensor]) -> int:
    """Parameters in a state dict, a tensor stored under two names (tied weights) counted once."""
    seen: set[Any] = set()
    total = 0
    for tensor in state_dict.values():
        if tensor.device.type == "meta":
            ident: Any = id(tensor)
        else:
            ident = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if ident not in seen:
            seen.add(ident)
            total += tensor.numel()
    return total


def describe(spec: PISpec, state_dict: Mapping[str, torch.Tensor]) -> str:
    n = parameter_count(state_dict)
    return (
        f"an upstream EgoVerse PI checkpoint: openpi PI0Pytorch {spec.variant} (PaliGemma {spec.paligemma_variant} "
        f"+ {spec.action_expert_variant} action expert), {n:,} parameters ({n / 1e9:.2f}B) in {len(state_dict)} "
        f"tensors, action_dim {spec.action_dim}, horizon {spec.action_horizon}, {spec.num_steps} flow steps"
    )


# ---- boundary conversions (pure; no openpi) ----


def resize_with_pad(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """openpi `resize_with_pad_torch` for float images in [-1, 1], channels first ((C, H, W) or
    (B, C, H, W)): scale to fit keeping the aspect ratio, bilinear (align_corners=False, no
    antialiasing), clamp to [-1, 1], pad with -1 centred, the odd row/column going bottom/right.
    An image already height x width is returned as it is (upstream skips the call then)."""
    if images.dtype != torch.float32 or images.dim() not in (3, 4):
        raise ConfigError(
            f"resize_with_pad: need float32 (C, H, W) or (B, C, H, W), got {images.dtype} {tuple(images.shape)}"
        )
    batch = images if images.dim() == 4 else images[None]
    cur_h, cur_w = batch.shape[-2:]
    if (cur_h, cur_w) == (height, width):
        return images
    ratio = max(cur_w / width, cur_h / height)
    new_h, new_w = int(cur_h / ratio), int(cur_w / ratio)
    resized = F.interpolate(batch, size=(new_h, new_w), mode="bilinear", align_corners=False).clamp(-1.0, 1.0)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    padded = F.pad(resized, (left, width - new_w - left, top, height - new_h - top), mode="constant", value=PAD_VALUE)
    return padded if images.dim() == 4 else padded[0]


def eva_image_to_pi(image: np.ndarray, size: tuple[int, int] = IMAGE_SIZE) -> torch.Tensor:
    """uint8 (H, W, 3) RGB -> float32 (3, size) in [-1, 1]: /255 as upstream's rollout does, then
    x * 2 - 1 (preprocess_pi_obs._to_minus1_1), then resize_with_pad."""
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise ConfigError(f"PI image: need uint8 (H, W, 3) RGB, got {arr.dtype} {arr.shape}")
    chw = torch.from_numpy(np.ascontiguousarray(arr)).permute(2, 0, 1).to(torch.float32) / 255.0
    return resize_with_pad(chw * 2.0 - 1.0, *size)


def pi_images(frames: Mapping[str, np.ndarray], size: tuple[int, int] = IMAGE_SIZE) -> dict[str, torch.Tensor]:
    """EVA camera frames (uint8 RGB, by camera name) -> openpi's image slots, (3, size) each."""
    missing = sorted(set(PI_CAMERA_SLOTS) - set(frames))
    if missing:
        raise ConfigError(f"PI needs cameras {list(PI_CAMERA_SLOTS)}; missing {missing}")
    return {slot: eva_image_to_pi(frames[camera], size) for camera, slot in PI_CAMERA_SLOTS.items()}


def pad_state(state: np.ndarray, dim: int = 32) -> np.ndarray:
    """(..., D) -> (..., dim) float32, zeros appended (openpi `pad_to_dim`); longer is refused."""
    arr = np.asarray(state, dtype=np.float32)
    if arr.ndim == 0 or arr.shape[-1] > dim:
        raise ConfigError(f"PI state: need (..., D <= {dim}), got {arr.shape}")
    return np.pad(arr, [(0, 0)] * (arr.ndim - 1) + [(0, dim - arr.shape[-1])])


def actions_to_eva(actions: np.ndarray | torch.Tensor) -> np.ndarray:
    """(H, action_dim) model output -> (H, 20) EVA action, still normalized: columns 0..19
    (upstream `RobotBimanualCartesianEuler.from32_norm_6d`), the rest is padding."""
    arr = np.asarray(actions.detach().float().cpu().numpy() if isinstance(actions, torch.Tensor) else actions)
    if arr.ndim != 2 or arr.shape[1] < ACTION_DIM:
        raise ConfigError(f"PI actions: need (H, >= {ACTION_DIM}), got {arr.shape}")
    return np.array(arr[:, :ACTION_DIM], dtype=np.float64)


def state_bins(state_normalized: np.ndarray, num_bins: int = 256) -> str:
    """The prompt's `State:` block (PI._discretize_state_for_sample): the normalized state clipped
    to [-1, 1], bin k = [-1 + 2k/num_bins, -1 + 2(k+1)/num_bins), space-separated."""
    arr = np.clip(np.asarray(state_normalized, dtype=np.float32).reshape(-1), -1.0, 1.0)
    edges = np.linspace(-1.0, 1.0, num_bins + 1)[:-1]
    return " ".join(str(int(b)) for b in np.digitize(arr, bins=edges) - 1)


def build_prompt(
    task: str, spec: PISpec, *, state_normalized: np.ndarray | None, embodiment: str = "eva_bimanual"
) -> str:
    """The text PI was trained on (PI._build_prompts): the bare task, or when any block is enabled
    "Task: {task}, Embodiment: ..., Control mode: ..., State: ...;\\nAction: "."""
    prompt = task or spec.default_prompt
    if not (spec.proprio_in_prompt or spec.embodiment_label or spec.control_mode):
        return prompt
    name = embodiment.lower().replace("_", " ")
    blocks = [f"Task: {prompt}"]
    if spec.embodiment_label:
        blocks.append(f"Embodiment: {name}")
    if spec.control_mode:
        modes = [v for k, v in spec.control_mode.items() if k.lower() in name]
        if not modes:
            raise CheckpointError(f"upstream PI control_mode {dict(spec.control_mode)} has no entry for {name!r}")
        blocks.append(f"Control mode: {modes[0]}")
    if spec.proprio_in_prompt and state_normalized is not None:
        blocks.append(f"State: {state_bins(state_normalized, spec.state_num_bins)}")
    return ", ".join(blocks) + ";\nAction: "


# ---- the model (needs openpi) ----


@dataclass
class UpstreamPI:
    """openpi's PI0Pytorch with the checkpoint's weights, its config, and the PaliGemma tokenizer."""

    model: nn.Module
    spec: PISpec
    tokenizer: Any
    device: torch.device

    @torch.inference_mode()
    def infer(
        self,
        frames: Mapping[str, np.ndarray],
        state_normalized: np.ndarray,
        task: str,
        *,
        noise: np.ndarray | None = None,
    ) -> np.ndarray:
        """One query: EVA frames and normalized state -> normalized EVA actions (horizon, 20).
        Follows PI._robomimic_to_pi_data and PI.forward_eval for a batch of one."""
        images = {slot: img[None].to(self.device) for slot, img in pi_images(frames, self.spec.image_size).items()}
        length = self.spec.tokenizer_max_length
        enc = self.tokenizer(
            [build_prompt(task, self.spec, state_normalized=state_normalized)],
            padding="max_length" if length is not None else "longest",
            truncation=True,
            max_length=length,
            return_tensors="pt",
        )
        mask = enc["attention_mask"].bool().to(self.device)
        loss_mask = mask.clone()
        loss_mask[:, -1] = False
        observation = SimpleNamespace(
            images=images,
            image_masks={slot: torch.ones(1, dtype=torch.bool, device=self.device) for slot in images},
            state=torch.from_numpy(pad_state(state_normalized, self.spec.action_dim))[None].to(self.device),
            tokenized_prompt=enc["input_ids"].to(self.device),
            tokenized_prompt_mask=mask,
            token_ar_mask=mask.clone(),
            token_loss_mask=loss_mask,
        )
        x0 = None if noise is None else torch.as_tensor(np.asarray(noise, dtype=np.float32))[None].to(self.device)
        sample_actions: Any = self.model.sample_actions  # openpi's method (nn.Module types it Tensor | Module)
        out = sample_actions(self.device, observation, noise=x0, num_steps=self.spec.num_steps)
        return actions_to_eva(out[0])


def openpi_missing_message(spec: PISpec, state_dict: Mapping[str, torch.Tensor], reason: object) -> str:
    return (
        f"{describe(spec, state_dict)}. Running it needs openpi's PyTorch port, its patched "
        f"transformers==4.53.2 and the PaliGemma tokenizer ({spec.tokenizer_model_name}), none of which is "
        "on this project's package registry. Where the checkpoint runs, install the optional extra `openpi` "
        "(see pyproject.toml): pip install 'openpi @ git+https://github.com/Physical-Intelligence/openpi' "
        "transformers==4.53.2, then copy openpi's src/openpi/models_pytorch/transformers_replace over the "
        "installed transformers. The project's own `pi` family (egomimic_policy/families/pi.py) is a "
        f"different, small self-trained CPU model and cannot load this checkpoint. ({reason})"
    )


def _match_action_width(model: nn.Module, action_dim: int) -> None:
    """openpi's port hard-codes 32-wide action projections; upstream (PI._resize_action_projections)
    swaps in `action_dim`-wide ones when action_dim != 32, and so must the model that loads them."""
    old_in, old_out = model.action_in_proj, model.action_out_proj
    if not isinstance(old_in, nn.Linear) or not isinstance(old_out, nn.Linear) or old_in.in_features == action_dim:
        return
    dtype, device = old_in.weight.dtype, old_in.weight.device
    model.action_in_proj = nn.Linear(action_dim, old_in.out_features).to(dtype=dtype, device=device)
    model.action_out_proj = nn.Linear(old_out.in_features, action_dim).to(dtype=dtype, device=device)


def load_upstream_pi(ckpt_plain: Mapping, device: str | torch.device = "cpu") -> UpstreamPI:
    """Build upstream's PI0Pytorch from the checkpoint's config (egomimic/algo/pi.py `PI.__init__`),
    load its weights strictly and return it with the tokenizer. openpi is imported here only: without
    it (or its patched transformers, or the tokenizer) this raises CheckpointError saying what is needed."""
    spec = pi_spec(ckpt_plain)
    check_action_layout(ckpt_plain, spec)
    state_dict = openpi_state_dict(ckpt_plain.get("state_dict") or {})
    try:
        pi0_config = importlib.import_module("openpi.models.pi0_config")
        pi0_pytorch = importlib.import_module("openpi.models_pytorch.pi0_pytorch")
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise CheckpointError(openpi_missing_message(spec, state_dict, exc)) from exc
    config = pi0_config.Pi0Config(
        dtype=spec.precision,
        action_dim=spec.action_dim,
        action_horizon=spec.action_horizon,
        max_token_len=spec.max_token_len,
        paligemma_variant=spec.paligemma_variant,
        action_expert_variant=spec.action_expert_variant,
        pi05=spec.pi05,
    )
    try:  # PI0Pytorch raises ValueError when openpi's transformers_replace patch is missing
        model = pi0_pytorch.PI0Pytorch(config)
    except ValueError as exc:
        raise CheckpointError(openpi_missing_message(spec, state_dict, exc)) from exc
    _match_action_width(model, spec.action_dim)
    # egomimic/robot/rollout.py: drop openpi's torch.compile wrapper of sample_actions (~50 s first call)
    if "sample_actions" in vars(model):
        del model.sample_actions
    # The checkpoint holds every weight: upstream's base-weight load (pytorch_weight_path) is skipped.
    load_strict(model, state_dict)
    model.to(device).eval()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(spec.tokenizer_model_name)
    except (OSError, ValueError) as exc:
        raise CheckpointError(openpi_missing_message(spec, state_dict, exc)) from exc
    return UpstreamPI(model=model, spec=spec, tokenizer=tokenizer, device=torch.device(device))
