"""An independent audit of joint commands that reached (or would reach) a driver.

Why a second statement of the limits: a bug in `checks` would pass its own tests if the tests
reused it. The oracle shares no code with the checks: it works in joint space and on FK of what
was actually commanded (rotation matrices, not quaternions), and knows only the limits as
numbers from GateConfig / X5_LIMITS. Used by the property tests, the fault battery (on every
`<arm>/joint_command` the drivers received) and anyone auditing a recording.

Tolerances: the gate checks the Cartesian target, the driver receives the IK solution of it,
which reaches the target within the IK tolerances (kinematics.IK_*_TOLERANCE); FK-based
checks here allow exactly that residual, and 1e-9 for float noise elsewhere.
"""

from __future__ import annotations

import numpy as np

from egomimic_hw.description import JOINTS_PER_ARM, VALUES_PER_ARM, X5_LIMITS, Arm
from egomimic_hw.kinematics import IK_POSITION_TOLERANCE_M, IK_ROTATION_TOLERANCE_RAD, ArmKinematics
from egomimic_hw.rotations import geodesic_angle, quat_to_mat
from egomimic_safety.config import GateConfig

EPS = 1e-9


def audit_command(
    arm: Arm,
    values,
    measured_joints_rad,
    config: GateConfig,
    kinematics: ArmKinematics,
    previous_values=None,
    elapsed_s: float | None = None,
) -> list[str]:
    """Every limit `values` ([q0..q5, gripper]) violates, as readable lines ([] = within all).

    `measured_joints_rad`: the arm's measured joints when the command was decided.
    `previous_values`: the previous command forwarded in the same armed run (rate limits), or None.
    `elapsed_s`: time from the previous command to this one (their stamps), required with
    `previous_values`: the EE may move at most the declared speeds x elapsed, elapsed capped at
    rate_limit_max_dt_periods control periods (never below 0).
    """
    v = np.asarray(values, dtype=float)
    if v.shape != (VALUES_PER_ARM,):
        return [f"{arm.value}: shape {v.shape}, expected ({VALUES_PER_ARM},)"]
    if not np.all(np.isfinite(v)):
        return [f"{arm.value}: non-finite value {v.tolist()}"]
    bad: list[str] = []
    q, gripper = v[:JOINTS_PER_ARM], v[JOINTS_PER_ARM]
    lo = X5_LIMITS.pos_min + config.joint_limit_margin_rad - EPS
    hi = X5_LIMITS.pos_max - config.joint_limit_margin_rad + EPS
    for j in range(JOINTS_PER_ARM):
        if not lo[j] <= q[j] <= hi[j]:
            bad.append(f"{arm.value}: joint{j + 1} {q[j]:.4f} outside [{lo[j]:.4f}, {hi[j]:.4f}]")
    if not 0.0 <= gripper <= 1.0:
        bad.append(f"{arm.value}: gripper {gripper} outside [0, 1]")
    qm = np.asarray(measured_joints_rad, dtype=float)
    allowed = X5_LIMITS.vel_max * config.joint_step_window_s + EPS
    for j in range(JOINTS_PER_ARM):
        if abs(q[j] - qm[j]) > allowed[j]:
            bad.append(f"{arm.value}: joint{j + 1} step {abs(q[j] - qm[j]):.4f} > {allowed[j]:.4f} rad")
    pose = kinematics.forward(q)
    meas_pose = kinematics.forward(qm)
    box_lo, box_hi = (np.asarray(b, dtype=float) for b in config.workspace(arm.value))
    if np.any(pose[:3] < box_lo - IK_POSITION_TOLERANCE_M) or np.any(pose[:3] > box_hi + IK_POSITION_TOLERANCE_M):
        bad.append(f"{arm.value}: EE {np.round(pose[:3], 4).tolist()} outside the workspace box")
    d_m = float(np.linalg.norm(pose[:3] - meas_pose[:3]))
    if d_m > config.max_translation_step_m + IK_POSITION_TOLERANCE_M:
        bad.append(f"{arm.value}: EE {d_m:.4f} m from the measured pose")
    d_rad = float(geodesic_angle(quat_to_mat(pose[3:]), quat_to_mat(meas_pose[3:])))
    if d_rad > config.max_rotation_step_rad + IK_ROTATION_TOLERANCE_RAD:
        bad.append(f"{arm.value}: EE {d_rad:.4f} rad from the measured orientation")
    if previous_values is not None:
        if elapsed_s is None or not np.isfinite(elapsed_s):
            raise ValueError("audit_command: previous_values needs a finite elapsed_s")
        window_s = float(np.clip(elapsed_s, 0.0, config.rate_limit_max_dt_periods / config.control_rate_hz))
        prev = kinematics.forward(np.asarray(previous_values, dtype=float)[:JOINTS_PER_ARM])
        step_m = float(np.linalg.norm(pose[:3] - prev[:3]))
        if step_m > config.max_ee_speed_m_s * window_s + 2 * IK_POSITION_TOLERANCE_M:
            bad.append(
                f"{arm.value}: EE moved {step_m * 1e3:.2f} mm in {elapsed_s * 1e3:.1f} ms since the previous command "
                f"({step_m / max(window_s, 1e-9):.2f} m/s)"
            )
        step_rad = float(geodesic_angle(quat_to_mat(pose[3:]), quat_to_mat(prev[3:])))
        if step_rad > config.max_ee_angular_speed_rad_s * window_s + 2 * IK_ROTATION_TOLERANCE_RAD:
            bad.append(
                f"{arm.value}: EE turned {step_rad:.4f} rad in {elapsed_s * 1e3:.1f} ms since the previous command"
            )
    return bad
