"""One node process: start, prefix its output, stop it politely then firmly.

Liveness never depends on logging. Each node writes into its own pipe, whose write end is
non-blocking and 1 MiB large: a node whose reader falls behind loses log lines, it never blocks
in a write (a blocked write once froze the safety gate's e-stop). The launcher reads every pipe
on its own thread that never stops reading: a line it cannot store (full disk, the per-node
size cap reached) or echo is dropped and counted, and reading goes on.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from egomimic_bringup.graph import NodeSpec
from egomimic_launch import dds_log


def stop_process_group(proc: subprocess.Popen, timeout_s: float = 5.0) -> int:
    """Stop a child started in a process group of its own: SIGINT (a node's clean shutdown: the driver
    holds, the gate latches), then SIGTERM, then SIGKILL, each to the whole process group."""
    for sig, wait_s in ((signal.SIGINT, timeout_s), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


AUTOGROUP_PATH = "/proc/self/autogroup"


class GraphAutogroup:
    """Give the launcher's session (its autogroup: every node runs in it) a niceness while the
    graph runs, and give the session its own niceness back after.

    Why one group for the graph: with CONFIG_SCHED_AUTOGROUP (Ubuntu's default, and the 2-core
    VM's) the kernel first shares the CPU between autogroups, one per session, and a thread's
    niceness only ranks it inside its group. With every node a session of its own (until
    2026-12-06), the tiers of spin.py ranked nothing inside the graph: the policy's model worker
    "at the stack tier" ran in the policy's group at -5, above the cameras' whole group at -2, and
    the recorder's writer thread alike. In one group the nodes' own niceness ranks them against
    each other as the tiers say, and the group's niceness ranks the graph against the rest of
    the machine (a browser, a training run, a CPU hog in another session). Measured on the
    2-core VM, make run's graph (trained policy, recording), 15 + 15 runs of 40 s alternated:
    camera stall reports median 108 against 138 with a group per node, worst stall median 168
    against 233 ms, 6 against 4 runs without a HOLD (README "Headroom": better, not enough).

    Lowering a group's niceness needs CAP_SYS_NICE, as the nodes' own; without it the session
    keeps its niceness and the log says so. A launcher killed with SIGKILL cannot give it back:
    the session (a terminal's shell, say) keeps -10 until it ends or `echo 0 > /proc/$$/autogroup`
    is run in it."""

    def __init__(self, path: str = AUTOGROUP_PATH):
        self.path = path
        self._before: int | None = None

    def raise_to(self, niceness: int) -> str:
        """Set the session's niceness; what it did, for the launcher's log ("" without autogroups)."""
        try:
            with open(self.path) as f:
                before = int(f.read().split()[-1])
            with open(self.path, "w") as f:
                f.write(str(int(niceness)))
        except FileNotFoundError:
            return ""  # a kernel without autogroups: each process's niceness is all there is
        except (OSError, ValueError, IndexError) as exc:
            return f"the graph's autogroup niceness unchanged ({getattr(exc, 'strerror', None) or exc})"
        self._before = before
        return f"the graph's autogroup (this session) at niceness {niceness} (was {before})"

    def restore(self) -> None:
        """Give the session back the niceness it had (best effort: the graph is down by then)."""
        if self._before is None:
            return
        try:
            with open(self.path, "w") as f:
                f.write(str(self._before))
        except OSError:
            pass
        self._before = None


LOG_CAP_BYTES = 20 * 1024 * 1024
"""Per-node log file cap; past it lines are dropped (and counted), the node keeps running."""
PIPE_SIZE_BYTES = 1024 * 1024
F_SETPIPE_SZ = 1031


def exit_text(code: int) -> str:
    """`code`, and for a death by signal its name: "-11 (SIGSEGV: a crash in native code; the
    node's log has every thread's Python stack)"."""
    if code >= 0:
        return str(code)
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return str(code)
    crash = name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")
    return f"{code} ({name}" + (
        ": a crash in native code; the node's log has every thread's Python stack)" if crash else ")"
    )


def nonblocking_pipe() -> tuple[int, int]:
    """(read fd, write fd): the write end never blocks (a full pipe fails the write: the node
    drops the line), and is as large as the system allows up to PIPE_SIZE_BYTES."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_SIZE_BYTES)
    except OSError:
        pass  # /proc/sys/fs/pipe-max-size is lower: the default 64 KiB still works
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    return r, w


def _routine_middleware_line(line: str) -> bool:
    """A Fast DDS warning every orderly run prints (dds_log.ROUTINE: rcl's /rosout history, the
    type and writer bookkeeping at exit): kept in the node's log, not shown on the console, where
    a `make run` showed dozens per node and hid the lines that matter."""
    if "Warning]" not in line:  # the cheap test first: most lines are the nodes' own
        return False
    parsed = dds_log.parse(line)
    return parsed is not None and dds_log.routine(*parsed)


def safe_print(line: str, err: bool = False) -> bool:
    """Print a launcher line (to stderr with `err`); False, never an exception, when the stream
    cannot take it (a full disk under a redirected output, a closed pipe)."""
    try:
        print(line, file=sys.stderr if err else sys.stdout, flush=True)
        return True
    except (OSError, ValueError):
        return False


def cpu_percent(procs: dict, seconds: float) -> dict[str, float]:
    """{name: CPU in % of one core} of `procs` ({name: psutil.Process}, e.g. node_processes())
    over the next `seconds` (user + system time; a process gone meanwhile is left out)."""

    def used(p) -> float:
        t = p.cpu_times()
        return t.user + t.system

    before = {n: used(p) for n, p in procs.items()}
    t0 = time.monotonic()
    time.sleep(seconds)  # the measurement window itself
    elapsed = time.monotonic() - t0
    return {n: 100.0 * (used(p) - before[n]) / elapsed for n, p in procs.items() if p.is_running()}


def node_processes(launcher) -> dict:
    """{node name: psutil.Process} of a running launcher (a psutil.Process) and the nodes it
    started, found by the `__node:=` remap that node_command puts on each command line; the
    launcher itself is "launcher". For tools that measure a live graph (bench/graph_cpu.py,
    tools/soak.py)."""
    import psutil

    procs = {"launcher": launcher}
    for child in launcher.children(recursive=True):
        try:
            name = next((a.split(":=", 1)[1] for a in child.cmdline() if a.startswith("__node:=")), None)
        except psutil.Error:
            continue
        if name:
            procs[name] = child
    return procs


def local_graph_nodes(names, namespace: str, domain: int) -> list[str]:
    """`/<namespace>/<name>` of the processes on this machine that run a node of `names` in
    `namespace` on ROS_DOMAIN_ID `domain` (read from their command line's `__node:=`/`__ns:=`
    remaps and their environment; a process without ROS_DOMAIN_ID is on domain 0). What DDS
    discovery says too, without waiting for it: on a busy machine a second launch once saw
    none of a running graph's nodes in 3 s, and discovery took up to 4.5 s in a loop of 12."""
    import psutil

    ns = "/" + namespace.strip("/")
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        args = proc.info.get("cmdline") or []
        if "--ros-args" not in args or proc.pid == os.getpid():
            continue
        remaps = dict(a.split(":=", 1) for a in args if a.startswith(("__node:=", "__ns:=")))
        name = remaps.get("__node")
        if name not in names or "/" + remaps.get("__ns", "/").strip("/") != ns:
            continue
        try:
            env_domain = int(proc.environ().get("ROS_DOMAIN_ID", "0") or 0)
        except (psutil.Error, ValueError):
            continue  # exited, or not ours to read: DDS discovery still looks
        if env_domain == domain:
            found.append(f"{ns.rstrip('/')}/{name}")
    return sorted(found)


def node_command(spec: NodeSpec, launch_params: Path) -> list[str]:
    cmd = [sys.executable, "-m", spec.module, "--ros-args", "-r", f"__node:={spec.name}"]
    if spec.namespace:
        cmd += ["-r", f"__ns:=/{spec.namespace}"]
    for f in spec.params_files:
        cmd += ["--params-file", f]
    cmd += ["--params-file", str(launch_params)]  # launch arguments win over the deployment YAML
    for f in spec.override_files:
        cmd += ["--params-file", f]  # the operator's params_file wins over everything
    if spec.enclave:
        cmd += ["--enclave", spec.enclave]  # security:=true (SROS2)
    return cmd


def node_environment(spec: NodeSpec, env: dict[str, str], log_file: Path | None = None) -> dict[str, str]:
    """A node's environment: the launcher's (the DDS settings of egomimic_launch.environment) and
    what the node reads at start: its launcher's pid (it exits when that dies: spin.py), its
    priority tier and its CPU list. The ROS 2 launch file sets the same (additional_env). With
    `log_file`, the file this launcher writes the node's output to: a node whose launcher died
    appends its last lines there itself (its output pipe died with the launcher)."""
    out = dict(env, EGOMIMIC_LAUNCHER_PID=str(os.getpid()), EGOMIMIC_PRIORITY=spec.priority, EGOMIMIC_CPUS=spec.cpus)
    if log_file is not None:
        out["EGOMIMIC_LOG_FILE"] = str(log_file)
    return out


class NodeProcess:
    def __init__(self, spec: NodeSpec, run_dir: Path, env: dict[str, str], echo: bool = True):
        self.spec = spec
        self.log_path = run_dir / "logs" / f"{spec.name}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        params = spec.write_launch_params(run_dir / "params")
        self.cmd = node_command(spec, params)
        self._echo = echo
        self.started_at = time.monotonic()
        self.exited_at: float | None = None
        self.lines = 0
        self.dropped_lines = 0
        """Lines the launcher could not store in the node's log file (disk full, size cap)."""
        self.log_error = ""
        self._log_bytes = 0
        try:
            self._log = open(self.log_path, "w", buffering=1)
        except OSError as exc:
            self._log, self.log_error = None, f"cannot open {self.log_path}: {exc}"
        r, w = nonblocking_pipe()
        try:
            self.proc = subprocess.Popen(
                self.cmd,
                env=node_environment(spec, env, self.log_path),
                stdin=subprocess.DEVNULL,
                stdout=w,
                stderr=w,
                # A process group of its own: a terminal's Ctrl-C reaches the launcher only, which
                # forwards it to the nodes in order. The launcher's session all the same: one
                # autogroup for the whole graph (GraphAutogroup), so the nodes' niceness ranks them
                # against each other, not each alone in a group of its own.
                process_group=0,
            )
        finally:
            os.close(w)
        self._out = os.fdopen(r, "rb", buffering=0)
        self._reader = threading.Thread(target=self._pump, name=f"out-{spec.name}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        """Read the node's output until it closes; never stop early (see module docstring)."""
        prefix = f"[{self.spec.name}] "
        pending = b""
        while True:
            try:
                chunk = self._out.read(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                self._emit(prefix, raw.decode(errors="replace").rstrip())
        if pending:
            self._emit(prefix, pending.decode(errors="replace").rstrip())
        self._out.close()
        if self._log is not None:
            if self.dropped_lines:
                self._store(f"[launch] {self.dropped_lines} line(s) of this log were dropped ({self.log_error})")
            try:
                self._log.close()
            except OSError:
                pass

    def _emit(self, prefix: str, line: str) -> None:
        self.lines += 1
        if not self._store(line):
            self.dropped_lines += 1
        if self._echo and not _routine_middleware_line(line):
            safe_print(prefix + line)

    def _store(self, line: str) -> bool:
        if self._log is None:
            return False
        if self._log_bytes + len(line) + 1 > LOG_CAP_BYTES:
            self.log_error = f"log capped at {LOG_CAP_BYTES} bytes"
            return False
        try:
            self._log.write(line + "\n")
        except (OSError, ValueError) as exc:
            self.log_error = f"log write failed: {exc}"
            return False
        self._log_bytes += len(line) + 1
        return True

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and self.exited_at is None:
            self.exited_at = time.monotonic()
        return code

    def stop(self, timeout_s: float = 5.0) -> int:
        """SIGINT, wait, then SIGTERM, then SIGKILL; returns the exit code."""
        code = stop_process_group(self.proc, timeout_s)
        self.poll()
        self._reader.join(timeout=2.0)
        return code

    @property
    def was_killed(self) -> bool:
        return self.proc.returncode is not None and self.proc.returncode < 0 and self.proc.returncode == -signal.SIGKILL
