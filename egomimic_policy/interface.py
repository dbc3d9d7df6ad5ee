"""The contract between a policy (local model, remote server) and the rollout executor.

Why a separate module: the executor, the policy server and every family meet here and nowhere
else, so a family never needs to know how it is scheduled and the executor never needs to know
what a model looks like inside.

Frames: everything here is in the DATASET frame (docs/eva.md, "Frames"); the frames node converts to
the hardware frame downstream. Poses are [x, y, z, qw, qx, qy, qz]; grippers are normalized
0 closed .. 1 open. A chunk is ABSOLUTE targets, already decoded against the pose captured at
the query tick (wrist-relative decoding is the family's job, since only it knows its encoding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from egomimic_hw.description import CAMERAS


@dataclass(frozen=True)
class Observation:
    """One synchronized observation: the newest frame of each camera and the proprio state.

    stamp_ns is the observation's time (the newest of its inputs, ROS time, ns); a chunk that
    answers it is aligned to it: row i is meant for stamp_ns + i * period.
    images: camera name -> uint8 array (H, W, 3) RGB.
    left_pose / right_pose: (7,) dataset-frame EE poses; left_gripper / right_gripper in [0, 1].
    history: the observations of the preceding control ticks, oldest first, one control period
    apart (their own `history` empty), at most `PolicySpec.obs_steps - 1` of them. The observer
    (the policy node) builds one every tick, so a model with a 2-frame window sees frames t-1
    and t as in training, not the frame of its previous query (which is ~1 s old when it
    replans every 30 ticks). Shorter at episode start: the model pads by repeating the oldest.
    prefix: the committed prefix (real-time-chunking-style inpainting, executor blend `inpaint`):
    a Chunk of absolute dataset-frame targets answering THIS observation (its
    observation_stamp_ns == stamp_ns, row i for stamp_ns + i * period), the rows the executor
    will command anyway before the answer can arrive (its queue from stamp_ns on, covering the
    measured latency). A family that can inpaint (fold, pi, moe) makes its chunk's first rows
    agree with it; one that cannot (scripted) ignores it. None (the default): no constraint.
    """

    stamp_ns: int
    images: dict[str, np.ndarray]
    left_pose: np.ndarray
    right_pose: np.ndarray
    left_gripper: float
    right_gripper: float
    left_joints: np.ndarray | None = None
    right_joints: np.ndarray | None = None
    history: tuple[Observation, ...] = ()
    prefix: Chunk | None = None


@dataclass(frozen=True)
class Chunk:
    """Absolute dataset-frame targets for both arms, one row per control period.

    left_pose / right_pose: (H, 7); left_gripper / right_gripper: (H,).
    observation_stamp_ns: the stamp of the Observation this chunk answers.
    """

    observation_stamp_ns: int
    period_s: float
    left_pose: np.ndarray
    right_pose: np.ndarray
    left_gripper: np.ndarray
    right_gripper: np.ndarray

    def __len__(self) -> int:
        return int(self.left_pose.shape[0])


@dataclass(frozen=True)
class PolicySpec:
    """What a policy promises; the remote handshake compares these field by field.

    fingerprint: identifies the exact weights + config (the checkpoint cache key, or a hash of
    the seeded configuration for untrained rehearsal models).
    action_layout: a name for the action encoding the family decodes (e.g. "eva_bimanual_wrist_rel_20").
    """

    family: str
    fingerprint: str
    embodiment: str
    action_layout: str
    chunk_length: int
    rate_hz: float
    cameras: tuple[str, ...] = CAMERAS
    image_size: tuple[int, int] = (480, 640)  # (H, W) the policy expects from ingestion
    obs_steps: int = 1
    """Frames in the model's observation window (current included): the observer keeps
    obs_steps - 1 past ticks in Observation.history."""
    extra: dict[str, str] = field(default_factory=dict)
    clock_driven: bool = False
    """Rows are functions of the clock since the policy's anchor (the scripted motion, the
    expert): a chunk's rows keep their times however long the arm stood still. A learned
    policy's plan starts where the arm stands (False: the executor delays a chunk merged after
    the arm stood still, rollout/scheduler.py)."""


@runtime_checkable
class ChunkPolicy(Protocol):
    """A policy the rollout executor can query. Implementations may be slow (a model on a CPU,
    a remote server); the executor calls infer() from a worker thread, never from the tick."""

    spec: PolicySpec

    def reset(self) -> None:
        """Forget the observation window (a new episode starts)."""

    def infer(self, observation: Observation) -> Chunk:
        """Return the chunk answering `observation`. Raise on failure; never return NaN rows."""


def phase_timings_ms(t0: float, t1: float, t2: float, t3: float) -> dict[str, float]:
    """A query's phases from four monotonic instants (s), as the local policies report them in
    `last_timing_ms`: encode (inputs to model tensors), model (the network and its sampler),
    decode (model output to an absolute Chunk) and total."""
    return {"encode": 1e3 * (t1 - t0), "model": 1e3 * (t2 - t1), "decode": 1e3 * (t3 - t2), "total": 1e3 * (t3 - t0)}
