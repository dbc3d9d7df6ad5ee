"""Safety gate node: the only publisher of `<arm>/joint_command`.

  sub  command/proposed (BimanualCommand, hardware frame), <arm>/joint_states,
       cameras/<cam>/health (CameraHealth) for each camera in `required_cameras`, or with
       camera_liveness image_stamps the header stamps of cameras/<cam>/image_raw (a stock driver)
  pub  <arm>/joint_command (only while ARMED; the hold target in HOLD/ESTOP)
  pub  safety/status (GateStatus, latched; on every change and at 2 Hz), /diagnostics (1 Hz)
  srv  safety/arm, safety/disarm, safety/estop, safety/reset (std_srvs/Trigger)
The logic is egomimic_safety.gate.SafetyGate; this node only converts messages, reads the two
clocks (the ROS clock for stamp ages; time.monotonic() for silence, so a wall-clock step
cannot hide a dead producer) and runs the watchdog so silence is detected even when no message
arrives.

Decisions run on a thread of their own (`decisions`), not in an executor callback: it blocks
in a wait set on the command/proposed reader (level-triggered: a waiting sample is seen however
the middleware signalled it; a run once saw the EventsExecutor deliver no proposal for 300 ms
right after arming while the launcher's reader of the same writer got every one), decides on
each proposal the moment it arrives, and runs the watchdog whenever its period is due (the
wait's timeout, on time.monotonic()). A ROS-clock timer would stall when the system clock steps
back and stop altogether with use_sim_time when /clock stops, which is exactly when silence must
still be detected. The watchdog runs at 100 Hz so a 100 ms timeout is seen within 10 ms (the
HOLD target is still re-sent only once per control period). The other timers (status,
diagnostics, the publisher check) run on a STEADY clock in the executor. The measured EE pose is computed by the gate, by FK of
the measured joints when a decision first needs them, so it never compares against a pose from
another instant. Any
exception in a callback or a service handler becomes a HOLD (INTERNAL_ERROR) whose target goes
out at once, never a dead gate.

Measured state is trusted only from the arm's driver: each joint_states sample must come from
the driver node's writer (publisher id, see sources.py) and pass the plausibility checks of
egomimic_safety.plausibility; a second publisher on a state topic is looked for twice a second.
Either is STATE_IMPLAUSIBLE.

Joint states and camera health are taken, not delivered: their readers sit on a companion node
(`<name>_state`) that no executor spins, and the node drains them on every watchdog tick and
before every decision and arm/disarm/reset (one thread at a time), each sample under the lock on its own (an e-stop
waiting for the lock goes first between two samples, also during a 1 kHz spoofing flood). A
decision therefore always sees the newest sample, an implausible or spoofed sample faults within
one watchdog period (10 ms), and the main node can run on rclpy's EventsExecutor
(spin.make_executor), which cannot pass a callback the message info that the publisher check
needs. The two 100 Hz state streams and the three 30 Hz health streams cost no executor wake-ups.

Every publisher of the gate sends through an Outbox (outbox.py): a thread of its own, outside
the GIL. A receiver that is stopped or descheduled inside its shared-memory port's lock blocks a
publish until it runs again (seconds, if it was SIGSTOPped); with rclpy's publish() that stopped
the whole gate. Now it holds up only that writer: the watchdog, the other arm and the e-stop go
on. Up to COMMAND_KEEP commands per arm wait, in order, while their writer is blocked. The
watchdog also reports its own lateness (diagnostics `watchdog_late_*`): a gate that did not run
says so, instead of blaming a producer.

`safety/estop` is served by a companion node (`<name>_estop`) spun by its own executor on its own
thread, so it answers within milliseconds even while the main callbacks are saturated (a
command flood, a burst of service calls). Every access to the gate takes one lock; a decision
holds it for about a millisecond.

On SIGINT/SIGTERM (and when the launcher dies: spin.py) a gate that is not DISARMED latches
ESTOP and sends its hold target before it exits 0; a DISARMED gate sends nothing (the drivers'
watchdogs hold).

joint_command stamps: a forwarded command carries the stamp of the proposal it answers (the
control tick it is for: rate limits are speeds x the difference of these stamps, so an auditor
of the drivers' input can check them); a hold target carries the time it is sent.

Parameters (read-only; `ros2 param describe` shows each one's text and range): every GateConfig
field (egomimic_safety/config.py: units, defaults, sources and safety arguments), with
`required_cameras` a string array (an empty list requires none), and every GateNodeConfig field
(the same module: `watchdog_rate_hz`, `check_state_publishers`, `kinematics`, `camera_liveness`).
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState

from egomimic_hw.description import ARMS, JOINTS_PER_ARM, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_msgs.msg import BimanualCommand, CameraHealth, GateStatus
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.msg_convert import pose_to_array, stamp_to_s
from egomimic_nodes.outbox import Outbox, close_all
from egomimic_nodes.params import declare_config
from egomimic_nodes.serialized import read_header, read_joint_state
from egomimic_nodes.sources import SourceCheck, node_fqn
from egomimic_nodes.spin import end_profile, run_node, start_profile
from egomimic_nodes.taken import TakenSubscriptions
from egomimic_safety.checks import ArmCommand, ArmMeasurement
from egomimic_safety.config import GateConfig, GateNodeConfig
from egomimic_safety.gate import CameraReport, GateState, Proposal, SafetyGate, Send

STATE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=20, reliability=ReliabilityPolicy.RELIABLE)
"""The polled joint_states readers: 200 ms of samples at 100 Hz, so a tick that comes late
still sees every sample's stamp and position for the speed check."""
COMMAND_KEEP = 32
"""joint_command messages per arm that may wait while the writer is blocked (about 1 s of hold
re-sends): one writer serves every reader of the topic, so a driver stopped inside its port's
lock holds up delivery to all of them, and on its return each reader still gets every hold in
order (the fault rig audits them by stamp). A driver applies a burst in order, each within its
own step check, ending at the newest target; with fewer kept, the holds sent while it was
stopped would be missing from every reader's record."""
HEALTH_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)
"""The polled camera health readers: 300 ms of reports at 30 Hz (reports are per frame)."""
IMAGE_STAMP_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=2, reliability=ReliabilityPolicy.BEST_EFFORT)
"""camera_liveness image_stamps: the newest frames of a stock driver, best effort (the sensor data
profile such drivers publish with; a reliable publisher serves this reader too). Only the header
is read (serialized.read_header)."""
STATUS_KEEP = 16
"""Status messages that may wait while the status writer is blocked: every transition still
goes out (observers count them)."""
WATCHDOG_LATE_PERIODS = 5
"""A watchdog tick this many periods after the previous one is reported as the gate's own
lateness (logged, counted in /diagnostics)."""
EXIT_ACK_WAIT_S = 0.5
"""On exit, how long the last status and hold may wait for their readers' acknowledgements (all
publishers together). DDS delivery to a reader can pause ~300 ms (egomimic_nodes.graph_settle);
a gate that exits first takes its ESTOP announcement with it (a fault-battery run saw the
launcher's SIGKILL leave the last status received as ARMED). Exit still ends within ~0.9 s."""


def measurement_from_joint_state(arm: Arm, raw: bytes) -> ArmMeasurement:
    """A driver's serialized joint_states sample as the gate's measurement (no FK: computed when a
    decision needs it, SafetyGate._measured). ValueError names what is wrong with a malformed one.
    Shared with the replay regression (egomimic_launch.replay), which must read samples as the
    gate does."""
    stamp_ns, names, positions = read_joint_state(raw)
    if names != arm.joint_names or positions.shape != (JOINTS_PER_ARM + 1,) or not np.all(np.isfinite(positions)):
        raise ValueError(
            f"malformed {arm.value}/joint_states: names {names}, {positions.shape[0]} non-finite or missing values"
        )
    sec, nanosec = divmod(stamp_ns, 1_000_000_000)
    return ArmMeasurement(
        joints_rad=positions[:JOINTS_PER_ARM],
        gripper_norm=float(positions[JOINTS_PER_ARM]),
        ee_pose_hw=None,
        stamp_s=sec + nanosec * 1e-9,  # as msg_convert.stamp_to_s
    )


def camera_report(msg: CameraHealth) -> CameraReport:
    """A camera node's health report, reduced to what the gate judges."""
    return CameraReport(
        ok=msg.state == CameraHealth.OK,
        detail=msg.detail,
        late=msg.state in (CameraHealth.STALLED, CameraHealth.STARTING),
        last_frame_stamp_s=stamp_to_s(msg.last_frame_stamp),
    )


def proposal_from_command(msg: BimanualCommand, info: dict | None = None) -> Proposal:
    """A command/proposed message as the gate's Proposal (hardware frame; the gate checks frame ids).
    `info`: its DDS message info (source and reception times, ns of the system clock), given only
    where the gate's clock is the system clock (not use_sim_time)."""
    written = (info or {}).get("source_timestamp") or None
    received = (info or {}).get("received_timestamp") or None
    return Proposal(
        stamp_s=stamp_to_s(msg.header.stamp),
        arms={
            arm: ArmCommand(
                frame_id=getattr(msg, arm.value).header.frame_id,
                pose=pose_to_array(getattr(msg, arm.value).pose),
                gripper_norm=float(getattr(msg, f"{arm.value}_gripper")),
            )
            for arm in ARMS
        },
        observation_stamp_s=stamp_to_s(msg.observation_stamp),
        written_s=written * 1e-9 if written and received else None,
        received_s=received * 1e-9 if written and received else None,
    )


class GateNode(Node):
    PARAMETERS = ((GateConfig, "", ()), (GateNodeConfig, "", ()))
    """What --help lists (declared in __init__)."""

    def __init__(self, start_decisions: bool = True, **node_options):
        """`node_options`: rclpy Node keyword arguments (context, parameter_overrides), for
        tests that run the node in process; the launched node passes none. Such a test may
        leave the decision thread stopped (start_decisions=False) and drive it itself."""

        super().__init__("safety_gate", **node_options)
        # Every parameter is read-only: the gate builds its config once, so a `ros2 param set`
        # of a limit or a workspace box is refused, never accepted and silently ignored.
        node_config = declare_config(self, GateNodeConfig)
        config = declare_config(self, GateConfig, lift_upper=node_config.unsafe_limits)
        self.unsafe_limits = node_config.unsafe_limits
        self._sim_time = bool(self.get_parameter("use_sim_time").value)
        """The gate's clock is /clock: the DDS times (system clock) do not compare with stamps."""
        if node_config.unsafe_limits:
            self.get_logger().warning(
                "UNSAFE LIMITS: limits above their documented safe maxima are accepted (unsafe_limits:=true)"
            )
        rate_hz = node_config.watchdog_rate_hz
        check_sources = node_config.check_state_publishers
        # one solver per arm, shared with the gate
        self._kin = {arm: ArmKinematics(backend=node_config.kinematics) for arm in ARMS}
        self.gate = SafetyGate(config, self._kin)
        self._lock = threading.Lock()
        """Serializes every access to self.gate: the estop thread and the main callbacks."""
        self._estop_waiting = threading.Event()
        """Set while an e-stop waits for the lock: the main callbacks step aside (a plain lock
        is not fair: under a command flood the main thread would re-take it every time)."""
        self._pub_cmd = {
            arm: Outbox(
                self.create_publisher(JointState, topics.JOINT_COMMAND.name(arm), topics.JOINT_COMMAND.qos),
                keep=COMMAND_KEEP,
            )
            for arm in ARMS
        }
        self._state_sources: dict[Arm, SourceCheck] = {}
        # Joint states and camera health are taken, not delivered (module docstring, taken.py).
        self._taken = TakenSubscriptions(self.context, f"{self.get_name()}_state", self.get_namespace())
        self._taken_subs = []  # (reader, callback(msg, info) -> hold target or None), drained in this order
        for arm in ARMS:
            topic = self.resolve_topic_name(topics.JOINT_STATES.name(arm))
            if check_sources:
                self._state_sources[arm] = SourceCheck(
                    self, topic, node_fqn(self.get_namespace(), f"driver_{arm.value}")
                )
            # raw: read with serialized.read_joint_state, no Python message per 100 Hz sample
            self._taken_subs.append(
                (self._taken.subscribe(JointState, topic, STATE_QOS, raw=True), self._joint_cb(arm))
            )
        for cam in config.required_cameras:
            if node_config.camera_liveness == "image_stamps":
                topic = self.resolve_topic_name(topics.IMAGE_RAW.name(cam=cam))
                reader = self._taken.subscribe(Image, topic, IMAGE_STAMP_QOS, raw=True)
                self._taken_subs.append((reader, self._image_stamp_cb(cam)))
            else:
                topic = self.resolve_topic_name(topics.CAMERA_HEALTH.name(cam=cam))
                self._taken_subs.append((self._taken.subscribe(CameraHealth, topic, HEALTH_QOS), self._health_cb(cam)))
        self._proposals = self._taken.subscribe(
            BimanualCommand, self.resolve_topic_name(topics.COMMAND_PROPOSED.name()), topics.COMMAND_PROPOSED.qos
        )
        self._take_lock = threading.Lock()
        """One thread takes from the readers at a time (the decision thread, or a service that
        wants the newest measurement)."""
        self._pub_status = Outbox(
            self.create_publisher(GateStatus, topics.SAFETY_STATUS.name(), topics.SAFETY_STATUS.qos), keep=STATUS_KEEP
        )
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        )
        for srv, fn in (
            (topics.SAFETY_ARM, self._srv_arm),
            (topics.SAFETY_DISARM, self.gate.disarm),
            (topics.SAFETY_RESET, self.gate.reset),
        ):
            self.create_service(srv.type, srv.name, self._service(srv.name.rsplit("/", 1)[-1], fn))
        self._last_published = None
        # use_global_arguments=False: the command line's `-r __node:=` remap would otherwise
        # rename this companion to the gate's own name too.
        self._estop_node = Node(
            f"{self.get_name()}_estop", namespace=self.get_namespace(), context=self.context, use_global_arguments=False
        )
        self._estop_node.create_service(
            topics.SAFETY_ESTOP.type,
            self.resolve_topic_name(topics.SAFETY_ESTOP.name),
            self._service("estop", self.gate.estop),
        )
        self._estop_executor = SingleThreadedExecutor(context=self.context)
        self._estop_executor.add_node(self._estop_node)
        # The e-stop thread needs the GIL too: hand it over within 1 ms instead of CPython's 5 ms.
        sys.setswitchinterval(0.001)
        self._estop_thread = threading.Thread(target=self._spin_estop, name="estop", daemon=True)
        self._estop_thread.start()
        steady = Clock(clock_type=ClockType.STEADY_TIME)  # never the ROS clock: see the module docstring
        self._watchdog_period_s = node_config.watchdog_period_s
        self._last_watchdog: tuple[float, float] | None = None  # (monotonic, this thread's CPU time)
        self.watchdog_late = 0
        self.watchdog_late_max_s = 0.0
        self.empty_wakeups = 0
        """Waits that said "ready" yet gave nothing to take (the loop then paces on the watchdog)."""
        self.fatal = ""
        self._stopping = threading.Event()
        self._decisions = threading.Thread(target=self._decision_loop, name="decisions", daemon=True)
        if self._state_sources:
            self.create_timer(0.5, self._check_state_publishers, clock=steady)
        self.create_timer(0.5, self._locked(self._publish_status), clock=steady)
        self.create_timer(1.0, self._locked(self._publish_diagnostics), clock=steady)
        self._publish_status()
        if start_decisions:
            self._decisions.start()
        self.get_logger().info(
            f"safety gate up: DISARMED; cameras required: {list(config.required_cameras) or 'none'}; "
            f"watchdog {rate_hz:.0f} Hz; kinematics {self._kin[ARMS[0]].backend} ({self._kin[ARMS[0]].backend_reason})"
        )

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _locked(self, fn):
        def run():
            with self._lock:
                fn()

        return run

    def _spin_estop(self) -> None:
        try:
            self._estop_executor.spin()
        except Exception:  # noqa: BLE001 - context shutdown ends the spin
            pass

    def _guarded(self, what: str, fn) -> None:
        """Run one callback's work under the gate lock; an exception is a HOLD, and the status
        goes out at once."""
        while self._estop_waiting.is_set():
            time.sleep(0.0005)  # an e-stop goes first (it holds the lock for about a millisecond)
        with self._lock:
            try:
                self._send(fn())
            except Exception as exc:  # noqa: BLE001 - the gate must hold, not crash
                self._send(self.gate.internal_error(f"{what}: {type(exc).__name__}: {exc}", time.monotonic()))
            self._status_if_changed()

    def _take_inputs(self) -> None:
        """Process every joint_states and camera health sample waiting in the readers, oldest
        first per reader (a hold target one of them causes goes out at once)."""
        with self._take_lock:
            for sub, cb in self._taken_subs:
                for msg, info in self._taken.take(sub):
                    self._guarded(sub.topic_name, lambda: cb(msg, info))  # noqa: B023 - called at once

    def _joint_cb(self, arm: Arm):
        source = self._state_sources.get(arm)

        def cb(raw: bytes, info):
            verdict = source.verdict(info) if source is not None else None
            if verdict is not None and verdict.foreign:  # whatever it sent
                self.get_logger().error(f"refused: {verdict.why}", throttle_duration_sec=2.0)
                return self.gate.state_implausible(arm, verdict.why, time.monotonic())
            if verdict is not None and not verdict.ok:
                self.get_logger().error(f"refused: {verdict.why}", throttle_duration_sec=2.0)
                try:
                    stamp_ns, _names, positions = read_joint_state(raw)
                except ValueError:
                    return None
                if positions.shape == (JOINTS_PER_ARM + 1,):
                    sec, nanosec = divmod(stamp_ns, 1_000_000_000)
                    return self.gate.unverified_measurement(
                        arm, positions[:JOINTS_PER_ARM], sec + nanosec * 1e-9, time.monotonic()
                    )
                return None
            try:
                measurement = measurement_from_joint_state(arm, raw)
            except ValueError as exc:
                self.get_logger().error(f"{exc}: ignored", throttle_duration_sec=2.0)
                return None
            return self.gate.update_measurement(arm, measurement, time.monotonic())

        return cb

    def _check_state_publishers(self) -> None:
        """A second publisher on a state topic is a fault even before it sends anything."""
        for arm, source in self._state_sources.items():
            foreign = source.foreign_publishers()
            if foreign:
                detail = f"second publisher(s) on {source.topic}: {foreign} (only {source.expected} may publish)"
                self._guarded(
                    "state publishers",
                    lambda arm=arm, detail=detail: self.gate.state_implausible(arm, detail, time.monotonic()),
                )

    def _health_cb(self, camera: str):
        def cb(msg: CameraHealth, _info):
            return self.gate.update_camera(camera, camera_report(msg), time.monotonic())

        return cb

    def _image_stamp_cb(self, camera: str):
        """camera_liveness image_stamps: each frame's capture stamp is the camera's report (its
        age is judged like a health report's; there is no freeze detection without health)."""

        def cb(raw: bytes, _info):
            try:
                stamp_ns, _frame_id = read_header(raw)
            except ValueError as exc:
                self.get_logger().error(f"malformed {camera} image ignored: {exc}", throttle_duration_sec=2.0)
                return None
            sec, nanosec = divmod(stamp_ns, 1_000_000_000)
            report = CameraReport(ok=True, detail="image stamps", last_frame_stamp_s=sec + nanosec * 1e-9)
            return self.gate.update_camera(camera, report, time.monotonic())

        return cb

    def _decision_loop(self) -> None:
        """The gate's decisions, on a thread of their own: every proposal the moment it arrives
        (a wait set on its reader, level-triggered: a sample waiting is seen however the
        middleware signalled it), and the watchdog when its period is due (the wait's timeout,
        time.monotonic(): a steady clock). An exception here that the gate's own guards did
        not turn into a HOLD ends the node (`fatal`): on_exit then latches ESTOP and holds."""
        period = self._watchdog_period_s
        next_tick = time.monotonic()
        profiler = start_profile()
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                if now >= next_tick:
                    self._on_watchdog()
                    next_tick = next_tick + period if now - next_tick < period else now + period
                    continue
                if self._taken.wait([self._proposals], next_tick - now) and not self._on_proposals():
                    self.empty_wakeups += 1  # ready, yet nothing to take: never spin on it (SCHED_FIFO)
                    self._stopping.wait(max(0.0, next_tick - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - a dead decision thread must stop the node, never hide
            if self.context.ok() and not self._stopping.is_set():
                self.fatal = f"decision thread: {type(exc).__name__}: {exc}"
        finally:
            end_profile(profiler, self, "decisions")

    def _stop_decisions(self) -> None:
        self._stopping.set()
        self._taken.wake()
        if self._decisions.is_alive() and self._decisions is not threading.current_thread():
            self._decisions.join(timeout=1.0)

    def _on_proposals(self) -> int:
        """Decide on every proposal waiting, in order, each on the newest measurement; returns
        how many there were."""
        with self._take_lock:
            proposals = self._taken.take(self._proposals)
        if proposals:
            self._take_inputs()  # decide on the newest measurement
            for msg, info in proposals:
                self._on_proposed(msg, None if self._sim_time else info)
        return len(proposals)

    def _on_proposed(self, msg: BimanualCommand, info: dict | None = None) -> None:
        def decide():
            decision = self.gate.propose(proposal_from_command(msg, info), self._now_s(), time.monotonic())
            # forwarded: stamped with the tick it is for; a hold target: when it is sent
            self._send(decision.targets, msg.header.stamp if decision.send is Send.FORWARD else None)

        self._guarded(topics.COMMAND_PROPOSED.name(), decide)

    def _on_watchdog(self) -> None:
        self._note_own_lateness()
        self._take_inputs()
        self._guarded("watchdog", lambda: self.gate.tick(self._now_s(), time.monotonic()))

    def _note_own_lateness(self) -> None:
        """Count and log a watchdog tick that came WATCHDOG_LATE_PERIODS or more after the
        previous one: the gate itself did not run (busy: its thread's CPU time grew by about the
        gap; else blocked or not scheduled), which a HOLD detail would otherwise blame on a producer."""
        now, cpu = time.monotonic(), time.thread_time()
        last, self._last_watchdog = self._last_watchdog, (now, cpu)
        if last is None:
            return
        gap = now - last[0]
        if gap >= WATCHDOG_LATE_PERIODS * self._watchdog_period_s:
            self.watchdog_late += 1
            self.watchdog_late_max_s = max(self.watchdog_late_max_s, gap)
            self.get_logger().warning(
                f"watchdog ran {gap * 1e3:.0f} ms after the previous tick (period {self._watchdog_period_s * 1e3:.0f} ms; "
                f"this thread used {(cpu - last[1]) * 1e3:.0f} ms of CPU meanwhile; slowest sends: "
                f"{self._outbox_summary()})",
                throttle_duration_sec=1.0,
            )

    def _outbox_summary(self) -> str:
        boxes = (*self._pub_cmd.values(), self._pub_status, self._pub_diag)
        return ", ".join(f"{b.topic} {b.slowest_s * 1e3:.0f} ms" for b in boxes if isinstance(b, Outbox))

    def _send(self, commands, stamp=None) -> None:
        if not commands:
            return
        if stamp is None:
            stamp = self.get_clock().now().to_msg()
        for arm, values in commands.items():
            msg = JointState()
            msg.header.stamp = stamp
            msg.header.frame_id = arm.hw_frame
            msg.name = arm.joint_names
            msg.position = [float(v) for v in values]
            self._pub_cmd[arm].publish(msg)

    def _srv_arm(self):
        return self.gate.request_arm(self._now_s(), time.monotonic())

    def _service(self, name, fn):
        def cb(request, response):
            t_in = time.perf_counter()
            if name == "estop":
                self._estop_waiting.set()
            else:
                self._take_inputs()  # arm on the newest measurement
            try:
                self._lock.acquire()
            finally:
                self._estop_waiting.clear()
            try:
                try:
                    ok, message = fn()
                except Exception as exc:  # noqa: BLE001 - the gate must hold, not crash
                    self._send(
                        self.gate.internal_error(f"safety/{name}: {type(exc).__name__}: {exc}", time.monotonic())
                    )
                    ok, message = False, f"internal error: {exc}"
                response.success, response.message = bool(ok), message
                self._send(self.gate.tick(self._now_s(), time.monotonic()))  # ESTOP's hold goes out now
                self._publish_status()
            finally:
                self._lock.release()
            line = f"safety/{name}: {'ok' if ok else 'refused'}: {message}"
            if name != "estop":
                self.get_logger().info(line)
                return response
            # The e-stop's log line is written after the reply has gone out (a task of the e-stop
            # executor runs after this callback's response is sent): under load a log line took
            # up to 17 ms (stderr, file and /rosout), which the operator would wait for.
            self._estop_executor.create_task(self.get_logger().info, line)
            # The gate's own share of the round trip, and when the request reached the callback
            # and the reply left it (wall clock), so that a caller on this machine can split its
            # round trip into request path, gate, and reply path.
            out_wall = time.time()
            in_wall = out_wall - (time.perf_counter() - t_in)
            response.message += (
                f" [answered in {(out_wall - in_wall) * 1e3:.1f} ms; in {in_wall:.6f} out {out_wall:.6f}]"
            )
            return response

        return cb

    def on_exit(self) -> None:
        """Shutdown (signal, or the launcher gone): a gate that may have commanded the arms
        latches ESTOP and sends its hold target; a DISARMED one sends nothing. Waits briefly
        for the drivers to acknowledge, then the node is destroyed."""
        self._stop_decisions()
        with self._lock:
            if self.gate.state != GateState.DISARMED:
                self.gate.estop()
                self.gate.detail = "gate shutting down: emergency stop latched, holding measured joints"
                self._send(self.gate.hold_target)
            self._publish_status()
        # One deadline for all three: when the launcher dies the drivers are exiting too and
        # never acknowledge, and three waits of their own took 0.6 s of the 3 s teardown budget.
        deadline = time.monotonic() + EXIT_ACK_WAIT_S
        # Everything handed to the middleware first; then the status's acknowledgements, whose
        # readers (monitors, consoles) outlive the drivers, which exit with the launcher and
        # never acknowledge the hold.
        boxes = (self._pub_status, *self._pub_cmd.values())
        for box in boxes:
            try:
                box.flush(max(deadline - time.monotonic(), 0.0))
            except Exception:  # noqa: BLE001 - best effort on the way out (or a test's stand-in)
                pass
        for box in boxes:
            try:
                box.publisher.wait_for_all_acked(Duration(seconds=max(deadline - time.monotonic(), 0.0)))
            except Exception:  # noqa: BLE001 - best effort on the way out (or a test's stand-in)
                pass

    def destroy_node(self) -> None:
        self._stop_decisions()
        close_all([b for b in (*self._pub_cmd.values(), self._pub_status, self._pub_diag) if isinstance(b, Outbox)])
        self._estop_executor.shutdown(timeout_sec=0.5)
        self._estop_node.destroy_node()
        self._taken.destroy()
        super().destroy_node()

    def _status_msg(self) -> GateStatus:
        g = self.gate
        msg = GateStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.state = int(g.state)
        msg.reason = g.reason.value if g.reason else ""
        msg.detail = g.detail
        msg.forwarded, msg.rejected, msg.clamped = g.forwarded, g.rejected, g.clamped
        msg.reason_codes = sorted(g.reason_counts)
        msg.reason_counts = [g.reason_counts[c] for c in msg.reason_codes]
        return msg

    def _status_if_changed(self) -> None:
        key = (self.gate.state, self.gate.reason, self.gate.detail)
        if key != self._last_published:
            self._publish_status()

    def _publish_status(self) -> None:
        self._last_published = (self.gate.state, self.gate.reason, self.gate.detail)
        self._pub_status.publish(self._status_msg())
        if self.gate.state in (GateState.HOLD, GateState.ESTOP):
            self.get_logger().error(self.gate.detail, throttle_duration_sec=5.0)

    def _publish_diagnostics(self) -> None:
        g = self.gate
        level = {GateState.HOLD: diagnostics.ERROR, GateState.ESTOP: diagnostics.ERROR}.get(g.state, diagnostics.OK)
        values = {
            "state": g.state.name,
            "reason": g.reason.value if g.reason else "",
            "forwarded": g.forwarded,
            "rejected": g.rejected,
            "clamped": g.clamped,
            "catch_up_clamps": g.catch_up_clamps,
            "deferred": g.deferred,
            "deferral_runs": g.deferral_runs,
            "deferral_run_max_ms": round(g.deferral_run_max_s * 1e3, 1),
            "last_deferral": g.last_deferral,
        }
        values.update(
            {
                "watchdog_late": self.watchdog_late,
                "watchdog_late_max_ms": round(self.watchdog_late_max_s * 1e3, 1),
                "empty_wakeups": self.empty_wakeups,
                "unsafe_limits": self.unsafe_limits,
                # DDS-matched readers of each arm's joint_command (the driver, observers)
                **{
                    f"joint_command_readers.{a.value}": box.publisher.get_subscription_count()
                    for a, box in self._pub_cmd.items()
                    if isinstance(box, Outbox)
                },
            }
        )
        values.update({f"deferred.{k}": v for k, v in sorted(g.deferred_counts.items())})
        values.update({f"refused_measurements.{k}": v for k, v in sorted(g.refused_measurements.items())})
        values.update({f"reason.{k}": v for k, v in sorted(g.reason_counts.items())})
        self._pub_diag.publish(
            diagnostics.array(self, diagnostics.status("safety_gate", "safety_gate", level, g.detail, values))
        )


def main(args=None) -> int:
    return run_node(GateNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
