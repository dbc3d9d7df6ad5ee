"""A loop that stops past its threshold gets every thread's stack in its log, while it is still
stopped (a kernel timer whose signal faulthandler's C handler answers, no GIL needed); one that keeps
re-arming gets nothing, and re-arming starts no thread."""

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
    assert out.stderr.count("most recent call first") == 1, out.stderr  # one thread, one dump
    assert "<string>" in out.stderr, out.stderr


def test_a_loop_that_keeps_its_pace_prints_nothing():
    out = _run("pass")
    assert "done" in out.stdout and "most recent call first" not in out.stderr, out.stderr


def test_re_arming_starts_no_thread():
    """faulthandler.dump_traceback_later started a thread per pass and joined the last one with
    the GIL held: a control tick waited for that thread to be scheduled (perf sched)."""
    code = (
        "import threading\nfrom egomimic_nodes.stall_dump import StallDump\n"
        "d = StallDump(0.5)\nfor _ in range(50):\n    d.arm()\n"
        "import os\nprint(len(os.listdir('/proc/self/task')), threading.active_count())\nd.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == ["1", "1"], out.stdout + out.stderr
