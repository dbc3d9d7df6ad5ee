"""Watches the running graph for `make run`: stream rates and latencies, gate status, driver
counters, and the commanded vs measured end-effector paths.

High-rate streams are subscribed raw (CDR bytes, no deserialization): every message watched
here starts with a std_msgs/Header, whose stamp sits right after the 4-byte CDR encapsulation
header, so latency costs a struct unpack instead of a deserialization.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import deque

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.qos import QoSProfile
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState

from egomimic_hw.description import ARMS, CAMERAS, JOINTS_PER_ARM
from egomimic_launch.stats import RECENT_S, MomentStats, StreamAccumulator
from egomimic_msgs.msg import BimanualCommand, GateStatus, RecorderStatus
from egomimic_nodes import topics
from egomimic_nodes.diagnostics import local_name

_STAMP = struct.Struct("<iI")
OBSERVER_DEPTH = 200
"""Reader history of the small streams: 2 s of a 100 Hz stream."""


def header_stamp_s(raw: bytes) -> float:
    """header.stamp of a CDR (little-endian) message whose first field is a Header."""
    sec, nsec = _STAMP.unpack_from(raw, 4)
    return sec + nsec * 1e-9


WATCHED = (
    topics.CAMERA_INFO,
    topics.JOINT_STATES,
    topics.EE_POSE_DATASET,
    topics.POLICY_ACTION,
    topics.COMMAND_PROPOSED,
    topics.JOINT_COMMAND,
)
"""The streams whose rate, gaps and latency the run summary reports, in its order. The cameras
are watched through camera_info, not image_raw: the camera node publishes it with every frame,
with the frame's capture stamp, from an outbox its capture thread fills (its drops and send
failures are counted in the camera's diagnostics), so its rate and gaps are the frames' and its
latency theirs plus the outbox's hand-over. Taking the images
themselves made the launcher receive 83 MB/s of pixels it never looks at: the launcher took
18-20 % of one core with them and 9-11 % without (the scripted graph, alternate runs of 20 s,
2026-12-06)."""


def watched_streams(namespace: str) -> list[tuple[str, topics.Topic]]:
    """(fully qualified name, topic) of every watched stream: each camera's, each arm's."""
    streams = []
    for topic in WATCHED:
        if "{cam}" in topic.template:
            streams += [(topic.resolve(namespace, cam=cam), topic) for cam in CAMERAS]
        elif "{arm}" in topic.template:
            streams += [(topic.resolve(namespace, arm=arm), topic) for arm in ARMS]
        else:
            streams.append((topic.resolve(namespace), topic))
    return streams


HOLD_LOOK_BACK_S = 1.0
"""The summary shows every watched stream in this long before the gate's first HOLD..."""
HOLD_LOOK_SETTLE_S = 0.5
"""...taken once the HOLD is this old (what was written before it has arrived by then)."""

TRACK_KEEP_S = 60.0
"""The commanded and measured paths are kept for the last minute (tracking is judged on it)."""


class GraphObserver:
    """Bounded memory however long the run (a soak is ten minutes): per-stream accumulators
    (stats.StreamAccumulator) and the last TRACK_KEEP_S of the paths."""

    def __init__(self, node, namespace: str, task=None):
        """task: an egomimic_hw.sim_task.TaskSuccess to feed once per policy action (the control
        step) with the newest measured poses and grippers; None without the simulated task."""
        self.node = node
        self.namespace = namespace
        self.task = task
        self.task_first_action_s: float | None = None
        self.task_success_s: float | None = None
        """Stamps (s) of the first action fed to the task and of the action it succeeded at."""
        self._meas_now: dict[str, tuple[float, float, float]] = {}
        self._gripper_now: dict[str, float] = {}
        self.lock = threading.Lock()
        self.streams: dict[str, StreamAccumulator] = {}
        self.topic_of: dict[str, topics.Topic] = {}
        self.gate_status: GateStatus | None = None
        self.recorder_status: RecorderStatus | None = None
        """The recorder's newest status (record:=true): its final one arrives while it shuts down."""
        self.gate_history: list[tuple[float, int, str]] = []
        self.first_hold_s: float | None = None
        """The gate's stamp (system clock) of its first HOLD status."""
        self.before_hold: dict[str, MomentStats] | None = None
        """Every watched stream in the HOLD_LOOK_BACK_S before first_hold_s (see hold_look_back)."""
        self.driver_diag: dict[str, dict[str, str]] = {}
        self.node_diag: dict[str, dict[str, str]] = {}
        """The newest /diagnostics values of the gate and the policy (their own late wake-ups)."""
        self.cmd_path = {
            arm.value: (deque(maxlen=int(TRACK_KEEP_S * 30)), deque(maxlen=int(TRACK_KEEP_S * 30))) for arm in ARMS
        }
        self.meas_path = {
            arm.value: (deque(maxlen=int(TRACK_KEEP_S * 100)), deque(maxlen=int(TRACK_KEEP_S * 100))) for arm in ARMS
        }
        # The streams are taken raw in a batch on each poll() (egomimic_nodes/taken.py), never one
        # executor callback per sample; arrival = the DDS reception time in the message info, so
        # a poll that comes late changes no rate and no latency. The few small messages whose
        # content matters are deserialized from the same raw bytes.
        from egomimic_nodes.taken import SequenceGaps, TakenSubscriptions

        self._taken = TakenSubscriptions(node.context, f"{node.get_name()}_observer")
        self._gaps = SequenceGaps()
        self._streams = []
        content = {topics.POLICY_ACTION.resolve(namespace): (BimanualCommand, self._on_action)}
        for arm in ARMS:
            content[topics.EE_POSE_DATASET.resolve(namespace, arm=arm)] = (PoseStamped, self._meas_cb(arm.value))
            if task is not None:
                content[topics.JOINT_STATES.resolve(namespace, arm=arm)] = (JointState, self._gripper_cb(arm.value))
        for name, topic in watched_streams(namespace):
            self.streams[name] = StreamAccumulator(name, topic.rate_hz)
            self.topic_of[name] = topic
            # A history deep enough for the time between two polls, with margin for a stalled
            # launcher: 2 s of a 100 Hz stream.
            profile = QoSProfile(
                history=topic.qos.history,
                depth=OBSERVER_DEPTH,
                reliability=topic.qos.reliability,
                durability=topic.qos.durability,
            )
            self._streams.append((name, self._taken.subscribe(topic.type, name, profile, raw=True), content.get(name)))
        node.create_subscription(
            GateStatus, topics.SAFETY_STATUS.resolve(namespace), self._on_status, topics.SAFETY_STATUS.qos
        )
        node.create_subscription(
            RecorderStatus, topics.RECORDER_STATUS.resolve(namespace), self._on_recorder, topics.RECORDER_STATUS.qos
        )
        node.create_subscription(DiagnosticArray, topics.DIAGNOSTICS.name(), self._on_diag, 50)

    def poll(self) -> None:
        """Account every sample received since the last poll."""
        with self.lock:
            for topic, sub, content in self._streams:
                add = self.streams[topic].add
                for raw, info in self._taken.take(sub, limit=10_000):
                    received = (info.get("received_timestamp") or time.time_ns()) * 1e-9
                    source = info.get("source_timestamp")
                    missed = self._gaps.count(topic, info)
                    add(received, received - header_stamp_s(raw), source * 1e-9 if source else None, missed)
                    if content is not None:
                        msg_type, handler = content
                        handler(deserialize_message(raw, msg_type))
            self.look_back_at_hold()

    def look_back_at_hold(self, final: bool = False) -> None:
        """Take the look back at the first HOLD (hold_look_back) once: while the run goes on, when
        the HOLD is HOLD_LOOK_SETTLE_S old; at its end (`final`), a HOLD of its last moments while
        the recent samples still cover the look back. Call with `lock` held."""
        if self.first_hold_s is None or self.before_hold is not None:
            return
        age = time.time() - self.first_hold_s
        if (age < RECENT_S - HOLD_LOOK_BACK_S) if final else (age > HOLD_LOOK_SETTLE_S):
            self.before_hold = self.hold_look_back()

    def hold_look_back(self) -> dict[str, MomentStats]:
        """What each watched stream's writer did in the second before the first HOLD, by the
        writers' own clocks: which hop of the path a late or missing input came from (a HOLD
        on a late command whose command/proposed was written on time was delayed after the
        frames node), or whether every stream stalled at once (the machine). Call with `lock`
        held, within RECENT_S of the HOLD."""
        t = self.first_hold_s
        return {name: acc.moment(t - HOLD_LOOK_BACK_S, t) for name, acc in self.streams.items()}

    def _on_status(self, msg: GateStatus) -> None:
        with self.lock:
            if self.gate_status is None or msg.state != self.gate_status.state:
                self.gate_history.append((time.time(), msg.state, msg.detail))
                if msg.state == GateStatus.HOLD and self.first_hold_s is None:
                    self.first_hold_s = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            self.gate_status = msg

    def _on_recorder(self, msg: RecorderStatus) -> None:
        with self.lock:
            self.recorder_status = msg

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            name = local_name(st.name, self.namespace)  # another robot's entries are not ours
            if name is None:
                continue
            if name.startswith("driver/"):
                with self.lock:
                    self.driver_diag[name.split("/", 1)[1]] = {kv.key: kv.value for kv in st.values} | {
                        "message": st.message
                    }
            elif name in ("safety_gate", "policy"):
                with self.lock:
                    self.node_diag[name] = {kv.key: kv.value for kv in st.values} | {"message": st.message}

    def _on_action(self, msg: BimanualCommand) -> None:
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        for arm in (a.value for a in ARMS):
            p = getattr(msg, arm).pose.position
            ts, xs = self.cmd_path[arm]
            ts.append(t)
            xs.append((p.x, p.y, p.z))
        if self.task is not None and len(self._meas_now) == len(self._gripper_now) == len(ARMS):
            left, right = (a.value for a in ARMS)
            if self.task_first_action_s is None:
                self.task_first_action_s = t
            done = self.task.succeeded
            self.task.update(
                self._meas_now[left], self._gripper_now[left], self._meas_now[right], self._gripper_now[right]
            )
            if self.task.succeeded and not done:
                self.task_success_s = t

    def measured_positions(self):
        """(2, 3) newest measured link6 positions, left then right (None before both are seen);
        call with `lock` held."""
        if len(self._meas_now) < len(ARMS):
            return None
        import numpy as np

        return np.array([self._meas_now[arm.value] for arm in ARMS], dtype=float)

    def _meas_cb(self, arm: str):
        def cb(msg: PoseStamped) -> None:
            t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            p = msg.pose.position
            ts, xs = self.meas_path[arm]
            ts.append(t)
            xs.append((p.x, p.y, p.z))
            self._meas_now[arm] = (p.x, p.y, p.z)

        return cb

    def _gripper_cb(self, arm: str):
        def cb(msg: JointState) -> None:
            if len(msg.position) > JOINTS_PER_ARM:  # the gripper follows the six joints, normalized
                self._gripper_now[arm] = float(msg.position[JOINTS_PER_ARM])

        return cb

    def set_window(self, begin_s: float) -> None:
        """Statistics from `begin_s` on (wall clock, as the DDS reception stamps)."""
        with self.lock:
            for acc in self.streams.values():
                acc.set_window(begin_s)

    def end_window(self, end_s: float) -> None:
        with self.lock:
            for acc in self.streams.values():
                acc.end_window(end_s)

    def recent_rate(self, topic: str, window_s: float = 2.0) -> float:
        acc = self.streams.get(topic)
        return acc.recent_rate(time.time(), window_s) if acc is not None else 0.0
