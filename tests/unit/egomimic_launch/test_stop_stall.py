"""The launcher's stop-stall dump (egomimic_launch.cli.StopStallDump): a stop that takes too
long leaves every thread's stack in the run directory; one that ends in time leaves nothing.
In a child process: faulthandler has one watchdog per process, and pytest's hang guard uses it."""

import subprocess
import sys

CODE = """
import sys, time
from pathlib import Path
from egomimic_launch.cli import StopStallDump
path = Path(sys.argv[1])
dump = StopStallDump(path, after_s=float(sys.argv[2]))
deadline = time.monotonic() + 10
while float(sys.argv[2]) < 1 and time.monotonic() < deadline and not (path.exists() and path.stat().st_size):
    time.sleep(0.02)  # the "stuck" stop: until the watchdog has written
dump.close()
print(path.exists())
"""


def run(tmp_path, after_s: float):
    path = tmp_path / "launcher_stop_stall.txt"
    out = subprocess.run(
        [sys.executable, "-c", CODE, str(path), str(after_s)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), path


def test_a_stop_that_ends_in_time_leaves_no_file(tmp_path):
    exists, path = run(tmp_path, 30.0)
    assert exists == "False" and not path.exists()


def test_a_stuck_stop_leaves_every_threads_stack(tmp_path):
    exists, path = run(tmp_path, 0.1)
    assert exists == "True", path
    text = path.read_text()
    assert "Thread" in text and "<string>" in text, text
