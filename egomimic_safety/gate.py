"""The gate's state machine: DISARMED -> ARMING -> ARMED; faults latch HOLD; ESTOP latches.

Contract:
- only ARMED forwards, and only commands that pass every check for BOTH arms (all or nothing);
- in ARMED any rejection is a fault: HOLD, latched; only `reset()` leaves HOLD/ESTOP, and only
  to DISARMED: nothing ever resumes by itself;
- HOLD and ESTOP actively command the joints measured when the fault happened (the arms have
  no brakes; motors stay on) and never anything else: sent at once, then re-sent once per
  control period by the watchdog;
- DISARMED sends nothing: the driver's own watchdog holds the measured position;
- ARMING requires fresh state for both arms and healthy required cameras, then validates
  `shadow_commands` commands without forwarding them, the first of which must start near the
  measured pose (START_TOO_FAR). A rejection while ARMING returns to DISARMED (nothing was
  forwarded, so there is nothing to hold); lateness while ARMING is waited out until
  arming_timeout_s (a start-up under load), then returns to DISARMED with its reason;
- transient vs persistent: a command that cannot be validated *now* because the measured
  state or a camera is a little late (older than max_state_age_s / max_camera_age_s) is not
  forwarded and is counted as deferred, not a fault; the drivers' watchdogs hold meanwhile.
  HOLD latches when the lateness persists (state_hold_after_s, camera_hold_after_s: config.py
  has the safety argument), or at once on any real fault (bad values, jumps, limits, a frozen
  or failed camera, an implausible state, a silent command stream). Lateness never hides a
  fault it cannot excuse (checks.check_before_deferring): before deferring, the workspace and
  the rate vs the previous command are checked, and the target is judged against the late
  measurement with what the arm could have moved since at its speed limits; an arm whose state
  is fresh (only the command or a camera is late) gets every check, IK and joint limits included;
- rates: each proposal's step from the producer's previous one (forwarded or deferred) is held
  to the EE speed limits x their stamps' dt (capped): a faster producer is a fault, deferred
  or not. Each forwarded target's step from the previous forwarded one is held to the same:
  after a deferral the producer's plan may be past what the capped dt grants from the last
  forwarded target (the arms held meanwhile), and the target then catches up, clamped toward
  the proposal at the rate limits (counted: catch_up_clamps), instead of a HOLD for a producer
  that was never too fast;
- the watchdog `tick()` catches silence (no command, no state, no camera health) when no
  message arrives;
- a measured state is checked before it is trusted (egomimic_safety.plausibility: finite,
  within the joint limits + a margin, no faster than the joints can move, stamps moving
  forward, from the expected publisher): an implausible one is refused and is a fault
  (STATE_IMPLAUSIBLE), and arming is refused for `implausible_arm_lockout_s` after it. The
  last plausible one stays, so a driver that sends nothing else is STALE_STATE; state and
  camera stamps from the future beyond max_command_future_s are stale, like commands;
- a hold target is the last plausible measurement clamped inside the gate's joint bounds:
  no code path sends a joint target outside the limits;
- an exception inside the gate is a HOLD (INTERNAL_ERROR), never an escaped exception.

Time: every call takes `now_s` (the ROS clock that stamps the messages: ages of stamps) and
`mono_s` (a monotonic clock: how long since something was received). See config.py.

Output: `propose()` returns a `Decision` (forward these targets, send the hold target, or send
nothing), so the adapter maps it to messages without reading the gate's state to guess which
it was. The other calls return the hold target to send at once, or None: they never forward.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from egomimic_hw.description import ARMS, JOINTS_PER_ARM, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_safety.checks import (
    ArmCommand,
    ArmMeasurement,
    check_arm,
    deferral_problem,
    joint_bounds,
    producer_pose,
    producer_rate_problem,
    start_pose_distance,
    structure_problem,
)
from egomimic_safety.config import GateConfig
from egomimic_safety.plausibility import StateMonitor
from egomimic_safety.reasons import Reason


class GateState(enum.IntEnum):
    """Values match egomimic_msgs/GateStatus constants."""

    DISARMED = 0
    ARMING = 1
    ARMED = 2
    HOLD = 3
    ESTOP = 4


@dataclass(frozen=True)
class Proposal:
    """A proposed bimanual command (from command/proposed)."""

    stamp_s: float
    arms: dict[Arm, ArmCommand]
    observation_stamp_s: float = 0.0
    """Stamp of the observation the command answers; 0 = not from a model (no check)."""
    written_s: float | None = None
    received_s: float | None = None
    """When its writer sent it and when it was received (the DDS source and reception times, on
    the stamp's clock), where known: a late command's detail then says which hop made it late."""

    def path_timing(self, now_s: float) -> str:
        """ "; written W ms after its stamp, received R ms later, decided D ms later", or "" without
        the DDS times."""
        if self.written_s is None or self.received_s is None:
            return ""
        return (
            f"; written {(self.written_s - self.stamp_s) * 1e3:.0f} ms after its stamp, received "
            f"{(self.received_s - self.written_s) * 1e3:.0f} ms later, decided {(now_s - self.received_s) * 1e3:.0f} ms later"
        )


@dataclass(frozen=True)
class CameraReport:
    """One camera's health (egomimic_msgs/CameraHealth, reduced to what the gate needs)."""

    ok: bool
    detail: str
    last_frame_stamp_s: float
    late: bool = False
    """Not OK only because frames are late (the camera node's STALLED or STARTING): transient,
    judged by the frame age; FROZEN or ERROR (late False) is a fault at once."""


JointCommands = dict[Arm, np.ndarray]
"""Per arm `[q0..q5, gripper_norm]`, what goes out on `<arm>/joint_command`."""


class Send(enum.Enum):
    """What a decision sends to the drivers."""

    NOTHING = "nothing"
    """Not armed, a shadow command while ARMING, a deferred command, or a fault outside ARMED."""
    FORWARD = "forward"
    """A command that passed every check for both arms, while ARMED: stamped with the proposal's
    stamp (the control tick it is for: the rate limits are speeds x stamp differences)."""
    HOLD = "hold"
    """A fault latched HOLD: the hold target, stamped when it is sent."""


@dataclass(frozen=True, eq=False)
class Decision:
    """The gate's answer to one proposal. FORWARD carries both arms' targets (all or nothing),
    HOLD the hold target, NOTHING none: anything else is refused at construction, which inside
    `propose` becomes a HOLD (INTERNAL_ERROR) like any exception in the gate. Compared by
    identity, not value: the targets are arrays, whose `==` has no single truth value."""

    send: Send
    targets: JointCommands | None = None

    def __post_init__(self) -> None:
        if self.send is Send.NOTHING:
            if self.targets is not None:
                raise ValueError("a NOTHING decision carries no targets")
        elif self.send is Send.FORWARD:
            if self.targets is None or set(self.targets) != set(ARMS):
                raise ValueError(
                    f"a FORWARD decision carries both arms' targets, got {sorted(a.value for a in self.targets or {})}"
                )
        elif self.send is Send.HOLD:
            if not self.targets:
                raise ValueError("a HOLD decision carries the hold target")
        else:
            raise ValueError(f"unknown decision {self.send!r}")

    def __bool__(self) -> bool:
        # `if decision:` is the old "something to send" test, and every Decision would pass it
        # (a NOTHING one too): refused, so a caller must say which decision it acts on.
        raise TypeError("a Decision has no truth value: test decision.send (Send.FORWARD, Send.HOLD, Send.NOTHING)")

    @staticmethod
    def after_fault(hold_target: JointCommands | None) -> Decision:
        """A refused proposal: HOLD with the target when the fault latched HOLD, else NOTHING
        (ARMING returns to DISARMED with nothing to hold; a HOLD without a measurement to hold
        has nothing to send, the drivers' watchdogs hold)."""
        return NOTHING if hold_target is None else Decision(Send.HOLD, hold_target)


NOTHING = Decision(Send.NOTHING)


class SafetyGate:
    def __init__(self, config: GateConfig, kinematics: dict[Arm, ArmKinematics]):
        self.config = config
        self._kin = kinematics
        self.state = GateState.DISARMED
        self.reason: Reason | None = None
        self.detail = "disarmed: call safety/arm to start"
        self.forwarded = 0
        self.rejected = 0
        self.clamped = 0
        self.deferred = 0
        self.deferred_counts: Counter[str] = Counter()
        """Commands not forwarded because state or a camera was a little late, per reason."""
        self.last_deferral = ""
        self._last_deferral_reason = Reason.STALE_COMMAND
        self._deferring_since_mono: float | None = None
        """When the current run of deferred commands began (None: the last command was forwarded)."""
        self.deferral_runs = 0
        self.deferral_run_max_s = 0.0
        """Runs of deferred commands that ended in a forwarded one, and the longest (s, from the
        first deferral to the forward): how close a loaded machine came to deferral_hold_after_s."""
        self.transitions = 0
        self.reason_counts: Counter[str] = Counter()
        self.refused_measurements: Counter[str] = Counter()
        """Per arm: measured states refused (non-finite or implausible)."""
        self._monitors = {arm: StateMonitor(config.plausibility) for arm in ARMS}
        self._implausible_mono: dict[Arm, float] = {}
        self._implausible_detail: dict[Arm, str] = {}
        """Per arm: when the last implausible measurement arrived (monotonic)."""
        self._meas: dict[Arm, ArmMeasurement] = {}
        self._meas_rx_mono: dict[Arm, float] = {}
        self._cams: dict[str, CameraReport] = {}
        self._cam_rx_mono: dict[str, float] = {}
        self._hold: JointCommands | None = None
        self._hold_due_mono: float | None = None
        self._last_command_mono: float | None = None
        self._arm_request_mono = 0.0
        """When ARMING began (monotonic): arming_timeout_s counts from here."""
        self._prev_pose: dict[Arm, np.ndarray] = {}
        self._prev_stamp_s: float | None = None
        self._ref_pose: dict[Arm, np.ndarray] = {}
        self._ref_stamp_s: float | None = None
        """The producer's previous proposal that passed the fault checks, forwarded or deferred:
        its own speed is judged against this (checks.producer_rate_problem)."""
        self._behind: set[Arm] = set()
        """Arms whose last forwarded target is not the producer's last proposal (a deferral or
        a clamp came between): their next targets catch up at the rate limits (see propose)."""
        self.catch_up_clamps = 0
        """Forwarded targets clamped toward a proposal the deferred ones had left behind."""
        self._recent_stamps: deque[float] = deque(maxlen=config.max_commands_per_window + 1)
        self._shadows_left = 0
        self._start_checked = False
        self._proposal_seen = False
        """ARMING: a proposal arrived (validated or deferred); until then state hiccups are tolerated."""
        self.last_measurement_accepted = False

    # -- inputs -------------------------------------------------------------------------------
    def update_measurement(self, arm: Arm, meas: ArmMeasurement, mono_s: float) -> JointCommands | None:
        """Store a measured state once it is plausible. A non-finite one is refused (counted in
        `refused_measurements`) and the previous one kept: NaN would disable the jump checks and
        could become a hold target. A finite but implausible one (outside the limits, too fast,
        stamp backwards: see plausibility.py) is refused the same way and is a fault
        (STATE_IMPLAUSIBLE): while ARMED that latches HOLD, and the hold target to send at once
        is returned. Refused measurements do not count as received, so a driver that keeps
        sending them is STALE_STATE after max_state_age_s. Returns None when nothing must be
        sent; `last_measurement_accepted` says whether this one was stored."""
        try:
            pose = () if meas.ee_pose_hw is None else np.asarray(meas.ee_pose_hw, dtype=float).ravel()
            values = np.concatenate(
                [
                    np.asarray(meas.joints_rad, dtype=float).ravel(),
                    pose,
                    [float(meas.gripper_norm), float(meas.stamp_s)],
                ]
            )
            ok = (
                values.size == JOINTS_PER_ARM + len(pose) + 2
                and len(pose) in (0, 7)
                and bool(np.all(np.isfinite(values)))
            )
        except (TypeError, ValueError):
            ok = False
        self.last_measurement_accepted = False
        if not ok:
            self.refused_measurements[arm.value] += 1
            return None
        problem = self._monitors[arm].check(meas.joints_rad, meas.stamp_s)
        if problem:
            return self.state_implausible(arm, problem, mono_s)
        self._meas[arm] = meas
        self._meas_rx_mono[arm] = mono_s
        self.last_measurement_accepted = True
        return None

    def unverified_measurement(self, arm: Arm, joints_rad, stamp_s: float, mono_s: float) -> JointCommands | None:
        """A sample whose publisher is not identified yet (ROS graph discovery lags behind
        data): never stored, but a fault when it is impossible, so that spoofed values are
        caught from the first sample instead of once the spoofer's node name is known."""
        problem = self._monitors[arm].judge(joints_rad, stamp_s)
        if problem:
            return self.state_implausible(arm, f"from an unidentified publisher: {problem}", mono_s)
        return None

    def state_implausible(self, arm: Arm, detail: str, mono_s: float) -> JointCommands | None:
        """A measurement of `arm` cannot be trusted (also called by the node when a second
        publisher appears on the state topic): refused, counted, a fault; arming is refused for
        `implausible_arm_lockout_s`. Returns the hold target when this latched HOLD."""
        try:
            self.refused_measurements[arm.value] += 1
            self._implausible_mono[arm] = mono_s
            self._implausible_detail[arm] = detail
            return self._fault(Reason.STATE_IMPLAUSIBLE, f"{arm.value} state implausible: {detail}", mono_s)
        except Exception as exc:  # noqa: BLE001 - the gate must hold, not crash
            return self._fault(Reason.INTERNAL_ERROR, f"exception in gate (state): {type(exc).__name__}: {exc}", mono_s)

    def update_camera(self, camera: str, report: CameraReport, mono_s: float) -> JointCommands | None:
        """A health report; a required camera that is not OK faults at once while armed."""
        try:
            self._cams[camera] = report
            self._cam_rx_mono[camera] = mono_s
            if (
                camera in self.config.required_cameras
                and not report.ok
                and not report.late
                and self.state in (GateState.ARMING, GateState.ARMED)
            ):
                if self.state == GateState.ARMED or self._start_checked:
                    return self._fault(Reason.STALE_CAMERA, f"camera {camera}: {report.detail or 'not OK'}", mono_s)
            return None
        except Exception as exc:  # noqa: BLE001 - the gate must hold, not crash
            return self._fault(
                Reason.INTERNAL_ERROR, f"exception in gate (camera): {type(exc).__name__}: {exc}", mono_s
            )

    def propose(self, proposal: Proposal, now_s: float, mono_s: float) -> Decision:
        """Decide on one proposed command: what to send to the drivers now."""
        try:
            return self._propose(proposal, now_s, mono_s)
        except Exception as exc:  # noqa: BLE001 - the gate must hold, not crash
            return Decision.after_fault(
                self._fault(Reason.INTERNAL_ERROR, f"exception in gate: {type(exc).__name__}: {exc}", mono_s)
            )

    def tick(self, now_s: float, mono_s: float) -> JointCommands | None:
        """Watchdog (run faster than the control rate): detect silence; in HOLD/ESTOP re-send
        the hold target once per control period."""
        try:
            if self.state == GateState.ARMING:
                # Nothing is forwarded while ARMING, so lateness (state, cameras, commands: CPU
                # load while the policy starts) is waited out until arming_timeout_s; only
                # commands validated against fresh state and cameras count as shadows, and any
                # real fault (a rejection, a failed camera) still ends ARMING at once.
                waited_s = mono_s - self._arm_request_mono
                if waited_s > self.config.arming_timeout_s:
                    if not self._proposal_seen:
                        return self._fault(
                            Reason.STALE_COMMAND,
                            f"no command within {self.config.arming_timeout_s:.1f} s of arming",
                            mono_s,
                        )
                    return self._fault(
                        self._last_deferral_reason,
                        f"not armed within {self.config.arming_timeout_s:.1f} s: "
                        f"{self.last_deferral or 'no command validated'}",
                        mono_s,
                    )
                return None
            if self.state == GateState.ARMED:
                stale = self._stale_arms(now_s, mono_s, self.config.state_hold_after_s)
                if stale:
                    refused = sum(self.refused_measurements[a] for a in stale)
                    note = f" ({refused} measurements refused)" if refused else ""
                    return self._fault(
                        Reason.STALE_STATE,
                        f"no fresh state from {', '.join(stale)} for "
                        f"{self.config.state_hold_after_s * 1e3:.0f} ms{note}",
                        mono_s,
                    )
                camera, transient = self._camera_problem(now_s, mono_s, self.config.camera_hold_after_s)
                if camera:
                    return self._fault(Reason.STALE_CAMERA, camera, mono_s)
                last = self._last_command_mono  # set by arming; unset counts as silent forever (fail closed)
                silent_s = mono_s - last if last is not None else float("inf")
                if silent_s > self.config.command_timeout_s:
                    return self._fault(Reason.STALE_COMMAND, f"no command for {silent_s * 1e3:.0f} ms", mono_s)
                since = self._deferring_since_mono
                if since is not None and mono_s - since > self.config.deferral_hold_after_s:
                    return self._fault(
                        self._last_deferral_reason,
                        f"nothing forwarded for {(mono_s - since) * 1e3:.0f} ms: {self.last_deferral}",
                        mono_s,
                    )
                return None
            if self.state in (GateState.HOLD, GateState.ESTOP) and self._hold is not None:
                due = self._hold_due_mono
                if due is None or mono_s >= due:
                    # Keep the period's phase (no drift to the watchdog's quantum) unless late by
                    # more than a period, then restart from now.
                    base = due if due is not None and mono_s - due < self.config.period_s else mono_s
                    self._hold_due_mono = base + self.config.period_s
                    return self._hold
            return None
        except Exception as exc:  # noqa: BLE001
            return self._fault(
                Reason.INTERNAL_ERROR, f"exception in gate watchdog: {type(exc).__name__}: {exc}", mono_s
            )

    # -- operator services --------------------------------------------------------------------
    def request_arm(self, now_s: float, mono_s: float) -> tuple[bool, str]:
        """safety/arm. Idempotent: asked again while ARMING or ARMED it succeeds and changes nothing
        (the ARMING window keeps its start), so a caller whose first reply came late or was lost
        and who asks again is told the truth instead of a refusal (fc85: the launcher's first arm
        was answered after its 2 s timeout, its retries were refused "cannot arm from ARMING", and
        it started the policy only after its 10 s of retries: the first command came 0.8 s after
        ARMING had given up)."""
        if self.state == GateState.ARMED:
            return True, "already armed"
        if self.state == GateState.ARMING:
            return True, f"already arming: {self.detail}"
        if self.state != GateState.DISARMED:
            return False, f"cannot arm from {self.state.name}: call safety/reset first"
        stale = self._stale_arms(now_s, mono_s)
        if stale:
            self._count(Reason.STALE_STATE)
            return False, f"cannot arm: no fresh state from {', '.join(stale)}"
        lockout = self.config.implausible_arm_lockout_s
        recent = [a.value for a, t in self._implausible_mono.items() if mono_s - t < lockout]
        if recent:
            self._count(Reason.STATE_IMPLAUSIBLE)
            return False, (
                f"cannot arm: implausible state from {', '.join(recent)} within the last {lockout:.1f} s "
                f"({self._implausible_detail[Arm(recent[0])]})"
            )
        camera, _ = self._camera_problem(now_s, mono_s, self.config.max_camera_age_s)
        if camera:
            self._count(Reason.STALE_CAMERA)
            return False, f"cannot arm: {camera}"
        self._set(GateState.ARMING, None, f"arming: validating {self.config.shadow_commands} shadow command(s)")
        self._shadows_left = self.config.shadow_commands
        self._last_command_mono = mono_s  # the command watchdog starts now
        self._arm_request_mono = mono_s
        self.last_deferral, self._last_deferral_reason = "", Reason.STALE_COMMAND
        self._start_checked = False
        self._proposal_seen = False
        self._deferring_since_mono = None
        self._prev_pose = {}
        self._prev_stamp_s = None
        self._ref_pose, self._ref_stamp_s, self._behind = {}, None, set()
        self._recent_stamps.clear()
        return True, self.detail

    def disarm(self) -> tuple[bool, str]:
        if self.state in (GateState.HOLD, GateState.ESTOP):
            return False, f"{self.state.name} is latched: call safety/reset"
        self._set(GateState.DISARMED, None, "disarmed by operator: the arms hold where they are")
        return True, self.detail

    def estop(self) -> tuple[bool, str]:
        """Latched stop from any state; the hold target goes out at the next tick()."""
        self._capture_hold()
        self._count(Reason.ESTOP)
        self._set(
            GateState.ESTOP, Reason.ESTOP, "emergency stop latched: holding measured joints; safety/reset to leave"
        )
        return True, self.detail

    def reset(self) -> tuple[bool, str]:
        if self.state not in (GateState.HOLD, GateState.ESTOP):
            return False, f"nothing to reset in {self.state.name}"
        self._hold = None
        self._hold_due_mono = None
        self._set(GateState.DISARMED, None, "reset: disarmed; arm again with a fresh start pose")
        return True, self.detail

    def internal_error(self, detail: str, mono_s: float) -> JointCommands | None:
        """An exception outside the gate's own methods (the adapter): HOLD like any fault."""
        try:
            return self._fault(Reason.INTERNAL_ERROR, detail, mono_s)
        except Exception:  # noqa: BLE001 - last resort: latch without a hold target
            self.state = GateState.HOLD
            return None

    @property
    def hold_target(self) -> JointCommands | None:
        return self._hold

    # -- internals ----------------------------------------------------------------------------
    def _propose(self, proposal: Proposal, now_s: float, mono_s: float) -> Decision:
        if self.state not in (GateState.ARMING, GateState.ARMED):
            return NOTHING  # HOLD/ESTOP re-send their target from tick(); DISARMED sends nothing
        self._last_command_mono = mono_s
        self._proposal_seen = True
        cfg = self.config
        stamp = float(proposal.stamp_s)
        self._recent_stamps.append(stamp)
        in_window = sum(1 for s in self._recent_stamps if stamp - cfg.command_rate_window_s < s <= stamp)
        if in_window > cfg.max_commands_per_window:
            return self._reject(
                Reason.COMMAND_RATE,
                f"{in_window} commands stamped within {cfg.command_rate_window_s * 1e3:.0f} ms "
                f"(limit {cfg.max_commands_per_window}: {cfg.max_command_rate_hz:.0f} Hz)",
                mono_s,
            )
        age = now_s - stamp
        if not np.isfinite(age) or age > cfg.max_command_late_s or -age > cfg.max_command_future_s:
            return self._reject(
                Reason.STALE_COMMAND,
                f"command stamp is {age * 1e3:.0f} ms old "
                f"(limits {cfg.max_command_late_s * 1e3:.0f} ms old, {cfg.max_command_future_s * 1e3:.0f} ms ahead)",
                mono_s,
            )
        if self._prev_stamp_s is not None and stamp <= self._prev_stamp_s:
            return self._reject(
                Reason.STALE_COMMAND,
                f"command stamp {stamp:.6f} not after the last accepted {self._prev_stamp_s:.6f}",
                mono_s,
            )
        for arm in ARMS:  # content first: being late never hides a malformed command
            cmd = proposal.arms.get(arm)
            if cmd is None:
                return self._reject(Reason.SHAPE, f"{arm.value}: missing from the bimanual command", mono_s)
            problem = structure_problem(arm, cmd, cfg)
            if problem:
                return self._reject(problem[0], problem[1], mono_s)
        if age > cfg.max_command_age_s:
            return self._defer_unless_fault(
                proposal,
                Reason.STALE_COMMAND,
                f"command arrived {age * 1e3:.0f} ms after its stamp (limit {cfg.max_command_age_s * 1e3:.0f} ms"
                f"{proposal.path_timing(now_s)})",
                now_s,
                mono_s,
            )
        camera, transient = self._camera_problem(now_s, mono_s, self.config.max_camera_age_s)
        if camera:
            if transient:
                return self._defer_unless_fault(proposal, Reason.STALE_CAMERA, camera, now_s, mono_s)
            return self._reject(Reason.STALE_CAMERA, camera, mono_s)
        obs = float(proposal.observation_stamp_s)
        if obs != 0.0:
            obs_age = now_s - obs
            if not np.isfinite(obs_age) or obs_age > cfg.max_observation_age_s or -obs_age > cfg.max_command_future_s:
                return self._reject(
                    Reason.STALE_CAMERA,
                    f"the command answers an observation {obs_age * 1e3:.0f} ms old "
                    f"(limit {cfg.max_observation_age_s * 1e3:.0f} ms)",
                    mono_s,
                )
        out: JointCommands = {}
        poses: dict[Arm, np.ndarray] = {}
        clamps: set[Reason] = set()
        arm_clamps: dict[Arm, set[Reason]] = {}
        dt_s = stamp - self._prev_stamp_s if self._prev_stamp_s is not None else float("inf")
        for arm in ARMS:
            cmd = proposal.arms.get(arm)
            if cmd is None:
                return self._reject(Reason.SHAPE, f"{arm.value}: missing from the bimanual command", mono_s)
            silent_s = mono_s - self._meas_rx_mono.get(arm, -np.inf)
            behind = arm in self._behind
            verdict = check_arm(
                arm,
                cmd,
                self._measured(arm),
                self._prev_pose.get(arm),
                dt_s,
                now_s,
                silent_s,
                cfg,
                self._kin[arm],
                catch_up=behind,
            )
            if not verdict.ok:
                reason = verdict.reason or Reason.INTERNAL_ERROR  # a refusal always names one
                if verdict.transient:
                    return self._defer_unless_fault(proposal, reason, verdict.detail, now_s, mono_s)
                return self._reject(reason, verdict.detail, mono_s)
            if behind:  # catching up never excuses a producer faster than the rate limits
                problem = producer_rate_problem(arm, cmd, self._ref_pose.get(arm), self._ref_dt_s(stamp), cfg)
                if problem:
                    return self._reject(problem[0], problem[1], mono_s)
            if verdict.pose_hw is None or verdict.joints_rad is None:  # an accepted verdict carries both
                return Decision.after_fault(
                    self._fault(Reason.INTERNAL_ERROR, f"{arm.value}: accepted without a target", mono_s)
                )
            if self.state == GateState.ARMING and not self._start_checked:
                measured = self._measured(arm)
                if measured is None:  # check_arm refuses a command without a measurement first
                    return self._reject(Reason.STALE_STATE, f"{arm.value}: no measured state", mono_s)
                dist_m, dist_rad = start_pose_distance(cmd, measured)
                if dist_m > cfg.start_translation_tolerance_m or dist_rad > cfg.start_rotation_tolerance_rad:
                    return self._reject(
                        Reason.START_TOO_FAR,
                        f"{arm.value}: first command is {dist_m:.3f} m / {dist_rad:.3f} rad "
                        f"from the measured pose (limits {cfg.start_translation_tolerance_m} m / "
                        f"{cfg.start_rotation_tolerance_rad} rad)",
                        mono_s,
                    )
            clamps.update(verdict.clamps)
            arm_clamps[arm] = set(verdict.clamps)
            poses[arm] = verdict.pose_hw
            out[arm] = np.append(verdict.joints_rad, verdict.gripper_norm)
        # Both arms passed: only now does either become the reference for the next step.
        self._prev_pose = poses
        self._prev_stamp_s = stamp
        rate_clamped = {Reason.TRANSLATION_RATE, Reason.ROTATION_RATE}
        still_behind = {arm for arm, reasons in arm_clamps.items() if reasons & rate_clamped}
        if still_behind & self._behind:
            self.catch_up_clamps += 1
        self._behind = still_behind
        self._remember_proposal(proposal, stamp)
        if self._deferring_since_mono is not None:
            self.deferral_runs += 1
            self.deferral_run_max_s = max(self.deferral_run_max_s, mono_s - self._deferring_since_mono)
        self._deferring_since_mono = None
        if clamps:
            self.clamped += 1
            for reason in sorted(clamps):
                self._count(reason)
        if self.state == GateState.ARMING:
            self._start_checked = True
            self._shadows_left -= 1
            if self._shadows_left <= 0:
                self._set(GateState.ARMED, None, "armed: forwarding validated commands")
            return NOTHING  # a shadow: validated, not forwarded
        decision = Decision(Send.FORWARD, out)
        self.forwarded += 1
        return decision

    def _stale_arms(self, now_s: float, mono_s: float, limit: float | None = None) -> list[str]:
        """Arms whose newest measured state is older than `limit` (default max_state_age_s) by
        stamp or by receipt, or stamped in the future."""
        limit = self.config.max_state_age_s if limit is None else limit
        ahead = self.config.max_command_future_s
        return [
            a.value
            for a in ARMS
            if a not in self._meas
            or not -ahead <= now_s - self._meas[a].stamp_s <= limit
            or mono_s - self._meas_rx_mono[a] > limit
        ]

    def _camera_problem(self, now_s: float, mono_s: float, late_s: float) -> tuple[str, bool]:
        """('', False) when every required camera is healthy, else (why not, transient) for the
        first problem. Lateness (no report or no frame for more than `late_s`, or a report
        that says the frames are late) is transient; a camera that reports FROZEN or ERROR, or
        a frame stamped in the future, is not. The watchdog passes camera_hold_after_s: a late
        camera faults only once it is that late."""
        ahead = self.config.max_command_future_s
        for cam in self.config.required_cameras:
            report = self._cams.get(cam)
            if report is None:
                return f"camera {cam}: no health report received", False
            if not report.ok and not report.late:
                return f"camera {cam}: {report.detail or 'not OK'}", False
            silent_s = mono_s - self._cam_rx_mono[cam]
            if silent_s > late_s:
                return f"camera {cam}: no health report for {silent_s * 1e3:.0f} ms (limit {late_s * 1e3:.0f} ms)", True
            frame_age_s = now_s - report.last_frame_stamp_s
            if frame_age_s < -ahead:
                return (
                    f"camera {cam}: newest frame stamped {-frame_age_s * 1e3:.0f} ms ahead (limit {ahead * 1e3:.0f} ms)",
                    False,
                )
            if frame_age_s > late_s:
                return (
                    f"camera {cam}: newest frame is {frame_age_s * 1e3:.0f} ms old (limit {late_s * 1e3:.0f} ms)",
                    True,
                )
            if not report.ok and late_s <= self.config.max_camera_age_s:
                return f"camera {cam}: {report.detail or 'frames late'}", True
        return "", False

    def _defer_unless_fault(
        self, proposal: Proposal, reason: Reason, detail: str, now_s: float, mono_s: float
    ) -> Decision:
        """Defer a late command (or one on a late camera), unless it fails a check that
        lateness cannot excuse (checks.check_before_deferring: a jump from wherever the arms
        can be now, the workspace, the rate vs the previous command): that is a fault, late or not.
        An arm whose state is fresh (the command or a camera is what is late) gets every check
        of a forwarded command too (check_arm: IK and the joint limits, the gripper): a target
        outside the joint limits proposed while a camera is late is a JOINT_LIMIT fault, not a
        deferral that hides it (a fault-battery run saw exactly that)."""
        # The rate is the producer's own (vs its previous proposal, forwarded or deferred): this
        # command is not forwarded, and the one that is will catch up at the rate limits.
        dt_s = self._ref_dt_s(float(proposal.stamp_s))
        for arm in ARMS:
            silent_s = mono_s - self._meas_rx_mono.get(arm, -np.inf)
            cmd, meas, prev = proposal.arms[arm], self._measured(arm), self._ref_pose.get(arm)
            verdict = check_arm(arm, cmd, meas, prev, dt_s, now_s, silent_s, self.config, self._kin[arm])
            if not verdict.ok and not verdict.transient:  # transient: this arm's state is late
                return self._reject(verdict.reason or Reason.INTERNAL_ERROR, verdict.detail, mono_s)
            if self.state == GateState.ARMING and not self._start_checked and meas is not None:
                far = self._start_too_far_from_late_state(arm, cmd, meas, now_s, silent_s)
                if far:
                    return self._reject(Reason.START_TOO_FAR, far, mono_s)
            problem = deferral_problem(arm, cmd, meas, prev, dt_s, now_s, silent_s, self.config)
            if problem:
                return self._reject(problem[0], problem[1], mono_s)
        self._remember_proposal(proposal, float(proposal.stamp_s))
        self._behind = set(ARMS)
        return self._defer(reason, detail, mono_s)

    def _ref_dt_s(self, stamp_s: float) -> float:
        return stamp_s - self._ref_stamp_s if self._ref_stamp_s is not None else float("inf")

    def _remember_proposal(self, proposal: Proposal, stamp_s: float) -> None:
        """The producer's proposal that passed the fault checks: the reference for its speed."""
        for arm in ARMS:
            pose = producer_pose(arm, proposal.arms[arm], self.config)
            if pose is not None:
                self._ref_pose[arm] = pose
        self._ref_stamp_s = stamp_s

    def _start_too_far_from_late_state(
        self, arm: Arm, cmd: ArmCommand, meas: ArmMeasurement, now_s: float, silent_s: float
    ) -> str:
        """The first command while ARMING, judged against a late measurement: beyond the start
        tolerance plus what the arm could have moved since at its EE speed limits, it starts too
        far wherever the arm is now ('' when it may not)."""
        cfg = self.config
        age = max(now_s - meas.stamp_s, silent_s, 0.0)
        if not np.isfinite(age):
            return ""
        dist_m, dist_rad = start_pose_distance(cmd, meas)
        limit_m = cfg.start_translation_tolerance_m + cfg.max_ee_speed_m_s * age
        limit_rad = cfg.start_rotation_tolerance_rad + cfg.max_ee_angular_speed_rad_s * age
        if dist_m > limit_m or dist_rad > limit_rad:
            return (
                f"{arm.value}: first command is {dist_m:.3f} m / {dist_rad:.3f} rad from the measured pose "
                f"{age * 1e3:.0f} ms old (limits {limit_m:.3f} m / {limit_rad:.3f} rad with what the arm could "
                f"have moved since)"
            )
        return ""

    def _defer(self, reason: Reason, detail: str, mono_s: float) -> Decision:
        """Not forwarded now, not a fault (see the module docstring: transient vs persistent);
        the watchdog latches HOLD if nothing can be forwarded for deferral_hold_after_s."""
        self.deferred += 1
        self.deferred_counts[reason.value] += 1
        self.last_deferral = detail
        self._last_deferral_reason = reason
        if self._deferring_since_mono is None:
            self._deferring_since_mono = mono_s
        return NOTHING

    def _reject(self, reason: Reason, detail: str, mono_s: float) -> Decision:
        """A refused proposal: counted, and a fault (see _fault)."""
        self.rejected += 1
        return Decision.after_fault(self._fault(reason, detail, mono_s))

    def _fault(self, reason: Reason, detail: str, mono_s: float) -> JointCommands | None:
        """Count the reason; ARMED latches HOLD and returns the hold target to send at once;
        ARMING returns to DISARMED; HOLD/ESTOP keep their first (latched) reason."""
        self._count(reason)
        if self.state in (GateState.ESTOP, GateState.HOLD):
            return None
        if self.state in (GateState.DISARMED, GateState.ARMING):
            prefix = "arming failed: " if self.state == GateState.ARMING else ""
            self._set(GateState.DISARMED, reason, prefix + detail)
            return None
        self._capture_hold()
        self._set(GateState.HOLD, reason, f"HOLD: {detail}")
        self._hold_due_mono = mono_s + self.config.period_s if self._hold is not None else None
        return self._hold

    def _measured(self, arm: Arm) -> ArmMeasurement | None:
        """The stored measurement of `arm`, with its FK pose computed on first use (stored
        plausible measurements have finite joints, so their FK is finite)."""
        meas = self._meas.get(arm)
        if meas is not None and meas.ee_pose_hw is None:
            meas = dataclasses.replace(meas, ee_pose_hw=self._kin[arm].forward(meas.joints_rad))
            self._meas[arm] = meas
        return meas

    def _capture_hold(self) -> None:
        """The hold target: per arm the last plausible measured joints (finite and plausible by
        construction: update_measurement stores nothing else), clamped inside the gate's joint
        bounds so that no hold can ever command a joint outside the limits, gripper clamped to
        [0, 1]; checked again here because a HOLD must never carry a non-finite value."""
        if self._hold is None:
            lo, hi = joint_bounds(self.config)
            hold = {}
            for a, m in self._meas.items():
                joints = np.clip(np.asarray(m.joints_rad, dtype=float), lo, hi)
                values = np.append(joints, float(np.clip(m.gripper_norm, 0.0, 1.0)))
                if values.shape == (JOINTS_PER_ARM + 1,) and np.all(np.isfinite(values)):
                    hold[a] = values
            self._hold = hold or None
            self._hold_due_mono = None

    def _count(self, reason: Reason) -> None:
        self.reason_counts[reason.value] += 1

    def _set(self, state: GateState, reason: Reason | None, detail: str) -> None:
        if state != self.state:
            self.transitions += 1
        self.state = state
        if reason is not None:
            self.reason = reason
        self.detail = detail
