"""Stale Fast DDS shared-memory files: removed only while no process maps a Fast DDS port (no
live participant: removing files while one starts orphans its port), kept when young (a process may be
creating it), never a file that is not Fast DDS's; a removal that raced is reported."""

from __future__ import annotations

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


def test_while_one_process_maps_a_fastdds_port_nothing_goes(tmp_path):
    stale = _file(tmp_path / "fastdds_port99991")
    live = _file(tmp_path / "fastdds_port99992")
    with open(live, "r+b") as f, mmap.mmap(f.fileno(), 0):  # this process maps it, as a listener would
        done = remove_stale(shm_dir=tmp_path)
        assert done.removed == [] and done.users == [os.getpid()]
    assert stale.exists() and live.exists()


def test_a_process_that_maps_only_data_segments_is_no_participant(tmp_path):
    """After rclpy's shutdown Fast DDS keeps other processes' data segments mapped (pytest's maps,
    fault battery): that alone must not stop the clean-up, or stale ports stay for good."""
    port = _file(tmp_path / "fastdds_port99991")
    segment = _file(tmp_path / "fastdds_0123456789abcdef")
    with open(segment, "r+b") as f, mmap.mmap(f.fileno(), 0):
        done = remove_stale(shm_dir=tmp_path)
        assert sorted(done.removed) == sorted([port.name, segment.name]) and done.users == []
        assert done.orphaned == {}  # the segment's name is never reused: no port was cut off


def _clean_with_a_participant_between_scans(tmp_path, monkeypatch, port, fresh: bool):
    """remove_stale, with a "participant" that maps `port` right after the first scan: the old
    (stale) file when `fresh` is False, else a new file of that name made after the removal."""
    real_maps, held = shm._maps, []

    def scan(proc, shm_dir):
        users = real_maps(proc, shm_dir)
        if not held and (not fresh or not port.exists()):
            f = open(_file(port, age_s=0.0) if fresh else port, "r+b")
            held.append((f, mmap.mmap(f.fileno(), 0)))
            if fresh:
                users = real_maps(proc, shm_dir)
        return users

    monkeypatch.setattr(shm, "_maps", scan)
    try:
        return remove_stale(shm_dir=tmp_path)
    finally:
        for f, m in held:
            m.close()
            f.close()


def test_a_process_that_mapped_a_file_in_that_instant_is_reported(tmp_path, monkeypatch):
    """The race the rule avoids, forced: a participant opens the stale port between the scan and
    the removal. Its mapping of the removed file is found by the second scan."""
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
