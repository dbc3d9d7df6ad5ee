"""Stale Fast DDS shared-memory files: removed only while no process holds a lock there (no live
participant: removing files while one starts orphans its port), kept when young (a process may be
creating it), never a file that is not Fast DDS's; a removal that raced is reported."""

from __future__ import annotations

import fcntl
import mmap
import os
import time

from egomimic_launch import shm
from egomimic_launch.shm import remove_stale


def _file(path, size=4096, age_s=60.0):
    path.write_bytes(b"\0" * size)
    old = time.time() - age_s
    os.utime(path, (old, old))
    return path


def test_with_no_user_every_old_fastdds_file_goes(tmp_path):
    port = _file(tmp_path / "fastdds_port99991")
    lock = _file(tmp_path / "fastdds_port99991_el")
    mutex = _file(tmp_path / "sem.fastdds_port99991_mutex")
    segment = _file(tmp_path / "fastdds_0123456789abcdef")
    young = _file(tmp_path / "fastdds_port99993", age_s=0.0)
    other = _file(tmp_path / "not_fastdds_at_all")
    done = remove_stale(shm_dir=tmp_path)
    assert sorted(done.removed) == sorted(p.name for p in (port, lock, mutex, segment))
    assert done.users == [] and done.orphaned == {} and not done.unreadable
    assert young.exists() and other.exists()
    assert not port.exists() and not lock.exists() and not mutex.exists() and not segment.exists()


def test_while_one_process_holds_a_lock_there_nothing_goes(tmp_path):
    """A live participant holds its segment's and ports' lock files (flock) for its whole life."""
    stale = _file(tmp_path / "fastdds_port99991")
    lock = _file(tmp_path / "fastdds_port99992_el")
    with open(lock, "r+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = remove_stale(shm_dir=tmp_path)
        assert done.removed == [] and done.users == [os.getpid()]
    assert stale.exists() and lock.exists()


def test_a_process_that_maps_files_but_holds_no_lock_is_no_participant(tmp_path):
    """After rclpy's shutdown Fast DDS keeps other processes' ports and segments mapped (pytest's
    maps, fault battery): that alone must not stop the clean-up, or stale ports stay for good."""
    port = _file(tmp_path / "fastdds_port99991")
    segment = _file(tmp_path / "fastdds_0123456789abcdef")
    with open(port, "r+b") as f, mmap.mmap(f.fileno(), 0), open(segment, "r+b") as g, mmap.mmap(g.fileno(), 0):
        done = remove_stale(shm_dir=tmp_path)
        assert sorted(done.removed) == sorted([port.name, segment.name]) and done.users == []
        assert done.orphaned == {}  # it maps a removed port, but no participant of it is alive


def test_without_proc_locks_nothing_goes(tmp_path):
    (tmp_path / "proc").mkdir()
    stale = _file(tmp_path / "fastdds_port99991")
    done = remove_stale(shm_dir=tmp_path, proc=tmp_path / "proc")
    assert done.unreadable and done.removed == [] and stale.exists()


def _clean_with_a_participant_between_scans(tmp_path, monkeypatch, port, fresh: bool):
    """remove_stale, with a "participant" that starts right after the check for live ones: it
    locks its segment and maps `port`, the old (stale) file when `fresh` is False, else a new
    file of that name made after the removal."""
    real_holders, held = shm._lock_holders, []

    def holders(proc, shm_dir):
        live = real_holders(proc, shm_dir)
        if not held and (not fresh or not port.exists()):
            lock = open(_file(tmp_path / "fastdds_fedcba9876543210_el", age_s=0.0), "r+b")
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            f = open(_file(port, age_s=0.0) if fresh else port, "r+b")
            held.append((lock, f, mmap.mmap(f.fileno(), 0)))
            if fresh:
                live = real_holders(proc, shm_dir)
        return live

    monkeypatch.setattr(shm, "_lock_holders", holders)
    try:
        return remove_stale(shm_dir=tmp_path)
    finally:
        for lock, f, m in held:
            m.close()
            f.close()
            lock.close()


def test_a_participant_that_started_in_that_instant_is_reported(tmp_path, monkeypatch):
    """The race the rule narrows, forced: a participant opens the stale port between the check
    and the removal. Its mapping of the removed port is found afterwards."""
    port = _file(tmp_path / "fastdds_port99991")
    done = _clean_with_a_participant_between_scans(tmp_path, monkeypatch, port, fresh=False)
    assert done.removed == [port.name]
    assert done.orphaned == {os.getpid(): [port.name]}


def test_a_file_made_again_after_the_removal_is_no_orphan(tmp_path, monkeypatch):
    port = _file(tmp_path / "fastdds_port99991")
    done = _clean_with_a_participant_between_scans(tmp_path, monkeypatch, port, fresh=True)
    assert done.removed == [port.name] and done.orphaned == {}


def test_nothing_there_is_nothing_removed(tmp_path):
    assert remove_stale(shm_dir=tmp_path / "absent").removed == []
    assert remove_stale(shm_dir=tmp_path).removed == []
