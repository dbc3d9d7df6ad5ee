"""One node process: start, prefix its output, stop it politely then firmly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from egomimic_bringup.graph import NodeSpec


def stop_process_group(proc: subprocess.Popen, timeout_s: float = 5.0) -> int:
    """Stop a child started in its own session: SIGINT (a node's clean shutdown: the driver
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


def write_params_file(spec: NodeSpec, directory: Path) -> Path:
    """The launch-time parameters of one node as a ROS params file (what launch_ros does)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{spec.name}.yaml"
    fqn = f"/{spec.namespace}/{spec.name}" if spec.namespace else f"/{spec.name}"
    path.write_text(yaml.safe_dump({fqn: {"ros__parameters": dict(spec.parameters)}}, sort_keys=True))
    return path


def node_command(spec: NodeSpec, launch_params: Path) -> list[str]:
    cmd = [sys.executable, "-m", spec.module, "--ros-args", "-r", f"__node:={spec.name}"]
    if spec.namespace:
        cmd += ["-r", f"__ns:=/{spec.namespace}"]
    for f in spec.params_files:
        cmd += ["--params-file", f]
    cmd += ["--params-file", str(launch_params)]  # launch arguments win over the YAML defaults
    return cmd


class NodeProcess:
    def __init__(self, spec: NodeSpec, run_dir: Path, env: dict[str, str], echo: bool = True):
        self.spec = spec
        self.log_path = run_dir / "logs" / f"{spec.name}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        params = write_params_file(spec, run_dir / "params")
        self.cmd = node_command(spec, params)
        self._echo = echo
        self.started_at = time.monotonic()
        self.exited_at: float | None = None
        self._log = open(self.log_path, "w", buffering=1)
        self.proc = subprocess.Popen(
            self.cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,  # our SIGINT reaches it only when we forward it, in order
        )
        self._reader = threading.Thread(target=self._pump, name=f"out-{spec.name}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        prefix = f"[{self.spec.name}] "
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip()
            self._log.write(line + "\n")
            if self._echo:
                print(prefix + line, flush=True)
        self._log.close()

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
