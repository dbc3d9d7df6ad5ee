"""What rviz shows, from the running simulated graph with viz:=true (one graph for all of it):
- TF: the robot_state node publishes /tf_static and, per joint_states message, /tf stamped with
  it. Walking the received tree from `<arm>_base` to `<arm>_link6` at a joint_states stamp must
  give the driver's ee_pose of that same stamp (hardware frame, link6) to 1e-6 m / 1e-6 rad, for
  both arms while the scripted policy moves them.
- Markers: the monitor's viz/markers carry, per arm, the measured, proposed and forwarded poses,
  the chunk's path and the gate's workspace box (read from the gate), and the gate's state.
- rviz/eva.rviz: every topic it names is published in the graph with the type its display reads.
With EGOMIMIC_MARKERS_PNG=<path> the received markers are drawn there (the README's picture)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import JointState
from tf2_msgs.msg import TFMessage
from visualization_msgs.msg import MarkerArray

from egomimic_hw.description import ARMS, EEF_LINK
from egomimic_hw.rotations import geodesic_angle, quat_to_mat
from egomimic_launch.dds_log import describe, middleware_warnings
from egomimic_launch.shm import removed_ports_mapped
from egomimic_nodes import topics

from .conftest import LAUNCH, REPO_ROOT, wait_for

pytestmark = pytest.mark.integration

TOL_M = TOL_RAD = 1e-6
MIN_MATCHED = 30
"""Per arm: ee_pose comes every third joint_states tick (33 Hz), so a few seconds give hundreds."""


def _stamp(header) -> int:
    return header.stamp.sec * 1_000_000_000 + header.stamp.nanosec


def _matrix(translation, rotation) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = quat_to_mat([rotation.w, rotation.x, rotation.y, rotation.z])
    m[:3, 3] = [translation.x, translation.y, translation.z]
    return m


def _walk(static: dict, dynamic: dict, base: str, tip: str) -> np.ndarray:
    """base_T_tip: from `tip` up to `base` through child -> (parent, parent_T_child) edges, the
    dynamic ones (one stamp) before the static ones."""
    t, link = np.eye(4), tip
    while link != base:
        parent, parent_T_child = dynamic.get(link) or static[link]
        t = parent_T_child @ t
        link = parent
    return t


def test_tf_tree_walk_is_the_drivers_ee_pose(tmp_path, ros_node):
    lock = threading.RLock()
    static: dict[str, tuple[str, np.ndarray]] = {}
    dynamic: dict[int, dict[str, tuple[str, np.ndarray]]] = {}
    poses = {arm: {} for arm in ARMS}
    joints = {arm: {} for arm in ARMS}

    def on_static(msg: TFMessage) -> None:
        with lock:
            for tr in msg.transforms:
                static[tr.child_frame_id] = (
                    tr.header.frame_id,
                    _matrix(tr.transform.translation, tr.transform.rotation),
                )

    def on_tf(msg: TFMessage) -> None:
        with lock:
            for tr in msg.transforms:
                edges = dynamic.setdefault(_stamp(tr.header), {})
                edges[tr.child_frame_id] = (
                    tr.header.frame_id,
                    _matrix(tr.transform.translation, tr.transform.rotation),
                )

    def on_pose(arm):
        def cb(msg: PoseStamped) -> None:
            assert msg.header.frame_id == arm.hw_frame
            with lock:
                poses[arm][_stamp(msg.header)] = _matrix(msg.pose.position, msg.pose.orientation)

        return cb

    def on_state(arm):
        def cb(msg: JointState) -> None:
            with lock:
                joints[arm][_stamp(msg.header)] = np.array(msg.position[:6])

        return cb

    markers: list = []

    def on_markers(msg: MarkerArray) -> None:
        with lock:
            markers[:] = [m for m in msg.markers if m.ns]

    def marker_namespaces() -> set[str]:
        with lock:
            return {m.ns for m in markers}

    wanted = {
        f"{arm.value}/{part}" for arm in ARMS for part in ("measured", "proposed", "forwarded", "chunk", "workspace")
    }
    wanted.add("gate")
    ros_node.create_subscription(MarkerArray, topics.VIZ_MARKERS.resolve("eva"), on_markers, topics.VIZ_MARKERS.qos)
    ros_node.create_subscription(TFMessage, topics.TF_STATIC.name(), on_static, topics.TF_STATIC.qos)
    ros_node.create_subscription(TFMessage, topics.TF.name(), on_tf, topics.TF.qos)
    for arm in ARMS:
        ros_node.create_subscription(
            PoseStamped, topics.EE_POSE.resolve("eva", arm=arm), on_pose(arm), topics.EE_POSE.qos
        )
        ros_node.create_subscription(
            JointState, topics.JOINT_STATES.resolve("eva", arm=arm), on_state(arm), topics.JOINT_STATES.qos
        )

    def matched(arm) -> list[int]:
        with lock:
            return [s for s in poses[arm] if s in joints[arm] and f"{arm.value}_{EEF_LINK}" in dynamic.get(s, {})]

    def moving(arm) -> bool:
        """The matched samples span some motion (robot_state starts before arming, the policy after)."""
        stamps = matched(arm)
        with lock:
            return len(stamps) > 1 and float(np.ptp(np.array([joints[arm][s] for s in stamps]), axis=0).max()) > 0.02

    log = open(tmp_path / "launch.log", "w")
    cmd = [*LAUNCH, "eva_bimanual.launch.py", "viz:=true", "--duration", "25", "--run-dir", str(tmp_path / "run")]
    cmd.append("--quiet")
    published: dict[str, list[str]] = {}
    view = "graph not looked at (the wait ended early)"
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
    timeline = GraphTimeline(ros_node)
    try:

        def ready() -> bool:
            return all(len(matched(a)) >= 3 * MIN_MATCHED and moving(a) for a in ARMS) and wanted <= marker_namespaces()

        wait_for(lambda: ready() or proc.poll() is not None, 60)
        # Not ready when the launcher ended first (a start that failed, a graph that never
        # armed): that is the failure to report, not what the graph shows after it stopped.
        ok = ready()
        ended_first = proc.poll() is not None
        # The graph lags behind data (fc48: TF had arrived, robot_description's writer was not
        # in this node's graph yet): poll it until rviz's topics are there, with its own deadline.
        wanted_topics = rviz_topics()
        wait_for(
            lambda: (
                published.update(dict(ros_node.get_topic_names_and_types()))
                or all(published.get(t) == [ty] for t, ty in wanted_topics.items())
                or proc.poll() is not None
            ),
            15,
        )
        view = graph_view(ros_node)  # while the graph runs, for a failure's message
    finally:
        timeline.stop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
    output = (tmp_path / "launch.log").read_text()[-3000:]
    assert ok, (
        f"not ready ({'the launcher ended first' if ended_first else 'timed out'}): matched "
        f"{[len(matched(a)) for a in ARMS]}, moving {[moving(a) for a in ARMS]}, markers {sorted(marker_namespaces())}\n"
        f"graph timeline (s after launch: nodes added / removed): {timeline.events}\n"
        f"Fast DDS warnings: {describe(middleware_warnings(tmp_path / 'run' / 'logs'))}\n{output}"
    )
    check_markers(markers)
    missing = [t for t, ty in rviz_topics().items() if published.get(t) != [ty]]
    # fc48, fc50, fc55: robot_description's writer (and in fc55 the cameras') never appeared in
    # this node's graph while TF flowed; say what the graph held, what the launch logged, and
    # whether this process listens on a removed shared-memory port (deaf to later writers).
    deaf = removed_ports_mapped({"this test": os.getpid()})
    assert not missing, (
        f"missing {missing}; graph topics {sorted(published)}\nremoved ports mapped here: {deaf}\n"
        f"{view}\ngraph timeline (s after launch: nodes added / removed): {timeline.events}\n"
        f"Fast DDS warnings: {describe(middleware_warnings(tmp_path / 'run' / 'logs'))}\n"
        f"launch log:\n{output}"
    )
    check_rviz_topics(published)
    with lock:
        for arm in ARMS:
            assert arm.hw_frame in static and optical_ok(static), sorted(static)
        rviz_fixed_frame = "eva_base"  # rviz/eva.rviz's Fixed Frame: the root every static edge leads to
        tree = dict(static)  # the static edges and the joint edges (any stamp: for connectivity)
        for edges in dynamic.values():
            tree.update(edges)
        roots = {child: _root(tree, child) for child in tree}
        assert set(roots.values()) == {rviz_fixed_frame}, roots
        results = {}
        for arm in ARMS:
            stamps = matched(arm)
            assert len(stamps) >= MIN_MATCHED, f"{arm.value}: {len(stamps)} ee_pose stamps with transforms\n{output}"
            errs = [
                (
                    float(np.linalg.norm(w[:3, 3] - poses[arm][s][:3, 3])),
                    float(geodesic_angle(w[:3, :3], poses[arm][s][:3, :3])),
                )
                for s in stamps
                for w in [_walk(static, dynamic[s], arm.hw_frame, f"{arm.value}_{EEF_LINK}")]
            ]
            moved = float(np.ptp(np.array([joints[arm][s] for s in stamps]), axis=0).max())
            results[arm.value] = (len(stamps), max(e[0] for e in errs), max(e[1] for e in errs), moved)
    print(f"\n/tf walk vs ee_pose (samples, max m, max rad, joint span rad): {results}")
    for arm, (n, err_m, err_rad, moved) in results.items():
        assert err_m <= TOL_M and err_rad <= TOL_RAD, f"{arm}: {err_m:.2e} m, {err_rad:.2e} rad over {n}"
        assert moved > 0.01, f"{arm}: the arm did not move ({moved:.4f} rad)"


class GraphTimeline:
    """When each node appeared in (and left) the probe's graph: tells a node never discovered
    from one discovered and then dropped (a participant whose lease expired)."""

    def __init__(self, node, period_s: float = 0.2):
        self.events: list[tuple[float, list[str], list[str]]] = []
        self._node, self._period = node, period_s
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seen: set[str] = set()
        while not self._stop.wait(self._period):
            now = {n for n, _ in self._node.get_node_names_and_namespaces()}
            if now != seen:
                self.events.append((round(time.monotonic() - self._t0, 1), sorted(now - seen), sorted(seen - now)))
                seen = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def graph_view(node) -> str:
    """What this node's graph holds besides topic names: the nodes it knows and the endpoints of
    one stream it receives (to tell a participant never discovered from endpoints lost)."""
    names = sorted(f"{ns.rstrip('/')}/{n}" for n, ns in node.get_node_names_and_namespaces())
    joint_states = topics.JOINT_STATES.resolve("eva", arm=ARMS[0])
    pubs = [i.node_name for i in node.get_publishers_info_by_topic(joint_states)]
    subs = [i.node_name for i in node.get_subscriptions_info_by_topic(joint_states)]
    return f"nodes seen: {names}\n{joint_states}: publishers {pubs}, subscribers {subs}"


def _root(edges: dict, frame: str) -> str:
    """Follow child -> parent edges to the top."""
    while frame in edges:
        frame = edges[frame][0]
    return frame


def optical_ok(static: dict) -> bool:
    """Every camera's optical frame is on /tf_static (the frame id of its images)."""
    from egomimic_hw.description import CAMERAS

    return all(f"{cam}_optical" in static for cam in CAMERAS)


def check_markers(markers) -> None:
    from egomimic_nodes.markers import GATE_COLORS, MarkerSpec, render_png

    (gate,) = [m for m in markers if m.ns == "gate"]
    state = gate.text.split(":")[0]  # the gate's state when the last array was drawn, coloured by it
    assert state in GATE_COLORS, gate.text
    assert tuple(round(c, 3) for c in (gate.color.r, gate.color.g, gate.color.b)) == GATE_COLORS[state][:3]
    for m in markers:
        if m.ns != "gate":
            assert m.header.frame_id == f"{m.ns.split('/')[0]}_base", "hardware frames, which TF resolves"
    boxes = [m for m in markers if m.ns.endswith("/workspace")]
    assert all(len(m.points) == 24 for m in boxes), "the gate's workspace boxes, read from the gate"
    target = os.environ.get("EGOMIMIC_MARKERS_PNG")
    if target:
        kinds = {0: "arrow", 2: "sphere", 4: "line_strip", 5: "line_list", 9: "text"}
        specs = [
            MarkerSpec(
                m.ns,
                m.id,
                kinds[m.type],
                m.header.frame_id,
                tuple((p.x, p.y, p.z) for p in m.points)
                or ((m.pose.position.x, m.pose.position.y, m.pose.position.z),),
                (m.color.r, m.color.g, m.color.b, m.color.a),
                (m.scale.x, m.scale.y, m.scale.z),
                m.text,
            )
            for m in markers
        ]
        render_png(specs, target)


def rviz_topics() -> dict[str, str]:
    """Every topic rviz/eva.rviz names, with the type its display reads."""
    import yaml

    display_types = {
        "rviz_default_plugins/Image": "sensor_msgs/msg/Image",
        "rviz_default_plugins/MarkerArray": "visualization_msgs/msg/MarkerArray",
        "rviz_default_plugins/RobotModel": "std_msgs/msg/String",
    }
    rviz = yaml.safe_load((REPO_ROOT / "ros2_ws/src/egomimic_bringup/rviz/eva.rviz").read_text())
    out = {}
    for display in rviz["Visualization Manager"]["Displays"]:
        topic = (display.get("Topic") or display.get("Description Topic") or {}).get("Value")
        if topic:
            out[topic] = display_types[display["Class"]]
    return out


def check_rviz_topics(published: dict[str, list[str]]) -> None:
    """Every topic rviz/eva.rviz names is in the graph with the type its display reads."""
    for topic, type_name in rviz_topics().items():
        assert published.get(topic) == [type_name], (topic, published.get(topic))
