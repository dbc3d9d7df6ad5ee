"""Fast DDS's own warnings, read back from the nodes' logs: the middleware's side of a run.

Why: the failures that are hardest to see from ROS are silent in Fast DDS's default setting
(errors only): a shared-memory port judged unhealthy and regenerated (its old listener then
hears no later writer), a zombie port, a segment too small. The nodes turn warnings on
(egomimic_nodes.spin.middleware_warnings), so each leaves a line in the node's log; this module
counts them per node, without the ones every orderly run prints at start or exit. A node with
several raw image subscriptions stays at errors (spin.quiet_middleware_for_images): its port
warnings are not counted here.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINE = re.compile(r"\[(?P<category>[A-Z_0-9]+) (?P<kind>Warning|Error)\] (?P<text>.*?)(?: -> Function \S+)?$")
ROUTINE = (
    ("RTPS_QOS_CHECK", "HISTORY DEPTH '1000' is inconsistent"),
    ("PARTICIPANT", "is in use"),
    ("RTPS_READER", "Automatically unmatching on ~WriterProxy"),
)
"""(category, text) pairs every orderly run prints: rcl's /rosout writer asks for a history of
1000 (Fast DDS caps it at its 400 samples per instance), and at exit rmw unregisters types and
unmatches writers in an order Fast DDS comments on."""
ALARMS = ("healthy", "zombie", "port dropped", "listener queue", "max listeners", "listener on port", " error:")
"""Words (lower case) of the messages that mean a lost or deaf shared-memory port ("Port N NOT
Healthy.", "healthy_check failed", "Zombie. Reset the port", "inconsistent. Port dropped",
"Failed to open listener queue", "max listeners reached", "SHM Listener on port N failure":
strings of libfastdds 3.2) or any
Fast DDS error: the first things to look at when a node never hears another."""


def parse(line: str) -> tuple[str, str] | None:
    """(category + kind, text) of one Fast DDS log line, or None for any other line."""
    m = _LINE.search(_ANSI.sub("", line).rstrip())
    if not m:
        return None
    return f"{m['category']} {m['kind']}", m["text"].strip()


def routine(category: str, text: str) -> bool:
    return any(category.startswith(c) and t in text for c, t in ROUTINE)


def middleware_warnings(log_dir: Path) -> dict[str, Counter]:
    """Node -> Counter of '<CATEGORY Kind>: text' for the Fast DDS warnings and errors in
    `log_dir`/<node>.log, the routine ones left out; nodes without any are absent."""
    out: dict[str, Counter] = {}
    for path in sorted(Path(log_dir).glob("*.log")):
        seen: Counter = Counter()
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            parsed = parse(line)
            if parsed and not routine(*parsed):
                seen[f"{parsed[0]}: {parsed[1]}"] += 1
        if seen:
            out[path.stem] = seen
    return out


def describe(warnings: dict[str, Counter]) -> str:
    """One line: per node, its count and distinct messages (shortened)."""
    parts = []
    for node, seen in warnings.items():
        texts = "; ".join(f"{n}x {msg[:90]}" for msg, n in seen.most_common(3))
        parts.append(f"{node} {sum(seen.values())} ({texts})")
    return ", ".join(parts)


def alarming(warnings: dict[str, Counter]) -> dict[str, Counter]:
    """The subset that names a lost or deaf port (ALARMS)."""
    out = {}
    for node, seen in warnings.items():
        hits = Counter({m: n for m, n in seen.items() if any(a in m.lower() for a in ALARMS)})
        if hits:
            out[node] = hits
    return out
