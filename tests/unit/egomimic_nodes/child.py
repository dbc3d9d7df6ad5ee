"""Run a snippet in a child Python process: for helpers that change the process they run in
(priority, affinity, the garbage collector)."""

import subprocess
import sys


def run_python(code: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
