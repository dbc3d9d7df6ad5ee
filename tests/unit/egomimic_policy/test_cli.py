"""`egomimic-policy inspect|infer`: the report of an upstream and a project checkpoint, one offline
inference of upstream's tiny Fold reproducing upstream's reference actions, and bad input refused
with exit 2 and one line naming the key or file."""

from __future__ import annotations

import json
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from egomimic_policy.checkpoints import sha256_of
from egomimic_policy.cli import main
from egomimic_policy.families import build_algorithm, save_checkpoint
from egomimic_policy.features import neutral_norm_stats
from egomimic_policy.upstream.checkpoint import load_upstream
from egomimic_policy.upstream.policy import config_sha256

FIXTURES = Path(__file__).parents[2] / "fixtures" / "upstream"
INPUTS = FIXTURES / "fold_tiny.inputs.npz"
OBSERVATION_KEYS = {"front_img_1", "left_wrist_img", "right_wrist_img", "state_ee_pose"}
TOLERANCE = 1e-4


@pytest.fixture(autouse=True)
def _one_thread_and_no_home_cache(monkeypatch, tmp_path):
    torch.set_num_threads(1)
    monkeypatch.setenv("EGOMIMIC_CACHE_DIR", str(tmp_path / "default-cache"))  # never ~/.cache


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("upstream") / "fold_tiny.ckpt"
    with lzma.open(FIXTURES / "fold_tiny.ckpt.xz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    path.chmod(0o444)
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write_inputs(path: Path, **changes) -> Path:
    raw = dict(np.load(INPUTS))
    for key, value in changes.items():
        if value is None:
            raw.pop(key)
        else:
            raw[key] = value
    np.savez(path, **raw)
    return path


def test_inspect_upstream_fold_text_and_json(tiny_path, capsys, tmp_path):
    code, text, err = run(capsys, "inspect", tiny_path)
    assert code == 0 and err == ""
    sha = config_sha256(load_upstream(tiny_path))
    assert "family:         fold" in text and "upstream EgoVerse PipelineAlgo" in text
    assert f"config SHA-256: {sha}" in text
    for key in OBSERVATION_KEYS:
        assert key in text
    assert "actions_cartesian (10, 20)" in text and "6 eva_bimanual" in text

    code, out, _ = run(capsys, "inspect", tiny_path, "--json")
    report = json.loads(out)
    assert code == 0 and report["family"] == "fold" and report["config_sha256"] == sha
    assert {row["key"] for row in report["observation_keys"]} == OBSERVATION_KEYS
    shapes = {row["key"]: row["shape"] for row in report["observation_keys"]}
    assert shapes["state_ee_pose"] == [2, 20] and shapes["front_img_1"] == [2, 3, 480, 640]
    assert [(a["key"], a["shape"]) for a in report["action_keys"]] == [("actions_cartesian", [10, 20])]
    sizes = report["sizes"]
    assert (sizes["action_horizon"], sizes["obs_steps"], sizes["num_inference_steps"]) == (10, 2, 4)
    assert sizes["parameters"] == sum(s["parameters"] for s in sizes["stages"]) > 0
    assert [e["id"] for e in report["embodiments"]] == [6] and report["domains"] == ["eva_bimanual"]
    assert report["norm_stats"]["mode"] == "quantile"
    assert report["norm_stats"]["embodiments"]["6"]["state_ee_pose"]["dim"] == 20
    assert any("optimizer_states" in m for m in report["migrations"])
    assert not (tmp_path / "default-cache").exists()  # inspect writes nothing


def test_infer_reproduces_upstreams_reference_actions(tiny_path, capsys, tmp_path):
    out = tmp_path / "out.npz"
    code, text, err = run(capsys, "infer", tiny_path, "--inputs", INPUTS, "--out", out, "--cache-dir", tmp_path / "c")
    assert code == 0 and err == "" and str(out) in text
    ref = np.load(FIXTURES / "fold_tiny.ref.npz")
    got = np.load(out)
    np.testing.assert_allclose(got["pred_action_normalized"], ref["pred_action_normalized"], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(got["pred_action"], ref["pred_action"], atol=TOLERANCE, rtol=0)
    np.testing.assert_array_equal(got["noise"], np.load(INPUTS)["noise"])
    assert not (tmp_path / "default-cache").exists()  # only --cache-dir was used


def test_infer_without_noise_draws_the_nodes_seeded_latent(tiny_path, capsys, tmp_path):
    inputs = write_inputs(tmp_path / "in.npz", noise=None)
    out = tmp_path / "out.npz"
    code, _, err = run(capsys, "infer", tiny_path, "--inputs", inputs, "--out", out, "--cache-dir", tmp_path / "c")
    assert code == 0, err
    expected = torch.randn((10, 16), generator=torch.Generator("cpu").manual_seed(0)).numpy()
    np.testing.assert_array_equal(np.load(out)["noise"], expected)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"state_ee_pose": None}, "missing ['state_ee_pose']"),
        ({"front_img_1": np.zeros((3, 3, 120, 160), np.float32)}, "'front_img_1' has shape (3, 3, 120, 160)"),
        ({"state_ee_pose": np.zeros((2, 14), np.float32)}, "'state_ee_pose' has shape (2, 14)"),
        ({"extra_key": np.zeros(3, np.float32)}, "unexpected ['extra_key']"),
    ],
)
def test_bad_inputs_exit_2_naming_the_key(tiny_path, capsys, tmp_path, change, named):
    inputs = write_inputs(tmp_path / "in.npz", **change)
    out = tmp_path / "out.npz"
    code, _, err = run(capsys, "infer", tiny_path, "--inputs", inputs, "--out", out, "--cache-dir", tmp_path / "c")
    assert code == 2 and named in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_missing_files_exit_2_naming_the_file(tiny_path, capsys, tmp_path):
    missing = tmp_path / "nope.npz"
    code, _, err = run(capsys, "infer", tiny_path, "--inputs", missing, "--out", tmp_path / "o.npz")
    assert code == 2 and str(missing) in err and err.count("\n") == 1
    missing_ckpt = tmp_path / "nope.ckpt"
    for argv in (["inspect", missing_ckpt], ["infer", missing_ckpt, "--inputs", INPUTS, "--out", tmp_path / "o.npz"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and str(missing_ckpt) in err and err.count("\n") == 1
    code, _, err = run(capsys, "inspect", INPUTS)  # not a checkpoint
    assert code == 2 and "cannot read checkpoint" in err and err.count("\n") == 1


def test_inspect_a_project_checkpoint_and_infer_says_not_supported(capsys, tmp_path):
    algo = build_algorithm("fold")
    path = save_checkpoint(tmp_path / "own.ckpt", algo, neutral_norm_stats(), epoch=2, global_step=40)
    code, out, err = run(capsys, "inspect", path, "--json")
    report = json.loads(out)
    assert code == 0 and err == ""
    assert report["kind"] == "project" and report["family"] == "fold"
    assert report["config_sha256"] == sha256_of(algo.model_config())
    assert report["sizes"]["parameters"] == sum(p.numel() for p in algo.state_dict().values())
    assert report["migrations"] == [] and [e["id"] for e in report["embodiments"]] == [6]
    assert {row["key"] for row in report["observation_keys"]} == {
        "front_1",
        "left_wrist",
        "right_wrist",
        "state_ee_pose",
    }
    code, text, _ = run(capsys, "inspect", path)
    assert code == 0 and "project family fold" in text and "migrations:     none" in text
    code, _, err = run(capsys, "infer", path, "--inputs", INPUTS, "--out", tmp_path / "o.npz")
    assert code == 2 and "not supported for the project's fold family" in err


def test_inspect_a_legacy_project_pi_lists_its_migrations_without_writing(capsys, tmp_path):
    algo = build_algorithm("pi")
    stats = neutral_norm_stats().to_state()
    eva = stats["norm_stats"][6]
    ckpt = {
        "state_dict": {"model._orig_mod." + k: v for k, v in algo.state_dict().items()},
        "hyper_parameters": {
            "config_tree": {"model": {"robomimic_model": {**algo.model_config(), "_target_": "egomimic.algo.pi.PI"}}},
            "norm_stats_state": {**stats, "embodiments": [8], "norm_stats": {8: eva}},
        },
        "epoch": 1,
        "global_step": 5,
        "optimizer_states": [{}],
    }
    path = tmp_path / "legacy.ckpt"
    torch.save(ckpt, path)
    before = path.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run(capsys, "inspect", path, "--json")
    report = json.loads(out)
    assert code == 0 and err == ""
    assert report["family"] == "pi" and "not upstream's openpi PI0" in report["implementation"]
    assert report["embodiments"][0]["id"] == 8 and report["embodiments"][0]["current_id"] == 6
    joined = " ".join(report["migrations"])
    assert "remap_embodiment_ids(8->6)" in joined and "strip_orig_mod" in joined and "optimizer_states" in joined
    assert (path.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir())) == before


def test_inspect_an_upstream_pi_says_it_needs_openpi(capsys, tmp_path):
    robomimic = {
        "_target_": "egomimic.algo.pi.PI",
        "config": {
            "pytorch_training_precision": "bfloat16",
            "model": {"pi05": True, "action_dim": 32, "action_horizon": 100, "max_token_len": 180},
        },
        "domains": ["eva_bimanual"],
    }
    stats = {k: torch.zeros(20) for k in ("min", "max", "mean", "std", "quantile_1", "quantile_99")}
    ckpt = {
        "hyper_parameters": {
            "config_tree": {
                "model": {"_target_": "egomimic.pl_utils.pl_model.ModelWrapper", "robomimic_model": robomimic}
            },
            "norm_stats_state": {"norm_mode": "quantile", "norm_stats": {6: {"actions_cartesian": stats}}},
        },
        "state_dict": {"nets.policy.paligemma_with_expert.x.weight": torch.zeros(4, 4)},
    }
    path = tmp_path / "pi05.ckpt"
    torch.save(ckpt, path)
    code, text, _ = run(capsys, "inspect", path)
    assert code == 0 and "upstream PI (openpi PI0Pytorch): needs the openpi extra" in text
    assert f"config SHA-256: {sha256_of(robomimic)}" in text
    code, _, err = run(capsys, "infer", path, "--inputs", INPUTS, "--out", tmp_path / "o.npz")
    assert code == 2 and "upstream PI" in err


def test_runs_as_a_module_with_help_and_examples():
    for argv, expected in (
        (["--help"], "inspect"),
        (["inspect", "--help"], "example:"),
        (["infer", "--help"], "--out"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "egomimic_policy.cli", *argv], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and expected in done.stdout, done.stderr
    done = subprocess.run([sys.executable, "-m", "egomimic_policy.cli"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
