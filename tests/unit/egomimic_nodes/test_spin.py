"""Scheduling helpers of egomimic_nodes.spin, in a child process (they change its priority)."""

import pytest

from .child import lines_in_own_session, run_python


def test_a_thread_lowers_itself_to_the_stack_tier_and_the_process_keeps_its_own():
    code = (
        "import os, threading\n"
        "from egomimic_nodes.spin import STACK_NICENESS, lower_this_thread\n"
        "os.setpriority(os.PRIO_PROCESS, 0, STACK_NICENESS - 3)\n"  # the control tier (needs root or CAP_SYS_NICE)
        "out = {}\n"
        "def worker():\n"
        "    out['did'] = lower_this_thread('stack')\n"
        "    out['worker'] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())\n"
        "    out['again'] = lower_this_thread('stack')\n"
        "t = threading.Thread(target=worker, name='model'); t.start(); t.join()\n"
        "print(out['did'], '|', out['worker'], '|', out['again'] or 'nothing', '|',\n"
        "      os.getpriority(os.PRIO_PROCESS, 0), '|', STACK_NICENESS)\n"
    )
    out = run_python(code)
    if "Permission denied" in out.stderr or "Operation not permitted" in out.stderr:
        pytest.skip("raising a priority needs root or CAP_SYS_NICE here")
    assert out.returncode == 0, out.stderr
    did, worker, again, main, stack = (x.strip() for x in out.stdout.split("|"))
    assert did == f"thread model: niceness {stack}" and int(worker) == int(stack)
    assert again == "nothing", "already at the tier: nothing to do"
    assert int(main) == int(stack) - 3, "the process (its tick) keeps the control tier"


def test_freeze_heap_leaves_nothing_for_a_full_collection_to_walk():
    code = (
        "import gc\n"
        "import egomimic_nodes.policy_node, torch\n"  # the biggest heap of the graph
        "from egomimic_nodes.spin import freeze_heap\n"
        "before = len(gc.get_objects())\n"
        "freeze_heap()\n"
        "gc.collect()\n"
        "print(before, gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    before, frozen, tracked = out.stdout.split()
    assert int(frozen) >= int(before) // 2 and int(tracked) < 1000, out.stdout


def test_the_middleware_threads_are_raised_to_the_control_tier_and_the_rest_stay():
    """A process of the stack tier (and the launcher) raises only its Fast DDS threads."""
    code = (
        "import os, rclpy\n"
        "from rclpy.node import Node\n"
        "from egomimic_nodes.spin import PRIORITY_NICENESS, STACK_NICENESS, raise_middleware_threads\n"
        "os.setpriority(os.PRIO_PROCESS, 0, STACK_NICENESS)\n"
        "rclpy.init(domain_id=0)\n"
        "node = Node('raise_test', start_parameter_services=False)\n"
        "did = raise_middleware_threads()\n"
        "prio = {}\n"
        "for tid in os.listdir('/proc/self/task'):\n"
        "    name = open(f'/proc/self/task/{tid}/comm').read().strip()\n"
        "    prio[name + '#' + tid] = os.getpriority(os.PRIO_PROCESS, int(tid))\n"
        "print(repr(did)); print(repr(raise_middleware_threads())); print(PRIORITY_NICENESS, STACK_NICENESS); print(prio)\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0))\n"
        "node.destroy_node(); rclpy.shutdown()\n"
    )
    out = run_python(code)
    if "Permission denied" in out.stderr or "Operation not permitted" in out.stderr:
        pytest.skip("raising a priority needs root or CAP_SYS_NICE here")
    assert out.returncode == 0, out.stderr
    did, again, tiers, prio, main = out.stdout.strip().splitlines()
    control, stack = map(int, tiers.split())
    prio = eval(prio)
    dds = {k: v for k, v in prio.items() if k.startswith("dds.")}
    assert any(k.startswith("dds.shm.") or k.startswith("dds.udp.") for k in dds), f"no receive thread seen: {prio}"
    assert set(dds.values()) == {control}, dds
    assert int(main) == stack, "the node's own (main) thread keeps the stack tier"
    assert f"{len(dds)} middleware thread(s) at niceness {control}" in did
    assert again == "''", "nothing left to raise"


TEARDOWN_CHILD = """
import os, signal, sys, threading, time
import rclpy
from rclpy.node import Node
from egomimic_nodes import spin

class Node_(Node):
    def __init__(self):
        super().__init__("teardown_test", start_parameter_services=False)
        self.exited = False
        print("ready", flush=True)

    def on_exit(self):
        time.sleep(0.3)  # the node's own exit work runs to its end, whatever the deadline
        print("on_exit done", flush=True)

    def destroy_node(self):
        t0 = time.monotonic()
        if BLOCK == "node":
            threading.Event().wait()  # a writer stuck in a dead subscriber's port
        if BLOCK == "gil":
            import ctypes
            ctypes.PyDLL(None).sleep(60)  # the same, inside a C call that holds the GIL (rclpy's destroy)
        super().destroy_node()
        print(f"destroyed in {(time.monotonic() - t0) * 1e3:.1f} ms", flush=True)

class Refresh(spin.GraphRefresh):
    def close(self, timeout_s=0.5):
        if BLOCK == "refresh":
            threading.Event().wait()  # the companion node's destroy, stuck the same way
        super().close(timeout_s)

class Executor:
    # The node's executor, whose release (shutdown, or its destructor: it holds the node's
    # entities in use, their real destruction comes with it) may block the same way.

    def __init__(self, node):
        self.inner = make_executor(node)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def shutdown(self, timeout_sec=None):
        if BLOCK == "executor":
            threading.Event().wait()
        return self.inner.shutdown(timeout_sec=timeout_sec)

    def __del__(self):
        if BLOCK == "executor":
            threading.Event().wait()

BLOCK = sys.argv[1]
make_executor = spin.make_executor
spin.make_executor, spin.GraphRefresh = Executor, Refresh
spin.TEARDOWN_DEADLINE_S = 0.5
if BLOCK != "orphan":  # an orphan is stopped by its launcher's death
    signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
    signal.setitimer(signal.ITIMER_REAL, 1.0)
t0 = time.monotonic()
code = spin.run_node(Node_, ["node", "--ros-args"])
print(f"returned {code} after {time.monotonic() - t0:.2f} s", flush=True)
"""


@pytest.mark.parametrize("block", ["free", "node", "refresh", "executor"])
def test_a_blocked_teardown_ends_the_process_at_its_deadline_after_on_exit(block):
    """The node's on_exit always finishes; a middleware teardown stuck for good (a publish into
    the port of a subscriber that died holding it) is cut at TEARDOWN_DEADLINE_S with the code
    the node would have exited with, and says so; an unblocked one never meets the guard. Each
    part of the teardown is covered: the node's destroy, the graph refresh's companion node and
    the executor's release (fc165: the gate stuck in the first, a camera in the second, > 3 s)."""
    import subprocess
    import sys
    import time

    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", TEARDOWN_CHILD, block], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert "on_exit done" in out.stdout, out.stdout
    if block != "free":
        assert "did not finish within 0.5 s" in out.stderr, out.stderr
        assert "returned" not in out.stdout and "destroyed" not in out.stdout, out.stdout
    else:
        assert "did not finish" not in out.stderr, out.stderr
        assert "destroyed in" in out.stdout and "returned 0" in out.stdout, out.stdout
    assert took < 30, f"the child took {took:.1f} s"


def test_a_teardown_that_holds_the_gil_is_ended_by_the_c_watchdog():
    """A teardown blocked inside a C call that holds the GIL (fc167: rclpy's destroy and shutdown,
    waiting on a dead process's shared-memory port) leaves the guard's Python timer waiting for
    the GIL; faulthandler's watchdog ends the process TEARDOWN_BACKSTOP_S later, with every
    thread's stack and status 1."""
    import subprocess
    import sys
    import time

    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", TEARDOWN_CHILD, "gil"], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    assert "on_exit done" in out.stdout and "destroyed" not in out.stdout, out.stdout
    assert "Timeout (0:00:01)!" in out.stderr and "in destroy_node" in out.stderr, out.stderr[-2000:]
    assert took < 30, f"the child took {took:.1f} s"


ORPHAN_LAUNCHER = """
import os, subprocess, sys
env = dict(os.environ, EGOMIMIC_LAUNCHER_PID=str(os.getpid()), EGOMIMIC_LOG_FILE=sys.argv[2])
node = subprocess.Popen([sys.executable, "-c", sys.argv[1], "orphan"], env=env, stdout=subprocess.PIPE, text=True)
print(node.pid, flush=True)
for line in node.stdout:
    print(line, end="", flush=True)
"""


def test_a_node_whose_launcher_is_killed_leaves_after_on_exit_without_the_teardown(tmp_path):
    """SIGKILL a node's launcher: the node (parent-death SIGTERM) runs its on_exit, writes its last
    words to its own log file and leaves with its code, without the middleware's teardown (what
    blocks after such a death: writes into the dead launcher's shared-memory port)."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from egomimic_nodes.spin import LAST_WORDS

    log = tmp_path / "node.log"
    launcher = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_LAUNCHER, TEARDOWN_CHILD, str(log)], stdout=subprocess.PIPE, text=True
    )
    try:
        pid = int(launcher.stdout.readline())
        node = psutil.Process(pid)
        assert launcher.stdout.readline().strip() == "ready"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        deadline = time.monotonic() + 20
        while node.is_running() and node.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not node.is_running() or node.status() == psutil.STATUS_ZOMBIE, "the node outlived its launcher by 20 s"
    finally:
        launcher.kill()
        try:
            psutil.Process(pid).kill()
        except (psutil.Error, NameError):
            pass
    text = log.read_text()
    assert LAST_WORDS in text and "stopped because SIGTERM" in text, text
    assert "left without the middleware's teardown, exiting 0" in text, text
    assert "destroyed in" not in text and "returned" not in text, text


def test_a_node_gives_its_autogroup_its_niceness():
    """With autogroups (one per session; each node is a session of its own), the group's
    niceness is what ranks a node against other sessions' processes: set and read back in a
    child that is alone in its session (so the test runner's own group is untouched)."""
    import os

    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("this kernel has no autogroups")
    code = (
        "from egomimic_nodes.spin import set_autogroup_nice\n"
        "print(set_autogroup_nice(3)); print(open('/proc/self/autogroup').read().split()[-1])\n"
    )
    said, now = lines_in_own_session(code)
    assert said.startswith(", autogroup niceness 3 (was ") and now == "3", (said, now)


def test_a_node_in_its_launchers_session_leaves_the_graphs_autogroup_to_the_launcher():
    """Under egomimic-launch the nodes share the launcher's session (one autogroup, whose niceness
    the launcher sets): a node must not write its own tier into the whole graph's group. The
    child runs in a session of its own, as a launcher does, and starts a node-like grandchild
    in that session; the grandchild raises its priority and the group keeps its niceness."""
    import os

    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("this kernel has no autogroups")
    if os.geteuid() != 0:
        pytest.skip("raising a priority needs CAP_SYS_NICE")
    node = (
        "from egomimic_nodes.spin import raise_priority\n"
        "print(raise_priority('stack')); print(open('/proc/self/autogroup').read().split()[-1])\n"
    )
    launcher = (
        "import subprocess, sys\n"
        "open('/proc/self/autogroup', 'w').write('3')\n"
        f"sys.exit(subprocess.run([sys.executable, '-c', {node!r}], process_group=0).returncode)\n"
    )
    said, group = lines_in_own_session(launcher)
    assert said.endswith(", in its launcher's autogroup"), said
    assert group == "3", f"the node changed its launcher's group to {group}"


def test_a_node_raised_after_its_start_up_gives_every_thread_its_tier_but_the_model_worker():
    """The policy starts at the launcher's niceness (torch's import and the checkpoint's load are
    seconds of CPU) and takes its tier after __init__: the threads it made meanwhile (middleware,
    outboxes) move with it, its model worker goes to the stack tier. In a child of its own session
    (so the test runner's autogroup and niceness are untouched)."""
    import os

    if os.geteuid() != 0:
        pytest.skip("raising a priority needs CAP_SYS_NICE")
    code = (
        "import os, threading\n"
        "from egomimic_nodes.spin import PRIORITY_NICENESS, STACK_NICENESS, raise_after_init\n"
        "stop = threading.Event()\n"
        "threads = [threading.Thread(target=stop.wait) for _ in range(2)]\n"
        "[t.start() for t in threads]\n"
        "said = raise_after_init('nice', {threads[1].native_id})\n"
        "nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)\n"
        "print(said)\n"
        "print(nice(threading.get_native_id()), nice(threads[0].native_id), nice(threads[1].native_id))\n"
        "print(PRIORITY_NICENESS, PRIORITY_NICENESS, STACK_NICENESS)\n"
        "stop.set()\n"
    )
    said, got, want = lines_in_own_session(code)
    assert got == want, f"niceness of main, a thread made during start-up, the worker: {got}, expected {want}"
    assert "thread(s) moved" in said and "unchanged" not in said, said


def test_the_policys_tick_and_action_writer_go_to_the_path_tier_and_what_the_tick_starts_inherits_it():
    """The policy's tick (the thread that spins it) and its action writer run at SCHED_FIFO below the
    gate, the rest at the control tier's niceness, the model worker at the stack's; a thread the
    tick's thread starts afterwards (the executor's timer thread, made by its first spin) is FIFO
    too. In a child of its own session."""
    import os

    if os.geteuid() != 0:
        pytest.skip("SCHED_FIFO needs CAP_SYS_NICE")
    code = (
        "import os, threading\n"
        "from egomimic_nodes.spin import PATH_FIFO_PRIORITY, raise_after_init\n"
        "stop = threading.Event()\n"
        "threads = [threading.Thread(target=stop.wait) for _ in range(3)]\n"
        "[t.start() for t in threads[:2]]\n"
        "main, writer, worker = threading.get_native_id(), threads[0].native_id, threads[1].native_id\n"
        "said = raise_after_init('nice', {worker}, frozenset({main, writer}))\n"
        "threads[2].start()\n"
        "tier = lambda t: (os.sched_getscheduler(t), os.sched_getparam(t).sched_priority, os.getpriority(os.PRIO_PROCESS, t))\n"
        "print(said)\n"
        "print(*(tier(t) for t in (main, writer, worker, threads[2].native_id)), sep=';')\n"
        "stop.set()\n"
    )
    said, got = lines_in_own_session(code)
    main, writer, worker, later = got.split(";")
    from egomimic_nodes.spin import PATH_FIFO_PRIORITY, STACK_NICENESS

    fifo = f"({os.SCHED_FIFO}, {PATH_FIFO_PRIORITY},"  # a FIFO thread's niceness does not count
    assert all(t.startswith(fifo) for t in (main, writer, later)), got
    assert worker == str((os.SCHED_OTHER, 0, STACK_NICENESS)), got
    assert f"2 at SCHED_FIFO priority {PATH_FIFO_PRIORITY}" in said and "unchanged" not in said, said


def test_the_path_tier_is_fifo_below_the_gate():
    import os

    from egomimic_nodes.spin import FIFO_PRIORITY, PATH_FIFO_PRIORITY

    assert 0 < PATH_FIFO_PRIORITY < FIFO_PRIORITY
    if os.geteuid() != 0:
        pytest.skip("SCHED_FIFO needs CAP_SYS_NICE")
    code = (
        "import os\nfrom egomimic_nodes.spin import raise_priority\n"
        "print(raise_priority('path')); print(os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)\n"
    )
    said, got = lines_in_own_session(code)
    assert said == f"SCHED_FIFO priority {PATH_FIFO_PRIORITY}" and got == f"{os.SCHED_FIFO} {PATH_FIFO_PRIORITY}", (
        said,
        got,
    )


def test_without_autogroups_nothing_is_said_and_a_refusal_is_reported(tmp_path):
    from egomimic_nodes.spin import set_autogroup_nice

    assert set_autogroup_nice(-5, str(tmp_path / "missing")) == ""
    said = set_autogroup_nice(-5, str(tmp_path))  # a path that cannot be written (a directory)
    assert said.startswith(", autogroup niceness unchanged"), said


def test_middleware_warnings_turns_fast_dds_warnings_on_and_refuses_an_unknown_level():
    from egomimic_nodes.spin import DDS_LOG_ENV, middleware_warnings

    assert middleware_warnings("warning") == "Fast DDS warnings on"
    assert middleware_warnings("error") == "Fast DDS errors on"
    said = middleware_warnings("loud")
    assert said.startswith(f"unknown {DDS_LOG_ENV}='loud'") and "left as is" in said


def test_several_image_readers_keep_fast_dds_at_errors_unless_asked(monkeypatch):
    """quiet_middleware_for_images: one image reader changes nothing; several turn Fast DDS back to
    errors (each image fragment would be a warning at every reader that is not its writer's);
    an explicit EGOMIMIC_DDS_LOG wins."""
    from egomimic_nodes import spin

    levels = []
    monkeypatch.setattr(spin, "middleware_warnings", lambda level: levels.append(level) or f"Fast DDS {level}s on")
    monkeypatch.delenv(spin.DDS_LOG_ENV, raising=False)
    assert spin.quiet_middleware_for_images(1) == "" and levels == []
    said = spin.quiet_middleware_for_images(3)
    assert levels == ["error"] and said.startswith("Fast DDS errors only: 3 image subscriptions"), said
    monkeypatch.setenv(spin.DDS_LOG_ENV, "warning")
    assert spin.quiet_middleware_for_images(3) == "" and levels == ["error"]


CRASH_CHILD = """
import ctypes
import resource
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file in the checkout
from rclpy.node import Node
from egomimic_nodes import spin

class Crashing(Node):
    def __init__(self):
        super().__init__("crashing")
        self.create_timer(0.05, lambda: ctypes.string_at(0))  # a native crash, as a bad pointer in rmw would be

spin.run_node(Crashing, ["node", "--ros-args"])
"""


def test_a_native_crash_leaves_every_threads_python_stack_in_the_log():
    """A node that dies of SIGSEGV (fc87: a driver exited -11 at start-up with nothing in its
    log) prints the fatal error and its threads' Python stacks, the timer callback's included."""
    import signal

    from .child import run_python

    out = run_python(CRASH_CHILD, timeout_s=60)
    assert out.returncode == -signal.SIGSEGV, (out.returncode, out.stderr[-2000:])
    assert "Fatal Python error: Segmentation fault" in out.stderr, out.stderr[-2000:]
    assert "in <lambda>" in out.stderr and "Thread 0x" in out.stderr, out.stderr[-2000:]


def test_a_death_by_signal_is_named():
    from egomimic_launch.process import exit_text

    assert exit_text(0) == "0" and exit_text(3) == "3"
    assert exit_text(-9) == "-9 (SIGKILL)"
    assert exit_text(-11).startswith("-11 (SIGSEGV: a crash in native code")


def test_sigusr1_appends_every_thread_s_stack_to_the_log_file(tmp_path):
    """A node still alive after its launcher was SIGKILLed has no output pipe: SIGUSR1 writes its
    threads' stacks into its log file, even while the main thread waits in native code."""
    import os
    import signal
    import subprocess
    import sys
    import time

    log = tmp_path / "node.log"
    log.write_text("earlier lines\n")
    code = (
        "import sys, threading, time\n"
        "from egomimic_nodes.spin import dump_stacks_on_sigusr1\n"
        f"dump_stacks_on_sigusr1({str(log)!r})\n"
        "threading.Thread(target=time.sleep, args=(30,), name='sleeper', daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGUSR1)
        deadline = time.time() + 10
        while time.time() < deadline and "time.sleep" not in log.read_text() and "<module>" not in log.read_text():
            time.sleep(0.02)
        text = log.read_text()
        assert text.startswith("earlier lines\n")
        assert text.count("hread 0x") >= 2 and "<module>" in text, text  # both threads, the main one at its sleep
        assert proc.poll() is None  # the dump does not end the process
    finally:
        proc.kill()
        proc.wait()
