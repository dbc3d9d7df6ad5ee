"""A loop that stops past its threshold gets every thread's stack in its log, while it is still
stopped (faulthandler's C watchdog, no GIL needed); one that keeps re-arming gets nothing."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import time
from egomimic_nodes.stall_dump import StallDump
dump = StallDump({threshold})
for _ in range(20):  # a loop that keeps its pace: 20 passes of 10 ms
    dump.arm()
    time.sleep(0.01)
dump.arm()
print("stalling", flush=True)
{stall}
dump.close()
print("done", flush=True)
"""


def _run(stall: str) -> subprocess.CompletedProcess:
    code = SCRIPT.format(threshold=0.1, stall=stall)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)


def test_a_stalled_loop_prints_every_threads_stack_once():
    out = _run("time.sleep(0.5)  # blocked, far past 0.1 s")
    assert "done" in out.stdout
    assert out.stderr.count("Timeout (") == 1, out.stderr
    assert "most recent call first" in out.stderr and "<string>" in out.stderr, out.stderr


def test_a_loop_that_keeps_its_pace_prints_nothing():
    out = _run("pass")
    assert "done" in out.stdout and "Timeout" not in out.stderr, out.stderr
