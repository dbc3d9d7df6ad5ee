"""Freeze a node process (SIGSTOP) at an instant when every thread of it waits in the kernel.

Why: Fast DDS's shared-memory transport takes a reader port's interprocess mutex in two places.
A writer pushes a message under it (SharedMemGlobal::Port::try_push: a few instructions of user
code, no system call), and it wakes the waiting reader under the port condition's list mutex
(RobustInterprocessCondition::notify_*: a semaphore post, a futex wake), which the woken reader
takes while it holds its port mutex. A process stopped inside either keeps the lock: the reader
hears nothing and every other writer to it blocks in its send until the process runs again.
CI saw it (2026-12-07): a driver SIGSTOPped by the fault battery held the gate's port, the camera
node sent the rig one more frame and nothing more (stopped, we infer, in its send to the gate),
and the gate held for a 308 ms old camera 278 ms after the stop, before the state bound it was
to meet. That is a deaf gate, not the stale driver the trial measures.

So a stop counts as quiet only when /proc/<pid>/task/<tid>/syscall shows every thread inside a
blocking wait (a futex wait, epoll, poll, select, a sleep, a blocking receive); a thread in user
code shows -1, one in any other system call (a futex wake, clock_gettime without the vDSO, a
send) its number. Otherwise the process is resumed for 2-10 ms and stopped again.
bench/deaf_reader.py --stops-as both (1 kHz writer, 200 stops of 400 ms each), two runs: plain
stops left the reader deaf 0 and 1 times, quiet stops 0 and 0 (README has every run).

This lowers the chance; it does not rule it out. A reader thread that, after a wake, waits for
the list mutex (a futex wait) while a writer of another process finishes its post holds its own
port mutex meanwhile, and a freeze there blocks every writer to the frozen process (a window of
microseconds per received message). The fault battery still re-runs a trial that finds the gate
deaf (test_gate_faults.conclude).
"""

from __future__ import annotations

import os
import platform
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Freeze:
    """One freeze: the first and the final SIGSTOP (the node ran at most a few ms between the
    two, in 2-10 ms resumes), how many stops it took, and whether /proc showed every thread in
    a blocking wait at the final one (False: it could not be read, or none managed it in time)."""

    first_stop_s: float
    stopped_s: float
    tries: int
    quiescent: bool
    busy: str = ""
    """At the final stop, when not quiescent: what the busy threads were in (their /proc
    syscall number, -1 for user code, and a futex's operation), e.g. "-1 x2, 202/0x81"."""


BLOCKING_WAITS = {
    # read, poll, select, pause, nanosleep, recvfrom, recvmsg, wait4, rt_sigtimedwait,
    # rt_sigsuspend, restart_syscall, clock_nanosleep, epoll_wait, pselect6, ppoll, epoll_pwait,
    # epoll_pwait2
    "x86_64": {0, 7, 23, 34, 35, 45, 47, 61, 128, 130, 219, 230, 232, 270, 271, 281, 441},
    # read, epoll_pwait, pselect6, ppoll, nanosleep, clock_nanosleep, restart_syscall,
    # rt_sigsuspend, rt_sigtimedwait, recvfrom, recvmsg, wait4, epoll_pwait2
    "aarch64": {63, 22, 72, 73, 101, 115, 128, 133, 137, 207, 212, 260, 441},
}.get(platform.machine(), set())
"""System calls that only wait, by number on this machine (empty on another: no stop is quiet).
restart_syscall is a timed wait (a sleep, a futex wait, a poll) resumed after a stop: after the
first SIGSTOP and SIGCONT of a freeze, every thread that was in one shows it (fc151: 7 threads
of a driver in it made 1 of 4 freezes give up)."""
FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
FUTEX_WAITS = {0, 9}
"""Futex operations that wait (FUTEX_WAIT, FUTEX_WAIT_BITSET), with the private flag (128) and
the clock flag (256) masked off; every other operation wakes, requeues or takes a lock (the PI
ones return holding it)."""


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []


def _state(pid: int, tid: str) -> str | None:
    """A thread's scheduler state letter, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


EXITING = ("Z", "X")


def all_stopped(pid: int) -> bool:
    """Every thread of `pid` is stopped (T/t), exiting (Z/X) or gone."""
    return all(_state(pid, tid) in (None, "T", "t", *EXITING) for tid in _tasks(pid))


def _quiet(fields: list[str]) -> bool:
    """A stopped thread's /proc syscall line: it waits in a blocking wait (module docstring)."""
    if not fields or fields[0] in ("-1", "running"):
        return False
    number = int(fields[0])
    if number == FUTEX:
        return len(fields) > 2 and (int(fields[2], 16) & 0x7F) in FUTEX_WAITS
    return number in BLOCKING_WAITS


def threads_not_waiting(pid: int) -> dict[int, str] | None:
    """The live threads of the stopped `pid` that are not in a blocking wait (module docstring),
    each with what it was in (its syscall number, -1 for user code, a futex's operation), or
    None when /proc does not say (no permission to read a thread's syscall file)."""
    busy = {}
    for tid in _tasks(pid):
        if _state(pid, tid) in (None, *EXITING):  # an exiting thread's line says nothing
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                fields = f.read().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        except PermissionError:
            return None
        if not _quiet(fields):
            busy[int(tid)] = "/".join(fields[:1] + (fields[2:3] if fields[:1] == [str(FUTEX)] else []))
    return busy


def freeze_in_blocking_wait(pid: int, within_s: float = 0.15, settle_s: float = 0.5) -> Freeze:
    """SIGSTOP `pid` until a stop finds every thread in a blocking wait, trying for at most
    `within_s` (each failed try is followed by a resume of 2-10 ms: a thread preempted in user
    code needs the CPU to reach its wait); the process is left stopped either way. `settle_s`:
    how long one stop may take to reach every thread. Why 0.15 s: in a fresh clone's fault
    battery 2 of 4 freezes found no quiet instant in 50 ms of 1-5 ms resumes; and it is short of
    the 0.3 s after which the gate holds for a silent stream, which the tries' own stops add up to."""
    first_stop_s, tries = None, 0
    give_up = time.monotonic() + within_s
    while True:
        tries += 1
        stopped_s = time.time()
        os.kill(pid, signal.SIGSTOP)
        first_stop_s = first_stop_s or stopped_s
        deadline = time.monotonic() + settle_s
        while not all_stopped(pid) and time.monotonic() < deadline:
            time.sleep(0.0005)  # a thread in an uninterruptible wait stops when it leaves it
        busy = threads_not_waiting(pid) if all_stopped(pid) else {-1: "not stopped"}
        if busy is None or not busy or time.monotonic() >= give_up:
            return Freeze(first_stop_s, stopped_s, tries, busy == {}, _summary(busy))
        os.kill(pid, signal.SIGCONT)
        time.sleep(random.uniform(0.002, 0.01))


def _summary(busy: dict[int, str] | None) -> str:
    if busy is None:
        return "/proc/<pid>/task/*/syscall not readable"
    counts = Counter(busy.values())
    return ", ".join(f"{what} x{n}" if n > 1 else what for what, n in sorted(counts.items()))
