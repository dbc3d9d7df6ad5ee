"""Families: each trains, reloads from a checkpoint and produces finite chunks of the right
shape; the live pipeline normalizes once, decodes against the query-tick pose, keeps its
window, is deterministic given a seed, and refuses unsupported combinations."""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest
import torch

from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.errors import ConfigError, PoseError
from egomimic_hw.frames import same_pose, wrist_relative_decode
from egomimic_hw.rotations import quat_to_mat
from egomimic_policy.checkpoints import save_checkpoint
from egomimic_policy.families import FAMILIES, FoldAlgorithm, build_algorithm, make_policy
from egomimic_policy.families.fold import FoldConfig, live_levels
from egomimic_policy.families.layers import MoEFeedForward
from egomimic_policy.families.pi import resize_with_pad
from egomimic_policy.features import (
    ACTION_DIM,
    ACTION_KEY,
    ACTION_LAYOUT,
    STATE_KEY,
    encode_action_chunk,
    neutral_norm_stats,
    state_ee_pose,
)
from egomimic_policy.interface import ChunkPolicy
from tests.unit.egomimic_policy.conftest import make_observation, pose_from

UPSTREAM_LIVE_LEVELS = [99, 92, 86, 79, 73, 66, 59, 53, 46, 40, 33, 26, 20, 13, 7, 0]


def synthetic_batch(algo, norm, *, batch=2, seed=0):
    """A raw demonstration batch: a smooth motion of both arms away from the start pose."""
    rng = np.random.default_rng(seed)
    h, t = algo.config.chunk_length, algo.config.n_obs_steps
    images = {c: rng.integers(0, 256, (batch, t, 60, 80, 3), dtype=np.uint8) for c in CAMERAS}
    states, actions = [], []
    for b in range(batch):
        start = {
            Arm.LEFT: pose_from((0.3, 0.1 + 0.01 * b, 0.2), (0.2, 0.1, 0.3)),
            Arm.RIGHT: pose_from((0.3, -0.1, 0.2 - 0.01 * b), (-0.2, 0.0, 0.1)),
        }
        s = np.linspace(0.0, 1.0, h)[:, None]
        targets = {
            arm: np.concatenate([start[arm][:3] + s * [0.015, 0.0, -0.01], np.tile(start[arm][3:], (h, 1))], 1)
            for arm in ARMS
        }
        grippers = {arm: np.linspace(0.2, 0.8, h) for arm in ARMS}
        actions.append(encode_action_chunk(start, targets, grippers))
        states.append(np.tile(state_ee_pose(start[Arm.LEFT], 0.2, start[Arm.RIGHT], 0.2), (t, 1)))
    return algo.batch_from_raw(images, np.stack(states), np.stack(actions), norm)


def fixed_loss(algo, batch) -> float:
    with torch.no_grad():
        return float(algo.loss(batch, generator=torch.Generator().manual_seed(1234))[0])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_trains_saves_reloads_and_infers(family, tmp_path):
    torch.manual_seed(0)
    algo = build_algorithm(family, seed=0)
    norm = neutral_norm_stats()
    batch = synthetic_batch(algo, norm)
    before = fixed_loss(algo, batch)
    opt = torch.optim.Adam(algo.parameters(), lr=2e-3)
    algo.train()
    for step in range(12):
        loss, logs = algo.loss(batch, generator=torch.Generator().manual_seed(step))
        assert torch.isfinite(loss) and logs
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = fixed_loss(algo, batch)
    assert after < 0.8 * before, (before, after)

    path = save_checkpoint(tmp_path / "run" / "last.ckpt", algo, norm, epoch=1, global_step=12, optimizer=opt)
    policy = make_policy(str(path), cache_dir=tmp_path / "cache", seed=5)
    assert isinstance(policy, ChunkPolicy)
    assert (policy.spec.family, policy.spec.embodiment, policy.spec.action_layout) == (
        family,
        "eva_bimanual",
        ACTION_LAYOUT,
    )
    assert policy.spec.chunk_length == 100 and policy.spec.extra["global_step"] == "12"
    obs = make_observation(stamp_ns=777)
    chunk = policy.infer(obs)
    assert chunk.observation_stamp_ns == 777 and chunk.period_s == pytest.approx(1 / 30)
    assert len(chunk) == 100
    for poses, grip in ((chunk.left_pose, chunk.left_gripper), (chunk.right_pose, chunk.right_gripper)):
        assert poses.shape == (100, 7) and grip.shape == (100,)
        assert np.all(np.isfinite(poses)) and np.all((grip >= 0) & (grip <= 1))
        np.testing.assert_allclose(np.linalg.norm(poses[:, 3:], axis=1), 1.0, atol=1e-9)

    # The checkpoint carries exactly the trained weights: same seed, same chunk as in memory.
    algo.eval()
    direct = algo.create_rollout_policy(norm, fingerprint="in-memory", seed=5).infer(obs)
    np.testing.assert_allclose(chunk.left_pose, direct.left_pose, atol=1e-6)
    np.testing.assert_allclose(chunk.right_gripper, direct.right_gripper, atol=1e-6)


class Recorder:
    """Wraps a policy's condition/sample to see what the model gets, optionally fixing its output."""

    def __init__(self, policy, fixed_output=None):
        self.states, self.calls = [], 0
        algo = policy.algorithm
        real_condition, real_sample = algo.condition, algo.sample

        def condition(features, state):
            self.states.append(state.detach().clone().numpy()[0])
            return real_condition(features, state)

        def sample(context, generator):
            self.calls += 1
            out = real_sample(context, generator)
            return out if fixed_output is None else torch.as_tensor(fixed_output, dtype=out.dtype)[None]

        algo.condition, algo.sample = condition, sample


def relative_targets_normalized(policy, obs):
    """A normalized chunk that decodes to known targets: 1 cm steps along the wrist axes."""
    h = policy.spec.chunk_length
    current = {Arm.LEFT: obs.left_pose, Arm.RIGHT: obs.right_pose}
    rel_xyz = np.linspace(0, 0.015, h)[:, None] * [1.0, -0.5, 0.25]
    targets = {
        arm: wrist_relative_decode(current[arm], np.concatenate([rel_xyz, np.tile([1, 0, 0, 0, 1, 0], (h, 1))], 1))
        for arm in ARMS
    }
    grippers = {arm: np.full(h, 0.3) for arm in ARMS}
    raw = encode_action_chunk(current, targets, grippers)
    return policy.norm_stats.normalize(6, ACTION_KEY, raw), rel_xyz


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rows_decode_against_the_pose_of_this_observation(family):
    policy = make_policy(family)
    first = make_observation(stamp_ns=1)
    normalized, rel_xyz = relative_targets_normalized(policy, first)
    Recorder(policy, fixed_output=normalized)
    chunk = policy.infer(first)
    rot_l = quat_to_mat(first.left_pose[3:])
    np.testing.assert_allclose(chunk.left_pose[:, :3], first.left_pose[:3] + rel_xyz @ rot_l.T, atol=1e-5)
    assert same_pose(chunk.left_pose[0], first.left_pose, atol=1e-5)
    np.testing.assert_allclose(chunk.left_gripper, 0.3, atol=1e-5)

    # Next query from a different pose: every row is anchored to the NEW observation's pose,
    # not to the previous frame still in the window.
    second = make_observation(
        stamp_ns=2, left=((0.25, 0.2, 0.3), (1.0, 0.2, -0.4)), right=((0.2, -0.2, 0.3), (0.3, -0.2, 0.9))
    )
    chunk2 = policy.infer(second)
    for arm, poses in ((Arm.LEFT, chunk2.left_pose), (Arm.RIGHT, chunk2.right_pose)):
        cur = getattr(second, f"{arm.value}_pose")
        expected = wrist_relative_decode(
            cur, np.concatenate([rel_xyz, np.tile([1, 0, 0, 0, 1, 0], (len(rel_xyz), 1))], 1)
        )
        assert all(same_pose(p, e, atol=1e-5) for p, e in zip(poses, expected))
    assert not np.allclose(chunk2.left_pose[:, :3], chunk.left_pose[:, :3], atol=1e-3)


def test_gripper_clamped_and_non_finite_refused():
    policy = make_policy("fold")
    obs = make_observation()
    out = np.zeros((100, ACTION_DIM))
    out[:, 9], out[:, 19] = 100.0, -100.0  # far outside [0, 1] after unnormalization
    Recorder(policy, fixed_output=out)
    chunk = policy.infer(obs)
    assert np.all(chunk.left_gripper == 1.0) and np.all(chunk.right_gripper == 0.0)
    bad = make_policy("fold")
    out[3, 4] = np.nan
    Recorder(bad, fixed_output=out)
    with pytest.raises(PoseError, match="non-finite"):
        bad.infer(obs)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_state_is_normalized_exactly_once(family):
    policy = make_policy(family)
    calls = {"normalize": 0, "unnormalize": 0}
    real = policy.norm_stats

    class Counting:
        def normalize(self, *a):
            calls["normalize"] += 1
            return real.normalize(*a)

        def unnormalize(self, *a):
            calls["unnormalize"] += 1
            return real.unnormalize(*a)

    policy.norm_stats = Counting()
    rec = Recorder(policy)
    obs = make_observation()
    policy.infer(obs)
    assert calls == {"normalize": 1, "unnormalize": 1} and rec.calls == 1
    raw = state_ee_pose(obs.left_pose, obs.left_gripper, obs.right_pose, obs.right_gripper)
    expected = real.normalize(6, STATE_KEY, np.tile(raw, (policy.algorithm.config.n_obs_steps, 1)))
    np.testing.assert_allclose(rec.states[0], expected, atol=1e-6)
    # normalizing twice would give something else: the check above can fail
    assert not np.allclose(real.normalize(6, STATE_KEY, expected), expected, atol=1e-3)


def test_window_is_the_previous_tick_from_history_padded_at_episode_start():
    """[t-1, t] as in training: t-1 is the previous control tick (Observation.history), not the
    frame of the previous query; at episode start (no history) the first frame is repeated."""
    policy = make_policy("fold")
    assert policy.spec.obs_steps == 2
    rec = Recorder(policy)
    a, b = make_observation(stamp_ns=1), make_observation(stamp_ns=2, grippers=(0.9, 0.1))
    c = make_observation(stamp_ns=3, grippers=(0.3, 0.6))

    def norm(o):
        return policy.norm_stats.normalize(
            6, STATE_KEY, state_ee_pose(o.left_pose, o.left_gripper, o.right_pose, o.right_gripper)
        )

    policy.infer(a)
    policy.infer(replace(c, history=(a, b)))  # the query before saw a; the tick before this one saw b
    policy.infer(replace(b, history=()))
    np.testing.assert_allclose(rec.states[0], [norm(a), norm(a)], atol=1e-6)
    np.testing.assert_allclose(rec.states[1], [norm(b), norm(c)], atol=1e-6)
    np.testing.assert_allclose(rec.states[2], [norm(b), norm(b)], atol=1e-6)


def test_deterministic_given_seed_and_reset_replays():
    obs = make_observation()
    p1, p2, p3 = make_policy("fold", seed=3), make_policy("fold", seed=3), make_policy("fold", seed=4)
    c1, c2, c3 = p1.infer(obs), p2.infer(obs), p3.infer(obs)
    np.testing.assert_array_equal(c1.left_pose, c2.left_pose)
    assert p1.spec.fingerprint == p2.spec.fingerprint != p3.spec.fingerprint
    assert not np.allclose(c1.left_pose, c3.left_pose)
    assert not np.allclose(p1.infer(obs).left_pose, c1.left_pose)  # the noise moves on...
    p1.reset()
    np.testing.assert_array_equal(p1.infer(obs).left_pose, c1.left_pose)  # ...and restarts on reset


def test_fold_live_schedule_is_upstreams_sixteen_levels():
    assert list(live_levels(16, 100)) == UPSTREAM_LIVE_LEVELS
    algo = FoldAlgorithm(FoldConfig())
    assert list(algo.levels) == UPSTREAM_LIVE_LEVELS
    assert algo.alpha_bar.shape == (100,) and "alpha_bar" in algo.state_dict()
    assert algo.alpha_bar[0] > 0.999 and algo.alpha_bar[-1] == pytest.approx(1e-8)
    assert torch.all(algo.alpha_bar[1:] < algo.alpha_bar[:-1])
    for steps in (16, 100):
        algo = build_algorithm("fold", overrides={"num_inference_steps": steps}).eval()
        calls = []
        real = algo.denoise
        algo.denoise = lambda x, level, cond: calls.append(int(level[0])) or real(x, level, cond)
        with torch.inference_mode():
            out = algo.sample(torch.zeros(1, algo.config.d_model), torch.Generator().manual_seed(0))
        assert out.shape == (1, 100, 20) and float(out.abs().max()) <= 1.0
        assert calls == (UPSTREAM_LIVE_LEVELS if steps == 16 else list(range(99, -1, -1)))
    for bad in (0, 101):
        with pytest.raises(ConfigError, match="num_inference_steps"):
            build_algorithm("fold", overrides={"num_inference_steps": bad})


def test_pi_flow_steps_padding_and_letterboxed_images():
    algo = build_algorithm("pi").eval()
    assert algo.config.action_pad_dim == 32 and algo.config.flow_steps == 10
    times = []
    real = algo.velocity

    def velocity(x, t, memory):
        assert x.shape[-1] == 32
        times.append(float(t[0]))
        return real(x, t, memory)

    algo.velocity = velocity
    with torch.inference_mode():
        out = algo.sample(torch.zeros(1, 5, algo.config.d_model), torch.Generator().manual_seed(0))
    assert out.shape == (1, 100, 20)
    np.testing.assert_allclose(times, np.linspace(1.0, 0.1, 10), atol=1e-6)
    frame = np.full((480, 640, 3), 255, dtype=np.uint8)
    x = algo.image_input(frame)
    assert x.shape == (3, 224, 224) and x.dtype == np.float32
    assert x.min() == -1.0 and x.max() == 1.0  # black letterbox bars, white picture
    assert np.all(x[:, :28] == -1.0) and np.all(x[:, 28:196] == 1.0) and np.all(x[:, 196:] == -1.0)
    np.testing.assert_array_equal(
        resize_with_pad(frame, 224)[28:196], cv2.resize(frame, (224, 168), interpolation=cv2.INTER_AREA)
    )


@pytest.mark.parametrize("shape", [(240, 320), (481, 641), (96, 128)])
def test_any_image_size_is_resized_with_inter_area(shape):
    policy = make_policy("fold")
    obs = make_observation(shape=shape)
    chunk = policy.infer(obs)
    assert len(chunk) == 100
    img = obs.images["front_1"]
    expected = cv2.resize(img, (128, 96), interpolation=cv2.INTER_AREA).transpose(2, 0, 1) / 255.0
    np.testing.assert_allclose(policy.algorithm.image_input(img), expected, atol=1e-6)


def test_moe_routes_each_token_to_top_k_experts_with_balance_loss():
    torch.manual_seed(0)
    layer = MoEFeedForward(16, 32, n_experts=4, top_k=2)
    x = torch.randn(3, 50, 16)
    y = layer(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    assert float(layer.expert_fraction.sum()) == pytest.approx(1.0)
    # Output = sum over the chosen experts of renormalized weight * expert(x) for every token.
    tokens = x.reshape(-1, 16)
    probs = torch.softmax(layer.router(tokens), -1)
    w, idx = torch.topk(probs, 2, -1)
    w = w / w.sum(-1, keepdim=True)
    manual = sum(
        w[:, j : j + 1] * torch.stack([layer.expert(int(e), t[None])[0] for t, e in zip(tokens, idx[:, j])])
        for j in range(2)
    )
    torch.testing.assert_close(y.reshape(-1, 16), manual, atol=1e-5, rtol=1e-5)
    layer.dense_token_limit = 0  # the per-expert (sparse) path gives the same output
    torch.testing.assert_close(layer(x), y, atol=1e-5, rtol=1e-5)
    # Uniform router: every expert equally likely -> load-balancing loss exactly 1.
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.bias.zero_()
    layer(x)
    assert float(layer.aux_loss.detach()) == pytest.approx(1.0, abs=1e-6)
    algo = build_algorithm("moe")
    _, logs = algo.loss(synthetic_batch(algo, neutral_norm_stats()), generator=torch.Generator().manual_seed(0))
    assert logs["loss/moe_lb"] >= 1.0 - 1e-6 and "moe/expert_fraction_0" in logs
    assert len(algo.moe_layers()) == algo.config.n_layers


def test_unsupported_combinations_are_refused_with_a_reason():
    with pytest.raises(ConfigError, match="use family 'moe'"):
        make_policy("fold", overrides={"n_experts": 8})
    with pytest.raises(ConfigError, match="num_inference_steps is Fold's"):
        make_policy("pi", overrides={"num_inference_steps": 16})
    with pytest.raises(ConfigError, match="flow matching is family 'pi'"):
        make_policy("moe", overrides={"flow_steps": 10})
    with pytest.raises(ConfigError, match="top_k"):
        make_policy("moe", overrides={"n_experts": 2, "top_k": 3})
    with pytest.raises(ConfigError, match="neither a family"):
        make_policy("diffusion")
    with pytest.raises(ConfigError, match="no CUDA|not supported"):
        make_policy("fold", device="cuda" if not torch.cuda.is_available() else "xla")
    with pytest.raises(ConfigError, match="has no field 'd_modle'"):
        make_policy("fold", overrides={"d_modle": 32})
    policy = make_policy("fold")
    obs = make_observation()
    with pytest.raises(ConfigError, match="lacks cameras"):
        policy.infer(type(obs)(**{**obs.__dict__, "images": {"front_1": obs.images["front_1"]}}))
    with pytest.raises(ConfigError, match="RGB uint8"):
        policy.infer(
            type(obs)(**{**obs.__dict__, "images": {c: im.astype(np.float32) for c, im in obs.images.items()}})
        )
    with pytest.raises(PoseError):
        policy.infer(type(obs)(**{**obs.__dict__, "left_pose": np.array([0, 0, 0, 1, 0, 0, np.nan])}))


@pytest.mark.parametrize(
    "family,upstream",
    [
        ("fold", {"d_model": 256, "n_layers": 4, "n_heads": 4}),
        ("moe", {"d_model": 256, "n_layers": 4, "n_heads": 4, "n_experts": 8, "top_k": 4}),
        ("pi", {"d_model": 256, "n_layers": 4, "n_heads": 4, "patch_size": 16, "prefix_layers": 2}),
    ],
)
def test_upstream_sizes_are_reachable_by_config(family, upstream):
    small = build_algorithm(family)
    with torch.device("meta"):  # structure only: no memory, no time
        big = FAMILIES[family](FAMILIES[family].config_type.from_dict(upstream))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(big) > 10 * count(small)
    assert big.model_config()["d_model"] == 256 and big.config.chunk_length == 100
