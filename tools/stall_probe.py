"""Does the machine itself stand still? A probe at the highest priority this user may take.

    .venv/bin/python tools/stall_probe.py [--late-ms 20] [--out stalls.json]   (until SIGINT/SIGTERM)

Sleeps 1 ms at a time at SCHED_FIFO priority 90 (where permitted; else the lowest niceness
allowed) and records every wake-up that came later than --late-ms, with its wall-clock end, and
the CPU time the hypervisor stole meanwhile (/proc/stat `steal`, machine-wide). Why: when every
stream of the graph, the SCHED_FIFO gate's included, shows its worst gap at the same moment, the
question is whether any process could have run then. A FIFO thread at 90 preempts every process
of the graph and every hog, so its lateness is the machine's: the kernel or the VM (steal), not a
node's code. tools/soak.py runs it beside the graph and says whether the action stream's worst
gap overlaps one of its stalls.

Every 10 ms it also reads each CPU's stolen time: a virtual CPU the hypervisor took away for
longer than --late-ms is a steal burst, even when this probe, on the other CPU, ran on time. Why:
a thread descheduled by the host while it holds a lock that other processes share (Fast DDS's
shared-memory ports) stops every process that needs the lock, while the guest sees the other CPU
idle; the probe alone cannot see that.

Writes JSON on exit: {"priority", "late_ms", "stalls": [[end_wall_s, late_s], ...], "worst_s",
"wakeups", "steal_s", "steal_bursts": [[read_wall_s, cpu, stolen_s, previous_read_wall_s], ...],
"duration_s"}; a stall is a wake-up more than --late-ms after it was due, a burst more time than
that stolen from one CPU between two readings (the kernel counts steal in 10 ms units, and
accounts it at the CPU's first tick after the host gave it back).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

FIFO_PRIORITY = 90
TICK_S = 0.001
STEAL_EVERY_TICKS = 10
"""Each CPU's stolen time is read every this many ticks (10 ms: /proc/stat counts in 10 ms)."""


def take_priority() -> str:
    """The highest scheduling priority this process may take, and what it got, for the report:
    SCHED_FIFO 90, else the highest real-time priority RLIMIT_RTPRIO allows, else a niceness."""
    import resource

    allowed = resource.getrlimit(resource.RLIMIT_RTPRIO)[0]
    for priority in (FIFO_PRIORITY, *((min(int(allowed), FIFO_PRIORITY),) if allowed > 0 else ())):
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            return f"SCHED_FIFO {priority}"
        except (PermissionError, OSError):
            continue
    for niceness in (-20, -10, -5, 0):
        try:
            os.nice(niceness - os.nice(0))
            return f"niceness {os.nice(0)} (SCHED_FIFO not permitted)"
        except (PermissionError, OSError):
            continue
    return f"niceness {os.nice(0)}"


def steal_s(stat: Path = Path("/proc/stat")) -> float:
    """CPU time stolen by the hypervisor since boot, all CPUs (the `cpu` line's 8th value, in
    clock ticks); 0 when the kernel does not report it."""
    try:
        fields = stat.read_text().splitlines()[0].split()
    except OSError:
        return 0.0
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if fields[0] == "cpu" and len(fields) > 8 else 0.0


def steal_by_cpu(stat: Path = Path("/proc/stat")) -> dict[int, float]:
    """Each CPU's time stolen by the hypervisor since boot (s), by its number N in the `cpuN`
    lines (an offline CPU has no line); empty when the kernel does not report it."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    fields = [line.split() for line in lines if line.startswith("cpu") and line[3:4].isdigit()]
    return {int(f[0][3:]): int(f[8]) / tick for f in fields if len(f) > 8}


def probe(late_s: float, stop: list[bool], sleep=time.sleep, read_steal=steal_by_cpu) -> dict:
    """Tick until stop[0]; the stalls and steal bursts seen (module docstring). `sleep` and
    `read_steal`: for a test."""
    stalls: list[tuple[float, float]] = []
    bursts: list[tuple[float, int, float, float]] = []
    worst, wakeups = 0.0, 0
    steal0, t0 = steal_s(), time.monotonic()
    stolen, read_at = read_steal(), time.time()
    due = t0 + TICK_S
    while not stop[0]:
        sleep(max(0.0, due - time.monotonic()))
        now = time.monotonic()
        wakeups += 1
        late = now - due
        worst = max(worst, late)
        if late > late_s:
            stalls.append((round(time.time(), 4), round(late, 4)))
        if wakeups % STEAL_EVERY_TICKS == 0:
            latest, at = read_steal(), time.time()
            for cpu, after in latest.items():
                if after - stolen.get(cpu, after) > late_s:
                    bursts.append((round(at, 4), cpu, round(after - stolen[cpu], 3), round(read_at, 4)))
            stolen, read_at = latest or stolen, at
        due = now + TICK_S
    return {
        "late_ms": late_s * 1e3,
        "stalls": stalls,
        "worst_s": round(worst, 4),
        "wakeups": wakeups,
        "steal_s": round(steal_s() - steal0, 3),
        "steal_bursts": bursts,
        "duration_s": round(time.monotonic() - t0, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--late-ms", type=float, default=20.0, help="a wake-up this late is a stall (default 20)")
    ap.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    args = ap.parse_args(argv)
    stop = [False]

    def on_signal(*_):
        stop[0] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    priority = take_priority()
    result = {"priority": priority, **probe(args.late_ms / 1e3, stop)}
    text = json.dumps(result)
    if args.out:  # whole or not at all: the soak reads it after this exits
        tmp = args.out.with_name(args.out.name + ".partial")
        tmp.write_text(text + "\n")
        os.replace(tmp, args.out)
    else:
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
