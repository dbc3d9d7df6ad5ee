"""The console's textual App: renders a model Snapshot a few times a second and maps keys to the
link's calls. It knows the graph only through a backend (link.GraphLink, or a stand-in in the
unit tests): `snapshot()`, `trigger(action)` and `set_task_name(name)`.

Calls run in worker threads, so a slow or absent service never freezes the screen, and the
e-stop key is answered at once, without a confirmation (the gate latches it; `r` resets).
"""

from __future__ import annotations

import math
from typing import Protocol

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Footer, Header, Input, Label, Static

from egomimic_launch.operator.model import Snapshot

REFRESH_S = 0.25
STALE_AGE_S = 0.5
"""A stream whose newest sample is older than this is shown as stale (red)."""
GATE_STYLES = {
    "DISARMED": "bold black on yellow",
    "ARMING": "bold black on cyan",
    "ARMED": "bold white on green",
    "HOLD": "bold white on dark_orange",
    "ESTOP": "bold white on red",
}


class Backend(Protocol):
    def snapshot(self) -> Snapshot: ...

    def trigger(self, action: str) -> tuple[bool, str]: ...

    def set_task_name(self, task_name: str) -> tuple[bool, str]: ...


class TaskNameScreen(ModalScreen[str | None]):
    """Asks for the task name of the episode to start: Enter starts, Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    TaskNameScreen { align: center middle; }
    TaskNameScreen > Vertical { width: 60; height: auto; border: thick $accent; padding: 1 2; background: $surface; }
    """

    def __init__(self, task_name: str):
        super().__init__()
        self.task_name = task_name

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(
                "Task name of the new episode (Enter: start recording, Escape: cancel)\n"
                "Ctrl+E: E-STOP (works here too; 'e' types an e)"
            )
            yield Input(value=self.task_name, placeholder="task name", id="task-name")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def _age(age_s: float | None) -> str:
    return "never" if age_s is None else f"{age_s * 1e3:.0f} ms" if age_s < 10 else f"{age_s:.0f} s"


def gate_text(snap: Snapshot) -> Text:
    if snap.gate is None:
        return Text("GATE  no status (is the graph running in this namespace and domain?)", style="bold")
    g = snap.gate
    out = Text("GATE ", style="bold")
    out.append(f" {g.state} ", style=GATE_STYLES.get(g.state, "bold reverse"))
    out.append(f"\nlast reason: {g.reason or '-'}\n{g.detail}\nforwarded {g.forwarded}  rejected {g.rejected}")
    return out


def streams_table(snap: Snapshot) -> Table:
    table = Table(title="streams", expand=True, title_justify="left")
    table.add_column("topic")
    table.add_column("Hz", justify="right")
    table.add_column("nominal", justify="right")
    table.add_column("age", justify="right")
    for row in snap.streams:
        stale = row.age_s is None or row.age_s > STALE_AGE_S
        nominal = f"{row.nominal_hz:.0f}" if row.nominal_hz else "-"
        table.add_row(row.label, f"{row.rate_hz:.1f}", nominal, _age(row.age_s), style="red" if stale else None)
    return table


def policy_text(snap: Snapshot) -> Text:
    p = snap.policy
    if p is None:
        return Text("POLICY  no diagnostics (policy:=none, or not up yet)")
    return Text(
        f"POLICY  {p.status}\nqueue {p.queue_rows} rows   inference p50 {p.latency_p50_ms} ms, "
        f"max {p.latency_max_ms} ms\n(diagnostics {_age(p.age_s)} old)"
    )


def recorder_text(snap: Snapshot) -> Text:
    r = snap.recorder
    if r is None:
        out = Text("RECORDER  not running (record:=true starts it)")
    else:
        out = Text(
            f"RECORDER  {r.state}   task {r.task_name!r}\n"
            f"episode {r.frames} steps ({r.episode_s:.1f} s), {r.frames_committed} committed, {r.dropped} dropped\n"
            f"{r.episode_path or '-'}\n{r.detail}"
        )
    disk = snap.disk
    if disk is None:
        out.append("\ndisk free: unknown (no recorder status; --record-dir names the directory)")
    elif math.isfinite(disk.free_mb):
        out.append(f"\ndisk free: {disk.free_mb / 1e3:.1f} GB ({disk.source})")
    return out


class OperatorApp(App[None]):
    TITLE = "EVA operator"
    CSS = """
    #left { width: 1fr; }
    #right { width: 1fr; }
    #gate, #policy, #recorder { border: round $primary; padding: 0 1; height: auto; }
    #last { height: auto; padding: 0 1; }
    """
    BINDINGS = [
        Binding("a", "call('arm')", "Arm"),
        Binding("d", "call('disarm')", "Disarm"),
        Binding("e", "call('estop')", "E-STOP"),
        # the same, whatever has focus: the task-name prompt takes letters, not this
        Binding("ctrl+e", "call('estop')", "E-STOP (anywhere)", priority=True),
        Binding("r", "call('reset')", "Reset"),
        Binding("s", "record_start", "Record"),
        Binding("x", "call('record_stop')", "Stop rec"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, backend: Backend, refresh_s: float = REFRESH_S):
        super().__init__()
        self.backend = backend
        self.refresh_s = refresh_s
        self.snap: Snapshot | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with Vertical(id="left"):
                yield Static(id="gate")
                yield Static(id="policy")
                yield Static(id="recorder")
                yield Static(
                    "keys: a arm, d disarm, e or Ctrl+E E-STOP (no confirmation), r reset, s/x record", id="last"
                )
            with Vertical(id="right"):
                yield Static(id="streams")
        yield Footer()

    def on_mount(self) -> None:
        self.main_screen = self.screen  # the prompt is a screen above it: query the panels here
        snap = self.backend.snapshot()
        self.sub_title = f"/{snap.namespace.strip('/')}"
        self.render_snapshot(snap)
        self.set_interval(self.refresh_s, lambda: self.render_snapshot(self.backend.snapshot()))

    def render_snapshot(self, snap: Snapshot) -> None:
        self.snap = snap
        try:
            panels = [
                self.main_screen.query_one(f"#{name}", Static) for name in ("gate", "policy", "recorder", "streams")
            ]
        except NoMatches:
            return  # the panels are being removed: the refresh timer can fire while the app exits (seen under load)
        for panel, text in zip(panels, (gate_text, policy_text, recorder_text, streams_table), strict=True):
            panel.update(text(snap))

    def action_call(self, action: str) -> None:
        self.run_worker(lambda: self._report(action, self.backend.trigger(action)), thread=True)

    def action_record_start(self) -> None:
        current = self.snap.recorder.task_name if self.snap is not None and self.snap.recorder is not None else ""
        self.push_screen(TaskNameScreen(current), self._start_recording)

    def _start_recording(self, task_name: str | None) -> None:
        if task_name is None:
            self._show("record: cancelled", ok=True)
            return

        def work() -> None:
            ok, why = self.backend.set_task_name(task_name)
            if not ok:
                self._report("record_start", (False, f"task_name not set: {why}"))
                return
            self._report("record_start", self.backend.trigger("record_start"))

        self.run_worker(work, thread=True)

    def _report(self, action: str, result: tuple[bool, str]) -> None:
        """From a worker thread: show the outcome of a call."""
        ok, message = result
        self.call_from_thread(self._show, f"{action}: {'ok' if ok else 'REFUSED'} {message}".rstrip(), ok)

    def _show(self, line: str, ok: bool) -> None:
        self.main_screen.query_one("#last", Static).update(Text(line, style="" if ok else "bold red"))
