"""Whether another process holds a flock on a file, found by trying one.

Why a probe and not /proc/locks: a lock conflict is kernel-wide, so it also sees a holder in
another PID namespace (a container sharing the directory), and it needs no parsing. Used for the
episode writer's lock (a recording in progress) and Fast DDS's lock files (a live participant)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def held_by_another(path: str | Path, *, exclusive_only: bool = False, follow_symlinks: bool = True) -> bool:
    """True when some other open file holds a flock on `path` that conflicts with the probe's:
    any lock, or only an exclusive one with `exclusive_only` (the probe then asks for a shared
    lock). False when the file cannot be opened (gone meanwhile, or not ours). The probe's own
    lock is released before returning."""
    flags = os.O_RDONLY | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if exclusive_only else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's lock, if it got one
    return False
