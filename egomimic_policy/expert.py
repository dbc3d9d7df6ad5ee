"""The scripted expert of the simulated box task (egomimic_hw.sim_task): demonstrations on demand.

Why: training a policy that must find the box in the images needs demonstrations of the task,
and nobody teleoperates a simulation. The expert cheats on purpose: it reads the box from the
task seed (privileged state), never from the images, so it needs no cameras.

The motion, per arm in its own base (dataset frame, as every policy commands): from the pose it
was anchored at, move to `approach_height_m` above its grasp point while turning to the grasp
orientation and opening the gripper; descend onto the grasp point; close the gripper; hold
there. Each segment is a smoothstep in time (zero velocity at both ends), the two arms'
segments last alike (the slower arm sets the pace), and segment durations are chosen so that
the peak speeds are `speed_m_s` / `descend_speed_m_s` / `angular_speed_rad_s`.

Gate limits: the defaults move at most 4 mm and 20 mrad per 33 ms control step, against the
gate's 20 mm and 60 mrad per step (egomimic_safety.config: 0.6 m/s, 1.8 rad/s). The config
refuses speeds above MAX_SPEED_M_S and half the X5's angular speed, so the measured pose, which
trails the command by about 0.2 s (the SDK's preview), stays inside the gate's 80 mm / 0.5 rad
jump limits even 0.3 s behind; every
position lies on straight segments between the anchor and points checked inside the gate's
workspace box (sim_task.reach_problems, tested over many seeds).

`ExpertChunkPolicy` serves it like `ScriptedChunkPolicy` serves the circle: anchored at the first
observation after a reset, row i of every chunk is the motion at that observation's stamp + i
periods, so consecutive chunks agree where they overlap. It is open loop in time: a run held
by the gate is restarted by reset() or by being engaged again (re-anchoring at the measured
pose), never resumed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from egomimic_hw.config_fields import check_ranges
from egomimic_hw.description import ARMS, X5_LIMITS, Arm
from egomimic_hw.errors import ConfigError
from egomimic_hw.rotations import quat_angle, quat_rotate_toward
from egomimic_hw.sim_task import APPROACH_HEIGHT_M, TargetBox, place_target
from egomimic_policy.interface import Chunk, Observation, PolicySpec
from egomimic_policy.scripted import SCRIPTED_ACTION_LAYOUT, ClockDriven, held_chunk, sampled_chunk

SMOOTHSTEP_PEAK_RATE = 1.5
"""Peak of d/dx (3x^2 - 2x^3): a smoothstep segment of length D in T peaks at 1.5 D / T."""
MAX_SPEED_M_S = 0.2
"""A third of the X5's 0.6 m/s: 0.3 s of lag at this speed is 60 mm, inside the gate's 80 mm."""
GRIPPER_OPEN = 1.0
GRIPPER_CLOSED = 0.0
"""Normalized gripper targets (docs/eva.md: 0 closed, 1 open)."""


@dataclass(frozen=True)
class ExpertConfig:
    """The expert's task and pace (policy node parameters `expert.*`, with ranges the gate's
    limits leave room for)."""

    task_seed: int = field(
        default=0,
        metadata={
            "help": "the task's seed: where the box is (egomimic_hw.sim_task); the synthetic cameras need the same; "
            "settable at runtime (a new trial: then call policy/reset)",
            "range": (0, 2**31 - 1),
            "runtime": True,
        },
    )
    speed_m_s: float = field(
        default=0.12,
        metadata={
            "help": "peak link6 speed (m/s) of the move to above the box",
            "range": (0.01, MAX_SPEED_M_S),
        },
    )
    descend_speed_m_s: float = field(
        default=0.06,
        metadata={
            "help": "peak link6 speed (m/s) coming down onto the grasp point",
            "range": (0.01, MAX_SPEED_M_S),
        },
    )
    angular_speed_rad_s: float = field(
        default=0.6,
        metadata={
            "help": "peak angular speed (rad/s) turning to the grasp orientation; at most half the X5's 1.8 rad/s",
            "range": (0.05, 0.5 * X5_LIMITS.ee_angular_speed_max_rad_s),
        },
    )
    gripper_speed_per_s: float = field(
        default=1.5,
        metadata={"help": "peak gripper speed, normalized range per second", "range": (0.1, 10.0)},
    )
    approach_height_m: float = field(
        default=APPROACH_HEIGHT_M,
        metadata={"help": "height (m) above the grasp point the descent starts from", "range": (0.0, 0.2)},
    )
    chunk_length: int = field(default=30, metadata={"help": "rows per expert chunk", "range": (1, 1000)})

    def __post_init__(self) -> None:
        check_ranges(self)


def _smoothstep(x: float) -> float:
    x = min(max(x, 0.0), 1.0)
    return x * x * (3.0 - 2.0 * x)


class ExpertPlan:
    """The expert's targets for both arms at time `t_s` after anchoring (dataset frame)."""

    def __init__(
        self,
        config: ExpertConfig,
        target: TargetBox,
        anchors_ds: dict[Arm, np.ndarray],
        anchor_grippers: dict[Arm, float],
    ):
        self.config = config
        self.target = target
        c = config
        start = {a: np.asarray(anchors_ds[a], float) for a in ARMS}
        above = {a: target.grasp_pose_ds(a, c.approach_height_m) for a in ARMS}
        grasp = {a: target.grasp_pose_ds(a) for a in ARMS}
        g0 = {a: float(np.clip(anchor_grippers[a], 0.0, 1.0)) for a in ARMS}
        rate = SMOOTHSTEP_PEAK_RATE
        t_move = max(
            max(
                rate * float(np.linalg.norm(above[a][:3] - start[a][:3])) / c.speed_m_s,
                rate * quat_angle(start[a][3:], above[a][3:]) / c.angular_speed_rad_s,
                rate * abs(GRIPPER_OPEN - g0[a]) / c.gripper_speed_per_s,
            )
            for a in ARMS
        )
        t_descend = rate * c.approach_height_m / c.descend_speed_m_s
        t_close = rate * (GRIPPER_OPEN - GRIPPER_CLOSED) / c.gripper_speed_per_s
        # (pose from, pose to, gripper from, gripper to, duration) per arm and segment
        self._segments = [
            ({a: (start[a], above[a], g0[a], GRIPPER_OPEN) for a in ARMS}, t_move),
            ({a: (above[a], grasp[a], GRIPPER_OPEN, GRIPPER_OPEN) for a in ARMS}, t_descend),
            ({a: (grasp[a], grasp[a], GRIPPER_OPEN, GRIPPER_CLOSED) for a in ARMS}, t_close),
        ]
        self.duration_s = t_move + t_descend + t_close
        """When both grippers are closed on the box; the plan holds from then on."""

    def _leg_at(self, t_s: float) -> tuple[dict, float]:
        """The segment under way at `t_s` and how far along it is (smoothstep, 0..1)."""
        t_s = max(t_s, 0.0)
        for legs, duration in self._segments:
            if t_s < duration:
                return legs, _smoothstep(t_s / duration)
            t_s -= duration
        return self._segments[-1][0], 1.0  # done: hold the grasp

    def sample(self, t_s: float) -> dict[Arm, tuple[np.ndarray, float]]:
        legs, s = self._leg_at(t_s)
        out = {}
        for arm, (p0, p1, g0, g1) in legs.items():
            angle = quat_angle(p0[3:], p1[3:])
            quat = quat_rotate_toward(p0[3:], p1[3:], s * angle) if angle > 0 else p1[3:]
            pose = np.concatenate([p0[:3] + s * (p1[:3] - p0[:3]), quat])
            out[arm] = (pose, g0 + s * (g1 - g0))
        return out


class ExpertChunkPolicy(ClockDriven):
    """The expert as a ChunkPolicy: no cameras, answers in microseconds. Starts its plan at the
    first observation after it is engaged (ClockDriven: the policy node engages it while the
    gate is ARMED)."""

    def __init__(
        self, config: ExpertConfig = ExpertConfig(), *, rate_hz: float = 30.0, embodiment: str = "eva_bimanual"
    ):
        if not rate_hz > 0:
            raise ConfigError(f"rate_hz must be > 0, got {rate_hz}")
        self.config = config
        self.target = place_target(config.task_seed)
        self.period_s = 1.0 / rate_hz
        setup = {"config": asdict(config), "rate_hz": rate_hz}
        fingerprint = hashlib.sha256(json.dumps(setup, sort_keys=True).encode()).hexdigest()[:16]
        self.spec = PolicySpec(
            family="expert",
            fingerprint=f"expert-{fingerprint}",
            embodiment=embodiment,
            action_layout=SCRIPTED_ACTION_LAYOUT,
            chunk_length=config.chunk_length,
            rate_hz=rate_hz,
            cameras=(),
            extra={"task_seed": str(config.task_seed)},
            clock_driven=True,  # rows are the motion at their own times
        )
        self.plan: ExpertPlan | None = None
        self._anchor_ns = 0

    def reset(self) -> None:
        """Start the task over from the next observation's pose."""
        self.plan = None

    def set_task_seed(self, task_seed: int) -> TargetBox:
        """Go for the box of `task_seed` from the next plan on (a new trial); returns it. The
        plan in progress is dropped; the policy node's policy/reset also clears its queue."""
        target = place_target(task_seed)
        self.config = replace(self.config, task_seed=int(task_seed))
        self.target = target
        self.plan = None
        return target

    def infer(self, observation: Observation) -> Chunk:
        if not self.engaged:
            self.plan = None  # start over from the measured pose once engaged
            return held_chunk(observation, self.spec.chunk_length, self.period_s)
        plan = self.plan  # reset() may clear it from another thread meanwhile
        if plan is None:
            plan = ExpertPlan(
                self.config,
                self.target,
                {Arm.LEFT: observation.left_pose, Arm.RIGHT: observation.right_pose},
                {Arm.LEFT: observation.left_gripper, Arm.RIGHT: observation.right_gripper},
            )
            self.plan, self._anchor_ns = plan, observation.stamp_ns
        return sampled_chunk(plan.sample, observation, self._anchor_ns, self.spec.chunk_length, self.period_s)
