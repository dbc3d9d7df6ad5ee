"""Pure per-arm checks of a proposed hardware-frame command, in the order they run.

Order: cheapest and most fundamental first (structure, frame, fresh state), then Cartesian
(workspace, jump vs the measured pose, rate vs the previous accepted command), then IK and
joint space (limits, step), then the gripper, so the first failing check names the real
problem. A check either passes the (possibly clamped) target on or refuses with a reason code.

Rotation distances are geodesic and sign-free (egomimic_hw.rotations.quat_angle), so q and -q
are the same rotation (0 rad) while a true half turn is pi. After any joint-space clamp the
pose actually commanded (FK of the clamped joints) is checked again against every Cartesian
limit, so a clamp can never move a command outside a limit another check enforces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egomimic_hw.description import JOINTS_PER_ARM, X5_LIMITS, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.pose_step import step_size, step_toward
from egomimic_hw.rotations import quat_angle
from egomimic_safety.config import CLAMP, REJECT, GateConfig
from egomimic_safety.reasons import Reason


@dataclass(frozen=True)
class ArmCommand:
    """One arm's part of a proposed BimanualCommand (hardware frame expected)."""

    frame_id: str
    pose: np.ndarray
    """[x, y, z, qw, qx, qy, qz]"""
    gripper_norm: float


@dataclass(frozen=True)
class ArmMeasurement:
    joints_rad: np.ndarray
    gripper_norm: float
    ee_pose_hw: np.ndarray | None
    """FK of joints_rad: the pose and the joints are from the same instant. None: the gate
    computes it when a decision first needs this measurement (SafetyGate._measured): the
    driver's 100 Hz stream would otherwise pay one FK per sample for a 30 Hz decision."""
    stamp_s: float


def _measured_pose(meas: ArmMeasurement) -> np.ndarray:
    """meas.ee_pose_hw, which every Cartesian check needs: the caller fills it with FK first
    (SafetyGate._measured). A measurement without it is the caller's bug, not a refusal."""
    if meas.ee_pose_hw is None:
        raise ValueError(
            "ArmMeasurement.ee_pose_hw is None: compute FK of joints_rad before checking (SafetyGate._measured)"
        )
    return meas.ee_pose_hw


@dataclass(frozen=True)
class ArmVerdict:
    ok: bool
    reason: Reason | None = None
    detail: str = ""
    pose_hw: np.ndarray | None = None
    """The accepted Cartesian target (after clamps, unit quaternion)."""
    joints_rad: np.ndarray | None = None
    gripper_norm: float = 0.0
    clamps: tuple[Reason, ...] = ()
    """Reason codes of the clamps applied (the command was forwarded, altered)."""
    transient: bool = False
    """The command could not be validated *now* (the measured state is a little late): not a
    fault by itself; the gate does not forward it and latches only if the lateness persists."""


class _Refusal(Exception):
    """Internal control flow of check_arm only: never leaves this module."""

    def __init__(self, reason: Reason, detail: str, transient: bool = False):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.transient = transient


def check_structure(arm: Arm, cmd: ArmCommand, config: GateConfig) -> np.ndarray:
    """Shape, finiteness, unit quaternion, frame id; returns the pose with its quaternion
    normalized (within tolerance it is a rotation; the residual is float noise)."""
    try:
        pose = np.asarray(cmd.pose, dtype=float)
        gripper = float(cmd.gripper_norm)
    except (TypeError, ValueError) as exc:
        raise _Refusal(Reason.SHAPE, f"pose/gripper are not numbers: {exc}") from None
    if pose.shape != (7,):
        raise _Refusal(Reason.SHAPE, f"pose has shape {pose.shape}, expected (7,)")
    if not np.all(np.isfinite(pose)) or not np.isfinite(gripper):
        raise _Refusal(Reason.NONFINITE, f"non-finite value in pose {pose.tolist()} / gripper {gripper}")
    qnorm = float(np.linalg.norm(pose[3:]))
    if abs(qnorm - 1.0) > config.quat_norm_tolerance:
        raise _Refusal(
            Reason.BAD_QUATERNION, f"quaternion norm {qnorm:.6f} is not 1 (tolerance {config.quat_norm_tolerance})"
        )
    if cmd.frame_id != arm.hw_frame:
        raise _Refusal(Reason.FRAME, f"frame_id {cmd.frame_id!r}, the gate accepts {arm.hw_frame!r} only")
    pose = pose.copy()
    pose[3:] /= qnorm
    return pose


def structure_problem(arm: Arm, cmd: ArmCommand, config: GateConfig) -> tuple[Reason, str] | None:
    """check_structure as a value: (reason, detail) of a malformed command, or None. The gate
    runs it before deciding that a command is merely late, so a late command is never a way
    around the content checks."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            check_structure(arm, cmd, config)
    except _Refusal as refusal:
        return refusal.reason, f"{arm.value}: {refusal.detail}"
    return None


def check_jump_from_late_state(
    pose: np.ndarray, meas: ArmMeasurement | None, now_s: float, silent_s: float, config: GateConfig
) -> None:
    """The jump checks against a measurement that may be late: since it was taken the arm moved
    at most the EE speed limits x its age, so a target further than the jump limit plus that
    from it is a jump wherever the arm is now. Run before a command is deferred for lateness
    (its own, the state's or a camera's): being late never hides a jump (a half turn arriving
    while the state was 100 ms late used to be deferred, not refused)."""
    if meas is None:
        return
    age = max(now_s - meas.stamp_s, silent_s, 0.0)
    if not np.isfinite(age):
        return
    slack_m, slack_rad = config.max_ee_speed_m_s * age, config.max_ee_angular_speed_rad_s * age
    measured = _measured_pose(meas)
    step_m = float(np.linalg.norm(pose[:3] - measured[:3]))
    if step_m > config.max_translation_step_m + slack_m:
        raise _Refusal(
            Reason.TRANSLATION_JUMP,
            f"{step_m:.3f} m from the measured pose {age * 1e3:.0f} ms old (limit "
            f"{config.max_translation_step_m} m + {slack_m:.3f} m the arm could have moved since)",
        )
    rot_rad = quat_angle(pose[3:], measured[3:] / np.linalg.norm(measured[3:]))
    if rot_rad > config.max_rotation_step_rad + slack_rad:
        raise _Refusal(
            Reason.ROTATION_JUMP,
            f"{rot_rad:.3f} rad from the measured orientation {age * 1e3:.0f} ms old (limit "
            f"{config.max_rotation_step_rad} rad + {slack_rad:.3f} rad the arm could have turned since)",
        )


def check_before_deferring(
    arm: Arm,
    pose: np.ndarray,
    meas: ArmMeasurement | None,
    prev_pose: np.ndarray | None,
    prev_dt_s: float,
    now_s: float,
    silent_s: float,
    config: GateConfig,
) -> None:
    """What lateness cannot excuse, run before a command is deferred: the checks that need no
    fresh state (the workspace box and the rate vs the previous command, where they reject)
    and the jump from the late measurement (check_jump_from_late_state). A clamp here changes
    nothing: the command is not forwarded now."""
    pose = check_workspace(arm, pose, config, config.workspace_action, [])
    check_jump_from_late_state(pose, meas, now_s, silent_s, config)  # as check_vs_measured: before a step clamp
    check_command_step(pose, prev_pose, prev_dt_s, config, config.command_step_action, [])


def deferral_problem(
    arm: Arm,
    cmd: ArmCommand,
    meas: ArmMeasurement | None,
    prev_pose: np.ndarray | None,
    prev_dt_s: float,
    now_s: float,
    silent_s: float,
    config: GateConfig,
) -> tuple[Reason, str] | None:
    """check_before_deferring as a value, for a well-formed command (structure_problem passed):
    (reason, detail) of a fault that lateness does not excuse, or None."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            check_before_deferring(
                arm, check_structure(arm, cmd, config), meas, prev_pose, prev_dt_s, now_s, silent_s, config
            )
    except _Refusal as refusal:
        return refusal.reason, f"{arm.value}: {refusal.detail}"
    return None


def check_state_fresh(meas: ArmMeasurement | None, now_s: float, silent_s: float, config: GateConfig) -> ArmMeasurement:
    """The measured state must be recent by its stamp (ROS clock, not from the future beyond
    max_command_future_s: a driver clock jump) AND by its receipt (`silent_s`: monotonic time
    since it arrived), so neither a clock step nor a future stamp keeps a dead driver "fresh"."""
    if meas is None:
        raise _Refusal(Reason.STALE_STATE, "no measured state received")
    age = now_s - meas.stamp_s
    limit = config.max_state_age_s
    if not np.isfinite(age) or -age > config.max_command_future_s:
        raise _Refusal(
            Reason.STALE_STATE,
            f"measured state stamp is {age * 1e3:.0f} ms old (limits {limit * 1e3:.0f} ms old, "
            f"{config.max_command_future_s * 1e3:.0f} ms ahead)",
        )
    if age > limit:
        raise _Refusal(
            Reason.STALE_STATE,
            f"measured state stamp is {age * 1e3:.0f} ms old (limit {limit * 1e3:.0f} ms)",
            transient=True,
        )
    if not silent_s <= limit:
        raise _Refusal(
            Reason.STALE_STATE,
            f"no measured state received for {silent_s * 1e3:.0f} ms (limit {limit * 1e3:.0f} ms)",
            transient=True,
        )
    return meas


def check_workspace(arm: Arm, pose: np.ndarray, config: GateConfig, action: str, clamps: list) -> np.ndarray:
    lo, hi = (np.asarray(v, dtype=float) for v in config.workspace(arm.value))
    p = pose[:3]
    if np.all(p >= lo) and np.all(p <= hi):
        return pose
    if action != CLAMP:
        where = ", ".join(
            f"{v:.3f}" for v in p
        )  # not np.round: 1e308 * 1e3 overflows (a warning, an error under -W error)
        raise _Refusal(Reason.WORKSPACE, f"position [{where}] outside the box {lo.tolist()}..{hi.tolist()} m")
    clamps.append(Reason.WORKSPACE)
    out = pose.copy()
    out[:3] = np.clip(p, lo, hi)
    return out


def rate_dt_s(dt_s: float, config: GateConfig) -> float:
    """The time a rate limit grants: stamp difference to the previous accepted command, within
    [0, max_rate_dt_s] (a pause grants at most that much motion; dt -> 0 grants -> 0)."""
    if not np.isfinite(dt_s):
        return 0.0
    return min(max(dt_s, 0.0), config.max_rate_dt_s)


def check_command_step(
    pose: np.ndarray, prev: np.ndarray | None, dt_s: float, config: GateConfig, action: str, clamps: list
) -> np.ndarray:
    """Rate vs the previous accepted command, per unit of time: the declared EE speeds x dt
    (dt from the commands' stamps, see rate_dt_s). A per-message limit would let a producer
    that sends faster than the control rate move faster than the arm's declared speed."""
    if prev is None:
        return pose
    dt = rate_dt_s(dt_s, config)
    limit_m = config.max_ee_speed_m_s * dt
    limit_rad = config.max_ee_angular_speed_rad_s * dt
    step_m, rot_rad = step_size(prev, pose)
    if step_m > limit_m:
        if action != CLAMP:
            raise _Refusal(
                Reason.TRANSLATION_RATE,
                f"{step_m * 1e3:.1f} mm from the previous command in {dt_s * 1e3:.1f} ms "
                f"(limit {limit_m * 1e3:.1f} mm: {config.max_ee_speed_m_s} m/s)",
            )
        clamps.append(Reason.TRANSLATION_RATE)
    if rot_rad > limit_rad:
        if action != CLAMP:
            raise _Refusal(
                Reason.ROTATION_RATE,
                f"{rot_rad:.3f} rad from the previous command in {dt_s * 1e3:.1f} ms "
                f"(limit {limit_rad:.3f} rad: {config.max_ee_angular_speed_rad_s} rad/s)",
            )
        clamps.append(Reason.ROTATION_RATE)
    if step_m > limit_m or rot_rad > limit_rad:
        return step_toward(prev, pose, step_m, rot_rad, limit_m, limit_rad)
    return pose


def check_vs_measured(pose: np.ndarray, meas: ArmMeasurement, config: GateConfig) -> None:
    """Upstream parity: the target may not be far from where the arm is (never clamped)."""
    measured = _measured_pose(meas)
    step_m = float(np.linalg.norm(pose[:3] - measured[:3]))
    if step_m > config.max_translation_step_m:
        raise _Refusal(
            Reason.TRANSLATION_JUMP, f"{step_m:.3f} m from the measured pose (limit {config.max_translation_step_m} m)"
        )
    rot_rad = quat_angle(pose[3:], measured[3:] / np.linalg.norm(measured[3:]))
    if rot_rad > config.max_rotation_step_rad:
        raise _Refusal(
            Reason.ROTATION_JUMP,
            f"{rot_rad:.3f} rad from the measured orientation (limit {config.max_rotation_step_rad} rad)",
        )


def joint_bounds(config: GateConfig) -> tuple[np.ndarray, np.ndarray]:
    """The joint range the gate allows: the SDK's limits shrunk by the margin."""
    return X5_LIMITS.pos_min + config.joint_limit_margin_rad, X5_LIMITS.pos_max - config.joint_limit_margin_rad


def check_joints(q: np.ndarray, meas: ArmMeasurement, config: GateConfig, clamps: list) -> np.ndarray:
    lo, hi = joint_bounds(config)
    if np.any(q < lo) or np.any(q > hi):
        if config.joint_limit_action != CLAMP:
            j = int(np.argmax(np.maximum(lo - q, q - hi)))
            raise _Refusal(Reason.JOINT_LIMIT, f"joint{j + 1} target {q[j]:.3f} rad outside [{lo[j]:.3f}, {hi[j]:.3f}]")
        clamps.append(Reason.JOINT_LIMIT)
        q = np.clip(q, lo, hi)
    allowed = X5_LIMITS.vel_max * config.joint_step_window_s
    step = q - meas.joints_rad
    if np.any(np.abs(step) > allowed):
        if config.joint_step_action != CLAMP:
            j = int(np.argmax(np.abs(step) / allowed))
            raise _Refusal(Reason.JOINT_STEP, f"joint{j + 1} step {abs(step[j]):.3f} rad > {allowed[j]:.3f} rad")
        clamps.append(Reason.JOINT_STEP)
        q = meas.joints_rad + np.clip(q - meas.joints_rad, -allowed, allowed)
        q = np.clip(q, lo, hi)
    return q


def check_gripper(gripper_norm: float, config: GateConfig, clamps: list) -> float:
    g = float(gripper_norm)
    if 0.0 <= g <= 1.0:
        return g
    if config.gripper_action != CLAMP:
        raise _Refusal(Reason.GRIPPER_RANGE, f"gripper {g} outside [0, 1]")
    clamps.append(Reason.GRIPPER_RANGE)
    return float(np.clip(g, 0.0, 1.0))


def check_arm(
    arm: Arm,
    cmd: ArmCommand,
    meas: ArmMeasurement | None,
    prev_pose: np.ndarray | None,
    prev_dt_s: float,
    now_s: float,
    state_silent_s: float,
    config: GateConfig,
    kinematics: ArmKinematics,
    catch_up: bool = False,
) -> ArmVerdict:
    """Validate one arm's command; on success the joints to send (IK seeded with the measured
    joints). `prev_pose` is the previous accepted target of this arm (None right after arming),
    `prev_dt_s` the command's stamp minus that target's stamp, `state_silent_s` the monotonic
    time since `meas` was received. `catch_up`: the forwarded targets are behind the producer's
    (after a deferral: producer_rate_problem has judged the producer's own speed), so a step
    beyond the rate limits from `prev_pose` is clamped toward the command, never refused."""
    clamps: list[Reason] = []
    step_action = CLAMP if catch_up else config.command_step_action
    # Huge finite inputs (1e308) overflow to inf in norms; every check refuses inf, so the
    # overflow warning carries nothing (and under -W error it would be an exception).
    with np.errstate(over="ignore", invalid="ignore"):
        return _check_arm(
            arm, cmd, meas, prev_pose, prev_dt_s, now_s, state_silent_s, config, kinematics, clamps, step_action
        )


def producer_rate_problem(
    arm: Arm, cmd: ArmCommand, ref_pose: np.ndarray | None, ref_dt_s: float, config: GateConfig
) -> tuple[Reason, str] | None:
    """The producer's own speed: the step from its previous proposal that passed the fault
    checks (forwarded or deferred), per unit of stamp time, as check_command_step judges a
    forwarded one. (reason, detail) of a producer faster than the rate limits, or None. While
    the forwarded targets are behind (gate.py: catch-up), this is what tells a fast producer
    from one whose commands were held back."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            check_command_step(
                _producer_pose(arm, cmd, config), ref_pose, ref_dt_s, config, config.command_step_action, []
            )
    except _Refusal as refusal:
        return refusal.reason, f"{arm.value}: {refusal.detail}"
    return None


def producer_pose(arm: Arm, cmd: ArmCommand, config: GateConfig) -> np.ndarray | None:
    """The pose producer_rate_problem compares (the command's, quaternion normalized, inside
    the workspace as check_arm treats it), for a command that passed check_arm; None otherwise."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            return _producer_pose(arm, cmd, config)
    except _Refusal:
        return None


def _producer_pose(arm: Arm, cmd: ArmCommand, config: GateConfig) -> np.ndarray:
    return check_workspace(arm, check_structure(arm, cmd, config).copy(), config, config.workspace_action, [])


def _check_arm(
    arm, cmd, meas, prev_pose, prev_dt_s, now_s, state_silent_s, config, kinematics, clamps, step_action
) -> ArmVerdict:
    try:
        pose = check_structure(arm, cmd, config)
        meas = check_state_fresh(meas, now_s, state_silent_s, config)  # transient: the gate runs check_before_deferring
        pose = check_workspace(arm, pose, config, config.workspace_action, clamps)
        check_vs_measured(pose, meas, config)
        n_before = len(clamps)
        pose = check_command_step(pose, prev_pose, prev_dt_s, config, step_action, clamps)
        if len(clamps) > n_before:
            check_vs_measured(pose, meas, config)
        ik = kinematics.inverse(pose, meas.joints_rad)
        if not ik.ok and not (ik.detail == "solution outside the joint limits" and config.joint_limit_action == CLAMP):
            if "joint limits" in ik.detail:
                raise _Refusal(
                    Reason.JOINT_LIMIT, f"IK solution outside the joint limits: {np.round(ik.joints_rad, 3).tolist()}"
                )
            raise _Refusal(Reason.IK_FAILED, ik.detail)
        n_before = len(clamps)
        q = check_joints(np.asarray(ik.joints_rad, dtype=float)[:JOINTS_PER_ARM], meas, config, clamps)
        if len(clamps) > n_before:
            # A joint-space clamp moved the target: what is commanded now is FK(q); it must
            # still satisfy every Cartesian limit, checked strictly (no second clamp).
            pose = kinematics.forward(q)
            check_workspace(arm, pose, config, REJECT, clamps)
            check_command_step(pose, prev_pose, prev_dt_s, config, REJECT, clamps)
            check_vs_measured(pose, meas, config)
        gripper = check_gripper(cmd.gripper_norm, config, clamps)
    except _Refusal as refusal:
        return ArmVerdict(False, refusal.reason, f"{arm.value}: {refusal.detail}", transient=refusal.transient)
    return ArmVerdict(True, pose_hw=pose, joints_rad=q, gripper_norm=gripper, clamps=tuple(clamps))


def start_pose_distance(cmd: ArmCommand, meas: ArmMeasurement) -> tuple[float, float]:
    """(translation m, rotation rad) between a command as proposed (before any clamp) and the
    measured pose; a huge position is inf, which no tolerance accepts."""
    pose = np.asarray(cmd.pose, dtype=float)
    measured = _measured_pose(meas)
    with np.errstate(over="ignore", invalid="ignore"):
        q = pose[3:] / np.linalg.norm(pose[3:])
        return (
            float(np.linalg.norm(pose[:3] - measured[:3])),
            quat_angle(q, measured[3:] / np.linalg.norm(measured[3:])),
        )
