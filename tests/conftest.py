"""Test environment: DDS never leaves the machine, each xdist worker gets its own domain,
ROS logs go to a temp dir, and the shipped Fast DDS profile is used (as in production)."""

import os
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOMAIN_BASE = int(os.environ.get("EGOMIMIC_TEST_DOMAIN_BASE", "60"))
"""Override when several suites run on one machine at once (each needs its own domains)."""


def _hypothesis_profiles() -> None:
    """`dev` (default): random examples, so every local run explores new inputs. `ci`
    (HYPOTHESIS_PROFILE=ci, set by .ci/run): derandomized, so a landing is judged on the same
    examples every time; new inputs are explored by local runs and `make test-properties`."""
    from hypothesis import settings

    settings.register_profile("dev", print_blob=True)
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


_hypothesis_profiles()


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["ROS_DOMAIN_ID"] = str(DOMAIN_BASE + index)
    os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(REPO_ROOT / "config" / "fastdds_local.xml"))
    os.environ["ROS_LOG_DIR"] = tempfile.mkdtemp(prefix="egomimic-test-roslog-")
    os.environ["PYTHONUNBUFFERED"] = "1"


def _own_domains() -> tuple[int, ...]:
    """The DDS domain this pytest process runs its graphs on: the only ports its clean-ups judge
    (egomimic_launch.shm: another suite's dead ports may still be mapped by that suite's writers)."""
    return (int(os.environ["ROS_DOMAIN_ID"]),)


def pytest_sessionfinish(session, exitstatus):
    """Remove the Fast DDS shared memory of node processes the tests had to kill."""
    from egomimic_launch.shm import remove_stale

    remove_stale(domains=_own_domains())


@pytest.fixture(scope="module", autouse=True)
def no_stale_shared_memory(request):
    """Fast DDS files left by processes an earlier module killed, removed before each module's
    own fixtures start a graph (an autouse fixture runs before the other fixtures of its scope):
    a participant that reuses a stale port gets ~333 ms delivery pauses. Between modules, because
    removing files while a participant starts orphans its port (egomimic_launch.shm); the
    launcher cleans at its own start too."""
    from egomimic_launch.shm import remove_stale

    done = remove_stale(domains=_own_domains())
    _SHM_CLEANUPS.append((request.module.__name__, done, [_who(pid) for pid in done.users[:3]]))
    assert not done.orphaned, f"a process started while stale Fast DDS files were removed: {done.orphaned}"


_SHM_CLEANUPS: list = []
"""(module, egomimic_launch.shm.Cleanup, who used DDS) per test module, summed up at the end of the session."""


def _who(pid: int) -> str:
    """`pid (its command line)`, or `pid (this pytest)`."""
    if pid == os.getpid():
        return f"{pid} (this pytest)"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "exited"
    return f"{pid} ({cmd[:80]})"


def pytest_terminal_summary(terminalreporter):
    """How the stale shared-memory clean-ups went: which modules started beside live participants
    (this pytest's own probe node, or a process of an earlier module left running)."""
    if not _SHM_CLEANUPS:
        return
    removed = sum(len(d.removed) for _, d, _ in _SHM_CLEANUPS)
    beside = [(m, who) for m, d, who in _SHM_CLEANUPS if d.busy]
    unreadable = [m for m, d, _ in _SHM_CLEANUPS if d.unreadable]
    line = f"Fast DDS shared memory: {len(_SHM_CLEANUPS)} module start(s), {removed} stale file(s) removed"
    if beside:
        shown = "; ".join(f"{m} ({', '.join(who)})" for m, who in beside[:5])
        line += f", {len(beside)} started beside live participants (their files kept): {shown}"
    if unreadable:
        line += f", {len(unreadable)} skipped (/proc/locks unreadable)"
    terminalreporter.write_line(line)


TEST_HANG_S = float(os.environ.get("EGOMIMIC_TEST_HANG_S", "900"))
"""A test still running after this long is hung: all threads' stacks are printed and the
session exits (faulthandler's watchdog is a C thread, so it fires even while a native call holds
the GIL). Why: Fast DDS 3.2 can deadlock a participant's event thread against a receive thread
(eProsima/Fast-DDS#6502: ResourceEvent::unregister_timer vs the PDP mutex; seen once in the fault
rig's teardown, fc21); without this a CI run would wait for its 90-minute limit. The longest
test (the launcher SIGKILL battery row, 3 trials) takes about 4 minutes on 2 cores."""


HANG_REPORT = REPO_ROOT / "out" / "test-hang.txt"
"""Where the watchdog writes the hung test's name and every thread's stack (pytest captures
stderr, and a forced exit loses the capture); `make test` prints it when the suite fails."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of each test under the hang watchdog."""
    import faulthandler

    HANG_REPORT.parent.mkdir(parents=True, exist_ok=True)
    with open(HANG_REPORT, "w") as report:
        report.write(
            f"HUNG for more than {TEST_HANG_S:.0f} s: {item.nodeid} (the session was ended; "
            f"every thread's stack follows)\n"
        )
        report.flush()
        faulthandler.dump_traceback_later(TEST_HANG_S, exit=True, file=report)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
    HANG_REPORT.unlink(missing_ok=True)
