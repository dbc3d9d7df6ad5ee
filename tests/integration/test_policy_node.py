"""The policy node as a real process over DDS: asynchronous chunk execution with a slow model,
draining and stopping when inputs or the remote server go away, reconnecting to a restarted
server. Arm state comes from this test (the node's only inputs with policy:=scripted)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.qos import QoSProfile
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from egomimic_hw.frames import pose_hw_from_ds
from egomimic_msgs.msg import ActionChunk, BimanualCommand, GateStatus
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.msg_convert import array_to_pose, stamp_to_ns

from .conftest import REPO_ROOT, wait_for

pytestmark = pytest.mark.integration

POSES = {
    "left": np.array([0.30, 0.05, 0.25, 1.0, 0.0, 0.0, 0.0]),
    "right": np.array([0.30, -0.05, 0.25, 0.0, 1.0, 0.0, 0.0]),
}
PERIOD_NS = 1e9 / 30


class ArmStatePublisher:
    """Publishes both arms' dataset-frame poses and joint states at 100 Hz while `on` (and the
    hardware-frame poses the synthetic cameras render from)."""

    def __init__(self, node):
        self.node = node
        self.on = True
        self.pubs = {
            arm: (
                node.create_publisher(
                    PoseStamped, topics.EE_POSE_DATASET.resolve("eva", arm=arm), topics.EE_POSE_DATASET.qos
                ),
                node.create_publisher(JointState, topics.JOINT_STATES.resolve("eva", arm=arm), topics.JOINT_STATES.qos),
            )
            for arm in POSES
        }
        self.pubs_hw = {
            arm: node.create_publisher(PoseStamped, topics.EE_POSE.resolve("eva", arm=arm), topics.EE_POSE.qos)
            for arm in POSES
        }
        node.create_timer(0.01, self._publish)

    def _publish(self):
        if not self.on:
            return
        stamp = self.node.get_clock().now().to_msg()
        for arm, (pub_pose, pub_joints) in self.pubs.items():
            pose = PoseStamped()
            pose.header.stamp, pose.header.frame_id = stamp, f"{arm}_base_dataset"
            array_to_pose(POSES[arm], pose.pose)
            pub_pose.publish(pose)
            hw = PoseStamped()
            hw.header.stamp, hw.header.frame_id = stamp, f"{arm}_base"
            array_to_pose(pose_hw_from_ds(POSES[arm]), hw.pose)
            self.pubs_hw[arm].publish(hw)
            js = JointState()
            js.header.stamp = stamp
            js.name = [f"{arm}_joint{i}" for i in range(1, 7)] + [f"{arm}_gripper"]
            js.position = [0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.5]
            pub_joints.publish(js)


def armed_gate(node):
    """Stand in for an armed safety gate: one latched safety/status ARMED (the scripted and
    expert motions run only while the gate is ARMED)."""
    pub = node.create_publisher(GateStatus, topics.SAFETY_STATUS.resolve("eva"), topics.SAFETY_STATUS.qos)
    msg = GateStatus()
    msg.header.stamp = node.get_clock().now().to_msg()
    msg.state = GateStatus.ARMED
    pub.publish(msg)
    return pub


class Recorder:
    """Keeps every action and chunk. Its readers keep 100 samples, not the topics' 5: the tests
    judge the node's tick from the stamps, so the instrument must not lose any when the test
    process falls behind for a few periods (a reliable reader with 5 samples of history drops
    the oldest and shows the node's regular tick as a gap)."""

    def __init__(self, node):
        self.actions: list[BimanualCommand] = []
        self.chunks: list[ActionChunk] = []
        self.diags: list[dict] = []
        lossless = QoSProfile(depth=100, reliability=topics.POLICY_ACTION.qos.reliability)
        node.create_subscription(BimanualCommand, topics.POLICY_ACTION.resolve("eva"), self.actions.append, lossless)
        node.create_subscription(ActionChunk, topics.POLICY_CHUNK.resolve("eva"), self.chunks.append, lossless)
        node.create_subscription(DiagnosticArray, topics.DIAGNOSTICS.name(), self._on_diag, 10)

    def _on_diag(self, msg):
        for st in msg.status:
            if diagnostics.local_name(st.name, "eva") == "policy":
                self.diags.append({"level": st.level, "message": st.message, **{kv.key: kv.value for kv in st.values}})


def start_synthetic_cameras(node_process):
    """The three synthetic cameras in /eva, as the graph runs them."""
    return node_process(
        "egomimic_nodes.camera_node",
        "-r",
        "__ns:=/eva",
        "-r",
        "__node:=cameras",
        "-p",
        "cameras:=[front_1,left_wrist,right_wrist]",
        "-p",
        "backend:=synthetic",
    )


def stamps_s(actions):
    return np.array([stamp_to_ns(a.header.stamp) for a in actions]) / 1e9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_slow_model_keeps_the_tick_and_inputs_lost_stop_publishing(node_process, ros_node):
    node_process(
        "egomimic_nodes.policy_node",
        "-r",
        "__ns:=/eva",
        "-p",
        "policy:=scripted",
        "-p",
        "inject_latency_ms:=150.0",
        "-p",
        "executor.max_dry_s:=0.5",
    )
    inputs = ArmStatePublisher(ros_node)
    rec = Recorder(ros_node)
    assert wait_for(lambda: len(rec.actions) > 10, 60), "no policy/action from the policy node"
    # No gate has said ARMED: the scripted motion holds the measured pose (scripted.ClockDriven).
    held = list(rec.actions)
    for a in held:
        for arm, msg in (("left", a.left), ("right", a.right)):
            position = msg.pose.position
            assert np.allclose([position.x, position.y, position.z], POSES[arm][:3], atol=1e-9), (arm, a.chunk_id)
    gate_status = armed_gate(ros_node)  # noqa: F841 - kept: the latched status outlives this line
    assert wait_for(lambda: abs(rec.actions[-1].left.pose.position.z - POSES["left"][2]) > 1e-4, 10), (
        "the scripted motion did not start once the gate said ARMED"
    )
    n0 = len(rec.actions)
    time.sleep(4.0)
    window = rec.actions[n0:]
    t = stamps_s(window)
    rate_hz = (len(t) - 1) / (t[-1] - t[0])
    # Every query takes >= 150 ms: a loop that waited for the model would leave gaps >= 183 ms
    # at every query (and run at a fraction of 30 Hz). Stamps are the node's tick times.
    assert np.max(np.diff(t)) < 0.15, f"the tick waited: worst gap {np.max(np.diff(t)) * 1e3:.0f} ms"
    assert 27.0 < rate_hz < 33.0, f"policy/action at {rate_hz:.1f} Hz"
    assert len({a.chunk_id for a in window}) >= 3, "chunks were not replaced while executing"
    for a in window:
        assert a.left.header.frame_id == "left_base_dataset" and a.right.header.frame_id == "right_base_dataset"
        # Time alignment: the row executed at tick t is the one meant for t.
        lag_rows = (stamp_to_ns(a.header.stamp) - stamp_to_ns(a.observation_stamp)) / PERIOD_NS
        assert a.row <= lag_rows < a.row + 1.0 + 1e-6
    by_id = {c.chunk_id: c for c in rec.chunks}
    executed = [a for a in window if a.chunk_id in by_id]
    assert executed, "policy/chunk did not carry the chunks being executed"
    fade_ns = (8 + 1) * PERIOD_NS  # the executor's crossfade_rows (8) and one period of slack
    for a in executed:
        c = by_id[a.chunk_id]
        assert c.observation_stamp == a.observation_stamp and len(c.rows) == 30
        assert a.row >= 4  # rows 0..4 (150 ms at 30 Hz) had passed when the chunk arrived
        # The action lies on the path around its tick (its row, the one before and the one after:
        # the tick falls between rows) of its chunk or, inside a crossfade, between that path and
        # the paths of the chunks it fades from (those executed within one crossfade before;
        # with a 150 ms model and a 267 ms fade, fades overlap; an old chunk that ends before the
        # tick fades out held at its last row: scheduler.py).
        t = stamp_to_ns(a.header.stamp)
        recent = {b.chunk_id for b in rec.actions if t - fade_ns <= stamp_to_ns(b.header.stamp) <= t} | {a.chunk_id}
        paths = [by_id[i] for i in recent if i in by_id]
        near = [
            r.left.pose.position.z
            for p in paths
            for r in p.rows
            if -2 * PERIOD_NS <= stamp_to_ns(r.header.stamp) - t <= PERIOD_NS
        ]
        assert near, (a.row, "no row of its chunk around the tick")
        near += [p.rows[-1].left.pose.position.z for p in paths if stamp_to_ns(p.rows[-1].header.stamp) < t]
        assert min(near) - 2e-4 <= a.left.pose.position.z <= max(near) + 2e-4, (a.row, near, a.left.pose.position.z)
    d = rec.diags[-1]
    assert float(d["latency_p50_ms"]) >= 150.0 and int(d["rows_dropped_late"]) > 0 and d["status"] == "running"

    client = ros_node.create_client(Trigger, topics.POLICY_RESET.resolve("eva"))
    assert client.wait_for_service(10)
    reply = client.call_async(Trigger.Request())
    assert wait_for(lambda: reply.done(), 10) and reply.result().success
    before = max(a.chunk_id for a in rec.actions)
    assert wait_for(lambda: max(a.chunk_id for a in rec.actions) > before, 10)

    inputs.on = False  # arm state stops: no new queries; the queue drains, holds, then stops
    stopped_at = time.time()
    time.sleep(3.0)
    last = stamps_s(rec.actions[-1:])[0]
    # The queue covers at most one chunk (1 s) past the last observation, then 0.5 s of hold.
    assert last - stopped_at < 1.0 + 0.5 + 0.3, f"still published {last - stopped_at:.2f} s after inputs stopped"
    assert time.time() - last > 1.0, "policy/action did not stop"
    assert wait_for(lambda: rec.diags[-1]["status"] == "stopped" and int(rec.diags[-1]["dry_ticks"]) > 0, 5)
    assert "old" in rec.diags[-1]["last_problem"] or "no message" in rec.diags[-1]["last_problem"]


def test_killed_remote_server_drains_stops_and_reconnects(node_process, ros_node, tmp_path):
    address = f"tcp://127.0.0.1:{free_port()}"
    cmd = [
        sys.executable,
        "-m",
        "egomimic_policy.remote.server",
        "--policy",
        "scripted",
        "--bind",
        address,
        "--inject-latency-ms",
        "50",
    ]

    def start_server():
        return subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=dict(os.environ),
            stdout=open(tmp_path / "server.log", "a"),
            stderr=subprocess.STDOUT,
        )

    server = start_server()
    try:
        node_process(  # connects when the server is up (remote.connect_timeout_s)
            "egomimic_nodes.policy_node",
            "-r",
            "__ns:=/eva",
            "-p",
            f"policy:={address}",
            "-p",
            "executor.max_dry_s:=0.5",
            "-p",
            "remote.heartbeat_timeout_s:=0.5",
            "-p",
            "remote.connect_timeout_s:=30.0",
        )
        ArmStatePublisher(ros_node)
        rec = Recorder(ros_node)
        assert wait_for(lambda: len(rec.actions) > 30, 60), "no policy/action through the remote server"
        assert wait_for(lambda: rec.diags and rec.diags[-1].get("remote_state") == "connected", 5)
        first_pid = rec.diags[-1]["server_pid"]

        server.send_signal(signal.SIGKILL)  # mid-episode
        server.wait(5)
        killed_at = time.time()
        time.sleep(3.0)
        last = stamps_s(rec.actions[-1:])[0]
        assert last - killed_at < 1.0 + 0.5 + 0.3, f"still published {last - killed_at:.2f} s after the server died"
        assert time.time() - last > 1.0, "policy/action did not stop"
        assert wait_for(lambda: rec.diags[-1]["status"] == "stopped", 5)
        d = rec.diags[-1]
        assert d["remote_state"] == "connecting" and d["level"] == diagnostics.ERROR, d
        assert int(d["reconnects"]) >= 1

        n_before = len(rec.actions)
        server = start_server()
        assert wait_for(lambda: len(rec.actions) > n_before + 30, 60), "no policy/action after the server restarted"
        assert wait_for(
            lambda: rec.diags[-1].get("remote_state") == "connected" and rec.diags[-1]["server_pid"] != first_pid, 10
        )
    finally:
        server.kill()
        server.wait(5)


def test_a_model_family_takes_camera_frames_and_a_dead_camera_stops_it(node_process, ros_node):
    cameras = start_synthetic_cameras(node_process)
    node_process(
        "egomimic_nodes.policy_node", "-r", "__ns:=/eva", "-p", "policy:=fold", "-p", "executor.max_dry_s:=0.5"
    )
    ArmStatePublisher(ros_node)
    rec = Recorder(ros_node)
    assert wait_for(lambda: len(rec.actions) > 30, 90), "no policy/action from policy:=fold"
    subscribers = {
        i.node_name for i in ros_node.get_subscriptions_info_by_topic(topics.IMAGE_RAW.resolve("eva", cam="front_1"))
    }
    # Taken at each query by the node's companion reader node (policy_node: not delivered).
    assert "policy_state" in subscribers, subscribers
    assert rec.chunks and all(len(c.rows) == 100 for c in rec.chunks)  # the Fold horizon
    assert wait_for(lambda: rec.diags and rec.diags[-1]["status"] == "running", 5)
    assert int(rec.diags[-1]["bad_images"]) == 0

    cameras.send_signal(signal.SIGKILL)  # frames stop: no query may use the last ones
    killed_at = time.time()
    time.sleep(5.0)
    last = stamps_s(rec.actions[-1:])[0]
    # The plan may run open loop for at most executor.max_open_loop_s (2 s) past the last
    # observation (not the whole 3.3 s Fold chunk).
    assert last - killed_at < 2.0 + 0.3 and time.time() - last > 0.5
    assert wait_for(lambda: "cameras/" in rec.diags[-1]["last_problem"] and rec.diags[-1]["status"] == "stopped", 5)


def _call(ros_node, srv_type, name: str, request, timeout_s: float = 10.0):
    client = ros_node.create_client(srv_type, name)
    assert client.wait_for_service(timeout_s), f"{name} not served"
    reply = client.call_async(request)
    assert wait_for(lambda: reply.done(), timeout_s), f"{name}: no reply"
    return reply.result()


def test_parameters_come_from_the_config_dataclasses(node_process, ros_node):
    """What `ros2 param list / describe / set` see on the running node: every config field as a
    read-only parameter with its help text and range; a float set as an integer is taken."""
    import dataclasses

    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import DescribeParameters, GetParameters, ListParameters, SetParameters

    from egomimic_policy.remote.client import RemoteConfig
    from egomimic_policy.rollout import ExecutorConfig, RolloutConfig
    from egomimic_policy.scripted import ScriptedChunkConfig, ScriptedMotionConfig

    node_process("egomimic_nodes.policy_node", "-r", "__ns:=/eva", "-p", "policy:=scripted", "-p", "rate_hz:=30")
    fields = {f.name: f for f in dataclasses.fields(RolloutConfig)}
    for prefix, cls, fixed in (
        ("executor.", ExecutorConfig, {"rate_hz"}),
        ("scripted.", ScriptedChunkConfig, set()),
        ("scripted.", ScriptedMotionConfig, set()),
        ("remote.", RemoteConfig, {"address", "rate_hz"}),
    ):
        fields.update({prefix + f.name: f for f in dataclasses.fields(cls) if f.name not in fixed})
    listed = _call(ros_node, ListParameters, "/eva/policy/list_parameters", ListParameters.Request(), 30.0)
    assert set(fields) <= set(listed.result.names), sorted(set(fields) - set(listed.result.names))
    names = sorted(fields)
    described = _call(
        ros_node, DescribeParameters, "/eva/policy/describe_parameters", DescribeParameters.Request(names=names)
    )
    for name, desc in zip(names, described.descriptors):
        assert desc.read_only and desc.description == fields[name].metadata["help"], name
        if "range" in fields[name].metadata:
            [r] = desc.floating_point_range or desc.integer_range
            assert (r.from_value, r.to_value) == pytest.approx(fields[name].metadata["range"]), name
    [rate] = _call(
        ros_node, GetParameters, "/eva/policy/get_parameters", GetParameters.Request(names=["rate_hz"])
    ).values
    assert (rate.double_value if rate.type == ParameterType.PARAMETER_DOUBLE else rate.integer_value) == 30  # it runs
    change = Parameter(
        name="executor.max_dry_s", value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=2.0)
    )
    [result] = _call(
        ros_node, SetParameters, "/eva/policy/set_parameters", SetParameters.Request(parameters=[change])
    ).results
    assert not result.successful and "read-only" in result.reason


def test_a_parameter_outside_its_range_stops_the_start_naming_it(node_process, tmp_path):
    proc = node_process("egomimic_nodes.policy_node", "-r", "__ns:=/eva", "-p", "sync_tolerance_s:=20.0")
    assert wait_for(lambda: proc.poll() is not None, 30), "the node started with sync_tolerance_s 20 s"
    assert proc.returncode != 0
    assert "parameter sync_tolerance_s" in (tmp_path / "policy_node.log").read_text()


def test_an_upstream_egoverse_checkpoint_runs_live(node_process, ros_node, tmp_path):
    """The lab's checkpoint as it comes (upstream's tiny Fold, OmegaConf config tree and all)
    drives the node: prepared into the cache, fed the three cameras and both arms, its chunks are
    its own horizon (10 rows) and the action stream runs."""
    import lzma
    import shutil

    source = tmp_path / "fold_tiny.ckpt"
    with (
        lzma.open(Path(__file__).parents[1] / "fixtures" / "upstream" / "fold_tiny.ckpt.xz") as f,
        open(source, "wb") as out,
    ):
        shutil.copyfileobj(f, out, 1 << 20)
    start_synthetic_cameras(node_process)
    node_process(
        "egomimic_nodes.policy_node",
        "-r",
        "__ns:=/eva",
        "-p",
        f"policy:={source}",
        "-p",
        f"cache_dir:={tmp_path / 'cache'}",
        # The fixture is a tiny model fed synthetic cameras it never saw: its rows jump by
        # centimetres, which the executor's runaway bound stops at the second tick (67 mm ahead
        # of the speed limits). This test is about the checkpoint's path into the node and its
        # I/O, not its motion: the bound is lifted here.
        "-p",
        "executor.speed_limit_max_lag_m:=1.0",
        "-p",
        "executor.speed_limit_max_lag_rad:=3.0",
    )
    ArmStatePublisher(ros_node)
    rec = Recorder(ros_node)
    assert wait_for(lambda: len(rec.actions) > 30, 120), "no policy/action from the upstream checkpoint"
    assert rec.chunks and all(len(c.rows) == 10 for c in rec.chunks)  # the tiny model's horizon
    assert wait_for(lambda: rec.diags and rec.diags[-1]["status"] == "running", 5)
    assert list((tmp_path / "cache").glob("*.ckpt")), "the prepared artifact is in the cache"
