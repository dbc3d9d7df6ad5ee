"""Evaluate any ChunkPolicy on the simulated box task in-process, closed loop, without ROS.

Why: whether a trained policy solves the task is the question training answers, and running
the whole graph per seed is slow. This closes the loop as the graph does, minus the async part:
each 30 Hz step builds the Observation the policy node would (the three synthetic cameras
rendered with the seed's box from the measured poses, dataset-frame poses and grippers, the
preceding ticks as `history`), queries the policy every `replan_every` steps and executes the
chunk's rows in between, as the executor does, with its default seam crossfade (the old
chunk's weight falling linearly from 1 to 0 over `crossfade_rows`) and the executor's speed
limits (rollout.speed_limit, at ExecutorConfig's defaults, as the policy node publishes); every
row goes through the real SafetyGate
(its IK seeded with the measured joints), the forwarded joints become the arm's (measured pose
= FK of them, as in egomimic_policy.expert_episode) and egomimic_hw.sim_task.TaskSuccess
judges the measured poses. A HOLD latches as on the robot (an operator resets it), so it ends
the trial.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.driver.sim import SimConfig
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import pose_ds_from_hw, pose_hw_from_ds
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.sim_task import TaskSuccess, place_target
from egomimic_policy.expert_episode import START_GRIPPER
from egomimic_policy.interface import Chunk, ChunkPolicy, Observation
from egomimic_policy.rollout.history import ObservationHistory
from egomimic_policy.rollout.scheduler import ExecutorConfig
from egomimic_policy.rollout.trajectory import blend_poses
from egomimic_policy.sim_episode import sim_episode_setup
from egomimic_safety.checks import ArmCommand, ArmMeasurement
from egomimic_safety.config import GateConfig
from egomimic_safety.gate import GateState, Proposal, SafetyGate, Send

START_S = 100.0
"""Gate clock at a trial's start (s); observation stamps use the same clock."""


@dataclass(frozen=True)
class TaskRolloutConfig:
    """How a trial runs: `replan_every` rows of each chunk are executed before the next query
    (at most the chunk's length), up to `max_steps` control steps at `rate_hz`."""

    max_steps: int = 450
    replan_every: int = 30
    rate_hz: float = 30.0
    width: int = 640
    height: int = 480
    crossfade_rows: int = 8
    """The executor's default (rollout.scheduler); 0: a new chunk replaces the old at once."""

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.replan_every < 1 or not self.rate_hz > 0 or self.crossfade_rows < 0:
            raise ConfigError(
                f"need max_steps >= 1, replan_every >= 1, rate_hz > 0, crossfade_rows >= 0; "
                f"got {self.max_steps}, {self.replan_every}, {self.rate_hz}, {self.crossfade_rows}"
            )


@dataclass(frozen=True)
class TrialResult:
    """One seed: success (and its step), steps run, each arm's final distance to its grasp point
    (m), the gate's decisions (forwarded, not forwarded while armed), a HOLD's reason and the
    steps the speed limits changed."""

    seed: int
    success: bool
    success_step: int | None
    steps: int
    final_errors_m: dict[str, float]
    min_errors_m: dict[str, float]
    forwarded: int
    not_forwarded: int
    hold: str | None
    speed_limited: int = 0

    @property
    def final_error_m(self) -> float:
        """The worse arm's final distance: the task needs both."""
        return max(self.final_errors_m.values())


@dataclass(frozen=True)
class RolloutSummary:
    trials: tuple[TrialResult, ...]

    @property
    def success_rate(self) -> float:
        return sum(t.success for t in self.trials) / max(1, len(self.trials))

    @property
    def median_final_error_m(self) -> float:
        return float(np.median([t.final_error_m for t in self.trials]))

    @property
    def holds(self) -> int:
        return sum(t.hold is not None for t in self.trials)


def crossfade(old: Chunk, old_row: int, new: Chunk, rows: int) -> Chunk:
    """`new` with its first `rows` rows blended from `old`'s continuation at `old_row` (held at
    its last row past its end), the old weight falling linearly from 1 to 0."""
    n = min(rows, len(new))
    if n == 0:
        return new
    idx = np.minimum(np.arange(old_row, old_row + n), len(old) - 1)
    w = 1.0 - np.arange(n) / rows

    def mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = b.copy()
        out[:n] = blend_poses(a[idx], b[:n], w) if b.ndim == 2 else w * a[idx] + (1 - w) * b[:n]
        return out

    return replace(
        new,
        left_pose=mix(old.left_pose, new.left_pose),
        right_pose=mix(old.right_pose, new.right_pose),
        left_gripper=mix(old.left_gripper, new.left_gripper),
        right_gripper=mix(old.right_gripper, new.right_gripper),
    )


def run_trial(
    policy: ChunkPolicy,
    seed: int,
    config: TaskRolloutConfig | None = None,
    kinematics: ArmKinematics | None = None,
) -> TrialResult:
    """Run `policy` on task `seed` from the sim start pose until success, a HOLD or max_steps."""
    cfg = config or TaskRolloutConfig()
    kin = kinematics or ArmKinematics()
    target = place_target(seed)
    success = TaskSuccess(target)
    _, scenes = sim_episode_setup(
        "task_rollout", "", fps=cfg.rate_hz, width=cfg.width, height=cfg.height, target=target
    )
    gate = SafetyGate(GateConfig(required_cameras=()), dict.fromkeys(ARMS, kin))
    period_ns = int(round(1e9 / cfg.rate_hz))
    history = ObservationHistory(policy.spec.obs_steps, period_ns)
    limiter = ExecutorConfig(rate_hz=cfg.rate_hz).speed_limiter()
    policy.reset()
    joints = dict.fromkeys(ARMS, np.asarray(SimConfig().initial_joints_rad, float))
    grippers = dict.fromkeys(ARMS, START_GRIPPER)
    min_errors = dict.fromkeys(ARMS, float("inf"))

    def measure(now_s: float) -> dict[Arm, np.ndarray]:
        poses_hw = {arm: kin.forward(joints[arm]) for arm in ARMS}
        for arm in ARMS:
            gate.update_measurement(arm, ArmMeasurement(joints[arm], grippers[arm], poses_hw[arm], now_s), now_s)
        return poses_hw

    measure(START_S)
    ok, why = gate.request_arm(START_S, START_S)
    if not ok:
        raise ConfigError(f"task seed {seed}: the gate refused to arm: {why}")
    chunk: Chunk | None = None
    row0 = 0
    forwarded = not_forwarded = 0
    hold: str | None = None
    step = 0
    while step < cfg.max_steps and not success.succeeded:
        now_s = START_S + 0.01 + step / cfg.rate_hz
        poses_hw = measure(now_s)
        ds = {arm: pose_ds_from_hw(poses_hw[arm]) for arm in ARMS}
        obs = Observation(
            stamp_ns=int(round(now_s * 1e9)),
            images={cam: scenes[cam].render({arm: poses_hw[arm][:3] for arm in ARMS}, step) for cam in CAMERAS},
            left_pose=ds[Arm.LEFT],
            right_pose=ds[Arm.RIGHT],
            left_gripper=grippers[Arm.LEFT],
            right_gripper=grippers[Arm.RIGHT],
            left_joints=joints[Arm.LEFT].copy(),
            right_joints=joints[Arm.RIGHT].copy(),
        )
        if chunk is None or step - row0 >= min(cfg.replan_every, len(chunk)):
            fresh = policy.infer(history.attach(obs))
            chunk = fresh if chunk is None else crossfade(chunk, step - row0, fresh, cfg.crossfade_rows)
            row0 = step
        history.record(obs)
        i = step - row0
        left, right, _ = limiter.apply(obs.stamp_ns, chunk.left_pose[i], chunk.right_pose[i])
        if limiter.runaway:  # the node stops publishing: the gate holds on the silence
            hold = f"step {step}: policy stopped: {limiter.runaway}"
            break
        arms = {
            Arm.LEFT: ArmCommand(Arm.LEFT.hw_frame, pose_hw_from_ds(left), float(chunk.left_gripper[i])),
            Arm.RIGHT: ArmCommand(Arm.RIGHT.hw_frame, pose_hw_from_ds(right), float(chunk.right_gripper[i])),
        }
        shadow = gate.state is GateState.ARMING
        decision = gate.propose(
            Proposal(now_s, arms, observation_stamp_s=chunk.observation_stamp_ns * 1e-9), now_s, now_s
        )
        if decision.send is not Send.NOTHING:
            assert decision.targets is not None
            for arm in ARMS:
                joints[arm] = np.asarray(decision.targets[arm][:6], float).copy()
                grippers[arm] = float(decision.targets[arm][6])
        if decision.send is Send.FORWARD:
            forwarded += 1
        elif decision.send is Send.HOLD:
            hold = f"step {step}: {gate.detail}"
        elif not shadow:
            not_forwarded += 1
        after = {arm: kin.forward(joints[arm]) for arm in ARMS}
        success.update(after[Arm.LEFT], grippers[Arm.LEFT], after[Arm.RIGHT], grippers[Arm.RIGHT])
        for arm in ARMS:
            min_errors[arm] = min(min_errors[arm], success.errors_m[arm])
        step += 1
        if hold is not None:
            break
    return TrialResult(
        seed=seed,
        success=success.succeeded,
        success_step=success.success_step,
        steps=step,
        final_errors_m={arm.value: float(success.errors_m[arm]) for arm in ARMS},
        min_errors_m={arm.value: float(min_errors[arm]) for arm in ARMS},
        forwarded=forwarded,
        not_forwarded=not_forwarded,
        hold=hold,
        speed_limited=limiter.limited,
    )


def evaluate(policy: ChunkPolicy, seeds: Iterable[int], config: TaskRolloutConfig | None = None) -> RolloutSummary:
    """One trial per seed, sharing one kinematics solver."""
    kin = ArmKinematics()
    return RolloutSummary(tuple(run_trial(policy, int(s), config, kin) for s in seeds))
