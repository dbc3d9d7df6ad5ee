"""Freeze a node process (SIGSTOP) at an instant when none of its threads runs user code.

Why: Fast DDS's shared-memory transport pushes a message into a reader's port under that port's
mutex (SharedMemGlobal::Port::try_push), a few instructions of user code with no system call
inside. A process stopped inside them keeps the mutex: every other writer to that reader blocks
in its send, and the reader's own receive thread waits on it too, until the process runs again.
CI saw it (2026-12-07): a driver SIGSTOPped by the fault battery held the gate's port, the camera
node blocked in its next send to the gate (the rig got one more frame, the gate none), and the
gate held for a 308 ms old camera 278 ms after the stop, before the state bound it was to meet.
That is a deaf gate, not the stale driver the trial measures (bench/deaf_reader.py measures it).

A thread stopped in user code shows -1 (or "running") in /proc/<pid>/task/<tid>/syscall; one
stopped in a system call shows its number and arguments. One system call is made under such a
lock: the wake of a waiting reader (the port's condition, RobustInterprocessCondition::notify_*,
posts a semaphore, a futex wake, under the condition's list mutex, which the woken reader takes
before it lets go of its port mutex). bench/deaf_reader.py at 1 kHz, 200 stops of 400 ms each:
plain stops left the reader deaf 6 times, stops with every thread in some system call 3 times.
So a stop is quiet when every thread waits in a system call that is not a futex wake; otherwise
the process is resumed for a moment and stopped again.
"""

from __future__ import annotations

import os
import platform
import random
import signal
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Freeze:
    """One freeze: when the final SIGSTOP was sent, after how many tries, and whether /proc
    showed every thread in a system call (False: it could not be read, or no try managed it)."""

    stopped_s: float
    tries: int
    quiescent: bool


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []


def all_stopped(pid: int) -> bool:
    """Every thread of `pid` is stopped (T/t), exiting (Z/X) or gone."""
    for tid in _tasks(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
"""The futex system call's number here (None: another machine, where a wake is not told apart)."""
FUTEX_WAITS = {0, 9, 11}
"""Futex operations that wait (FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI), with the
private flag (128) and the clock flag (256) masked off; every other operation wakes or locks."""


def _quiet(fields: list[str]) -> bool:
    """A stopped thread's /proc syscall line: it waits in a system call that is not a futex wake."""
    if not fields or fields[0] in ("-1", "running"):
        return False
    if FUTEX is None or int(fields[0]) != FUTEX:
        return True
    return (int(fields[2], 16) & 0x7F) in FUTEX_WAITS


def threads_in_user_code(pid: int) -> list[int] | None:
    """The threads of the stopped `pid` that are not quietly waiting: stopped outside a system
    call or in a futex wake (see above); None when /proc does not say (no permission)."""
    busy = []
    for tid in _tasks(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                fields = f.read().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        except PermissionError:
            return None
        if not _quiet(fields):
            busy.append(int(tid))
    return busy


def freeze_outside_user_code(pid: int, tries: int = 200, settle_s: float = 0.5) -> Freeze:
    """SIGSTOP `pid` until a stop finds every thread in a system call (at most `tries` stops,
    each followed by a resume of 1-5 ms); the process is left stopped either way."""
    attempt = 0
    while True:
        attempt += 1
        stopped_s = time.time()
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + settle_s
        while not all_stopped(pid) and time.monotonic() < deadline:
            time.sleep(0.0005)  # a thread in an uninterruptible wait stops when it leaves it
        busy = threads_in_user_code(pid) if all_stopped(pid) else [-1]
        if busy is None or not busy or attempt >= tries:
            return Freeze(stopped_s, attempt, busy == [])
        os.kill(pid, signal.SIGCONT)
        time.sleep(random.uniform(0.001, 0.005))
