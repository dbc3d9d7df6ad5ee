"""Write expert demonstrations of the simulated box task (zarr episodes), one per task seed.

    .venv/bin/python tools/make_expert_episodes.py out/episodes/box [--seeds 0:20] [--overwrite]

Each episode is egomimic_policy.expert_episode's offline render: the scripted expert drives the
kinematics, the synthetic cameras show the box of that seed; stored as `<dir>/seed_<n>.zarr`.
A demonstration that did not succeed is written "partial" and reported.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from egomimic_policy.expert_episode import render_expert_episode


def seed_range(text: str) -> range:
    """`a:b` (b excluded) or a single seed `a`."""
    start, _, stop = text.partition(":")
    return range(int(start), int(stop)) if stop else range(int(start), int(start) + 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("directory", help="where to write seed_<n>.zarr")
    ap.add_argument("--seeds", type=seed_range, default=range(10), help="task seeds, a:b (b excluded); default 0:10")
    ap.add_argument("--fps", type=float, default=30.0, help="frame rate, Hz (default 30)")
    ap.add_argument("--overwrite", action="store_true", help="replace existing stores")
    a = ap.parse_args(argv)
    out = Path(a.directory)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for seed in a.seeds:
        t0 = time.perf_counter()
        episode = render_expert_episode(out / f"seed_{seed}.zarr", seed, fps=a.fps, overwrite=a.overwrite)
        print(
            f"seed {seed}: {episode.frames} frames, {episode.status}, success at step {episode.success_step}, "
            f"in {time.perf_counter() - t0:.1f} s"
        )
        if episode.success_step is None:
            failed.append(seed)
    if failed:
        print(f"no success for seeds {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
