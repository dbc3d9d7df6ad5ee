"""Fast DDS shared-memory files left by killed processes, removed before a graph starts.

Why: Fast DDS keeps each participant's listening port in /dev/shm (`fastdds_port<N>`, named by
domain and participant index, so the next graph on that domain opens the same names) and reuses
a port file it finds there. A port left by a process that was killed (the fault battery, a
SIGKILLed launcher, a crash) is reused with its old state: its dead listener never pops, the
ring buffer is never empty, and a push into a non-empty buffer wakes nobody, so the new listener
sees pushes only at its periodic wake-up, every healthy_check_timeout_ms / 3 (333 ms at Fast DDS's
default; never with config/fastdds_local.xml, which turns the health check off). With 140
stale port files in /dev/shm, a process joining the running sim graph paused the gate's inputs
347-384 ms and latched HOLD in 4 of 6 runs; with them removed, 59-77 ms and no HOLD in 3 runs
(bench/join_stall.py, one CPU hog). A reused port can also be judged a zombie and reset by its
new owner while the graph starts ("Port N Zombie. Reset the port"): the writers that opened the
old file reach nobody (a driver that received no command for a whole test, 2026-12-05).

What is stale is judged per file group (a port: `fastdds_portN`, its lock files `_el`/`_sl` and
`sem.fastdds_portN_mutex`; a data segment: `fastdds_<id>` and its `_el`): Fast DDS holds a lock
(flock) on the lock files of each of a participant's segments and listening ports for the
participant's whole life, so a group none of whose lock files is locked has no live owner. It is
probed by trying that lock (a lock conflict is kernel-wide: this also sees participants in another
PID namespace, a container sharing /dev/shm). A port group with no lock file at all is stale only
when no live participant maps it. Live participants elsewhere (rviz, a test's probe node, a
console) no longer stop the clean-up: the first version removed nothing while any participant was
alive, and graphs that started beside one (a test process's probe node between test modules, a
tool's node) reused the last graph's ports and saw them reset as zombies.

No participant can open a port's old files while they are judged and removed: Fast DDS opens or
creates a port only while holding that port's named mutex (`sem.fastdds_portN_mutex`), and the
clean-up holds the same mutex for each port group it judges (so a port's young files, which the
first versions kept for a while, go too). A port whose mutex stays locked for MUTEX_WAIT_S was
left so by a process killed while it opened it; it is removed with its mutex, as Fast DDS does.
A participant that still maps a removed port while it holds a lock is reported (`orphaned`);
`fastdds shm clean` tests a lock file, then deletes, with no such guard.

Only the ports of the caller's own DDS domains (`domains`): a port's number says its domain
(PORT_BASE + DOMAIN_GAIN x domain + offset, the RTPS well-known ports), and only a participant of
the same domain can reuse a port's name. The ports of another graph's dead participants (another
test suite, another user's graph on its own domain) stay: that graph's live writers still map
them, and if that graph restarts the dead node on the same participant index, removing the old
port from under those writers would cut them off from it (seen when a unit suite ran beside a
fresh clone's suite: a policy that started late, fc70 and fc81). The ports numbered by
participant index alone (7000 + index, below PORT_BASE) are shared by every domain and judged as
before: kept, they were reset as zombies by the next graph's drivers ("Port 7001 Zombie. Reset
the port", make run, 2026-12-05). Data segments (`fastdds_<id>`) carry no domain; their names are
never reused, so removing a dead owner's segment harms no one.

Conservative on purpose: only files of this user, older than MIN_AGE_S (a process may be
creating one right now), and nothing at all when /proc/locks cannot be read.
"""

from __future__ import annotations

import ctypes
import errno
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from egomimic_data.file_locks import held_by_another

SHM_DIR = Path("/dev/shm")
PREFIXES = ("fastdds_", "fastrtps_", "sem.fastdds_", "sem.fastrtps_")
PORTS = ("fastdds_port", "fastrtps_port")
PORT_BASE, DOMAIN_GAIN = 7400, 250
"""RTPS well-known port numbers (PB, DG): every port of domain d lies in [PB + DG*d, PB + DG*(d+1))."""
MIN_AGE_S = 5.0
"""A file younger than this may belong to a process that is still creating it (shm_open, then mmap)."""
_DELETED = " (deleted)"


@dataclass
class Cleanup:
    """What one clean-up did."""

    removed: list[str] = field(default_factory=list)
    users: list[int] = field(default_factory=list)
    """PIDs that hold a lock on the shared-memory filesystem (live participants, here and
    elsewhere), for the report."""
    orphaned: dict[int, list[str]] = field(default_factory=dict)
    """PID -> files it maps that this clean-up removed (it started in that instant): its
    shared-memory port is cut off from new writers, and the process must be restarted."""
    busy: list[str] = field(default_factory=list)
    """Lock files some process holds: their groups belong to live participants and are kept."""
    unreadable: bool = False
    """/proc/locks could not be read: nothing was removed."""
    stuck: list[str] = field(default_factory=list)
    """Ports whose mutex was left locked (a process killed while it opened the port): removed
    with their mutex, as Fast DDS does when it finds one."""


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


def _locked(path: Path) -> bool:
    """Whether some process holds a flock on `path` (tried, not read from /proc/locks)."""
    return held_by_another(path, follow_symlinks=False)


MUTEX_WAIT_S = 0.2
"""How long the clean-up waits for a port's mutex: Fast DDS holds it only while it opens or
creates that port (milliseconds); one held longer was left locked by a process killed inside
that step, and Fast DDS itself then removes and recreates it."""


class _PortMutex:
    """Fast DDS's own mutex of one port (`sem.fastdds_portN_mutex`, a POSIX named semaphore):
    every process opens or creates the port's files while holding it. The clean-up holds it while
    it judges and removes the port's files, so no participant can open the old files in between
    (the race the first versions had). It never removes the mutex itself while it works: a
    process waiting on it must find the same one afterwards."""

    _shared_libc = None

    @classmethod
    def _load_libc(cls):
        """libc with the semaphore calls typed, once per process (every port group uses it)."""
        if cls._shared_libc is None:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.sem_open.restype = ctypes.c_void_p
            libc.sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
            for fn in ("sem_timedwait", "sem_post", "sem_close"):
                getattr(libc, fn).restype = ctypes.c_int
            libc.sem_timedwait.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            libc.sem_post.argtypes = [ctypes.c_void_p]
            libc.sem_close.argtypes = [ctypes.c_void_p]
            cls._shared_libc = libc
        return cls._shared_libc

    def __init__(self, base: str):
        self._libc = self._load_libc()
        self._sem = self._libc.sem_open(f"/{base}_mutex".encode(), 0)  # never created here
        self.held = False

    @property
    def exists(self) -> bool:
        return bool(self._sem)

    def acquire(self, timeout_s: float) -> bool:
        class Timespec(ctypes.Structure):
            _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

        if not self._sem:
            return False
        deadline = time.time() + timeout_s
        when = Timespec(int(deadline), int((deadline % 1) * 1e9))
        while True:
            if self._libc.sem_timedwait(self._sem, ctypes.byref(when)) == 0:
                self.held = True
                return True
            if ctypes.get_errno() != errno.EINTR:
                return False

    def release(self) -> None:
        if self._sem:
            if self.held:
                self._libc.sem_post(self._sem)
                self.held = False
            self._libc.sem_close(self._sem)
            self._sem = None


def _group(name: str) -> str:
    """The file group a Fast DDS file belongs to: its segment or port name."""
    base = name.removeprefix("sem.")
    for suffix in ("_mutex", "_el", "_sl"):
        base = base.removesuffix(suffix)
    return base


def port_domain(base: str) -> int | None:
    """The DDS domain of a port group (`fastdds_port17911` -> 42); None when `base` is not a port
    or is a port of no domain: below PORT_BASE, Fast DDS's shared-memory ports numbered by
    participant index alone (`fastdds_port7000` + index, seen in every domain's participants),
    which every domain shares."""
    for prefix in PORTS:
        if base.startswith(prefix) and base[len(prefix) :].isdigit():
            port = int(base[len(prefix) :])
            return (port - PORT_BASE) // DOMAIN_GAIN if port >= PORT_BASE else None
    return None


def remove_stale(
    shm_dir: Path = SHM_DIR,
    proc: Path = Path("/proc"),
    min_age_s: float = MIN_AGE_S,
    port_mutexes: bool | None = None,
    domains: Collection[int] | None = None,
) -> Cleanup:
    """Remove this user's Fast DDS file groups in `shm_dir` that no live participant owns.
    `domains`: only the ports of these DDS domains (module docstring; None: every domain's, for a
    machine where nothing else runs). `port_mutexes`: hold each port's Fast DDS mutex meanwhile
    (default: when `shm_dir` is /dev/shm, where the semaphores are)."""
    result = Cleanup()
    if not shm_dir.is_dir():
        return result
    holders = _lock_holders(proc, shm_dir)
    result.unreadable = holders is None
    result.users = sorted(holders or ())
    if result.unreadable:
        return result
    groups: dict[str, list[Path]] = {}
    for path in sorted(shm_dir.iterdir()):
        if path.name.startswith(PREFIXES):
            groups.setdefault(_group(path.name), []).append(path)
    mapped: set[str] | None = None  # names live participants map, read once if needed
    uid, now = os.getuid(), time.time()
    real = shm_dir.resolve() == SHM_DIR.resolve() if port_mutexes is None else port_mutexes
    for base, paths in groups.items():
        domain = port_domain(base)
        if domains is not None and domain is not None and domain not in domains:
            continue  # another domain's graph: its live writers may still map this port
        mutex = _PortMutex(base) if real and base.startswith(PORTS) else None
        try:
            if mutex is not None and mutex.exists and not mutex.acquire(MUTEX_WAIT_S):
                stuck = True  # left locked by a process killed while it opened this port
            else:
                stuck = False
            held = mutex is not None and mutex.held
            locks = [p for p in paths if p.name.endswith(("_el", "_sl"))]
            busy = [p.name for p in locks if _locked(p)]
            if busy:
                result.busy.extend(busy)
                continue
            if not locks and base.startswith(PORTS):
                if mapped is None:
                    mapped = {
                        n.removesuffix(_DELETED)
                        for pid, names in _maps(proc, shm_dir).items()
                        if pid in (holders or ())
                        for n in names
                    }
                if base in mapped:
                    continue
            try:
                if any(p.lstat().st_uid != uid for p in paths):
                    continue
                # Young files may be being made right now, unless the port's mutex is ours.
                if not held and any(now - p.lstat().st_mtime < min_age_s for p in paths):
                    continue
            except OSError:
                continue
            for path in paths:
                if held and path.name.startswith("sem."):
                    continue  # the mutex stays (class docstring)
                try:
                    path.unlink()
                except OSError:  # gone meanwhile, or not ours to remove
                    continue
                result.removed.append(path.name)
            if stuck:
                result.stuck.append(base)
        finally:
            if mutex is not None:
                mutex.release()
    if result.removed:
        # A live participant (it holds a lock now) that maps a removed port: it started in that
        # instant. Only ports: a data segment's name is never reused, a file of that name made
        # since the removal (not "deleted") is a fresh port, and a process whose participants
        # are gone may map removed files harmlessly.
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
