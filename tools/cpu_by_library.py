"""Where the running EVA nodes' CPU goes: per node, per thread and per library, from `perf`.

    .venv/bin/python tools/cpu_by_library.py [--seconds 10] [--top 6]

Samples every CPU with `perf record -a` (499 Hz, no call graphs) while the graph runs, maps each
sampled thread to its node through /proc (`__node:=` on the command line; the launcher by its
module), and prints, in % of one core: each node's total with its busiest libraries
(libpython3.11 is the interpreter itself: Python bytecode; _jpeg, libc's memmove, libfastdds,
the kernel), then the busiest threads.

Why not cProfile (spin.PROFILE_ENV): its deterministic tracing charges every Python call, so
small calls look many times their cost (a CameraHealth deserialization: 17 us measured alone,
~430 us per call in the gate's profile), and it sees neither native code nor the middleware's
threads. perf sees everything but names no Python function; py-spy (`py-spy record --native`)
does, for one process at a time.

Needs `perf` on PATH and permission to sample every CPU (root, or kernel.perf_event_paranoid
<= -1). Run it beside a graph (`make run`, or egomimic-launch ... --duration 60).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

REPORT_LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+):(\S+)\s+(\S+)")
"""A line of `perf report --sort pid,dso --stdio -g none`: share, tid:comm, library."""


def short_name(library: str) -> str:
    """`_multiarray_umath.cpython-311-x86_64-linux-gnu.so` -> `_multiarray_umath`."""
    return re.sub(r"\.(cpython-|so\b).*$", "", library.rsplit("/", 1)[-1])


def thread_owners() -> dict[int, tuple[str, str]]:
    """{tid: (node, thread name)} for every thread of the running EVA processes."""
    owners: dict[int, tuple[str, str]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        m = re.search(r"__node:=(\S+)", cmd)
        node = m.group(1) if m else ("launcher" if "egomimic_launch.cli" in cmd or "egomimic-launch" in cmd else "")
        if not node:
            continue
        try:
            tasks = list((proc / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                name = (task / "comm").read_text().strip()
            except OSError:
                name = "?"
            owners[int(task.name)] = (node, name)
    return owners


def attribute(report: str, owners: dict[int, tuple[str, str]], cores: int) -> tuple[dict, Counter]:
    """Per node: (total, Counter of libraries); per (node, tid, thread): total. In % of one
    core: perf's shares are of all samples, every CPU's, idle included."""
    nodes: dict[str, Counter] = defaultdict(Counter)
    threads: Counter = Counter()
    for line in report.splitlines():
        m = REPORT_LINE.match(line)
        if not m:
            continue
        share, tid, comm, library = float(m.group(1)) * cores, int(m.group(2)), m.group(3), m.group(4)
        node, name = owners.get(tid, ("", comm))
        if not node:
            node = "idle" if tid == 0 else f"other ({comm})"
        nodes[node][library] += share
        threads[(node, tid, name)] += share
    return dict(nodes), threads


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="sampling window (default 10)")
    ap.add_argument("--top", type=int, default=6, help="libraries per node, and threads x 2, to list")
    a = ap.parse_args()
    if shutil.which("perf") is None:
        print("cpu_by_library: `perf` is not on PATH (linux-tools)", file=sys.stderr)
        return 2
    owners = thread_owners()
    if not owners:
        print("cpu_by_library: no EVA node is running (start a graph first)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        rec = subprocess.run(
            ["perf", "record", "-a", "-F", "499", "-o", data, "--", "sleep", str(a.seconds)],
            capture_output=True,
            text=True,
        )
        if rec.returncode != 0:
            print(f"cpu_by_library: perf record failed: {rec.stderr.strip()[-400:]}", file=sys.stderr)
            return 2
        owners.update(thread_owners())  # threads started during the window
        report = subprocess.run(
            ["perf", "report", "-i", data, "--sort", "pid,dso", "--stdio", "-g", "none"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    nodes, threads = attribute(report, owners, os.cpu_count() or 1)
    print(f"CPU by node and library over {a.seconds:.0f} s (% of one core; {os.cpu_count()} cores)")
    for node, libs in sorted(nodes.items(), key=lambda kv: -sum(kv[1].values())):
        if sum(libs.values()) < 0.1:
            continue
        top = ", ".join(f"{short_name(lib)} {pct:.1f}" for lib, pct in libs.most_common(a.top))
        print(f"  {node:<22}{sum(libs.values()):6.1f}   {top}")
    print("busiest threads:")
    for (node, tid, name), pct in threads.most_common(2 * a.top):
        print(f"  {pct:6.1f}  {node} / {name} ({tid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
