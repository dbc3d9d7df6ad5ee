"""How busy the machine was while the graph ran: the whole machine's CPU (all processes, /proc/stat)
and each node's, over the run's window, for the run summary.

Why: on a 2-core machine a graph that needs more CPU than the machine has left delays every
stream, and the gate then holds on stale inputs as it must (STALE_CAMERA, STALE_STATE). Seen on
2026-12-06: the same scripted graph took 120 % of one core where it took 52 % two days before (a
slower host; the graph had not changed), and `make run` with its recorder took 188 % of the 200
% there is; its cameras' capture threads were then found runnable but not running (preempted, in
`exit_to_user_mode_loop`) through 59 of 85 slow frames, not waiting on a lock, and the gate held
STALE_CAMERA. A summary that says "the machine was 94 % busy" beside the HOLD tells the user which
of the two it was: their machine's headroom or a sensor.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

SATURATED_PCT = 75.0
"""Machine busy (% of all its cores, averaged over the run) from which the summary says that
every stream was delayed: past it a new piece of work waits for a core most of the time (two
cores at 75 % busy: about 2 in 3 wake-ups wait), and a run's average hides its bursts. Measured on
2026-12-06 (`make run`, the default policy, recording): STALE_CAMERA HOLDs at 84, 84, 90, 90 and
93 % busy; runs that passed at 71 and 84 %."""


OTHERS_SHOWN = 3
"""How many of the busiest other processes the summary names."""
OTHER_MIN_PCT = 2.0
"""An other process below this (% of one core) is not named."""


@dataclass(frozen=True)
class Ticks:
    """Clock ticks of all cores since boot, from /proc/stat's first line."""

    busy: int
    """user, nice, system, irq, softirq and steal (idle and iowait are not busy)."""
    total: int
    steal: int
    """Time the hypervisor ran something else while this virtual machine had work: a core this
    machine did not get. Counted as busy (nothing of ours could run), and shown on its own, since
    on a virtual machine it is the one share no process here can explain."""


def cpu_ticks(stat_text: str) -> Ticks:
    first = stat_text.splitlines()[0].split()
    if first[0] != "cpu":
        raise ValueError(f"not /proc/stat: first line starts with {first[0]!r}")
    values = [int(v) for v in first[1:9]] + [0] * (8 - len(first[1:9]))
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    busy = user + nice + system + irq + softirq + steal
    return Ticks(busy=busy, total=busy + idle + iowait, steal=steal)


def _machine_ticks() -> Ticks:
    with open("/proc/stat") as f:
        return cpu_ticks(f.read())


def _all_processes_cpu_s() -> dict[int, tuple[float, str, float]]:
    """{pid: (start time, name, user + system CPU seconds)} of every process this user may read
    (the start time tells a reused pid from the process that had it)."""
    import psutil

    found = {}
    for proc in psutil.process_iter(["create_time", "name", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is not None:
            found[proc.pid] = (proc.info["create_time"], proc.info["name"] or "?", times.user + times.system)
    return found


def _process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` (its threads, not its children); None if gone."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return t.user + t.system


@dataclass
class CpuLoad:
    window_s: float
    cores: int
    machine_busy_pct: float
    """Of all cores: 100 = every core busy the whole window."""
    by_process_pct: dict[str, float] = field(default_factory=dict)
    """Each watched process (a node, the launcher) in % of one core."""
    steal_pct: float = 0.0
    """Of all cores, like machine_busy_pct (and part of it): time the hypervisor gave away."""
    top_others: list[tuple[str, float]] = field(default_factory=list)
    """The busiest processes outside the graph ("name (pid)", % of one core), busiest first."""

    @property
    def others_pct(self) -> float:
        """What the rest of the machine used (other programs, the kernel), in % of one core."""
        return max(0.0, self.machine_busy_pct * self.cores - sum(self.by_process_pct.values()))

    @property
    def saturated(self) -> bool:
        return self.machine_busy_pct >= SATURATED_PCT

    def lines(self) -> list[str]:
        ours = sum(self.by_process_pct.values())
        nodes = ", ".join(f"{n} {p:.0f}" for n, p in sorted(self.by_process_pct.items(), key=lambda kv: -kv[1]))
        others = [f"{n} {p:.0f}" for n, p in self.top_others]
        if self.steal_pct >= 0.5:
            others.insert(0, f"hypervisor steal {self.steal_pct * self.cores:.0f}")
        return [
            f"CPU over {self.window_s:.0f} s: machine {self.machine_busy_pct:.0f} % busy ({self.cores} cores); "
            f"this graph {ours:.0f} % of one core, other processes {self.others_pct:.0f} %"
            + (f" ({', '.join(others)})" if others else ""),
            f"    by process (% of one core): {nodes}",
        ]

    def note(self, held: bool, rates_nominal: bool) -> str:
        """What the summary adds when the gate held or a stream ran slow on a saturated machine
        ("" otherwise: a machine with headroom leaves the cause to the gate's reason)."""
        if not self.saturated or not (held or not rates_nominal):
            return ""
        return (
            f"the machine was {self.machine_busy_pct:.0f} % busy: past {SATURATED_PCT:.0f} % every stream waits "
            "for a core, and a HOLD on stale inputs (STALE_CAMERA, STALE_STATE) is then as likely the machine's "
            "lack of headroom as a sensor's fault (CPU by process above)"
        )

    def as_dict(self) -> dict:
        return {
            "window_s": self.window_s,
            "cores": self.cores,
            "machine_busy_pct": self.machine_busy_pct,
            "by_process_pct": self.by_process_pct,
            "others_pct": self.others_pct,
            "steal_pct": self.steal_pct,
            "top_others": [{"process": n, "pct": p} for n, p in self.top_others],
        }


class CpuWindow:
    """start() and stop() with the watched processes ({name: pid}); stop() returns the CpuLoad.
    A process that started after start() (or a name that maps to another pid by then) counts from
    its own start; one gone by stop() is left out, its CPU then among the other processes'. The
    machine's share is of all its cores: with cores pinned (control_cpus, stack_cpus) a saturated
    pair of cores can hide in a machine that is not busy overall."""

    def __init__(self):
        self._t0: float | None = None
        self._machine0 = Ticks(0, 0, 0)
        self._proc0: dict[str, tuple[int, float]] = {}
        self._all0: dict[int, tuple[float, str, float]] = {}

    @property
    def started(self) -> bool:
        return self._t0 is not None

    def start(self, pids: dict[str, int]) -> None:
        self._t0 = time.monotonic()
        self._machine0 = _machine_ticks()
        self._proc0 = {n: (pid, s) for n, pid in pids.items() if (s := _process_cpu_s(pid)) is not None}
        self._all0 = _all_processes_cpu_s()

    def stop(self, pids: dict[str, int]) -> CpuLoad | None:
        """None when start() was not called or no time passed."""
        if self._t0 is None:
            return None
        window = time.monotonic() - self._t0
        t1, t0 = _machine_ticks(), self._machine0
        if window <= 0 or t1.total <= t0.total:
            return None
        by_process = {}
        for name, pid in pids.items():
            used = _process_cpu_s(pid)
            if used is None:
                continue
            before = self._proc0.get(name)
            base = before[1] if before is not None and before[0] == pid else 0.0
            by_process[name] = 100.0 * (used - base) / window
        ours = set(pids.values())
        others = []
        for pid, (started, name, used) in _all_processes_cpu_s().items():
            before = self._all0.get(pid)
            base = before[2] if before is not None and before[0] == started else 0.0
            pct = 100.0 * (used - base) / window
            if pid not in ours and pct >= OTHER_MIN_PCT:
                others.append((f"{name} ({pid})", pct))
        span = t1.total - t0.total
        return CpuLoad(
            window_s=window,
            cores=os.cpu_count() or 1,  # /proc/stat's first line sums every online core
            machine_busy_pct=100.0 * (t1.busy - t0.busy) / span,
            by_process_pct=by_process,
            steal_pct=100.0 * (t1.steal - t0.steal) / span,
            top_others=sorted(others, key=lambda kv: -kv[1])[:OTHERS_SHOWN],
        )
