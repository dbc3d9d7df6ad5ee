"""A scripted bimanual motion in the dataset frame: the foundation's stand-in for a model.

Clearly not learned. It exists so the whole graph (frames, gate, IK, driver) runs end to end
with a motion whose expected path is known: each arm traces a circle of `radius_m` in the
dataset-frame y-z plane around the pose it was anchored at, with a small wrist oscillation
about the dataset z axis and a slowly cycling gripper. The amplitude ramps in smoothly over
`ramp_s` so the first commands equal the measured pose (the gate's start-pose check).
Speeds at the defaults: 0.04 m x 2 pi / 6 s = 0.042 m/s, far below the X5's 0.6 m/s.

`ScriptedChunkPolicy` serves the same motion as a ChunkPolicy (chunks of absolute targets),
so the scripted run goes through the rollout executor exactly like a model does: it anchors
at the first observation after a reset and row i of every chunk is the motion at that
observation's stamp + i * period. Chunks of one run are samples of one function of time, so
consecutive chunks agree where they overlap: a known-correct reference for the executor.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.errors import ConfigError
from egomimic_hw.rotations import mat_to_quat, quat_to_mat
from egomimic_policy.interface import Chunk, Observation, PolicySpec

SCRIPTED_ACTION_LAYOUT = "eva_bimanual_abs_pose_ds"
"""Absolute dataset-frame poses and normalized grippers per arm: the Chunk layout itself."""


@dataclass(frozen=True)
class ScriptedMotionConfig:
    radius_m: float = field(
        default=0.04,
        metadata={"help": "radius (m) of each arm's circle in the dataset-frame y-z plane", "range": (0.0, 0.1)},
    )
    period_s: float = field(default=6.0, metadata={"help": "time (s) of one circle", "range": (0.0, 600.0)})
    wrist_amplitude_rad: float = field(
        default=0.15, metadata={"help": "amplitude (rad) of the wrist oscillation about the dataset z axis"}
    )
    ramp_s: float = field(
        default=2.0,
        metadata={"help": "time (s) over which the motion ramps in from the anchored pose", "range": (0.0, 600.0)},
    )
    gripper_min: float = field(
        default=0.2, metadata={"help": "lowest gripper value of the cycle (0 closed, 1 open)", "range": (0.0, 1.0)}
    )
    gripper_max: float = field(
        default=0.8, metadata={"help": "highest gripper value of the cycle (0 closed, 1 open)", "range": (0.0, 1.0)}
    )

    def __post_init__(self) -> None:
        if not (0 <= self.radius_m <= 0.1):
            raise ConfigError(f"radius_m must be in [0, 0.1] m, got {self.radius_m}")
        if not self.period_s > 0 or not self.ramp_s >= 0:
            raise ConfigError(f"period_s must be > 0 and ramp_s >= 0, got {self.period_s}, {self.ramp_s}")
        if not 0 <= self.gripper_min <= self.gripper_max <= 1:
            raise ConfigError("need 0 <= gripper_min <= gripper_max <= 1")


@dataclass(frozen=True)
class ScriptedChunkConfig:
    """How the scripted motion is served as chunks (ScriptedChunkPolicy's chunk_length), kept
    apart from ScriptedMotionConfig: the motion is a function of time, the chunking only samples it."""

    chunk_length: int = field(default=30, metadata={"help": "rows per scripted chunk", "range": (1, 1000)})


def _rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class ScriptedMotion:
    """Target dataset-frame poses for both arms at time `t_s` after anchoring."""

    def __init__(
        self, config: ScriptedMotionConfig, anchors_ds: dict[Arm, np.ndarray], anchor_grippers: dict[Arm, float]
    ):
        self.config = config
        self._anchor = {a: np.asarray(anchors_ds[a], dtype=float) for a in ARMS}
        self._anchor_rot = {a: quat_to_mat(self._anchor[a][3:], strict=True) for a in ARMS}
        self._anchor_gripper = {a: float(np.clip(anchor_grippers[a], 0.0, 1.0)) for a in ARMS}

    def _ramp(self, t_s: float) -> float:
        if self.config.ramp_s <= 0:
            return 1.0
        x = min(max(t_s / self.config.ramp_s, 0.0), 1.0)
        return x * x * (3.0 - 2.0 * x)  # smoothstep: zero velocity at both ends

    def sample(self, t_s: float) -> dict[Arm, tuple[np.ndarray, float]]:
        c = self.config
        ramp = self._ramp(t_s)
        phase = 2.0 * np.pi * t_s / c.period_s
        out = {}
        for arm in ARMS:
            sign = 1.0 if arm is Arm.LEFT else -1.0  # mirror the arms
            offset = ramp * c.radius_m * np.array([0.0, sign * np.sin(phase), 1.0 - np.cos(phase)])
            rot = _rot_z(ramp * c.wrist_amplitude_rad * np.sin(phase)) @ self._anchor_rot[arm]
            pose = np.concatenate([self._anchor[arm][:3] + offset, mat_to_quat(rot)])
            mid = 0.5 * (c.gripper_min + c.gripper_max)
            target_gripper = mid + 0.5 * (c.gripper_max - c.gripper_min) * np.sin(phase)
            gripper = (1.0 - ramp) * self._anchor_gripper[arm] + ramp * target_gripper
            out[arm] = (pose, float(gripper))
        return out


def held_chunk(observation: Observation, rows: int, period_s: float) -> Chunk:
    """The chunk that keeps both arms where `observation` measured them: every row is its poses
    and grippers. What a clock-driven policy answers while it is not engaged (ClockDriven)."""
    return Chunk(
        observation_stamp_ns=observation.stamp_ns,
        period_s=period_s,
        left_pose=np.tile(np.asarray(observation.left_pose, dtype=float), (rows, 1)),
        right_pose=np.tile(np.asarray(observation.right_pose, dtype=float), (rows, 1)),
        left_gripper=np.full(rows, float(observation.left_gripper)),
        right_gripper=np.full(rows, float(observation.right_gripper)),
    )


class ClockDriven:
    """Engagement for a motion defined in time (the scripted circle, the expert): its clock runs
    only while the arms follow it.

    Why: such a motion is open loop in time: anchored at an observation, row i of every later
    chunk is the motion at its own time, whether or not anything was forwarded. The gate forwards
    nothing before it is ARMED (and nothing while it defers a late input during ARMING), so a
    motion anchored before then runs ahead of the arms that never moved: a CI run on a loaded
    machine had its expert 32 mm along when the gate validated its first command, and arming
    failed (START_TOO_FAR, limit 30 mm). A learned policy is closed loop and needs none of this.
    Like a ros2_control controller that starts from the measured state when it is activated:
    while not `engaged` every chunk holds the measured pose (the gate's arming checks see the
    arms' own pose), and the motion is anchored at the first observation after engagement. The
    policy node engages it while the gate is ARMED (its safety/status); offline rollouts never
    disengage it (engaged by default)."""

    engaged: bool = True

    def set_engaged(self, engaged: bool) -> None:
        """Called from another thread than infer(): only a flag; infer() drops the motion."""
        self.engaged = bool(engaged)


def sampled_chunk(
    sample: Callable[[float], Mapping[Arm, tuple[np.ndarray, float]]],
    observation: Observation,
    anchor_ns: int,
    rows: int,
    period_s: float,
) -> Chunk:
    """The chunk answering `observation` from a motion defined in time: row i is
    `sample(t)` at t = (observation stamp - anchor) + i * period, per arm (pose (7,), gripper).
    Time-anchored, so a query made late still answers the rows of its own stamp."""
    poses = {arm: np.empty((rows, 7)) for arm in ARMS}
    grippers = {arm: np.empty(rows) for arm in ARMS}
    t0_s = (observation.stamp_ns - anchor_ns) * 1e-9
    for i in range(rows):
        for arm, (pose, gripper) in sample(t0_s + i * period_s).items():
            poses[arm][i], grippers[arm][i] = pose, gripper
    return Chunk(
        observation_stamp_ns=observation.stamp_ns,
        period_s=period_s,
        left_pose=poses[Arm.LEFT],
        right_pose=poses[Arm.RIGHT],
        left_gripper=grippers[Arm.LEFT],
        right_gripper=grippers[Arm.RIGHT],
    )


class ScriptedChunkPolicy(ClockDriven):
    """The scripted motion as a ChunkPolicy: needs no cameras, answers in microseconds."""

    def __init__(
        self,
        config: ScriptedMotionConfig = ScriptedMotionConfig(),
        *,
        chunk_length: int = 30,
        rate_hz: float = 30.0,
        embodiment: str = "eva_bimanual",
    ):
        if chunk_length < 1:
            raise ConfigError(f"chunk_length must be >= 1 row, got {chunk_length}")
        if not rate_hz > 0:
            raise ConfigError(f"rate_hz must be > 0, got {rate_hz}")
        self.config = config
        self.period_s = 1.0 / rate_hz
        setup = {"config": asdict(config), "chunk_length": chunk_length, "rate_hz": rate_hz}
        fingerprint = hashlib.sha256(json.dumps(setup, sort_keys=True).encode()).hexdigest()[:16]
        self.spec = PolicySpec(
            family="scripted",
            fingerprint=f"scripted-{fingerprint}",
            embodiment=embodiment,
            action_layout=SCRIPTED_ACTION_LAYOUT,
            chunk_length=chunk_length,
            rate_hz=rate_hz,
            cameras=(),
            clock_driven=True,  # rows are the motion at their own times
        )
        self._motion: ScriptedMotion | None = None
        self._anchor_ns = 0

    def reset(self) -> None:
        """Re-anchor at the next observation (the motion restarts from the measured pose)."""
        self._motion = None

    def infer(self, observation: Observation) -> Chunk:
        if not self.engaged:
            self._motion = None  # restart from the measured pose once engaged
            return held_chunk(observation, self.spec.chunk_length, self.period_s)
        motion = self._motion  # reset() may clear it from another thread meanwhile
        if motion is None:
            motion = ScriptedMotion(
                self.config,
                {Arm.LEFT: observation.left_pose, Arm.RIGHT: observation.right_pose},
                {Arm.LEFT: observation.left_gripper, Arm.RIGHT: observation.right_gripper},
            )
            self._motion, self._anchor_ns = motion, observation.stamp_ns
        return sampled_chunk(motion.sample, observation, self._anchor_ns, self.spec.chunk_length, self.period_s)
