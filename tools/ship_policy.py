"""Ship a `make demo-learn` result as the repository's default policy (`make default-policy`).

    .venv/bin/python tools/ship_policy.py --from out/default_policy [--to policies/sim_box_grasp]

Writes <to>.ckpt, the trained checkpoint without its optimizer state (the same layout,
upstream's Lightning one, a third of the size; the policy node never reads optimizer state), and
<to>.json, its provenance: the commit and config it was trained with, the demonstrations, the
training run, and the held-out evaluation of the trained model next to the untrained one's and
the expert's, seed by seed, with the checkpoint's SHA-256.

Refuses (exit 1, nothing written) when the run failed a stage or the trained model did not
succeed in more trials than the untrained one: a default policy must have shown that it learned.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TO = REPO / "policies" / "sim_box_grasp"
SHIPPED_EXTRA_KEYS = ("loops",)
"""Kept beyond what a prepared rollout artifact keeps (checkpoints.layout.KEPT_TOP_LEVEL_KEYS): the
trainer's config and window count, provenance; optimizer state and the rest of training go."""


class ShipError(Exception):
    """The run cannot be shipped; the message says why."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _evaluation(run: Path, name: str) -> dict:
    r = json.loads((run / f"eval_{name}.json").read_text())
    return {
        "successes": r["successes"],
        "trials": r["trials"],
        "seeds": r["seeds"],
        "succeeded_on": [t["seed"] for t in r["results"] if t["success"]],
        "outcomes": {str(t["seed"]): t["outcome"] for t in r["results"]},
    }


def provenance(run: Path, note: str | None = None) -> dict:
    """What the shipped checkpoint is and how it was made, from a demo-learn output folder."""
    report = json.loads((run / "report.json").read_text())
    if report.get("failures"):
        raise ShipError(f"{run}: the run failed: {'; '.join(report['failures'])}")
    evals = {name: _evaluation(run, name) for name in ("trained", "untrained", "expert")}
    if evals["trained"]["successes"] <= evals["untrained"]["successes"]:
        raise ShipError(
            f"{run}: the trained model succeeded in {evals['trained']['successes']} trials, the untrained one in "
            f"{evals['untrained']['successes']}: it shows no learning"
        )
    train_run = json.loads((run / "train" / "run.json").read_text())
    metrics = [json.loads(line) for line in (run / "train" / "metrics.jsonl").read_text().splitlines() if line]
    config = Path(report["config"])
    return {
        "task": "sim_box_grasp",
        "made_by": "make default-policy (tools/demo_learn.py, then tools/ship_policy.py)",
        "trained_at_commit": report.get("commit"),
        "config": {
            "path": str(config.relative_to(REPO)) if config.is_relative_to(REPO) else str(config),
            "sha256": report.get("config_sha256"),
        },
        "family": train_run["family"],
        "model_config": train_run["model_config"],
        "train": train_run["train"],
        "demonstrations": {
            "seeds": report["demos"],
            "recorded": report["recorded"],
            "episodes": len(train_run["episodes"]),
            "windows": train_run["windows"],
        },
        "final_loss": metrics[-1]["loss"] if metrics else None,
        "steps": metrics[-1]["step"] if metrics else None,
        "evaluation": {"seeds": report["eval_seeds"], **evals},
        "timings_s": report["timings_s"],
        **({"note": note} if note else {}),
    }


def ship(run: Path, to: Path, note: str | None = None) -> dict:
    """Write <to>.ckpt and <to>.json from the demo-learn folder `run`; returns the provenance."""
    import torch

    from egomimic_policy.checkpoints import load_checkpoint
    from egomimic_policy.checkpoints.layout import KEPT_TOP_LEVEL_KEYS, atomic_torch_save

    info = provenance(run, note)
    ckpt = torch.load(run / "train" / "last.ckpt", map_location="cpu", weights_only=False)
    kept = (*KEPT_TOP_LEVEL_KEYS, *SHIPPED_EXTRA_KEYS)
    ckpt = {key: value for key, value in ckpt.items() if key in kept}
    to.parent.mkdir(parents=True, exist_ok=True)
    out = to.with_suffix(".ckpt")
    atomic_torch_save(ckpt, out)
    load_checkpoint(out)  # it reads back as a checkpoint, as the launcher's preflight will
    info["checkpoint"] = {"file": out.name, "sha256": sha256(out), "bytes": out.stat().st_size}
    to.with_suffix(".json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--from", dest="run", type=Path, required=True, help="a make demo-learn output folder")
    ap.add_argument("--to", type=Path, default=DEFAULT_TO, help="<to>.ckpt and <to>.json are written")
    ap.add_argument("--note", help="a line of provenance the run's report does not hold (how it was made)")
    args = ap.parse_args(argv)
    try:
        info = ship(args.run.resolve(), args.to.resolve(), args.note)
    except (ShipError, OSError, KeyError, ValueError) as exc:
        print(f"ship_policy: {exc}", file=sys.stderr)
        return 1
    e = info["evaluation"]
    print(
        f"[ship] {args.to.with_suffix('.ckpt')}: {info['checkpoint']['bytes'] / 1e6:.2f} MB, sha256 "
        f"{info['checkpoint']['sha256'][:12]}; trained {e['trained']['successes']}/{e['trained']['trials']}, "
        f"untrained {e['untrained']['successes']}/{e['untrained']['trials']}, expert "
        f"{e['expert']['successes']}/{e['expert']['trials']} on seeds {e['seeds']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
