"""egomimic-operator without DDS: the snapshot model fed by hand with explicit times, and the
textual app (headless pilot) against a stand-in backend: what it shows, which key calls what."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from textual.widgets import Input, Static

from egomimic_hw.description import ARMS, CAMERAS
from egomimic_launch.operator import main
from egomimic_launch.operator.app import OperatorApp
from egomimic_launch.operator.model import POLICY_DIAGNOSTIC, RATE_WINDOW_S, OperatorModel, Snapshot, console_streams
from egomimic_msgs.msg import GateStatus, RecorderStatus
from egomimic_nodes import topics
from egomimic_nodes.diagnostics import qualified_name

NS = "eva"
JS = topics.JOINT_STATES.name(arm=ARMS[0])


def test_table_lists_every_arm_and_camera_stream():
    expected = [topics.JOINT_STATES.name(arm=a) for a in ARMS] + [topics.EE_POSE.name(arm=a) for a in ARMS]
    expected += [topics.CAMERA_INFO.name(cam=c) for c in CAMERAS]
    expected += [topics.POLICY_ACTION.name(), topics.COMMAND_PROPOSED.name()]
    streams = console_streams(NS)
    assert [label for label, _name, _topic in streams] == expected
    assert all(name == f"/{NS}/{label}" for label, name, _topic in streams)


def test_rates_and_ages_from_fed_samples():
    model = OperatorModel(NS)
    for k in range(300):  # 100 Hz for 3 s
        model.add_sample(JS, 1000.0 + k * 0.01)
    snap = model.snapshot(1003.0)
    row = {r.label: r for r in snap.streams}[JS]
    assert row.rate_hz == pytest.approx(100.0, abs=1.0)
    assert row.nominal_hz == topics.STATE_RATE_HZ
    assert row.age_s == pytest.approx(0.01)
    later = model.snapshot(1003.0 + RATE_WINDOW_S)  # silent for a whole window
    row = {r.label: r for r in later.streams}[JS]
    assert row.rate_hz == 0.0 and row.age_s == pytest.approx(0.01 + RATE_WINDOW_S)
    never = {r.label: r for r in snap.streams}[topics.POLICY_ACTION.name()]
    assert never.age_s is None and never.rate_hz == 0.0


def test_gate_recorder_policy_and_disk_fields():
    model = OperatorModel(NS, record_dir=Path("/somewhere"), disk_free_mb=lambda _p: 1234.0)
    empty = model.snapshot(10.0)
    assert empty.gate is None and empty.recorder is None and empty.policy is None
    assert empty.disk is not None and empty.disk.free_mb == 1234.0 and empty.disk.source == "/somewhere"

    model.on_gate(
        GateStatus(state=GateStatus.HOLD, reason="STALE_STATE", detail="no fresh state", forwarded=5, rejected=2), 10.0
    )
    rec = RecorderStatus(state=RecorderStatus.RECORDING, task_name="fold", frames=60, dropped=1, episode_path="e.zarr")
    rec.disk_free_mb = math.nan  # before the recorder's first check: the local directory's figure
    model.on_recorder(rec, 10.5)
    ours = DiagnosticStatus(
        name=qualified_name(NS, POLICY_DIAGNOSTIC),
        message="running",
        values=[KeyValue(key="status", value="running"), KeyValue(key="queue_rows", value="7")]
        + [KeyValue(key="latency_p50_ms", value="41.5"), KeyValue(key="latency_max_ms", value="80.0")],
    )
    other_robot = DiagnosticStatus(
        name=qualified_name("eva_b", POLICY_DIAGNOSTIC), values=[KeyValue(key="queue_rows", value="99")]
    )
    model.on_diagnostics(DiagnosticArray(status=[ours, other_robot]), 11.0)
    snap = model.snapshot(12.0)
    assert (snap.gate.state, snap.gate.reason, snap.gate.detail) == ("HOLD", "STALE_STATE", "no fresh state")
    assert (snap.gate.forwarded, snap.gate.rejected, snap.gate.age_s) == (5, 2, 2.0)
    assert (snap.recorder.state, snap.recorder.task_name, snap.recorder.frames) == ("RECORDING", "fold", 60)
    assert snap.recorder.episode_s == pytest.approx(2.0)  # 60 steps at the 30 Hz control rate
    assert (snap.policy.queue_rows, snap.policy.latency_p50_ms, snap.policy.latency_max_ms) == ("7", "41.5", "80.0")
    assert snap.disk.source == "/somewhere"

    rec.disk_free_mb = 5000.0
    model.on_recorder(rec, 12.0)
    assert model.snapshot(12.0).disk.free_mb == 5000.0 and model.snapshot(12.0).disk.source == "recorder"
    assert OperatorModel(NS).snapshot(0.0).disk is None, "no recorder figure and no --record-dir: unknown"


class StandIn:
    """A backend recording the calls; the gate state follows them like the gate would."""

    def __init__(self):
        self.model = OperatorModel(NS)
        self.calls: list[tuple[str, str]] = []
        self._gate(GateStatus.DISARMED)

    def _gate(self, state: int) -> None:
        self.model.on_gate(GateStatus(state=state), 0.0)

    def snapshot(self) -> Snapshot:
        return self.model.snapshot(0.0)

    def trigger(self, action: str) -> tuple[bool, str]:
        self.calls.append(("trigger", action))
        follows = {"arm": GateStatus.ARMED, "estop": GateStatus.ESTOP, "reset": GateStatus.DISARMED}
        if action in follows:
            self._gate(follows[action])
        return True, ""

    def set_task_name(self, task_name: str) -> tuple[bool, str]:
        self.calls.append(("task_name", task_name))
        return True, ""


def test_keys_call_the_services_and_the_screen_follows():
    backend = StandIn()

    async def drive() -> None:
        app = OperatorApp(backend, refresh_s=0.05)
        async with app.run_test(size=(120, 40)) as pilot:

            async def gate_shows(state: str) -> bool:
                for _ in range(40):
                    await pilot.pause(0.05)
                    if f" {state} " in str(app.main_screen.query_one("#gate", Static).content):
                        return True
                return False

            assert await gate_shows("DISARMED")
            await pilot.press("a")
            assert await gate_shows("ARMED")
            await pilot.press("e")
            assert await gate_shows("ESTOP")
            await pilot.press("r", "d", "x")
            await pilot.press("s")
            await pilot.pause(0.1)
            task = app.screen.query_one(Input)
            task.value = ""
            await pilot.press(*"fold_towel", "enter")
            for _ in range(40):
                await pilot.pause(0.05)
                if ("trigger", "record_start") in backend.calls:
                    break
            await pilot.press("s", "escape")  # cancelled: nothing called
            await pilot.pause(0.1)
            assert "cancelled" in str(app.main_screen.query_one("#last", Static).content)
            await pilot.press("r")
            assert await gate_shows("DISARMED")
            await pilot.press("s")  # the prompt is open, 'e' types; Ctrl+E still stops
            await pilot.pause(0.3)  # a few refreshes with the prompt open (they once crashed the app)
            await pilot.press("e", "ctrl+e")
            assert await gate_shows("ESTOP")
            assert app.screen.query_one(Input).value.endswith("e"), "'e' typed into the prompt"

    asyncio.run(drive())
    calls = backend.calls  # calls run in worker threads: keys pressed together may land in any order
    assert calls[:2] == [("trigger", "arm"), ("trigger", "estop")]
    assert sorted(calls[2:5]) == [("trigger", "disarm"), ("trigger", "record_stop"), ("trigger", "reset")]
    assert calls[5:7] == [("task_name", "fold_towel"), ("trigger", "record_start")]
    assert calls[7:] == [("trigger", "reset"), ("trigger", "estop")]


def test_help_says_losing_it_moves_nothing(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "holds no control path" in out and "changes nothing" in out and "--record-dir" in out


def test_the_refresh_timer_never_crashes_an_exit():
    """The refresh timer can fire while the app exits and its panels are being removed: a CI run
    under load raised NoMatches('#gate') out of the pilot. Many short runs with a fast refresh."""

    async def drive() -> None:
        for _ in range(25):
            app = OperatorApp(StandIn(), refresh_s=0.001)
            async with app.run_test(size=(120, 40)) as pilot:
                await pilot.pause(0.005)

    asyncio.run(drive())
