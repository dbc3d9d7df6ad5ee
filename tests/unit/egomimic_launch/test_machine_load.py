"""The run summary's CPU line: the machine's busy share from /proc/stat and each process's CPU over
the run's window, measured on real processes (this one and a child that burns CPU)."""

import subprocess
import sys
import time

import pytest

from egomimic_launch.machine_load import SATURATED_PCT, CpuLoad, CpuWindow, cpu_ticks

STAT = """cpu  100 5 20 800 50 3 2 10 0 0
cpu0 50 2 10 400 25 1 1 5 0 0
intr 1 2 3
"""


BURN_0_4_S = (
    "import sys, time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
    "print('done', flush=True)\nsys.stdin.read()"
)


def burn(seconds: float) -> None:
    """Use `seconds` of this process's CPU (process time, whatever else the machine runs)."""
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += 1


def test_busy_counts_user_nice_system_irq_softirq_steal_and_not_idle_or_iowait():
    ticks = cpu_ticks(STAT)
    assert ticks.busy == 100 + 5 + 20 + 3 + 2 + 10
    assert ticks.total == ticks.busy + 800 + 50
    assert ticks.steal == 10
    with pytest.raises(ValueError, match="not /proc/stat"):
        cpu_ticks("intr 1 2 3\n")


def test_a_window_measures_this_process_and_a_child_started_inside_it():
    window = CpuWindow()
    assert window.stop({}) is None  # never started
    me = {"launcher": __import__("os").getpid()}
    burn(0.5)  # before the window: not counted
    window.start(me)
    # Not watched: another process on the machine. It burns 0.4 s, then waits to be stopped.
    sibling = subprocess.Popen(
        [sys.executable, "-c", BURN_0_4_S], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    burn(0.3)
    # Started after start(): counted from its own start. It burns 0.2 s, then waits to be stopped.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\n"
            "print('done', flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "done"
        load = window.stop({**me, "child": child.pid, "gone": 2**22 + 12345})
    finally:
        child.stdin.close()
        child.wait(10)
    assert load is not None and "gone" not in load.by_process_pct
    used = {n: p * load.window_s / 100.0 for n, p in load.by_process_pct.items()}
    assert 0.28 <= used["launcher"] < 0.7  # 0.3 s burned (10 ms ticks), not the 0.5 s before start()
    assert used["child"] >= 0.18
    assert 0.0 < load.machine_busy_pct <= 100.0
    assert 0.0 <= load.steal_pct <= load.machine_busy_pct
    assert load.cores >= 1
    # Processes outside the graph are named by what they used in the window: the sibling that
    # burned 0.4 s is, this pytest (watched as "launcher") is not.
    try:
        assert sibling.stdout.readline().strip() == "done"
        load = window.stop(me)
    finally:
        sibling.stdin.close()
        sibling.wait(10)
    named = dict(load.top_others)
    assert (
        named.get(f"python ({sibling.pid})", named.get(f"python3 ({sibling.pid})", 0.0)) * load.window_s / 100 >= 0.35
    ), named
    assert not any(name.endswith(f"({me['launcher']})") for name in named)


def test_a_name_that_maps_to_another_process_at_stop_counts_that_process_from_its_start():
    window = CpuWindow()
    window.start({"node": __import__("os").getpid()})
    burn(0.3)
    child = subprocess.run([sys.executable, "-c", "pass"], check=True)  # gone by stop(): left out
    assert child.returncode == 0
    load = window.stop({"node": 2**22 + 54321})  # no such process
    assert load is not None and load.by_process_pct == {}


def test_lines_others_and_the_note_on_a_saturated_machine():
    load = CpuLoad(window_s=20.0, cores=2, machine_busy_pct=94.0, by_process_pct={"cameras": 48.0, "policy": 30.0})
    assert load.others_pct == pytest.approx(188.0 - 78.0)
    assert load.saturated and SATURATED_PCT <= 94.0
    first, by_process = load.lines()
    assert first == "CPU over 20 s: machine 94 % busy (2 cores); this graph 78 % of one core, other processes 110 %"
    stolen = CpuLoad(
        window_s=20.0,
        cores=2,
        machine_busy_pct=94.0,
        by_process_pct={"cameras": 48.0},
        steal_pct=15.0,
        top_others=[("python (812)", 41.0), ("rviz2 (90)", 9.0)],
    )
    assert stolen.lines()[0].endswith("other processes 140 % (hypervisor steal 30, python (812) 41, rviz2 (90) 9)")
    assert stolen.as_dict()["top_others"][0] == {"process": "python (812)", "pct": 41.0}
    assert by_process == "    by process (% of one core): cameras 48, policy 30"
    assert "94 % busy" in load.note(held=True, rates_nominal=True)
    assert "94 % busy" in load.note(held=False, rates_nominal=False)
    assert load.note(held=False, rates_nominal=True) == ""  # nothing went wrong: nothing to explain
    idle = CpuLoad(window_s=20.0, cores=2, machine_busy_pct=40.0, by_process_pct={"cameras": 48.0})
    assert not idle.saturated and idle.note(held=True, rates_nominal=False) == ""
    assert load.as_dict()["others_pct"] == load.others_pct
