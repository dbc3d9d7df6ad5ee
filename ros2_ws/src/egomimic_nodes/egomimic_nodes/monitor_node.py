"""Monitor node: the rviz markers of the graph (`viz/markers`, visualization_msgs/MarkerArray).

  in:  <arm>/ee_pose (measured), command/proposed (proposed), <arm>/joint_command (forwarded:
       FK at link6), policy/chunk (the current chunk's path), safety/status (the gate's state)
  out: viz/markers at `rate_hz`: per arm the measured, proposed and forwarded end-effector
       poses, the chunk as a path and the gate's workspace box; the gate state as text
       (egomimic_nodes.markers says what each looks like)

Off the control path: it only reads. Each input keeps its latest message (one slot: a message
replaced before it was drawn is counted as superseded, never queued), FK runs at the draw rate,
not per message, and the markers go out through an Outbox (bounded, drops counted). The
workspace boxes are the gate's own parameters, read once from the gate at start (asked again
until it answers, a request unanswered for WORKSPACE_ASK_TIMEOUT_S dropped). Counts are on
/diagnostics.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Point, PoseStamped
from rcl_interfaces.srv import GetParameters
from rclpy.node import Node
from sensor_msgs.msg import JointState
from visualization_msgs.msg import Marker, MarkerArray

from egomimic_hw.description import ARMS, JOINTS_PER_ARM, Arm
from egomimic_msgs.msg import ActionChunk, BimanualCommand, GateStatus
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.markers import MarkerSpec, SceneState, scene
from egomimic_nodes.msg_convert import pose_to_array
from egomimic_nodes.outbox import Outbox, close_all
from egomimic_nodes.params import declare_config, field_meta
from egomimic_nodes.spin import run_node
from egomimic_safety.gate import GateState

GATE_STATES = {int(s): s.name for s in GateState}
"""GateStatus.state -> its name (GateState: tested equal to the message's constants)."""
MARKER_TYPES = {
    "sphere": Marker.SPHERE,
    "arrow": Marker.ARROW,
    "line_strip": Marker.LINE_STRIP,
    "line_list": Marker.LINE_LIST,
    "text": Marker.TEXT_VIEW_FACING,
}
GATE_NODE = "safety_gate"
WORKSPACE_PARAMS = {arm: (f"workspace_{arm.value}_min_m", f"workspace_{arm.value}_max_m") for arm in ARMS}
WORKSPACE_ASK_TIMEOUT_S = 2.0
"""A workspace request unanswered this long is dropped and asked again: a service reply is lost
when the gate's response writer has not matched this client's reader yet (rmw: "failed to send
response (timeout)"); fresh clone fc77 ran 25 s without workspace boxes, the request pending."""


@dataclass(frozen=True)
class MonitorConfig:
    rate_hz: float = field(default=10.0, metadata=field_meta("how often the markers are published, Hz", (0.5, 60.0)))
    chunk_rows: int = field(
        default=100, metadata=field_meta("at most this many rows of the chunk are drawn (evenly spaced)", (2, 1000))
    )


def to_marker(spec: MarkerSpec, stamp) -> Marker:
    m = Marker()
    m.header.frame_id = spec.frame_id
    m.header.stamp = stamp
    m.ns, m.id, m.type, m.action = spec.ns, spec.id, MARKER_TYPES[spec.kind], Marker.ADD
    m.pose.orientation.w = 1.0
    m.scale.x, m.scale.y, m.scale.z = spec.scale
    m.color.r, m.color.g, m.color.b, m.color.a = spec.color
    if spec.kind in ("sphere", "text"):
        m.pose.position.x, m.pose.position.y, m.pose.position.z = spec.points[0]
    else:
        m.points = [Point(x=p[0], y=p[1], z=p[2]) for p in spec.points]
    m.text = spec.text
    return m


class MonitorNode(Node):
    PARAMETERS = ((MonitorConfig, "", ()),)

    def __init__(self):
        super().__init__("monitor")
        self.config: MonitorConfig = declare_config(self, MonitorConfig)
        self.state = SceneState()
        self.joints: dict[Arm, np.ndarray | None] = dict.fromkeys(ARMS)
        self.counts: Counter[str] = Counter()
        self._fresh: set[str] = set()
        self._kinematics = None
        for arm in ARMS:
            self.create_subscription(PoseStamped, topics.EE_POSE.name(arm), self._on_pose(arm), topics.EE_POSE.qos)
            self.create_subscription(
                JointState, topics.JOINT_COMMAND.name(arm), self._on_joint_command(arm), topics.JOINT_COMMAND.qos
            )
        self.create_subscription(
            BimanualCommand, topics.COMMAND_PROPOSED.name(), self._on_proposed, topics.COMMAND_PROPOSED.qos
        )
        self.create_subscription(ActionChunk, topics.POLICY_CHUNK.name(), self._on_chunk, topics.POLICY_CHUNK.qos)
        self.create_subscription(GateStatus, topics.SAFETY_STATUS.name(), self._on_status, topics.SAFETY_STATUS.qos)
        self._pub = Outbox(self.create_publisher(MarkerArray, topics.VIZ_MARKERS.name(), topics.VIZ_MARKERS.qos))
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        )
        self._gate_params = self.create_client(GetParameters, f"{GATE_NODE}/get_parameters")
        self._workspace_request = None  # (future, monotonic time sent) while one is pending
        self.create_timer(1.0 / self.config.rate_hz, self._draw)
        self.create_timer(1.0, self._publish_diagnostics)

    # --- inputs: latest only ---

    def _seen(self, key: str) -> None:
        self.counts[f"{key}.received"] += 1
        if key in self._fresh:
            self.counts[f"{key}.superseded"] += 1
        self._fresh.add(key)

    def _on_pose(self, arm: Arm):
        def cb(msg: PoseStamped) -> None:
            self._seen(topics.EE_POSE.name(arm))
            if msg.header.frame_id == arm.hw_frame:
                self.state.measured[arm] = pose_to_array(msg.pose)

        return cb

    def _on_joint_command(self, arm: Arm):
        def cb(msg: JointState) -> None:
            self._seen(topics.JOINT_COMMAND.name(arm))
            if len(msg.position) >= JOINTS_PER_ARM:
                self.joints[arm] = np.asarray(msg.position[:JOINTS_PER_ARM], float)

        return cb

    def _on_proposed(self, msg: BimanualCommand) -> None:
        self._seen(topics.COMMAND_PROPOSED.name())
        for arm in ARMS:
            pose: PoseStamped = getattr(msg, arm.value)
            if pose.header.frame_id == arm.hw_frame:
                self.state.proposed[arm] = pose_to_array(pose.pose)

    def _on_chunk(self, msg: ActionChunk) -> None:
        self._seen(topics.POLICY_CHUNK.name())
        rows = msg.rows
        if len(rows) > self.config.chunk_rows:
            rows = [rows[int(i)] for i in np.linspace(0, len(rows) - 1, self.config.chunk_rows)]
        for arm in ARMS:
            poses = [getattr(r, arm.value) for r in rows]
            if poses and all(p.header.frame_id in (arm.dataset_frame, arm.hw_frame) for p in poses):
                # positions are frame-independent between the two (egomimic_hw.frames)
                self.state.chunk[arm] = np.array([pose_to_array(p.pose)[:3] for p in poses])

    def _on_status(self, msg: GateStatus) -> None:
        self._seen(topics.SAFETY_STATUS.name())
        self.state.gate_state = GATE_STATES.get(msg.state, f"state {msg.state}")
        self.state.gate_reason = msg.reason

    # --- output ---

    def _ask_workspace(self) -> None:
        if self._workspace_request is not None:
            future, sent = self._workspace_request
            if time.monotonic() - sent < WORKSPACE_ASK_TIMEOUT_S:
                return
            self._gate_params.remove_pending_request(future)
            self._workspace_request = None
            self.counts["workspace_requests_unanswered"] += 1
            self.get_logger().warning(
                f"{GATE_NODE} did not answer the workspace request within {WORKSPACE_ASK_TIMEOUT_S:g} s; asking again",
                throttle_duration_sec=10.0,
            )
        if not self._gate_params.service_is_ready():
            return
        request = GetParameters.Request(names=[n for pair in WORKSPACE_PARAMS.values() for n in pair])
        future = self._gate_params.call_async(request)
        self._workspace_request = (future, time.monotonic())
        future.add_done_callback(self._on_workspace)

    def _on_workspace(self, future) -> None:
        if self._workspace_request is None or self._workspace_request[0] is not future:
            return  # an answer to a request already given up on
        self._workspace_request = None
        try:
            values = [list(v.double_array_value) for v in future.result().values]
        except Exception as exc:  # noqa: BLE001 - retried at the next draw
            self.get_logger().warning(f"cannot read the gate's workspace: {exc}", throttle_duration_sec=10.0)
            return
        if len(values) == 4 and all(len(v) == 3 for v in values):
            self.state.workspaces = {arm: (values[2 * i], values[2 * i + 1]) for i, arm in enumerate(ARMS)}
            self.get_logger().info(f"workspace boxes from {GATE_NODE}: {self.state.workspaces}")

    def _forwarded_poses(self) -> None:
        if self._kinematics is None:
            from egomimic_hw.kinematics import ArmKinematics

            self._kinematics = ArmKinematics()
        for arm in ARMS:
            if self.joints[arm] is not None:
                self.state.forwarded[arm] = self._kinematics.forward(self.joints[arm])

    def _draw(self) -> None:
        if not self.state.workspaces:
            self._ask_workspace()
        self._forwarded_poses()
        self._fresh.clear()
        stamp = self.get_clock().now().to_msg()
        out = MarkerArray()
        clear = Marker()
        clear.action = Marker.DELETEALL
        out.markers = [clear, *(to_marker(spec, stamp) for spec in scene(self.state))]
        self._pub.publish(out)
        self.counts["frames_drawn"] += 1

    def _publish_diagnostics(self) -> None:
        values = dict(sorted(self.counts.items()))
        values.update({f"{topics.VIZ_MARKERS.name()}.{k}": v for k, v in self._pub.stats().items()})
        values["workspace"] = "from the gate" if self.state.workspaces else "not read yet"
        self._pub_diag.publish(
            diagnostics.array(
                self, diagnostics.status("monitor", "monitor", diagnostics.OK, "publishing viz/markers", values)
            )
        )

    def on_exit(self) -> None:
        close_all((self._pub, self._pub_diag))


def main(args=None) -> int:
    return run_node(MonitorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
