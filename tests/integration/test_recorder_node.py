"""The recorder as a real process over DDS: recorder/start refused while a stream is missing
(status ERROR, naming it), a run-time task name, an episode recorded and committed by
recorder/stop, another committed by SIGINT (exit 0); and `record:=true` on the whole simulated
graph, whose episode carries obs_ee_pose = M.FK(obs_joints) of the real driver and frames path.
Every episode is opened with EpisodeReader and checked: frames, stamps, images, per-stream
counts, and the pose/joints agreement to 1e-6."""

import signal
import threading
from pathlib import Path

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from egomimic_data.episode_format import EpisodeReader
from egomimic_data.recording import STATS_ATTRIBUTE
from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.frames import pose_ds_from_hw
from egomimic_hw.kinematics import ArmKinematics
from egomimic_msgs.msg import BimanualCommand, RecorderStatus
from egomimic_nodes import topics
from egomimic_nodes.msg_convert import array_to_pose

from .conftest import run_launch, wait_for

pytestmark = pytest.mark.integration

NS = "eva"
START = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])  # SimConfig.initial_joints_rad
TOL = 1e-6
PERIOD_NS = 1e9 / 30
STREAMS = {
    *(f"images.{cam}" for cam in CAMERAS),
    *(f"{arm.value}.{kind}" for arm in ARMS for kind in ("obs_joints", "obs_ee_pose", "cmd_joints")),
    "cmd_ee_pose",
}


class RobotStreams:
    """What the recorder takes besides the cameras, as the graph sends it: per arm joint_states at
    100 Hz and, on every third of those ticks, the FK pose of the same joints with the same stamp
    (dataset frame, as the frames node passes it on; hardware frame for the synthetic cameras);
    policy/action and joint_command on the same third ticks (33 Hz)."""

    def __init__(self, node):
        self.node = node
        self.kin = ArmKinematics()
        self.tick = 0
        self.joints = {
            arm: node.create_publisher(JointState, topics.JOINT_STATES.resolve(NS, arm=arm), topics.JOINT_STATES.qos)
            for arm in ARMS
        }
        self.poses_ds = {
            arm: node.create_publisher(
                PoseStamped, topics.EE_POSE_DATASET.resolve(NS, arm=arm), topics.EE_POSE_DATASET.qos
            )
            for arm in ARMS
        }
        self.poses_hw = {
            arm: node.create_publisher(PoseStamped, topics.EE_POSE.resolve(NS, arm=arm), topics.EE_POSE.qos)
            for arm in ARMS
        }
        self.commands = {
            arm: node.create_publisher(JointState, topics.JOINT_COMMAND.resolve(NS, arm=arm), topics.JOINT_COMMAND.qos)
            for arm in ARMS
        }
        self.action = node.create_publisher(BimanualCommand, topics.POLICY_ACTION.resolve(NS), topics.POLICY_ACTION.qos)
        node.create_timer(0.01, self._publish)

    def _publish(self) -> None:
        self.tick += 1
        stamp = self.node.get_clock().now().to_msg()
        third = self.tick % 3 == 0
        action = BimanualCommand()
        action.header.stamp = stamp
        for i, arm in enumerate(ARMS):
            q = START + 0.3 * np.sin(self.tick / 40.0 + i + np.arange(6))
            js = JointState()
            js.header.stamp, js.header.frame_id = stamp, arm.hw_frame
            js.name = arm.joint_names
            js.position = [*map(float, q), 0.5 + 0.4 * np.sin(self.tick / 30.0)]
            self.joints[arm].publish(js)
            if not third:
                continue
            pose_hw = self.kin.forward(q)
            for pub, pose, frame in (
                (self.poses_hw[arm], pose_hw, arm.hw_frame),
                (self.poses_ds[arm], pose_ds_from_hw(pose_hw), arm.dataset_frame),
            ):
                msg = PoseStamped()
                msg.header.stamp, msg.header.frame_id = stamp, frame
                array_to_pose(pose, msg.pose)
                pub.publish(msg)
            target: PoseStamped = getattr(action, arm.value)
            target.header.stamp, target.header.frame_id = stamp, arm.dataset_frame
            array_to_pose(pose_ds_from_hw(pose_hw), target.pose)
            setattr(action, f"{arm.value}_gripper", 0.5)
            cmd = JointState()
            cmd.header.stamp, cmd.name, cmd.position = stamp, arm.joint_names, [*map(float, q), 0.5]
            self.commands[arm].publish(cmd)
        if third:
            self.action.publish(action)


class StatusProbe:
    def __init__(self, node):
        self.lock = threading.Lock()
        self.latest: RecorderStatus | None = None
        node.create_subscription(
            RecorderStatus, topics.RECORDER_STATUS.resolve(NS), self._on_status, topics.RECORDER_STATUS.qos
        )

    def _on_status(self, msg: RecorderStatus) -> None:
        with self.lock:
            self.latest = msg

    def has(self, predicate) -> bool:
        with self.lock:
            return self.latest is not None and predicate(self.latest)


def call(node, srv_type, name: str, request, timeout_s: float = 15.0):
    client = node.create_client(srv_type, name)
    assert client.wait_for_service(timeout_s), f"{name} not served"
    future = client.call_async(request)
    assert wait_for(future.done, timeout_s), f"{name}: no reply"
    return future.result()


def rotation_error_rad(quat_a: np.ndarray, quat_b: np.ndarray) -> float:
    """The angle of the rotation between two quaternions, accurate near 0 for float32 values
    (2 acos|<a, b>| loses precision there: 1e-7 in the dot product reads as 1e-3 rad)."""
    a, b = quat_a / np.linalg.norm(quat_a), quat_b / np.linalg.norm(quat_b)
    if np.dot(a, b) < 0:
        b = -b
    return float(4.0 * np.arctan2(np.linalg.norm(a - b), np.linalg.norm(a + b)))


def check_episode(path: str, min_frames: int, task_name: str, transport: str) -> EpisodeReader:
    r = EpisodeReader(path)
    assert len(r) >= min_frames and r.data_status == "complete", (len(r), r.data_status)
    assert r.attrs["task_name"] == task_name
    t = r.timestamps_ns
    assert np.all(np.diff(t) > 0), "step stamps increase"
    assert np.all(np.diff(r.array("obs_rgb_timestamps_ns")) > 0), "upstream's RGB clock increases strictly"
    stats = r.attrs[STATS_ATTRIBUTE]
    assert set(stats["streams"]) == STREAMS
    for cam in CAMERAS:
        # Each frame is within 30 ms of its step, or it is the camera's previous frame standing in
        # for one it dropped (step_assembly's bridge: at most a period further, and counted as
        # recorded twice, so the episode says how many).
        stamps = r.image_stamps_ns(cam)
        reused = np.concatenate([[False], np.diff(stamps) == 0])
        off = np.abs(stamps - t)
        assert np.all(off[~reused] <= 30e6), (cam, int(np.max(off[~reused])))
        assert np.all(off[reused] <= 30e6 + PERIOD_NS), (cam, int(np.max(off[reused])))
        # (at least: a step assembled after the stop, not stored, may have reused one too)
        assert stats["streams"][f"images.{cam}"]["duplicated"] >= int(np.sum(reused)), cam
        if cam == "front_1":  # the head camera paces the steps
            np.testing.assert_array_equal(stamps[~reused], t[~reused])
        for i in (0, len(r) - 1):
            assert r.image(cam, i).shape == (480, 640, 3)
    assert stats["image_transport"] == transport, "raw: the recorder encoded; compressed: the cameras' JPEGs"
    assert all(s["received"] > 0 for s in stats["streams"].values()), stats["streams"]
    assert stats["steps"] >= len(r)
    kin = ArmKinematics()
    for arm in ARMS:
        q = r.array(f"{arm.value}.obs_joints").astype(float)
        obs = r.array(f"{arm.value}.obs_ee_pose").astype(float)
        fk = np.array([pose_ds_from_hw(kin.forward(row)) for row in q])
        err_m = np.max(np.linalg.norm(fk[:, :3] - obs[:, :3], axis=1))
        err_rad = max(rotation_error_rad(a, b) for a, b in zip(fk[:, 3:], obs[:, 3:]))
        assert err_m <= TOL and err_rad <= TOL, (
            f"{arm.value}: obs_ee_pose vs M.FK(obs_joints) {err_m:.1e} m {err_rad:.1e} rad"
        )
        grip = r.array(f"{arm.value}.obs_gripper")
        assert np.all((grip >= 0) & (grip <= 1))
    return r


def test_start_refused_then_recorded_stopped_and_committed_on_sigint(node_process, ros_node, tmp_path):
    record_dir = tmp_path / "episodes"
    node_process(
        "egomimic_nodes.camera_node",
        "-r",
        "__node:=cameras",
        "-r",
        f"__ns:=/{NS}",
        "-p",
        "cameras:=[front_1,left_wrist,right_wrist]",
        "-p",
        "backend:=synthetic",
    )
    recorder = node_process(
        "egomimic_nodes.recorder_node",
        "-r",
        "__node:=recorder",
        "-r",
        f"__ns:=/{NS}",
        "-p",
        f"record_dir:={record_dir}",
        "-p",
        "min_free_mb:=1.0",
    )
    status = StatusProbe(ros_node)
    start, stop = topics.RECORDER_START.resolve(NS), topics.RECORDER_STOP.resolve(NS)

    refused = call(ros_node, Trigger, start, Trigger.Request(), timeout_s=30.0)
    assert not refused.success and "not every stream is live" in refused.message, refused.message
    assert wait_for(lambda: status.has(lambda s: s.state == RecorderStatus.ERROR and "start refused" in s.detail), 5)

    change = Parameter(
        name="task_name", value=ParameterValue(type=ParameterType.PARAMETER_STRING, string_value="pick_place")
    )
    [result] = call(
        ros_node, SetParameters, f"/{NS}/recorder/set_parameters", SetParameters.Request(parameters=[change])
    ).results
    assert result.successful, result.reason

    RobotStreams(ros_node)
    replies = []
    assert wait_for(
        lambda: replies.append(call(ros_node, Trigger, start, Trigger.Request())) or replies[-1].success, 20, 0.5
    ), replies[-1].message
    assert wait_for(lambda: status.has(lambda s: s.state == RecorderStatus.RECORDING and s.frames_committed >= 60), 30)
    stopped = call(ros_node, Trigger, stop, Trigger.Request())
    assert stopped.success and "frames committed (complete)" in stopped.message, stopped.message
    assert wait_for(lambda: status.has(lambda s: s.state == RecorderStatus.IDLE), 5)
    first = status.latest.episode_path
    assert Path(first).parent == record_dir and status.latest.task_name == "pick_place"
    assert list(status.latest.stream_names) and min(status.latest.stream_received) > 0
    check_episode(first, 60, "pick_place", "raw")
    assert not call(ros_node, Trigger, stop, Trigger.Request()).success, "nothing open: stop is refused"

    assert call(ros_node, Trigger, start, Trigger.Request()).success
    assert wait_for(lambda: status.has(lambda s: s.episode_path != first and s.frames >= 30), 20)
    second = status.latest.episode_path
    recorder.send_signal(signal.SIGINT)
    assert recorder.wait(15) == 0
    check_episode(second, 30, "pick_place", "raw")


def test_record_true_records_one_episode_of_the_simulated_run(tmp_path):
    """make run RUN_ARGS='record:=true': the real drivers, frames node, gate and policy; the
    episode is opened once every stream is live and committed at shutdown."""
    record_dir = tmp_path / "episodes"
    # 15 s: arming waits for discovery to settle (egomimic_nodes.graph_settle, 1-4 s here), and
    # the arms must then move long enough for the FK check below to mean something.
    rc, summary, out = run_launch(
        tmp_path, "record:=true", f"record_dir:={record_dir}", "task_name:=sim_run", "--duration", "15"
    )
    assert summary is not None, out[-6000:]
    rec = summary["recorder"]
    assert rec is not None and rec["state"] == "IDLE" and rec["frames_committed"] > 30, (rec, out[-6000:])
    assert any(c["check"].startswith("recorder committed an episode") and c["ok"] for c in summary["checks"])
    [episode] = list(record_dir.glob("*.zarr"))
    assert str(episode) == rec["episode_path"]
    r = check_episode(str(episode), 30, "sim_run", "compressed")
    moved = np.ptp(r.array(f"{Arm.LEFT.value}.obs_joints"), axis=0).max()
    assert moved > 0.01, (
        f"the arms did not move in the recorded part ({moved:.4f} rad): the FK check was trivial; "
        f"the run's checks: {[c for c in summary['checks'] if not c['ok']]}"
    )
