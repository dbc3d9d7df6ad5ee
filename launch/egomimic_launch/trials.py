"""Trials of the simulated box task in one running graph (`egomimic-launch ... --trials 100:120`).

Why in one graph: starting the graph costs ~15 s, a trial ~10 s; twenty trials per policy fit
in minutes only if the graph stays up and each trial resets what a new trial needs:

1. the gate is disarmed (from HOLD or ESTOP: reset), so the arms hold where they are;
2. both drivers drive their arms home (the simulated arm's start pose, `<arm>/home`), and the
   runner waits until both measured positions have come to rest there;
3. the cameras draw the box of the trial's seed (`task_seed`, a run-time parameter), and with
   `policy:=expert` the expert goes for the same box (`expert.task_seed`);
4. the policy is reset (`policy/reset`: queue and observation window cleared), so its first
   command answers the homed arm and the new images (again before each arming attempt that
   comes more than RESET_AGE_S after the new plan began: a plan that ran on while the arms
   waited is refused);
5. optionally an episode is opened (`recorder/start`, with `record:=true`);
6. the gate is armed; the trial runs until the task succeeds (egomimic_hw.sim_task.TaskSuccess,
   fed by the run monitor per policy action from the measured poses and grippers), the gate
   holds, or `timeout_s` passes; then the gate is disarmed and the episode committed.

Every trial is judged the same way whatever the policy: the gate's own state and counts, the
measured poses. A policy that the gate refuses to arm (its first command far from the arm)
fails its trial with the gate's reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

GATE_DISARMED, GATE_ARMING, GATE_ARMED, GATE_HOLD, GATE_ESTOP = 0, 1, 2, 3, 4
HOME_SETTLE_MM = 1.0
"""Both measured link6 positions moved less than this over HOME_SETTLE_S: the arms are home."""
HOME_SETTLE_S = 0.3
HOME_TIMEOUT_S = 12.0
"""A home move takes 1-10 s (driver: the farthest joint at 0.5 rad/s); past this the trial is not run."""
ARM_TIMEOUT_S = 5.0
FRESH_ACTION_TIMEOUT_S = 5.0
ACTION_SETTLE_S = 0.1
"""An action stamped this long after the reset: anything of the old plan is delivered by then."""
RESET_AGE_S = 0.5
"""Arm within this long of the policy's reset, or reset it again first (the plan runs on in time;
the expert's first 0.5 s move its target < 20 mm, inside the gate's 80 mm arming check)."""
SERVICE_TIMEOUT_S = 5.0
"""A loaded machine can keep a node's executor from answering for a while; a trial's set-up
calls wait this long (the launcher's own calls keep their shorter timeouts)."""
RECORD_START_TIMEOUT_S = 2.0
"""recorder/start is retried this long after arming, until the commanded joints are live."""
RECORDER_READY_TIMEOUT_S = 15.0
"""Before arming, how long the recorder may take to hear every other stream (discovery on a busy
machine; egomimic_nodes.graph_settle waits as long for the launcher's own view)."""
SUCCESS_MARGIN_S = 0.2
"""Keep running this long after success (the recorded episode shows the grasp held)."""


def parse_seeds(text: str) -> list[int]:
    """`a:b` (b excluded), or a comma list `3,5,9`."""
    text = text.strip()
    try:
        if ":" in text:
            a, b = (int(x) for x in text.split(":", 1))
            seeds = list(range(a, b))
        else:
            seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--trials {text!r}: expected a:b or a comma list of seeds") from None
    if not seeds or min(seeds) < 0:
        raise ValueError(f"--trials {text!r}: need at least one seed, all >= 0")
    return seeds


@dataclass
class TrialResult:
    seed: int
    success: bool
    outcome: str
    """success | hold: <gate detail> | timeout | not armed: <why> | not homed | aborted"""
    success_after_s: float | None = None
    """From the gate's ARMED to the latched success."""
    duration_s: float = 0.0
    final_errors_mm: dict[str, float] = field(default_factory=dict)
    forwarded: int = 0
    rejected: int = 0
    recorded: bool = False


@dataclass
class TrialsReport:
    policy: str
    trials: list[TrialResult]

    @property
    def successes(self) -> int:
        return sum(t.success for t in self.trials)

    def lines(self) -> list[str]:
        out = [f"[trials] policy {self.policy}: {self.successes}/{len(self.trials)} succeeded"]
        for t in self.trials:
            errs = " ".join(f"{a} {e:.1f}" for a, e in t.final_errors_mm.items())
            when = f" at {t.success_after_s:.1f} s" if t.success_after_s is not None else ""
            out.append(
                f"[trials]   seed {t.seed:4d}: {t.outcome}{when}; final error mm {errs or '-'}; "
                f"forwarded {t.forwarded}, rejected {t.rejected}"
            )
        return out

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "policy": self.policy,
            "successes": self.successes,
            "trials": len(self.trials),
            "success_rate": self.successes / len(self.trials) if self.trials else 0.0,
            "seeds": [t.seed for t in self.trials],
            "results": [asdict(t) for t in self.trials],
        }
        path.write_text(json.dumps(body, indent=1) + "\n")


class TrialRunner:
    """Runs the trials against a running graph through `client` (LauncherClient: services and
    parameters) and `observer` (the run monitor's GraphObserver: gate status, measured poses,
    the task's success). `stopped()` ends the series early (the launcher is stopping)."""

    def __init__(
        self,
        client,
        observer,
        namespace: str,
        seeds: Sequence[int],
        *,
        expert: bool,
        record: bool,
        timeout_s: float,
        stopped: Callable[[], bool],
        log: Callable[[str], None] = print,
    ):
        from egomimic_nodes import topics

        self.client, self.obs, self.ns = client, observer, "/" + namespace.strip("/")
        self.seeds = list(seeds)
        self.expert, self.record, self.timeout_s = expert, record, timeout_s
        self.stopped, self.log = stopped, log
        self.topics = topics
        self._reset_at = 0.0

    # -- one trial ---------------------------------------------------------------------------------
    def run(self, results: list[TrialResult] | None = None) -> list[TrialResult]:
        """Every seed in turn (appended to `results` as each ends); the gate is left disarmed."""
        results = [] if results is None else results
        for i, seed in enumerate(self.seeds):
            if self.stopped():
                break
            result = self.trial(seed)
            results.append(result)
            self.log(
                f"[trials] {i + 1}/{len(self.seeds)} seed {seed}: {result.outcome}"
                + (f" after {result.success_after_s:.1f} s" if result.success_after_s is not None else "")
            )
        self._disarm()
        return results

    def trial(self, seed: int) -> TrialResult:
        from egomimic_hw.description import ARMS
        from egomimic_hw.sim_task import TaskSuccess, place_target

        t = self.topics
        self._disarm()
        for arm in ARMS:
            ok, msg = self.client.trigger(t.ARM_HOME.resolve(self.ns, arm=arm), timeout_s=SERVICE_TIMEOUT_S)
            if not ok:
                return TrialResult(seed, False, f"not homed: {arm.value}: {msg}")
        if not self._wait_home():
            return TrialResult(seed, False, f"not homed: the arms did not come to rest within {HOME_TIMEOUT_S:.0f} s")
        for node, name in (("cameras", "task_seed"),) + ((("policy", "expert.task_seed"),) if self.expert else ()):
            ok, why = self.client.set_parameter(f"{self.ns}/{node}", name, int(seed), timeout_s=SERVICE_TIMEOUT_S)
            if not ok:
                return TrialResult(seed, False, f"not set up: {node} {name}: {why}")
        why = self._reset_policy()
        if why:
            return TrialResult(seed, False, f"not set up: {why}")
        task = TaskSuccess(place_target(seed))
        recording = [False]
        if self.record and not self._recorder_ready(seed, recording):
            self.log(f"[trials] seed {seed}: the recorder does not hear every stream yet; the trial runs unrecorded")
        try:
            return self._run_armed(seed, task, recording)
        finally:
            self._disarm()
            if recording[0]:
                ok, msg = self.client.trigger(t.RECORDER_STOP.resolve(self.ns), timeout_s=10.0)
                if not ok:
                    self.log(f"[trials] seed {seed}: recorder/stop: {msg}")

    def _run_armed(self, seed: int, task, recording: list[bool]) -> TrialResult:
        base = self._gate_counts()
        ok, msg = self._arm()
        if not ok:
            return TrialResult(seed, False, f"not armed: {msg}")
        with self.obs.lock:
            self.obs.task = task  # fed from here on, per policy action
            self.obs.task_first_action_s = self.obs.task_success_s = None
        t_armed = time.monotonic()
        if self.record and not recording[0]:
            # The recorder opens an episode only once every stream is live, the commanded joints
            # included, which flow only while the gate is armed: the episode starts here.
            recording[0] = self._start_recording(seed)
        recorded = recording[0]
        outcome, success_after = "timeout", None
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            with self.obs.lock:
                status = self.obs.gate_status
                done = task.succeeded
            if done and success_after is None:
                success_after = now - t_armed
            if success_after is not None and now - t_armed >= success_after + SUCCESS_MARGIN_S:
                outcome = "success"
                break
            if status is not None and status.state in (GATE_HOLD, GATE_ESTOP):
                outcome = f"{'hold' if status.state == GATE_HOLD else 'estop'}: {status.reason}: {status.detail}"
                break
            if now - t_armed >= self.timeout_s:
                break
            if self.stopped():
                outcome = "aborted"
                break
        counts = self._gate_counts()
        with self.obs.lock:
            errors = {arm.value: round(1e3 * e, 1) for arm, e in task.errors_m.items() if np.isfinite(e)}
        return TrialResult(
            seed,
            outcome == "success",
            outcome,
            success_after_s=None if success_after is None else round(success_after, 2),
            duration_s=round(time.monotonic() - t_armed, 2),
            final_errors_mm=errors,
            forwarded=counts[0] - base[0],
            rejected=counts[1] - base[1],
            recorded=recorded,
        )

    # -- helpers -----------------------------------------------------------------------------------
    def _reset_policy(self) -> str:
        """policy/reset, then until its first fresh action; why not ("" when done)."""
        t_reset = time.time()
        ok, msg = self.client.trigger(self.topics.POLICY_RESET.resolve(self.ns), timeout_s=SERVICE_TIMEOUT_S)
        if not ok:
            return f"policy/reset: {msg}"
        if not self._wait_fresh_action(t_reset):
            return f"no policy action within {FRESH_ACTION_TIMEOUT_S:.0f} s of the reset"
        self._reset_at = time.monotonic()  # the new plan starts about now
        return ""

    def _recorder_ready(self, seed: int, recording: list[bool]) -> bool:
        """Before arming: until the recorder hears every stream but the commanded joints (which
        flow only while the gate is armed), asking recorder/start, whose refusal names the first
        stream missing in a fixed order, the commanded joints last (step_assembly.waiting_for).
        Why: the recorder's readers match the policy's writer only once the policy is up, and a
        first trial armed while they were still matching it (a loaded machine: more than 2 s) ran unrecorded. An
        episode that starts here (fresh commanded joints of a trial just ended) is kept."""
        from egomimic_data.step_assembly import cmd_joints_stream
        from egomimic_hw.description import ARMS

        armed_only = [cmd_joints_stream(arm) for arm in ARMS]
        deadline = time.monotonic() + RECORDER_READY_TIMEOUT_S
        msg = ""
        while time.monotonic() < deadline and not self.stopped():
            ok, msg = self.client.trigger(self.topics.RECORDER_START.resolve(self.ns))
            if ok:
                recording[0] = True
                return True
            if any(f"{name}:" in msg for name in armed_only):
                return True
            time.sleep(0.1)
        self.log(f"[trials] seed {seed}: recorder/start before arming: {msg}")
        return False

    def _start_recording(self, seed: int) -> bool:
        deadline = time.monotonic() + RECORD_START_TIMEOUT_S
        ok, msg = False, ""
        while time.monotonic() < deadline and not self.stopped():
            ok, msg = self.client.trigger(self.topics.RECORDER_START.resolve(self.ns))
            if ok:
                return True
            time.sleep(0.05)
        self.log(f"[trials] seed {seed}: recorder/start refused: {msg}")
        return False

    def _state(self) -> int | None:
        with self.obs.lock:
            return None if self.obs.gate_status is None else int(self.obs.gate_status.state)

    def _gate_counts(self) -> tuple[int, int]:
        with self.obs.lock:
            s = self.obs.gate_status
            return (0, 0) if s is None else (int(s.forwarded), int(s.rejected))

    def _disarm(self) -> None:
        t = self.topics
        if self._state() in (GATE_HOLD, GATE_ESTOP):
            self.client.trigger(t.SAFETY_RESET.resolve(self.ns), timeout_s=SERVICE_TIMEOUT_S)
        self.client.trigger(t.SAFETY_DISARM.resolve(self.ns), timeout_s=SERVICE_TIMEOUT_S)

    def _wait_fresh_action(self, since_s: float) -> bool:
        """Until an action stamped after `since_s` (the reset) arrives: the gate validates the
        newest commands when it arms, and one of the old plan still on its way (it held the
        last trial's grasp) would be judged in place of the new plan's first."""
        deadline = time.monotonic() + FRESH_ACTION_TIMEOUT_S
        while time.monotonic() < deadline and not self.stopped():
            with self.obs.lock:
                stamps = [ts[-1] for ts, _ in self.obs.cmd_path.values() if ts]
            if len(stamps) == len(self.obs.cmd_path) and min(stamps) > since_s + ACTION_SETTLE_S:
                return True
            time.sleep(0.02)
        return False

    def _arm(self) -> tuple[bool, str]:
        """safety/arm, then the gate's verdict: `arm` answers at ARMING; the gate is ARMED once
        its shadow commands pass, or back to DISARMED with why not (the policy's answer)."""
        deadline = time.monotonic() + ARM_TIMEOUT_S
        ok, msg = False, "no answer"
        while time.monotonic() < deadline and not self.stopped():
            if time.monotonic() - self._reset_at > RESET_AGE_S:
                # The policy's plan runs on in time while the arms wait (the expert is open loop
                # in time): re-anchor it at the arms first, or the gate refuses to arm (a recorder
                # slow to hear the streams once cost 2.3 s: "0.203 m from the measured pose").
                why = self._reset_policy()
                if why:
                    return False, why
            t_call = time.time()
            ok, msg = self.client.trigger(self.topics.SAFETY_ARM.resolve(self.ns), timeout_s=SERVICE_TIMEOUT_S)
            if not ok:
                time.sleep(0.1)  # e.g. a camera still coming back: the gate says why
                continue
            while time.monotonic() < deadline and not self.stopped():
                with self.obs.lock:
                    seen = [(state, detail) for t, state, detail in self.obs.gate_history if t >= t_call - 0.05]
                # ARMING began before this call when the gate answered "already arming" (a retry
                # after a late answer): leaving it is then the verdict even without ARMING in `seen`.
                arming = msg.startswith("already arming") or any(s == GATE_ARMING for s, _ in seen)
                for state, detail in seen:
                    if state == GATE_ARMED:
                        return True, detail
                    if state in (GATE_DISARMED, GATE_HOLD, GATE_ESTOP) and arming:
                        return False, detail  # left ARMING without arming
                time.sleep(0.02)
        return False, msg

    def _wait_home(self) -> bool:
        """Until both measured positions have rested (HOME_SETTLE_MM over HOME_SETTLE_S), after
        the move has had time to start; False past HOME_TIMEOUT_S."""
        start = time.monotonic()
        deadline = start + HOME_TIMEOUT_S
        window: list[tuple[float, np.ndarray]] = []
        while time.monotonic() < deadline and not self.stopped():
            time.sleep(0.05)
            with self.obs.lock:
                now_pos = self.obs.measured_positions()
            if now_pos is None:
                continue
            now = time.monotonic()
            window = [(t, p) for t, p in window if now - t <= HOME_SETTLE_S] + [(now, now_pos)]
            if now - start < 0.5 or now - window[0][0] < HOME_SETTLE_S * 0.8:
                continue
            spread = np.max(np.linalg.norm(np.stack([p for _, p in window]) - now_pos, axis=-1))
            if spread * 1e3 <= HOME_SETTLE_MM:
                return True
        return False
