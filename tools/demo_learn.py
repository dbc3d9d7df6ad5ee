"""The learning loop end to end, in simulation: record, train, deploy, compare (`make demo-learn`).

    .venv/bin/python tools/demo_learn.py [--out out/demo_learn] [--demos 0:60] [--eval 1000:1020]

1. Record: the whole graph (cameras, frames, gate, drivers, recorder) with the scripted expert,
   one episode per trial of the simulated box task (`egomimic-launch ... --trials`), seeds
   --demos. The expert reads the box from its seed; the cameras draw it.
2. Train: `egomimic-train` on those episodes (--config, default config/train_box.yaml). The
   same config at initialization, with the same data's norm stats, is kept as initial.ckpt:
   the untrained baseline is the trained model's own starting point.
3. Deploy: each policy in its own graph, trials on held-out seeds (--eval), judged alike from the
   measured poses and grippers: the expert, the untrained model, the trained model; the policy
   node replans every 15 rows there (--policy-params, config/box_policy_eval.yaml).
4. Report: success counts with their seeds, per stage wall time; out/.../report.json.

Every stage is a separate process, as a lab would run it; each writes its log under --out.
Exit 0 when every stage ran and the trained policy succeeded in more trials than the untrained
one; 1 otherwise (the report says which).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TASK_NAME = "sim_box_grasp"


def seeds_arg(text: str) -> str:
    from egomimic_launch.trials import parse_seeds

    parse_seeds(text)  # refused here, before anything runs
    return text


def first_seed(text: str) -> int:
    from egomimic_launch.trials import parse_seeds

    return parse_seeds(text)[0]


def git_commit() -> str | None:
    """The checked-out commit (with "+dirty" when the tree has changes), for the report."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def run_stage(name: str, cmd: list[str], log: Path, env: dict[str, str]) -> tuple[int, float]:
    """Run one stage's process, its output to `log`; (exit code, seconds)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"[demo-learn] {name}: {' '.join(cmd)}", flush=True)
    print(f"[demo-learn]   log: {log}", flush=True)
    t0 = time.monotonic()
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    took = time.monotonic() - t0
    print(f"[demo-learn] {name}: exit {rc} after {took / 60:.1f} min", flush=True)
    return rc, took


def trials_cmd(policy: str, seeds: str, out_json: Path, run_dir: Path, timeout_s: float, *extra: str) -> list[str]:
    return [
        str(VENV_BIN / "egomimic-launch"),
        "eva_bimanual.launch.py",
        f"policy:={policy}",
        f"task_seed:={first_seed(seeds)}",
        *extra,
        "--trials",
        seeds,
        "--trial-timeout",
        str(timeout_s),
        "--trials-json",
        str(out_json),
        "--run-dir",
        str(run_dir),
        "--quiet",
    ]


def write_initial_checkpoint(config_path: Path, family: str | None, episodes: Path, out: Path) -> None:
    """The model `egomimic-train` starts from (same config and seed), with the norm stats of the
    same episodes: the untrained baseline."""
    from egomimic_policy.checkpoints import save_checkpoint
    from egomimic_policy.training.config import TrainConfig, read_train_file
    from egomimic_policy.training.train import prepare_run

    spec = read_train_file(config_path)
    run = prepare_run(
        family=family or spec.family,
        model_overrides=spec.model,
        config=TrainConfig.from_dict(dict(spec.train)),
        episodes=[episodes],
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(out, run.algorithm, run.norm_stats, epoch=0, global_step=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=REPO / "out" / "demo_learn", help="everything goes here")
    ap.add_argument("--demos", type=seeds_arg, default="0:60", help="seeds of the expert demonstrations (a:b)")
    ap.add_argument("--eval", type=seeds_arg, default="1000:1020", help="held-out seeds of the trials (a:b)")
    ap.add_argument("--config", type=Path, default=REPO / "config" / "train_box.yaml", help="egomimic-train config")
    ap.add_argument(
        "--policy-params",
        type=Path,
        default=REPO / "config" / "box_policy_eval.yaml",
        help="params_file for the evaluation graphs (the policy node's replan cadence)",
    )
    ap.add_argument("--family", default=None, help="policy family (default: the config's)")
    ap.add_argument(
        "--trial-timeout", type=float, default=12.0, help="seconds per trial after arming (the expert needs about 7.5)"
    )
    ap.add_argument("--train-steps", type=int, help="override the config's step count (a quick check)")
    ap.add_argument("--reuse", action="store_true", help="keep episodes and checkpoints already in --out")
    args = ap.parse_args(argv)

    from egomimic_launch.environment import ros_environment

    env = ros_environment()  # discovery on this machine only, a domain id (make sets its own)
    out = args.out.resolve()
    episodes, train_dir = out / "episodes", out / "train"
    initial, trained = out / "initial.ckpt", train_dir / "last.ckpt"
    timings: dict[str, float] = {}
    failures: list[str] = []
    t_all = time.monotonic()

    if not (args.reuse and any(episodes.glob("*.zarr"))):
        rc, timings["record"] = run_stage(
            "record",
            trials_cmd(
                "expert",
                args.demos,
                out / "record.json",
                out / "runs" / "record",
                args.trial_timeout,
                "record:=true",
                f"record_dir:={episodes}",
                f"task_name:={TASK_NAME}",
            ),
            out / "logs" / "record.log",
            env,
        )
        if rc != 0:
            failures.append(f"record: exit {rc}")
    if not failures and not (args.reuse and trained.exists()):
        t0 = time.monotonic()
        write_initial_checkpoint(args.config, args.family, episodes, initial)
        cmd = [str(VENV_BIN / "egomimic-train"), "--config", str(args.config), "--episodes", str(episodes)]
        cmd += ["--out", str(train_dir)] + (["--family", args.family] if args.family else [])
        cmd += ["--steps", str(args.train_steps)] if args.train_steps else []
        rc, _ = run_stage("train", cmd, out / "logs" / "train.log", env)
        timings["train"] = time.monotonic() - t0
        if rc != 0:
            failures.append(f"train: exit {rc}")
    results = {}
    if not failures:
        for name, policy in (("expert", "expert"), ("untrained", str(initial)), ("trained", str(trained))):
            path = out / f"eval_{name}.json"
            rc, timings[f"eval {name}"] = run_stage(
                f"eval {name}",
                trials_cmd(
                    policy,
                    args.eval,
                    path,
                    out / "runs" / name,
                    args.trial_timeout,
                    f"params_file:={args.policy_params}",
                ),
                out / "logs" / f"eval_{name}.log",
                env,
            )
            if rc != 0 or not path.exists():
                failures.append(f"eval {name}: exit {rc}")
                continue
            results[name] = json.loads(path.read_text())
    timings["total"] = time.monotonic() - t_all

    print("[demo-learn] " + "-" * 80)
    recorded = json.loads((out / "record.json").read_text()) if (out / "record.json").exists() else None
    if recorded:
        print(
            f"[demo-learn] demonstrations: {recorded['successes']}/{recorded['trials']} expert trials succeeded "
            f"and were recorded (seeds {args.demos}) -> {episodes}"
        )
    for name, r in results.items():
        won = [t["seed"] for t in r["results"] if t["success"]]
        print(
            f"[demo-learn] {name:<10} {r['successes']:3d}/{r['trials']:<3d} succeeded on seeds {args.eval}"
            + (f" (succeeded: {won})" if 0 < len(won) < r["trials"] else "")
        )
    print("[demo-learn] wall time: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items()))
    learned = "trained" in results and "untrained" in results
    if learned and results["trained"]["successes"] <= results["untrained"]["successes"]:
        failures.append(
            f"the trained policy succeeded in {results['trained']['successes']} trials, the untrained one in "
            f"{results['untrained']['successes']}: no learning shown"
        )
    report = {
        "commit": git_commit(),
        "demos": args.demos,
        "eval_seeds": args.eval,
        "config": str(args.config),
        "config_sha256": hashlib.sha256(args.config.read_bytes()).hexdigest() if args.config.is_file() else None,
        "results": {k: {"successes": v["successes"], "trials": v["trials"]} for k, v in results.items()},
        "recorded": None if recorded is None else {"successes": recorded["successes"], "trials": recorded["trials"]},
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "failures": failures,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    for f in failures:
        print(f"[demo-learn] FAILED: {f}")
    print(f"[demo-learn] report: {out / 'report.json'}")
    return 0 if not failures else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
