"""CPU affinity for robot PCs: which cores a node may run on.

A robot PC keeps cores free for the control path (`isolcpus=`, or a cpuset): the launcher's
`control_cpus` / `stack_cpus` arguments name them, and each node pins itself at start-up
(spin.run_node) from EGOMIMIC_CPUS. ROS-free, so the graph definition can validate the
arguments without starting anything.
"""

from __future__ import annotations

import os

CPUS_ENV = "EGOMIMIC_CPUS"
"""A Linux CPU list ("2", "2-3", "0,2-3"): the node runs on those CPUs only; set by the launcher
(graph.NodeSpec.cpus) from the `control_cpus` / `stack_cpus` launch arguments. Empty: no pinning."""


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a Linux CPU list ("0", "2-3", "0,2-3"); ValueError, with what is wrong, on
    anything else (an empty list, a reversed range, a negative or non-numeric entry)."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        first, sep, last = part.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list (e.g. 2, 2-3 or 0,2-3): bad entry {part!r}")
        low, high = int(first), int(last) if sep else int(first)
        if high < low:
            raise ValueError(f"{text!r} is not a CPU list: range {part!r} runs backwards")
        cpus.update(range(low, high + 1))
    return cpus


def online_cpus() -> set[int]:
    """The CPUs the kernel has online (isolated ones included, which a process's own affinity
    mask leaves out under `isolcpus`)."""
    try:
        with open("/sys/devices/system/cpu/online") as f:
            return parse_cpu_list(f.read().strip())
    except (OSError, ValueError):
        return set(range(os.cpu_count() or 1))


def online_cpu_list(text: str) -> set[int]:
    """parse_cpu_list(text), and ValueError when one of its CPUs is not online here."""
    cpus = parse_cpu_list(text)
    missing = cpus - online_cpus()
    if missing:
        raise ValueError(f"{text!r} names CPUs {sorted(missing)} that are not online (online: {sorted(online_cpus())})")
    return cpus


def pin_cpus(text: str) -> str:
    """Restrict this process to the CPUs of `text` (a CPU list) and say so, for the start log.
    Called before rclpy starts its threads, so the DDS threads inherit the mask. Raises
    ValueError or OSError with the reason when that is impossible: a node that was asked to run
    on given cores does not silently run elsewhere."""
    cpus = online_cpu_list(text)
    for tid in os.listdir("/proc/self/task"):  # every thread there is; later ones inherit the mask
        os.sched_setaffinity(int(tid), cpus)
    return f"CPUs {sorted(os.sched_getaffinity(0))}"
