"""Write a synthetic EVA episode (zarr) for replay demos and tests.

    .venv/bin/python tools/make_sim_episode.py out/episodes/sim_circle.zarr [--seconds 10] [--fps 30] [--overwrite]

Renders the simulated scene along the scripted bimanual circle (egomimic_policy.sim_episode)
and records it with the episode writer. Then replay it through the whole graph:
    make run RUN_ARGS='camera_backend:=replay replay_path:=out/episodes/sim_circle.zarr'
"""

from __future__ import annotations

import argparse
import sys
import time

from egomimic_data.episode_format import EpisodeReader
from egomimic_policy.sim_episode import render_sim_episode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", help="episode store to create (a *.zarr directory)")
    ap.add_argument("--seconds", type=float, default=10.0, help="episode length, s (default 10)")
    ap.add_argument("--fps", type=float, default=30.0, help="frame rate, Hz (default 30)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing store")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    n = render_sim_episode(a.path, seconds=a.seconds, fps=a.fps, overwrite=a.overwrite)
    reader = EpisodeReader(a.path)
    print(
        f"wrote {a.path}: {n} frames x {len(reader.cameras)} cameras at {reader.fps:g} Hz, "
        f"status {reader.data_status}, in {time.perf_counter() - t0:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
