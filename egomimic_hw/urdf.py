"""EVA's robot description: the bimanual URDF, generated from the X5 arm model and the mounts,
and a small URDF reader whose transforms the robot_state node publishes on TF.

Conventions (URDF's, and docs/eva.md's): a joint's `origin` is parent_T_child at zero position,
its `rpy` is R = Rz(yaw) Ry(pitch) Rx(roll) (fixed axes x, y, z); 4x4 `A_T_B` maps B into A;
quaternions here are `[qw, qx, qy, qz]` as everywhere in egomimic_hw (the node maps them to
ROS's xyzw fields by name). A link name is a TF frame id.

The generated tree (`eva_urdf`), every name but the root prefixed `left_` / `right_`:

  eva_base                           the root: the left arm's base (the simulated task's frame,
   |                                 sim_task.ARM_BASE_T_TASK), the one place the mounts meet
   +- <arm>_base                     fixed, `<arm>_base_mount`: the arm base, frame id of every
   |   |                             hardware pose (description.Arm.hw_frame)
   |   +- <arm>_link1 .. _link6      revolute `<arm>_joint1` .. `_joint6` (the names on
   |       |                         `<arm>/joint_states`); link6 is description.EEF_LINK
   |       +- <arm>_eef_link         fixed: the SDK's default end effector, 0.145 m along tool x
   |       +- <arm>_wrist_link       fixed, NOMINAL (not measured, see LINK6_T_WRIST_OPTICAL)
   |           +- <arm>_wrist_optical
   +- front_1_link                   fixed: the head camera, from its extrinsics
       +- front_1_optical            the frame id of the camera's images (camera_node)

How the two arm bases are related: by nothing but the head camera's extrinsics. Each arm's
calibration gives base_T_cam of front_1 (cameras.synthetic.BASE_T_HEAD_CAMERA, docs/eva.md), so
left_base_T_right_base = left_base_T_cam @ inv(right_base_T_cam), exactly as sim_task derives
ARM_BASE_T_TASK; with it the URDF reproduces both extrinsics (tests). The right base lies 0.59 m
along -y of the left one, tilted by about 4 degrees: an estimate as good as the two camera
calibrations, not a measured mount.

`<cam>_link` is the camera body (x forward, z up, REP 103); `<cam>_optical` is z forward, x right,
y down (REP 103's optical convention, the convention of the extrinsics and of the projection in
cameras.synthetic), related by OPTICAL_IN_BODY.

Not in the URDF: the grippers (`<arm>_gripper` on joint_states is the normalized opening, 0
closed, 1 open, not a joint position; the X5 model has no finger joints) and meshes (the X5
model's `./meshes/*.STL` ship with neither the SDK wheel nor this project): rviz shows the
frames, not the arm's shape.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from egomimic_hw.description import ARMS, BASE_LINK, CAMERAS, EEF_LINK, JOINTS_PER_ARM, X5_LIMITS, Arm
from egomimic_hw.errors import ConfigError
from egomimic_hw.rotations import mat_to_quat, quat_to_mat, ypr_to_mat

ROOT_FRAME = "eva_base"
X5_MODEL_PATH = Path(__file__).resolve().parent / "models" / "X5.urdf"
"""The project's copy of the ARX SDK's X5 model (identical to arx5_interface/models/X5.urdf)."""
HEAD_CAMERA = CAMERAS[0]
WRIST_CAMERAS = {Arm.LEFT: CAMERAS[1], Arm.RIGHT: CAMERAS[2]}

OPTICAL_IN_BODY = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
"""body_R_optical: optical z = body x (forward), optical x = -body y (right), optical y = -body z
(down); as rpy (-pi/2, 0, -pi/2), the usual `<cam>_optical_joint` of ROS camera descriptions."""

LINK6_T_WRIST_OPTICAL = np.array(
    [
        [0.0, 0.0, 1.0, -0.03],
        [-1.0, 0.0, 0.0, 0.0],
        [0.0, -1.0, 0.0, 0.06],
        [0.0, 0.0, 0.0, 1.0],
    ]
)
"""NOMINAL, NOT MEASURED: the wrist cameras (RealSense D405) have no calibrated mount anywhere in
the project or upstream's configs. Placeholder: the camera 6 cm above link6 and 3 cm behind it,
looking along the tool (link6 x). Nothing in the control path uses it (the synthetic wrist views
are drawn from the end effector's position directly); replace it with the calibration's
link6_T_<cam> (EvaMounts.from_extrinsics) once there is one."""


def _homogeneous(rot: np.ndarray, xyz) -> np.ndarray:
    t = np.eye(4)
    t[:3, :3] = rot
    t[:3, 3] = np.asarray(xyz, dtype=float)
    return t


def nearest_rotation(mat) -> np.ndarray:
    """The rotation matrix closest to `mat` (SVD): calibration matrices are printed to 8 digits,
    so they are orthonormal only to about 1e-8."""
    u, _, vt = np.linalg.svd(np.asarray(mat, dtype=float))
    r = u @ vt
    if np.linalg.det(r) < 0:
        raise ConfigError(f"not a rotation (a reflection): {np.asarray(mat).tolist()}")
    return r


@dataclass(frozen=True)
class EvaMounts:
    """Where the arm bases and cameras sit, each a 4x4 `parent_T_child`. Defaults: calibration
    (head camera extrinsics; both arm bases derived from them, module docstring) and the nominal
    wrist mounts. Keys of `from_extrinsics`: the project's calibration form, `<arm>_base_T_front_1`
    (required, both) and `<arm>_link6_T_<arm>_wrist` (optional, the optical frame)."""

    arm_base_T_head_optical: Mapping[Arm, np.ndarray] = field(default_factory=dict)
    link6_T_wrist_optical: Mapping[Arm, np.ndarray] = field(default_factory=dict)

    @classmethod
    def calibrated(cls) -> EvaMounts:
        from egomimic_hw.cameras.synthetic import BASE_T_HEAD_CAMERA  # lazy: it imports OpenCV

        return cls(
            arm_base_T_head_optical={a: np.array(BASE_T_HEAD_CAMERA[a]) for a in ARMS},
            link6_T_wrist_optical={a: LINK6_T_WRIST_OPTICAL.copy() for a in ARMS},
        )

    @classmethod
    def from_extrinsics(cls, extrinsics: Mapping[str, object]) -> EvaMounts:
        head, wrist = {}, {}
        for a in ARMS:
            key = f"{a.hw_frame}_T_{HEAD_CAMERA}"
            if key not in extrinsics:
                raise ConfigError(f"extrinsics: {key!r} missing (have {sorted(extrinsics)})")
            head[a] = np.asarray(extrinsics[key], dtype=float)
            wkey = f"{a.value}_{EEF_LINK}_T_{WRIST_CAMERAS[a]}"
            wrist[a] = np.asarray(extrinsics.get(wkey, LINK6_T_WRIST_OPTICAL), dtype=float)
        for name, t in [*head.items(), *wrist.items()]:
            if np.shape(t) != (4, 4) or not np.all(np.isfinite(t)):
                raise ConfigError(f"extrinsics of {name}: expected a finite 4x4 matrix, got {np.shape(t)}")
        return cls(arm_base_T_head_optical=head, link6_T_wrist_optical=wrist)

    def eva_base_T_arm_base(self, arm: Arm) -> np.ndarray:
        """The root is the left base; the right base through the head camera (module docstring)."""
        left_T_cam = self.head_optical_pose(Arm.LEFT)
        return left_T_cam @ np.linalg.inv(self.head_optical_pose(arm))

    def head_optical_pose(self, arm: Arm) -> np.ndarray:
        """arm_base_T_front_1_optical with its rotation made orthonormal."""
        t = np.asarray(self.arm_base_T_head_optical[arm], dtype=float)
        return _homogeneous(nearest_rotation(t[:3, :3]), t[:3, 3])


@dataclass(frozen=True)
class RobotStateConfig:
    """The robot_state node (egomimic_nodes.robot_state_node): which robot description it serves."""

    robot_description: str = field(
        default="", metadata={"help": "the URDF text itself (as robot_state_publisher takes it); '' = read urdf_path"}
    )
    urdf_path: str = field(
        default="",
        metadata={
            "help": "a URDF file, read when robot_description is ''; '' = the shipped EVA URDF (egomimic_bringup/urdf)"
        },
    )

    def __post_init__(self) -> None:
        if self.robot_description.strip() and self.urdf_path.strip():
            raise ConfigError("give robot_description or urdf_path, not both")


# --- reading a URDF -------------------------------------------------------------------------

MOVING_TYPES = ("revolute", "continuous", "prismatic")
SUPPORTED_TYPES = (*MOVING_TYPES, "fixed")


def _floats(text: str | None, n: int, what: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in (text or " ".join(["0"] * n)).split())
    if len(values) != n or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{what}: expected {n} finite numbers, got {text!r}")
    return values


def _quat_mul(p, q) -> tuple[float, float, float, float]:
    pw, px, py, pz = p
    qw, qx, qy, qz = q
    return (
        pw * qw - px * qx - py * qy - pz * qz,
        pw * qx + px * qw + py * qz - pz * qy,
        pw * qy - px * qz + py * qw + pz * qx,
        pw * qz + px * qy - py * qx + pz * qw,
    )


@dataclass(frozen=True)
class UrdfJoint:
    name: str
    type: str
    parent: str
    child: str
    xyz: tuple[float, float, float]
    rpy: tuple[float, float, float]
    axis: tuple[float, float, float] = (1.0, 0.0, 0.0)

    @property
    def moving(self) -> bool:
        return self.type in MOVING_TYPES

    @property
    def origin(self) -> np.ndarray:
        """parent_T_child at zero position."""
        r, p, y = self.rpy
        return _homogeneous(ypr_to_mat([y, p, r]), self.xyz)

    @property
    def origin_quat(self) -> tuple[float, float, float, float]:
        return tuple(float(v) for v in mat_to_quat(self.origin[:3, :3]))  # type: ignore[return-value]

    def transform_quat(
        self, position: float = 0.0, origin_quat: tuple[float, float, float, float] | None = None
    ) -> tuple[tuple[float, float, float], tuple[float, float, float, float]]:
        """parent_T_child at `position` (rad or m) as (translation, quaternion wxyz), in plain
        floats: the per-message work of the robot_state node (a few dozen multiplications per
        joint). `origin_quat` is `self.origin_quat`, passed in when cached."""
        q0 = self.origin_quat if origin_quat is None else origin_quat
        if not self.moving:
            return self.xyz, q0
        ax, ay, az = self.axis
        if self.type == "prismatic":
            r = self.origin[:3, :3]
            d = r @ np.array([ax * position, ay * position, az * position])
            return (self.xyz[0] + float(d[0]), self.xyz[1] + float(d[1]), self.xyz[2] + float(d[2])), q0
        s, c = math.sin(0.5 * position), math.cos(0.5 * position)
        return self.xyz, _quat_mul(q0, (c, ax * s, ay * s, az * s))

    def transform(self, position: float = 0.0) -> np.ndarray:
        """parent_T_child at `position` as a 4x4."""
        xyz, quat = self.transform_quat(position)
        return _homogeneous(quat_to_mat(np.array(quat)), xyz)


@dataclass(frozen=True)
class UrdfModel:
    """The kinematic tree of a URDF: links, joints, one root. Refuses what it cannot publish
    faithfully (floating/planar joints, mimic joints, several roots, a link with two parents)."""

    name: str
    root: str
    links: tuple[str, ...]
    joints: tuple[UrdfJoint, ...]

    @classmethod
    def from_string(cls, text: str) -> UrdfModel:
        try:
            robot = ET.fromstring(text)
        except ET.ParseError as exc:
            raise ConfigError(f"robot description is not XML: {exc}") from None
        if robot.tag != "robot":
            raise ConfigError(f"robot description: root element <{robot.tag}>, expected <robot>")
        links = tuple(el.get("name", "") for el in robot.findall("link"))
        joints = []
        for el in robot.findall("joint"):
            name, kind = el.get("name", ""), el.get("type", "")
            if kind not in SUPPORTED_TYPES:
                raise ConfigError(f"joint {name!r}: type {kind!r} not supported (supported: {SUPPORTED_TYPES})")
            if el.find("mimic") is not None:
                raise ConfigError(f"joint {name!r}: mimic joints are not supported")
            parent, child, origin = el.find("parent"), el.find("child"), el.find("origin")
            if parent is None or child is None:
                raise ConfigError(f"joint {name!r}: needs <parent> and <child>")
            axis_el = el.find("axis")
            axis = _floats(axis_el.get("xyz") if axis_el is not None else "1 0 0", 3, f"joint {name!r} axis")
            norm = math.sqrt(sum(v * v for v in axis))
            if kind != "fixed" and norm < 1e-9:
                raise ConfigError(f"joint {name!r}: zero axis")
            joints.append(
                UrdfJoint(
                    name=name,
                    type=kind,
                    parent=parent.get("link", ""),
                    child=child.get("link", ""),
                    xyz=_floats(origin.get("xyz") if origin is not None else None, 3, f"joint {name!r} xyz"),  # type: ignore[arg-type]
                    rpy=_floats(origin.get("rpy") if origin is not None else None, 3, f"joint {name!r} rpy"),  # type: ignore[arg-type]
                    axis=tuple(v / norm for v in axis) if norm > 0 else (1.0, 0.0, 0.0),  # type: ignore[arg-type]
                )
            )
        children = [j.child for j in joints]
        twice = sorted({c for c in children if children.count(c) > 1})
        if twice:
            raise ConfigError(f"links with more than one parent joint: {twice}")
        unknown = sorted(({j.parent for j in joints} | set(children)) - set(links))
        if unknown:
            raise ConfigError(f"joints name links that are not declared: {unknown}")
        roots = [link for link in links if link not in children]
        if len(roots) != 1:
            raise ConfigError(f"a URDF has exactly one root link, found {roots}")
        return cls(robot.get("name", ""), roots[0], links, tuple(joints))

    @classmethod
    def from_file(cls, path: str | Path) -> UrdfModel:
        return cls.from_string(Path(path).read_text())

    @property
    def moving_joints(self) -> tuple[UrdfJoint, ...]:
        return tuple(j for j in self.joints if j.moving)

    @property
    def fixed_joints(self) -> tuple[UrdfJoint, ...]:
        return tuple(j for j in self.joints if not j.moving)

    def joint_to(self, link: str) -> UrdfJoint | None:
        """The joint whose child is `link` (None for the root)."""
        return next((j for j in self.joints if j.child == link), None)

    def chain(self, base: str, tip: str) -> list[UrdfJoint]:
        """The joints from `base` down to `tip`, in order; `tip` must lie below `base`."""
        if base not in self.links or tip not in self.links:
            raise ConfigError(f"unknown link: {base if base not in self.links else tip!r}")
        out: list[UrdfJoint] = []
        link = tip
        while link != base:
            joint = self.joint_to(link)
            if joint is None:
                raise ConfigError(f"{tip!r} is not below {base!r}")
            out.append(joint)
            link = joint.parent
        return out[::-1]

    def transform(self, base: str, tip: str, positions: Mapping[str, float]) -> np.ndarray:
        """base_T_tip with the moving joints at `positions` (by joint name; every moving joint on
        the chain must have one)."""
        t = np.eye(4)
        for joint in self.chain(base, tip):
            if joint.moving and joint.name not in positions:
                raise ConfigError(f"no position for joint {joint.name!r}")
            t = t @ joint.transform(positions.get(joint.name, 0.0))
        return t


# --- generating EVA's URDF ------------------------------------------------------------------

GENERATOR = "tools/make_urdf.py"


def _num(v: float) -> str:
    v = float(v) + 0.0  # no "-0.0"
    return repr(round(v, 15)) if abs(v) >= 1e-15 else "0.0"


def rpy_of(rot: np.ndarray) -> tuple[float, float, float]:
    """URDF `rpy` of a rotation matrix, exact at gimbal lock too (pitch = +-pi/2: roll 0, the
    whole turn about z in yaw), where rotations.mat_to_ypr's arcsin form loses the yaw/roll split;
    a camera looking straight down its parent's z axis is such a mount."""
    r = np.asarray(rot, dtype=float)
    cos_pitch = math.hypot(r[0, 0], r[1, 0])
    pitch = math.atan2(-r[2, 0], cos_pitch)
    if cos_pitch > 1e-9:
        return math.atan2(r[2, 1], r[2, 2]), pitch, math.atan2(r[1, 0], r[0, 0])
    return 0.0, pitch, math.atan2(-r[0, 1], r[1, 1])


def _origin_attrs(t: np.ndarray) -> dict[str, str]:
    roll, pitch, yaw = rpy_of(nearest_rotation(t[:3, :3]))
    return {"xyz": " ".join(_num(v) for v in t[:3, 3]), "rpy": " ".join(_num(v) for v in (roll, pitch, yaw))}


def _joint(robot: ET.Element, name: str, kind: str, parent: str, child: str, origin: dict[str, str]) -> ET.Element:
    el = ET.SubElement(robot, "joint", {"name": name, "type": kind})
    ET.SubElement(el, "origin", origin)
    ET.SubElement(el, "parent", {"link": parent})
    ET.SubElement(el, "child", {"link": child})
    return el


def arm_link(arm: Arm, x5_link: str) -> str:
    """The frame id of an X5 link of `arm`: `base_link` is the arm base (`<arm>_base`)."""
    return arm.hw_frame if x5_link == BASE_LINK else f"{arm.value}_{x5_link}"


def eva_urdf(mounts: EvaMounts | None = None, x5_model: str | Path = X5_MODEL_PATH) -> str:
    """The bimanual EVA URDF text (deterministic: the committed file is this function's output)."""
    mounts = EvaMounts.calibrated() if mounts is None else mounts
    x5 = ET.fromstring(Path(x5_model).read_text())
    x5_joints = UrdfModel.from_string(ET.tostring(x5, encoding="unicode"))
    robot = ET.Element("robot", {"name": "eva"})
    robot.append(
        ET.Comment(
            f" GENERATED by {GENERATOR} from egomimic_hw ({Path(x5_model).name}, description.X5_LIMITS, "
            "urdf.EvaMounts); do not edit, regenerate. Frames and mounts: egomimic_hw/urdf.py. "
        )
    )
    ET.SubElement(robot, "link", {"name": ROOT_FRAME})
    limits = X5_LIMITS
    for arm in ARMS:
        for src in x5.findall("link"):
            link = ET.SubElement(robot, "link", {"name": arm_link(arm, src.get("name", ""))})
            inertial = src.find("inertial")
            if inertial is not None:
                copy = ET.SubElement(link, "inertial")
                for part in inertial:
                    ET.SubElement(copy, part.tag, dict(part.attrib))
        _joint(
            robot,
            f"{arm.value}_base_mount",
            "fixed",
            ROOT_FRAME,
            arm.hw_frame,
            _origin_attrs(mounts.eva_base_T_arm_base(arm)),
        )
        for j in x5_joints.joints:
            origin = {"xyz": " ".join(_num(v) for v in j.xyz), "rpy": " ".join(_num(v) for v in j.rpy)}
            el = _joint(robot, f"{arm.value}_{j.name}", j.type, arm_link(arm, j.parent), arm_link(arm, j.child), origin)
            if j.moving:
                i = int(j.name.removeprefix("joint")) - 1
                if not 0 <= i < JOINTS_PER_ARM:
                    raise ConfigError(f"X5 joint {j.name!r} is not joint1..joint{JOINTS_PER_ARM}")
                ET.SubElement(el, "axis", {"xyz": " ".join(_num(v) for v in j.axis)})
                ET.SubElement(
                    el,
                    "limit",
                    {
                        "lower": _num(limits.joint_pos_min_rad[i]),
                        "upper": _num(limits.joint_pos_max_rad[i]),
                        "effort": _num(limits.joint_torque_max_nm[i]),
                        "velocity": _num(limits.joint_vel_max_rad_s[i]),
                    },
                )
        cam = WRIST_CAMERAS[arm]
        link6_T_optical = np.asarray(mounts.link6_T_wrist_optical[arm], dtype=float)
        _camera(robot, cam, arm_link(arm, EEF_LINK), link6_T_optical)
    # The head camera hangs from the root: eva_base_T_optical = eva_base_T_left_base @ left_base_T_optical.
    eva_T_optical = mounts.eva_base_T_arm_base(Arm.LEFT) @ mounts.head_optical_pose(Arm.LEFT)
    _camera(robot, HEAD_CAMERA, ROOT_FRAME, eva_T_optical)
    ET.indent(robot, space="  ")
    return '<?xml version="1.0"?>\n' + ET.tostring(robot, encoding="unicode") + "\n"


def _camera(robot: ET.Element, cam: str, parent: str, parent_T_optical: np.ndarray) -> None:
    body_T_optical = _homogeneous(OPTICAL_IN_BODY, (0.0, 0.0, 0.0))
    parent_T_body = parent_T_optical @ np.linalg.inv(body_T_optical)
    ET.SubElement(robot, "link", {"name": camera_link(cam)})
    ET.SubElement(robot, "link", {"name": optical_frame(cam)})
    _joint(robot, f"{cam}_mount", "fixed", parent, camera_link(cam), _origin_attrs(parent_T_body))
    _joint(robot, f"{cam}_optical_joint", "fixed", camera_link(cam), optical_frame(cam), _origin_attrs(body_T_optical))


def camera_link(cam: str) -> str:
    return f"{cam}_link"


def optical_frame(cam: str) -> str:
    """The frame id of `cam`'s images and camera_info (egomimic_nodes.camera_node)."""
    return f"{cam}_optical"
