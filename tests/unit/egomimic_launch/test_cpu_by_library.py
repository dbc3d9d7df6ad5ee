"""tools/cpu_by_library.py: perf's per-thread shares attributed to nodes and libraries."""

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("cpu_by_library", REPO / "tools" / "cpu_by_library.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

REPORT = """\
# Overhead      Pid:Command     Shared Object
#
    10.00%        0:swapper        [kernel.kallsyms]
     5.00%      101:python         libpython3.11.so.1.0
     2.50%      101:python         _jpeg.cpython-311-x86_64-linux-gnu.so
     1.25%      102:dds.shm.7000   libfastdds.so.3.2
     0.50%      999:bash           libc.so.6
"""


def test_shares_go_to_their_node_and_library_in_percent_of_one_core():
    owners = {101: ("cameras", "python"), 102: ("cameras", "dds.shm.7000")}
    nodes, threads = tool.attribute(REPORT, owners, cores=2)
    assert nodes["cameras"] == {
        "libpython3.11.so.1.0": 10.0,
        "_jpeg.cpython-311-x86_64-linux-gnu.so": 5.0,
        "libfastdds.so.3.2": 2.5,
    }
    assert nodes["idle"]["[kernel.kallsyms]"] == 20.0 and nodes["other (bash)"]["libc.so.6"] == 1.0
    assert threads[("cameras", 101, "python")] == 15.0 and threads[("cameras", 102, "dds.shm.7000")] == 2.5


def test_library_names_are_shortened_to_their_module():
    assert tool.short_name("_multiarray_umath.cpython-311-x86_64-linux-gnu.so") == "_multiarray_umath"
    assert tool.short_name("libpython3.11.so.1.0") == "libpython3.11"
    assert tool.short_name("[kernel.kallsyms]") == "[kernel.kallsyms]"


def test_threads_of_a_running_node_are_found_by_its_node_name():
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code, "--ros-args", "-r", "__node:=probe_node"])
    try:
        deadline = time.monotonic() + 10
        found = {}
        while time.monotonic() < deadline:
            found = {tid: owner for tid, owner in tool.thread_owners().items() if owner[0] == "probe_node"}
            if len(found) >= 2:
                break
            time.sleep(0.05)
        assert proc.pid in found and len(found) >= 2, found  # the main thread and the sleeper
    finally:
        proc.kill()
        proc.wait()
