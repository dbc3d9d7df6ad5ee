"""Run a snippet in a child Python process: for helpers that change the process they run in
(priority, affinity, the garbage collector)."""

import subprocess
import sys


def run_python(code: str, timeout_s: float = 120.0, new_session: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s, start_new_session=new_session
    )


def lines_in_own_session(code: str, timeout_s: float = 60.0) -> list[str]:
    """Run `code` in a child alone in its session (so the test runner's autogroup, niceness and
    scheduling stay untouched); its output lines, after asserting it exited 0."""
    out = run_python(code, timeout_s, new_session=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()
