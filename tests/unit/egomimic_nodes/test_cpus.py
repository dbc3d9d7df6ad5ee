"""egomimic_nodes.cpus: pinning a node's process to the CPUs it was given."""

from .child import run_python


def test_pin_cpus_moves_every_thread_of_the_process():
    """In a child process: a thread started before pinning is moved too, and one started after inherits it."""
    code = (
        "import os, threading, time\n"
        "from egomimic_nodes.cpus import pin_cpus\n"
        "stop = threading.Event()\n"
        "early = threading.Thread(target=stop.wait); early.start()\n"
        "print(pin_cpus('0'))\n"
        "late = threading.Thread(target=stop.wait); late.start()\n"
        "for tid in sorted(os.listdir('/proc/self/task')):\n"
        "    print(tid, sorted(os.sched_getaffinity(int(tid))))\n"
        "stop.set()\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "CPUs [0]"
    assert len(lines[1:]) == 3 and all(line.endswith("[0]") for line in lines[1:]), lines
