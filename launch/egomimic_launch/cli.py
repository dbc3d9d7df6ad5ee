"""egomimic-launch: start the EVA graph from a launch file, like `ros2 launch`, in a pip venv.

    egomimic-launch eva_bimanual.launch.py [arg:=value ...] [--duration S] [--summary]

Runs until SIGINT/SIGTERM (or --duration), then tears down in reverse start order, the recorder
first (Graph.stop_order; exit 0).
A required node that exits takes the system to a SAFE STOP: the gate is told to latch an
e-stop (it then commands the joints measured at that moment: the arms hold, motors on), the
remaining nodes stop in reverse order with the drivers last (they hold the measured position
on exit), and the launcher exits 3 naming the node. A node that stops answering is treated the
same way: the gate's `safety/status` (2 Hz and on every change) and each driver's
`joint_states` (100 Hz) are heartbeats, and one silent for --heartbeat-timeout is a dead node.

Before starting anything the launcher removes Fast DDS shared memory left by dead processes and
refuses to start (exit 6, naming them) while nodes of a previous graph are still visible on the
same namespace and domain. Every node dies with the launcher (spin.py), even after a SIGKILL.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import signal
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from egomimic_bringup import LAUNCH_DIR
from egomimic_bringup.graph import LAUNCH_ARGUMENTS, LaunchArgumentError
from egomimic_launch import params_check
from egomimic_launch.dds_log import alarming, describe, middleware_warnings
from egomimic_launch.environment import apply_to_this_process
from egomimic_launch.process import GraphAutogroup, NodeProcess, exit_text, local_graph_nodes, safe_print
from egomimic_launch.steps import NODE_START_TIMEOUT_S, estop, wait_for_node
from egomimic_launch.steps import auto_arm as arm_when_settled

EXIT_OK, EXIT_USAGE, EXIT_SAFE_STOP, EXIT_LOOP_DID_NOT_RUN, EXIT_START_FAILED, EXIT_ALREADY_RUNNING = 0, 2, 3, 4, 5, 6
EXIT_INTERNAL = 1
"""An error of the launcher itself (a bug): one line, the traceback with --debug; the graph is
torn down first either way (main's finally)."""
ARMED_WAIT_S = 60.0
"""--duration-from armed: the longest wait for ARMED after start-up (auto-arming takes 1-6 s on
the 2-core machine; a minute is a gate that will not arm)."""
DISCOVERY_WAIT_S = 3.0
"""How long the launcher listens for a previous graph before starting. DDS discovery of running
nodes takes a few hundred ms on an idle machine, but 1.5 s was once not enough on a loaded one
(fault battery): a second graph would have started. It returns 0.5 s after the first node seen."""
PORT_CHECK_S = 5.0
"""How often the launcher looks for a node listening on a removed shared-memory port. It reads
/proc/<pid>/maps of each node: 2.4 ms per process of about 840 map lines on the 2-core machine
(measured beside a test run), so about 25 ms per check for the sim graph, 0.5 % of a core."""
HEARTBEAT_TIMEOUT_S = 1.5
"""Default --heartbeat-timeout: 3 periods of the gate's 2 Hz status, 150 of a driver's 100 Hz."""


def _help_epilog() -> str:
    lines = ["launch arguments (arg:=value):"]
    for a in LAUNCH_ARGUMENTS:
        shown = "|".join(c or "''" for c in a.choices)
        choices = f" {{{shown}}}" if a.choices else ""
        lines.append(f"  {a.name}{choices}\n      {a.description} (default: {a.default!r})")
    lines += [
        "",
        "exit codes: 0 clean stop; 1 an error of the launcher itself (--debug: its traceback); 2 bad",
        "            arguments; 3 safe stop after a required node exited or stopped answering; 4 the control",
        "            loop did not run (--summary checks failed); 5 a node failed to start; 6 nodes of",
        "            another graph are running on this namespace and domain",
        "",
        "environment (set unless already set): ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST,",
        "  ROS_DOMAIN_ID=42, FASTDDS_DEFAULT_PROFILES_FILE=<repo>/config/fastdds_local.xml",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, dict[str, str]]:
    parser = argparse.ArgumentParser(
        prog="egomimic-launch",
        description=__doc__.split("\n\n")[0],
        epilog=_help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("launch_file", help="a launch file name in egomimic_bringup/launch, or a path")
    parser.add_argument("launch_args", nargs="*", metavar="arg:=value")
    parser.add_argument(
        "--duration", type=float, default=0.0, help="stop after this many seconds (0: run until interrupted)"
    )
    parser.add_argument(
        "--duration-from",
        choices=("up", "armed"),
        default="up",
        help="count --duration from when every node is up (default) or from when the gate is first ARMED "
        f"(needs --summary: a run of so many seconds of control, however long start-up takes; not armed "
        f"within {ARMED_WAIT_S:.0f} s of start-up stops the run)",
    )
    parser.add_argument(
        "--summary", action="store_true", help="watch the graph, print progress and a summary table at the end"
    )
    parser.add_argument("--summary-json", type=Path, help="also write the summary as JSON here")
    parser.add_argument("--run-dir", type=Path, help="where logs and generated params go (default: a new temp dir)")
    parser.add_argument("--quiet", action="store_true", help="do not echo node output (it still goes to the log files)")
    parser.add_argument("--kill-after", metavar="NODE:SECONDS", help="rehearsal: SIGKILL NODE SECONDS after start-up")
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=HEARTBEAT_TIMEOUT_S,
        metavar="S",
        help="a gate status or driver joint_states stream silent this long is a dead node "
        f"(safe stop; default {HEARTBEAT_TIMEOUT_S})",
    )
    parser.add_argument(
        "--trials",
        metavar="SEEDS",
        help="run trials of the simulated box task instead of a timed run, one per seed (a:b or 3,5,9), "
        "in this one graph: each homes the arms, sets the box, resets the policy, arms, and ends on "
        "success, a gate HOLD or --trial-timeout (egomimic_launch.trials); needs task_seed:= and the "
        "synthetic cameras; with record:=true each trial is one episode",
    )
    parser.add_argument(
        "--trial-timeout", type=float, default=20.0, metavar="S", help="seconds per trial after arming (default 20)"
    )
    parser.add_argument("--trials-json", type=Path, help="write the trials' results as JSON here")
    parser.add_argument(
        "--print-enclaves",
        action="store_true",
        help="with security:=true, print the SROS2 enclaves the keystore must hold, one per line, and exit",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an error of the launcher itself (default: one line)",
    )
    ns = parser.parse_args(argv)
    if ns.trials:
        from egomimic_launch.trials import parse_seeds

        try:
            ns.trial_seeds = parse_seeds(ns.trials)
        except ValueError as exc:
            parser.error(str(exc))
        if not ns.trial_timeout > 0:
            parser.error("--trial-timeout must be > 0")
    overrides = {}
    for item in ns.launch_args:
        if ":=" not in item:
            parser.error(f"launch arguments are arg:=value, got {item!r}")
        key, value = item.split(":=", 1)
        overrides[key] = value
    return ns, overrides


def load_graph(launch_file: str, overrides: dict[str, str]):
    path = Path(launch_file)
    if not path.is_file():
        path = LAUNCH_DIR / launch_file
    if not path.is_file():
        raise LaunchArgumentError(f"launch file {launch_file!r} not found (looked in {LAUNCH_DIR})")
    spec = importlib.util.spec_from_file_location("egomimic_launch_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "egomimic_graph"):
        raise LaunchArgumentError(f"{path} has no egomimic_graph(overrides) entry point")
    return module.egomimic_graph(overrides)


class Launcher:
    def __init__(self, graph, run_dir: Path, echo: bool):
        self.graph = graph
        self.run_dir = run_dir
        self.echo = echo
        self.procs = []
        self.stop_event = threading.Event()
        self.stop_reason = ""
        self.shm_note = ""
        """What the shared-memory clean-up at start did (clean_shared_memory), for the summary."""
        self.removed_ports: dict[str, list[str]] = {}
        """Node -> removed Fast DDS ports it mapped during the run (watch_ports)."""
        self.dds_warnings: dict = {}
        """Node -> Counter of Fast DDS's own warnings in its log (dds_log.middleware_warnings)."""
        self.dead_node: tuple[str, int] | None = None
        self.dead_at_wall: float | None = None
        self.safe_stop_detail = ""
        self.killed_any = False

    def start(self, client, env, on_arm_point=None) -> str:
        """Start every node in order; "" on success, else what failed."""
        for spec in self.graph.nodes:
            proc = NodeProcess(spec, self.run_dir, env, echo=self.echo)
            self.procs.append(proc)
            alive = lambda p=proc: p.poll() is None  # noqa: E731
            if not wait_for_node(client, spec.name, spec.namespace, NODE_START_TIMEOUT_S, alive):
                code = proc.poll()
                return f"{spec.name} did not appear in the ROS graph" + (
                    f" (exited with {code}; log {proc.log_path})"
                    if code is not None
                    else f" within {NODE_START_TIMEOUT_S:.0f} s"
                )
            if spec.lifecycle:
                err = client.activate(f"/{spec.namespace}/{spec.name}")
                if err:
                    return f"{spec.name}: {err}; log {proc.log_path}"
            safe_print(f"[launch] {spec.name} up ({spec.description})")
            if spec.arm_after and on_arm_point is not None:
                on_arm_point()
            dead = self.check_children()
            if dead:
                return f"{dead[0]} exited with code {exit_text(dead[1])} during start-up"
        return ""

    def check_children(self) -> tuple[str, int] | None:
        for proc in self.procs:
            code = proc.poll()
            if code is not None and proc.spec.required:
                return proc.spec.name, code
        return None

    def watch_ports(self) -> None:
        """Say at once when a node (or the launcher) starts listening on a removed Fast DDS port:
        it hears no writer that opened the port after the removal (shm.removed_ports_mapped)."""
        from egomimic_launch.shm import removed_ports_mapped

        for name, ports in removed_ports_mapped(self.pids()).items():
            new = sorted(set(ports) - set(self.removed_ports.get(name, [])))
            if new:
                self.removed_ports[name] = sorted({*self.removed_ports.get(name, []), *new})
                safe_print(
                    f"[launch] WARNING: {name} listens on removed Fast DDS port(s) {', '.join(new)}: it hears "
                    "no writer that opened the port since (Fast DDS regenerates a port it judges unhealthy)",
                    err=True,
                )

    def pids(self) -> dict[str, int]:
        """{node name: pid} of the running nodes, and "launcher": this process."""
        pids = {n.spec.name: n.proc.pid for n in self.procs if n.proc.poll() is None}
        pids["launcher"] = os.getpid()
        return pids

    def teardown(self) -> None:
        """Stop the started nodes in the graph's stop order (Graph.stop_order: the recorder
        first, then reverse start order)."""
        rank = {spec.name: i for i, spec in enumerate(self.graph.stop_order())}
        for proc in sorted(self.procs, key=lambda p: rank[p.spec.name]):
            if proc.poll() is None:
                code = proc.stop()
                self.killed_any |= code == -signal.SIGKILL
                safe_print(f"[launch] {proc.spec.name} stopped (exit {code})")


def clean_shared_memory(domain: int) -> str:
    """Remove the Fast DDS shared-memory files of `domain` that no live participant owns
    (egomimic_launch.shm: a stale port reused by a new participant delivered with ~333 ms pauses,
    or was reset as a zombie while the graph started); other domains' ports are not this graph's
    to judge. Returns what it did, in one line, for the run's summary."""
    from egomimic_launch.shm import remove_stale

    done = remove_stale(domains=(domain,))
    if done.unreadable:
        note = "kept every Fast DDS file: /proc/locks is unreadable"
    else:
        parts = [f"removed {len(done.removed)} stale Fast DDS file(s)" if done.removed else "no stale Fast DDS files"]
        if done.busy:
            who = f" (pids {', '.join(map(str, done.users))})" if done.users else ""
            parts.append(f"kept {len(done.busy)} group(s) of live participants{who}")
        note = "; ".join(parts)
    safe_print(f"[launch] shared memory: {note}")
    for pid, names in done.orphaned.items():
        safe_print(
            f"[launch] WARNING: process {pid} started while stale Fast DDS files were removed and maps "
            f"{', '.join(names)}: its shared-memory port no longer receives from new writers; restart it"
        )
    return note


def main(argv: list[str] | None = None) -> int:
    ns, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return _run(ns, overrides)
    except Exception as exc:  # a launcher bug: one line unless --debug; the graph is already down (_run's finally)
        if ns.debug:
            raise
        safe_print(
            f"egomimic-launch: internal error: {type(exc).__name__}: {exc} (--debug prints the traceback)", err=True
        )
        return EXIT_INTERNAL


def _run(ns: argparse.Namespace, overrides: dict[str, str]) -> int:
    try:
        graph = load_graph(ns.launch_file, overrides)
        kill_spec = _parse_kill(ns.kill_after, graph)
        if not (ns.duration >= 0 and math.isfinite(ns.duration)):
            raise LaunchArgumentError(f"--duration {ns.duration:g}: seconds >= 0 (0: run until interrupted)")
        if ns.duration_from == "armed" and not (ns.duration > 0 and ns.summary):
            raise LaunchArgumentError("--duration-from armed needs --duration S and --summary (which sees the gate)")
    except LaunchArgumentError as exc:
        safe_print(f"egomimic-launch: {exc}", err=True)
        return EXIT_USAGE
    # every parameter file (the deployment's and params_file:=) against the graph, before any start
    files = dict.fromkeys(f for spec in graph.nodes for f in (*spec.params_files, *spec.override_files))
    problems = [line for f in files for line in params_check.check(f, graph)]
    if problems:
        for line in problems:
            safe_print(f"egomimic-launch: {line}", err=True)
        return EXIT_USAGE
    if any(spec.name == "policy" for spec in graph.nodes):
        from egomimic_policy.loading import preflight

        why = preflight(graph.args["policy"])
        if why:
            safe_print(f"egomimic-launch: {why}", err=True)
            return EXIT_USAGE
    if ns.print_enclaves:
        for enclave in graph.enclaves():
            print(enclave)
        return EXIT_OK if graph.secured else EXIT_USAGE
    from egomimic_launch import security

    refusals = security.problems(graph, dict(os.environ))
    if refusals:
        for line in refusals:
            safe_print(f"egomimic-launch: {line}", err=True)
        return EXIT_USAGE
    changed = params_check.differing_limits(graph.args["params_file"], graph) if graph.args["params_file"] else []
    if ns.trials:
        for spec in graph.nodes:
            if spec.name == "recorder":
                spec.parameters["auto_start"] = False  # one episode per trial, opened by the runner
    env = apply_to_this_process()
    env.update(graph.security_environment())
    os.environ.update(graph.security_environment())  # the launcher's own participant too
    run_dir = ns.run_dir or Path(tempfile.mkdtemp(prefix=f"egomimic-{datetime.now(UTC):%Y%m%d-%H%M%S}-"))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        safe_print(f"egomimic-launch: --run-dir {str(run_dir)!r}: cannot create it ({exc.strerror or exc})", err=True)
        return EXIT_USAGE
    env.setdefault("ROS_LOG_DIR", str(run_dir / "ros_logs"))
    os.environ["ROS_LOG_DIR"] = env["ROS_LOG_DIR"]
    if changed:
        safe_print(f"[launch] params_file changes safety gate parameters from their defaults: {'; '.join(changed)}")
    if graph.unsafe_limits:
        above = [line for f in files for line in params_check.unsafe_values(f, graph)]
        safe_print(
            "[launch] UNSAFE LIMITS (unsafe_limits:=true): the safety gate accepts limits above their safe "
            f"maxima; set above: {'; '.join(above) or 'none'}"
        )
    safe_print(
        f"[launch] {len(graph.nodes)} nodes, namespace /{graph.namespace}, ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']}, "
        f"logs in {run_dir}"
    )

    from egomimic_launch.heartbeat import Heartbeats
    from egomimic_launch.ros_client import LauncherClient  # rclpy after the environment is set
    from egomimic_launch.summary import RunMonitor, learned_policy
    from egomimic_nodes import topics

    shm_note = clean_shared_memory(int(env["ROS_DOMAIN_ID"]))  # ports of processes killed earlier
    client = LauncherClient(enclave=graph.launcher_enclave)
    names = {spec.name for spec in graph.nodes}
    # This machine's processes first (no discovery to wait for), then DDS discovery for the rest.
    others = local_graph_nodes(names, graph.namespace, int(env["ROS_DOMAIN_ID"])) or client.graph_nodes_running(
        graph, DISCOVERY_WAIT_S
    )
    if others:
        safe_print(
            f"egomimic-launch: refusing to start: nodes of another graph are running on namespace "
            f"/{graph.namespace}, ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']}: {', '.join(others)}. Stop them first "
            f"(or use another namespace:= or ROS_DOMAIN_ID).",
            err=True,
        )
        client.close()
        return EXIT_ALREADY_RUNNING
    if ns.trials and int(graph.args.get("task_seed", "-1")) < 0:
        safe_print("egomimic-launch: --trials needs task_seed:= (the first trial's box)", err=True)
        client.close()
        return EXIT_USAGE
    launcher = Launcher(graph, run_dir, echo=not ns.quiet)
    launcher.shm_note = shm_note
    heartbeats = Heartbeats(client.node, graph)
    policy = graph.args.get("policy")
    monitor = (
        RunMonitor(
            client.node,
            graph.namespace,
            scripted=policy == "scripted",
            # Trials hold, fail and re-arm by design: their table is the verdict, not these checks.
            expect_armed=graph.auto_arm and policy != "none" and not ns.trials,
            expect_episode=graph.args.get("record") == "true" and not ns.trials,
            task_seed=int(graph.args.get("task_seed", "-1")),
            expect_task=policy == "expert" and graph.auto_arm and not ns.trials,
            learned=learned_policy(policy),
        )
        if ns.summary or ns.trials
        else None
    )
    trials_thread, trials_out = None, []
    autogroup = GraphAutogroup()
    if graph.args.get("realtime") == "true":
        from egomimic_nodes.spin import GRAPH_NICENESS, raise_middleware_threads

        # This process subscribes to the command path (observer, heartbeats): its DDS listener
        # must not be what a frames or gate writer waits for (spin.raise_middleware_threads).
        done = raise_middleware_threads()
        if done and not ns.quiet:
            safe_print(f"[launch] scheduling: {done}")
        # The nodes run in this session: its autogroup is the graph's (process.GraphAutogroup).
        done = autogroup.raise_to(GRAPH_NICENESS)
        if done and not ns.quiet:
            safe_print(f"[launch] scheduling: {done}")

    def on_signal(signum, _frame):
        launcher.stop_reason = launcher.stop_reason or f"signal {signal.Signals(signum).name}"
        launcher.stop_event.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    exit_code = EXIT_OK
    t_up = None

    def auto_arm() -> None:
        alarms = alarming(middleware_warnings(run_dir / "logs"))
        if alarms:  # said before arming: a failed arming or a HOLD that follows has its likely cause
            safe_print(
                f"[launch] WARNING: Fast DDS reported lost or deaf ports while the graph started: {describe(alarms)}",
                err=True,
            )
        if graph.auto_arm:
            arm_when_settled(client, graph.namespace, stop=launcher.stop_event, log=safe_print)

    try:
        err = launcher.start(client, env, on_arm_point=auto_arm)
        if err:
            safe_print(f"[launch] START FAILED: {err}", err=True)
            launcher.stop_reason = f"start failed: {err}"
            exit_code = EXIT_START_FAILED
        elif not launcher.stop_event.is_set():
            t_up = time.time()
            heartbeats.start()
            safe_print(f"[launch] all {len(graph.nodes)} nodes up")
            if monitor:
                monitor.begin(t_up, launcher.pids)
            if ns.trials and monitor:
                trials_thread = _start_trials(ns, graph, client, monitor, launcher, trials_out)
            deadline = time.monotonic() + ns.duration if ns.duration > 0 and ns.duration_from == "up" else None
            t_start = time.monotonic()
            next_port_check = t_start
            while not launcher.stop_event.wait(0.1):
                if time.monotonic() >= next_port_check:
                    next_port_check += PORT_CHECK_S
                    launcher.watch_ports()
                if kill_spec and time.monotonic() - t_start >= kill_spec[1]:
                    _kill(launcher, kill_spec[0])
                    kill_spec = None
                dead = launcher.check_children()
                why = f"required node {dead[0]} exited with code {exit_text(dead[1])}" if dead else ""
                if not dead:
                    silent = heartbeats.silent(ns.heartbeat_timeout)
                    if silent:
                        dead, why = (silent[0], -1), f"required node {silent[0]} stopped answering ({silent[1]})"
                if dead:
                    launcher.dead_node = dead
                    launcher.dead_at_wall = time.time()
                    launcher.stop_reason = why
                    safe_print(f"[launch] SAFE STOP: {launcher.stop_reason}", err=True)
                    _, launcher.safe_stop_detail = estop(client, graph.namespace)
                    exit_code = EXIT_SAFE_STOP
                    break
                if monitor:
                    monitor.progress()
                if ns.duration_from == "armed" and deadline is None:
                    armed_at = monitor.first_armed()
                    if armed_at is not None:
                        deadline = time.monotonic() - (time.time() - armed_at) + ns.duration
                    elif time.monotonic() - t_start >= ARMED_WAIT_S:
                        launcher.stop_reason = f"the gate was not ARMED within {ARMED_WAIT_S:.0f} s of start-up"
                        safe_print(f"[launch] {launcher.stop_reason}", err=True)
                        break
                if deadline and time.monotonic() >= deadline:
                    launcher.stop_reason = f"duration {ns.duration:.0f} s elapsed"
                    break
                if trials_thread is not None and not trials_thread.is_alive():
                    launcher.stop_reason = f"{len(trials_out)} trials done"
                    break
        if t_up:
            launcher.watch_ports()
        if monitor and t_up:
            monitor.end(time.time())
        if exit_code == EXIT_OK and not launcher.dead_node:
            # Orderly stop: disarm first so the arms hold while the graph goes down.
            client.trigger(topics.SAFETY_DISARM.resolve(graph.namespace), timeout_s=1.0)
    finally:
        stall = StopStallDump(run_dir / STOP_STALL_FILE)
        launcher.teardown()
        autogroup.restore()
        client.close()
        if launcher.killed_any or launcher.dead_node:
            clean_shared_memory(int(env["ROS_DOMAIN_ID"]))
    safe_print(f"[launch] stopped: {launcher.stop_reason or 'done'}")
    if client.unanswered:
        # A lost reply (a server's response writer not yet matched to this client's reader) is
        # asked again where that is safe; a count that grows says discovery was slow, not that
        # any request failed (those are logged where they are made).
        safe_print(f"[launch] {client.unanswered} service request(s) went unanswered in time (asked again where safe)")
    launcher.dds_warnings = middleware_warnings(run_dir / "logs")
    alarms = alarming(launcher.dds_warnings)
    if alarms:
        safe_print(f"[launch] WARNING: Fast DDS reported lost or deaf ports: {describe(alarms)}", err=True)
    if ns.trials:
        from egomimic_launch.trials import TrialsReport

        report = TrialsReport(str(graph.args.get("policy")), trials_out)
        for line in report.lines():
            safe_print(line)
        if ns.trials_json:
            report.write(ns.trials_json)
        if exit_code == EXIT_OK and len(trials_out) < len(ns.trial_seeds):
            exit_code = EXIT_LOOP_DID_NOT_RUN
    if monitor and t_up:
        verdict_ok = monitor.report(launcher, run_dir, ns.summary_json)
        # With --trials the trials' table is the verdict: a policy that never arms has applied
        # no command, and that is its result, not a run that failed.
        if exit_code == EXIT_OK and not verdict_ok and not ns.trials:
            exit_code = EXIT_LOOP_DID_NOT_RUN
    stall.close()
    return exit_code


STOP_STALL_FILE = "launcher_stop_stall.txt"
STOP_STALL_S = 45.0
"""The launcher's own stop (teardown: at most ~9 s per node; the summary) taking longer than
this writes every thread's stack to STOP_STALL_FILE in the run directory."""


class StopStallDump:
    """faulthandler's watchdog (a C thread: it needs no GIL) over the launcher's stop. Why: once
    in a test run (2026-12-05) the launcher never exited after its nodes had, and nothing said
    where it waited. The file is removed when the stop ends in time."""

    def __init__(self, path: Path, after_s: float = STOP_STALL_S):
        import faulthandler

        self.path = path
        try:
            self._file = open(path, "w")
        except OSError:
            self._file = None
            return
        faulthandler.dump_traceback_later(after_s, repeat=False, file=self._file, exit=False)

    def close(self) -> None:
        import faulthandler

        if self._file is None:
            return
        faulthandler.cancel_dump_traceback_later()
        self._file.close()
        if self.path.stat().st_size == 0:
            self.path.unlink()


def _start_trials(ns, graph, client, monitor, launcher, out: list) -> threading.Thread:
    """The trials in a thread of their own; the main loop goes on supervising the graph."""
    from egomimic_launch.trials import TrialRunner

    runner = TrialRunner(
        client,
        monitor.obs,
        graph.namespace,
        ns.trial_seeds,
        expert=graph.args.get("policy") == "expert",
        record=graph.args.get("record") == "true",
        timeout_s=ns.trial_timeout,
        stopped=launcher.stop_event.is_set,
        log=safe_print,
    )

    def run() -> None:
        try:
            runner.run(out)
        except Exception as exc:  # noqa: BLE001 - the launcher stops the graph and reports
            safe_print(f"[trials] stopped by an error: {type(exc).__name__}: {exc}", err=True)

    thread = threading.Thread(target=run, name="trials", daemon=True)
    thread.start()
    return thread


def _parse_kill(spec: str | None, graph) -> tuple[str, float] | None:
    """--kill-after NODE:SECONDS, checked against the graph before anything starts."""
    if not spec:
        return None
    name, _, seconds = spec.partition(":")
    names = [n.name for n in graph.nodes]
    if name not in names:
        raise LaunchArgumentError(f"--kill-after {spec!r}: no node {name!r} in this graph ({', '.join(names)})")
    try:
        after = float(seconds or 0)
    except ValueError:
        raise LaunchArgumentError(f"--kill-after {spec!r}: {seconds!r} is not a number of seconds") from None
    if not 0.0 <= after < 86_400:
        raise LaunchArgumentError(f"--kill-after {spec!r}: seconds must be >= 0")
    return name, after


def _kill(launcher: Launcher, name: str) -> None:
    for proc in launcher.procs:
        if proc.spec.name == name and proc.poll() is None:
            safe_print(f"[launch] rehearsal: SIGKILL {name} (pid {proc.pid})")
            os.killpg(proc.pid, signal.SIGKILL)
            launcher.killed_any = True


if __name__ == "__main__":
    raise SystemExit(main())
