"""egomimic-train: a run and its resume from the command line; bad input exits 2 with one line
naming it, never a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from egomimic_policy.checkpoints import load_checkpoint
from egomimic_policy.families import build_algorithm
from egomimic_policy.training.cli import EXIT_OK, EXIT_USAGE, main
from egomimic_policy.training.config import TrainConfig, read_train_file
from tests.unit.egomimic_policy.training.episodes import write_episode
from tests.unit.egomimic_policy.training.test_train import TINY_FOLD

REPO = Path(__file__).resolve().parents[4]
TRAIN = {"steps": 3, "batch_size": 2, "device": "cpu", "num_threads": 1, "checkpoint_every": 2, "log_every": 1}


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_eps")
    write_episode(root / "a.zarr", 5)
    return root


def write_config(path, **sections):
    data = {"model": TINY_FOLD, "train": TRAIN, **sections}
    path.write_text(yaml.safe_dump({k: v for k, v in data.items() if v is not None}))
    return path


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_trains_then_resumes(episodes, tmp_path, capsys):
    cfg = write_config(tmp_path / "train.yaml", family="fold")
    out = tmp_path / "run"
    code, err = run_cli(capsys, "--config", cfg, "--episodes", episodes, "--out", out)
    assert code == EXIT_OK, err
    assert "fold (" in err and "1 episode(s), 5 windows, device cpu" in err and "done: step 3" in err
    assert sorted(p.name for p in out.glob("*.ckpt")) == ["last.ckpt", "step_00000002.ckpt"]
    code, err = run_cli(
        capsys, "--config", cfg, "--episodes", episodes, "--out", out, "--resume", out / "last.ckpt", "--steps", 5
    )
    assert code == EXIT_OK, err
    assert "resuming at step 3" in err and load_checkpoint(out / "last.ckpt")["global_step"] == 5


def test_help_describes_the_config(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for words in ("--episodes", "--resume", "train_small.yaml", "last.ckpt", "exit codes", "batch_size"):
        assert words in text


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("no_config", "cannot read config"),
        ("bad_yaml", "not valid YAML"),
        ("unknown_key", "unknown key(s) ['optimizer']"),
        ("unknown_train", "unknown setting(s) ['learning_rate']"),
        ("unknown_model", "FoldConfig has no field 'depth'"),
        ("no_family", "no policy family"),
        ("no_episodes", "no episodes here"),
        ("missing_episode", "no such file or directory"),
        ("random_bytes_episode", "is not an episode"),
        ("damaged_episode", "its zarr metadata is damaged"),
        ("missing_camera", "no camera 'right_wrist'"),
        ("out_has_run", "already holds a run's checkpoints"),
        ("bad_resume", "cannot read checkpoint"),
        ("bad_steps", "--steps must be >= 1"),
    ],
)
def test_bad_input_exits_2_with_one_line(setup, message, episodes, tmp_path, capsys):
    cfg = write_config(tmp_path / "train.yaml")
    args = ["--family", "fold", "--episodes", episodes, "--out", tmp_path / "out"]
    if setup == "no_config":
        cfg = tmp_path / "missing.yaml"
    elif setup == "bad_yaml":
        cfg.write_text("train: [unclosed\n")
    elif setup == "unknown_key":
        write_config(cfg, optimizer={"lr": 1})
    elif setup == "unknown_train":
        write_config(cfg, train={"learning_rate": 1e-3})
    elif setup == "unknown_model":
        write_config(cfg, model={"depth": 3})
    elif setup == "no_family":
        args = args[2:]
    elif setup == "no_episodes":
        (tmp_path / "empty").mkdir()
        args[3] = tmp_path / "empty"
    elif setup == "missing_episode":
        args[3] = tmp_path / "gone.zarr"
    elif setup == "random_bytes_episode":
        args[3] = tmp_path / "noise.zarr"
        args[3].write_bytes(np.random.default_rng(0).bytes(4096))
    elif setup == "damaged_episode":  # a store whose zarr.json is cut short: was a UnicodeDecodeError traceback
        args[3] = tmp_path / "cut.zarr"
        shutil.copytree(Path(episodes) / "a.zarr", args[3])
        meta = args[3] / "zarr.json"
        meta.write_bytes(meta.read_bytes()[: len(meta.read_bytes()) // 2])
    elif setup == "missing_camera":
        args[3] = write_episode(tmp_path / "cams.zarr", 3, cameras=("front_1", "left_wrist"))
    elif setup == "out_has_run":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "last.ckpt").write_bytes(b"x")
    elif setup == "bad_resume":
        (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
        args += ["--resume", tmp_path / "junk.ckpt"]
    elif setup == "bad_steps":
        args += ["--steps", 0]
    code, err = run_cli(capsys, "--config", cfg, *args)
    assert code == EXIT_USAGE
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("egomimic-train: ") and message in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("family", ["fold", "moe", "pi"])
def test_the_example_config_builds_every_family(family):
    spec = read_train_file(REPO / "config" / "train_small.yaml")
    config = TrainConfig.from_dict(spec.train)
    assert config.steps > 0 and config.device == "auto"
    algo = build_algorithm(family, overrides=spec.model)
    assert algo.config.chunk_length == 100 and algo.config.n_obs_steps == 2
