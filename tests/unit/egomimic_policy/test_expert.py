"""The box task's scripted expert: run open loop through the real safety gate and the kinematics
(the gate's IK of each commanded pose, FK back as the measured pose), it succeeds within a
bounded time for every seed tried, and the gate forwards every command it proposes."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.driver.sim import SimConfig
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import pose_ds_from_hw, pose_hw_from_ds
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.rotations import quat_angle
from egomimic_hw.sim_task import TaskSuccess, place_target
from egomimic_policy.expert import ExpertChunkPolicy, ExpertConfig
from egomimic_policy.interface import ChunkPolicy, Observation
from egomimic_policy.loading import choose_device, load_policy
from egomimic_policy.scripted import ScriptedChunkPolicy
from egomimic_safety.checks import ArmCommand, ArmMeasurement
from egomimic_safety.config import GateConfig
from egomimic_safety.gate import GateState, Proposal, SafetyGate, Send

RATE_HZ = 30.0
MAX_STEPS = 300
"""10 s at 30 Hz: the default expert needs about 7 s from the sim start pose."""
START_S = 100.0
Q0 = np.asarray(SimConfig().initial_joints_rad, float)


@pytest.fixture(scope="module")
def kinematics():
    kin = ArmKinematics()
    return dict.fromkeys(ARMS, kin)


def _observation(stamp_s: float, poses_ds: dict, grippers: dict) -> Observation:
    return Observation(
        stamp_ns=int(round(stamp_s * 1e9)),
        images={},
        left_pose=poses_ds[Arm.LEFT],
        right_pose=poses_ds[Arm.RIGHT],
        left_gripper=grippers[Arm.LEFT],
        right_gripper=grippers[Arm.RIGHT],
    )


def run_expert(seed: int, kinematics, steps: int = MAX_STEPS) -> dict:
    """Drive the expert for `steps` control ticks, querying a chunk every chunk_length ticks and
    executing its rows as the executor would; every row goes through SafetyGate.propose and the
    arm moves to the forwarded joints (open loop: no dynamics, so measured = FK of them)."""
    gate_config = GateConfig(required_cameras=())
    gate = SafetyGate(gate_config, kinematics)
    policy = ExpertChunkPolicy(ExpertConfig(task_seed=seed), rate_hz=RATE_HZ)
    tracker = TaskSuccess(place_target(seed))
    joints = dict.fromkeys(ARMS, Q0.copy())
    grippers = dict.fromkeys(ARMS, 0.5)

    def measure(t):
        for arm in ARMS:
            gate.update_measurement(
                arm, ArmMeasurement(joints[arm], grippers[arm], kinematics[arm].forward(joints[arm]), t), t
            )
        return {arm: pose_ds_from_hw(kinematics[arm].forward(joints[arm])) for arm in ARMS}

    measure(START_S)
    ok, why = gate.request_arm(START_S, START_S)
    assert ok, why
    commands: list[dict] = []
    refused = []
    chunk = None
    for k in range(steps):
        t = START_S + 0.01 + k / RATE_HZ
        measured = measure(t)
        if k % policy.spec.chunk_length == 0:
            chunk = policy.infer(_observation(t, measured, grippers))
            row0 = k
        assert chunk is not None
        i = k - row0
        poses = {Arm.LEFT: chunk.left_pose[i], Arm.RIGHT: chunk.right_pose[i]}
        g = {Arm.LEFT: float(chunk.left_gripper[i]), Arm.RIGHT: float(chunk.right_gripper[i])}
        commands.append({arm: (poses[arm], g[arm], measured[arm]) for arm in ARMS})
        arms = {arm: ArmCommand(arm.hw_frame, pose_hw_from_ds(poses[arm]), g[arm]) for arm in ARMS}
        proposal = Proposal(t, arms, observation_stamp_s=chunk.observation_stamp_ns * 1e-9)
        shadow = gate.state is GateState.ARMING  # validated, not forwarded
        decision = gate.propose(proposal, t, t)
        if decision.send is Send.FORWARD:
            for arm in ARMS:
                joints[arm] = decision.targets[arm][:6].copy()
                grippers[arm] = float(decision.targets[arm][6])
        elif not (shadow and decision.send is Send.NOTHING):
            refused.append((k, gate.state.name, gate.detail))
            break
        after = {arm: pose_ds_from_hw(kinematics[arm].forward(joints[arm])) for arm in ARMS}
        tracker.update(after[Arm.LEFT], grippers[Arm.LEFT], after[Arm.RIGHT], grippers[Arm.RIGHT])
    return {"tracker": tracker, "refused": refused, "commands": commands, "gate": gate, "policy": policy}


SEEDS = range(10)


@pytest.fixture(scope="module")
def runs(kinematics):
    return {seed: run_expert(seed, kinematics) for seed in SEEDS}


@pytest.mark.parametrize("seed", SEEDS)
def test_expert_succeeds_and_the_gate_forwards_every_step(seed, runs):
    run = runs[seed]
    assert not run["refused"], run["refused"]
    tracker = run["tracker"]
    assert tracker.succeeded, (tracker.errors_m, tracker.streak)
    plan_steps = run["policy"].plan.duration_s * RATE_HZ
    assert tracker.success_step <= plan_steps + tracker.hold_steps + 10  # right after the plan ends
    assert run["gate"].state is GateState.ARMED


@pytest.mark.parametrize("seed", SEEDS)
def test_expert_steps_stay_well_inside_the_gate_limits(seed, runs):
    """Per control step: translation and rotation vs the previous command at most half the
    gate's rate limits, vs the measured pose within the jump limits, positions inside the
    workspace box, grippers in [0, 1]; the first command is the measured start pose."""
    gate = GateConfig()
    commands = runs[seed]["commands"]
    step_m = gate.max_ee_speed_m_s / gate.control_rate_hz
    step_rad = gate.max_ee_angular_speed_rad_s / gate.control_rate_hz
    for arm in ARMS:
        lo, hi = (np.asarray(v) for v in gate.workspace(arm.value))
        poses = np.array([c[arm][0] for c in commands])
        measured = np.array([c[arm][2] for c in commands])
        grip = np.array([c[arm][1] for c in commands])
        np.testing.assert_allclose(poses[0], measured[0], atol=1e-6)
        assert np.linalg.norm(np.diff(poses[:, :3], axis=0), axis=1).max() <= 0.5 * step_m
        angles = [quat_angle(a[3:], b[3:]) for a, b in zip(poses[:-1], poses[1:])]
        assert max(angles) <= 0.5 * step_rad
        assert np.linalg.norm(poses[:, :3] - measured[:, :3], axis=1).max() <= gate.max_translation_step_m
        assert max(quat_angle(p[3:], m[3:]) for p, m in zip(poses, measured)) <= gate.max_rotation_step_rad
        assert np.all(poses[:, :3] >= lo) and np.all(poses[:, :3] <= hi)
        assert grip.min() >= 0.0 and grip.max() <= 1.0


def test_expert_lag_margin_against_the_jump_limit():
    """Live, the measured pose trails the command by the SDK's 0.2 s preview plus tracking; at
    the fastest speed the config allows, that lag stays inside the gate's jump limit."""
    gate = GateConfig()
    for name, limit in (
        ("speed_m_s", gate.max_translation_step_m),
        ("angular_speed_rad_s", gate.max_rotation_step_rad),
    ):
        fastest = ExpertConfig.__dataclass_fields__[name].metadata["range"][1]
        assert fastest * 0.3 < limit, name
        with pytest.raises(ConfigError):
            ExpertConfig(**{name: 1.01 * fastest})


def test_expert_chunks_agree_where_they_overlap_and_hold_at_the_end():
    policy = ExpertChunkPolicy(ExpertConfig(task_seed=3, chunk_length=20))
    kin = ArmKinematics()
    start = dict.fromkeys(ARMS, pose_ds_from_hw(kin.forward(Q0)))
    grippers = dict.fromkeys(ARMS, 0.5)
    first = policy.infer(_observation(START_S, start, grippers))
    later = policy.infer(_observation(START_S + 10 / 30, start, grippers))  # the anchor stays
    np.testing.assert_allclose(first.left_pose[10:], later.left_pose[:10], atol=1e-12)
    np.testing.assert_allclose(first.right_gripper[10:], later.right_gripper[:10], atol=1e-12)
    done = policy.infer(_observation(START_S + policy.plan.duration_s + 1.0, start, grippers))
    box = place_target(3)
    for arm, rows, grip in (
        (Arm.LEFT, done.left_pose, done.left_gripper),
        (Arm.RIGHT, done.right_pose, done.right_gripper),
    ):
        np.testing.assert_allclose(rows, np.tile(box.grasp_pose_ds(arm), (20, 1)), atol=1e-9)
        assert np.all(grip == 0.0)
    policy.reset()
    assert policy.plan is None


def test_expert_is_a_chunk_policy_the_loader_builds_without_cameras():
    policy = load_policy("expert", expert=ExpertChunkPolicy(ExpertConfig(task_seed=4)))
    assert isinstance(policy, ChunkPolicy)
    assert policy.spec.family == "expert" and policy.spec.cameras == () and policy.spec.extra["task_seed"] == "4"
    assert load_policy("expert").spec.extra["task_seed"] == "0"
    assert choose_device("expert", "cuda") == ("cuda", "")  # no model, no torch
    assert ExpertChunkPolicy(ExpertConfig(task_seed=1)).spec.fingerprint != ExpertChunkPolicy().spec.fingerprint


def test_a_new_task_seed_at_run_time_is_the_next_plan_s_box(kinematics):
    """expert.task_seed set while running (a new trial): the next chunk goes for the new box,
    from the pose the arm is at, as a fresh expert of that seed would."""
    seeds = (4, 9)
    poses = {arm: pose_ds_from_hw(kinematics[arm].forward(Q0)) for arm in ARMS}
    grippers = dict.fromkeys(ARMS, 0.5)
    moved = ExpertChunkPolicy(ExpertConfig(task_seed=seeds[0]))
    moved.infer(_observation(0.0, poses, grippers))
    assert moved.set_task_seed(seeds[1]) == place_target(seeds[1]) and moved.config.task_seed == seeds[1]
    fresh = ExpertChunkPolicy(ExpertConfig(task_seed=seeds[1]))
    a, b = moved.infer(_observation(5.0, poses, grippers)), fresh.infer(_observation(5.0, poses, grippers))
    assert np.allclose(a.left_pose, b.left_pose) and np.allclose(a.right_pose, b.right_pose)
    with pytest.raises(ConfigError):
        moved.set_task_seed(-1)


def _rows(chunk, arm: Arm) -> np.ndarray:
    return getattr(chunk, f"{arm.value}_pose")


@pytest.mark.parametrize("make", [lambda: ExpertChunkPolicy(ExpertConfig(task_seed=3)), lambda: ScriptedChunkPolicy()])
def test_a_clock_driven_policy_holds_until_engaged_then_starts_from_there(make, kinematics):
    """Not engaged (the gate not yet ARMED), every row is the measured pose and gripper; engaged
    0.8 s later, the motion starts at that observation, as a fresh one would. Anchored at the first
    query instead, the expert is already more than 30 mm along when the gate validates its first
    command (a CI run's arming failed so: START_TOO_FAR, 32 mm against 30 mm)."""
    start = {arm: pose_ds_from_hw(kinematics[arm].forward(Q0)) for arm in ARMS}
    grippers = dict.fromkeys(ARMS, 0.5)
    late = START_S + 0.8
    policy = make()
    policy.set_engaged(False)
    held = policy.infer(_observation(START_S, start, grippers))
    for arm in ARMS:
        np.testing.assert_array_equal(_rows(held, arm), np.tile(start[arm], (len(held), 1)))
    np.testing.assert_array_equal(held.left_gripper, np.full(len(held), 0.5))
    policy.set_engaged(True)
    engaged = policy.infer(_observation(late, start, grippers))
    fresh = make().infer(_observation(late, start, grippers))
    anchored_early = make()
    anchored_early.infer(_observation(START_S, start, grippers))
    early = anchored_early.infer(_observation(late, start, grippers))
    for arm in ARMS:
        np.testing.assert_allclose(_rows(engaged, arm), _rows(fresh, arm), atol=1e-12)
        assert np.linalg.norm(_rows(engaged, arm)[0][:3] - start[arm][:3]) < 1e-9
    if isinstance(policy, ExpertChunkPolicy):
        ahead = max(np.linalg.norm(_rows(early, arm)[0][:3] - start[arm][:3]) for arm in ARMS)
        assert ahead > 0.03, ahead  # what the gate refused at arming
    policy.set_engaged(False)  # HOLD, e-stop, disarm: the next engagement starts over
    again = policy.infer(_observation(late + 1.0, start, grippers))
    np.testing.assert_array_equal(_rows(again, Arm.LEFT), np.tile(start[Arm.LEFT], (len(again), 1)))
    assert (policy.plan if isinstance(policy, ExpertChunkPolicy) else policy._motion) is None
