"""The fault battery's rig: one real simulated graph (egomimic-launch, policy:=none) driven and
observed from the test process over DDS.

The test process plays the policy: it publishes `command/proposed` (hardware frame) at 30 Hz,
anchored at the measured pose, and injects one fault per trial. It records every
`safety/status` (the gate's decision time is its header stamp, on the same machine clock as the
test's time.time()) and every `<arm>/joint_command` the drivers received, each audited by the
independent oracle against the arm's measured joints at receipt.

Only the real publishers count as truth: a joint state is recorded only when it comes from the
arm's driver node, and a joint command is audited as the gate's only when it comes from the gate
node (publisher ids, egomimic_nodes.sources). Samples the rig itself spoofs, or commands it
sends from another node, are kept apart, so an attack never pollutes the measured trajectory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import yaml

from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_hw.kinematics import ArmKinematics
from egomimic_safety.config import GateConfig
from egomimic_safety.oracle import audit_command

from .freeze import Freeze, freeze_in_blocking_wait

REPO_ROOT = Path(__file__).resolve().parents[2]
SIM_YAML = REPO_ROOT / "ros2_ws/src/egomimic_bringup/config/eva_sim.yaml"
PERIOD_S = 1.0 / 30.0
STATES = {0: "DISARMED", 1: "ARMING", 2: "ARMED", 3: "HOLD", 4: "ESTOP"}


def gate_config_of_graph(required_cameras) -> GateConfig:
    """The GateConfig the graph's gate runs with: defaults + the sim YAML + our overrides."""
    params = (yaml.safe_load(SIM_YAML.read_text()) or {}).get("/**/safety_gate", {}).get("ros__parameters", {})
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    return GateConfig(**fields, required_cameras=tuple(required_cameras))


JOINT_HISTORY = 1000
"""Joint samples kept per arm (10 s at 100 Hz): a trial looks back to before its fault, which
can be several seconds ago (direct_command waits up to 3 s for the driver's 1 Hz diagnostics;
fc27 kept 300, 3 s, and found none left from before the fault)."""


@dataclass
class Status:
    recv_s: float
    stamp_s: float
    state: str
    reason: str
    detail: str


IDEMPOTENT_CALLS = ("reset", "disarm", "estop")
"""Services whose second request is harmless when the first did arrive ("nothing to reset")."""
POLL_PERIOD_S = 0.005
"""How often the rig takes joint states and health reports (their times are DDS reception times)."""


def received_s(info) -> float:
    """DDS reception time of a taken sample (system clock, s)."""
    ns = info.get("received_timestamp") if info else None
    return ns * 1e-9 if ns else time.time()


@dataclass
class CommandRecord:
    recv_s: float
    arm: Arm
    values: np.ndarray
    violations: list[str] = field(default_factory=list)
    stamp_s: float = float("nan")
    """Header stamp: the proposal's stamp for a forwarded command, the send time for a hold."""
    without_rate: list[str] | None = None
    """The violations without the rate check, kept while the command was not recognised as a
    hold on arrival: the measured sample a hold copies travels on another topic and may arrive
    after the hold (commands_since() looks again)."""


@dataclass(frozen=True)
class JointSample:
    stamp_s: float
    """Measurement time (the driver stamps joint_states when it measured)."""
    recv_s: float
    positions: np.ndarray
    """[q0..q5, gripper_norm] as published."""


class JsonLines:
    """The JSON lines a child process prints, read by a thread of their own. Why not select()
    on the pipe and readline(): readline may buffer a second line, which select then no longer
    sees (a probe that printed a Fast DDS warning and its "ready" together would seem silent)."""

    def __init__(self, proc: subprocess.Popen):
        import queue

        self._proc = proc
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            if line.startswith("{"):
                self._lines.put(line)
        self._lines.put(None)  # EOF: the process exited

    def next_json(self, timeout_s: float) -> dict:
        import json
        import queue

        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return {"error": f"no answer from the e-stop probe in {timeout_s:.0f} s"}
        if line is None:
            self._lines.put(None)
            return {"error": f"the e-stop probe exited ({self._proc.poll()})"}
        return json.loads(line)


class _Injection:
    """One faulty command for the stream (Rig.inject_once): the mutation, then when it went out."""

    def __init__(self, mutate):
        self._mutate = mutate
        self.sent = threading.Event()
        self.sent_s = float("nan")

    def __call__(self, msg):
        self._mutate(msg)
        return msg

    def published(self, t_s: float) -> None:
        self.sent_s = t_s
        self.sent.set()


class Rig:
    def __init__(self, tmp: Path, required_cameras, run_dir: Path | None = None, launch_args: tuple[str, ...] = ()):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        # The rig plays the policy: give it the drivers' niceness, so that on a busy 2-core
        # machine its 30 Hz stream is not the first thing to stall (a stalled rig before the
        # fault is a RigHiccup, re-run; the gate itself runs at SCHED_FIFO, see spin.py).
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -5)
        except OSError:
            pass
        self.cameras = tuple(required_cameras)
        self.config = gate_config_of_graph(self.cameras)
        params = tmp / "gate_faults.yaml"
        params.write_text(
            yaml.safe_dump({"/**/safety_gate": {"ros__parameters": {"required_cameras": list(self.cameras)}}})
        )
        self.run_dir = run_dir or tmp / "run"
        cmd = [
            sys.executable,
            "-m",
            "egomimic_launch.cli",
            "eva_bimanual.launch.py",
            "policy:=none",
            "auto_arm:=false",
            f"params_file:={params}",
            *launch_args,
            "--quiet",
            "--run-dir",
            str(self.run_dir),
            # The battery freezes a driver on purpose (the gate's stale-state case); the
            # launcher's own heartbeat (tests/integration) must not end the graph meanwhile.
            "--heartbeat-timeout",
            "10",
        ]
        self.log = open(tmp / "launch.log", "w")
        self.launcher = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=dict(os.environ), stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.kin = {arm: ArmKinematics() for arm in ARMS}
        self.lock = threading.Lock()
        self.statuses: list[Status] = []
        self.commands: list[CommandRecord] = []
        self.joints: dict[Arm, np.ndarray] = {}
        self.joints_recv: dict[Arm, float] = {}
        self.joint_history: dict[Arm, list[JointSample]] = {arm: [] for arm in ARMS}
        self.health: dict[str, list] = {c: [] for c in CAMERAS}
        self.foreign_states = 0
        """joint_states samples not from the arm's driver (what the rig itself spoofed)."""
        self.foreign_commands: list[CommandRecord] = []
        """joint_command messages not from the gate (what the rig itself sent)."""
        self.driver_diag: dict[Arm, dict[str, str]] = {}
        self.stopped_pids: set[int] = set()
        self._prev_cmd: dict[Arm, tuple[float, np.ndarray]] = {}
        """Per arm: (stamp, values) of the previous forwarded command of the current armed run."""
        self._stream_pose: dict[Arm, np.ndarray] | None = None
        self._stream_thread: threading.Thread | None = None
        self._streaming = threading.Event()
        self._mutate = None
        self.last_publish_s = 0.0
        self.estop_resends = 0
        """E-stop requests the probe sent again because the first was not answered in 15 ms."""
        self.last_estop_gate_s: list[float] = []
        self.stream_stamps: deque[float] = deque(maxlen=32)
        """Stamps of the newest streamed commands (the gate's rate window counts them too)."""
        self.publish_times: deque[float] = deque(maxlen=64)
        """Wall-clock instants the newest streamed commands were handed to DDS."""
        self.last_estop_paths: tuple[list[float], list[float]] = ([], [])
        """The last probe run's round trips split at the gate (ms): request path, reply path."""
        """The gate's own handling time of each call of the last estop_latencies()."""
        self._probe: subprocess.Popen | None = None
        self._probe_ready = False

        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, args=["--ros-args", "--disable-external-lib-logs"])
        self.node = rclpy.create_node(f"fault_rig_{os.getpid()}", context=self.ctx)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._setup_ros()
        self._spin = threading.Thread(target=self._spin_forever, daemon=True)
        self._spin.start()

    # -- ROS plumbing ---------------------------------------------------------------------------
    def _spin_forever(self):
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - shutdown race
            pass

    def _setup_ros(self):
        from diagnostic_msgs.msg import DiagnosticArray
        from rcl_interfaces.srv import SetParameters
        from sensor_msgs.msg import JointState
        from std_srvs.srv import Trigger

        from egomimic_msgs.msg import BimanualCommand, CameraHealth, GateStatus
        from egomimic_nodes import topics
        from egomimic_nodes.sources import SourceCheck

        n = self.node
        # Every status, not only the latest (a rig that lags must still see HOLD -> DISARMED ->
        # ARMED, or it would audit a new armed run against the previous one's last command).
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

        every_status = QoSProfile(
            depth=200, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        n.create_subscription(GateStatus, topics.SAFETY_STATUS.resolve("eva"), self._on_status, every_status)
        n.create_subscription(DiagnosticArray, topics.DIAGNOSTICS.name(), self._on_diag, 50)
        self.state_source = {
            arm: SourceCheck(n, topics.JOINT_STATES.resolve("eva", arm=arm), f"/eva/driver_{arm.value}") for arm in ARMS
        }
        self.command_source = {
            arm: SourceCheck(n, topics.JOINT_COMMAND.resolve("eva", arm=arm), "/eva/safety_gate") for arm in ARMS
        }
        # Deep queues: a rig that stalls (load) must still see every sample and command, since
        # holds are checked against the exact samples the driver published.
        deep = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
        # The 100 Hz joint states and 30 Hz health reports are taken in batches by a poll thread
        # (egomimic_nodes/taken.py; receive time = DDS reception time): an executor callback per
        # sample would make this rig one of the busiest processes on the machine it measures.
        from egomimic_nodes.taken import TakenSubscriptions

        self._taken = TakenSubscriptions(self.ctx, f"fault_rig_{os.getpid()}_taken")
        self._polled = []
        for arm in ARMS:
            self._polled.append(
                (
                    self._taken.subscribe(JointState, topics.JOINT_STATES.resolve("eva", arm=arm), deep),
                    self._joint_cb(arm),
                )
            )
            n.create_subscription(JointState, topics.JOINT_COMMAND.resolve("eva", arm=arm), self._command_cb(arm), deep)
        for cam in CAMERAS:
            health_qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
            self._polled.append(
                (
                    self._taken.subscribe(CameraHealth, topics.CAMERA_HEALTH.resolve("eva", cam=cam), health_qos),
                    self._health_cb(cam),
                )
            )
        self.poll_errors: list[str] = []
        """Exceptions of the poll thread's callbacks (it goes on); asserted empty at teardown."""
        self._stop_poll = threading.Event()
        self._poll_thread = threading.Thread(target=self._poll_forever, name="rig-poll", daemon=True)
        self._poll_thread.start()
        # Sent from a thread of its own outside the GIL (egomimic_nodes/outbox.py): a node that dies
        # inside its shared-memory port's lock (launcher_sigkill) blocks a publish for 1 s, and
        # rclpy's publish() would hold up the poll thread meanwhile, so the drivers' last samples
        # were lost (DDS drops a departed writer's untaken samples). keep=64: nothing is dropped.
        from egomimic_nodes.outbox import Outbox

        self.pub = Outbox(
            n.create_publisher(BimanualCommand, topics.COMMAND_PROPOSED.resolve("eva"), topics.COMMAND_PROPOSED.qos),
            keep=64,
        )
        self.srv = {
            name: n.create_client(Trigger, f"/eva/safety/{name}") for name in ("arm", "disarm", "estop", "reset")
        }
        self.param_client = n.create_client(SetParameters, "/eva/cameras/set_parameters")
        self._Trigger, self._BimanualCommand = Trigger, BimanualCommand

    def _poll_forever(self):
        while not self._stop_poll.wait(POLL_PERIOD_S):
            for sub, cb in self._polled:
                for msg, info in self._taken.take(sub):
                    try:
                        cb(msg, info)
                    except Exception as exc:  # noqa: BLE001 - a dead poll thread would starve every later test
                        self.poll_errors.append(f"{sub.topic_name}: {type(exc).__name__}: {exc}")

    def _on_status(self, msg):
        s = Status(
            time.time(),
            msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9,
            STATES[msg.state],
            msg.reason,
            msg.detail,
        )
        with self.lock:
            self.statuses.append(s)
            if s.state != "ARMED":  # the rate limits hold within one armed run
                self._prev_cmd.clear()

    def _on_diag(self, msg):
        from egomimic_nodes import diagnostics

        for status in msg.status:
            for arm in ARMS:
                if diagnostics.local_name(status.name, "eva") == f"driver/{arm.value}":
                    with self.lock:
                        self.driver_diag[arm] = {kv.key: kv.value for kv in status.values}

    def driver_refusals(self, arm: Arm, key: str) -> int:
        with self.lock:
            return int(self.driver_diag.get(arm, {}).get(f"refused.{key}", 0))

    def _joint_cb(self, arm):
        def cb(msg, info):
            if not self.state_source[arm].verdict(info).ok:
                self.foreign_states += 1
                return
            now = received_s(info)
            positions = np.asarray(msg.position, dtype=float)
            with self.lock:
                self.joints[arm] = positions[:6].copy()
                self.joints_recv[arm] = now
                self.joint_history[arm].append(
                    JointSample(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9, now, positions)
                )
                del self.joint_history[arm][:-JOINT_HISTORY]

        return cb

    def joint_samples(
        self, arm: Arm, since_stamp_s: float, until_stamp_s: float, wait_s: float = 1.0
    ) -> list[JointSample]:
        """Measured samples of `arm` stamped within [since, until] (measurement time), once this
        rig has received the samples up to `until` (it may lag on a busy machine; it waits at
        most `wait_s`, e.g. for a driver that has exited)."""
        deadline = time.time() + wait_s
        while time.time() < deadline:
            with self.lock:
                if self.joint_history[arm] and self.joint_history[arm][-1].stamp_s >= until_stamp_s:
                    break
            time.sleep(0.005)
        with self.lock:
            return [j for j in self.joint_history[arm] if since_stamp_s <= j.stamp_s <= until_stamp_s]

    def silent_streams(self, reason: str, detail: str, at_s: float, take_s: float) -> list[str]:
        """The streams named in a STALE_STATE / STALE_CAMERA / STALE_COMMAND decision taken at
        `at_s` that this rig, independently of the gate, also saw silent for the whole hold
        window before it: no sample published (stamps) or none received here (DDS reception
        times) in [at_s - hold, at_s]. For STALE_COMMAND the stream is this rig's own: silent
        when it published nothing in [at_s - command_timeout_s, at_s - take_s] (a command sent
        within `take_s`, the time the gate is given to act on a message, may not have been taken
        yet: inf in fc26 was sent 55 ms before the decision, after the rig's stream had stalled
        250 ms). Evidence of a stall of the machine, not of the gate's judgement."""
        if reason == "STALE_COMMAND":
            with self.lock:
                sent = [t for t in self.publish_times if at_s - self.config.command_timeout_s <= t <= at_s - take_s]
            return [] if sent or not self.publish_times else ["command/proposed (this rig's stream)"]
        if reason == "STALE_STATE":
            hold = self.config.state_hold_after_s
            with self.lock:
                records = {
                    a.value: [(j.recv_s, j.stamp_s) for j in self.joint_history[a]] for a in ARMS if a.value in detail
                }
        elif reason == "STALE_CAMERA":
            hold = self.config.camera_hold_after_s
            with self.lock:
                records = {c: [(r, s) for (r, s, _) in self.health[c]] for c in CAMERAS if c in detail}
        else:
            return []
        silent = []
        for name, rec in records.items():
            published = any(at_s - hold <= s <= at_s for _, s in rec)
            received = any(at_s - hold <= r <= at_s for r, _ in rec)
            if rec and not (published and received):
                silent.append(name)
        return silent

    def _health_cb(self, cam):
        def cb(msg, info):
            with self.lock:
                self.health[cam].append(
                    (received_s(info), msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9, msg.state)
                )
                del self.health[cam][:-200]

        return cb

    def _command_cb(self, arm):
        def cb(msg, info):
            now = time.time()
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            values = np.asarray(msg.position, dtype=float)
            if not self.command_source[arm].verdict(info).ok:
                with self.lock:
                    self.foreign_commands.append(CommandRecord(now, arm, values, [], stamp))
                return
            with self.lock:
                measured = self.joints.get(arm)
                prev = self._prev_cmd.get(arm)
                # A hold target is a measured configuration (exactly): the arm is already
                # there, so the rate limit vs the last target does not apply to it.
                is_hold = any(np.array_equal(values[:6], j.positions[:6]) for j in self.joint_history[arm][-100:])
            if measured is None:
                violations = ["no measured state yet"]
            elif is_hold or prev is None:
                violations = audit_command(arm, values, measured, self.config, self.kin[arm])
            else:  # rate limits: speed x the difference of the two commands' stamps
                violations = audit_command(arm, values, measured, self.config, self.kin[arm], prev[1], stamp - prev[0])
            without_rate = None
            if violations and not is_hold and prev is not None and measured is not None:
                without_rate = audit_command(arm, values, measured, self.config, self.kin[arm])
            with self.lock:
                if not is_hold:
                    self._prev_cmd[arm] = (stamp, values)
                self.commands.append(CommandRecord(now, arm, values, violations, stamp, without_rate))

        return cb

    # -- services ------------------------------------------------------------------------------
    def call(self, name: str, timeout_s: float = 3.0) -> tuple[bool, str]:
        """Call safety/<name>. A request that asks for a state the gate may already be in
        (IDEMPOTENT_CALLS) is sent once more, from a new client, when the first got no answer
        within timeout_s: fresh clones fc118-119 lost a `reset` twice in a row from this rig's
        client (both 3 s timeouts; the gate answered the e-stop probe's calls meanwhile), as
        the probe loses one request in about a hundred and re-sends it. Listed in the battery's
        summary (conftest.RIG_RESENT_CALLS)."""
        ok, msg = self._call_once(self.srv[name], timeout_s)
        if msg == "timeout" and name in IDEMPOTENT_CALLS:
            from .conftest import RIG_RESENT_CALLS

            RIG_RESENT_CALLS.append(name)
            self.srv[name] = self.node.create_client(self._Trigger, f"/eva/safety/{name}")
            ok, msg = self._call_once(self.srv[name], timeout_s)
        return ok, msg

    def unanswered(self, name: str, msg: str) -> str:
        """What an unanswered safety/<name> call is reported with: the gate's newest status and
        how long ago it arrived (a main executor that stopped also stops the 2 Hz status), and
        the tail of the gate's log (its watchdog and stall lines say whether it ran)."""
        with self.lock:
            last = self.statuses[-1] if self.statuses else None
        status = (
            f"newest status {last.state} ({last.reason or 'no reason'}: {last.detail}) received "
            f"{time.time() - last.recv_s:.1f} s ago"
            if last
            else "no status received"
        )
        log = self.run_dir / "logs" / "safety_gate.log"
        tail = log.read_text(errors="replace")[-2500:] if log.is_file() else f"(no {log})"
        return f"safety/{name}: {msg}; {status}; the gate's log ends:\n{tail}"

    def _call_once(self, client, timeout_s: float) -> tuple[bool, str]:
        if not client.wait_for_service(timeout_sec=timeout_s):
            return False, "no service"
        done = threading.Event()
        future = client.call_async(self._Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout_s):
            return False, "timeout"
        r = future.result()
        return bool(r.success), r.message

    def start_estop_probe(self) -> None:
        """Start this graph's e-stop probe (tests/faults/estop_probe.py --serve): one process
        for the graph's life, as an operator console runs long before its e-stop is pressed."""
        if self._probe is not None and self._probe.poll() is None:
            return
        probe = Path(__file__).with_name("estop_probe.py")
        self._probe = subprocess.Popen(
            [sys.executable, str(probe), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=dict(os.environ),
        )
        self._probe_lines = JsonLines(self._probe)
        self._probe_ready = False

    def estop_latencies(self, n: int, pause_s: float = 0.02) -> list[float]:
        """Round trips (s) of `n` safety/estop calls from this graph's probe process
        (start_estop_probe: what an operator's button sees, without this busy rig's own
        queueing); an unanswered call counts as 2 s."""
        self.start_estop_probe()  # a no-op when wait_ready started it and it still runs
        if not self._probe_ready:
            data = self._probe_lines.next_json(60.0)
            assert data.get("ready"), f"e-stop probe failed: {data}"
            self._probe_ready = True
        self._probe.stdin.write(f"{n} {pause_s}\n")
        self._probe.stdin.flush()
        data = self._probe_lines.next_json(60 + 3 * n)
        assert "latencies_ms" in data, f"e-stop probe failed: {data}"
        from .conftest import ESTOP_RESENDS, ESTOP_SCHEDULING, ESTOP_SETTLE_S

        ESTOP_SCHEDULING.add(str(data.get("scheduling", "?")))
        ESTOP_SETTLE_S.append(float(data.get("settle_s", 0.0)))
        self.estop_resends += int(data.get("resends", 0))
        ESTOP_RESENDS.append(int(data.get("resends", 0)))
        self.last_estop_gate_s = [x / 1e3 for x in data.get("gate_ms", [])]
        self.last_estop_paths = (list(data.get("request_ms", [])), list(data.get("reply_ms", [])))
        return [x / 1e3 for x in data["latencies_ms"]]

    def stop_estop_probe(self) -> None:
        if self._probe is None:
            return
        try:
            self._probe.stdin.close()  # EOF: the probe leaves DDS cleanly
            self._probe.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self._probe.kill()
            self._probe.wait()
        self._probe = None

    def set_camera_fault(self, value: str) -> bool:
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters

        if not self.param_client.wait_for_service(timeout_sec=3.0):
            return False
        req = SetParameters.Request()
        req.parameters = [
            Parameter(
                name="inject_fault", value=ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value)
            )
        ]
        done = threading.Event()
        future = self.param_client.call_async(req)
        future.add_done_callback(lambda _f: done.set())
        return done.wait(3.0) and all(r.successful for r in future.result().results)

    # -- observation ---------------------------------------------------------------------------
    def state(self) -> str:
        with self.lock:
            return self.statuses[-1].state if self.statuses else ""

    def wait_state(self, states, after_s: float, timeout_s: float) -> Status | None:
        """The first status with a state in `states` stamped at or after `after_s`."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            with self.lock:
                for s in self.statuses:
                    if s.state in states and s.stamp_s >= after_s:
                        return s
            time.sleep(0.005)
        return None

    def wait_ready(self, timeout_s: float) -> bool:
        from egomimic_nodes.graph_settle import wait_settled

        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.launcher.poll() is not None:
                return False
            with self.lock:
                fresh = all(a in self.joints_recv and time.time() - self.joints_recv[a] < 0.2 for a in ARMS)
            if fresh and self.statuses and self.srv["arm"].service_is_ready():
                # Arm only once discovery has settled (egomimic_nodes.graph_settle), as the launcher does.
                settled, _ = wait_settled(self.node, timeout_s=max(0.0, deadline - time.time()))
                if settled:
                    self.start_estop_probe()  # its discovery settles while the trials set up
                return settled
            time.sleep(0.1)
        return False

    def commands_since(self, t: float) -> list[CommandRecord]:
        with self.lock:
            out = [c for c in self.commands if c.recv_s >= t]
            for c in out:  # a hold recognised late: its measured sample arrived after it
                if c.without_rate is not None and any(
                    np.array_equal(c.values[:6], j.positions[:6]) for j in self.joint_history[c.arm]
                ):
                    c.violations, c.without_rate = c.without_rate, None
            return out

    def measured_pose(self, arm: Arm) -> np.ndarray:
        with self.lock:
            q = self.joints[arm].copy()
        return self.kin[arm].forward(q)

    def measured_joints(self, arm: Arm) -> np.ndarray:
        with self.lock:
            return self.joints[arm].copy()

    # -- commanding ------------------------------------------------------------------------------
    def make_command(self, poses: dict[Arm, np.ndarray], stamp_s: float | None = None, grippers=(0.5, 0.5)):
        from egomimic_nodes.msg_convert import array_to_pose

        msg = self._BimanualCommand()
        t = time.time() if stamp_s is None else stamp_s
        ns = int(round(t * 1e9))
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
        for arm, g in zip(ARMS, grippers):
            ps = getattr(msg, arm.value)
            ps.header.stamp = msg.header.stamp
            ps.header.frame_id = arm.hw_frame
            array_to_pose(poses[arm], ps.pose)
            setattr(msg, f"{arm.value}_gripper", float(g))
        return msg

    def start_stream(self, poses: dict[Arm, np.ndarray]) -> None:
        """Publish `poses` (updatable via set_stream_pose) at 30 Hz until stop_stream()."""
        self.stop_stream()
        self._stream_pose = {a: p.copy() for a, p in poses.items()}
        self._streaming.set()
        self._stream_thread = threading.Thread(target=self._stream_loop, daemon=True)
        self._stream_thread.start()

    def set_stream_pose(self, poses: dict[Arm, np.ndarray]) -> None:
        with self.lock:
            self._stream_pose = {a: p.copy() for a, p in poses.items()}

    def send(self, msg) -> None:
        """Publish a proposed command and note when (silent_streams judges this rig's stream by it)."""
        self.pub.publish(msg)
        self.last_publish_s = time.time()
        with self.lock:
            self.publish_times.append(self.last_publish_s)

    def inject_once(self, mutate) -> float:
        """The next streamed command is `mutate(msg)`; returns its publication time: the instant
        its publish returned, when the gate can first have it. (Taken before the publish, a rig
        descheduled between building and sending the command counted its own lateness against
        the gate: fc118's NaN held 146 ms after that instant.)"""
        injection = _Injection(mutate)
        with self.lock:
            self._mutate = injection
        injection.sent.wait(1.0)
        return injection.sent_s

    def _stream_loop(self) -> None:
        """30 Hz, each command stamped with its tick (as the policy's executor stamps them): a
        rig that stalls and catches up sends late commands, never two stamped 1 ms apart."""
        next_t = time.monotonic()
        offset = time.time() - time.monotonic()
        while self._streaming.is_set():
            with self.lock:
                poses, mutate, self._mutate = self._stream_pose, self._mutate, None
            msg = self.make_command(poses, stamp_s=next_t + offset)
            if mutate is not None:
                msg = mutate(msg)
            self.send(msg)
            if mutate is not None:
                mutate.published(self.last_publish_s)
            self.stream_stamps.append(next_t + offset)
            next_t += PERIOD_S
            delay = next_t - time.monotonic()
            if delay < -PERIOD_S:
                next_t = time.monotonic()  # fell behind (load): keep the period, do not burst
            time.sleep(max(0.0, delay))

    def stop_stream(self) -> float:
        """Stop publishing; returns the instant the producer stopped."""
        self._streaming.clear()
        t = time.time()
        if self._stream_thread is not None:
            self._stream_thread.join(1.0)
            self._stream_thread = None
        return t

    # -- processes -------------------------------------------------------------------------------
    def node_pid(self, name: str) -> int:
        for child in psutil.Process(self.launcher.pid).children(recursive=True):
            try:
                if f"__node:={name}" in child.cmdline():
                    return child.pid
            except psutil.Error:
                continue
        raise LookupError(f"node {name} not found under the launcher")

    def freeze(self, pid: int) -> Freeze:
        """SIGSTOP `pid` where every thread waits in the kernel, so (almost surely) outside any
        shared-memory port lock (freeze.py); returns when and how."""
        self.stopped_pids.add(pid)
        frozen = freeze_in_blocking_wait(pid)
        from .conftest import FREEZES

        FREEZES.append(frozen)
        return frozen

    def thaw(self, pid: int) -> None:
        os.kill(pid, signal.SIGCONT)
        self.stopped_pids.discard(pid)

    def close(self) -> None:
        self.stop_estop_probe()
        self.stop_stream()
        for pid in list(self.stopped_pids):
            try:
                self.thaw(pid)
            except ProcessLookupError:
                pass
        if self.launcher.poll() is None:
            self.launcher.send_signal(signal.SIGINT)
            try:
                self.launcher.wait(40)
            except subprocess.TimeoutExpired:
                for child in psutil.Process(self.launcher.pid).children(recursive=True):
                    child.kill()
                self.launcher.kill()
                self.launcher.wait()
        self.log.close()
        self.pub.close()
        self._stop_poll.set()
        self._poll_thread.join(2.0)
        self._taken.destroy()
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        import rclpy

        rclpy.try_shutdown(context=self.ctx)
