"""`main()` plumbing shared by every node: init, spin, and a clean exit on SIGINT/SIGTERM or
when the launcher that started the node disappears.

Signals are handled here, not by rclpy: rclpy's handler shuts the context down first, after
which a node can no longer publish, yet a gate that is stopping must still send its last hold.
So SIGINT/SIGTERM only ask the spin loop to stop; the node's `on_exit()` then runs with the
context alive, and the context is shut down last.

Priority: with EGOMIMIC_PRIORITY (the launcher sets it for the gate and the drivers when the
`realtime` launch argument is true) the node raises its scheduling priority before anything
else starts (raise_priority), so a busy machine delays cameras, policy and monitoring first.
With EGOMIMIC_CPUS (the `control_cpus` / `stack_cpus` launch arguments) it also pins itself to
those CPUs (pin_cpus), e.g. the gate and drivers to a core isolated with `isolcpus`.

Middleware: Fast DDS's warnings go to the node's log (middleware_warnings, EGOMIMIC_DDS_LOG),
and the spin loop has the process's entry in the ROS graph refreshed now and then, by a thread
of its own outside the GIL (graph_refresh: a peer that missed it would refuse this node's
messages for the whole run).

Nodes die with their launcher: `egomimic-launch` sets EGOMIMIC_LAUNCHER_PID for its children.
Such a node asks the kernel for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG) and also
checks its parent pid on every spin, so a SIGKILLed launcher never leaves an armed, unsupervised
graph: the gate latches ESTOP and sends its hold, the drivers hold, and every node exits.
Its output pipe died with the launcher, so such a node writes its last words (why it stopped,
how long its exit took) to its log file itself (LOG_FILE_ENV).

The exit is bounded: a node's own `on_exit()` (the gate's hold, the recorder's commit) runs to
its end, then the middleware's teardown (the graph refresh's companion node, the executor's
release, the node's destroy, the context's shutdown) gets TEARDOWN_DEADLINE_S before the process
leaves with os._exit, and a C watchdog ends it TEARDOWN_BACKSTOP_S later if the teardown holds
the GIL. A node whose launcher is gone skips that teardown: on_exit done, it writes its last
words and leaves. Why: a subscriber that dies inside its shared-memory port's lock (a SIGKILLed
launcher, an rviz killed -9) makes every later push into that port wait for Fast DDS's 1 s lock
timeout, and destroying the writers and the participant waits on those pushes. Fresh-clone CI
runs saw the gate and the cameras still alive 3 s after their launcher was killed: first with no
bound at all; then (fc165) stuck in the two parts the guard did not cover, the refresh node's
destroy and the executor's release; then (fc167) in rclpy's destroy and shutdown calls, which
hold the GIL, while the guard's Python timer waited for it.
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import os
import signal
import sys
import threading
import time

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

from egomimic_nodes.cpus import CPUS_ENV, pin_cpus
from egomimic_nodes.graph_refresh import GraphRefresh

LAUNCHER_PID_ENV = "EGOMIMIC_LAUNCHER_PID"
DDS_LOG_ENV = "EGOMIMIC_DDS_LOG"
"""`warning` (default), `error` (Fast DDS's own default) or `info`: what the middleware logs."""
LOG_FILE_ENV = "EGOMIMIC_LOG_FILE"
"""The file the launcher writes this node's output to (egomimic_launch.process). Once the launcher
is gone, so is the pipe it read: the node appends its last lines (why it stopped, how long its
exit took) to that file itself (output_to_log_file), or a SIGKILLed launcher's run would end
every node's log at the kill, with nothing to say which node was slow to leave (fc116)."""
DDS_LOG_LEVELS = {"info": 20, "warning": 30, "error": 40}
"""rmw_log_severity_t values (rmw/types.h)."""
SPIN_TIMEOUT_S = 0.1
"""The spin loop wakes at least this often to see a signal or a dead parent."""
GIL_SWITCH_INTERVAL_S = 0.0005
"""How long a thread that wants the GIL waits before it asks the holder to drop it (CPython's
default: 5 ms). Every node runs a latency-bound thread beside others that run Python: the
policy's tick beside its model worker, and each Outbox's sending thread, which needs the GIL
for a moment after it is woken, beside the thread that handed it the message. With 5 ms the
policy's action waited for the tick to finish building the chunk it had just accepted: the
actions' stamp-to-write delays of 6-13 ms fell on chunk ticks (sim graph with the observers on,
2026-12-07). A switch costs a few microseconds, and only while two threads want the GIL."""
PR_SET_PDEATHSIG = 1
SLOW_REFRESH_S = 0.1
"""A graph refresh this slow (a peer's shared-memory port blocked) is reported at exit."""
REFRESH_JOIN_S = 0.2
"""After on_exit, how long a refresh still running may take before the teardown goes on."""
TEARDOWN_DEADLINE_S = 1.0
"""Seconds the middleware's teardown (release the refresh's node and the executor, destroy the
node, shut the context down) may take after
`on_exit()`; then the process exits at once (os._exit) with the code it would have had. Nothing
of the node's own is lost: its `on_exit()` has finished, and what is left is the release of DDS
resources, which the kernel releases too (leftover shared-memory files are cleaned at the next
launch). Measured in `make run`: 1-10 ms per node (the node's destroy; before the executor's
release came under the guard)."""
TEARDOWN_BACKSTOP_S = 0.5
"""Seconds after TEARDOWN_DEADLINE_S at which faulthandler's watchdog (a C thread, no GIL needed)
prints every thread's stack and ends the process with status 1: for a teardown blocked inside a
C call that holds the GIL (rclpy's destroy and shutdown calls do), where TeardownGuard's Python
timer cannot run."""
EXECUTOR_ENV = "EGOMIMIC_EXECUTOR"
"""`single` forces the SingleThreadedExecutor on every node (a comparison run: bench/graph_cpu.py)."""
PRIORITY_ENV = "EGOMIMIC_PRIORITY"
"""`fifo` (the gate), `path` (the frames node), `nice` (the drivers, cameras, policy), `stack` (recorder, bag) or
empty; set by the launcher (graph.NodeSpec.priority)."""
FIFO_PRIORITY = 10
"""SCHED_FIFO priority of the gate (1..99; kernel threads use 50). The gate is light (about a
sixth of a core) and every deadline of the robot runs through it, so it preempts everything
else; Linux keeps 5 % of each second for normal tasks, so even a runaway gate cannot freeze
the machine. The drivers are not FIFO: on a 2-core machine two simulated drivers (a quarter
of a core each) would starve the cameras and the policy outright."""
PATH_FIFO_PRIORITY = 5
"""SCHED_FIFO priority of the command path's hops before the gate: the frames node (all of it) and
the policy's tick and action writer (the rest of the policy stays at PRIORITY_NICENESS, its model
at STACK_NICENESS: policy_node.path_tier_threads). Below the gate, above every normal thread.
Why: at niceness -5 these hops still waited for the CPU behind the observers (recorder, bag,
rviz's nodes, web view: half a core at nice -2 and 0): the kernel lets a running thread finish
its slice before a woken one of higher weight preempts it. bench/observers.py, 3 + 3 alternated
40 s runs on the 2-core VM (2026-12-07): policy/action's worst gap at its source 39.7, 37.6, 39.2
ms off against 48.1, 39.6, 43.8 on at -5; 37.5, 34.9, 35.4 off against 39.1, 37.1, 35.3 on with
this tier. Light work only (the frames node and the tick are about a tenth of a core each): the
cameras at SCHED_FIFO starved the drivers (README, Headroom)."""
PRIORITY_NICENESS = -5
"""Niceness of the drivers, the cameras (the gate requires their frames fresh: a starved
camera is a STALE_CAMERA HOLD) and the policy (its model worker lowers itself to
STACK_NICENESS), and of the gate, the frames node and the policy's tick where SCHED_FIFO is not
permitted: under load the kernel gives them about 3x the CPU share of a niceness-0 process and
wakes them first."""
STACK_NICENESS = -2
"""Niceness of the rest of the robot's stack (recorder, bag, the policy's model worker): below the
control path, above what else runs on a robot PC at niceness 0 (a browser, rviz, loggers, this
project's own launcher and monitoring). Measured with one busy process beside `make run` (2 cores):
at niceness 0 the cameras' health reports stalled 300 ms (STALE_CAMERA HOLD) or the policy's
commands did (STALE_COMMAND HOLD). The cameras ran here until 2026-12-06; they are in the control
tier since (PRIORITY_NICENESS)."""

GRAPH_NICENESS = -10
"""Niceness of the whole graph's autogroup under egomimic-launch (one session, one group:
egomimic_launch.process.GraphAutogroup), against the other sessions of the machine. The graph
needs up to 1.6 of the 2 cores; its group's share against N busy sessions at niceness 0 is
9548 / (9548 + 1024 N) (the kernel's nice weights): 90 % beside one CPU hog, 82 % beside two.
At -5 (3121) it would be 60 % beside two, where a group per node (seven groups at -5 and -2,
before) had 88 %. Inside the group the tiers above rank the nodes' threads."""


PROFILE_ENV = "EGOMIMIC_PROFILE_DIR"
"""A directory: the node runs its spin loop under cProfile and writes `<node name>.prof` there
on exit (CPU time of the main thread; a node's own busy threads, such as the gate's decisions,
write `<node name>_<thread>.prof` the same way; `python -m pstats FILE` reads it). For finding where a node's CPU
goes; py-spy (`py-spy record --native -p PID`) also sees native code and other threads."""


USAGE = """usage: python -m {module} [--help] --ros-args [-r __ns:=/eva] [-r __node:=NAME] [-p NAME:=VALUE ...]
                        [--params-file FILE.yaml]

Parameters are read-only unless said otherwise (`ros2 param describe` shows the same text at
runtime); a params file applied with --params-file (or the launch argument params_file) sets
them. The usual way to start the whole graph: `egomimic-launch eva_bimanual.launch.py --help`."""


def middleware_warnings(level: str) -> str:
    """Let Fast DDS print its warnings (its default is errors only) into the node's log.

    Why: the failures that matter most here are silent in the middleware's default setting: a
    shared-memory port judged unhealthy and regenerated (its listener then hears no later
    writer), a zombie port, a dropped port. With warnings on, each leaves a line in the node's
    log, which the launcher counts (egomimic_launch.shm.middleware_warnings). Only for
    rmw_fastrtps; another RMW keeps its own setting. Returns what was done, or "" when nothing."""
    if level not in DDS_LOG_LEVELS:
        return f"unknown {DDS_LOG_ENV}={level!r} (one of {', '.join(DDS_LOG_LEVELS)}); left as is"
    if rclpy.get_rmw_implementation_identifier() != "rmw_fastrtps_cpp":
        return ""
    try:
        lib = ctypes.CDLL("librmw_fastrtps_cpp.so")
    except OSError as exc:
        return f"cannot set Fast DDS's log level: {exc}"
    lib.rmw_set_log_severity.argtypes = [ctypes.c_int]
    rc = lib.rmw_set_log_severity(DDS_LOG_LEVELS[level])
    return f"Fast DDS {level}s on" if rc == 0 else f"rmw_set_log_severity({level}) failed ({rc})"


IMAGE_READERS_QUIET = 2
"""A process with this many raw image subscriptions or more keeps Fast DDS at errors
(quiet_middleware_for_images)."""


def quiet_middleware_for_images(image_readers: int) -> str:
    """Fast DDS back to errors only in a process with several raw image subscriptions, unless
    DDS_LOG_ENV was set explicitly. Returns what was done and why, for the log ("" when nothing).

    Why: a 640x480 image travels in ~14 fragments (a participant's message size is its smallest
    transport's, UDP's 64 kB), a writer with several matched readers addresses each fragment to
    no reader in particular, and the receiving participant hands it to every one of its readers;
    each best-effort reader that is not that writer's warns ("Reader ... received DATA_FRAG from
    unknown writer", Fast DDS's StatelessReader::process_data_frag_msg). With three cameras, the
    policy node's log took 2,700 such lines a second (15.7 MB in a 20 s `make run`, 2026-12-05),
    a disk filled in hours. The cost: this process's shared-memory port warnings are not seen."""
    if image_readers < IMAGE_READERS_QUIET or DDS_LOG_ENV in os.environ:
        return ""
    done = middleware_warnings("error")
    return (
        f"{done.replace('errors on', 'errors only') or 'Fast DDS log left as is'}: {image_readers} image "
        "subscriptions (every image fragment would be a warning at each reader that is not its writer's; "
        f"{DDS_LOG_ENV}=warning keeps warnings on)"
    )


def wants_help(argv: list[str]) -> bool:
    """`--help`/`-h` among the arguments before `--ros-args` (ROS arguments are never ours)."""
    ours = argv[1 : argv.index("--ros-args")] if "--ros-args" in argv else argv[1:]
    return "--help" in ours or "-h" in ours


def print_help(factory) -> None:
    module = sys.modules.get(factory.__module__)
    name = getattr(module, "__spec__", None).name if module is not None and module.__spec__ else factory.__module__
    print((module.__doc__ or "").strip() if module is not None else "")
    print()
    print(USAGE.format(module=name))
    configs = getattr(factory, "PARAMETERS", ())
    if configs:
        from egomimic_nodes.params import describe_config

        print("\nparameters:")
        for cls, prefix, skip in configs:
            print("\n".join(describe_config(cls, prefix, skip)))


def make_executor(node=None):
    """rclpy's EventsExecutor (C++, about a third of the Python executor's cost per callback on
    this machine: bench/graph_cpu.py) unless the node says `WAITSET_EXECUTOR = True`. Two kinds
    must stay on the SingleThreadedExecutor: lifecycle nodes (under the EventsExecutor a
    lifecycle node hung at 100 % CPU in `configure`) and nodes whose subscription callbacks take
    the message info (the publisher GID of sources.py): the EventsExecutor in Kilted raises
    `SystemError: null argument to internal routine` on those."""
    if node is not None and not getattr(node, "WAITSET_EXECUTOR", False) and os.environ.get(EXECUTOR_ENV) != "single":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=node.context)
    return SingleThreadedExecutor()


def say(line: str) -> None:
    """Print to stderr without ever raising or blocking: a full disk or a full pipe drops the
    line (the launcher gives each node a non-blocking pipe), it never stops the node."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def output_to_log_file(path: str) -> bool:
    """Send this process's stdout and stderr (file descriptors 1 and 2: Python's prints, rcl's
    console logging, faulthandler) to the end of `path`; False when it cannot be opened."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return False
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    return True


def dump_stacks_on_sigusr1(path: str) -> None:
    """SIGUSR1 appends every thread's Python stack to the node's log file `path` (written by the
    kernel's signal path, not the interpreter: it answers while the main thread is stuck in native
    code). Straight to the file, not stderr: a node still alive after its launcher was SIGKILLed
    (the fault battery asks it so) has no reader left on its output pipe."""
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        faulthandler.register(signal.SIGUSR1, file=os.fdopen(fd, "w", closefd=True), all_threads=True)
    except (OSError, ValueError, AttributeError):
        pass


def launcher_pid() -> int | None:
    value = os.environ.get(LAUNCHER_PID_ENV, "")
    return int(value) if value.isdigit() else None


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send `sig` when the parent exits (Linux; elsewhere the spin loop's
    parent-pid check still applies)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def raise_priority(kind: str) -> str:
    """Raise this process's scheduling priority (`fifo`, `nice` or `stack`, see the constants above) and
    say what it now runs at, for the start log. Needs root or CAP_SYS_NICE; without them the
    process keeps its priority and says so. Called before rclpy starts its threads, so the DDS
    threads inherit it. A node that leads a session of its own (started by hand, or by a launcher
    that makes one per node) gives its autogroup the niceness too (set_autogroup_nice); under
    egomimic-launch the nodes share the launcher's session and the launcher sets the group's."""
    if kind in ("fifo", "path"):
        priority = FIFO_PRIORITY if kind == "fifo" else PATH_FIFO_PRIORITY
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            return f"SCHED_FIFO priority {priority}"
        except (OSError, AttributeError):
            pass
    niceness = STACK_NICENESS if kind == "stack" else PRIORITY_NICENESS
    try:
        os.nice(niceness - os.nice(0))
    except OSError as exc:
        return f"normal priority (a higher one is not permitted: {exc})"
    if os.environ.get(AUTOGROUP_ENV, "1") == "0":
        group = ", autogroup left alone"
    elif os.getsid(0) != os.getpid():
        group = ", in its launcher's autogroup"  # egomimic-launch: process.GraphAutogroup
    else:
        group = set_autogroup_nice(niceness)
    return f"niceness {os.nice(0)}" + (" (SCHED_FIFO not permitted)" if kind in ("fifo", "path") else "") + group


AUTOGROUP_PATH = "/proc/self/autogroup"
AUTOGROUP_ENV = "EGOMIMIC_AUTOGROUP"
"""`0` leaves the autogroup's niceness alone (a comparison run: bench/graph_cpu.py --hog-session)."""


def set_autogroup_nice(niceness: int, path: str = AUTOGROUP_PATH) -> str:
    """Give this process's autogroup the niceness `niceness`; returns what it did, for the log.

    Why: with CONFIG_SCHED_AUTOGROUP (Ubuntu's default, and this VM's:
    /proc/sys/kernel/sched_autogroup_enabled = 1) the kernel first shares the CPU fairly between
    autogroups, one per session, and a process's own niceness only ranks it inside its group.
    A node alone in its session (raise_priority calls this only then) would rank against
    nothing with its niceness alone, and a busy process of any other session (a browser, a
    training run, `nice -n 19` or not) would get the same CPU share as the gate's drivers.
    Measured so: with two niced (10) training processes beside it, the simulated graph's cameras
    stalled 90-240 ms some twenty times in 30 s, and a frames node fell 1 s behind. The group's
    niceness is what ranks it against other sessions (the same weights as nice).
    egomimic-launch keeps its nodes in its own session instead (one group for the graph, whose
    niceness it sets: egomimic_launch.process.GraphAutogroup). SCHED_FIFO threads are
    not grouped; lowering a group's niceness needs CAP_SYS_NICE, like the process's own."""
    try:
        with open(path) as f:
            before = f.read().split()
        with open(path, "w") as f:
            f.write(str(int(niceness)))
        return f", autogroup niceness {niceness} (was {before[-1] if before else '?'})"
    except FileNotFoundError:
        return ""  # a kernel without autogroups: the process niceness is all there is
    except OSError as exc:
        return f", autogroup niceness unchanged ({exc.strerror or exc})"


def freeze_heap() -> None:
    """Collect once, then move every object that exists after start-up (modules, torch, the
    node) out of the garbage collector's sight (gc.freeze). A full collection in the policy
    process walks ~180 000 objects and stops every thread for 70-80 ms; CPython runs one now
    and then on its own, and a 10-minute soak saw the policy's actions stop for 85-102 ms once.
    Afterwards a full collection walks only what was allocated since: ~0.01 ms here."""
    gc.collect()
    gc.freeze()


MIDDLEWARE_THREAD_PREFIX = "dds."
"""Fast DDS names its threads dds.shm.<port>, dds.udp.<port>, dds.ev.<n>, ..."""


def raise_middleware_threads(niceness: int = PRIORITY_NICENESS) -> str:
    """Give this process's Fast DDS threads the control tier's niceness when they run below it
    (a process of the stack tier, the launcher). Why: a writer pushing a sample into this
    process's shared-memory port takes the port's interprocess mutex, which this process's
    listener thread also takes; if the listener is preempted while holding it, every writer to
    this process waits (outbox.py), the frames node's command writer included, and the gate
    sees no command. A listener at the control tier is not preempted by the stack's or a hog's
    work. Call it after the node exists (its participant's threads are created with it).
    Returns what it did, for the log ("" when nothing was needed)."""
    raised, failed = [], ""
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            if not name.startswith(MIDDLEWARE_THREAD_PREFIX) or os.getpriority(os.PRIO_PROCESS, int(tid)) <= niceness:
                continue
            os.setpriority(os.PRIO_PROCESS, int(tid), niceness)
            raised.append(name)
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        except OSError as exc:
            failed = f" (not permitted for the others: {exc})"
            break
    if not raised and not failed:
        return ""
    return f"{len(raised)} middleware thread(s) at niceness {niceness}: {', '.join(sorted(raised))}{failed}"


def raise_after_init(kind: str, stack_tids: set[int], path_tids: frozenset[int] = frozenset()) -> str:
    """For a node whose start-up is heavy (`RAISE_PRIORITY_AFTER_INIT` on its class: the policy
    imports torch and loads its checkpoint in __init__, seconds of CPU, while the gate is already
    armed and the cameras must keep their 30 Hz): it started at the launcher's niceness, and its
    tier is given now, to every thread it has, except `stack_tier_threads` (its model worker),
    which get STACK_NICENESS, and `path_tids` (its tick and action writer), which get SCHED_FIFO
    PATH_FIFO_PRIORITY (the tier's niceness where that is not permitted). A thread that a FIFO
    thread starts later inherits FIFO: the executor's timer thread, which wakes the tick, is
    started by its first spin. Measured before (make run, py-spy): the policy's __init__ took
    half of its samples over the first 18 s, at niceness -5, above the cameras."""
    done = raise_priority(kind)
    target = STACK_NICENESS if kind == "stack" else PRIORITY_NICENESS
    moved, fifo, failed = 0, 0, []
    for tid in (int(t) for t in os.listdir("/proc/self/task")):
        want = STACK_NICENESS if tid in stack_tids else target
        try:
            if tid in path_tids:
                try:
                    os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(PATH_FIFO_PRIORITY))
                    fifo += 1
                    continue
                except PermissionError as exc:
                    failed.append(f"{tid}: SCHED_FIFO {exc.strerror or exc}")
            if os.getpriority(os.PRIO_PROCESS, tid) != want:
                os.setpriority(os.PRIO_PROCESS, tid, want)
                moved += 1
        except OSError as exc:  # a thread that ended meanwhile, or no CAP_SYS_NICE
            failed.append(f"{tid}: {exc.strerror or exc}")
    return (
        f"{done}; {moved} thread(s) moved"
        + (f", {len(stack_tids)} at niceness {STACK_NICENESS}" if stack_tids else "")
        + (f", {fifo} at SCHED_FIFO priority {PATH_FIFO_PRIORITY}" if path_tids else "")
        + (f" (unchanged: {', '.join(failed)})" if failed else "")
    )


def lower_this_thread(kind: str = "stack") -> str:
    """Give the calling thread the niceness of `kind`'s tier when the process runs above it
    (a thread may always lower its own priority): the policy node's model worker, so the 30 Hz
    tick of its process runs at the control tier and the inference at the stack's. Returns
    what it did, for the log ("" when nothing was needed)."""
    target = STACK_NICENESS if kind == "stack" else 0
    tid = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) >= target:
            return ""
        os.setpriority(os.PRIO_PROCESS, tid, target)
        return f"thread {threading.current_thread().name}: niceness {target}"
    except OSError as exc:
        return f"thread {threading.current_thread().name}: niceness unchanged ({exc})"


def start_profile():
    """A running cProfile.Profile when PROFILE_ENV names a directory, else None."""
    if not os.environ.get(PROFILE_ENV):
        return None
    import cProfile
    import time

    profiler = cProfile.Profile(time.thread_time)  # CPU time: waiting and preemption are not work
    profiler.enable()
    return profiler


def end_profile(profiler, node, part: str = "") -> None:
    """Write `<node name>[_<part>].prof` (part: a thread of the node that profiles itself)."""
    if profiler is None:
        return
    profiler.disable()
    path = os.path.join(os.environ[PROFILE_ENV], f"{node.get_name()}{'_' + part if part else ''}.prof")
    try:
        os.makedirs(os.environ[PROFILE_ENV], exist_ok=True)
        profiler.dump_stats(path)
        say(f"[INFO] profile written to {path}")
    except OSError as exc:
        say(f"[WARN] profile not written ({path}): {exc}")


class StopRequest:
    """Why the spin loop should end ('' while it should not)."""

    def __init__(self):
        self.reason = ""

    def __call__(self, signum, _frame) -> None:
        self.reason = self.reason or signal.Signals(signum).name


def run_node(factory, args=None) -> int:
    """Create the node with `factory()`, spin until a signal or the launcher's death, call its
    `on_exit()` if any (context still alive), then destroy it and shut down. A node's own thread
    that cannot go on sets `node.fatal` (why): the node then exits 1, as it would on an
    exception in an executor callback."""
    argv = list(args if args is not None else sys.argv)
    if wants_help(argv):
        try:
            print_help(factory)
            sys.stdout.flush()
        except BrokenPipeError:  # `--help | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    # A crash in native code (rmw, Fast DDS, the SDK) prints every thread's Python stack into the
    # node's log: the one lead a SIGSEGV leaves (fc87: a driver exited -11 at start-up, no trace).
    faulthandler.enable(file=sys.stderr, all_threads=True)
    dump_stacks_on_sigusr1(os.environ.get(LOG_FILE_ENV, ""))
    stop = StopRequest()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    parent = launcher_pid()
    if parent is not None:
        die_with_parent()
        if os.getppid() != parent:
            say(f"[FATAL] the launcher (pid {parent}) is gone before start-up; exiting")
            return 1
    kind = os.environ.get(PRIORITY_ENV, "")
    late = kind == "nice" and getattr(factory, "RAISE_PRIORITY_AFTER_INIT", False)
    if kind in ("fifo", "path", "nice", "stack") and not late:
        say(f"[INFO] scheduling: {raise_priority(kind)}")
    if os.environ.get(CPUS_ENV, "").strip():
        try:
            say(f"[INFO] affinity: {pin_cpus(os.environ[CPUS_ENV])}")
        except (ValueError, OSError) as exc:
            say(f"[FATAL] cannot pin to CPUs {os.environ[CPUS_ENV]!r}: {exc}")
            return 1
    rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    middleware = middleware_warnings(os.environ.get(DDS_LOG_ENV, "warning"))
    if middleware:
        say(f"[INFO] middleware log: {middleware}")
    node = None
    executor = None
    refresh = None
    code = 0
    try:
        node = factory()
        if late:
            path = node.path_tier_threads() if hasattr(node, "path_tier_threads") else frozenset()
            say(f"[INFO] scheduling (start-up done): {raise_after_init(kind, node.stack_tier_threads(), path)}")
        if os.environ.get(PRIORITY_ENV) == "stack":
            done = raise_middleware_threads()
            if done:
                say(f"[INFO] scheduling: {done}")
        freeze_heap()
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        executor = make_executor(node)
        executor.add_node(node)
        profiler = start_profile()
        refresh = GraphRefresh(node, log=say)
        while not stop.reason and rclpy.ok():
            executor.spin_once(timeout_sec=SPIN_TIMEOUT_S)
            refresh.tick()
            if parent is not None and os.getppid() != parent:
                stop.reason = f"the launcher (pid {parent}) is gone"
            if getattr(node, "fatal", ""):
                break
        end_profile(profiler, node)
        refresh.stop()  # no waiting here: on_exit (the gate's last hold) comes first
        if getattr(node, "fatal", ""):
            say(f"[FATAL] {node.fatal}")
            code = 1
        elif stop.reason:
            say(f"[INFO] stopping: {stop.reason}")
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # noqa: BLE001 - report, exit non-zero, let the launcher react
        say(f"[FATAL] {type(exc).__name__}: {exc}")
        code = 1
    finally:
        t_exit = time.monotonic()
        if node is not None:
            on_exit = getattr(node, "on_exit", None)
            if on_exit is not None:
                try:
                    on_exit()
                except Exception as exc:  # noqa: BLE001
                    say(f"[ERROR] on_exit: {exc}")
        t_on_exit = time.monotonic() - t_exit
        if _launcher_gone(parent, stop.reason):
            # The graph goes down with its launcher. on_exit has run (the gate's hold is with the
            # middleware, the recorder's episode committed), so the middleware's teardown is
            # skipped: that is what blocks here (writes into the dead launcher's shared-memory port
            # wait out Fast DDS's 1 s lock timeout, inside rclpy calls that hold the GIL, where the
            # guard's Python timer cannot run: fc167), and the kernel releases it all anyway.
            _last_words(
                parent, stop.reason, t_exit, t_on_exit, f"left without the middleware's teardown, exiting {code}"
            )
            _leave(code)
        # Everything after on_exit is the middleware's and runs under the guard: the refresh's
        # companion node, the executor (it holds the node's entities in use, so their real
        # destruction happens when it lets them go), the node and the context. fc165: the gate
        # sat > 3 s in the refresh node's destroy and a camera in the executor's release when
        # run_node's frame let go of it, both outside the guard.
        guard = TeardownGuard(code)
        faulthandler.dump_traceback_later(TEARDOWN_DEADLINE_S + TEARDOWN_BACKSTOP_S, exit=True, file=sys.stderr)
        try:
            if refresh is not None:
                refresh.close(REFRESH_JOIN_S)
                if refresh.slowest_s >= SLOW_REFRESH_S or refresh.skipped or refresh.failed:
                    say(
                        f"[INFO] graph refresh: {refresh.count} done, {refresh.skipped} skipped (the previous one "
                        f"still running), {refresh.failed} failed, slowest {refresh.slowest_s * 1e3:.0f} ms (off the "
                        "spin loop)"
                    )
            # Errors only from here on: the teardown's own warnings ("Type ... is in use") are
            # routine and would bury a run's real ones (dds_log.ROUTINE).
            middleware_warnings("error")
            if executor is not None:
                executor.shutdown(timeout_sec=0)
                executor = None
            if node is not None:
                node.destroy_node()
            rclpy.try_shutdown()
        finally:
            guard.cancel()
            faulthandler.cancel_dump_traceback_later()
    return code


LAST_WORDS = "this node's last words, written by itself"
"""The phrase that opens what a node whose launcher is gone writes to its log (_last_words)."""
ORPHAN_CONFIRM_S = 0.5
"""How long a node that stopped on SIGTERM waits, after its exit, for its launcher's death to be
complete before it decides that the launcher is alive (and its output pipe read)."""


def _launcher_gone(parent: int | None, reason: str) -> bool:
    """True when this node's launcher is gone (then the node's output goes to its own log file, see
    LOG_FILE_ENV, and a second SIGTERM is ignored from now on: the kernel sends one more when the
    launcher's last thread is gone, and it must not end the exit with status 143). Asked once
    on_exit is done, not at the signal: a SIGKILLed launcher's threads die one by one, and the
    first death already sends the parent-death SIGTERM while getppid() still names the launcher
    and its other threads still hold the pipe open. After a SIGTERM (the launcher itself stops
    nodes with SIGINT) it waits up to ORPHAN_CONFIRM_S for the launcher's death to complete."""
    if parent is None:
        return False
    deadline = time.monotonic() + (ORPHAN_CONFIRM_S if reason == "SIGTERM" else 0.0)
    while os.getppid() == parent and not _output_pipe_closed():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass
    output_to_log_file(os.environ.get(LOG_FILE_ENV, ""))
    return True


def _last_words(parent: int, reason: str, t_exit: float, t_on_exit: float, outcome: str) -> None:
    """How a node whose launcher is gone left, in its own log file (LAST_WORDS opens it)."""
    say(
        f"[INFO] the launcher (pid {parent}) is gone; {LAST_WORDS}: stopped because "
        f"{reason or 'the spin loop ended'}; on_exit took {t_on_exit * 1e3:.0f} ms; {outcome} "
        f"{(time.monotonic() - t_exit) * 1e3:.0f} ms after the spin loop ended (wall clock {time.time():.3f})"
    )


def _leave(code: int) -> None:
    """End the process now with `code`, the buffered output written first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _output_pipe_closed() -> bool:
    """True when stderr is a pipe whose reader is gone (poll reports POLLERR for it)."""
    import select

    try:
        poller = select.poll()
        poller.register(2, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


class TeardownGuard:
    """Ends the process with `code` if the teardown has not finished within `deadline_s`
    (see TEARDOWN_DEADLINE_S): a daemon timer, cancelled when the teardown returns. A Python
    thread: it cannot run while the teardown blocks in a C call that holds the GIL
    (TEARDOWN_BACKSTOP_S covers that)."""

    def __init__(self, code: int, deadline_s: float | None = None):
        self.code = code
        self.deadline_s = TEARDOWN_DEADLINE_S if deadline_s is None else deadline_s
        self._timer = threading.Timer(self.deadline_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        say(
            f"[WARN] the middleware's teardown did not finish within {self.deadline_s:.1f} s (a publish into the "
            "shared-memory port of a process that died holding it?); leaving without it"
        )
        _leave(self.code)
