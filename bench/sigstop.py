"""What the SIGSTOP benches share (deaf_reader.py, take_stall.py): the environment of a local
DDS run, a process stopped again and again at random phases, the longest gap of a stream inside
each stop, and the teardown that leaves no stopped process behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "config" / "fastdds_local.xml"
sys.path.insert(0, str(REPO))
from tests.faults.freeze import freeze_in_blocking_wait  # noqa: E402 - the fault rig's freeze, shared


def local_dds_env(domain: int) -> dict[str, str]:
    """This process's environment with discovery on this machine only, `domain` and the
    project's Fast DDS profile: nothing leaves loopback."""
    return dict(
        os.environ,
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_DOMAIN_ID=str(domain),
        FASTDDS_DEFAULT_PROFILES_FILE=str(PROFILE),
    )


def stop_repeatedly(
    pid: int,
    stops: int,
    stop_s: float,
    pause_s: tuple[float, float],
    seed: int,
    clock: Callable[[], float] = time.monotonic,
    quiet: bool = False,
    freezes: list | None = None,
) -> list[tuple[float, float]]:
    """SIGSTOP `pid` for `stop_s`, `stops` times, a random pause in `pause_s` before each (a
    seeded phase); the (stopped, resumed) times on `clock`. `quiet`: each stop where every
    thread of the process waits in the kernel (the fault rig's freeze, tests/faults/freeze.py),
    each freeze appended to `freezes`."""
    rng = random.Random(seed)
    windows = []
    for _ in range(stops):
        time.sleep(pause_s[0] + rng.random() * (pause_s[1] - pause_s[0]))
        if quiet:
            frozen = freeze_in_blocking_wait(pid)
            t0 = clock() - time.time() + frozen.first_stop_s
            if freezes is not None:
                freezes.append(frozen)
        else:
            t0 = clock()
            os.kill(pid, signal.SIGSTOP)
        time.sleep(stop_s)
        os.kill(pid, signal.SIGCONT)
        windows.append((t0, clock()))
    return windows


def longest_gaps_ms(times: Sequence[float], windows: Sequence[tuple[float, float]]) -> list[float]:
    """Per window, the longest stretch (ms) without an event of `times`, the window's edges
    counting as events."""
    gaps = []
    for t0, t1 in windows:
        inside = [t0, *(t for t in times if t0 < t < t1), t1]
        gaps.append(max(b - a for a, b in zip(inside, inside[1:], strict=False)) * 1e3)
    return gaps


def end_all(procs: Sequence[subprocess.Popen]) -> None:
    """Resume (a stop may have been cut short) and terminate every process still running."""
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.terminate()
            p.wait(10)
