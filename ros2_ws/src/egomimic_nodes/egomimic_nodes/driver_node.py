"""ARX5 driver node, one per arm (a lifecycle node): joint states and FK poses out, joint
commands in. `backend:=sim` drives the simulated SDK controller, `arx5` the real one.

Why one process per arm: each arm has its own CAN bus and SDK controller; a crash or fault on
one must not take the other's hold loop with it. The gate checks both arms' freshness before
forwarding anything, so bimanual atomicity does not need a shared process.

Who may command the arm (defence in depth behind the gate; `require_gate`, default true):
a joint command is applied only when it was published by the gate's node (`gate_node`, in
this node's namespace; checked per message by publisher id, see sources.py) and the gate's
latched `safety/status`, also from that node, is not DISARMED (see COMMANDING_STATES).
Anything else is refused with a counted reason and the arm holds where it is.
ArmDriver then checks the values (joint range, step from the measured position). Without DDS
security a process can still take the gate's node name: README "Safety" says what that means.

Lifecycle (physical meaning): unconfigured/inactive: the controller may exist, nothing is
published and no command is applied; active: state published at `rate_hz`, commands applied,
the command watchdog running. Cleanup releases everything configure made (controller,
publishers, readers, service, timer, threads), so configure can run again.

Parameters: DriverNodeConfig (egomimic_hw.driver.config), DriverConfig, SimConfig as `sim.*`
and Arx5Gains as `arx5.*`: help, ranges and checks in those dataclasses. All are read-only,
read once when the node starts; a bad value makes configure fail with the reason.

Threads: the state loop (read, watchdog, publish at `rate_hz`) runs in its own thread on
monotonic deadlines (egomimic_hw.pacing), not on an executor timer: a pass of rclpy's Python
executor per period was about half of the node's CPU. Between its deadlines the same thread
waits on the joint_command and safety/status readers (taken.py: readers on a companion node
`<name>_in` that no executor spins) and applies a command the moment it arrives, with no
executor pass (about 1.4 ms of CPU each for this lifecycle node's wait set). The executor serves
`home`, parameters and lifecycle transitions. One lock serializes every use of the ArmDriver. The
state loop never publishes itself: joint_states, ee_pose and /diagnostics go out through
Outboxes (outbox.py), each from a thread of its own outside the GIL, because a publish to a
subscriber stopped or descheduled inside its shared-memory port's lock blocks until that
subscriber runs again (seconds), and the loop, which also runs the command watchdog, must not
wait for anyone.

Topics (relative to the robot namespace):
  pub  <arm>/joint_states (sensor_msgs/JointState, rate_hz: 100 Hz), <arm>/ee_pose (PoseStamped,
       <arm>_base, every round(rate_hz / pose_rate_hz)-th tick: 33 Hz)
  sub  <arm>/joint_command (sensor_msgs/JointState, 6 joints + gripper normalized)
  srv  <arm>/home (std_srvs/Trigger): drive to the all-zero home pose (operator action)
  pub  /diagnostics
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.duration import Duration
from rclpy.lifecycle import Node as LifecycleNode
from rclpy.lifecycle import State, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from egomimic_hw.driver.arm_driver import ArmDriver, DriverConfig
from egomimic_hw.driver.arx5 import Arx5Gains
from egomimic_hw.driver.backends import open_controller
from egomimic_hw.driver.config import DriverNodeConfig
from egomimic_hw.driver.sim import SimConfig
from egomimic_hw.kinematics import ArmKinematics
from egomimic_hw.pacing import Pacer
from egomimic_msgs.msg import GateStatus
from egomimic_nodes import diagnostics, qos, topics
from egomimic_nodes.msg_convert import pose_stamped
from egomimic_nodes.outbox import Outbox, close_all
from egomimic_nodes.params import declare_config
from egomimic_nodes.serialized import SerializedJointState
from egomimic_nodes.sources import SourceCheck, node_fqn
from egomimic_nodes.spin import end_profile, run_node, start_profile
from egomimic_nodes.taken import TakenSubscriptions

COMMANDING_STATES = (GateStatus.ARMING, GateStatus.ARMED, GateStatus.HOLD, GateStatus.ESTOP)
"""Gate states in which its joint commands are applied: ARMED forwards, HOLD/ESTOP send the hold
target. ARMING is accepted because status and commands are separate topics with no order
between them: the first forwarded command can overtake the ARMED status. The gate never
commands while DISARMED, so a command then is from something else or from the past."""


STATE_KEEP = 4
"""joint_states samples that may wait while their writer is blocked (40 ms at 100 Hz); older
ones are dropped and counted (`outbox_dropped` in /diagnostics)."""
WATCHDOG_WAKE_AFTER_S = 1e-4
"""The state loop wakes this long after the watchdog's due time (the timeout is strict: '>')."""


class DriverNode(LifecycleNode):
    PARAMETERS = (
        (DriverNodeConfig, "", ()),
        (DriverConfig, "", ("arm", "gripper")),
        (SimConfig, "sim.", ()),
        (Arx5Gains, "arx5.", ()),
    )
    """What --help lists (declared in _declare_parameters)."""

    WAITSET_EXECUTOR = True  # lifecycle node; its command callbacks take the message info: spin.make_executor

    def __init__(self, **node_options):
        super().__init__("driver", **node_options)
        self._driver: ArmDriver | None = None
        self._lock = threading.RLock()
        """Serializes every use of self._driver: the state loop thread and the executor."""
        self._loop: threading.Thread | None = None
        self._pacer: Pacer | None = None
        self._gate_state: int | None = None
        self._t0 = time.monotonic()
        self._active = False
        self._pub_joints = self._pub_pose = self._pub_diag = None  # Outboxes, from on_configure
        self._inputs: TakenSubscriptions | None = None
        self._srv = self._diag_timer = None
        self._sdk_build = self._kinematics = ""
        self._controller = None
        self.fatal = ""
        """Set by the state loop when it cannot go on: the node exits 1 (spin.run_node)."""
        self._parameter_error = ""
        """Why the parameters were refused ('' when accepted): every configure fails with it."""
        try:
            self._declare_parameters()
        except Exception as exc:  # noqa: BLE001 - a lifecycle node refuses configure with the reason, it does not exit
            self._parameter_error = str(exc) or type(exc).__name__

    def _declare_parameters(self) -> None:
        """Every parameter, once, at start (read-only: a configure after a cleanup reads the
        same). The gripper overrides are optional doubles: unset means the backend's calibration."""
        self._config = declare_config(self, DriverNodeConfig)
        self._driver_config = declare_config(
            self, DriverConfig, arm=self._config.driven_arm, gripper=self._config.gripper_calibration
        )
        self._sim_config = declare_config(self, SimConfig, prefix="sim.")
        self._gains = declare_config(self, Arx5Gains, prefix="arx5.")

    # -- lifecycle ----------------------------------------------------------------------------
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        try:
            if self._parameter_error:
                raise ValueError(self._parameter_error)
            config = self._config
            self.arm = config.driven_arm
            controller = open_controller(
                config.backend,
                sim=self._sim_config,
                seed=config.controller_seed,
                arx5=config.arx5(self._gains, self._driver_config.preview_s),
            )
            try:
                kin = ArmKinematics(backend=config.kinematics)
            except Exception:
                controller.close()  # a retried configure must not find the arm still held by this one
                raise
            self._driver = ArmDriver(self._driver_config, controller, kin)
            self._controller, self._kinematics = controller, kin.backend
            self._sdk_build = controller.sdk_build.describe() if getattr(controller, "sdk_build", None) else ""
            cal = self._driver_config.gripper
            self.get_logger().info(
                f"kinematics: {kin.backend} ({kin.backend_reason}); gripper calibration: open "
                f"{cal.open_m:+.4f} m, close {cal.close_m:+.4f} m" + (f"; {self._sdk_build}" if self._sdk_build else "")
            )
        except Exception as exc:  # noqa: BLE001 - refuse the transition with the reason
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self._rate_hz = config.rate_hz
        self._pose_every = config.pose_every_ticks
        self._ticks = 0
        self._names = self.arm.joint_names
        self._js: SerializedJointState | None = None
        # Lifecycle publishers for the topics' declared semantics; _tick publishes only while active.
        self._pub_joints = Outbox(
            self.create_lifecycle_publisher(JointState, topics.JOINT_STATES.name(self.arm), topics.JOINT_STATES.qos),
            keep=STATE_KEEP,
        )
        self._pub_pose = Outbox(
            self.create_lifecycle_publisher(PoseStamped, topics.EE_POSE.name(self.arm), topics.EE_POSE.qos)
        )
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        )
        self._require_gate = config.require_gate
        gate_fqn = node_fqn(self.get_namespace(), config.gate_node)
        command_topic = self.resolve_topic_name(topics.JOINT_COMMAND.name(self.arm))
        self._command_source = SourceCheck(self, command_topic, gate_fqn)
        self._status_source = SourceCheck(self, self.resolve_topic_name(topics.SAFETY_STATUS.name()), gate_fqn)
        # Taken by the state loop, not delivered by the executor (module docstring).
        self._inputs = TakenSubscriptions(self.context, f"{self.get_name()}_in", self.get_namespace())
        self._status_sub = self._inputs.subscribe(
            GateStatus, self.resolve_topic_name(topics.SAFETY_STATUS.name()), qos.LATCHED
        )
        self._sub = self._inputs.subscribe(JointState, command_topic, qos.COMMAND)
        self._command_writers_max = 0
        self._last_measured_at: float | None = None
        self._last_stamp = None
        self._srv = self.create_service(Trigger, f"{self.arm.value}/home", self._on_home)
        self._diag_timer = self.create_timer(1.0, self._publish_diagnostics)
        self._last_state = None
        self.get_logger().info(
            f"configured: arm={self.arm.value} backend={config.backend} rate={config.rate_hz} Hz; "
            "commands accepted "
            + (
                f"only from {gate_fqn} while it is not DISARMED"
                if self._require_gate
                else "from ANY publisher (require_gate:=false: tests and bench rigs only)"
            )
        )
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        result = super().on_activate(state)  # enables the lifecycle publishers first
        self._active = True
        self._start_loop()
        self.get_logger().info("active: publishing state, applying commands")
        return result

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        self._active = False
        self._stop_loop()
        self._hold_now()
        return super().on_deactivate(state)

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_exit(self) -> None:
        """The node's own exit: the state loop stops, the arm holds, the controller is released.
        Its readers, publishers and service are the middleware's teardown (destroy_node): under
        spin's guard, or skipped when the launcher is gone (fc170: two drivers sat > 3 s in
        rclpy's destroy, inside on_exit, after their launcher's SIGKILL)."""
        self._stop_loop()
        self._hold_now()
        self._release_controller()

    def destroy_node(self) -> None:
        self._release()
        super().destroy_node()

    # -- the state loop -----------------------------------------------------------------------
    def _release_controller(self) -> None:
        """The state loop stops and the driver (the SDK's controller, or the simulation) is closed."""
        self._stop_loop()
        with self._lock:
            if self._driver is not None:
                self._driver.close()
                self._driver = None
            self._controller = None

    def _start_loop(self) -> None:
        if self._loop is not None:
            return
        # The loop thread and the executor share the GIL: hand it over within 1 ms, not
        # CPython's default 5 ms, so a busy callback cannot delay a state sample by a period.
        sys.setswitchinterval(0.001)
        self._pacer = Pacer(self._rate_hz)
        self._loop = threading.Thread(target=self._run_loop, args=(self._pacer,), name="state_loop", daemon=True)
        self._loop.start()

    def _stop_loop(self) -> None:
        loop, pacer = self._loop, self._pacer
        self._loop = self._pacer = None
        if pacer is not None:
            pacer.stop()
            if self._inputs is not None:
                self._inputs.wake()
        if loop is not None and loop is not threading.current_thread():
            loop.join(timeout=2.0)

    def _run_loop(self, pacer: Pacer) -> None:
        """Ticks at `rate_hz`; in between it applies commands as they arrive, and it also wakes
        when the command watchdog is due, so the arm holds within the timeout plus the wake-up
        latency, not plus a period."""
        self._take_inputs(apply_commands=False)  # commands sent while inactive are not for now
        readers = [self._status_sub, self._sub]
        profiler = start_profile()
        try:
            self._serve(pacer, readers)
        finally:
            end_profile(profiler, self, "state_loop")

    def _serve(self, pacer: Pacer, readers: list) -> None:
        while not pacer.stopped:
            due = self._watchdog_due_monotonic()
            deadline = pacer.next_deadline if due is None else min(due, pacer.next_deadline)
            try:
                if self._inputs.wait(readers, min(max(0.0, deadline - time.monotonic()), 0.25)):
                    self._take_inputs()
                now = time.monotonic()
                if due is not None and due <= now:
                    self._on_watchdog()
                if pacer.take_due(now):
                    self._on_tick()
            except Exception as exc:  # noqa: BLE001 - as an exception in a timer callback would: the node exits 1
                # (spin.run_node sees `fatal`); state stops, so the gate holds, and on_exit holds the arm.
                self.fatal = f"state loop: {type(exc).__name__}: {exc}"
                return

    # -- callbacks ----------------------------------------------------------------------------
    def _now_s(self) -> float:
        return time.monotonic() - self._t0

    def _take_inputs(self, apply_commands: bool = True) -> None:
        """The gate's statuses first (a command is judged by the newest), then the commands in
        order; with apply_commands=False the commands are dropped."""
        for msg, info in self._inputs.take(self._status_sub):
            self._on_gate_status(msg, info)
        for msg, info in self._inputs.take(self._sub):
            if apply_commands:
                self._on_command(msg, info)

    def _on_gate_status(self, msg: GateStatus, info) -> None:
        verdict = self._status_source.verdict(info)
        if not verdict.ok:
            self.get_logger().error(f"ignored: {verdict.why}", throttle_duration_sec=2.0)
            return
        self._gate_state = int(msg.state)

    def _on_command(self, msg: JointState, info) -> None:
        with self._lock:
            self._apply_command(msg, info)

    def _apply_command(self, msg: JointState, info) -> None:
        if not self._active or self._driver is None:
            return
        now_s = self._now_s()
        if self._require_gate:
            verdict = self._command_source.verdict(info)
            if not verdict.ok:
                self._refuse("foreign_publisher" if verdict.foreign else "unknown_publisher", verdict.why, now_s)
                return
            if self._gate_state not in COMMANDING_STATES:
                state = "no status received" if self._gate_state is None else f"state {self._gate_state}"
                self._refuse("gate_not_armed", f"the gate is not commanding ({state})", now_s)
                return
        if not self._driver.on_command(msg.position, now_s, names=msg.name):
            self.get_logger().error(f"command refused: {self._driver.refusal}", throttle_duration_sec=2.0)

    def _refuse(self, key: str, why: str, now_s: float) -> None:
        self._driver.refuse_command(key, why, now_s)
        self.get_logger().error(f"command refused: {why}", throttle_duration_sec=2.0)

    def _on_tick(self) -> None:
        with self._lock:
            self._tick()

    def _watchdog_due_monotonic(self) -> float | None:
        with self._lock:
            due = self._driver.watchdog_due_s() if self._active and self._driver is not None else None
        return None if due is None else self._t0 + due + WATCHDOG_WAKE_AFTER_S

    def _on_watchdog(self) -> None:
        with self._lock:
            if self._active and self._driver is not None and self._driver.check_watchdog(self._now_s()):
                self._diagnostics()  # say at once why the arm holds

    def _tick(self) -> None:
        if not self._active or self._driver is None:
            return
        now_s = self._now_s()
        ros_now = self.get_clock().now()  # read with now_s: the stamp must not move with the work below
        with_pose = (self._ticks + 1) % self._pose_every == 0
        state = self._driver.tick(now_s, with_pose=with_pose)
        changed = self._last_state is None or (state.holding, state.reading.fault) != (
            self._last_state.holding,
            self._last_state.reading.fault,
        )
        self._last_state = state
        if changed:
            self._diagnostics()  # say at once why the arm holds or faulted, not at the next 1 Hz report
        if state.reading.fault:
            return  # a silent joint_states stream is the fault signal, besides /diagnostics
        stamp = self._measurement_stamp(now_s, state.reading.measured_at_s, ros_now)
        js = self._js  # serialized once; each tick writes its stamp and values (serialized.py)
        if js is None:
            js = self._js = SerializedJointState(self.arm.hw_frame, self._names)
        reading = state.reading
        self._pub_joints.publish_bytes(
            js.fill(
                stamp.sec * 1_000_000_000 + stamp.nanosec,
                np.append(reading.joints_rad, state.gripper_norm),
                np.append(reading.joint_velocities_rad_s, 0.0),
            )
        )
        self._ticks += 1
        if with_pose:
            self._pub_pose.publish(pose_stamped(state.ee_pose_hw, self.arm.hw_frame, stamp))

    def _measurement_stamp(self, now_s: float, measured_at_s: float, ros_now):
        """The ROS time of the measurement. A second read of the same measurement gets the same
        stamp, and stamps never go backwards (two clock reads per sample would otherwise jitter
        by microseconds): consumers treat a stamp going backwards as an implausible state.
        `ros_now` is the ROS time read right beside `now_s`, before the tick's work: a ROS time
        read after it would shift every stamp by that work's duration, which varies with load,
        and speeds computed from the stamps would be off by as much."""
        if measured_at_s == self._last_measured_at and self._last_stamp is not None:
            return self._last_stamp.to_msg()
        age_ns = int(max(0.0, now_s - measured_at_s) * 1e9)
        stamp = ros_now - Duration(nanoseconds=age_ns)  # ros_now was read together with now_s
        if self._last_stamp is not None and stamp <= self._last_stamp:
            stamp = self._last_stamp + Duration(nanoseconds=1)
        self._last_measured_at, self._last_stamp = measured_at_s, stamp
        return stamp.to_msg()

    def _on_home(self, request, response):
        with self._lock:
            return self._home(response)

    def _home(self, response):
        if self._driver is None or not self._active:
            response.success, response.message = False, "driver not active"
            return response
        message = self._driver.home(self._now_s())
        response.success = not message.startswith("refused")
        response.message = message
        self.get_logger().warning(f"home requested: {message}")
        return response

    def _publish_diagnostics(self) -> None:
        with self._lock:
            self._diagnostics()

    def _diagnostics(self) -> None:
        if self._driver is None:
            return
        s = self._last_state
        c = self._driver.counters
        if s is None:
            level, message = diagnostics.WARN, "not active"
        elif s.reading.fault:
            level, message = diagnostics.ERROR, s.status
        elif s.holding:
            level, message = diagnostics.OK, s.status
        else:
            level, message = diagnostics.OK, s.status
        writers = self._sub.get_publisher_count()
        self._command_writers_max = max(self._command_writers_max, writers)
        values = {
            "commands_received": c.commands_received,
            "commands_applied": c.commands_applied,
            "commands_refused": c.commands_refused,
            **{f"refused.{k}": v for k, v in sorted(c.refusals.items())},
            "implausible_readings": c.implausible_readings,
            "gate_state": "unknown" if self._gate_state is None else self._gate_state,
            "watchdog_holds": c.watchdog_holds,
            "last_watchdog_delay_ms": round(c.last_watchdog_delay_s * 1e3, 2),
            "last_refusal": self._driver.refusal,
            "kinematics": self._kinematics,
            **({"sdk_build": self._sdk_build} if self._sdk_build else {}),
            **(
                {"gripper_clamps": self._controller.gripper_clamps}
                if hasattr(self._controller, "gripper_clamps")
                else {}
            ),
            "outbox_dropped": self._pub_joints.dropped + self._pub_pose.dropped,
            "slowest_publish_ms": round(max(self._pub_joints.slowest_s, self._pub_pose.slowest_s) * 1e3, 1),
            "holding": s.holding if s else True,
            # DDS-matched writers of joint_command (the gate's), now and the most seen: never 1
            # while the gate ran means this reader never matched it (discovery), 1 with nothing
            # received means it matched and heard nothing (transport)
            "command_writers": writers,
            "command_writers_max": self._command_writers_max,
        }
        self._pub_diag.publish(
            diagnostics.array(
                self, diagnostics.status(f"driver/{self.arm.value}", f"arx5_{self.arm.value}", level, message, values)
            )
        )

    def _hold_now(self) -> None:
        with self._lock:
            if self._driver is not None:
                try:
                    self._driver.hold_measured(self._now_s())
                except Exception as exc:  # noqa: BLE001
                    self.get_logger().error(f"hold failed: {exc}")

    def _release(self) -> None:
        """Undo on_configure (cleanup, shutdown, the node's destroy): the state loop stops, the
        controller is released, and the readers, publishers (with their Outbox threads), service
        and timer are destroyed, so that a configure after a cleanup makes each of them once."""
        self._release_controller()
        with self._lock:
            inputs, self._inputs = self._inputs, None
            boxes = [b for b in (self._pub_joints, self._pub_pose, self._pub_diag) if b is not None]
            self._pub_joints = self._pub_pose = self._pub_diag = None
        if inputs is not None:
            inputs.destroy()
        if self._diag_timer is not None:
            self.destroy_timer(self._diag_timer)
            self._diag_timer = None
        if self._srv is not None:
            self.destroy_service(self._srv)
            self._srv = None
        close_all(boxes)
        for box in boxes:
            self.destroy_lifecycle_publisher(box.publisher)  # also a plain publisher (the diagnostics')


def main(args=None) -> int:
    return run_node(DriverNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
