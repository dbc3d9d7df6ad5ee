"""Print the CPU share of each running EVA node process over a few seconds (diagnostics aid).

.venv/bin/python tools/cpu_by_node.py [seconds]
"""

import re
import sys
import time

import psutil


def main() -> None:
    window_s = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    procs = {}
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        m = re.search(r"__node:=(\S+)", cmd)
        if m or "egomimic-launch" in cmd:
            procs[p] = m.group(1) if m else "launcher"
    for p in procs:
        p.cpu_percent(None)
    time.sleep(window_s)
    rows = sorted(((p.cpu_percent(None), name) for p, name in procs.items()), reverse=True)
    for cpu, name in rows:
        print(f"{name:<22}{cpu:6.1f} %")
    print(f"{'total':<22}{sum(c for c, _ in rows):6.1f} %  (of {psutil.cpu_count()} cores x 100 %)")


if __name__ == "__main__":
    main()
