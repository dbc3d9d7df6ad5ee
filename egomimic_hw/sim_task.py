"""The simulated task that needs the cameras: grip a box on the table from both sides.

Why: the scripted circle needs no eyes; a policy that has to find a box shown only in the
images does. The box's pose and width come from a seed alone. The synthetic cameras draw it
(egomimic_hw.cameras.synthetic); the scripted expert (egomimic_policy.expert) reads it from
the seed (privileged state) to demonstrate the task; a learned policy gets it from the images
only.

Frames: the box is placed in the LEFT arm's base frame (the task frame) and carried into the
right arm's base through the head camera's two extrinsics (right_base_T_cam cam_T_left_base),
the calibration the head camera projects with, so both arms reach for the box where the
camera draws it. Grasp points are link6 positions in each arm's own base. A position is the
same in the hardware and the dataset frame (they differ in orientation only, docs/eva.md), so
success can be measured on either: the recorder's dataset-frame poses or the drivers' poses.

Grasp: link6 of the left arm at the centre of the box face on the left arm's side (+y of the
box), the right arm's at the opposite face; both grippers closed (0 closed .. 1 open,
docs/eva.md: below GRIPPER_CLOSED_BELOW); all of it for SUCCESS_HOLD_STEPS consecutive control
steps (`TaskSuccess`).

Reach: placement draws from a fixed region, without IK, so every process that builds the box
from the same seed gets the same box whatever its kinematics backend. `reach_problems` checks
a box against the kinematics and the gate's workspace boxes; the tests run it over many seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from egomimic_hw.cameras.synthetic import BASE_T_HEAD_CAMERA, HEAD_CAMERA_T_BASE
from egomimic_hw.description import ARMS, Arm
from egomimic_hw.errors import ConfigError
from egomimic_hw.frames import pose_ds_from_hw
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.rotations import mat_to_quat

TASK_NAME = "sim_box_grasp"
TASK_DESCRIPTION = "grip the box on the table with both grippers, one on each side"

ARM_BASE_T_TASK = {
    Arm.LEFT: np.eye(4),
    Arm.RIGHT: BASE_T_HEAD_CAMERA[Arm.RIGHT] @ HEAD_CAMERA_T_BASE[Arm.LEFT],
}
"""Task frame (the left arm's base) into each arm's base, through the head camera's extrinsics.
The right base lies 0.59 m along -y of the left one, tilted by about 4 degrees."""

TABLE_TOP_Z_M = 0.05
"""Table height in the task frame; the sim arms start with link6 at z 0.35 m."""
BOX_HEIGHT_M = 0.12
BOX_DEPTH_M = 0.08
"""Box size along z and along the task frame's x (away from the arms)."""
BOX_WIDTH_RANGE_M = (0.12, 0.20)
"""Box width (between the two grasp faces), drawn per seed."""
CENTRE_X_RANGE_M = (0.24, 0.34)
CENTRE_Y_M = 0.5 * float(np.linalg.inv(ARM_BASE_T_TASK[Arm.RIGHT])[1, 3])
"""Midway between the two arm bases (about -0.296 m)."""
CENTRE_Y_JITTER_M = 0.03
YAW_RANGE_RAD = 0.25
"""Box yaw about the table normal, drawn in [-YAW_RANGE_RAD, YAW_RANGE_RAD]."""

GRASP_PITCH_RAD = 0.3
"""The grasp orientation: link6 pitched 0.3 rad about the hardware y axis, as at the sim
arms' start pose (FK of SimConfig.initial_joints_rad), which reaches the whole placement
region with margin."""
APPROACH_HEIGHT_M = 0.10
"""The expert comes down onto the grasp point from this far above it."""

GRASP_TOLERANCE_M = 0.02
"""link6 within this distance of its grasp point counts as there: 20x the tracking RMS error
of the simulated graph, a tenth of the smallest box width."""
GRIPPER_CLOSED_BELOW = 0.2
"""A normalized gripper (0 closed, 1 open) below this counts as closed."""
SUCCESS_HOLD_STEPS = 15
"""Consecutive control steps (0.5 s at 30 Hz) the grasp must hold: a pass through is no grasp."""


def grasp_rotation_hw() -> np.ndarray:
    """The grasp orientation (hardware frame, both arms in their own base)."""
    c, s = np.cos(GRASP_PITCH_RAD), np.sin(GRASP_PITCH_RAD)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


@dataclass(frozen=True)
class TargetBox:
    """A box standing on the table: centre (task frame, m), yaw about z (rad) and size (m)."""

    seed: int
    centre_m: tuple[float, float, float]
    yaw_rad: float
    width_m: float
    depth_m: float = BOX_DEPTH_M
    height_m: float = BOX_HEIGHT_M

    def describe(self) -> str:
        """One line for logs: where the box stands and how wide it is."""
        x, y, _ = self.centre_m
        return f"at x {x:.3f} y {y:.3f} m, yaw {self.yaw_rad:+.2f} rad, width {self.width_m:.3f} m"

    def task_t_box(self) -> np.ndarray:
        c, s = np.cos(self.yaw_rad), np.sin(self.yaw_rad)
        t = np.eye(4)
        t[:3, :3] = [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]
        t[:3, 3] = self.centre_m
        return t

    def _in_arm_base(self, points_box: np.ndarray, arm: Arm) -> np.ndarray:
        t = ARM_BASE_T_TASK[arm] @ self.task_t_box()
        return points_box @ t[:3, :3].T + t[:3, 3]

    def corners(self, arm: Arm) -> np.ndarray:
        """(8, 3) corners in `arm`'s base: bottom face then top face, each counter-clockwise
        seen from above (so each face's four corners form a polygon in order)."""
        x, y, z = 0.5 * self.depth_m, 0.5 * self.width_m, 0.5 * self.height_m
        square = [(-x, -y), (x, -y), (x, y), (-x, y)]
        pts = np.array([(a, b, -z) for a, b in square] + [(a, b, z) for a, b in square])
        return self._in_arm_base(pts, arm)

    def grasp_point(self, arm: Arm) -> np.ndarray:
        """Where `arm`'s link6 grips: the centre of its face of the box, in its own base."""
        side = 1.0 if arm is Arm.LEFT else -1.0
        return self._in_arm_base(np.array([[0.0, side * 0.5 * self.width_m, 0.0]]), arm)[0]

    def approach_point(self, arm: Arm, height_m: float = APPROACH_HEIGHT_M) -> np.ndarray:
        """`height_m` straight above the grasp point (along `arm`'s base z)."""
        return self.grasp_point(arm) + np.array([0.0, 0.0, height_m])

    def grasp_pose_hw(self, arm: Arm, height_m: float = 0.0) -> np.ndarray:
        """[x, y, z, qw, qx, qy, qz] of link6 at the grasp (or `height_m` above it), hardware frame."""
        return np.concatenate([self.approach_point(arm, height_m), mat_to_quat(grasp_rotation_hw())])

    def grasp_pose_ds(self, arm: Arm, height_m: float = 0.0) -> np.ndarray:
        """The same pose in the dataset frame (what policies command)."""
        return pose_ds_from_hw(self.grasp_pose_hw(arm, height_m))


def place_target(seed: int) -> TargetBox:
    """The box of task `seed` (>= 0): the same seed gives the same box in every process."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"task seed must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(int(seed))
    x = rng.uniform(*CENTRE_X_RANGE_M)
    y = CENTRE_Y_M + rng.uniform(-CENTRE_Y_JITTER_M, CENTRE_Y_JITTER_M)
    yaw = rng.uniform(-YAW_RANGE_RAD, YAW_RANGE_RAD)
    width = rng.uniform(*BOX_WIDTH_RANGE_M)
    return TargetBox(int(seed), (float(x), float(y), TABLE_TOP_Z_M + 0.5 * BOX_HEIGHT_M), float(yaw), float(width))


def target_for(task_seed: int | None) -> TargetBox | None:
    """The box of a config's `task_seed`; None or negative means no task."""
    return None if task_seed is None or task_seed < 0 else place_target(task_seed)


def reach_problems(
    target: TargetBox,
    kinematics: ArmKinematics,
    seed_joints_rad: Sequence[float],
    workspaces: Mapping[Arm, tuple[Sequence[float], Sequence[float]]] | None = None,
    approach_height_m: float = APPROACH_HEIGHT_M,
) -> list[str]:
    """Why `target` cannot be done ([] if it can): IK of the approach then the grasp pose per arm
    (seeded as a driver would: from `seed_joints_rad`, then the previous answer) and each
    position inside that arm's workspace box (min, max corners, hardware frame)."""
    problems = []
    for arm in ARMS:
        joints = np.asarray(seed_joints_rad, float)
        for name, height in (("approach", approach_height_m), ("grasp", 0.0)):
            pose = target.grasp_pose_hw(arm, height)
            ik = kinematics.inverse(pose, joints)
            if not ik.ok:
                problems.append(f"{arm.value} {name} {np.round(pose[:3], 3).tolist()}: IK {ik.detail}")
                continue
            joints = ik.joints_rad
            if workspaces is not None:
                lo, hi = (np.asarray(v, float) for v in workspaces[arm])
                if np.any(pose[:3] < lo) or np.any(pose[:3] > hi):
                    problems.append(f"{arm.value} {name} {np.round(pose[:3], 3).tolist()} outside the workspace box")
    return problems


class TaskSuccess:
    """Whether the task is done, from what the robot reports, one control step at a time.

    Feed `update` each step with both arms' measured poses ((7,) or (3,): only the position is
    read; each in its own arm's base, hardware or dataset frame alike) and normalized grippers.
    Success latches at the step where the grasp has held for `hold_steps` consecutive steps.
    """

    def __init__(
        self,
        target: TargetBox,
        *,
        tolerance_m: float = GRASP_TOLERANCE_M,
        closed_below: float = GRIPPER_CLOSED_BELOW,
        hold_steps: int = SUCCESS_HOLD_STEPS,
    ):
        if not tolerance_m > 0 or not 0 < closed_below <= 1 or hold_steps < 1:
            raise ConfigError(
                f"need tolerance_m > 0, closed_below in (0, 1], hold_steps >= 1; "
                f"got {tolerance_m}, {closed_below}, {hold_steps}"
            )
        self.target = target
        self.tolerance_m = tolerance_m
        self.closed_below = closed_below
        self.hold_steps = hold_steps
        self._grasp = {arm: target.grasp_point(arm) for arm in ARMS}
        self.reset()

    def reset(self) -> None:
        self.steps = 0
        self.streak = 0
        self.success_step: int | None = None
        """The 0-based step at which success was reached (None until then)."""
        self.errors_m = dict.fromkeys(ARMS, float("inf"))
        """The last step's distance of each arm's link6 from its grasp point."""

    @property
    def succeeded(self) -> bool:
        return self.success_step is not None

    def grasping(self, left_pose, left_gripper: float, right_pose, right_gripper: float) -> bool:
        """This step alone: both link6 within tolerance of their grasp points, both grippers closed."""
        ok = True
        for arm, pose, gripper in ((Arm.LEFT, left_pose, left_gripper), (Arm.RIGHT, right_pose, right_gripper)):
            p = np.asarray(pose, float)[:3]
            error = float(np.linalg.norm(p - self._grasp[arm]))
            self.errors_m[arm] = error
            ok = ok and bool(np.isfinite(error)) and error <= self.tolerance_m and float(gripper) < self.closed_below
        return ok

    def update(self, left_pose, left_gripper: float, right_pose, right_gripper: float) -> bool:
        """Count one control step; True once the task has succeeded (latched)."""
        self.streak = self.streak + 1 if self.grasping(left_pose, left_gripper, right_pose, right_gripper) else 0
        if self.success_step is None and self.streak >= self.hold_steps:
            self.success_step = self.steps
        self.steps += 1
        return self.succeeded
