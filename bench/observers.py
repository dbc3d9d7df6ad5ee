"""Recording and monitoring on, against off: does watching the robot slow it?

    .venv/bin/python bench/observers.py [--seconds 40] [--pairs 3] [--observers record,bag,viz,web]
                                        [--out out/bench/observers.json]

Runs the simulated graph in alternating pairs of runs, as `make run` does (synthetic cameras,
simulated arms, the default policy, auto_arm):
  1. off: the control graph alone;
  2. on: the same with the observers (default every one this project ships): the episode
     recorder (record:=true), the bag (bag:=true), rviz's nodes (viz:=true) and the web view
     (web:=true) with a live WebSocket client watching the three cameras and the gate's status,
     as a browser would. `--observers record` is recording alone (the recorder's acceptance).
For each it prints the control stream's figures from the launcher's own summary (the policy's
actions, the frames node's proposals and the left arm's joint commands: rate and worst gap, at
arrival and at the source) and
each process's CPU over the same window after start-up, then the ratios on/off and the CPU the
observers add. CPU shares are only comparable on an otherwise idle machine: the bench says the
load average it started at. Beside each run, tools/stall_probe.py (SCHED_FIFO 90) says whether the
machine itself stood still (or the hypervisor took a CPU away) under the action stream's worst gap:
such a gap is the host's, not the observers'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from egomimic_launch.process import cpu_percent, node_processes
from egomimic_nodes import topics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from soak import machine_stalls  # tools/ is not a package: the soak's own report line

REPO = Path(__file__).resolve().parents[1]
NS = "eva"
STREAMS = (
    topics.POLICY_ACTION.resolve(NS),
    topics.COMMAND_PROPOSED.resolve(NS),
    topics.JOINT_COMMAND.resolve(NS, arm="left"),
)
"""The command path hop by hop: the policy's actions, the frames node's proposals (hardware frame)
and the gate's joint commands to the left arm; a gap that appears at one hop and not at the one
before it was made there."""
OBSERVERS = {
    "record": (("record:=true",), {"recorder"}),
    "bag": (("bag:=true",), {"bag"}),
    "viz": (("viz:=true",), {"robot_state", "monitor"}),
    "web": (("web:=true", "web_port:=0"), {"webview", "robot_state", "monitor"}),  # web runs viz's nodes too
}
"""Each observer: its launch arguments and the processes it adds."""
CONTROL_NODES = 6
"""drivers x2, frames, cameras, gate, policy."""


class Viewer(threading.Thread):
    """A Foxglove-protocol WebSocket client subscribed to the cameras and the gate's status."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.messages, self.stop = url, 0, False

    def run(self) -> None:
        import websockets

        try:
            asyncio.run(self._watch())
        except websockets.ConnectionClosed:
            pass  # the graph stopped at the end of its run

    async def _watch(self) -> None:
        import websockets

        wanted = [topics.IMAGE_COMPRESSED.resolve(NS, cam=c) for c in ("front_1", "left_wrist", "right_wrist")]
        wanted.append(topics.SAFETY_STATUS.resolve(NS))
        async with websockets.connect(self.url, subprotocols=["foxglove.sdk.v1"], max_size=None) as ws:
            channels: dict[str, int] = {}
            while set(wanted) - set(channels):
                msg = await ws.recv()
                if isinstance(msg, str) and json.loads(msg)["op"] == "advertise":
                    channels.update({c["topic"]: c["id"] for c in json.loads(msg)["channels"]})
            subs = [{"id": i, "channelId": channels[t]} for i, t in enumerate(wanted, start=1)]
            await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
            while not self.stop:
                try:
                    msg = await asyncio.wait_for(ws.recv(), 1.0)
                except TimeoutError:
                    continue
                if isinstance(msg, bytes) and msg[0] == 1:  # a message (opcode 1), not a status
                    self.messages += 1


def run(observers: tuple[str, ...], seconds: float, settle_s: float, domain: int) -> dict:
    """One launcher run with `observers` (names of OBSERVERS; none: the control graph alone)."""
    env = dict(
        os.environ,
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_DOMAIN_ID=str(domain),
        FASTDDS_DEFAULT_PROFILES_FILE=str(REPO / "config" / "fastdds_local.xml"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        stalls_path = Path(tmp) / "stalls.json"
        probe = subprocess.Popen([sys.executable, str(REPO / "tools" / "stall_probe.py"), "--out", str(stalls_path)])
        extra = [arg for name in observers for arg in OBSERVERS[name][0]]
        extra += [f"record_dir:={tmp}/episodes", f"bag_dir:={tmp}/bags"] if observers else []
        cmd = [
            sys.executable, "-m", "egomimic_launch.cli", "eva_bimanual.launch.py", "auto_arm:=true", *extra,
            "--quiet", "--run-dir", str(Path(tmp) / "run"), "--summary", "--summary-json", str(summary),
            "--duration", str(settle_s + seconds + 5),
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        viewer = None
        try:
            launcher = psutil.Process(proc.pid)
            expected = CONTROL_NODES + len(set().union(*(OBSERVERS[name][1] for name in observers)))
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and len(node_processes(launcher)) < expected + 1:
                time.sleep(0.2)
            if "web" in observers:
                log = Path(tmp) / "run" / "logs" / "webview.log"
                while time.monotonic() < deadline:
                    m = log.exists() and re.search(r"web view: (ws://[\d.]+:\d+)", log.read_text())
                    if m:
                        viewer = Viewer(m.group(1))
                        viewer.start()
                        break
                    time.sleep(0.2)
            time.sleep(settle_s)  # start-up (imports, discovery, arming) is not the steady state
            cpu = cpu_percent(node_processes(launcher), seconds)
            proc.wait(settle_s + seconds + 120)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(60)
            if viewer is not None:
                viewer.stop = True
            probe.terminate()
            try:
                probe.wait(timeout=10)
            except subprocess.TimeoutExpired:
                probe.kill()
        data = json.loads(summary.read_text())
        try:
            stalls = json.loads(stalls_path.read_text())
        except (OSError, ValueError):  # the probe died or wrote nothing: machine_stalls says so
            stalls = None
    streams = {s["topic"]: s for s in data["streams"] if s["topic"] in STREAMS}
    holds = [state for _, state in data.get("gate_history", []) if state in ("HOLD", "ESTOP")]
    return {
        "cpu_pct": cpu,
        "streams": streams,
        "viewer_messages": viewer.messages if viewer else 0,
        "stalls": stalls,
        "holds": holds,
        "gate": data.get("gate"),
    }


RATE_TOLERANCE = 0.005
"""The rate counts as unchanged within 0.5 % (0.15 Hz at 30 Hz)."""


def verdict(both: list[tuple[dict, dict]]) -> str:
    """Whether recording and monitoring left a stream unchanged: its rate within RATE_TOLERANCE,
    and the median of its worst gaps with them on no longer than the longest of the runs without
    them, both at the source (the writer's DDS timestamps: what its consumer, the gate, gets
    apart from transport) and at arrival in the launcher (itself a process at normal priority).
    A worst gap is one run's maximum over about 1200 gaps: one pair says little, so the runs
    without observers give the spread that a change must exceed."""
    off, on = [so for so, _ in both], [sn for _, sn in both]
    rate = statistics.median(s["rate_hz"] for s in on) / statistics.median(s["rate_hz"] for s in off)
    parts = [f"rate {'unchanged' if abs(rate - 1) <= RATE_TOLERANCE else 'CHANGED'} ({rate:.3f}x)"]
    for key, where in (("max_source_gap_s", "source"), ("max_gap_s", "arrival")):
        med_on, top_off = statistics.median(s[key] for s in on) * 1e3, max(s[key] for s in off) * 1e3
        word = "unchanged" if med_on <= top_off else "LONGER"
        parts.append(f"worst gap at {where} {word} (median on {med_on:.1f} ms, longest off {top_off:.1f} ms)")
    return "; ".join(parts)


def _stream_line(topic: str, label: str, r: dict) -> str:
    s = r["streams"].get(topic)
    if s is None:
        return f"{topic:<28}{label:>8}   (not in the summary)"
    missed = f"   {s['missed']} never reached the launcher" if s.get("missed") else ""
    return (
        f"{topic:<28}{label:>8}{s['rate_hz']:>9.2f}{s['max_gap_s'] * 1e3:>8.1f}{s['max_source_gap_s'] * 1e3:>11.1f}"
        + missed
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="measurement window per run (default 40)")
    ap.add_argument("--settle", type=float, default=8.0, help="seconds after all nodes are up before measuring")
    ap.add_argument("--domain", type=int, default=98, help="ROS_DOMAIN_ID of the runs (default 98)")
    ap.add_argument(
        "--pairs",
        type=int,
        default=3,
        help="off/on pairs, alternating (default 3): a worst gap is one run's maximum, so one pair cannot tell "
        "a change from noise; the medians over the pairs are printed too",
    )
    ap.add_argument(
        "--observers",
        default=",".join(OBSERVERS),
        help=f"which observers the 'on' runs add, comma-separated from {', '.join(OBSERVERS)} (default all); "
        "record alone is the recorder's acceptance (recording on and off side by side)",
    )
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    a = ap.parse_args()
    observers = tuple(dict.fromkeys(o.strip() for o in a.observers.split(",") if o.strip()))
    unknown = [o for o in observers if o not in OBSERVERS]
    if unknown or not observers:
        ap.error(f"--observers: {', '.join(unknown) or 'none given'}; choose from {', '.join(OBSERVERS)}")
    load = os.getloadavg()[0]
    print(
        f"observers ({', '.join(observers)}) on vs off, {a.seconds:.0f} s window each, {a.pairs} pair(s), "
        f"{psutil.cpu_count()} cores, "
        f"load average {load:.2f}"
    )
    pairs = [
        (run((), a.seconds, a.settle, a.domain), run(observers, a.seconds, a.settle, a.domain)) for _ in range(a.pairs)
    ]
    print(f"{'stream':<28}{'':>8}{'rate Hz':>9}{'gap ms':>8}{'src gap ms':>11}")
    for topic in STREAMS:
        for i, (off, on) in enumerate(pairs, start=1):
            tag = f" {i}" if len(pairs) > 1 else ""
            print(_stream_line(topic, f"off{tag}", off))
            print(_stream_line(topic, f"on{tag}", on))
        both = [(off["streams"].get(topic), on["streams"].get(topic)) for off, on in pairs]
        both = [(so, sn) for so, sn in both if so and sn]
        if both:
            med = {
                side: {k: statistics.median(s[k] for s in sides) for k in ("rate_hz", "max_gap_s", "max_source_gap_s")}
                for side, sides in (("off", [so for so, _ in both]), ("on", [sn for _, sn in both]))
            }
            if len(both) > 1:
                for side in ("off", "on"):
                    m = med[side]
                    print(
                        f"{'':<28}{'med ' + side:>8}{m['rate_hz']:>9.2f}{m['max_gap_s'] * 1e3:>8.1f}"
                        f"{m['max_source_gap_s'] * 1e3:>11.1f}"
                    )
            mo, mn = med["off"], med["on"]
            print(
                f"{'':<28}{'on/off':>8}{mn['rate_hz'] / mo['rate_hz']:>9.3f}{mn['max_gap_s'] / mo['max_gap_s']:>8.2f}"
                f"{mn['max_source_gap_s'] / mo['max_source_gap_s']:>11.2f}"
            )
            print(f"{'':<28}{'':>8}{verdict(both)}")
    held = [
        (f"{tag} {i}", r) for i, pair in enumerate(pairs, start=1) for tag, r in zip(("off", "on"), pair) if r["holds"]
    ]
    print(
        "gate: no HOLD or ESTOP in any run"
        if not held
        else "gate HOLD/ESTOP in: "
        + "; ".join(f"{tag} ({', '.join(r['holds'])}; {(r['gate'] or {}).get('reasons')})" for tag, r in held)
    )
    deferring = [
        (f"{tag} {i}", r["gate"])
        for i, pair in enumerate(pairs, start=1)
        for tag, r in zip(("off", "on"), pair)
        if (r["gate"] or {}).get("deferred")
    ]
    print(
        "gate: no proposal deferred in any run"
        if not deferring
        else "gate deferred proposals (an input late: no joint command for that tick) in: "
        + "; ".join(f"{tag} ({g['deferred']}, the last: {g.get('last_deferral')})" for tag, g in deferring)
    )
    print("the machine under each run's worst policy/action gap (at the source):")
    for i, (off, on) in enumerate(pairs, start=1):
        for tag, r in ((f"off {i}", off), (f"on {i}", on)):
            worst = r["streams"].get(STREAMS[0], {})
            print(f" {tag}:" + machine_stalls(worst, r.get("stalls")).replace("\n", "\n      "))
    off, on = pairs[-1]
    names = sorted(set(off["cpu_pct"]) | set(on["cpu_pct"]), key=lambda n: -on["cpu_pct"].get(n, 0.0))
    print(f"{'process':<16}{'off %':>8}{'on %':>8}" + ("   (the last pair)" if len(pairs) > 1 else ""))
    for n in names:
        print(f"{n:<16}{off['cpu_pct'].get(n, 0.0):>8.1f}{on['cpu_pct'].get(n, 0.0):>8.1f}")
    t_off, t_on = sum(off["cpu_pct"].values()), sum(on["cpu_pct"].values())
    c_on = sum(on["cpu_pct"].get(n, 0.0) for n in off["cpu_pct"])
    print(f"{'total':<16}{t_off:>8.1f}{t_on:>8.1f}   on/off {t_on / t_off:.2f}")
    added = [sum(n["cpu_pct"].values()) - sum(f["cpu_pct"].values()) for f, n in pairs]
    print(
        f"the observers add {t_on - t_off:.1f} % of one core ({t_on - t_off - (c_on - t_off):.1f} in their own "
        f"processes, {c_on - t_off:+.1f} in the control graph's)"
        + (f"; over the pairs {', '.join(f'{x:.1f}' for x in added)}" if len(pairs) > 1 else "")
        + f"; the web client received {on['viewer_messages']} messages"
    )
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(
            json.dumps(
                {
                    "window_s": a.seconds,
                    "observers": list(observers),
                    "load_at_start": load,
                    "pairs": [{"off": f, "on": n} for f, n in pairs],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
