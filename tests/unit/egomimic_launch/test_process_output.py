"""Liveness never depends on logging: a node writing far more than any pipe holds, while its log
file cannot take a byte (a full disk), neither blocks nor stops the launcher's reader."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from egomimic_bringup.graph import NodeSpec
from egomimic_launch.process import NodeProcess

CHATTY = """
import sys, time
lines, failed = 40000, 0
for i in range(lines):
    try:
        sys.stdout.write(f"line {i} " + "x" * 100 + "\\n")
        sys.stdout.flush()
    except BlockingIOError:
        failed += 1  # the pipe was full: the line is dropped, the node goes on
sys.stderr.write(f"done: {lines} lines, {failed} dropped by the node\\n")
"""


def test_a_node_never_blocks_on_a_full_disk_and_the_reader_never_stops(tmp_path):
    (tmp_path / "chatty.py").write_text(CHATTY)
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "chatty.log").symlink_to("/dev/full")  # every write: ENOSPC, like a full disk
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONUNBUFFERED="1")
    proc = NodeProcess(NodeSpec("chatty", "chatty", ""), run_dir, env, echo=False)
    t0 = time.monotonic()
    code = proc.proc.wait(timeout=60)
    elapsed = time.monotonic() - t0
    proc._reader.join(timeout=10)
    assert code == 0
    assert not proc._reader.is_alive(), "the reader thread did not reach the end of the output"
    assert proc.lines > 1000, proc.lines
    assert proc.dropped_lines == proc.lines, "every line met a full disk: each one must be counted as dropped"
    assert "log write failed" in proc.log_error
    print(f"4 MB of output in {elapsed:.2f} s; {proc.lines} lines read, {proc.dropped_lines} dropped on the full disk")


def test_the_node_side_of_the_pipe_does_not_block(tmp_path):
    """With nobody reading, a writer fills the pipe and then gets EAGAIN instead of blocking."""
    from egomimic_launch.process import nonblocking_pipe

    r, w = nonblocking_pipe()
    try:
        written = 0
        try:
            while True:
                written += os.write(w, b"x" * 4096)
        except BlockingIOError:
            pass
        assert written >= 64 * 1024
    finally:
        os.close(r)
        os.close(w)


def test_safe_print_survives_a_full_stdout():
    script = (
        "import sys; sys.stdout = open('/dev/full', 'w', buffering=1)\n"
        "from egomimic_launch.process import safe_print\n"
        "print('ok' if safe_print('x' * 10000) is False else 'raised?', file=sys.stderr)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert r.returncode == 0 and r.stderr.strip().endswith("ok"), r.stderr


def test_a_running_graph_node_on_this_machine_is_found_by_name_namespace_and_domain():
    """A second launch refuses at once when this machine already runs a node of its graph on its
    namespace and domain (egomimic_launch.process.local_graph_nodes), without waiting for DDS
    discovery; another namespace or domain is not its graph."""
    from egomimic_launch.process import local_graph_nodes

    code = "import sys; sys.stdin.read()"
    cmd = [sys.executable, "-c", code, "--ros-args", "-r", "__node:=frames", "-r", "__ns:=/eva_local_test"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, env=dict(os.environ, ROS_DOMAIN_ID="77"))
    try:
        deadline = time.monotonic() + 10
        found = []
        while time.monotonic() < deadline and not found:  # until the child's command line is readable
            found = local_graph_nodes({"frames", "cameras"}, "eva_local_test", 77)
            time.sleep(0.02)
        assert found == ["/eva_local_test/frames"]
        assert local_graph_nodes({"frames"}, "eva_local_test", 78) == []
        assert local_graph_nodes({"frames"}, "eva", 77) == []
        assert local_graph_nodes({"cameras"}, "eva_local_test", 77) == []
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_a_node_runs_in_the_launchers_session_and_leads_its_own_process_group(tmp_path):
    """One autogroup for the graph (process.GraphAutogroup): the node shares this process's
    session, so the nodes' niceness ranks them against each other; its own process group, so a
    terminal's Ctrl-C (sent to the launcher's group) reaches it only when the launcher forwards it."""
    (tmp_path / "where.py").write_text("import os\nprint('ids', os.getpid(), os.getsid(0), os.getpgid(0))\n")
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONUNBUFFERED="1")
    proc = NodeProcess(NodeSpec("where", "where", ""), run_dir, env, echo=False)
    assert proc.proc.wait(timeout=60) == 0
    proc._reader.join(timeout=10)
    line = next(x for x in (run_dir / "logs" / "where.log").read_text().splitlines() if "ids" in x)
    pid, sid, pgid = (int(v) for v in line.split()[-3:])
    assert pid == proc.proc.pid
    assert sid == os.getsid(0), "the node left the launcher's session: its niceness would rank it against nothing"
    assert pgid == pid and pgid != os.getpgid(0), "the node must lead a process group of its own"


def test_the_graph_autogroup_is_raised_while_the_graph_runs_and_given_back_after(tmp_path):
    from egomimic_launch.process import GraphAutogroup

    group = tmp_path / "autogroup"
    group.write_text("/autogroup-42 nice 0\n")
    autogroup = GraphAutogroup(str(group))
    said = autogroup.raise_to(-10)
    assert said == "the graph's autogroup (this session) at niceness -10 (was 0)", said
    assert group.read_text() == "-10"  # what the kernel reads back as "/autogroup-42 nice -10"
    autogroup.restore()
    assert group.read_text() == "0"
    autogroup.restore()  # a second restore (a teardown after a failed start) changes nothing
    assert group.read_text() == "0"


def test_without_autogroups_the_graph_autogroup_says_nothing_and_a_refusal_is_reported(tmp_path):
    from egomimic_launch.process import GraphAutogroup

    missing = GraphAutogroup(str(tmp_path / "missing"))
    assert missing.raise_to(-10) == ""
    missing.restore()  # nothing was changed: nothing to give back
    refused = GraphAutogroup(str(tmp_path))  # a directory: neither readable nor writable as a file
    said = refused.raise_to(-10)
    assert said.startswith("the graph's autogroup niceness unchanged"), said
