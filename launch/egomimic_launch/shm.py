"""Fast DDS shared-memory files that no process uses, removed before a graph starts.

Why: Fast DDS keeps each participant's listening port in /dev/shm (`fastdds_port<N>`, named by
domain and participant index, so the next graph on that domain opens the same names) and reuses
a port file it finds there. A port left by a process that was killed (the fault battery, a
SIGKILLed launcher, a crash) is reused with its old state, and a listener on such a port was
measured to see pushes only at its periodic wake-up, every healthy_check_timeout_ms / 3 = 333 ms:
with 140 stale port files in /dev/shm, a process joining the running sim graph paused the gate's
inputs 347-384 ms and latched HOLD in 4 of 6 runs; with them removed, 59-77 ms and no HOLD in 3
runs (bench/join_stall.py, one CPU hog). `fastdds shm clean` left those files (it judges ports
by their lock files). Here a file is stale when no process maps it (/proc/<pid>/maps).

Conservative on purpose: only files of this user, older than MIN_AGE_S, and nothing at all when
the maps of one of this user's processes (init aside) cannot be read: it might use any of them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIXES = ("fastdds_", "fastrtps_", "sem.fastdds_", "sem.fastrtps_")
SUFFIXES = ("_el", "_mutex", "_sl")
"""Companions of a segment or port (lock and mutex files): kept or removed with their base."""
MIN_AGE_S = 5.0
"""A file younger than this may belong to a process that is still creating it (shm_open, then mmap)."""


def _base(name: str) -> str:
    name = name.removeprefix("sem.")
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def mapped_names(shm_dir: Path = SHM_DIR, proc: Path = Path("/proc")) -> set[str] | None:
    """Base names of the /dev/shm files some process maps, or None when the maps of one of this
    user's processes cannot be read."""
    uid = os.getuid()
    names: set[str] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            owner = entry.stat().st_uid
            text = (entry / "maps").read_text()
        except FileNotFoundError:
            continue  # exited meanwhile
        except PermissionError:
            if owner == uid and entry.name != "1":  # init (a container's too) uses no DDS; its maps may be closed
                return None
            continue  # another user's process: their files are theirs, and never removed here
        except ProcessLookupError:
            continue
        for line in text.splitlines():
            path = line.rpartition(" ")[2]
            if path.startswith(str(shm_dir) + "/"):
                names.add(_base(path.rsplit("/", 1)[1]))
    return names


def remove_unused(shm_dir: Path = SHM_DIR, proc: Path = Path("/proc"), min_age_s: float = MIN_AGE_S) -> list[str]:
    """Remove this user's Fast DDS files in `shm_dir` that no process maps; returns their names."""
    if not shm_dir.is_dir():
        return []
    in_use = mapped_names(shm_dir, proc)
    if in_use is None:
        return []
    uid, now, removed = os.getuid(), time.time(), []
    for path in sorted(shm_dir.iterdir()):
        if not path.name.startswith(PREFIXES) or _base(path.name) in in_use:
            continue
        try:
            st = path.lstat()
            if st.st_uid != uid or now - st.st_mtime < min_age_s:
                continue
            path.unlink()
            removed.append(path.name)
        except OSError:  # gone meanwhile, or not ours to remove
            continue
    return removed
