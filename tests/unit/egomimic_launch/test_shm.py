"""Stale Fast DDS shared-memory files: removed per file group (a port or a segment with its lock
files and mutex) when none of its lock files is locked (a live participant holds them for its whole
life), also while other participants live; kept when young (a process may be creating it), never a
file that is not Fast DDS's; nothing at all without /proc/locks; a removal that raced is reported.

Each test reads a /proc of its own: a `locks` file the test writes (the machine's /proc/locks
holds whatever else runs here) and this process's entry, linked, for its maps. Locks on the
groups' lock files are real flocks (the clean-up tries them)."""

from __future__ import annotations

import fcntl
import mmap
import os
import time

import pytest

from egomimic_launch import shm
from egomimic_launch.shm import remove_stale


def _file(path, size=4096, age_s=60.0):
    path.write_bytes(b"\0" * size)
    old = time.time() - age_s
    os.utime(path, (old, old))
    return path


@pytest.fixture
def dirs(tmp_path):
    """(shm_dir, proc): a fake /dev/shm and a fake /proc with an empty `locks`."""
    shm_dir, proc = tmp_path / "shm", tmp_path / "proc"
    shm_dir.mkdir()
    proc.mkdir()
    (proc / "locks").write_text("")
    (proc / str(os.getpid())).symlink_to(f"/proc/{os.getpid()}")
    return shm_dir, proc


def _lock_line(proc, path) -> None:
    """What the kernel lists for a flock this process holds on `path`."""
    st = path.stat()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open(proc / "locks", "a") as f:
        f.write(f"1: FLOCK  ADVISORY  WRITE {os.getpid()} {dev} 0 EOF\n")


def test_with_no_participant_every_old_fastdds_file_goes(dirs):
    shm_dir, proc = dirs
    port = _file(shm_dir / "fastdds_port99991")
    lock = _file(shm_dir / "fastdds_port99991_el")
    mutex = _file(shm_dir / "sem.fastdds_port99991_mutex")
    segment = _file(shm_dir / "fastdds_0123456789abcdef")
    young = _file(shm_dir / "fastdds_port99993", age_s=0.0)
    other = _file(shm_dir / "not_fastdds_at_all")
    done = remove_stale(shm_dir=shm_dir, proc=proc)
    assert sorted(done.removed) == sorted(p.name for p in (port, lock, mutex, segment))
    assert done.users == [] and done.busy == [] and done.orphaned == {} and not done.unreadable
    assert young.exists() and other.exists()
    assert not port.exists() and not lock.exists() and not mutex.exists() and not segment.exists()


def test_a_live_participants_groups_are_kept_and_the_stale_ones_go(dirs):
    """A live participant holds its segment's and ports' lock files (flock) for its whole life;
    another participant's stale port goes all the same (the first version kept everything while
    any participant lived, and graphs started beside one reused the last graph's ports)."""
    shm_dir, proc = dirs
    stale = [_file(shm_dir / n) for n in ("fastdds_port99991", "fastdds_port99991_el", "sem.fastdds_port99991_mutex")]
    live = [_file(shm_dir / n) for n in ("fastdds_port99992", "fastdds_port99992_el", "sem.fastdds_port99992_mutex")]
    segment = [_file(shm_dir / n) for n in ("fastdds_0123456789abcdef", "fastdds_0123456789abcdef_el")]
    _lock_line(proc, live[1])
    with open(live[1], "r+b") as f, open(segment[1], "r+b") as g:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(g, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = remove_stale(shm_dir=shm_dir, proc=proc)
    assert sorted(done.removed) == sorted(p.name for p in stale)
    assert done.users == [os.getpid()] and sorted(done.busy) == sorted([live[1].name, segment[1].name])
    assert all(p.exists() for p in live + segment) and not any(p.exists() for p in stale)


def test_a_shared_lock_keeps_its_group_even_unlisted(dirs):
    """A participant in another PID namespace is missing from /proc/locks; its lock still
    conflicts with the probe's (a multicast listener holds a shared lock, `_sl`)."""
    shm_dir, proc = dirs
    stale = _file(shm_dir / "fastdds_port99991")
    port = _file(shm_dir / "fastdds_port99992")
    lock = _file(shm_dir / "fastdds_port99992_sl")
    with open(lock, "r+b") as f:
        fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        done = remove_stale(shm_dir=shm_dir, proc=proc)
    assert done.removed == [stale.name] and done.users == [] and done.busy == [lock.name]
    assert port.exists() and lock.exists() and not stale.exists()


def test_a_port_without_lock_files_is_kept_while_a_live_participant_maps_it(dirs):
    """No lock file says who owns it: a participant alive that maps it may be its listener."""
    shm_dir, proc = dirs
    port = _file(shm_dir / "fastdds_port99991")
    own = _file(shm_dir / "fastdds_fedcba9876543210_el")
    _lock_line(proc, own)  # this process is a live participant
    with open(port, "r+b") as f, mmap.mmap(f.fileno(), 0), open(own, "r+b") as g:
        fcntl.flock(g, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = remove_stale(shm_dir=shm_dir, proc=proc)
    assert done.removed == [] and port.exists()


def test_a_process_that_maps_files_but_holds_no_lock_is_no_participant(dirs):
    """After rclpy's shutdown a process may still map other processes' ports and segments (pytest
    did, between test modules): that alone must not stop the clean-up."""
    shm_dir, proc = dirs
    port = _file(shm_dir / "fastdds_port99991")
    segment = _file(shm_dir / "fastdds_0123456789abcdef")
    with open(port, "r+b") as f, mmap.mmap(f.fileno(), 0), open(segment, "r+b") as g, mmap.mmap(g.fileno(), 0):
        done = remove_stale(shm_dir=shm_dir, proc=proc)
        assert sorted(done.removed) == sorted([port.name, segment.name]) and done.users == []
        assert done.orphaned == {}  # it maps a removed port, but no participant of it is alive


def test_without_proc_locks_nothing_goes(dirs):
    shm_dir, proc = dirs
    (proc / "locks").unlink()
    stale = _file(shm_dir / "fastdds_port99991")
    done = remove_stale(shm_dir=shm_dir, proc=proc)
    assert done.unreadable and done.removed == [] and stale.exists()


def _clean_with_a_participant_starting(dirs, monkeypatch, fresh: bool):
    """remove_stale, with a "participant" that starts right after the stale port's group was
    probed: it locks its segment and maps port 99991, the old (stale) file when `fresh` is False,
    else a new file of that name made after the removal."""
    shm_dir, proc = dirs
    port = _file(shm_dir / "fastdds_port99991")
    port_lock = _file(shm_dir / "fastdds_port99991_el")
    real_locked, real_holders, held = shm._locked, shm._lock_holders, []

    def start():
        lock = _file(shm_dir / "fastdds_fedcba9876543210_el", age_s=0.0)
        _lock_line(proc, lock)
        f = open(_file(port, age_s=0.0) if fresh else port, "r+b")
        held.append((f, mmap.mmap(f.fileno(), 0)))

    def locked(path):
        found = real_locked(path)
        if path == port_lock and not fresh and not held:
            start()  # between the probe and the removal
        return found

    def holders(proc_, shm_dir_):
        if fresh and not port.exists() and not held:
            start()  # after the removal
        return real_holders(proc_, shm_dir_)

    monkeypatch.setattr(shm, "_locked", locked)
    monkeypatch.setattr(shm, "_lock_holders", holders)
    try:
        return port, remove_stale(shm_dir=shm_dir, proc=proc)
    finally:
        for f, m in held:
            m.close()
            f.close()


def test_a_participant_that_started_in_that_instant_is_reported(dirs, monkeypatch):
    """The race that remains, forced: a participant opens the stale port between the probe of its
    group and the removal. Its mapping of the removed port is found afterwards."""
    port, done = _clean_with_a_participant_starting(dirs, monkeypatch, fresh=False)
    assert sorted(done.removed) == [port.name, port.name + "_el"]
    assert done.orphaned == {os.getpid(): [port.name]}


def test_a_port_made_again_after_the_removal_is_no_orphan(dirs, monkeypatch):
    port, done = _clean_with_a_participant_starting(dirs, monkeypatch, fresh=True)
    assert sorted(done.removed) == [port.name, port.name + "_el"] and done.orphaned == {}


def test_only_the_callers_domains_ports_are_judged(dirs):
    """Another domain's dead port stays (its graph's live writers may still map it, and a node
    restarted there on the same participant index would be cut off from them); data segments,
    whose names are never reused, and the ports of no domain (7000 + participant index, shared
    by every domain), go whatever the domain."""
    shm_dir, proc = dirs
    assert [shm.port_domain(b) for b in ("fastdds_port17911", "fastdds_port7400", "fastdds_port7001")] == [42, 0, None]
    assert shm.port_domain("fastdds_0123456789abcdef") is None
    own = [_file(shm_dir / n) for n in ("fastdds_port17911", "fastdds_port17911_el", "sem.fastdds_port17911_mutex")]
    other = [_file(shm_dir / n) for n in ("fastdds_port45411", "fastdds_port45411_el", "sem.fastdds_port45411_mutex")]
    segment = _file(shm_dir / "fastdds_0123456789abcdef")
    shared = [_file(shm_dir / n) for n in ("fastdds_port7001", "fastdds_port7001_el")]  # by participant index alone
    done = remove_stale(shm_dir=shm_dir, proc=proc, domains=(42,))
    assert sorted(done.removed) == sorted(p.name for p in (*own, segment, *shared))
    assert all(p.exists() for p in other), "domain 152's port is not domain 42's to judge"
    assert sorted(remove_stale(shm_dir=shm_dir, proc=proc).removed) == sorted(p.name for p in other)


def test_nothing_there_is_nothing_removed(dirs, tmp_path):
    shm_dir, proc = dirs
    assert remove_stale(shm_dir=tmp_path / "absent", proc=proc).removed == []
    assert remove_stale(shm_dir=shm_dir, proc=proc).removed == []


def test_a_removed_port_a_node_still_maps_is_named(dirs):
    """The run summary's check for a deaf listener: a port removed under a process that maps it."""
    shm_dir, proc = dirs
    port = _file(shm_dir / "fastdds_port99991")
    kept = _file(shm_dir / "fastdds_port99992")
    with open(port, "r+b") as f, mmap.mmap(f.fileno(), 0), open(kept, "r+b") as g, mmap.mmap(g.fileno(), 0):
        assert shm.removed_ports_mapped({"driver_right": os.getpid()}, proc, shm_dir) == {}
        port.unlink()
        assert shm.removed_ports_mapped({"driver_right": os.getpid()}, proc, shm_dir) == {
            "driver_right": ["fastdds_port99991"]
        }


class _Semaphore:
    """A real POSIX named semaphore (as Fast DDS's port mutex), removed at the end."""

    def __init__(self, name: str):
        import ctypes

        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.libc.sem_open.restype = ctypes.c_void_p
        self.libc.sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
        for fn in ("sem_wait", "sem_trywait", "sem_post", "sem_close"):
            getattr(self.libc, fn).argtypes = [ctypes.c_void_p]
        self.libc.sem_unlink.argtypes = [ctypes.c_char_p]
        self.name = f"/{name}".encode()
        self.sem = self.libc.sem_open(self.name, os.O_CREAT | os.O_EXCL, 0o600, 1)
        assert self.sem, f"sem_open {name}"

    def close(self):
        self.libc.sem_close(self.sem)
        self.libc.sem_unlink(self.name)


@pytest.fixture
def port_with_mutex(dirs):
    """A port group in the fake /dev/shm whose mutex is a real semaphore of a unique name."""
    shm_dir, proc = dirs
    base = f"fastdds_port{900000 + os.getpid() % 90000}"
    sem = _Semaphore(f"{base}_mutex")
    files = [_file(shm_dir / base, age_s=0.0), _file(shm_dir / f"{base}_el", age_s=0.0)]
    mutex_file = _file(shm_dir / f"sem.{base}_mutex", age_s=0.0)
    yield shm_dir, proc, files, mutex_file, sem
    sem.close()


def test_with_the_ports_mutex_held_even_young_files_go_and_the_mutex_stays(port_with_mutex):
    """Nobody can be opening the port while the clean-up holds its mutex: its young files are
    stale too. The mutex itself stays: a process waiting on it must find the same one."""
    shm_dir, proc, files, mutex_file, sem = port_with_mutex
    done = remove_stale(shm_dir=shm_dir, proc=proc, port_mutexes=True)
    assert sorted(done.removed) == sorted(p.name for p in files) and done.stuck == []
    assert mutex_file.exists() and not any(p.exists() for p in files)
    assert sem.libc.sem_trywait(sem.sem) == 0, "the clean-up gave the mutex back"
    sem.libc.sem_post(sem.sem)


def test_a_port_being_opened_is_not_touched_and_a_stuck_mutex_goes_when_old(port_with_mutex):
    """A mutex held (a participant opening the port, or one killed doing so): young files are
    kept, old ones go with their mutex, as Fast DDS removes a mutex it finds stuck."""
    shm_dir, proc, files, mutex_file, sem = port_with_mutex
    assert sem.libc.sem_wait(sem.sem) == 0  # held, by "someone else"
    t0 = time.monotonic()
    done = remove_stale(shm_dir=shm_dir, proc=proc, port_mutexes=True)
    assert time.monotonic() - t0 >= shm.MUTEX_WAIT_S * 0.9
    assert done.removed == [] and all(p.exists() for p in files)
    for p in (*files, mutex_file):
        old = time.time() - 60
        os.utime(p, (old, old))
    done = remove_stale(shm_dir=shm_dir, proc=proc, port_mutexes=True)
    assert sorted(done.removed) == sorted(p.name for p in (*files, mutex_file)) and done.stuck == [files[0].name]
