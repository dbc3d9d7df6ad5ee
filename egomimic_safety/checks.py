"""Pure per-arm checks of a proposed hardware-frame command. Each returns a Verdict.

The order is cheapest-and-most-fundamental first (structure, frame, freshness, Cartesian
steps, then IK and joint space), so the first failing check names the real problem.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egomimic_hw.description import JOINTS_PER_ARM, X5_LIMITS, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.rotations import geodesic_angle, quat_to_mat
from egomimic_safety.config import GateConfig
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
    ee_pose_hw: np.ndarray
    stamp_s: float


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: Reason | None = None
    detail: str = ""
    joints_rad: np.ndarray | None = None
    gripper_norm: float = 0.0
    clamped: bool = False


def _fail(reason: Reason, arm: Arm, detail: str) -> Verdict:
    return Verdict(False, reason, f"{arm.value}: {detail}")


def check_arm(
    arm: Arm,
    cmd: ArmCommand,
    meas: ArmMeasurement | None,
    now_s: float,
    config: GateConfig,
    kinematics: ArmKinematics,
) -> Verdict:
    """Validate one arm's command against its measured state; IK on success."""
    pose = np.asarray(cmd.pose, dtype=float)
    if pose.shape != (7,):
        return _fail(Reason.SHAPE, arm, f"pose has shape {pose.shape}, expected (7,)")
    if not np.all(np.isfinite(pose)) or not np.isfinite(cmd.gripper_norm):
        return _fail(Reason.NONFINITE, arm, f"non-finite value in pose {pose.tolist()} / gripper {cmd.gripper_norm}")
    qnorm = float(np.linalg.norm(pose[3:]))
    if abs(qnorm - 1.0) > config.quat_norm_tolerance:
        return _fail(Reason.BAD_QUATERNION, arm, f"quaternion norm {qnorm:.6f} is not 1")
    if cmd.frame_id != arm.hw_frame:
        return _fail(Reason.FRAME, arm, f"frame_id {cmd.frame_id!r}, the gate accepts {arm.hw_frame!r} only")
    if meas is None:
        return _fail(Reason.STALE_STATE, arm, "no measured state received")
    age = now_s - meas.stamp_s
    if age > config.max_state_age_s:
        return _fail(Reason.STALE_STATE, arm, f"measured state is {age * 1e3:.0f} ms old (limit {config.max_state_age_s * 1e3:.0f} ms)")
    step_m = float(np.linalg.norm(pose[:3] - meas.ee_pose_hw[:3]))
    if step_m > config.max_translation_step_m:
        return _fail(Reason.TRANSLATION_JUMP, arm, f"{step_m:.3f} m from the measured pose (limit {config.max_translation_step_m} m)")
    rot_rad = float(geodesic_angle(quat_to_mat(meas.ee_pose_hw[3:]), quat_to_mat(pose[3:])))
    if rot_rad > config.max_rotation_step_rad:
        return _fail(Reason.ROTATION_JUMP, arm, f"{rot_rad:.3f} rad from the measured orientation (limit {config.max_rotation_step_rad} rad)")
    ik = kinematics.inverse(pose, meas.joints_rad)
    if not ik.ok:
        if "joint limits" in ik.detail:
            return _fail(Reason.JOINT_LIMIT, arm, f"IK solution outside the joint limits: {np.round(ik.joints_rad, 3).tolist()}")
        return _fail(Reason.IK_FAILED, arm, ik.detail)
    q = ik.joints_rad
    step = np.abs(q - meas.joints_rad)
    allowed = X5_LIMITS.vel_max * config.joint_step_window_s
    if np.any(step > allowed):
        j = int(np.argmax(step / allowed))
        return _fail(Reason.JOINT_STEP, arm, f"joint{j + 1} step {step[j]:.3f} rad > {allowed[j]:.3f} rad")
    gripper = float(np.clip(cmd.gripper_norm, 0.0, 1.0))
    return Verdict(True, joints_rad=q[:JOINTS_PER_ARM], gripper_norm=gripper, clamped=gripper != cmd.gripper_norm)


def start_pose_distance(cmd: ArmCommand, meas: ArmMeasurement) -> tuple[float, float]:
    """(translation m, rotation rad) between a command and the measured pose."""
    pose = np.asarray(cmd.pose, dtype=float)
    return (
        float(np.linalg.norm(pose[:3] - meas.ee_pose_hw[:3])),
        float(geodesic_angle(quat_to_mat(meas.ee_pose_hw[3:]), quat_to_mat(pose[3:]))),
    )
