"""Progress lines while the graph runs and the summary table at the end (`--summary`).

The verdict answers "did the loop run?": every camera and joint-state stream within 5 % of its
nominal rate, policy/action at 30 Hz, joint commands applied by both drivers, and each arm's
measured path following the commanded one (RMS error under 10 % of the commanded motion). With
record:=true, also: the recorder committed an episode (its path, frames and drops are listed).

Each check is of a kind: REQUIRED (the verdict), RATE (a measurement of this machine: a WARN, not
the verdict) or OUTCOME (what a learned policy achieved on the box task: reported as PASS or MISS,
not the verdict, since a miss is the policy's skill, not the loop's function; the scripted expert's
grasp is REQUIRED).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from egomimic_data.recording import RecorderState
from egomimic_hw.description import ARMS, CAMERAS
from egomimic_launch.machine_load import CpuLoad, CpuWindow
from egomimic_launch.observer import HOLD_LOOK_BACK_S, TRACK_KEEP_S, GraphObserver
from egomimic_launch.stats import tracking_stats
from egomimic_nodes import topics
from egomimic_safety.gate import GateState

GATE_STATES = {int(s): s.name for s in GateState}
"""GateStatus.state -> its name (GateState: tested equal to the message's constants)."""
RECORDER_STATES = {int(s): s.name for s in RecorderState}
RATE_TOLERANCE = 0.05
TRACKING_MAX_FRACTION = 0.10
REQUIRED, RATE, OUTCOME = "required", "rate", "outcome"
"""Check kinds (module docstring)."""
SETTLE_S = 2.0
"""Start-up transients (first discovery, arming) are excluded from the rate window."""
MAX_TRANSITIONS_SHOWN = 8
"""Gate state changes listed with their detail (a fault's cause is in the detail it entered with)."""


def learned_policy(policy: str | None) -> bool:
    """Whether the launch argument `policy` names a model (a family, a checkpoint, a server): its
    task outcome is an OUTCOME check, not the verdict."""
    return (policy or "").strip() not in ("", "none", "scripted", "expert")


def judge(checks: list[tuple[str, bool, str]]) -> tuple[list[str], bool, bool]:
    """The checks' lines, the verdict (every REQUIRED check passed) and whether every RATE check
    passed; an OUTCOME check is printed (PASS or MISS) and judges nothing."""
    lines = [
        f"  [{'PASS' if ok else {RATE: 'WARN', OUTCOME: 'MISS'}.get(kind, 'FAIL')}] {name}" for name, ok, kind in checks
    ]
    verdict = all(ok for _, ok, kind in checks if kind == REQUIRED)
    rates_nominal = all(ok for _, ok, kind in checks if kind == RATE)
    return lines, verdict, rates_nominal


def gate_lines(gs, gate_d: dict[str, str], gate_dead: bool) -> list[str]:
    """The summary's gate lines: its last status (GateStatus, None if none came), and from its
    /diagnostics values `gate_d` the commands it deferred, when it deferred any."""
    if gs is None:
        return ["safety gate: no status received"]
    codes = ", ".join(f"{c}={n}" for c, n in zip(gs.reason_codes, gs.reason_counts)) or "none"
    label = "last status before the gate process died" if gate_dead else "final state"
    lines = [
        f"safety gate: {label} {GATE_STATES.get(gs.state, gs.state)}; forwarded {gs.forwarded}, "
        f"rejected {gs.rejected}, clamped {gs.clamped}; reasons: {codes}",
        f"             last detail: {gs.detail}",
    ]
    if gate_d.get("deferred", "0") != "0":
        lines.append(
            f"             deferred {gate_d['deferred']} (an input a little late: not forwarded, no fault); "
            f"{gate_d.get('deferral_runs', '?')} runs ended in a forward, the longest "
            f"{gate_d.get('deferral_run_max_ms', '?')} ms; the last: {gate_d.get('last_deferral') or '?'}"
        )
    return lines


def hold_look_back_lines(o) -> list[str]:
    """The summary's look at the second before the gate's first HOLD (observer.hold_look_back):
    per watched stream, the longest silence and the latest write, by the writers' clocks."""
    if o.first_hold_s is None:
        return []
    with o.lock:
        o.look_back_at_hold(final=True)
    if o.before_hold is None:
        return ["the second before the first HOLD: not seen (the observer polled too late)"]
    lines = [
        f"the {HOLD_LOOK_BACK_S:.0f} s before the first HOLD, by each writer's clock (DDS source times): "
        "messages, longest silence, latest write after the header stamp"
    ]
    for name, m in o.before_hold.items():
        late = f"{m.write_latency_max_s * 1e3:6.1f} ms" if m.count else "     -   "
        lines.append(f"    {name:<42} {m.count:4d}  silent {m.max_gap_s * 1e3:6.1f} ms  written {late}")
    return lines


class RunMonitor:
    def __init__(
        self,
        node,
        namespace: str,
        scripted: bool = True,
        expect_armed: bool = True,
        expect_episode: bool = False,
        task_seed: int = -1,
        expect_task: bool = False,
        learned: bool = False,
    ):
        """scripted: the policy is the scripted motion, so the measured path must follow the
        commanded one closely (a checked criterion); other policies get the tracking table only.
        expect_armed: auto_arm with a policy: the gate must arm and never hold during the run.
        expect_episode: record:=true: the recorder must commit an episode with frames in it.
        task_seed: the simulated box task's seed (-1: none); its success is reported, and is a
        checked criterion with expect_task (the scripted expert must solve it).
        learned: the policy is a model (a checkpoint or a server): its task outcome is an OUTCOME check."""
        self.scripted = scripted
        self.expect_armed = expect_armed
        self.expect_episode = expect_episode
        self.task_seed = int(task_seed)
        self.expect_task = expect_task and self.task_seed >= 0
        self.learned = learned
        self.ns = "/" + namespace.strip("/")
        task = None
        if self.task_seed >= 0:
            from egomimic_hw.sim_task import TaskSuccess, place_target

            task = TaskSuccess(place_target(self.task_seed))
        self.obs = GraphObserver(node, namespace, task=task)
        self.t_begin = self.t_end = None
        self._next_progress = 0.0
        self._cpu = CpuWindow()
        self._pids = None
        self.cpu: CpuLoad | None = None
        """The machine's and each process's CPU over the rate window (machine_load)."""

    def begin(self, t_up: float, pids=None) -> None:
        """pids: a callable returning {name: pid} of the graph's processes and the launcher, for
        the CPU line (measured over the same window as the rates: from SETTLE_S after t_up)."""
        self.t_begin = t_up + SETTLE_S
        self.obs.set_window(self.t_begin)
        self._pids = pids

    def _start_cpu_window(self) -> None:
        if self._pids is not None and not self._cpu.started and time.time() >= (self.t_begin or 0.0):
            self._cpu.start(self._pids())

    def end(self, t: float) -> None:
        self.obs.poll()
        self.t_end = t
        self.obs.end_window(t)
        if self._cpu.started:
            self.cpu = self._cpu.stop(self._pids())

    def first_armed(self) -> float | None:
        """Wall time (s) the gate was first seen ARMED in this run, or None."""
        with self.obs.lock:
            return next((t for t, state, _ in self.obs.gate_history if state == GateState.ARMED), None)

    def progress(self) -> None:
        """Called about every 0.1 s: account the samples, print a line every 2 s."""
        self.obs.poll()
        self._start_cpu_window()
        now = time.monotonic()
        if now < self._next_progress:
            return
        self._next_progress = now + 2.0
        o = self.obs
        cams = " ".join(f"{o.recent_rate(topics.CAMERA_INFO.resolve(self.ns, cam=c)):4.1f}" for c in CAMERAS)
        joints = " ".join(f"{o.recent_rate(topics.JOINT_STATES.resolve(self.ns, arm=a)):5.1f}" for a in ARMS)
        cmds = " ".join(f"{o.recent_rate(topics.JOINT_COMMAND.resolve(self.ns, arm=a)):4.1f}" for a in ARMS)
        gate = GATE_STATES.get(o.gate_status.state, "?") if o.gate_status else "no status"
        print(
            f"[run] cameras {cams} Hz | joint_states {joints} Hz | policy/action "
            f"{o.recent_rate(topics.POLICY_ACTION.resolve(self.ns)):4.1f} Hz | joint_command {cmds} Hz | gate {gate}",
            flush=True,
        )

    def report(self, launcher, run_dir: Path, json_path: Path | None) -> bool:
        o = self.obs
        o.poll()
        streams = [acc.stats() for acc in o.streams.values()]
        tracks = [tracking_stats(a, *o.cmd_path[a], *o.meas_path[a]) for a in (arm.value for arm in ARMS)]
        gs = o.gate_status
        checks = []  # (what, ok, kind): REQUIRED, RATE or OUTCOME (module docstring)
        for s in streams:
            if o.topic_of[s.topic] in (topics.CAMERA_INFO, topics.JOINT_STATES, topics.POLICY_ACTION):
                checks.append((f"{s.topic} at {s.nominal_hz:.0f} Hz (+-5 %)", s.rate_error <= RATE_TOLERANCE, RATE))
        for arm in (a.value for a in ARMS):
            applied = int(o.driver_diag.get(arm, {}).get("commands_applied", "0"))
            checks.append((f"joint commands applied by driver_{arm} ({applied})", applied > 0, REQUIRED))
        if self.expect_armed:
            seen = [state for _, state, _ in o.gate_history]
            held = [GATE_STATES.get(s, s) for s in seen if s in (3, 4)]
            checks.append(
                (
                    "safety gate armed and never held" + (f" (saw {held[0]})" if held else ""),
                    2 in seen and not held,
                    REQUIRED,
                )
            )
        rs = o.recorder_status
        if self.expect_episode:
            committed = rs.frames_committed if rs is not None and rs.state != 1 else 0
            checks.append((f"recorder committed an episode ({committed} frames)", committed > 0, REQUIRED))
        for t in tracks if self.scripted else ():  # only the scripted policy has a known smooth path
            ok = (
                t.samples > 0
                and t.commanded_span_m > 0.01
                and t.rms_error_m <= TRACKING_MAX_FRACTION * t.commanded_span_m
            )
            checks.append((f"{t.arm} EE follows the scripted motion", ok, REQUIRED))
        lines = [
            "",
            "=" * 96,
            "EVA run summary",
            "=" * 96,
            f"{'topic':<40}{'nominal':>8}{'rate Hz':>9}{'msgs':>7}{'lat p50':>8}{'lat p99':>8}{'gap':>8}{'pub gap':>8}",
            f"{'':<40}{'':>8}{'':>9}{'':>7}{'ms':>8}{'ms':>8}{'ms':>8}{'ms':>8}",
        ]
        for s in streams:
            lines.append(
                f"{s.topic:<40}{s.nominal_hz:>8.1f}{s.rate_hz:>9.2f}{s.count:>7d}{s.latency_p50_ms:>8.1f}"
                f"{s.latency_p99_ms:>8.1f}{s.max_gap_s * 1e3:>8.0f}{s.max_source_gap_s * 1e3:>8.0f}"
                + (f"   {s.missed} published, never received here" if s.missed else "")
            )
        lines.append(
            "(gap: the longest time between two arrivals here; pub gap: between two publications, by the "
            "writer's DDS source timestamps and sequence numbers)"
        )
        lines.append("-" * 96)
        lines.append(
            f"{f'tracking (last {TRACK_KEEP_S:.0f} s)':<28}{'commanded span mm':>20}{'RMS error mm':>15}{'lag s':>8}{'samples':>9}"
        )
        for t in tracks:
            lines.append(
                f"{t.arm:<28}{t.commanded_span_m * 1e3:>20.1f}{t.rms_error_m * 1e3:>15.2f}{t.lag_s:>8.2f}{t.samples:>9d}"
            )
        task = o.task
        if task is not None:
            from egomimic_hw.sim_task import TASK_NAME

            left, right = (task.errors_m[a] * 1e3 for a in ARMS)
            if task.succeeded:
                after = (o.task_success_s or 0.0) - (o.task_first_action_s or 0.0)
                outcome = f"SUCCESS at control step {task.success_step} ({after:.1f} s after the first action)"
            else:
                outcome = f"not reached in {task.steps} control steps"
            lines.append(
                f"task {TASK_NAME} seed {task.target.seed}: {outcome}; last distance to the grasp points "
                f"left {left:.1f} mm, right {right:.1f} mm (tolerance {task.tolerance_m * 1e3:.0f} mm)"
            )
            if self.expect_task:
                checks.append((f"the expert grasps the box (seed {self.task_seed})", task.succeeded, REQUIRED))
            elif self.learned:
                checks.append((f"the policy grasps the box (seed {self.task_seed})", task.succeeded, OUTCOME))
        lines.append("-" * 96)
        gate_d = o.node_diag.get("safety_gate", {})
        gate_dead = bool(launcher.dead_node and launcher.dead_node[0] == "safety_gate")
        lines += gate_lines(gs, gate_d, gate_dead)
        for arm in (a.value for a in ARMS):
            d = o.driver_diag.get(arm, {})
            lines.append(
                f"driver_{arm}: applied {d.get('commands_applied', '?')}, refused {d.get('commands_refused', '?')}, "
                f"watchdog holds {d.get('watchdog_holds', '?')}, command writers matched {d.get('command_writers_max', '?')} (most seen); "
                f"{d.get('message', 'no diagnostics')}"
            )
        policy_d = o.node_diag.get("policy", {})
        lines.append(
            f"late wake-ups (their logs say how late and the CPU used meanwhile): gate watchdog "
            f"{gate_d.get('watchdog_late', '?')} (worst {gate_d.get('watchdog_late_max_ms', '?')} ms), "
            f"policy ticks {policy_d.get('late_ticks', '?')}"
        )
        if policy_d:
            lines.append(
                f"policy: {policy_d.get('queries', '?')} queries, {policy_d.get('chunks', '?')} chunks, "
                f"{policy_d.get('speed_limited', '?')} targets held to the executor's speed limits, "
                f"{policy_d.get('dry_ticks', '?')} dry ticks"
            )
        if self.cpu is not None:
            lines += self.cpu.lines()
        if rs is not None:
            lines.append(
                f"recorder: {RECORDER_STATES.get(rs.state, rs.state)}; episode {rs.episode_path or 'none'}: "
                f"{rs.frames_committed} frames committed, camera frames dropped {rs.dropped}, steps skipped "
                f"{rs.skipped}; {rs.detail}"
            )
        elif self.expect_episode:
            lines.append("recorder: no status received")
        transitions = " -> ".join(GATE_STATES.get(s, str(s)) for _, s, _ in o.gate_history) or "none"
        lines.append(f"gate states seen: {transitions}")
        for _, state, detail in o.gate_history[
            1 : MAX_TRANSITIONS_SHOWN + 1
        ]:  # why each change (the first is start-up)
            lines.append(f"    -> {GATE_STATES.get(state, str(state))}: {detail}")
        lines += hold_look_back_lines(o)
        if launcher.dead_node:
            name, code = launcher.dead_node
            lines.append(f"SAFE STOP: required node {name} exited with code {code}; {launcher.safe_stop_detail}")
            holds = [t for t, state, _ in o.gate_history if state in (3, 4) and t >= (launcher.dead_at_wall or 0) - 1.0]
            if holds and launcher.dead_at_wall:
                lines.append(
                    f"           gate in HOLD/ESTOP {max(holds[0] - launcher.dead_at_wall, 0.0) * 1e3:.0f} ms after the "
                    "launcher saw the exit (the gate may have held on its own before that)"
                )
        lines.append(f"stopped because: {launcher.stop_reason}")
        if getattr(launcher, "shm_note", ""):
            lines.append(f"shared memory at start: {launcher.shm_note}")
        removed = getattr(launcher, "removed_ports", {})
        if removed:  # a listener there hears no writer that opened the port after the removal
            shown = "; ".join(f"{name}: {', '.join(ports)}" for name, ports in removed.items())
            lines.append(f"shared memory: removed ports mapped during the run by {shown}")
        from egomimic_launch.dds_log import describe, middleware_warnings

        dds = middleware_warnings(Path(run_dir) / "logs")
        if dds:
            lines.append(f"Fast DDS warnings (node logs): {describe(dds)}")
        lines.append(f"logs and params: {run_dir}")
        lines.append("-" * 96)
        check_lines, verdict, rates_nominal = judge(checks)
        lines += check_lines
        if not rates_nominal:
            lines.append(
                "  WARN: a stream ran below its nominal rate on this machine (a loaded or slow machine; "
                "the loop's function is judged by the other checks; CPU per node: bench/graph_cpu.py)"
            )
        held = any(state == GateState.HOLD for _, state, _ in o.gate_history)  # not ESTOP: a request or a dead node
        note = self.cpu.note(held, rates_nominal) if self.cpu is not None else ""
        if note:
            lines.append(f"  NOTE: {note}")
        lines.append(f"loop verdict: {'RAN' if verdict else 'DID NOT RUN AS EXPECTED'}")
        lines.append("=" * 96)
        print("\n".join(lines), flush=True)
        if json_path:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(
                json.dumps(
                    {
                        "streams": [vars(s) for s in streams],
                        "tracking": [vars(t) for t in tracks],
                        "gate": None
                        if gs is None
                        else {
                            "state": GATE_STATES.get(gs.state),
                            "forwarded": gs.forwarded,
                            "rejected": gs.rejected,
                            "clamped": gs.clamped,
                            "reason": gs.reason,
                            "reasons": dict(zip(gs.reason_codes, map(int, gs.reason_counts))),
                            "deferred": int(gate_d.get("deferred", 0)),
                            "last_deferral": gate_d.get("last_deferral", ""),
                        },
                        "drivers": o.driver_diag,
                        "cpu": None if self.cpu is None else self.cpu.as_dict(),
                        "task": None
                        if o.task is None
                        else {
                            "seed": o.task.target.seed,
                            "succeeded": o.task.succeeded,
                            "success_step": o.task.success_step,
                            "steps": o.task.steps,
                            "errors_m": {a.value: o.task.errors_m[a] for a in ARMS},
                        },
                        "recorder": None
                        if rs is None
                        else {
                            "state": RECORDER_STATES.get(rs.state),
                            "episode_path": rs.episode_path,
                            "frames": rs.frames,
                            "frames_committed": rs.frames_committed,
                            "dropped": rs.dropped,
                            "skipped": rs.skipped,
                            "detail": rs.detail,
                        },
                        "before_first_hold": None
                        if o.before_hold is None
                        else {name: vars(m) for name, m in o.before_hold.items()},
                        "gate_states_seen": [GATE_STATES.get(s, s) for _, s, _ in o.gate_history],
                        "dead_node": launcher.dead_node,
                        "safe_stop": launcher.safe_stop_detail,
                        "dead_at_wall": launcher.dead_at_wall,
                        "gate_history": [(t, GATE_STATES.get(s, s)) for t, s, _ in o.gate_history],
                        "stop_reason": launcher.stop_reason,
                        "checks": [
                            {"check": n, "ok": ok, "kind": kind, "timing": kind == RATE} for n, ok, kind in checks
                        ],
                        "loop_ran": verdict,
                        "rates_nominal": rates_nominal,
                        "run_dir": str(run_dir),
                    },
                    indent=2,
                    default=str,
                )
            )
        return verdict
