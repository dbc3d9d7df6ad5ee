"""Training windows over recorded EVA episodes, in exactly the form rollout builds its queries.

One window per episode step t (the "current" step, the query tick of a rollout):
- images: the last `n_obs_steps` frames of each camera, oldest first (t - n + 1 .. t), RGB uint8
  as decoded from the episode's JPEG; at the episode start the first frame fills the missing
  slots, as upstream's EvaObservationWindow does at the start of a rollout;
- state (n_obs_steps, 20): `state_ee_pose` of the MEASURED poses and grippers (`obs_ee_pose`,
  `obs_gripper`, dataset frame) of the same frames;
- actions (chunk_length, 20): the COMMANDED poses and grippers (`cmd_ee_pose`, `cmd_gripper`)
  of steps t .. t + H - 1, wrist-relative against the measured pose at t (features.
  encode_action_chunk, the inverse of what rollout decodes against the query tick's pose).
  Row 0 is the command issued at t, as a chunk's row 0 is executed at its observation's stamp
  (upstream fetches H + n_obs_steps - 1 rows of the window's first frame and drops the frames
  before the current one: the same rows). Past the episode end the last command repeats
  (upstream's padding) and `action_mask` is 0 there, so the loss ignores those rows.

Memory: the numeric arrays (a few floats per step) are read into RAM once. Images, two ways:
- full size (`image_size` None): decoded per item, with a small LRU of decoded frames bounded in
  bytes (neighbouring windows share frames);
- prepared (`image_size` (h, w), what `Algorithm.input_frame_size` names): each frame is decoded
  once and kept, resized with the family's own `resize_area` to the model's input size, in one
  uint8 array per episode (T, cameras, h, w, 3): 9 KiB a frame at 48x64, so every frame of 60
  episodes fits in ~0.4 GiB and steps after the first pass decode nothing. The family's
  `image_input` of a prepared frame equals that of the full frame (its resize to the same size
  is a no-op), so training sees exactly what rollout feeds the model. `preload(workers)` fills
  every frame up front, decoding in parallel processes.
Readers open lazily in each process, so DataLoader workers each hold their own.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from egomimic_data.episode_check import find_episodes, is_store
from egomimic_data.episode_format import STATUS_COMPLETE, EpisodeError, EpisodeReader, recording_in_progress
from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.embodiment import embodiment_by_name
from egomimic_hw.errors import ConfigError, PoseError
from egomimic_policy.families.base import resize_area
from egomimic_policy.features import EMBODIMENT, encode_action_chunk, state_ee_pose


class TrainingDataError(ConfigError):
    """The episodes cannot be trained on as given; the message names the episode and the fix."""


@dataclass(frozen=True)
class EpisodeArrays:
    """The numeric part of one episode, in RAM: per arm measured and commanded poses (T, 7) and
    grippers (T,), plus the state rows (T, 20) they give."""

    path: Path
    obs_pose: dict[Arm, np.ndarray]
    cmd_pose: dict[Arm, np.ndarray]
    cmd_gripper: dict[Arm, np.ndarray]
    state: np.ndarray

    @property
    def length(self) -> int:
        return int(self.state.shape[0])


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str


def discover_episodes(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every episode named: a path that is an episode store, or a directory of them (its child
    stores, by name, as `egomimic-episodes list` shows them)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise TrainingDataError(f"{path}: no such file or directory")
        if not path.is_dir():
            raise TrainingDataError(f"{path} is not an episode (a zarr store directory) nor a directory of them")
        stores = [path] if is_store(path) else find_episodes(path)
        if not stores:
            raise TrainingDataError(f"{path}: no episodes here (no zarr store, nor a directory of them)")
        found.extend(s for s in stores if s not in found)
    return found


def _status_problem(reader: EpisodeReader, include_partial: bool) -> str | None:
    """Why an episode is left out of training, or None. Upstream trains on complete episodes only."""
    if not reader.finalized and recording_in_progress(reader.path):
        return "being recorded by a live writer"
    if reader.data_status != STATUS_COMPLETE and not (include_partial and reader.data_status == "partial"):
        hint = " (include_partial: true trains on it)" if reader.data_status == "partial" else ""
        return f"data_status {reader.data_status!r}, not complete{hint}"
    if len(reader) < 1:
        return "no frames"
    return None


def _numeric(reader: EpisodeReader, key: str, width: int) -> np.ndarray:
    try:
        arr = np.asarray(reader.array(key), dtype=np.float64)
    except EpisodeError as exc:
        raise TrainingDataError(f"{reader.path}: {exc}") from None
    arr = arr.reshape(arr.shape[0], -1) if arr.ndim >= 1 else arr
    if arr.shape != (len(reader), width):
        raise TrainingDataError(f"{reader.path}: {key} has shape {arr.shape}, need ({len(reader)}, {width})")
    bad = np.flatnonzero(~np.all(np.isfinite(arr), axis=1))
    if bad.size:
        raise TrainingDataError(f"{reader.path}: {key} is not finite at step {int(bad[0])}")
    return arr


def read_episode_arrays(reader: EpisodeReader, cameras: Sequence[str]) -> EpisodeArrays:
    """Check that `reader` holds what training needs and read its numeric arrays."""
    name = reader.attrs.get("embodiment") or ""
    try:
        embodiment = embodiment_by_name(str(name))
    except ConfigError:
        embodiment = None
    if embodiment is not EMBODIMENT:
        raise TrainingDataError(f"{reader.path}: embodiment {name!r}, not {EMBODIMENT.key}: these families train EVA")
    missing = [c for c in cameras if c not in reader.cameras]
    if missing:
        raise TrainingDataError(
            f"{reader.path}: no camera {', '.join(map(repr, missing))} (it has {list(reader.cameras)}); "
            f"every training episode needs {list(cameras)}"
        )
    obs_pose, cmd_pose, obs_gripper, cmd_gripper = {}, {}, {}, {}
    for arm in ARMS:
        side = arm.value
        obs_pose[arm] = _numeric(reader, f"{side}.obs_ee_pose", 7)
        cmd_pose[arm] = _numeric(reader, f"{side}.cmd_ee_pose", 7)
        obs_gripper[arm] = _numeric(reader, f"{side}.obs_gripper", 1)[:, 0]
        cmd_gripper[arm] = _numeric(reader, f"{side}.cmd_gripper", 1)[:, 0]
    try:
        state = np.stack(
            [
                state_ee_pose(
                    obs_pose[Arm.LEFT][t], obs_gripper[Arm.LEFT][t], obs_pose[Arm.RIGHT][t], obs_gripper[Arm.RIGHT][t]
                )
                for t in range(len(reader))
            ]
        )
        # every commanded pose must be a rotation too: checked once here, not in a worker mid-epoch
        encode_action_chunk(
            {a: obs_pose[a][0] for a in ARMS}, {a: cmd_pose[a] for a in ARMS}, {a: cmd_gripper[a] for a in ARMS}
        )
    except PoseError as exc:
        raise TrainingDataError(f"{reader.path}: a pose is not usable: {exc}") from None
    return EpisodeArrays(reader.path, obs_pose, cmd_pose, cmd_gripper, state)


@dataclass
class Window:
    """One training item: images cam -> (T, H, W, 3) uint8, state (T, 20), actions (H, 20) raw
    units, action_mask (H,) 1 for real rows, and where it comes from."""

    images: dict[str, np.ndarray]
    state: np.ndarray
    actions: np.ndarray
    action_mask: np.ndarray
    episode: int
    step: int


@dataclass
class RawBatch:
    """A collated batch in the form `Algorithm.batch_from_raw` takes: images cam -> (B, T, H, W, 3)
    uint8 (an object array (B, T) of frames when episodes differ in image size), state (B, T, 20),
    actions (B, H, 20) in raw units, action_mask (B, H)."""

    images: dict[str, np.ndarray]
    state: np.ndarray
    actions: np.ndarray
    action_mask: np.ndarray
    episode: np.ndarray
    step: np.ndarray

    def __len__(self) -> int:
        return int(self.state.shape[0])


def _stack_frames(frames: list[np.ndarray]) -> np.ndarray:
    """(B, T, H, W, 3) when every frame has one size, else an object array (B, T) of frames
    (batch_from_raw resizes each frame on its own either way)."""
    if len({f.shape for f in frames}) == 1:
        return np.stack(frames)
    out = np.empty((len(frames), frames[0].shape[0]), dtype=object)
    for b, window in enumerate(frames):
        for t in range(window.shape[0]):
            out[b, t] = window[t]
    return out


def collate_windows(items: Sequence[Window]) -> RawBatch:
    if not items:
        raise TrainingDataError("cannot collate an empty batch")
    cams = list(items[0].images)
    return RawBatch(
        images={c: _stack_frames([w.images[c] for w in items]) for c in cams},
        state=np.stack([w.state for w in items]),
        actions=np.stack([w.actions for w in items]),
        action_mask=np.stack([w.action_mask for w in items]),
        episode=np.array([w.episode for w in items]),
        step=np.array([w.step for w in items]),
    )


class _FrameCache:
    """Decoded frames by (episode, camera, step), least recently used dropped past `max_bytes`."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._frames: OrderedDict[tuple[int, str, int], np.ndarray] = OrderedDict()

    def get(self, key: tuple[int, str, int]) -> np.ndarray | None:
        frame = self._frames.get(key)
        if frame is not None:
            self._frames.move_to_end(key)
        return frame

    def put(self, key: tuple[int, str, int], frame: np.ndarray) -> None:
        if frame.nbytes > self.max_bytes:
            return
        self._frames[key] = frame
        self.bytes += frame.nbytes
        while self.bytes > self.max_bytes:
            _, old = self._frames.popitem(last=False)
            self.bytes -= old.nbytes


class EpisodeWindows(torch.utils.data.Dataset):
    """Every step of every usable episode as a training Window (module docstring).

    paths: episode stores or directories of them. Episodes that are not complete (a live or
    crashed recording, a partial one unless `include_partial`) are left out and listed in
    `skipped`; an episode that lacks a camera or a numeric array, or holds a non-finite value
    or a non-rotation, raises TrainingDataError naming it. None usable raises too.
    """

    def __init__(
        self,
        paths: Iterable[str | os.PathLike],
        *,
        n_obs_steps: int,
        chunk_length: int,
        cameras: Sequence[str] = CAMERAS,
        include_partial: bool = False,
        frame_cache_mb: float = 64.0,
        image_size: tuple[int, int] | None = None,
    ):
        if int(n_obs_steps) < 1 or int(chunk_length) < 1:
            raise ConfigError(f"n_obs_steps and chunk_length must be >= 1, got {n_obs_steps}, {chunk_length}")
        if frame_cache_mb < 0:
            raise ConfigError(f"frame_cache_mb must be >= 0, got {frame_cache_mb}")
        self.n_obs_steps = int(n_obs_steps)
        self.chunk_length = int(chunk_length)
        self.cameras = tuple(cameras)
        self.frame_cache_bytes = int(frame_cache_mb * 2**20)
        if image_size is not None:
            if len(image_size) != 2 or any(int(v) < 2 for v in image_size):
                raise ConfigError(f"image_size must be (height, width) >= 2, got {image_size!r}")
            image_size = (int(image_size[0]), int(image_size[1]))
        self.image_size: tuple[int, int] | None = image_size
        self.episodes: list[EpisodeArrays] = []
        self.skipped: list[Skipped] = []
        for path in discover_episodes(paths):
            try:
                reader = EpisodeReader(path)
            except EpisodeError as exc:
                raise TrainingDataError(str(exc)) from None
            problem = _status_problem(reader, include_partial)
            if problem is not None:
                self.skipped.append(Skipped(path, problem))
                continue
            self.episodes.append(read_episode_arrays(reader, self.cameras))
        if not self.episodes:
            why = "; ".join(f"{s.path.name}: {s.reason}" for s in self.skipped)
            raise TrainingDataError("no usable episodes" + (f" ({why})" if why else ""))
        self._starts = np.cumsum([0] + [e.length for e in self.episodes])
        self._readers: dict[int, EpisodeReader] = {}
        self._cache = _FrameCache(self.frame_cache_bytes)
        self._prepared: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        """episode -> (frames (T, cameras, h, w, 3) uint8, filled (T, cameras) bool)."""

    def __getstate__(self) -> dict:
        """Pickled into DataLoader workers without open readers or cached frames (each worker
        opens its own)."""
        state = dict(self.__dict__)
        state["_readers"] = {}
        state["_cache"] = _FrameCache(self.frame_cache_bytes)
        return state  # prepared frames travel along (a worker does not decode them again)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def locate(self, index: int) -> tuple[int, int]:
        """(episode, step) of window `index`."""
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} outside [0, {len(self)})")
        episode = int(np.searchsorted(self._starts, index, side="right") - 1)
        return episode, int(index - self._starts[episode])

    def observation_steps(self, step: int) -> np.ndarray:
        """The frames of the window at `step`, oldest first; the first frame repeats at the start."""
        return np.maximum(np.arange(step - self.n_obs_steps + 1, step + 1), 0)

    def action_rows(self, episode: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows (H,), mask (H,)): steps t .. t + H - 1, the last step repeated past the end."""
        wanted = np.arange(step, step + self.chunk_length)
        last = self.episodes[episode].length - 1
        return np.minimum(wanted, last), (wanted <= last).astype(np.float32)

    def actions(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(actions (H, 20) raw, action_mask (H,)) of window `index`: no image is read."""
        episode, step = self.locate(index)
        ep = self.episodes[episode]
        rows, mask = self.action_rows(episode, step)
        actions = encode_action_chunk(
            {arm: ep.obs_pose[arm][step] for arm in ARMS},
            {arm: ep.cmd_pose[arm][rows] for arm in ARMS},
            {arm: ep.cmd_gripper[arm][rows] for arm in ARMS},
        )
        return actions, mask

    def state(self, index: int) -> np.ndarray:
        episode, step = self.locate(index)
        return self.episodes[episode].state[self.observation_steps(step)]

    def _reader(self, episode: int) -> EpisodeReader:
        reader = self._readers.get(episode)
        if reader is None:
            reader = self._readers[episode] = EpisodeReader(self.episodes[episode].path)
        return reader

    def _decode(self, episode: int, camera: str, step: int) -> np.ndarray:
        return _decode_frame(self._reader(episode), camera, step, self.image_size)

    def _prepared_of(self, episode: int) -> tuple[np.ndarray, np.ndarray]:
        store = self._prepared.get(episode)
        if store is None:
            assert self.image_size is not None
            h, w = self.image_size
            n, c = self.episodes[episode].length, len(self.cameras)
            store = self._prepared[episode] = (np.zeros((n, c, h, w, 3), np.uint8), np.zeros((n, c), bool))
        return store

    def frame(self, episode: int, camera: str, step: int) -> np.ndarray:
        """RGB uint8 of `camera` at `step`: (h, w, 3) at `image_size` when prepared (decoded once,
        then kept), else the full (H, W, 3) frame, decoded or from the LRU."""
        if self.image_size is not None:
            frames, filled = self._prepared_of(episode)
            c = self.cameras.index(camera)
            if not filled[step, c]:
                frames[step, c] = self._decode(episode, camera, step)
                filled[step, c] = True
            return frames[step, c]
        key = (episode, camera, step)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        frame = self._decode(episode, camera, step)
        self._cache.put(key, frame)
        return frame

    @property
    def prepared_bytes(self) -> int:
        """Bytes of prepared frames held (allocated) in this process."""
        return sum(frames.nbytes for frames, _ in self._prepared.values())

    def preload(self, workers: int = 1) -> None:
        """Decode and prepare every frame not yet held, `workers` processes (1: in this one).
        Only with `image_size`: full-size frames of a whole dataset do not fit in RAM."""
        if self.image_size is None:
            raise ConfigError("preload needs image_size (prepared frames); full-size frames are decoded per item")
        todo = [e for e in range(len(self.episodes)) if e not in self._prepared or not self._prepared[e][1].all()]
        jobs = [(str(self.episodes[e].path), self.cameras, self.image_size) for e in todo]
        if workers <= 1 or len(todo) <= 1:
            results = [_prepare_episode(*job) for job in jobs]
        else:
            with ProcessPoolExecutor(max_workers=min(int(workers), len(todo))) as pool:
                results = list(pool.map(_prepare_episode, *zip(*jobs, strict=True)))
        for e, frames in zip(todo, results, strict=True):
            self._prepared[e] = (frames, np.ones(frames.shape[:2], bool))

    def __getitem__(self, index: int) -> Window:
        episode, step = self.locate(int(index))
        obs = self.observation_steps(step)
        actions, mask = self.actions(int(index))
        images = {cam: np.stack([self.frame(episode, cam, int(s)) for s in obs]) for cam in self.cameras}
        state = self.episodes[episode].state[obs]
        return Window(images=images, state=state, actions=actions, action_mask=mask, episode=episode, step=step)


def _decode_frame(reader: EpisodeReader, camera: str, step: int, size: tuple[int, int] | None) -> np.ndarray:
    """RGB uint8 of `camera` at `step`, full size or resized to `size` (h, w) as the family does."""
    try:
        frame = reader.image(camera, step)
    except Exception as exc:  # a corrupt JPEG or store: named with its episode and frame
        raise TrainingDataError(
            f"{reader.path}: cannot decode {camera} frame {step}: {type(exc).__name__}: {exc}"
        ) from exc
    return frame if size is None else resize_area(frame, *size)


def _prepare_episode(path: str, cameras: Sequence[str], size: tuple[int, int]) -> np.ndarray:
    """(T, cameras, h, w, 3) uint8: every frame of the episode at `path`, prepared (module-level,
    so a process pool runs it by name)."""
    reader = EpisodeReader(path)
    out = np.empty((len(reader), len(cameras), size[0], size[1], 3), np.uint8)
    for step in range(len(reader)):
        for c, camera in enumerate(cameras):
            out[step, c] = _decode_frame(reader, camera, step, size)
    return out
