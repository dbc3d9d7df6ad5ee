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
        "hog = subprocess.Popen([sys.executable, '-c', f'import os\\nos.sched_setaffinity(0, {{{cpu}}})\\nwhile True: pass'])\n"
        "box = {}\n"
        "def sleeper():\n"
        "    box['stat'] = ThreadSchedStat.open(); box['start'] = box['stat'].waited_ns(); time.sleep(1.5)\n"
        "t = threading.Thread(target=sleeper); t.start()\n"
        "time.sleep(0.3)  # the hog's interpreter starting up\n"
        "stat = ThreadSchedStat.open()\n"
        "start = stat.waited_ns(); end = time.monotonic() + 1.0\n"
        "while time.monotonic() < end: pass\n"
        "spun = stat.waited_ns() - start\n"
        "hog.kill(); t.join()\n"
        "print(spun, box['stat'].waited_ns() - box['start'])\n"
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
