"""The training loop: the loss falls on an overfit set, a resumed run continues exactly (also from
a format_version 1 checkpoint), the checkpoint is in upstream's layout and runs through
make_policy, and the schedule, batches, progress and pruning behave."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from egomimic_hw.errors import ConfigError
from egomimic_policy.checkpoints import CheckpointError, load_checkpoint
from egomimic_policy.checkpoints.layout import FORMAT_VERSION, WRAPPER_TARGET, model_state_dict
from egomimic_policy.families import FoldAlgorithm, make_policy
from egomimic_policy.interface import ChunkPolicy
from egomimic_policy.training.config import TrainConfig
from egomimic_policy.training.dataset import collate_windows
from egomimic_policy.training.progress import Progress
from egomimic_policy.training.train import (
    LAST,
    WindowBatches,
    evaluate_loss,
    learning_rate,
    prepare_run,
    train,
)
from tests.unit.egomimic_policy.conftest import make_observation
from tests.unit.egomimic_policy.training.episodes import write_episode

TINY_FOLD = {
    "chunk_length": 8,
    "d_model": 32,
    "n_layers": 1,
    "n_heads": 2,
    "image_height": 24,
    "image_width": 32,
    "cnn_channels": [8, 8],
    "keypoints": 4,
    "image_feature_dim": 16,
}
TINY = {
    "fold": TINY_FOLD,
    "moe": {**TINY_FOLD, "n_experts": 2, "top_k": 1},
    "pi": {"chunk_length": 8, "d_model": 32, "n_layers": 1, "n_heads": 2, "image_size": 32, "patch_size": 16},
}


def config(**kw) -> TrainConfig:
    base = dict(steps=6, batch_size=4, lr=1e-3, device="cpu", num_threads=1, checkpoint_every=0, log_every=1)
    return TrainConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_eps")
    write_episode(root / "a.zarr", 7)
    write_episode(root / "b.zarr", 5)
    return root


OVERFIT = {"fold": (100, 3e-3, 0.5), "moe": (100, 3e-3, 0.5), "pi": (200, 1e-3, 0.7)}
"""family -> (steps, lr, bound on the loss ratio). PI's flow loss falls more slowly on so tiny a
model (about 0.5x after 200 steps vs 0.3-0.4x for Fold and MoE after 100), so its bound is looser."""


def mean_loss(run, raw) -> float:
    """The loss with fixed noise, averaged over a few draws (one draw of levels is noisy)."""
    return float(np.mean([evaluate_loss(run.algorithm, raw, run.norm_stats, seed=s) for s in range(4)]))


@pytest.mark.parametrize("family", sorted(TINY))
def test_loss_falls_on_an_overfit_set(family, tmp_path):
    one = write_episode(tmp_path / "two_steps.zarr", 2)  # two windows
    steps, lr, bound = OVERFIT[family]
    cfg = config(steps=steps, batch_size=2, lr=lr, seed=1)
    run = prepare_run(family=family, model_overrides=TINY[family], config=cfg, episodes=[one])
    assert len(run.dataset) == 2
    raw = collate_windows([run.dataset[0], run.dataset[1]])
    before = mean_loss(run, raw)
    result = train(run, tmp_path / "out", stream=io.StringIO())
    after = mean_loss(run, raw)
    assert result.step == steps and len(result.losses) == steps and result.steps_per_s > 0
    print(f"{family}: fixed-noise loss {before:.4f} -> {after:.4f} ({after / before:.2f}x) in {steps} steps")
    assert after < bound * before, (family, before, after)


def test_resume_continues_exactly(episodes, tmp_path):
    cfg = config(steps=7, checkpoint_every=2, keep_checkpoints=0, warmup_steps=3, seed=3)
    whole = train(
        prepare_run(family="fold", model_overrides=TINY_FOLD, config=cfg, episodes=[episodes]), tmp_path / "a"
    )
    assert sorted(p.name for p in (tmp_path / "a").glob("step_*.ckpt")) == [
        "step_00000002.ckpt",
        "step_00000004.ckpt",
        "step_00000006.ckpt",
    ]
    run = prepare_run(
        family=None,
        model_overrides=TINY_FOLD,
        config=cfg,
        episodes=[episodes],
        resume=tmp_path / "a" / "step_00000004.ckpt",
    )
    assert run.start_step == 4 and run.family == "fold"
    resumed = train(run, tmp_path / "b", stream=io.StringIO())
    assert resumed.step == 7
    assert resumed.losses == whole.losses[4:]  # bit for bit: same batches, noise, moments and rate
    a = model_state_dict(load_checkpoint(tmp_path / "a" / LAST))
    b = model_state_dict(load_checkpoint(tmp_path / "b" / LAST))
    assert all(torch.equal(a[k], b[k]) for k in a)
    ckpt = load_checkpoint(tmp_path / "b" / LAST)
    assert ckpt["global_step"] == 7 and ckpt["optimizer_states"] and ckpt["loops"]["train_config"]["seed"] == 3

    # The same step in the format_version 1 layout (`model.`, model_config) resumes the same run.
    v1 = load_checkpoint(tmp_path / "a" / "step_00000004.ckpt")
    hp = v1["hyper_parameters"]
    v1["state_dict"] = {"model." + k: v for k, v in model_state_dict(v1).items()}
    v1["hyper_parameters"] = {
        "model_config": hp["config_tree"]["model"]["robomimic_model"],
        "norm_stats_state": hp["norm_stats_state"],
        "format_version": 1,
    }
    torch.save(v1, tmp_path / "v1.ckpt")
    run = prepare_run(
        family="fold", model_overrides=TINY_FOLD, config=cfg, episodes=[episodes], resume=tmp_path / "v1.ckpt"
    )
    assert train(run, tmp_path / "c", stream=io.StringIO()).losses == whole.losses[4:]
    c = load_checkpoint(tmp_path / "c" / LAST)
    assert c["hyper_parameters"]["format_version"] == FORMAT_VERSION and "model_config" not in c["hyper_parameters"]


def test_checkpoint_runs_through_make_policy(episodes, tmp_path):
    run = prepare_run(family="fold", model_overrides=TINY_FOLD, config=config(steps=3), episodes=[episodes])
    result = train(run, tmp_path / "run", stream=io.StringIO())
    ckpt = load_checkpoint(result.last_checkpoint)  # upstream's layout, and nothing claimed it does not hold
    assert ckpt["state_dict"] and all(k.startswith("nets.policy.") for k in ckpt["state_dict"])
    assert sorted(ckpt["hyper_parameters"]) == ["config_tree", "format_version", "norm_stats_state"]
    model = ckpt["hyper_parameters"]["config_tree"]["model"]
    assert model["_target_"] == WRAPPER_TARGET and model["robomimic_model"]["_target_"] == FoldAlgorithm.target()
    assert model["robomimic_model"] == run.algorithm.model_config()
    assert ckpt["hyper_parameters"]["format_version"] == FORMAT_VERSION and "pytorch-lightning_version" not in ckpt
    assert ckpt["optimizer_states"] and ckpt["loops"]["windows"] == len(run.dataset)
    policy = make_policy(str(result.last_checkpoint), cache_dir=tmp_path / "cache", seed=2)
    assert isinstance(policy, ChunkPolicy)
    assert policy.spec.family == "fold" and policy.spec.chunk_length == 8 and policy.spec.extra["global_step"] == "3"
    assert policy.norm_stats.to_state() == run.norm_stats.to_state()  # the data's stats, not the neutral ones
    obs = make_observation()
    chunk = policy.infer(obs)
    assert chunk.left_pose.shape == (8, 7) and chunk.right_gripper.shape == (8,)
    assert np.all(np.isfinite(chunk.left_pose)) and chunk.observation_stamp_ns == obs.stamp_ns
    direct = run.algorithm.cpu().eval().create_rollout_policy(run.norm_stats, fingerprint="in-memory", seed=2)
    np.testing.assert_array_equal(direct.infer(obs).left_pose, chunk.left_pose)  # the trained weights, exactly


def test_resume_refuses_what_cannot_continue(episodes, tmp_path):
    cfg = config(steps=2)
    train(prepare_run(family="fold", model_overrides=TINY_FOLD, config=cfg, episodes=[episodes]), tmp_path / "a")
    last = tmp_path / "a" / LAST
    with pytest.raises(ConfigError, match=r"differs from the checkpoint's in \['d_model'\]"):
        prepare_run(
            family="fold", model_overrides={**TINY_FOLD, "d_model": 64}, config=cfg, episodes=[episodes], resume=last
        )
    with pytest.raises(ConfigError, match="'fold' checkpoint, not 'pi'"):
        prepare_run(family="pi", model_overrides={}, config=cfg, episodes=[episodes], resume=last)
    done = prepare_run(family="fold", model_overrides=TINY_FOLD, config=cfg, episodes=[episodes], resume=last)
    with pytest.raises(ConfigError, match="at step 2, the run ends at step 2"):
        train(done, tmp_path / "a")
    ckpt = load_checkpoint(last)
    del ckpt["optimizer_states"]
    torch.save(ckpt, tmp_path / "no_optim.ckpt")
    with pytest.raises(CheckpointError, match="no optimizer state"):
        prepare_run(
            family=None, model_overrides=TINY_FOLD, config=cfg, episodes=[episodes], resume=tmp_path / "no_optim.ckpt"
        )


def test_periodic_checkpoints_are_pruned_and_last_is_the_newest(episodes, tmp_path):
    cfg = config(steps=5, checkpoint_every=1, keep_checkpoints=2, log_every=2)
    run = prepare_run(family="fold", model_overrides=TINY_FOLD, config=cfg, episodes=[episodes])
    train(run, tmp_path, stream=io.StringIO())
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == [LAST, "step_00000004.ckpt", "step_00000005.ckpt"]
    assert load_checkpoint(tmp_path / LAST)["global_step"] == 5
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 5] and all("loss/diffusion" in r for r in rows)
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["windows"] == 12 and info["family"] == "fold" and info["total_steps"] == 5


def test_batches_are_a_function_of_seed_and_step():
    batches = WindowBatches(10, 3, seed=0, start=0, stop=9)  # 3 batches per epoch, 1 window left over
    seen = [batches.batch(s) for s in range(9)]
    assert list(batches) == seen and len(batches) == 9
    for epoch in range(3):
        flat = sum(seen[3 * epoch : 3 * epoch + 3], [])
        assert len(set(flat)) == 9  # no window twice within an epoch
    assert seen[0:3] != seen[3:6]  # a new order each epoch
    later = WindowBatches(10, 3, seed=0, start=5, stop=9)
    assert list(later) == seen[5:9]
    assert WindowBatches(2, 8, seed=0, start=0, stop=1).batch(0) in ([0, 1], [1, 0])  # fewer windows than a batch


def test_learning_rate_warms_up_linearly_then_stays():
    cfg = config(lr=1e-3, warmup_steps=4)
    assert [learning_rate(cfg, s) for s in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert learning_rate(replace(cfg, warmup_steps=0), 0) == 1e-3


def test_cosine_learning_rate_falls_from_lr_to_zero_after_the_warmup():
    cfg = config(lr=1e-3, warmup_steps=2, steps=10, lr_schedule="cosine")
    rates = [learning_rate(cfg, s) for s in range(11)]
    assert rates[:3] == pytest.approx([5e-4, 1e-3, 1e-3])
    assert rates[6] == pytest.approx(5e-4) and rates[10] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(rates[1:], rates[2:], strict=False))
    assert learning_rate(cfg, 6, total=18) == pytest.approx(1e-3 * 0.5 * (1 + np.cos(np.pi * 4 / 16)))
    with pytest.raises(ConfigError, match="lr_schedule"):
        config(lr_schedule="linear")


def test_resume_continues_exactly_with_a_cosine_schedule(episodes, tmp_path):
    cfg = config(steps=6, lr_schedule="cosine", checkpoint_every=3, keep_checkpoints=0)
    full = train(
        prepare_run(family="fold", model_overrides=TINY_FOLD, config=cfg, episodes=[episodes]),
        tmp_path / "a",
        stream=io.StringIO(),
    )
    resumed = prepare_run(
        family="fold",
        model_overrides=TINY_FOLD,
        config=cfg,
        episodes=[episodes],
        resume=tmp_path / "a" / "step_00000003.ckpt",
    )
    rest = train(resumed, tmp_path / "b", stream=io.StringIO())
    assert rest.losses == full.losses[3:]
    rows = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["lr"] == pytest.approx(learning_rate(cfg, 5))


def test_progress_plain_lines_off_a_terminal_and_one_line_on_it():
    t = [0.0]
    plain = io.StringIO()
    p = Progress(6, stream=plain, every=2, clock=lambda: t[0], tty=False)
    p.start(0)
    for step in range(1, 7):
        t[0] += 0.5
        p.update(step, 1.0 / step)
    p.close()
    lines = plain.getvalue().splitlines()
    assert lines == [
        "step 2/6  loss 0.5000  2.00 steps/s",
        "step 4/6  loss 0.2500  2.00 steps/s",
        "step 6/6  loss 0.1667  2.00 steps/s",
    ]
    term = io.StringIO()
    p = Progress(3, stream=term, clock=lambda: t[0], tty=True, min_interval_s=0.0)
    for step in (1, 2, 3):
        t[0] += 1.0
        p.update(step, 0.1)
    p.close()
    assert term.getvalue().count("\r") == 3 and term.getvalue().endswith("\n") and term.getvalue().count("\n") == 1


def test_train_config_refuses_bad_values_by_name():
    with pytest.raises(ConfigError, match="exactly one of train.steps and train.epochs"):
        TrainConfig(steps=0, epochs=0)
    with pytest.raises(ConfigError, match="unknown setting.*'weight_decy'"):
        TrainConfig.from_dict({"weight_decy": 0.1})
    with pytest.raises(ConfigError, match="device"):
        TrainConfig(device="tpu")
    assert TrainConfig.from_dict({"epochs": 2, "lr": "1e-4"}).lr == 1e-4  # YAML 1.1 reads 1e-4 as a string
    assert TrainConfig.from_dict({"epochs": 3}).total_steps(batches_per_epoch=5) == 15


def test_ctrl_c_saves_the_last_finished_step(episodes, tmp_path, monkeypatch):
    run = prepare_run(family="fold", model_overrides=TINY_FOLD, config=config(steps=10), episodes=[episodes])
    real_getitem = type(run.dataset).__getitem__
    calls = []

    def interrupted(self, index):
        calls.append(index)
        if len(calls) > 3 * 4:  # three batches of four, then Ctrl-C while reading the fourth
            raise KeyboardInterrupt
        return real_getitem(self, index)

    monkeypatch.setattr(type(run.dataset), "__getitem__", interrupted)
    err = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        train(run, tmp_path, stream=err)
    assert load_checkpoint(tmp_path / LAST)["global_step"] == 3
    assert "interrupted: saved" in err.getvalue() and "at step 3" in err.getvalue()


def test_loader_workers_give_the_same_run(episodes, tmp_path):
    losses = []
    for workers in (0, 1):
        cfg = config(steps=3, num_workers=workers, frame_cache_mb=0)
        run = prepare_run(family="fold", model_overrides=TINY_FOLD, config=cfg, episodes=[episodes])
        losses.append(train(run, tmp_path / str(workers), stream=io.StringIO()).losses)
    assert losses[0] == losses[1]


def test_prepared_frames_train_the_same_run_as_full_frames(episodes, tmp_path):
    """prepare_frames keeps frames at the model's input size (decoded once); the run is the one
    full-size frames give, loss for loss, preloaded or not."""
    losses, sizes = [], []
    for prepare, preload in ((False, 0), (True, 0), (True, 2)):
        cfg = config(steps=3, prepare_frames=prepare, preload_workers=preload)
        run = prepare_run(family="fold", model_overrides=TINY_FOLD, config=cfg, episodes=[episodes])
        sizes.append(run.dataset.image_size)
        if preload:
            assert run.dataset.prepared_bytes == 12 * 3 * 24 * 32 * 3  # every frame, before the first step
        losses.append(train(run, tmp_path / f"{prepare}{preload}", stream=io.StringIO()).losses)
    assert sizes == [None, (24, 32), (24, 32)]
    assert losses[0] == losses[1] == losses[2]
