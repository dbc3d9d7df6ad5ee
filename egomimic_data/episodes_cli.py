"""egomimic-episodes: list episodes, check them against the episode contract, finalize the ones a
crash left open.

examples:
  egomimic-episodes list out/episodes                 # name, status, frames, duration, cameras, size
  egomimic-episodes check out/episodes/*.zarr         # every problem, named; exit 1 if any
  egomimic-episodes check --strict EPISODE            # upstream's strict-only rules are errors too
  egomimic-episodes repair --dry-run EPISODE          # what repair would change
  egomimic-episodes repair EPISODE                    # trim to the last commit, finalize as partial

status: complete | partial (closed early, or its writer died: repair finalizes it) |
        recording (a live writer holds it) | invalid (not a readable episode)
exit codes: 0 fine, 1 a problem was found (or a repair refused), 2 bad usage (no such path)
Also runs as `python -m egomimic_data.episodes_cli`. The contract: docs/eva.md "Episodes".
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from egomimic_data.episode_check import (
    RepairRefused,
    check_episode,
    find_episodes,
    human_size,
    is_store,
    repair_episode,
    summarize,
)
from egomimic_data.episode_format import EpisodeError

OK, PROBLEM, USAGE = 0, 1, 2


def _list(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    if not directory.is_dir():
        print(f"error: {directory} is not a directory", file=sys.stderr)
        return USAGE
    rows = [summarize(p) for p in find_episodes(directory)]
    if not rows:
        print(f"{directory}: no episodes (zarr stores) here")
        return OK
    width = max(len(r.path.name) for r in rows)
    print(f"{'NAME':<{width}}  {'STATUS':<9} {'FRAMES':>7} {'DURATION':>9}  {'SIZE':>9}  CAMERAS")
    for r in rows:
        print(
            f"{r.path.name:<{width}}  {r.status:<9} {r.frames:>7} {r.duration_s:>7.1f} s  "
            f"{human_size(r.size_bytes):>9}  {','.join(r.cameras) or '-'}"
        )
    for r in rows:
        if r.note:
            print(f"  {r.path.name}: {r.note}")
    counts = Counter(r.status for r in rows)
    print(f"{len(rows)} episode(s): " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    return PROBLEM if counts.get("invalid") else OK


def _check(args: argparse.Namespace) -> int:
    missing = [p for p in args.episodes if not Path(p).exists()]
    if missing:
        print(f"error: no such path: {', '.join(missing)}", file=sys.stderr)
        return USAGE
    failed = 0
    for path in map(Path, args.episodes):
        report = check_episode(path, decode_images=not args.no_images)
        ok = report.ok(strict=args.strict)
        failed += not ok
        verdict = "OK  " if ok else "FAIL"
        print(f"{verdict} {path}: {report.status}, {report.frames} frames")
        for e in report.errors:
            print(f"  error: {e}")
        for w in report.warnings:
            print(f"  {'error' if args.strict else 'warning'}: {w}")
    if len(args.episodes) > 1:
        print(f"{len(args.episodes) - failed} of {len(args.episodes)} episode(s) pass")
    return PROBLEM if failed else OK


def _repair(args: argparse.Namespace) -> int:
    code = OK
    for path in map(Path, args.episodes):
        if not is_store(path):
            print(f"error: {path} is not an episode (no zarr.json)", file=sys.stderr)
            return USAGE
        try:
            result = repair_episode(path, dry_run=args.dry_run)
        except RepairRefused as exc:
            print(f"refused: {exc}")
            code = PROBLEM
            continue
        except EpisodeError as exc:
            print(f"error: {exc}")
            code = PROBLEM
            continue
        if not result.actions:
            why = f" ({result.note})" if result.note else ""
            print(f"{path}: already final: {result.status}, {result.frames} frames{why}; nothing to do")
            continue
        lead = "would" if args.dry_run else "did"
        print(f"{path}: {lead}:")
        for action in result.actions:
            print(f"  {action}")
        if result.applied:
            print(f"  -> finalized as {result.status} with {result.frames} frames")
    return code


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="egomimic-episodes",
        description=__doc__.split("\n\n", 1)[0].replace("\n", " "),
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="{list,check,repair}")
    p = sub.add_parser("list", help="episodes under DIR with status, frames, duration, cameras, size")
    p.add_argument("dir", metavar="DIR", help="a directory of episodes (or one episode)")
    p.set_defaults(run=_list)
    p = sub.add_parser("check", help="validate layout and attributes against the contract; exit 1 naming each problem")
    p.add_argument("episodes", metavar="EPISODE", nargs="+")
    p.add_argument("--strict", action="store_true", help="upstream's strict-only rules (warnings) fail too")
    p.add_argument("--no-images", action="store_true", help="skip decoding the first and last frame per camera")
    p.set_defaults(run=_check)
    p = sub.add_parser(
        "repair",
        help="finalize an episode a crash left open: trim to the last commit, mark it partial (idempotent)",
    )
    p.add_argument("episodes", metavar="EPISODE", nargs="+")
    p.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    p.set_defaults(run=_repair)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # exits 2 on bad usage
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
