"""Stale Fast DDS shared-memory files: removed only while no participant is alive (no lock in
/proc/locks on that filesystem, no Fast DDS lock file held: removing files while a participant
starts orphans its port), kept when young (a process may be creating it), never a file that is
not Fast DDS's; a removal that raced is reported.

Each test reads a /proc of its own: a `locks` file the test writes (the machine's /proc/locks
holds whatever else runs here) and this process's entry, linked, for its maps."""

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


def test_a_lock_in_proc_locks_keeps_everything(dirs):
    """A live participant holds its segment's and ports' lock files (flock) for its whole life."""
    shm_dir, proc = dirs
    stale = _file(shm_dir / "fastdds_port99991")
    lock = _file(shm_dir / "fastdds_port99992_el")
    _lock_line(proc, lock)
    done = remove_stale(shm_dir=shm_dir, proc=proc)
    assert done.removed == [] and done.users == [os.getpid()]
    assert stale.exists() and lock.exists()


def test_a_held_lock_file_keeps_everything_even_unlisted(dirs):
    """A participant in another PID namespace is missing from /proc/locks; its lock still
    conflicts with the probe's."""
    shm_dir, proc = dirs
    stale = _file(shm_dir / "fastdds_port99991")
    lock = _file(shm_dir / "fastdds_port99992_sl")
    with open(lock, "r+b") as f:
        fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a multicast listener's shared lock
        done = remove_stale(shm_dir=shm_dir, proc=proc)
    assert done.removed == [] and done.users == [] and done.busy == [lock.name]
    assert stale.exists()


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
    """remove_stale, with a "participant" that starts right after the last check for live ones:
    it locks its segment and maps port 99991, the old (stale) file when `fresh` is False, else a
    new file of that name made after the removal."""
    shm_dir, proc = dirs
    port = _file(shm_dir / "fastdds_port99991")
    real_busy, real_holders, held = shm._busy_lock_files, shm._lock_holders, []

    def start():
        lock = _file(shm_dir / "fastdds_fedcba9876543210_el", age_s=0.0)
        _lock_line(proc, lock)
        f = open(_file(port, age_s=0.0) if fresh else port, "r+b")
        held.append((f, mmap.mmap(f.fileno(), 0)))

    def busy(shm_dir_):
        found = real_busy(shm_dir_)
        if not fresh:
            start()  # between the checks and the removal
        return found

    def holders(proc_, shm_dir_):
        if fresh and not port.exists() and not held:
            start()  # after the removal
        return real_holders(proc_, shm_dir_)

    monkeypatch.setattr(shm, "_busy_lock_files", busy)
    monkeypatch.setattr(shm, "_lock_holders", holders)
    try:
        return port, remove_stale(shm_dir=shm_dir, proc=proc)
    finally:
        for f, m in held:
            m.close()
            f.close()


def test_a_participant_that_started_in_that_instant_is_reported(dirs, monkeypatch):
    """The race the rule narrows, forced: a participant opens the stale port between the checks
    and the removal. Its mapping of the removed port is found afterwards."""
    port, done = _clean_with_a_participant_starting(dirs, monkeypatch, fresh=False)
    assert done.removed == [port.name]
    assert done.orphaned == {os.getpid(): [port.name]}


def test_a_port_made_again_after_the_removal_is_no_orphan(dirs, monkeypatch):
    port, done = _clean_with_a_participant_starting(dirs, monkeypatch, fresh=True)
    assert done.removed == [port.name] and done.orphaned == {}


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
