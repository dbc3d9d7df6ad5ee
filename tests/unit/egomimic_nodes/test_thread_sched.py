"""egomimic_nodes.thread_sched: a thread's run-queue wait, which tells a starved thread from one that slept."""

from .child import run_python


def test_a_thread_sharing_its_cpu_with_a_hog_waits_and_a_sleeping_one_does_not():
    """In a child process: a thread that spins on one CPU beside a busy process pinned to the same
    CPU waits on the run queue for a large part of the time; a thread that sleeps meanwhile
    does not, and its figures stay its own when another thread reads them."""
    code = (
        "import os, subprocess, sys, threading, time\n"
        "from egomimic_nodes.thread_sched import ThreadSchedStat\n"
        "cpu = min(os.sched_getaffinity(0))\n"
        "os.sched_setaffinity(0, {cpu})\n"
        "spin = f'import os\\nos.sched_setaffinity(0, {{{cpu}}})\\nprint(1, flush=True)\\nwhile True: pass'\n"
        "hog = subprocess.Popen([sys.executable, '-c', spin], stdout=subprocess.PIPE)\n"
        "hog.stdout.readline()  # it spins on our CPU from here on\n"
        "box, ready, release = {}, threading.Event(), threading.Event()\n"
        "def sleeper():\n"
        "    box['stat'] = ThreadSchedStat.open(); box['start'] = box['stat'].waited_ns(); ready.set(); release.wait()\n"
        "t = threading.Thread(target=sleeper); t.start(); ready.wait()\n"
        "stat = ThreadSchedStat.open()\n"
        "start = stat.waited_ns(); end = time.monotonic() + 1.0\n"
        "while time.monotonic() < end: pass\n"
        "spun = stat.waited_ns() - start\n"
        "slept = box['stat'].waited_ns() - box['start']  # read here, while the sleeper still waits\n"
        "release.set(); hog.kill(); t.join()\n"
        "print(spun, slept)\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    spun_ns, slept_ns = (int(x) for x in out.stdout.split())
    assert spun_ns > 200_000_000, spun_ns  # a fair share is half of the 1 s
    assert slept_ns < spun_ns / 4, (slept_ns, spun_ns)


def test_open_gives_none_where_the_figures_are_missing(monkeypatch):
    import os

    from egomimic_nodes.thread_sched import ThreadSchedStat

    def missing(*args, **kwargs):
        raise FileNotFoundError("no schedstat")

    monkeypatch.setattr(os, "open", missing)
    assert ThreadSchedStat.open() is None
