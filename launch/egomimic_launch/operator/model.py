"""What the operator console shows, as plain values: fed samples and status messages in,
a frozen `Snapshot` out. No DDS and no textual here: `link.py` feeds it from the graph,
`app.py` renders it, and the unit tests feed it by hand with explicit times.

Times are wall-clock seconds (`time.time()`), the clock of the DDS reception stamps the link
feeds in, so a stream's age is how long ago this machine last received it, whatever the
publisher's clock says.
"""

from __future__ import annotations

import math
import shutil
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from egomimic_data.recording import RecorderState
from egomimic_data.recording_config import RecorderConfig
from egomimic_hw.description import ARMS, CAMERAS
from egomimic_msgs.msg import GateStatus, RecorderStatus
from egomimic_nodes import topics
from egomimic_nodes.diagnostics import local_name
from egomimic_safety.gate import GateState

RATE_WINDOW_S = 2.0
"""A stream's rate is its arrivals in the last RATE_WINDOW_S, divided by it."""
STREAMS = (topics.JOINT_STATES, topics.EE_POSE, topics.CAMERA_INFO, topics.POLICY_ACTION, topics.COMMAND_PROPOSED)
"""The streams of the console's table, in its order (each arm's, each camera's). A camera is
counted by its camera_info, published with every frame (ours and stock drivers alike): a few
hundred bytes instead of copying 80 MB/s of images on the robot PC."""
POLICY_DIAGNOSTIC = "policy"
"""The policy node's /diagnostics status (local name; policy_node._publish_diagnostics)."""
GATE_STATES = {int(s): s.name for s in GateState}
"""GateStatus.state -> its name (GateState: tested equal to the message's constants)."""
RECORDER_STATES = {int(s): s.name for s in RecorderState}


def console_streams(namespace: str) -> list[tuple[str, str, topics.Topic]]:
    """(label, fully qualified name, topic) of every stream of the table; the label is the name
    relative to the namespace ("left/joint_states")."""
    out = []
    for topic in STREAMS:
        if "{cam}" in topic.template:
            out += [(topic.name(cam=cam), topic.resolve(namespace, cam=cam), topic) for cam in CAMERAS]
        elif "{arm}" in topic.template:
            out += [(topic.name(arm=arm), topic.resolve(namespace, arm=arm), topic) for arm in ARMS]
        else:
            out.append((topic.name(), topic.resolve(namespace), topic))
    return out


@dataclass(frozen=True)
class StreamRow:
    label: str
    nominal_hz: float | None
    rate_hz: float
    """Arrivals in the last RATE_WINDOW_S / RATE_WINDOW_S."""
    age_s: float | None
    """Since the newest arrival; None: never received."""


@dataclass(frozen=True)
class GateView:
    state: str
    reason: str
    detail: str
    forwarded: int
    rejected: int
    age_s: float


@dataclass(frozen=True)
class PolicyView:
    status: str
    queue_rows: str
    latency_p50_ms: str
    latency_max_ms: str
    message: str
    age_s: float


@dataclass(frozen=True)
class RecorderView:
    state: str
    task_name: str
    frames: int
    frames_committed: int
    dropped: int
    episode_s: float
    """frames / the recorder's default fps (RecorderConfig.fps: the control rate)."""
    episode_path: str
    detail: str
    age_s: float


@dataclass(frozen=True)
class DiskView:
    free_mb: float
    source: str
    """Where the figure comes from: "recorder" (its RecorderStatus) or the --record-dir path."""


@dataclass(frozen=True)
class Snapshot:
    namespace: str
    streams: tuple[StreamRow, ...]
    gate: GateView | None
    """None until the gate's (latched) status arrives."""
    policy: PolicyView | None
    recorder: RecorderView | None
    """None while no recorder runs (record:=false) or before its status arrives."""
    disk: DiskView | None


def _free_mb(path: Path) -> float:
    return shutil.disk_usage(path).free / 1e6


class OperatorModel:
    """Thread-safe: the link feeds it from its spin thread, the app reads snapshots."""

    def __init__(
        self,
        namespace: str,
        record_dir: Path | None = None,
        disk_free_mb: Callable[[Path], float] = _free_mb,
    ):
        """record_dir: where disk space is read when the recorder's status does not carry it
        (no recorder running, or NaN before its first check); None: not shown then."""
        self.namespace = namespace
        self.record_dir = record_dir
        self._disk_free_mb = disk_free_mb
        self._lock = threading.Lock()
        self._streams = {label: (topic.rate_hz, deque[float]()) for label, _name, topic in console_streams(namespace)}
        self._gate: tuple[GateStatus, float] | None = None
        self._recorder: tuple[RecorderStatus, float] | None = None
        self._policy: tuple[dict[str, str], str, float] | None = None

    @property
    def labels(self) -> list[str]:
        return list(self._streams)

    def add_sample(self, label: str, arrival_s: float) -> None:
        with self._lock:
            arrivals = self._streams[label][1]
            arrivals.append(arrival_s)
            while arrivals and arrivals[0] < arrival_s - RATE_WINDOW_S:
                arrivals.popleft()

    def on_gate(self, msg: GateStatus, now_s: float) -> None:
        with self._lock:
            self._gate = (msg, now_s)

    def on_recorder(self, msg: RecorderStatus, now_s: float) -> None:
        with self._lock:
            self._recorder = (msg, now_s)

    def on_diagnostics(self, msg, now_s: float) -> None:
        """A diagnostic_msgs/DiagnosticArray: keeps this namespace's policy entry."""
        for st in msg.status:
            if local_name(st.name, self.namespace) == POLICY_DIAGNOSTIC:
                with self._lock:
                    self._policy = ({kv.key: kv.value for kv in st.values}, st.message, now_s)

    def snapshot(self, now_s: float) -> Snapshot:
        with self._lock:
            streams = tuple(
                StreamRow(
                    label,
                    nominal,
                    sum(1 for t in arrivals if t > now_s - RATE_WINDOW_S) / RATE_WINDOW_S,
                    now_s - arrivals[-1] if arrivals else None,
                )
                for label, (nominal, arrivals) in self._streams.items()
            )
            gate = recorder = policy = None
            if self._gate is not None:
                g, t = self._gate
                gate = GateView(
                    GATE_STATES.get(g.state, f"UNKNOWN({g.state})"),
                    g.reason,
                    g.detail,
                    g.forwarded,
                    g.rejected,
                    now_s - t,
                )
            if self._recorder is not None:
                r, t = self._recorder
                recorder = RecorderView(
                    RECORDER_STATES.get(r.state, f"UNKNOWN({r.state})"),
                    r.task_name,
                    r.frames,
                    r.frames_committed,
                    r.dropped,
                    r.frames / RecorderConfig.fps,
                    r.episode_path,
                    r.detail,
                    now_s - t,
                )
            if self._policy is not None:
                values, message, t = self._policy
                policy = PolicyView(
                    values.get("status", "?"),
                    values.get("queue_rows", "?"),
                    values.get("latency_p50_ms", "?"),
                    values.get("latency_max_ms", "?"),
                    message,
                    now_s - t,
                )
            recorder_disk_mb = self._recorder[0].disk_free_mb if self._recorder is not None else math.nan
        if math.isfinite(recorder_disk_mb):
            disk: DiskView | None = DiskView(float(recorder_disk_mb), "recorder")
        elif self.record_dir is not None:
            try:
                disk = DiskView(self._disk_free_mb(self.record_dir), str(self.record_dir))
            except OSError:
                disk = None  # not there (yet): the recorder creates it
        else:
            disk = None
        return Snapshot(self.namespace, streams, gate, policy, recorder, disk)
