"""Fast DDS shared-memory files left by killed processes, removed while no process uses DDS.

Why: Fast DDS keeps each participant's listening port in /dev/shm (`fastdds_port<N>`, named by
domain and participant index, so the next graph on that domain opens the same names) and reuses
a port file it finds there. A port left by a process that was killed (the fault battery, a
SIGKILLed launcher, a crash) is reused with its old state: its dead listener never pops, the
ring buffer is never empty, and a push into a non-empty buffer wakes nobody, so the new listener
sees pushes only at its periodic wake-up, every healthy_check_timeout_ms / 3 = 333 ms. With 140
stale port files in /dev/shm, a process joining the running sim graph paused the gate's inputs
347-384 ms and latched HOLD in 4 of 6 runs; with them removed, 59-77 ms and no HOLD in 3 runs
(bench/join_stall.py, one CPU hog).

Why only when nothing uses DDS: a file is judged by name, then removed by name, and a
participant that starts in between opens the old file (a reused port keeps its old mtime) and
maps it. Removed under it, its port is orphaned: the writers that open that port later create a
new file, and that participant never hears them (an earlier version removed "unmapped" files
while graphs were starting; the driver that received no command in a whole run, seen then, was
seen again without it: its cause is still open). `fastdds shm clean` has the same race (it tests a lock file, then
deletes). So nothing is removed while a live participant exists: a process that holds a lock
(flock, /proc/locks) on a file of /dev/shm's filesystem; Fast DDS locks each participant's data
segment and listening ports (`_el`, `_sl`) for their whole life, and a process whose
participants are gone holds none, even while it still maps other processes' files (pytest was
seen mapping ports between test modules). The launcher cleans before it starts its own
participants, and the tests between modules. A removal that still raced (a participant started
by someone else in that instant) is reported by `orphaned`.

Conservative on purpose: only files of this user, older than MIN_AGE_S (a process may be
creating one right now); any lock on that filesystem counts, a Fast DDS lock file that a probe
cannot lock counts too (a participant in another PID namespace, which /proc/locks hides), and
nothing is removed when /proc/locks cannot be read.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIXES = ("fastdds_", "fastrtps_", "sem.fastdds_", "sem.fastrtps_")
PORTS = ("fastdds_port", "fastrtps_port")
MIN_AGE_S = 5.0
"""A file younger than this may belong to a process that is still creating it (shm_open, then mmap)."""
_DELETED = " (deleted)"


@dataclass
class Cleanup:
    """What one clean-up did."""

    removed: list[str] = field(default_factory=list)
    users: list[int] = field(default_factory=list)
    """PIDs that hold a lock on the shared-memory filesystem (live participants): while there is
    one, nothing is removed."""
    orphaned: dict[int, list[str]] = field(default_factory=dict)
    """PID -> files it maps that this clean-up removed (it started in that instant): its
    shared-memory port is cut off from new writers, and the process must be restarted."""
    busy: list[str] = field(default_factory=list)
    """Lock files a process holds that /proc/locks did not show (another PID namespace): while
    there is one, nothing is removed."""
    unreadable: bool = False
    """/proc/locks could not be read: nothing was removed."""


def _maps(proc: Path, shm_dir: Path) -> dict[int, set[str]]:
    """PID -> names of Fast DDS files in `shm_dir` it maps (a removed one ends in " (deleted)"),
    for the processes whose maps can be read."""
    prefix = str(shm_dir) + "/"
    users: dict[int, set[str]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "maps").read_text()
        except OSError:  # exited meanwhile, or not readable
            continue
        for line in text.splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not fields[5].startswith(prefix):
                continue
            name = fields[5][len(prefix) :]
            if name.startswith(PREFIXES):
                users.setdefault(int(entry.name), set()).add(name)
    return users


def _lock_holders(proc: Path, shm_dir: Path) -> set[int] | None:
    """PIDs holding a lock on a file of `shm_dir`'s filesystem (/proc/locks), None when
    /proc/locks cannot be read."""
    st = shm_dir.stat()
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:"
    try:
        text = (proc / "locks").read_text()
    except OSError:
        return None
    holders = set()
    for line in text.splitlines():  # "1: FLOCK  ADVISORY  WRITE 4193 00:1b:1591371 0 EOF"
        fields = [f for f in line.split() if f != "->"]
        where = next((i for i, f in enumerate(fields) if f.startswith(device) and f.count(":") == 2), None)
        if where is not None and where > 0 and fields[where - 1].lstrip("-").isdigit():
            holders.add(int(fields[where - 1]))
    return holders


def _busy_lock_files(shm_dir: Path) -> list[str]:
    """Fast DDS lock files (`_el`, `_sl`) some process holds a lock on, by trying one: a lock
    conflict is kernel-wide, so this sees participants /proc/locks hides (another PID namespace:
    a container sharing /dev/shm)."""
    busy = []
    for path in sorted(shm_dir.iterdir()):
        if not path.name.startswith(PREFIXES) or not path.name.endswith(("_el", "_sl")):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone meanwhile, or not ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            busy.append(path.name)
        except OSError:
            continue
        finally:
            os.close(fd)  # releases the probe's lock
    return busy


def remove_stale(shm_dir: Path = SHM_DIR, proc: Path = Path("/proc"), min_age_s: float = MIN_AGE_S) -> Cleanup:
    """Remove this user's Fast DDS files in `shm_dir` when no live participant exists."""
    result = Cleanup()
    if not shm_dir.is_dir():
        return result
    holders = _lock_holders(proc, shm_dir)
    result.unreadable = holders is None
    result.users = sorted(holders or ())
    if result.unreadable or result.users:
        return result
    result.busy = _busy_lock_files(shm_dir)
    if result.busy:
        return result
    uid, now = os.getuid(), time.time()
    for path in sorted(shm_dir.iterdir()):
        if not path.name.startswith(PREFIXES):
            continue
        try:
            st = path.lstat()
            if st.st_uid != uid or now - st.st_mtime < min_age_s:
                continue
            path.unlink()
        except OSError:  # gone meanwhile, or not ours to remove
            continue
        result.removed.append(path.name)
    if result.removed:
        # A live participant (it holds a lock now) that maps a removed port: it started in that
        # instant. Only ports: a data segment's name is never reused, a file of that name made
        # since the removal (not "deleted") is a fresh port, and a process with no participant
        # left may map removed files harmlessly.
        live = _lock_holders(proc, shm_dir) or set()
        gone = {name + _DELETED for name in result.removed if name.startswith(PORTS)}
        result.orphaned = {
            pid: sorted(n.removesuffix(_DELETED) for n in names & gone)
            for pid, names in _maps(proc, shm_dir).items()
            if names & gone and pid in live
        }
    return result


def removed_ports_mapped(
    pids: dict[str, int], proc: Path = Path("/proc"), shm_dir: Path = SHM_DIR
) -> dict[str, list[str]]:
    """Name -> Fast DDS ports it maps that were removed from `shm_dir` ("(deleted)"), for the
    given processes. A listener on a removed port is deaf to every writer that opened the port
    after the removal (Fast DDS regenerates a port it judges unhealthy, or a clean-up raced):
    the first thing to look at when one node never receives from another."""
    out = {}
    for name, pid in pids.items():
        try:
            text = (proc / str(pid) / "maps").read_text()
        except OSError:
            continue
        ports = sorted(
            {
                line.split(maxsplit=5)[5][len(str(shm_dir)) + 1 :].removesuffix(_DELETED)
                for line in text.splitlines()
                if f"{shm_dir}/" in line and line.endswith(_DELETED) and "_port" in line
            }
        )
        if ports:
            out[name] = ports
    return out
