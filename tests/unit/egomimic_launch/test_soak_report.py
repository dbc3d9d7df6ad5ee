"""The soak's report lines one stream's worst publication gap up with the others': every stream
silent at once is the machine standing still, one alone is that producer's own stall."""

import importlib.util
from pathlib import Path

from egomimic_hw.description import ARMS, CAMERAS
from egomimic_nodes import topics

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("soak_tool", REPO / "tools" / "soak.py")
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)


def stream(topic: str, gap_s: float, end_s: float) -> dict:
    return {"topic": topic, "max_source_gap_s": gap_s, "max_source_gap_end_s": end_s}


ACTION = topics.POLICY_ACTION.resolve("eva")
LEFT_STATE, RIGHT_STATE = (topics.JOINT_STATES.resolve("eva", arm=arm) for arm in ARMS)
HEAD_IMAGE = topics.IMAGE_RAW.resolve("eva", cam=CAMERAS[0])


def test_gaps_at_the_same_time_are_named_and_others_are_not():
    action = stream(ACTION, 0.085, 1000.0)
    streams = [
        action,
        stream(LEFT_STATE, 0.067, 999.99),  # overlaps
        stream(HEAD_IMAGE, 0.078, 1000.05),  # began before the action's gap ended
        stream(RIGHT_STATE, 0.02, 500.0),  # long before
    ]
    line = soak.coinciding_gaps(action, streams)
    assert "overlaps the worst gap of 2 of the 3 other streams" in line
    assert f"{LEFT_STATE} 67 ms" in line and f"{HEAD_IMAGE} 78 ms" in line
    assert RIGHT_STATE not in line


def test_no_timing_is_said_plainly():
    assert "no gap timing" in soak.coinciding_gaps({"topic": ACTION}, [])


def test_a_machine_stall_under_the_action_gap_is_counted():
    action = stream(ACTION, 0.085, 1000.0)
    stalls = {
        "priority": "SCHED_FIFO 90",
        "late_ms": 20.0,
        "stalls": [[999.95, 0.06], [1000.2, 0.03], [400.0, 0.09]],  # (end, late): only the first overlaps
        "worst_s": 0.09,
        "steal_s": 1.25,
        "duration_s": 600.0,
    }
    line = soak.machine_stalls(action, stalls)
    assert "3 wake-up(s) over 20 ms late, the worst 90 ms" in line and "stole" in line and "1.25 s" in line
    assert line.endswith("overlaps 1 of them (60 ms)")
    assert "overlaps 0 of them" in soak.machine_stalls(action, {**stalls, "stalls": [[1000.2, 0.03]]})
    assert "wrote nothing" in soak.machine_stalls(action, None)


def test_the_probe_reports_a_stall_it_was_made_to_see():
    """stall_probe's own measure: a tick it could not take for 50 ms is a stall of about 50 ms."""
    import time

    spec = importlib.util.spec_from_file_location("stall_probe", REPO / "tools" / "stall_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    stop, slept = [False], []

    def sleep(s):  # the 20th tick oversleeps by 50 ms; the probe stops after the 40th
        slept.append(s)
        time.sleep(s + (0.05 if len(slept) == 20 else 0.0))
        if len(slept) >= 40:
            stop[0] = True

    result = probe.probe(0.02, stop, sleep=sleep)
    assert result["wakeups"] == 40 and len(result["stalls"]) >= 1
    assert any(0.045 <= late for _, late in result["stalls"]) and result["worst_s"] >= 0.045


def test_a_cpu_taken_away_under_the_action_gap_is_named():
    """The FIFO probe may run on time on one CPU while the host took the other away: the burst
    of stolen time on that CPU is what overlaps the gap."""
    action = stream(ACTION, 0.085, 1000.0)
    stalls = {
        "priority": "SCHED_FIFO 90",
        "late_ms": 20.0,
        "stalls": [],
        "worst_s": 0.006,
        "steal_s": 3.5,
        # (read, cpu, stolen, previous read): the first overlaps, read 10 ms after the gap ended
        "steal_bursts": [[1000.01, 1, 0.08, 1000.0], [700.0, 0, 0.03, 699.99]],
        "duration_s": 600.0,
    }
    line = soak.machine_stalls(action, stalls)
    assert "overlaps 0 of them" in line
    assert "over 20 ms: 2 time(s), the longest 80 ms; under the action stream's worst gap: 1 (cpu1 80 ms)" in line
    assert "under the action stream's worst gap: 0" in soak.machine_stalls(
        action, {**stalls, "steal_bursts": [[700.0, 0, 0.03, 699.99]]}
    )
    assert "taken away" not in soak.machine_stalls(action, {k: v for k, v in stalls.items() if k != "steal_bursts"})


def test_the_probe_reports_a_cpu_taken_away_between_two_readings(tmp_path):
    """steal_by_cpu reads the cpuN lines; probe keeps a CPU's jump over late_s between readings."""
    spec = importlib.util.spec_from_file_location("stall_probe", REPO / "tools" / "stall_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    stat = tmp_path / "stat"
    # cpu1 offline: the lines are cpu0 and cpu2
    stat.write_text("cpu  10 0 10 10 0 0 0 300 0 0\ncpu0 5 0 5 5 0 0 0 100 0 0\ncpu2 5 0 5 5 0 0 0 200 0 0\n")
    import os

    assert probe.steal_by_cpu(stat) == {0: 100 / os.sysconf("SC_CLK_TCK"), 2: 200 / os.sysconf("SC_CLK_TCK")}
    readings = iter([{0: 1.0, 2: 2.0}, {0: 1.005, 2: 2.0}, {0: 1.005, 2: 2.09}, {0: 1.01, 2: 2.09}])
    stop, ticks = [False], []

    def sleep(_s):
        ticks.append(1)
        if len(ticks) >= 3 * probe.STEAL_EVERY_TICKS:
            stop[0] = True

    result = probe.probe(0.02, stop, sleep=sleep, read_steal=lambda: next(readings))
    assert [(cpu, stolen) for _, cpu, stolen, _ in result["steal_bursts"]] == [(2, 0.09)]
