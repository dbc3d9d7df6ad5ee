"""The closed-loop box-task evaluation: the scripted expert succeeds through the real gate and
a policy that holds still does not, with the gate forwarding every row of both."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_hw.errors import ConfigError
from egomimic_policy.expert import ExpertChunkPolicy, ExpertConfig
from egomimic_policy.interface import Chunk, Observation, PolicySpec
from egomimic_policy.task_rollout import TaskRolloutConfig, crossfade, evaluate, run_trial


class HoldPolicy:
    """Commands the observed pose and gripper for every row: the arms never move."""

    spec = PolicySpec("hold", "hold", "eva_bimanual", "absolute", chunk_length=30, rate_hz=30.0, obs_steps=2)

    def __init__(self) -> None:
        self.histories: list[int] = []

    def reset(self) -> None:
        self.histories.clear()

    def infer(self, observation: Observation) -> Chunk:
        self.histories.append(len(observation.history))
        assert set(observation.images) == {"front_1", "left_wrist", "right_wrist"}
        n = self.spec.chunk_length
        return Chunk(
            observation.stamp_ns,
            1 / 30,
            np.tile(observation.left_pose, (n, 1)),
            np.tile(observation.right_pose, (n, 1)),
            np.full(n, observation.left_gripper),
            np.full(n, observation.right_gripper),
        )


class StepPolicy(HoldPolicy):
    """Holds the observed pose, then from row 3 on commands it 25 mm further along x: one row of
    0.75 m/s, beyond the gate's 0.6 m/s, as a sampled plan has now and then."""

    def infer(self, observation: Observation) -> Chunk:
        chunk = super().infer(observation)
        if not self.histories[1:]:  # the first query only: later ones hold where the arm is
            chunk.left_pose[3:, 0] += 0.025
        return chunk


def test_an_uneven_row_is_followed_at_the_executors_speed_limit_not_held_by_the_gate():
    result = run_trial(StepPolicy(), 1, TaskRolloutConfig(max_steps=12, replan_every=30, width=160, height=120))
    assert result.hold is None and result.not_forwarded == 0, result
    assert result.speed_limited == 1  # 18 mm (0.54 m/s x 33 ms); the next step, the last 7 mm, is within


@pytest.mark.parametrize("seed", [0, 7])
def test_the_expert_succeeds_closed_loop(seed):
    result = run_trial(ExpertChunkPolicy(ExpertConfig(task_seed=seed), rate_hz=30.0), seed, TaskRolloutConfig())
    assert result.success, result
    assert result.steps == result.success_step + 1  # stops at success
    assert result.final_error_m < 0.02
    assert result.hold is None and result.not_forwarded == 0


def test_holding_still_never_succeeds_and_replans_on_schedule():
    policy = HoldPolicy()
    config = TaskRolloutConfig(max_steps=61, replan_every=10, width=160, height=120)
    summary = evaluate(policy, [1, 2], config)
    assert summary.success_rate == 0.0
    assert all(t.steps == 61 and t.hold is None for t in summary.trials)
    assert all(t.final_error_m > 0.05 for t in summary.trials)
    assert policy.histories == [0, 1, 1, 1, 1, 1, 1]  # 7 queries (the last trial's); one past tick after the first


def test_bad_config_is_refused():
    with pytest.raises(ConfigError):
        TaskRolloutConfig(replan_every=0)


def test_a_new_chunk_crossfades_from_the_old_continuation():
    def chunk(x: float, n: int = 12) -> Chunk:
        pose = np.tile([x, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0], (n, 1))
        return Chunk(0, 1 / 30, pose, pose.copy(), np.full(n, x), np.full(n, x))

    blended = crossfade(chunk(0.0), 5, chunk(1.0), 4)
    assert np.allclose(blended.left_pose[:5, 0], [0.0, 0.25, 0.5, 0.75, 1.0])
    assert np.allclose(blended.right_gripper[:5], [0.0, 0.25, 0.5, 0.75, 1.0])
    assert crossfade(chunk(0.0), 5, chunk(1.0), 0).left_pose[0, 0] == 1.0
