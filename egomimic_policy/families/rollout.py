"""The live policy of a family: Observation in, absolute dataset-frame Chunk out.

One query, in order (each step once):
1. validate the observation; encode this frame's images (resized, cv2.INTER_AREA) and its
   `state_ee_pose` (20,); append both to the window (at episode start the first frame fills
   every slot, as upstream's EvaObservationWindow does);
2. normalize the window's state ONCE with the checkpoint's stats;
3. sample the normalized chunk (seeded torch.Generator, torch.inference_mode); with a committed
   `observation.prefix` (executor blend `inpaint`), its rows are encoded exactly as actions are
   (wrist-relative against THIS observation's poses, normalized once with the action stats)
   and the sampler inpaints them (fold.py / pi.py, "Inpainting"): the chunk's first rows are
   the committed ones, the rest is generated to continue them. A prefix longer than the chunk
   is cut to the chunk length;
4. unnormalize once; decode every row against the poses captured in THIS observation (not the
   previous frame's, not the live pose); grippers clamped to [0, 1];
5. return a Chunk stamped with observation.stamp_ns, period 1/30 s.
Anything non-finite raises: the executor treats a raise as "no chunk", never as motion.

torch threads: `torch.set_num_threads(num_threads)` is process-wide; the default 1 leaves the
other cores to the control graph sharing the machine.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np
import torch

from egomimic_hw.description import CONTROL_RATE_HZ, Arm
from egomimic_hw.errors import ConfigError, PoseError
from egomimic_policy.features import (
    ACTION_KEY,
    ACTION_LAYOUT,
    EMBODIMENT,
    STATE_KEY,
    chunk_answering,
    encode_action_chunk,
    state_ee_pose,
)
from egomimic_policy.interface import Chunk, Observation, PolicySpec, phase_timings_ms
from egomimic_policy.normalization import NormStats


def resolve_device(device: str) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but this torch has no CUDA device; use 'cpu'")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device {device!r} is not supported; choices: cpu, cuda")
    return dev


class FamilyRolloutPolicy:
    """ChunkPolicy over a families Algorithm. `last_timing_ms` holds the phases of the last query
    (encode, model, decode, total) from a monotonic clock. infer() and reset() are serialized by
    a lock: the executor queries from a worker thread and may reset from another."""

    def __init__(
        self,
        algorithm,
        norm_stats: NormStats,
        *,
        fingerprint: str,
        seed: int = 0,
        num_threads: int = 1,
        device: str = "cpu",
        extra: Mapping[str, str] | None = None,
    ):
        if not isinstance(num_threads, int) or num_threads < 1:
            raise ConfigError(f"num_threads must be an int >= 1, got {num_threads!r}")
        torch.set_num_threads(num_threads)
        self._device = resolve_device(device)
        self.algorithm = algorithm.eval().to(self._device)
        self.norm_stats = norm_stats
        self._seed = int(seed)
        self._generator = torch.Generator(self._device.type)
        self._n_obs = int(algorithm.config.n_obs_steps)
        self._features: OrderedDict[int, torch.Tensor] = OrderedDict()
        """Image features by observation stamp: with cadence `always` the previous query's
        current frame is this query's previous frame, encoded once."""
        self.last_timing_ms: dict[str, float] = {}
        self._lock = threading.Lock()
        cfg = algorithm.config
        self.spec = PolicySpec(
            family=algorithm.family,
            fingerprint=fingerprint,
            embodiment=EMBODIMENT.key,
            action_layout=ACTION_LAYOUT,
            chunk_length=cfg.chunk_length,
            rate_hz=CONTROL_RATE_HZ,
            obs_steps=self._n_obs,
            extra={
                "target": algorithm.target(),
                "n_obs_steps": str(cfg.n_obs_steps),
                "seed": str(self._seed),
                "device": str(self._device),
                "num_threads": str(num_threads),
                **dict(extra or {}),
            },
        )
        self.reset()

    def reset(self) -> None:
        """New episode: the sampler noise restarts from the seed (a replayed episode gets the same
        chunks). The observation window itself travels in Observation.history (the observer
        clears it on its reset)."""
        with self._lock:
            self._features.clear()
            self._generator.manual_seed(self._seed)

    def sampler_state(self) -> torch.Tensor:
        """The sampler's noise state now: with restore_sampler_state, the replay regression answers
        one recorded query from several candidate observations with the noise the node used."""
        with self._lock:
            return self._generator.get_state()

    def restore_sampler_state(self, state: torch.Tensor) -> None:
        """Back to `state` (sampler_state), and the image features cache emptied: candidates of one
        stamp may hold different frames, which that cache (keyed by stamp) would not tell apart."""
        with self._lock:
            self._generator.set_state(state)
            self._features.clear()

    def _frame_features(self, frame: Observation) -> torch.Tensor:
        key = int(frame.stamp_ns)
        if key not in self._features:
            self._features[key] = self.algorithm.frame_features(frame.images)
            while len(self._features) > 2 * self._n_obs:
                self._features.popitem(last=False)
        return self._features[key]

    def infer(self, observation: Observation) -> Chunk:
        with self._lock:
            return self._infer(observation)

    def _infer(self, observation: Observation) -> Chunk:
        t0 = time.monotonic()
        if not isinstance(observation.stamp_ns, (int, np.integer)):
            raise ConfigError(f"observation.stamp_ns must be an int (ns), got {observation.stamp_ns!r}")
        current = {
            Arm.LEFT: np.asarray(observation.left_pose, dtype=np.float64),
            Arm.RIGHT: np.asarray(observation.right_pose, dtype=np.float64),
        }
        for arm, pose in current.items():
            if pose.shape != (7,):
                raise PoseError(f"{arm.value}_pose must be (7,), got {pose.shape}")
        frames = list(observation.history[-(self._n_obs - 1) :]) if self._n_obs > 1 else []
        frames = [frames[0] if frames else observation] * (self._n_obs - 1 - len(frames)) + frames + [observation]
        window = []
        with torch.inference_mode():
            for frame in frames:  # oldest first; padded at episode start by repeating the oldest
                state = state_ee_pose(
                    np.asarray(frame.left_pose, dtype=np.float64),
                    frame.left_gripper,
                    np.asarray(frame.right_pose, dtype=np.float64),
                    frame.right_gripper,
                )
                window.append((self._frame_features(frame), state))
            state_window = np.stack([s for _, s in window])  # (T, 20) raw
            state_n = self.norm_stats.normalize(EMBODIMENT, STATE_KEY, state_window)
            t1 = time.monotonic()
            context = self.algorithm.condition(
                torch.stack([f for f, _ in window], dim=1),
                torch.as_tensor(state_n, dtype=torch.float32, device=self._device)[None],
            )
            prefix_n = self._encoded_prefix(observation, current)
            if prefix_n is None:
                actions_n = self.algorithm.sample(context, self._generator)[0].double().cpu().numpy()
            else:
                prefix_t = torch.as_tensor(prefix_n, dtype=torch.float32, device=self._device)[None]
                actions_n = self.algorithm.sample(context, self._generator, prefix=prefix_t)[0].double().cpu().numpy()
        t2 = time.monotonic()
        if not np.all(np.isfinite(actions_n)):
            raise PoseError(f"{self.algorithm.family} produced non-finite actions")
        actions = self.norm_stats.unnormalize(EMBODIMENT, ACTION_KEY, actions_n)
        chunk = chunk_answering(observation, actions)
        t3 = time.monotonic()
        self.last_timing_ms = phase_timings_ms(t0, t1, t2, t3)
        return chunk

    def _encoded_prefix(self, observation: Observation, current: dict[Arm, np.ndarray]) -> np.ndarray | None:
        """(n, 20) normalized committed prefix of `observation`, or None. Refused (ConfigError /
        PoseError) when it does not answer this observation at this rate, or is malformed."""
        prefix = observation.prefix
        if prefix is None or len(prefix) == 0:
            return None
        if int(prefix.observation_stamp_ns) != int(observation.stamp_ns):
            raise ConfigError(
                f"prefix answers observation {prefix.observation_stamp_ns} ns, not this one ({observation.stamp_ns} ns)"
            )
        if not np.isclose(prefix.period_s, 1.0 / CONTROL_RATE_HZ, rtol=1e-6):
            raise ConfigError(f"prefix period {prefix.period_s} s is not the control period {1.0 / CONTROL_RATE_HZ} s")
        n = min(len(prefix), int(self.algorithm.config.chunk_length))
        targets, grippers = {}, {}
        for arm, pose, gripper in (
            (Arm.LEFT, prefix.left_pose, prefix.left_gripper),
            (Arm.RIGHT, prefix.right_pose, prefix.right_gripper),
        ):
            pose = np.asarray(pose, dtype=np.float64)[:n]
            gripper = np.asarray(gripper, dtype=np.float64)[:n]
            if pose.shape != (n, 7) or gripper.shape != (n,):
                raise PoseError(
                    f"prefix {arm.value}: poses must be (n, 7) and grippers (n,), got {pose.shape}, {gripper.shape}"
                )
            if not (np.all(np.isfinite(pose)) and np.all(np.isfinite(gripper))):
                raise PoseError(f"prefix {arm.value}: non-finite value")
            targets[arm], grippers[arm] = pose, gripper
        return self.norm_stats.normalize(EMBODIMENT, ACTION_KEY, encode_action_chunk(current, targets, grippers))
