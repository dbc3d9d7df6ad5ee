"""make run's default policy: the shipped checkpoint is the one its provenance describes, loads as
the launcher's preflight and the policy node load it, and tools/ship_policy.py ships only a run
that showed learning, without the optimizer state."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from egomimic_policy.checkpoints import load_checkpoint
from egomimic_policy.loading import preflight
from egomimic_policy.training.config import read_train_file

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "policies" / "sim_box_grasp.ckpt"

_spec = importlib.util.spec_from_file_location("ship_policy", REPO / "tools" / "ship_policy.py")
ship_policy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ship_policy)


def _make_run_command(*run_args: str) -> str:
    """The egomimic-launch line `make run` would run (make -n: nothing is run)."""
    cmd = ["make", "-n", "-C", str(REPO), "run", *(["RUN_ARGS=" + " ".join(run_args)] if run_args else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "MAKEFLAGS": ""}).stdout
    return next(line for line in out.splitlines() if "egomimic-launch eva_bimanual.launch.py" in line)


def test_make_run_defaults_to_the_shipped_checkpoint_and_records():
    line = _make_run_command()
    assert f"policy:={SHIPPED}" in line and "task_seed:=1004" in line and "record:=true" in line
    assert line.index(f"policy:={SHIPPED}") < line.index("--duration")
    later = _make_run_command("task_seed:=1010")  # RUN_ARGS come after the defaults and win
    assert later.index("task_seed:=1004") < later.index("task_seed:=1010")


def test_run_args_that_choose_the_policy_cameras_or_robot_drop_the_defaults():
    for choice in ("policy:=scripted", "camera_backend:=replay replay_path:=x.zarr", "backend:=arx5"):
        line = _make_run_command(choice)
        assert "sim_box_grasp" not in line and "task_seed" not in line and "record:=" not in line, line


def test_the_shipped_checkpoint_is_the_one_its_provenance_describes(tmp_path):
    info = json.loads(SHIPPED.with_suffix(".json").read_text())
    assert info["checkpoint"]["sha256"] == ship_policy.sha256(SHIPPED)
    assert info["checkpoint"]["bytes"] == SHIPPED.stat().st_size < 2_000_000
    e = info["evaluation"]
    assert e["trained"]["successes"] > e["untrained"]["successes"]
    assert len(e["trained"]["seeds"]) >= 20 and len(e["trained"]["succeeded_on"]) == e["trained"]["successes"]
    ckpt = load_checkpoint(SHIPPED)
    assert "optimizer_states" not in ckpt
    model = ckpt["hyper_parameters"]["config_tree"]["model"]["robomimic_model"]
    spec = read_train_file(REPO / "config" / "train_box.yaml")
    assert model["_target_"].endswith("FoldAlgorithm") and spec.family == info["family"] == "fold"
    assert {k: model[k] for k in spec.model} == dict(spec.model), "trained with config/train_box.yaml's model"
    assert preflight(str(SHIPPED), cache_dir=tmp_path / "cache") is None


def _demo_run(root: Path, trained: int, untrained: int, failures=()) -> Path:
    """A make demo-learn output folder around the shipped checkpoint (with an optimizer state added)."""
    (root / "train").mkdir(parents=True)
    ckpt = torch.load(SHIPPED, map_location="cpu", weights_only=False)
    ckpt["optimizer_states"] = [{"state": {0: {"exp_avg": torch.zeros(1000)}}}]
    torch.save(ckpt, root / "train" / "last.ckpt")
    seeds = list(range(1000, 1004))

    def evaluation(successes: int) -> dict:
        results = [
            {"seed": s, "success": i < successes, "outcome": "success" if i < successes else "timeout"}
            for i, s in enumerate(seeds)
        ]
        return {"successes": successes, "trials": len(seeds), "seeds": seeds, "results": results}

    for name, n in (("trained", trained), ("untrained", untrained), ("expert", len(seeds))):
        (root / f"eval_{name}.json").write_text(json.dumps(evaluation(n)))
    (root / "report.json").write_text(
        json.dumps(
            {
                "commit": "abc",
                "demos": "0:3",
                "eval_seeds": "1000:1004",
                "config": str(REPO / "config" / "train_box.yaml"),
                "config_sha256": "def",
                "recorded": {"successes": 3, "trials": 3},
                "timings_s": {"total": 1.0},
                "failures": list(failures),
            }
        )
    )
    (root / "train" / "run.json").write_text(
        json.dumps(
            {"family": "fold", "model_config": {}, "train": {"steps": 10}, "episodes": ["a", "b", "c"], "windows": 30}
        )
    )
    (root / "train" / "metrics.jsonl").write_text('{"step": 5, "loss": 0.5}\n{"step": 10, "loss": 0.25}\n')
    return root


def test_a_run_that_learned_ships_without_its_optimizer_state(tmp_path):
    run = _demo_run(tmp_path / "run", trained=3, untrained=1)
    info = ship_policy.ship(run, tmp_path / "out" / "policy", note="how it was made")
    out = tmp_path / "out" / "policy.ckpt"
    written = json.loads(out.with_suffix(".json").read_text())
    assert written == info and info["checkpoint"]["sha256"] == ship_policy.sha256(out)
    assert info["evaluation"]["trained"]["succeeded_on"] == [1000, 1001, 1002]
    assert info["evaluation"]["untrained"]["successes"] == 1 and info["final_loss"] == 0.25
    assert info["config"]["path"] == "config/train_box.yaml" and info["note"] == "how it was made"
    shipped = torch.load(out, map_location="cpu", weights_only=False)
    assert "optimizer_states" not in shipped
    source = torch.load(run / "train" / "last.ckpt", map_location="cpu", weights_only=False)
    assert shipped["state_dict"].keys() == source["state_dict"].keys()
    assert all(torch.equal(shipped["state_dict"][k], source["state_dict"][k]) for k in source["state_dict"])
    assert out.stat().st_size < (run / "train" / "last.ckpt").stat().st_size


@pytest.mark.parametrize(
    ("trained", "untrained", "failures", "why"),
    [
        (1, 1, (), "shows no learning"),
        (0, 2, (), "shows no learning"),
        (3, 0, ("eval expert: exit 1",), "the run failed"),
    ],
)
def test_a_run_that_did_not_learn_or_failed_is_not_shipped(tmp_path, trained, untrained, failures, why):
    run = _demo_run(tmp_path / "run", trained=trained, untrained=untrained, failures=failures)
    with pytest.raises(ship_policy.ShipError, match=why):
        ship_policy.ship(run, tmp_path / "out" / "policy")
    assert not (tmp_path / "out").exists()
    assert ship_policy.main(["--from", str(run), "--to", str(tmp_path / "out" / "policy")]) == 1
    shutil.rmtree(run)
