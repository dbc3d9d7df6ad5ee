"""The gate's state machine: DISARMED -> ARMING -> ARMED; faults latch HOLD; ESTOP latches.

Contract (INTERFACES.md, issue 5):
- only ARMED forwards, and only commands that pass every check for BOTH arms (all or nothing);
- in ARMED any rejection is a fault: HOLD, latched; only `reset()` leaves HOLD/ESTOP, and only
  to DISARMED: nothing ever resumes by itself;
- HOLD and ESTOP actively command the joints measured when the fault happened (the arms have
  no brakes; motors stay on) and never anything else;
- DISARMED sends nothing: the driver's own watchdog holds the measured position;
- ARMING requires fresh state for both arms, then validates `shadow_commands` commands without
  forwarding them, the first of which must start near the measured pose (START_TOO_FAR);
- the watchdog `tick(now_s)` catches silence (no command, no state) when no message arrives;
- an exception inside the gate is a HOLD (INTERNAL_ERROR), never an escaped exception.
All times are explicit seconds on one clock (the ROS clock that stamps the messages).
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

import numpy as np

from egomimic_hw.description import ARMS, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_safety.checks import ArmCommand, ArmMeasurement, check_arm, start_pose_distance
from egomimic_safety.config import GateConfig
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


JointCommands = dict[Arm, np.ndarray]
"""Per arm `[q0..q5, gripper_norm]`, what goes out on `<arm>/joint_command`."""


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
        self.reason_counts: Counter[str] = Counter()
        self._meas: dict[Arm, ArmMeasurement] = {}
        self._hold: JointCommands | None = None
        self._last_command_s: float | None = None
        self._shadows_left = 0
        self.transitions = 0
        self._start_checked = False

    # -- inputs -------------------------------------------------------------------------------
    def update_measurement(self, arm: Arm, meas: ArmMeasurement) -> None:
        self._meas[arm] = meas

    def propose(self, proposal: Proposal, now_s: float) -> JointCommands | None:
        """Decide on one proposed command; returns what to send to the drivers, or None."""
        try:
            return self._propose(proposal, now_s)
        except Exception as exc:  # noqa: BLE001 - the gate must hold, not crash
            self._fault(Reason.INTERNAL_ERROR, f"exception in gate: {type(exc).__name__}: {exc}")
            return self._hold

    def tick(self, now_s: float) -> JointCommands | None:
        """Watchdog at the control rate: detect silence; in HOLD/ESTOP re-send the hold target."""
        try:
            if self.state in (GateState.ARMED, GateState.ARMING):
                waiting_first = self.state == GateState.ARMING and not self._start_checked
                timeout_s = self.config.arming_timeout_s if waiting_first else self.config.command_timeout_s
                silent = self._last_command_s is None or now_s - self._last_command_s > timeout_s
                stale = [a for a in ARMS if a not in self._meas or now_s - self._meas[a].stamp_s > self.config.max_state_age_s]
                if stale and not waiting_first:
                    # While ARMING waits for its first command nothing can be forwarded, so a
                    # state hiccup (e.g. CPU load while the policy starts) is not a fault yet;
                    # every command is still checked against fresh state before it counts.
                    self._fault(Reason.STALE_STATE, f"no fresh state from {', '.join(a.value for a in stale)}")
                elif silent and self._last_command_s is not None:
                    self._fault(Reason.STALE_COMMAND, f"no command for {(now_s - self._last_command_s) * 1e3:.0f} ms")
            return self._hold if self.state in (GateState.HOLD, GateState.ESTOP) else None
        except Exception as exc:  # noqa: BLE001
            self._fault(Reason.INTERNAL_ERROR, f"exception in gate watchdog: {type(exc).__name__}: {exc}")
            return self._hold

    # -- operator services --------------------------------------------------------------------
    def request_arm(self, now_s: float) -> tuple[bool, str]:
        if self.state == GateState.ARMED:
            return True, "already armed"
        if self.state != GateState.DISARMED:
            return False, f"cannot arm from {self.state.name}: call safety/reset first"
        stale = [a.value for a in ARMS if a not in self._meas or now_s - self._meas[a].stamp_s > self.config.max_state_age_s]
        if stale:
            self._count(Reason.STALE_STATE)
            return False, f"cannot arm: no fresh state from {', '.join(stale)}"
        self._set(GateState.ARMING, None, f"arming: validating {self.config.shadow_commands} shadow command(s)")
        self._shadows_left = self.config.shadow_commands
        self._last_command_s = now_s  # the command watchdog starts now
        self._start_checked = False
        return True, self.detail

    def disarm(self) -> tuple[bool, str]:
        if self.state in (GateState.HOLD, GateState.ESTOP):
            return False, f"{self.state.name} is latched: call safety/reset"
        self._set(GateState.DISARMED, None, "disarmed by operator: the arms hold where they are")
        return True, self.detail

    def estop(self) -> tuple[bool, str]:
        self._capture_hold()
        self._count(Reason.ESTOP)
        self._set(GateState.ESTOP, Reason.ESTOP, "emergency stop latched: holding measured joints; safety/reset to leave")
        return True, self.detail

    def reset(self) -> tuple[bool, str]:
        if self.state not in (GateState.HOLD, GateState.ESTOP):
            return False, f"nothing to reset in {self.state.name}"
        self._hold = None
        self._set(GateState.DISARMED, None, "reset: disarmed; arm again with a fresh start pose")
        return True, self.detail

    # -- internals ----------------------------------------------------------------------------
    def _propose(self, proposal: Proposal, now_s: float) -> JointCommands | None:
        if self.state not in (GateState.ARMING, GateState.ARMED):
            return self._hold
        self._last_command_s = now_s
        age = now_s - proposal.stamp_s
        if age > self.config.max_command_age_s or age < -self.config.max_command_age_s:
            return self._reject(Reason.STALE_COMMAND, f"command stamp is {age * 1e3:.0f} ms from now")
        out: JointCommands = {}
        clamped = False
        for arm in ARMS:
            cmd = proposal.arms.get(arm)
            if cmd is None:
                return self._reject(Reason.SHAPE, f"{arm.value}: missing from the bimanual command")
            verdict = check_arm(arm, cmd, self._meas.get(arm), now_s, self.config, self._kin[arm])
            if not verdict.ok:
                return self._reject(verdict.reason, verdict.detail)
            if self.state == GateState.ARMING and not self._start_checked:
                dist_m, dist_rad = start_pose_distance(cmd, self._meas[arm])
                if dist_m > self.config.start_translation_tolerance_m or dist_rad > self.config.start_rotation_tolerance_rad:
                    return self._reject(
                        Reason.START_TOO_FAR,
                        f"{arm.value}: first command is {dist_m:.3f} m / {dist_rad:.3f} rad from the measured pose",
                    )
            clamped |= verdict.clamped
            out[arm] = np.append(verdict.joints_rad, verdict.gripper_norm)
        if clamped:
            self.clamped += 1
            self._count(Reason.GRIPPER_RANGE)
        if self.state == GateState.ARMING:
            self._start_checked = True
            self._shadows_left -= 1
            if self._shadows_left <= 0:
                self._set(GateState.ARMED, None, "armed: forwarding validated commands")
            return None
        self.forwarded += 1
        return out

    def _reject(self, reason: Reason, detail: str) -> JointCommands | None:
        self.rejected += 1
        if self.state == GateState.ARMING:
            self._count(reason)
            self._set(GateState.DISARMED, reason, f"arming failed: {detail}")
            return None
        self._fault(reason, detail)
        return self._hold

    def _fault(self, reason: Reason, detail: str) -> None:
        self._count(reason)
        if self.state == GateState.ESTOP:
            return
        if self.state == GateState.HOLD:
            return  # the first fault stays the latched reason
        if self.state in (GateState.DISARMED, GateState.ARMING):
            self._set(GateState.DISARMED, reason, detail)
            return
        self._capture_hold()
        self._set(GateState.HOLD, reason, f"HOLD: {detail}")

    def _capture_hold(self) -> None:
        if self._hold is None:
            hold = {a: np.append(m.joints_rad, m.gripper_norm) for a, m in self._meas.items()}
            self._hold = hold or None

    def _count(self, reason: Reason) -> None:
        self.reason_counts[reason.value] += 1

    def _set(self, state: GateState, reason: Reason | None, detail: str) -> None:
        if state != self.state:
            self.transitions += 1
        self.state = state
        if reason is not None:
            self.reason = reason
        self.detail = detail
