"""Forward and inverse kinematics of one X5 arm, through the ARX SDK's solver or Pinocchio.

Backends (`KINEMATICS_BACKENDS`, chosen by `ArmKinematics(backend=...)` or the environment
variable EGOMIMIC_KINEMATICS, default `auto`):
- `sdk`: the SDK's own `Arx5Solver`, the KDL chain built from the URDF the SDK ships, i.e. the
  very model the controller uses. The reference wherever `arx5_interface` imports (CPython 3.11
  on x86_64 only).
- `pinocchio`: the same URDF (a copy in `egomimic_hw/models`) through Pinocchio, for every other
  Python (ROS 2 Jazzy/Kilted run 3.12). Agrees with `sdk` to 1e-9 m / 1e-9 rad (tested).
- `auto`: `sdk` where it imports, else `pinocchio`; the choice and why are logged and kept in
  `ArmKinematics.backend` / `.backend_reason` for nodes to report.
Both SDK and Pinocchio are imported lazily, inside the backend that needs them.

Poses here are of `EEF_LINK` (link6) in the hardware frame (`<arm>_base`),
`[x, y, z, qw, qx, qy, qz]`. The SDK speaks pose_6d `[x, y, z, roll, pitch, yaw]` with
R = Rz(yaw) Ry(pitch) Rx(roll); conversions stay inside this module.

IK honesty: the SDK's LMA solver can report status 0 with a residual of several millimetres or
about a degree, and returns its last iterate when it fails. `ArmKinematics.inverse` checks the
FK residual of every answer, from either backend, against the same explicit tolerances and
returns `IkResult(ok=False, ...)` with the reason instead of a "nearest solution".
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from egomimic_hw.description import ARX_MODEL, BASE_LINK, EEF_LINK, JOINTS_PER_ARM
from egomimic_hw.errors import BackendUnavailable, ConfigError, PoseError
from egomimic_hw.rotations import as_array_of_shape, geodesic_angle, mat_to_ypr, quat_to_mat, ypr_to_quat

LOG = logging.getLogger(__name__)

KINEMATICS_ENV = "EGOMIMIC_KINEMATICS"
"""Environment variable naming the backend when the constructor is not told (`auto` if unset)."""

IK_POSITION_TOLERANCE_M = 1e-3
IK_ROTATION_TOLERANCE_RAD = 0.02
"""The SDK solver leaves up to ~0.01 rad of orientation residual on reachable poses (measured at
link6 over 200 random poses near the work pose; 0.015 rad at the old `eef_link`); beyond
0.02 rad the answer is not the asked pose."""


def import_arx5():
    """Import `arx5_interface` quietly (it prints library paths on first use) or explain."""
    try:
        with _quiet_stdout():
            import arx5_interface
    except ImportError as exc:  # pragma: no cover - depends on the platform
        raise BackendUnavailable(
            "arx5_interface (PyPI arx5-interface, CPython 3.11 x86_64 only) is not importable: "
            f"{exc}. Install it with `make setup`."
        ) from exc
    return arx5_interface


@contextlib.contextmanager
def _quiet_stdout():
    """Silence the SDK's C++ prints on fds 1 and 2 ('Found ...' paths, KDL's URDF inertia note)
    while it loads; they are noise in every node's log and carry nothing actionable."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def pose6d_from_pose(pose) -> np.ndarray:
    """SDK pose_6d `[x, y, z, roll, pitch, yaw]` of a `[x, y, z, qw, qx, qy, qz]` pose."""
    p = as_array_of_shape(pose, (7,), "pose")
    yaw, pitch, roll = mat_to_ypr(quat_to_mat(p[3:], strict=True))
    return np.array([p[0], p[1], p[2], roll, pitch, yaw])


def pose_from_pose6d(pose6d) -> np.ndarray:
    """`[x, y, z, qw, qx, qy, qz]` of an SDK pose_6d `[x, y, z, roll, pitch, yaw]`."""
    x, y, z, roll, pitch, yaw = as_array_of_shape(pose6d, (6,), "pose_6d").tolist()
    return np.array([x, y, z, *ypr_to_quat([yaw, pitch, roll])])


@dataclass(frozen=True)
class IkResult:
    """Outcome of an IK query: `ok` only when the joints reach the pose within tolerance."""

    ok: bool
    joints_rad: np.ndarray
    position_error_m: float
    rotation_error_rad: float
    detail: str


class KinematicsBackend(Protocol):
    """What `ArmKinematics` needs of a solver. Inputs are already validated 6-/7-vectors."""

    name: str
    joint_pos_min: np.ndarray
    joint_pos_max: np.ndarray

    def forward(self, q: np.ndarray) -> np.ndarray:
        """`[x, y, z, qw, qx, qy, qz]` of EEF_LINK."""

    def solve(self, target: np.ndarray, seed: np.ndarray) -> tuple[np.ndarray, str]:
        """Joints for the target pose, and "" or the solver's own reason for failing."""


class SdkArm:
    """`KinematicsBackend` over the SDK's `Arx5Solver`, built at EEF_LINK."""

    name = "sdk"

    def __init__(self, model: str = ARX_MODEL):
        arx5 = import_arx5()
        with _quiet_stdout():
            config = arx5.RobotConfigFactory.get_instance().get_config(model)
            self.solver = arx5.Arx5Solver(
                config.urdf_path,
                config.joint_dof,
                config.joint_pos_min,
                config.joint_pos_max,
                BASE_LINK,  # not config.*_link_name: the SDK's default end effector is `eef_link`
                EEF_LINK,
                config.gravity_vector,
            )
        self.urdf_path = config.urdf_path
        self.joint_pos_min = np.asarray(config.joint_pos_min, dtype=float)
        self.joint_pos_max = np.asarray(config.joint_pos_max, dtype=float)

    def forward(self, q: np.ndarray) -> np.ndarray:
        return pose_from_pose6d(self.solver.forward_kinematics(q))

    def solve(self, target: np.ndarray, seed: np.ndarray) -> tuple[np.ndarray, str]:
        status, q = self.solver.inverse_kinematics(pose6d_from_pose(target), seed)
        if status != 0:
            return np.asarray(q, dtype=float), f"solver status {status} ({self.solver.get_ik_status_name(status)})"
        return np.asarray(q, dtype=float), ""


def _pinocchio_arm(model: str) -> KinematicsBackend:
    from egomimic_hw.pinocchio_kinematics import PinocchioArm

    return PinocchioArm(model)


KINEMATICS_BACKENDS: dict[str, Callable[[str], KinematicsBackend]] = {"sdk": SdkArm, "pinocchio": _pinocchio_arm}
"""Backend name -> constructor (lazy imports inside). `auto` is resolved by `open_backend`."""

AUTO = "auto"


def open_backend(name: str | None, model: str = ARX_MODEL) -> tuple[KinematicsBackend, str]:
    """The backend called `name` (None: $EGOMIMIC_KINEMATICS, else `auto`) and why it was chosen."""
    requested = (name if name is not None else os.environ.get(KINEMATICS_ENV, "") or AUTO).strip().lower()
    if requested == AUTO:
        try:
            return SdkArm(model), "auto: arx5_interface imports, the SDK solver is the reference"
        except BackendUnavailable as exc:
            return _pinocchio_arm(model), f"auto: SDK unavailable ({exc})"
    if requested not in KINEMATICS_BACKENDS:
        raise ConfigError(f"unknown kinematics backend {requested!r}; choices: {[AUTO, *KINEMATICS_BACKENDS]}")
    return KINEMATICS_BACKENDS[requested](model), "asked for" if name is not None else f"${KINEMATICS_ENV}"


class ArmKinematics:
    """FK/IK of one X5 arm (both EVA arms share the model; each node owns one instance).

    `backend`: "auto", "sdk" or "pinocchio"; None reads $EGOMIMIC_KINEMATICS (default auto).
    """

    def __init__(self, model: str = ARX_MODEL, backend: str | None = None):
        self._backend, self.backend_reason = open_backend(backend, model)
        self.backend = self._backend.name
        self.model = model
        self.joint_pos_min = self._backend.joint_pos_min
        self.joint_pos_max = self._backend.joint_pos_max
        LOG.info("kinematics backend %s for %s at %s (%s)", self.backend, model, EEF_LINK, self.backend_reason)

    def forward(self, joints_rad) -> np.ndarray:
        """End-effector pose `[x, y, z, qw, qx, qy, qz]` (hardware frame) of 6 joint angles."""
        q = as_array_of_shape(joints_rad, (JOINTS_PER_ARM,), "joints")
        return self._backend.forward(q)

    def inverse(
        self,
        pose,
        seed_joints_rad,
        *,
        position_tolerance_m: float = IK_POSITION_TOLERANCE_M,
        rotation_tolerance_rad: float = IK_ROTATION_TOLERANCE_RAD,
    ) -> IkResult:
        """Joints reaching `pose`, seeded with the measured joints; never a silent near miss."""
        target = as_array_of_shape(pose, (7,), "IK target pose")
        seed = as_array_of_shape(seed_joints_rad, (JOINTS_PER_ARM,), "IK seed joints")
        q, failure = self._backend.solve(target, seed)
        if not np.all(np.isfinite(q)):
            detail = f"solver returned non-finite joints ({failure or 'no error'})"
            return IkResult(False, seed.copy(), np.inf, np.inf, detail)
        reached = self._backend.forward(q)
        pos_err = float(np.linalg.norm(reached[:3] - target[:3]))
        rot_err = float(geodesic_angle(quat_to_mat(reached[3:]), quat_to_mat(target[3:], strict=True)))
        if failure:
            return IkResult(False, q, pos_err, rot_err, failure)
        if pos_err > position_tolerance_m or rot_err > rotation_tolerance_rad:
            return IkResult(
                False,
                q,
                pos_err,
                rot_err,
                f"residual {pos_err * 1e3:.2f} mm / {rot_err:.4f} rad above tolerance "
                f"{position_tolerance_m * 1e3:.2f} mm / {rotation_tolerance_rad:.4f} rad",
            )
        if np.any(q < self.joint_pos_min - 1e-9) or np.any(q > self.joint_pos_max + 1e-9):
            return IkResult(False, q, pos_err, rot_err, "solution outside the joint limits")
        return IkResult(True, q, pos_err, rot_err, "")


def check_pose_shape(pose) -> None:
    """Raise PoseError unless `pose` is a finite 7-vector."""
    as_array_of_shape(pose, (7,), "pose")


__all__ = [
    "KINEMATICS_BACKENDS",
    "ArmKinematics",
    "IkResult",
    "PoseError",
    "import_arx5",
    "open_backend",
    "pose6d_from_pose",
    "pose_from_pose6d",
]
