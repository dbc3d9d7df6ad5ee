"""Stale Fast DDS shared-memory files: removed when no process maps them, kept while one does,
kept when young (a process may be creating them), and never a file that is not Fast DDS's."""

from __future__ import annotations

import mmap
import os
import time

from egomimic_launch.shm import remove_unused


def _file(path, size=4096, age_s=60.0):
    path.write_bytes(b"\0" * size)
    old = time.time() - age_s
    os.utime(path, (old, old))
    return path


def test_unmapped_files_go_with_their_companions_and_mapped_ones_stay(tmp_path):
    stale = _file(tmp_path / "fastdds_port99991")
    stale_lock = _file(tmp_path / "fastdds_port99991_el")
    stale_segment = _file(tmp_path / "fastdds_0123456789abcdef")
    live = _file(tmp_path / "fastdds_port99992")
    live_lock = _file(tmp_path / "fastdds_port99992_el")
    young = _file(tmp_path / "fastdds_port99993", age_s=0.0)
    other = _file(tmp_path / "not_fastdds_at_all")
    with open(live, "r+b") as f, mmap.mmap(f.fileno(), 0):  # this process maps it, as a listener would
        removed = remove_unused(shm_dir=tmp_path)
        assert sorted(removed) == sorted([stale.name, stale_lock.name, stale_segment.name])
        assert live.exists() and live_lock.exists() and young.exists() and other.exists()
    assert not stale.exists() and not stale_lock.exists()


def test_nothing_there_is_nothing_removed(tmp_path):
    assert remove_unused(shm_dir=tmp_path / "absent") == []
    assert remove_unused(shm_dir=tmp_path) == []
