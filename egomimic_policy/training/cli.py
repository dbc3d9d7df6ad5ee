"""egomimic-train: train a Fold / PI / MoE policy on recorded EVA episodes.

Bad input (a missing or malformed config, no usable episode, an episode without a camera, a
checkpoint that does not fit) exits 2 with one line naming it, before any training starts;
Ctrl-C saves last.ckpt at the last finished step and exits 130.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from egomimic_data.episode_format import EpisodeError
from egomimic_hw.errors import ConfigError
from egomimic_policy.families import FAMILIES
from egomimic_policy.training.config import DEVICES, TrainConfig, read_train_file
from egomimic_policy.training.train import LAST, prepare_run, train

PROG = "egomimic-train"
EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED = 0, 2, 130

EPILOG = f"""\
config (YAML; every key optional, unknown keys refused):
  family: fold                 # --family wins
  model: {{chunk_length: 32, d_model: 64, ...}}   # the family's config fields
  train: {{steps: 2000, batch_size: 8, lr: 3.0e-4, weight_decay: 1.0e-6, seed: 0,
          checkpoint_every: 500, device: auto, ...}}
  example: config/train_small.yaml; every train field: {", ".join(TrainConfig.__dataclass_fields__)}

writes into --out: step_<N>.ckpt every checkpoint_every steps, last.ckpt (the newest),
metrics.jsonl (loss every log_every steps), run.json (what was trained on what).
The checkpoint runs as it is: `make run RUN_ARGS='policy:=OUT/last.ckpt'`.

examples:
  {PROG} --config config/train_small.yaml --family fold --episodes out/episodes --out out/train/fold
  {PROG} --config config/train_small.yaml --episodes out/episodes --out out/train/fold \\
      --resume out/train/fold/last.ckpt --steps 4000

exit codes: 0 done; 2 bad input (one line on stderr); 130 interrupted (last.ckpt saved)"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=textwrap.fill(
            "Train a policy family on recorded EVA episodes (egomimic_data's zarr format, this project's "
            "or upstream's). Each step t of an episode is one window: the last n_obs_steps frames of the "
            "three cameras and of the measured poses, and the next chunk_length commanded poses, "
            "wrist-relative to the pose at t. Norm stats come from the data and travel in the checkpoint.",
            width=88,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, required=True, metavar="YAML", help="training config (see below)")
    parser.add_argument("--family", choices=sorted(FAMILIES), help="policy family (default: the config's family)")
    parser.add_argument(
        "--episodes",
        nargs="+",
        required=True,
        metavar="DIR",
        help="episode stores (*.zarr) or directories holding them",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where checkpoints and metrics go")
    parser.add_argument("--steps", type=int, metavar="N", help="optimizer steps in all (overrides train.steps/epochs)")
    parser.add_argument("--resume", type=Path, metavar="CKPT", help="continue a run from its checkpoint (exactly)")
    parser.add_argument("--device", choices=DEVICES, help="overrides train.device (auto: cuda when available)")
    return parser


def _config(args: argparse.Namespace):
    spec = read_train_file(args.config)
    values = dict(spec.train)
    if args.steps is not None:
        if args.steps < 1:
            raise ConfigError(f"--steps must be >= 1, got {args.steps}")
        values.update(steps=args.steps, epochs=0)
    if args.device is not None:
        values["device"] = args.device
    return spec, TrainConfig.from_dict(values)


def _check_out(out: Path, resume: Path | None) -> None:
    """Refuse to mix two runs in one directory: a new run needs one without checkpoints."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a directory")
    if resume is None and out.is_dir() and any(out.glob("*.ckpt")):
        raise ConfigError(
            f"--out {out} already holds a run's checkpoints; continue it with --resume {out / LAST}, "
            "or choose another --out"
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec, config = _config(args)
        _check_out(args.out, args.resume)
        run = prepare_run(
            family=args.family or spec.family,
            model_overrides=spec.model,
            config=config,
            episodes=args.episodes,
            resume=args.resume,
        )
        for skipped in run.dataset.skipped:
            print(f"{PROG}: skipping {skipped.path}: {skipped.reason}", file=sys.stderr)
        print(
            f"{PROG}: {run.family} ({sum(p.numel() for p in run.algorithm.parameters()):,} parameters) on "
            f"{len(run.dataset.episodes)} episode(s), {len(run.dataset)} windows, device {run.device}"
            + (f", resuming at step {run.start_step}" if run.start_step else ""),
            file=sys.stderr,
        )
        train(run, args.out)
    except (ConfigError, EpisodeError) as exc:  # TrainingDataError and CheckpointError are ConfigErrors
        message = str(exc).strip().splitlines() or [type(exc).__name__]
        print(f"{PROG}: {message[0]}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
