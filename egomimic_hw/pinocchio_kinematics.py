"""X5 forward and inverse kinematics through Pinocchio (PyPI `pin`), without the ARX SDK.

Why: the SDK wheel exists for CPython 3.11 on x86_64 only, while ROS 2 Jazzy and Kilted run
Python 3.12. Pinocchio has wheels for both and loads the same URDF: `models/X5.urdf` is a
byte-for-byte copy of the one the SDK wheel ships (`arx5_interface/models/X5.urdf`; a test
compares them wherever the SDK is installed), so both backends compute the same chain,
base_link -> link6 (`description.EEF_LINK`).

IK is damped least squares on the SE(3) log error of link6 in its own frame (the Pinocchio
"inverse kinematics (clik)" scheme): q += -J^T (J J^T + damping I)^-1 e, with
J = -Jlog6(iMd^-1) J_local, weighted and stopped as the SDK's KDL LMA solver is, the damping
adapted Levenberg-Marquardt style, each step at most MAX_STEP_RAD per joint. Like the SDK's
solver it ignores the joint limits while iterating: a target only reachable past a limit yields
that solution, which `ArmKinematics.inverse` reports as "outside the joint limits" (the gate's
JOINT_LIMIT, which may be clamped) rather than a failure to converge (IK_FAILED, always
refused). Whether an answer is good enough is not decided here either: `ArmKinematics.inverse`
applies the same residual check to both backends.
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from egomimic_hw.description import ARX_MODEL, EEF_LINK, JOINTS_PER_ARM, X5_LIMITS, ArmLimits
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.rotations import mat_to_quat, quat_to_mat

URDF_RESOURCES = {"X5": "X5.urdf"}
"""URDF per ARX model key, in the `egomimic_hw/models` package data."""

INITIAL_DAMPING = 1e-3
MIN_DAMPING = 1e-9
MAX_DAMPING = 1e6
DAMPING_FACTOR = 10.0
"""Levenberg-Marquardt on the damping (lambda^2 of the damped pseudo-inverse): a step that
lowers the error is kept and the damping divided by DAMPING_FACTOR; one that does not is
dropped and the damping multiplied. The error never grows, so the iterate cannot leap to
another branch of solutions. Past MAX_DAMPING no step lowers the error: the target is out of
reach from here."""

MAX_STEP_RAD = 0.5
"""Largest change of any joint in one iteration: a longer step is scaled down."""

TASK_WEIGHTS = np.array([1.0, 1.0, 1.0, 0.01, 0.01, 0.01])
"""Weights of the error [m, m, m, rad, rad, rad]: KDL's ChainIkSolverPos_LMA defaults, the
SDK's solver. 1 rad of orientation counts as 1 cm of position, so near a singular wrist the
solver settles by the seed within the tolerances instead of swinging joints 4 and 6 far
round for the last milliradians (measured: without it, seeds at q5 ~ pi/2 led to solutions
2.5 rad away, past the joint limits, where the SDK stayed within 0.1 rad)."""

CONVERGED_ERROR = 1e-5
"""Stop when the weighted error is below this (KDL's default eps, the SDK's): position within
1e-5 m and orientation within 1e-3 rad, far inside the residual tolerances (1 mm, 0.02 rad)."""

MAX_ITERATIONS = 100
"""A bound on the work for targets that never converge (near a singular wrist); an unreachable
one usually stops earlier, once no step lowers the error (MAX_DAMPING)."""


def import_pinocchio():
    """Import `pinocchio` (PyPI `pin`) or explain how to get it."""
    try:
        import pinocchio
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendUnavailable(
            f"pinocchio (PyPI `pin`) is not importable: {exc}. Install it with `make setup`."
        ) from exc
    return pinocchio


def urdf_text(model: str = ARX_MODEL) -> str:
    """The URDF of `model` shipped with this package (no SDK needed)."""
    if model not in URDF_RESOURCES:
        raise ConfigError(f"no URDF for ARX model {model!r}; choices: {sorted(URDF_RESOURCES)}")
    return resources.files("egomimic_hw").joinpath("models", URDF_RESOURCES[model]).read_text()


class PinocchioArm:
    """FK and damped-least-squares IK of one X5 arm at `EEF_LINK`; its joint limits are the
    description's (the SDK's RobotConfig values, not the URDF's wider ones)."""

    name = "pinocchio"

    def __init__(self, model: str = ARX_MODEL, limits: ArmLimits = X5_LIMITS):
        pin = import_pinocchio()
        self._pin = pin
        self._model = pin.buildModelFromXML(urdf_text(model))
        if self._model.nq != JOINTS_PER_ARM:
            raise ConfigError(f"URDF of {model} has {self._model.nq} joints, expected {JOINTS_PER_ARM}")
        if not self._model.existFrame(EEF_LINK):
            raise ConfigError(f"URDF of {model} has no frame {EEF_LINK!r}")
        self._frame = self._model.getFrameId(EEF_LINK)
        self._data = self._model.createData()
        self._local = pin.ReferenceFrame.LOCAL
        self._eye6 = np.eye(6)
        self.joint_pos_min = limits.pos_min
        self.joint_pos_max = limits.pos_max

    def _placement(self, q: np.ndarray):
        self._pin.forwardKinematics(self._model, self._data, q)
        return self._pin.updateFramePlacement(self._model, self._data, self._frame)

    def forward(self, q: np.ndarray) -> np.ndarray:
        """`[x, y, z, qw, qx, qy, qz]` of EEF_LINK in the base frame; q already validated."""
        placement = self._placement(q)
        return np.concatenate([placement.translation, mat_to_quat(placement.rotation)])

    def _error_and_jacobian(self, q: np.ndarray, desired) -> tuple[np.ndarray, np.ndarray]:
        """Weighted log error of EEF_LINK against `desired` (its own frame), its Jacobian in q."""
        pin, model, data = self._pin, self._model, self._data
        pin.computeJointJacobians(model, data, q)  # also the forward kinematics of q
        to_desired = pin.updateFramePlacement(model, data, self._frame).actInv(desired)
        error = TASK_WEIGHTS * pin.log6(to_desired).vector
        jacobian = -pin.Jlog6(to_desired.inverse()) @ pin.getFrameJacobian(model, data, self._frame, self._local)
        return error, TASK_WEIGHTS[:, None] * jacobian

    def solve(self, target: np.ndarray, seed: np.ndarray) -> tuple[np.ndarray, str]:
        """Joints for a `[x, y, z, qw, qx, qy, qz]` target from `seed`: the last accepted iterate,
        and "" (no failure of its own: near a singularity convergence slows at residuals far inside
        the tolerances, so only the residual check may call the answer a miss)."""
        desired = self._pin.SE3(quat_to_mat(target[3:], strict=True), np.asarray(target[:3], dtype=float))
        q = np.array(seed, dtype=float)
        error, jacobian = self._error_and_jacobian(q, desired)
        error_sq = float(error @ error)
        damping = INITIAL_DAMPING
        for _ in range(MAX_ITERATIONS):
            if error_sq < CONVERGED_ERROR**2 or damping > MAX_DAMPING:
                break
            step = -jacobian.T @ np.linalg.solve(jacobian @ jacobian.T + damping * self._eye6, error)
            largest = float(np.max(np.abs(step)))
            if largest > MAX_STEP_RAD:
                step *= MAX_STEP_RAD / largest
            trial_error, trial_jacobian = self._error_and_jacobian(q + step, desired)
            trial_sq = float(trial_error @ trial_error)
            if trial_sq < error_sq:  # accept, trust the linear model more
                q, error, jacobian, error_sq = q + step, trial_error, trial_jacobian, trial_sq
                damping = max(damping / DAMPING_FACTOR, MIN_DAMPING)
            else:  # reject, take a shorter, more gradient-like step
                damping *= DAMPING_FACTOR
        return q, ""
