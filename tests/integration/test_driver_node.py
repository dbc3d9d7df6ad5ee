"""The driver node (sim backend) as a real lifecycle process over DDS: step tracking within the
X5 speed limits, settling, clipping at the joint limits like the SDK, and the command watchdog."""

import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from sensor_msgs.msg import JointState

from egomimic_hw.description import X5_LIMITS, Arm
from egomimic_nodes import topics
from egomimic_nodes.diagnostics import local_name

from .conftest import wait_for

pytestmark = pytest.mark.integration

START = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])  # SimConfig.initial_joints_rad
NOISE_RAD = 2e-5  # SimConfig.joint_noise_std_rad
TIMEOUT_S, PERIOD_S = 0.1, 0.01  # DriverConfig.command_timeout_s, 1 / rate_hz


class DriverProbe:
    """Starts driver_left, activates it, records its joint states and diagnostics. It commands
    the driver as the gate does: from a node named /eva/safety_gate whose latched status says
    ARMED (the driver applies commands from nothing else; see test_commands_from_anyone_else...)."""

    def __init__(self, node_process, ros_node, *params: str, gate_state: int | None = None):
        from egomimic_msgs.msg import GateStatus

        node_process(
            "egomimic_nodes.driver_node",
            "-r",
            "__ns:=/eva",
            "-r",
            "__node:=driver_left",
            "-p",
            "arm:=left",
            "-p",
            "backend:=sim",
            *(x for p in params for x in ("-p", p)),
        )
        self.node = ros_node
        self.states: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.diag: list[tuple[float, str, dict]] = []
        ros_node.create_subscription(
            JointState, topics.JOINT_STATES.resolve("eva", arm=Arm.LEFT), self._on_state, topics.JOINT_STATES.qos
        )
        ros_node.create_subscription(DiagnosticArray, topics.DIAGNOSTICS.name(), self._on_diag, 50)
        import rclpy

        self.gate = rclpy.create_node("safety_gate", namespace="/eva", context=ros_node.context)
        self.pub = self.gate.create_publisher(
            JointState, topics.JOINT_COMMAND.resolve("eva", arm=Arm.LEFT), topics.JOINT_COMMAND.qos
        )
        self.status = self.gate.create_publisher(
            GateStatus, topics.SAFETY_STATUS.resolve("eva"), topics.SAFETY_STATUS.qos
        )
        self.status.publish(GateStatus(state=GateStatus.ARMED if gate_state is None else gate_state))
        client = ros_node.create_client(ChangeState, "/eva/driver_left/change_state")
        assert client.wait_for_service(timeout_sec=30), "driver lifecycle service did not appear"
        for tid in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            future = client.call_async(ChangeState.Request(transition=Transition(id=tid)))
            assert wait_for(future.done, 20) and future.result().success, f"transition {tid} failed"
        assert wait_for(lambda: len(self.states) > 20 and self.pub.get_subscription_count() > 0, 20)
        # Like the gate, re-send the status until the driver has taken it: a sample from a writer
        # whose node the driver's ROS graph does not know yet is ignored (sources.py), and the
        # latched copy is delivered only once. Its diagnostics (1 Hz) say what it took.
        expected = str(GateStatus.ARMED if gate_state is None else gate_state)

        def taken() -> bool:
            self.status.publish(GateStatus(state=int(expected)))
            return any(v.get("gate_state") == expected for _, _, v in self.diag)

        assert wait_for(taken, 20), f"the driver never took the gate status {expected}: {self.diag[-1:]}"

    def _on_state(self, msg):
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self.states.append((stamp, np.array(msg.position[:6]), np.array(msg.velocity[:6])))

    def _on_diag(self, msg):
        for s in msg.status:
            if local_name(s.name, "eva") == "driver/left":
                self.diag.append((time.monotonic(), s.message, {kv.key: kv.value for kv in s.values}))

    def now_s(self):
        t = self.node.get_clock().now().nanoseconds
        return t * 1e-9

    def command(self, q, gripper=0.5):
        msg = JointState()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.name = [f"left_joint{i}" for i in range(1, 7)] + ["left_gripper"]
        msg.position = [float(x) for x in q] + [gripper]
        self.pub.publish(msg)
        return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9

    def stream(self, q, duration_s, rate_hz=30.0):
        """Publish the same target at the control rate (as the gate does); returns last stamp."""
        end, last = time.monotonic() + duration_s, 0.0
        while time.monotonic() < end:
            last = self.command(q)
            time.sleep(1.0 / rate_hz)
        return last

    def since(self, t0):
        return [s for s in self.states if s[0] >= t0]


def max_speed(samples):
    t = np.array([s[0] for s in samples])
    q = np.array([s[1] for s in samples])
    dt = np.diff(t)
    keep = dt > 0.004  # ignore stamp pairs too close to estimate a speed
    return np.max(np.abs(np.diff(q, axis=0)[keep] / dt[keep, None]), axis=0)


@pytest.mark.parametrize("preview_s", [0.2, 0.02])
def test_step_is_tracked_within_speed_limits_and_settles(node_process, ros_node, preview_s):
    """A step on every joint. With the default 0.2 s preview, 0.5 rad: the SDK's interpolation
    asks for 2.5 rad/s. With 0.02 s, 0.25 rad (the largest step the driver accepts is the speed
    limits x (command period + preview) = 0.27 rad): it asks for 12.5 rad/s and the speed clip
    must hold it at the limit."""
    d = DriverProbe(node_process, ros_node, f"preview_s:={preview_s}")
    q0 = d.states[-1][1]
    assert np.allclose(q0, START, atol=1e-3)
    target = START + (0.5 if preview_s >= 0.1 else 0.25)
    t0 = d.now_s()
    d.stream(target, 1.5)
    samples = d.since(t0)
    speed = max_speed(samples)
    vmax = np.asarray(X5_LIMITS.vel_max)
    noise_allowance = 6 * NOISE_RAD / 0.004
    assert np.all(speed <= vmax * 1.01 + noise_allowance), f"speeds {speed} exceed {vmax}"
    print(f"preview {preview_s} s: max joint speed {np.round(speed, 3)} rad/s (limits {vmax})")
    if preview_s < 0.1:
        assert np.all(speed > 0.9 * vmax), f"the clipped step should run at the speed limit, got {speed}"
    final = np.mean([s[1] for s in samples[-20:]], axis=0)
    assert np.max(np.abs(final - target)) <= 1e-3, f"settled at {final}, target {target}"


def test_targets_at_the_joint_limits_are_reached_and_never_exceeded(node_process, ros_node):
    """Walk joints 1 and 4 to their limits in steps the driver accepts (each within the speed
    limits x (command period + preview) of the measured position): reached, never passed."""
    d = DriverProbe(node_process, ros_node)
    hi, lo = np.asarray(X5_LIMITS.pos_max), np.asarray(X5_LIMITS.pos_min)
    t0 = d.now_s()
    for frac, seconds in ((1 / 3, 1.0), (2 / 3, 1.0), (1.0, 2.0)):
        target = START.copy()
        target[0] = START[0] + frac * (hi[0] - START[0])
        target[3] = START[3] + frac * (lo[3] - START[3])
        d.stream(target, seconds)
    q = np.array([s[1] for s in d.since(t0)])
    assert np.all(q <= hi + 5 * NOISE_RAD) and np.all(q >= lo - 5 * NOISE_RAD)
    final = q[-20:].mean(axis=0)
    assert final[0] == pytest.approx(hi[0], abs=1e-3) and final[3] == pytest.approx(lo[3], abs=1e-3)
    assert int([v for _, _, v in d.diag][-1].get("commands_refused", 0)) == 0


def test_watchdog_holds_within_timeout_plus_one_period_and_says_why(node_process, ros_node):
    d = DriverProbe(node_process, ros_node)
    # A moving target: with the 0.2 s preview the arm is still moving when commands stop.
    t_end = time.monotonic() + 1.0
    k = 0
    last = 0.0
    while time.monotonic() < t_end:
        last = d.command(START + np.r_[0.4 * k / 30.0, np.zeros(5)])
        k += 1
        time.sleep(1 / 30)
    assert wait_for(lambda: any("holding measured position" in m for _, m, _ in d.diag), 3.0)
    time.sleep(0.5)
    after = d.since(last)
    moving = [s for s in after if abs(s[2][0]) > 0.05]  # the ramp runs at 0.4 rad/s
    still = [s for s in after if abs(s[2][0]) <= 1e-3]
    assert moving, "the arm was moving when the commands stopped"
    first_still = still[0][0] - last
    # Externally observed (includes DDS and scheduling), and the driver's own measurement.
    delay_ms = float([v for _, m, v in d.diag if "holding measured position" in m][-1]["last_watchdog_delay_ms"])
    print(f"watchdog: driver hold {delay_ms:.1f} ms, motion stopped {first_still * 1e3:.1f} ms after the last command")
    assert delay_ms <= (TIMEOUT_S + PERIOD_S) * 1e3, f"driver held {delay_ms} ms after the last command"
    assert first_still <= TIMEOUT_S + PERIOD_S + 0.03, (
        f"motion stopped {first_still * 1e3:.0f} ms after the last command"
    )
    # It holds: no drift beyond noise over the next second.
    time.sleep(1.0)
    held = np.array([s[1] for s in d.since(still[0][0])])
    assert np.max(np.ptp(held, axis=0)) <= 10 * NOISE_RAD


def test_sdk_emergency_latches_silences_joint_states_and_refuses_home(node_process, ros_node):
    from std_srvs.srv import Trigger

    d = DriverProbe(node_process, ros_node, "sim.emergency_after_s:=4.0")
    assert wait_for(lambda: any(m.startswith("FAULT (latched)") for _, m, _ in d.diag), 10.0)
    t_fault = time.monotonic()
    count = len(d.states)
    d.stream(START + 0.3, 0.5)  # commands after the fault must not revive anything
    time.sleep(0.3)
    assert len(d.states) <= count + 1, "joint_states must stop: their absence is the fault signal"
    home = ros_node.create_client(Trigger, "/eva/left/home")
    assert home.wait_for_service(timeout_sec=10)
    future = home.call_async(Trigger.Request())
    assert wait_for(future.done, 10)
    assert not future.result().success and "fault" in future.result().message
    assert wait_for(
        lambda: any(m.startswith("FAULT") and int(v["commands_refused"]) > 0 for t, m, v in d.diag if t >= t_fault), 3.0
    ), "diagnostics must count the refusals"


def test_commands_from_anyone_but_the_armed_gate_are_refused_and_the_arm_stays(node_process, ros_node):
    """Defence in depth: a joint command from another node, or from the gate's node while its
    status is DISARMED, or past a joint limit, never moves the arm; each refusal is counted."""
    from egomimic_msgs.msg import GateStatus

    d = DriverProbe(node_process, ros_node, gate_state=GateStatus.DISARMED)
    q0 = d.states[-1][1]
    far = START.copy()
    far[0] += 1.7
    t0 = d.now_s()
    d.stream(far, 0.5)  # from the gate's node, but the gate is DISARMED
    stranger = ros_node.create_publisher(
        JointState, topics.JOINT_COMMAND.resolve("eva", arm=Arm.LEFT), topics.JOINT_COMMAND.qos
    )
    assert wait_for(lambda: stranger.get_subscription_count() > 0, 10)
    msg = JointState()
    msg.name = [f"left_joint{i}" for i in range(1, 7)] + ["left_gripper"]
    msg.position = [float(x) for x in far] + [0.5]
    for _ in range(15):  # from a node that is not the gate at all
        msg.header.stamp = ros_node.get_clock().now().to_msg()
        stranger.publish(msg)
        time.sleep(1 / 30)
    d.status.publish(GateStatus(state=GateStatus.ARMED))
    past = START.copy()
    past[0] = X5_LIMITS.pos_max[0] + 0.05  # the gate's node, ARMED, but past the joint limit
    d.stream(past, 0.3)

    def counts():
        latest = [v for _, _, v in d.diag]
        return latest[-1] if latest else {}

    assert wait_for(
        lambda: (
            int(counts().get("refused.gate_not_armed", 0)) > 5
            and int(counts().get("refused.foreign_publisher", 0)) + int(counts().get("refused.unknown_publisher", 0))
            > 5
            and int(counts().get("refused.outside_limits", 0)) > 3
        ),
        5.0,
    ), counts()
    q = np.array([s[1] for s in d.since(t0)])
    assert np.max(np.abs(q - q0)) <= 10 * NOISE_RAD, f"the arm moved {np.max(np.abs(q - q0)):.4f} rad"


def test_cleanup_undoes_configure_and_configure_again_publishes(ros_node):
    """configure -> cleanup -> configure in one process: cleanup destroys what configure made,
    and the second configure makes exactly what the first did (no second publisher, reader,
    service, timer, companion node or thread); activated, the node publishes joint_states."""
    import threading

    from rclpy.lifecycle import TransitionCallbackReturn

    from egomimic_nodes.driver_node import DriverNode

    ns = "/h5cycle"
    node = DriverNode(context=ros_node.context, namespace=ns)
    states = []
    ros_node.create_subscription(
        JointState, f"{ns}/{topics.JOINT_STATES.name(Arm.LEFT)}", states.append, topics.JOINT_STATES.qos
    )

    def census() -> dict:
        return {
            "publishers": sorted(p.topic_name for p in node.publishers),
            "subscriptions": sorted(s.topic_name for s in node.subscriptions),
            "services": sorted(s.srv_name for s in node.services),
            "timers": len(list(node.timers)),
            "threads": sorted(t.name for t in threading.enumerate()),
            "nodes": sorted(name for name, space in node.get_node_names_and_namespaces() if space == ns),
            "command_readers": node.count_subscribers(f"{ns}/{topics.JOINT_COMMAND.name(Arm.LEFT)}"),
        }

    try:
        before = census()
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        first = census()
        assert first["command_readers"] == 1 and "driver_in" in first["nodes"], first
        assert len(first["threads"]) == len(before["threads"]) + 3, "one Outbox thread per publisher"
        assert len(first["publishers"]) == len(before["publishers"]) + 3 and first["timers"] == before["timers"] + 1
        assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
        assert wait_for(lambda: census() == before, 5.0), (census(), before)
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert wait_for(lambda: census() == first, 5.0), (census(), first)
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        assert wait_for(lambda: len(states) > 10, 10.0), f"{len(states)} joint_states after the second configure"
        assert list(states[-1].name) == Arm.LEFT.joint_names
        assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
        assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
        assert wait_for(lambda: census() == before, 5.0), (census(), before)
    finally:
        node.on_exit()
        node.destroy_node()


@pytest.mark.parametrize(
    "override, reason",
    [
        (("rate_hz", 1000.0), "configure failed: parameter rate_hz"),
        (
            ("gripper_close_m", -0.01),
            "configure failed: gripper calibration override for left: close_m=-0.01 given without open_m",
        ),
        (("arm", "middle"), "configure failed: unknown arm 'middle'"),
    ],
)
def test_a_bad_parameter_fails_every_configure_with_its_reason(ros_node, capfd, override, reason):
    """Parameters are read once, at start; a lifecycle node then refuses configure (it does not
    exit), and refuses it again for the same reason: the values are read-only."""
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from egomimic_nodes.driver_node import DriverNode

    name, value = override
    node = DriverNode(context=ros_node.context, namespace="/h5bad", parameter_overrides=[Parameter(name, value=value)])
    try:
        for _ in range(2):
            assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
            assert reason in capfd.readouterr().err
    finally:
        node.on_exit()
        node.destroy_node()
