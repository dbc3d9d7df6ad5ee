"""How long a thread waited for a CPU: the run-queue wait the kernel keeps per thread.

Why: a late frame's thread that used little CPU either slept (on its device, the GIL or a lock)
or was ready and not run (the machine's CPUs busy with other work); CPU time alone cannot tell
them apart, and the fix differs (fewer threads to hand the GIL round, or a higher tier).
/proc/thread-self/schedstat holds the thread's time on a CPU and its time waiting on a run queue
(ns); reading it costs about 1 us. ROS-free; Linux only: elsewhere `open()` gives None.
"""

from __future__ import annotations

import os


class ThreadSchedStat:
    """The calling thread's run-queue wait, read from a file descriptor the thread opened (the
    path names the thread that opens it; reads from another thread still give the opener's)."""

    def __init__(self, fd: int):
        self._fd = fd

    @classmethod
    def open(cls) -> ThreadSchedStat | None:
        """For the calling thread; None where the kernel does not keep the figures."""
        try:
            fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        stat = cls(fd)
        if stat.waited_ns() is None:
            stat.close()
            return None
        return stat

    def waited_ns(self) -> int | None:
        """Nanoseconds the thread has waited on a run queue since it started (None: unreadable)."""
        try:
            fields = os.pread(self._fd, 96, 0).split()
            return int(fields[1])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
