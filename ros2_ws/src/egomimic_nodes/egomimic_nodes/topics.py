"""Every topic and service of the EVA graph, once: name, type, QoS and nominal rate.

The names are the interface contract (the README's Architecture section lists them); nodes,
the launcher's observer and summary, tests and benches take them from here instead of writing
the strings.
Names are relative to the robot namespace (`/eva` by default) unless they start with `/`.
A per-arm or per-camera name is a template: `JOINT_STATES.name(arm=Arm.LEFT)` is
"left/joint_states"; `resolve(ns)` prefixes a namespace for tools that are not a node in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, JointState
from std_msgs.msg import Empty, String
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage
from visualization_msgs.msg import MarkerArray

from egomimic_hw.description import CONTROL_RATE_HZ, Arm
from egomimic_msgs.msg import ActionChunk, BimanualCommand, CameraHealth, GateStatus, RecorderStatus
from egomimic_nodes import qos

STATE_RATE_HZ = 100.0
"""The drivers' joint_states (`rate_hz` of the driver)."""
POSE_RATE_HZ = STATE_RATE_HZ / 3
"""ee_pose: every third state tick (the driver's `pose_rate_hz` rounds to it)."""
CAMERA_RATE_HZ = 30.0
"""The cameras' frame rate (the camera node's `rate_hz`). The control tick is
egomimic_hw.description.CONTROL_RATE_HZ: one action per tick, one joint command per arm."""


def type_name(msg_type: type) -> str:
    """`pkg/msg/Type` of a generated message class (as bags and the web view name schemas)."""
    return f"{msg_type.__module__.split('.')[0]}/msg/{msg_type.__name__}"


@dataclass(frozen=True)
class Topic:
    template: str
    type: type
    qos: QoSProfile
    rate_hz: float | None = None
    """Nominal rate (None: on events, e.g. a status on change)."""
    writer_depth: int | None = None
    """History the publishers keep when it must be deeper than the readers' (`qos.depth`)."""

    @property
    def writer_qos(self) -> QoSProfile:
        """The QoS the publishers offer: `qos`, with `writer_depth` where set."""
        if self.writer_depth is None:
            return self.qos
        return QoSProfile(
            history=self.qos.history,
            depth=self.writer_depth,
            reliability=self.qos.reliability,
            durability=self.qos.durability,
        )

    def name(self, arm: Arm | str | None = None, cam: str | None = None) -> str:
        """The topic name relative to the robot namespace (absolute if the template is)."""
        return self.template.format(arm=Arm(arm).value if arm is not None else "{arm}", cam=cam or "{cam}")

    def resolve(self, namespace: str, arm: Arm | str | None = None, cam: str | None = None) -> str:
        """The fully qualified name in `namespace` (e.g. "eva" -> "/eva/left/joint_states")."""
        name = self.name(arm, cam)
        return name if name.startswith("/") else f"/{namespace.strip('/')}/{name}".replace("//", "/")


@dataclass(frozen=True)
class Service:
    name: str
    type: type

    def resolve(self, namespace: str, arm: Arm | str | None = None) -> str:
        name = self.name.format(arm=Arm(arm).value) if arm is not None else self.name
        return f"/{namespace.strip('/')}/{name}".replace("//", "/")


IMAGE_RAW = Topic("cameras/{cam}/image_raw", Image, qos.SENSOR, CAMERA_RATE_HZ)
IMAGE_COMPRESSED = Topic("cameras/{cam}/image_raw/compressed", CompressedImage, qos.SENSOR, CAMERA_RATE_HZ)
CAMERA_SMALL_WRITER_DEPTH = int(CAMERA_RATE_HZ)
"""camera_info and health are written beside the images, in the camera node's shared-memory
segment, which image traffic recycles in about 0.1 s: a reader stopped longer finds those samples
gone and a reliable writer resends only what its history holds. One second of history (small
messages) lets the bag node, stopped for 0.7 s, lose none (test_bag.py; 80 lost with 5)."""
CAMERA_INFO = Topic(
    "cameras/{cam}/camera_info", CameraInfo, qos.SENSOR, CAMERA_RATE_HZ, writer_depth=CAMERA_SMALL_WRITER_DEPTH
)
CAMERA_HEALTH = Topic(
    "cameras/{cam}/health", CameraHealth, qos.SENSOR, CAMERA_RATE_HZ, writer_depth=CAMERA_SMALL_WRITER_DEPTH
)
JOINT_STATES = Topic("{arm}/joint_states", JointState, qos.SENSOR, STATE_RATE_HZ)
EE_POSE = Topic("{arm}/ee_pose", PoseStamped, qos.SENSOR, POSE_RATE_HZ)
EE_POSE_DATASET = Topic("{arm}/ee_pose_dataset", PoseStamped, qos.SENSOR, POSE_RATE_HZ)
POLICY_ACTION = Topic("policy/action", BimanualCommand, qos.COMMAND, CONTROL_RATE_HZ)
POLICY_CHUNK = Topic("policy/chunk", ActionChunk, qos.COMMAND)
COMMAND_PROPOSED = Topic("command/proposed", BimanualCommand, qos.COMMAND, CONTROL_RATE_HZ)
JOINT_COMMAND = Topic("{arm}/joint_command", JointState, qos.COMMAND, CONTROL_RATE_HZ)
SAFETY_STATUS = Topic("safety/status", GateStatus, qos.LATCHED)
RECORDER_STATUS = Topic("recorder/status", RecorderStatus, qos.LATCHED)
DIAGNOSTICS = Topic("/diagnostics", DiagnosticArray, QoSProfile(depth=10))
TF = Topic("/tf", TFMessage, qos.TF, 2 * STATE_RATE_HZ)
"""The robot_state node: one message per joint_states message of either arm, stamped with it."""
GRAPH_REFRESH = Topic("_graph_refresh", Empty, QoSProfile(depth=1))
"""Hidden (leading underscore): a publisher is created and destroyed on it now and then so that
rmw republishes the process's node list (egomimic_nodes.graph_refresh); nothing is ever sent."""
TF_STATIC = Topic("/tf_static", TFMessage, qos.TF_STATIC)
"""Mounts, fixed joints and camera optical frames, once (latched)."""
ROBOT_DESCRIPTION = Topic("robot_description", String, qos.LATCHED)
"""The URDF text (latched), for rviz's RobotModel display."""
VIZ_MARKERS = Topic("viz/markers", MarkerArray, qos.COMMAND, 10.0)
"""The monitor node's rviz markers (egomimic_nodes.markers), at its rate_hz."""

SAFETY_ARM = Service("safety/arm", Trigger)
SAFETY_DISARM = Service("safety/disarm", Trigger)
SAFETY_ESTOP = Service("safety/estop", Trigger)
SAFETY_RESET = Service("safety/reset", Trigger)
POLICY_RESET = Service("policy/reset", Trigger)
RECORDER_START = Service("recorder/start", Trigger)
RECORDER_STOP = Service("recorder/stop", Trigger)
ARM_HOME = Service("{arm}/home", Trigger)
"""A driver's operator action (not in the contract's table): drive the arm to its home pose."""

TOPICS = (
    IMAGE_RAW,
    IMAGE_COMPRESSED,
    CAMERA_INFO,
    CAMERA_HEALTH,
    JOINT_STATES,
    EE_POSE,
    EE_POSE_DATASET,
    POLICY_ACTION,
    POLICY_CHUNK,
    COMMAND_PROPOSED,
    JOINT_COMMAND,
    SAFETY_STATUS,
    RECORDER_STATUS,
    DIAGNOSTICS,
    TF,
    TF_STATIC,
    ROBOT_DESCRIPTION,
    VIZ_MARKERS,
)
SERVICES = (SAFETY_ARM, SAFETY_DISARM, SAFETY_ESTOP, SAFETY_RESET, POLICY_RESET, RECORDER_START, RECORDER_STOP)
