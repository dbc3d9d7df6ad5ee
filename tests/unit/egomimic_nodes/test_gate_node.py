"""The gate node's own adapter duties, run in process (the fault battery covers the graph):

- its watchdog (the decision thread's) runs on a steady clock: with use_sim_time and no /clock
  the ROS clock stands still, yet silence must still become a HOLD (a ROS-clock timer would
  never fire);
- an exception inside a service handler is a HOLD whose target goes out at once.
The node's real callbacks are called with real messages; its publishers are replaced by
recorders so what would reach the drivers is seen without a DDS round trip.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from egomimic_hw.description import ARMS, JOINTS_PER_ARM
from egomimic_hw.kinematics import ArmKinematics

pytestmark = pytest.mark.integration

Q = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])


class Recorder:
    """Stands in for a joint_command publisher: keeps what the node sends."""

    def __init__(self):
        self.sent: list[tuple[float, np.ndarray]] = []

    def publish(self, msg) -> None:
        self.sent.append(
            (msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9, np.asarray(msg.position, dtype=float))
        )


@pytest.fixture
def gate_node():
    import rclpy
    from rclpy.parameter import Parameter

    from egomimic_nodes.gate_node import GateNode

    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=["--ros-args", "--disable-external-lib-logs"])
    node = GateNode(
        start_decisions=False,
        context=ctx,
        parameter_overrides=[
            Parameter("use_sim_time", Parameter.Type.BOOL, True),  # and no /clock: the ROS clock stays at 0
            Parameter("required_cameras", Parameter.Type.STRING_ARRAY, ["front_1"]),
            Parameter("shadow_commands", Parameter.Type.INTEGER, 1),
            Parameter(
                "check_state_publishers", Parameter.Type.BOOL, False
            ),  # callbacks called directly: no publisher id
        ],
    )
    for box in node._pub_cmd.values():
        box.close()  # its outbox thread ends; the recorders below take its place
    node._pub_cmd = {arm: Recorder() for arm in ARMS}
    try:
        yield node, ctx
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def _callback(node, kind: str, name: str):
    entities = node.subscriptions if kind == "sub" else node.services
    attr = "topic_name" if kind == "sub" else "srv_name"
    matches = [e for e in entities if getattr(e, attr).endswith(name)]
    assert len(matches) == 1, f"{name}: {[getattr(e, attr) for e in entities]}"
    return matches[0].callback


def _feed_taken(node, topic_suffix: str, msg) -> None:
    """Process one sample the way the gate's drain does (joint_states and camera health are
    taken on each watchdog tick, not delivered: gate_node)."""
    from rclpy.serialization import serialize_message

    [(sub, cb)] = [(sub, cb) for sub, cb in node._taken_subs if sub.topic_name.endswith(topic_suffix)]
    sample = serialize_message(msg) if sub.raw else msg  # joint_states are read raw (serialized.py)
    node._guarded(topic_suffix, lambda: cb(sample, None))


def _feed_state(node) -> None:
    """Fresh joint states of both arms and an OK health report of the one required camera."""
    from sensor_msgs.msg import JointState

    from egomimic_msgs.msg import CameraHealth
    from egomimic_nodes import topics

    for arm in ARMS:
        msg = JointState()
        msg.name = arm.joint_names
        msg.position = [float(v) for v in Q] + [0.5]
        _feed_taken(node, topics.JOINT_STATES.name(arm), msg)  # stamp 0: the stopped ROS clock
    health = CameraHealth()
    health.state = CameraHealth.OK
    _feed_taken(node, topics.CAMERA_HEALTH.name(cam="front_1"), health)


def _propose(node, kin, stamp_ns: int, gripper: float = 0.5) -> None:
    from egomimic_msgs.msg import BimanualCommand
    from egomimic_nodes.msg_convert import array_to_pose

    msg = BimanualCommand()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    for arm in ARMS:
        ps = getattr(msg, arm.value)
        ps.header.frame_id = arm.hw_frame
        array_to_pose(kin.forward(Q), ps.pose)
        setattr(msg, f"{arm.value}_gripper", gripper)
    node._on_proposed(msg)  # what the decision thread does with each proposal it takes


def _trigger(node, name: str):
    from std_srvs.srv import Trigger

    return _callback(node, "srv", f"safety/{name}")(Trigger.Request(), Trigger.Response())


def _armed(node, kin) -> None:
    from egomimic_safety.gate import GateState

    _feed_state(node)
    assert _trigger(node, "arm").success
    for k in (1, 2):  # one shadow, then one forwarded command, stamped just after the ROS time 0
        _feed_state(node)
        _propose(node, kin, k * 1_000_000)
    assert node.gate.state == GateState.ARMED, node.gate.detail
    for arm in ARMS:
        stamp, values = node._pub_cmd[arm].sent[-1]
        assert stamp == pytest.approx(0.002) and np.allclose(values[:JOINTS_PER_ARM], Q, atol=1e-3)


def test_watchdog_detects_silence_while_the_ros_clock_stands_still(gate_node):
    from egomimic_safety.gate import GateState

    node, _ = gate_node
    kin = ArmKinematics()
    assert node.get_clock().now().nanoseconds == 0, "the test needs a ROS clock that does not run"
    _armed(node, kin)
    t_silent = time.monotonic()
    node._decisions.start()  # its watchdog paces on time.monotonic(), whatever the ROS clock does
    while node.gate.state == GateState.ARMED and time.monotonic() - t_silent < 1.0:
        time.sleep(0.005)  # polling the state the thread changes, with the 1 s deadline above
    elapsed = time.monotonic() - t_silent
    assert not node.fatal, node.fatal
    assert node.gate.state == GateState.HOLD, f"no HOLD after {elapsed:.2f} s of silence: {node.gate.detail}"
    assert node.gate.reason.value in ("STALE_STATE", "STALE_COMMAND")
    assert elapsed < 0.5  # 80-90 ms by design; generous for a loaded machine
    for arm in ARMS:
        assert np.array_equal(node._pub_cmd[arm].sent[-1][1], np.append(Q, 0.5))


def test_exception_in_a_service_handler_sends_the_hold_at_once(gate_node):
    from egomimic_safety.gate import GateState

    node, _ = gate_node
    kin = ArmKinematics()
    _armed(node, kin)
    before = {arm: len(node._pub_cmd[arm].sent) for arm in ARMS}

    def broken(*_args):
        raise RuntimeError("injected")

    node.gate.request_arm = broken
    response = _trigger(node, "arm")  # no executor runs: only the handler itself can send
    assert not response.success and "internal error" in response.message
    assert node.gate.state == GateState.HOLD and node.gate.reason.value == "INTERNAL_ERROR"
    for arm in ARMS:
        sent = node._pub_cmd[arm].sent[before[arm] :]
        assert len(sent) >= 1, "the hold target was not sent by the failing handler"
        assert all(np.array_equal(v, np.append(Q, 0.5)) for _, v in sent)


def test_a_forward_carries_its_proposal_stamp_and_a_hold_the_time_it_is_sent(gate_node):
    """The decision is mapped to messages: forwarded targets are stamped with the tick they are
    for (the proposal's stamp), a hold target with the time it goes out (the stopped ROS clock: 0)."""
    from egomimic_safety.gate import GateState

    node, _ = gate_node
    kin = ArmKinematics()
    _armed(node, kin)  # the forwarded command, stamped 2 ms: checked there
    before = {arm: len(node._pub_cmd[arm].sent) for arm in ARMS}
    _feed_state(node)
    _propose(node, kin, 3_000_000, gripper=float("nan"))
    assert node.gate.state == GateState.HOLD and node.gate.reason.value == "NONFINITE", node.gate.detail
    for arm in ARMS:
        [(stamp, values)] = node._pub_cmd[arm].sent[before[arm] :]
        assert stamp == 0.0 and np.array_equal(values, np.append(Q, 0.5))


def test_parameters_carry_the_config_texts_and_ranges(gate_node):
    """`ros2 param describe` shows each config field's text and range (the safety arguments of
    GateConfig are the descriptions of its parameters)."""
    import dataclasses

    from rclpy.parameter import Parameter

    from egomimic_safety.config import GateConfig, GateNodeConfig

    node, _ = gate_node
    for cls in (GateConfig, GateNodeConfig):
        for f in dataclasses.fields(cls):
            desc = node.describe_parameter(f.name)
            assert desc.read_only and desc.description == f.metadata["help"], f.name
            if "range" in f.metadata:
                [r] = desc.floating_point_range or desc.integer_range
                assert (r.from_value, r.to_value) == pytest.approx(f.metadata["range"]), f.name
    assert node.describe_parameter("required_cameras").type == Parameter.Type.STRING_ARRAY.value


@pytest.mark.parametrize(
    "name, value",
    [("watchdog_rate_hz", 5.0), ("max_ee_speed_m_s", 1.0), ("shadow_commands", -1), ("command_timeout_s", 60)],
)
def test_a_value_outside_its_range_is_refused_at_start(name, value):
    import rclpy
    from rclpy.parameter import Parameter

    from egomimic_hw.errors import ConfigError
    from egomimic_nodes.gate_node import GateNode

    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=["--ros-args", "--disable-external-lib-logs"])
    try:
        with pytest.raises(ConfigError, match=f"parameter {name}"):
            GateNode(start_decisions=False, context=ctx, parameter_overrides=[Parameter(name, value=value)])
    finally:
        rclpy.try_shutdown(context=ctx)


def test_unsafe_limits_accepts_a_limit_above_its_maximum_and_says_so():
    """unsafe_limits (set by the launch argument): a limit above its safe maximum is accepted and
    the descriptor says the maximum is lifted; below the minimum is still refused."""
    import rclpy
    from rclpy.parameter import Parameter

    from egomimic_hw.errors import ConfigError
    from egomimic_nodes.gate_node import GateNode

    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=["--ros-args", "--disable-external-lib-logs"])
    unsafe = Parameter("unsafe_limits", value=True)
    try:
        node = GateNode(
            start_decisions=False,
            context=ctx,
            parameter_overrides=[unsafe, Parameter("command_timeout_s", value=60.0)],
        )
        assert node.gate.config.command_timeout_s == 60.0 and node.unsafe_limits
        desc = node.describe_parameter("command_timeout_s")
        assert not desc.floating_point_range and "lifted" in desc.additional_constraints
        node.destroy_node()
        with pytest.raises(ConfigError, match="parameter command_timeout_s"):
            GateNode(
                start_decisions=False,
                context=ctx,
                parameter_overrides=[unsafe, Parameter("command_timeout_s", value=-1.0)],
            )
    finally:
        rclpy.try_shutdown(context=ctx)


def test_every_gate_parameter_is_read_only(gate_node):
    """A limit or a workspace box set at run time would be accepted and ignored (the gate builds
    its config once): it must be refused instead, with the reason."""
    from rclpy.parameter import Parameter

    node, _ = gate_node
    names = node._parameters.keys() - {"use_sim_time"}  # rclpy's own clock switch
    assert {"workspace_left_max_m", "required_cameras", "watchdog_rate_hz", "kinematics"} <= names
    for name in sorted(names):
        current = node.get_parameter(name)
        result = node.set_parameters([Parameter(name, current.type_, current.value)])[0]
        assert not result.successful and "read-only" in result.reason, (name, result.reason)
    before = node.gate.config.workspace_left_max_m
    result = node.set_parameters([Parameter("workspace_left_max_m", Parameter.Type.DOUBLE_ARRAY, [0.0, 0.0, 0.0])])[0]
    assert not result.successful
    assert (
        tuple(node.get_parameter("workspace_left_max_m").value)
        == tuple(before)
        == node.gate.config.workspace_left_max_m
    )


def test_an_integer_is_taken_where_a_float_is_declared():
    import rclpy
    from rclpy.parameter import Parameter

    from egomimic_nodes.gate_node import GateNode

    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=["--ros-args", "--disable-external-lib-logs"])
    try:
        node = GateNode(
            start_decisions=False,
            context=ctx,
            parameter_overrides=[
                Parameter("watchdog_rate_hz", Parameter.Type.INTEGER, 50),
                Parameter("command_timeout_s", Parameter.Type.INTEGER, 1),  # as `command_timeout_s: 1` in YAML
            ],
        )
        try:
            assert node.gate.config.command_timeout_s == 1.0 and isinstance(node.gate.config.command_timeout_s, float)
            assert node._watchdog_period_s == pytest.approx(0.02)
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
