"""The fault rig's freeze (tests/faults/freeze.py) on real processes: it stops a process only
when /proc shows every thread in a system call, and says when it could not."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import time

import pytest

from tests.faults import freeze
from tests.faults.freeze import all_stopped, freeze_in_blocking_wait, threads_not_waiting

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/syscall"), reason="needs Linux /proc/<pid>/syscall")

READY = "import sys, time\nprint('ready', flush=True)\n"
SLEEPER = READY + "while True: time.sleep(1)"
RELATIVE_SLEEPER = "import ctypes\nlibc = ctypes.CDLL(None)\n" + READY + "while True: libc.usleep(1000000)"
SPINNER = READY + "while True: pass"
HALF_BUSY = (
    READY + "while True:\n    t = time.monotonic() + 0.01\n    while time.monotonic() < t: pass\n    time.sleep(0.01)"
)


@pytest.fixture
def child():
    procs = []

    def start(code: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline() == "ready\n"  # past the interpreter's start-up, into its loop
        return p

    yield start
    for p in procs:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait(10)


def test_a_sleeping_process_is_frozen_in_its_sleep(child):
    p = child(SLEEPER)
    frozen = freeze_in_blocking_wait(p.pid)
    assert frozen.quiescent, f"no quiet stop in {frozen.tries} tries"
    assert all_stopped(p.pid)
    assert threads_not_waiting(p.pid) == {}


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        utime, stime = f.read().rsplit(")", 1)[1].split()[11:13]
    return int(utime) + int(stime)


def test_a_process_always_in_user_code_is_left_stopped_and_reported(child):
    p = child(SPINNER)
    ready, deadline = _cpu_ticks(p.pid), time.monotonic() + 10  # in its loop: past the write of "ready"
    while _cpu_ticks(p.pid) < ready + 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    frozen = freeze_in_blocking_wait(p.pid, within_s=0.02)
    assert not frozen.quiescent and frozen.tries >= 2
    assert frozen.first_stop_s < frozen.stopped_s
    assert all_stopped(p.pid)
    assert set(threads_not_waiting(p.pid).values()) == {"-1"}  # user code
    assert frozen.busy == "-1"


def test_a_process_half_in_user_code_is_frozen_in_its_sleep(child):
    p = child(HALF_BUSY)
    t0 = time.time()
    frozen = freeze_in_blocking_wait(p.pid)
    assert frozen.quiescent, f"no quiet stop in {frozen.tries} tries"
    assert t0 <= frozen.stopped_s <= time.time()
    assert threads_not_waiting(p.pid) == {}


@pytest.mark.skipif(freeze.FUTEX is None, reason="futex's number is known on x86_64 and aarch64")
@pytest.mark.parametrize(
    "op, quiet",
    [
        (0x0, True),
        (0x80, True),
        (0x189, True),
        (0x1, False),
        (0x81, False),
        (0x8A, False),
        (0x5, False),
        (0x6, False),
        (0x8B, False),
    ],
)
def test_a_thread_in_a_futex_is_quiet_only_while_it_waits(op, quiet):
    # FUTEX_WAIT (private, bitset with the realtime clock) waits; FUTEX_WAKE, WAKE_BITSET, WAKE_OP
    # run under the port condition's list mutex (a semaphore post); LOCK_PI and WAIT_REQUEUE_PI
    # return holding a lock.
    line = f"{freeze.FUTEX} 0x7f0000001000 {op:#x} 0x0 0x0 0x0 0x0 0x7ffd00000000 0x7f0000002000".split()
    assert freeze._quiet(line) is quiet


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 system call numbers")
def test_only_a_thread_in_a_blocking_wait_is_quiet():
    assert not freeze._quiet("-1 0x7ffe2828c040 0x7efdb00fe1cc".split())  # user code
    assert not freeze._quiet(["running"])
    args = "0x0 0x0 0x7fff27dcebd0 0x7fff27dcec10 0x0 0x0 0x7fff27dcebb8 0x7f6e36a4c503"
    assert freeze._quiet(f"230 {args}".split())  # clock_nanosleep
    assert freeze._quiet(f"232 {args}".split())  # epoll_wait
    assert freeze._quiet(f"219 {args}".split())  # restart_syscall: a timed wait resumed after a stop
    assert not freeze._quiet(f"228 {args}".split())  # clock_gettime without the vDSO: not a wait
    assert not freeze._quiet(f"1 {args}".split())  # write


def test_a_sleep_resumed_after_a_stop_is_still_quiet(child):
    """After a SIGSTOP and SIGCONT a timed wait goes on in restart_syscall: a freeze's second
    try must see it as the wait it is (fc151: 7 threads of a driver in it, a freeze gave up). A
    relative sleep is one, as C++'s sleep_for (an absolute clock_nanosleep, Python's, restarts
    as itself)."""
    p = child(RELATIVE_SLEEPER)
    os.kill(p.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while not all_stopped(p.pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    os.kill(p.pid, signal.SIGCONT)
    while freeze._state(p.pid, str(p.pid)) != "S" and time.monotonic() < deadline:  # back asleep
        time.sleep(0.001)
    frozen = freeze_in_blocking_wait(p.pid)
    assert frozen.quiescent, f"no quiet stop in {frozen.tries} tries: {frozen.busy}"
