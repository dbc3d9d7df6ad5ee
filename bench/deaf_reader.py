"""A writer stopped inside a reader's shared-memory port lock: how often does the reader go deaf
to every other writer? Measured against the physical limit (0: the other writer never stops).

What: a reader process (the role of the safety gate) takes /bench/state from a state writer
(the role of a driver) and /bench/cmd at 30 Hz from a command writer (the role of the policy).
The state writer is SIGSTOPped for STOP_S, --stops times, at random phases, with --load busy
processes beside; once at 100 Hz (a driver's joint states) and once at 1 kHz (ten times the
chance to stop it inside the lock). Per stop the bench takes the longest gap in the reader's
/bench/cmd arrivals inside the stop window: a gap over DEAF_MS means the reader heard nothing
from a writer that was running.
Why: pushing a sample into a port takes that port's interprocess mutex (Fast DDS
SharedMemGlobal::Port::try_push), and so does the port's listener when it waits for the next
sample. A process stopped while it holds a reader's port mutex (SIGSTOP, a debugger) stops that
reader's every input until it runs again: a CI run saw the gate HOLD for "no command for 302
ms" the moment the fault battery froze a driver. No transport setting avoids it here: with
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, rmw_fastrtps adds its own shared-memory transport to
every participant, whatever the profile says (a UDP-only profile was tried: the process still
mapped fastdds_port files).
Every process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST on its own ROS_DOMAIN_ID
(--domain, +1 per rate) and the project's profile; nothing leaves loopback.
Run: `.venv/bin/python bench/deaf_reader.py [--stops 200] [--load 1] [--domain 91] [--rates 1000]
[--stops-as plain|quiet|both]`. Quiet stops are the fault rig's (tests/faults/freeze.py): the
writer stopped only when none of its threads runs user code, so never inside a port's lock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from sigstop import end_all, local_dds_env, longest_gaps_ms, stop_repeatedly

RATES_HZ = (100.0, 1000.0)
STOP_S = 0.4
DEAF_MS = 150.0
CMD_HZ = 30.0


def writer(topic: str, rate_hz: float) -> None:
    import rclpy
    from sensor_msgs.msg import JointState

    rclpy.init()
    node = rclpy.create_node(f"bench_deaf_writer_{topic}")
    pub = node.create_publisher(JointState, f"/bench/{topic}", 10)
    msg = JointState(name=[f"joint{i}" for i in range(7)], position=[0.0] * 7, velocity=[0.0] * 7, effort=[0.0] * 7)
    period = 1.0 / rate_hz
    nxt = time.monotonic()
    try:
        while rclpy.ok():
            pub.publish(msg)
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))
    except KeyboardInterrupt:
        pass
    except Exception:  # SIGTERM at the end: rclpy's handler shut the context down under publish()
        if rclpy.ok():
            raise


def reader(seconds: float, out: Path) -> None:
    import rclpy
    from sensor_msgs.msg import JointState

    rclpy.init()
    node = rclpy.create_node("bench_deaf_reader")
    arrivals = {"cmd": [], "state": []}
    for topic in arrivals:
        node.create_subscription(JointState, f"/bench/{topic}", lambda _m, t=topic: arrivals[t].append(time.time()), 10)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    out.write_text(json.dumps(arrivals))
    node.destroy_node()
    rclpy.try_shutdown()


def run(stops: int, rate: float, domain: int, tmp: Path, quiet: bool) -> dict:
    shm_env = local_dds_env(domain)
    mode = f"{rate:.0f} Hz, {'quiet' if quiet else 'plain'} stops"
    out = tmp / f"{rate:.0f}-{quiet}.json"
    seconds = 8.0 + stops * (STOP_S + 0.35)
    me = [sys.executable, __file__]
    rd = subprocess.Popen([*me, "--role", "reader", "--seconds", str(seconds), "--out", str(out)], env=shm_env)
    cmd = subprocess.Popen([*me, "--role", "writer", "--topic", "cmd", "--rate", str(CMD_HZ)], env=shm_env)
    state = subprocess.Popen([*me, "--role", "writer", "--topic", "state", "--rate", str(rate)], env=shm_env)
    try:
        time.sleep(6.0)  # discovery
        freezes = []
        windows = stop_repeatedly(
            state.pid, stops, STOP_S, (0.25, 0.35), seed=7, clock=time.time, quiet=quiet, freezes=freezes
        )
        rd.wait(timeout=seconds + 30)
    finally:
        end_all([cmd, state, rd])
    arrivals = json.loads(out.read_text())
    cmd_t = arrivals["cmd"]
    if len(cmd_t) < 10 or len(arrivals["state"]) < 10:
        raise SystemExit(f"{mode}: the reader heard {len(cmd_t)} commands, {len(arrivals['state'])} states")
    return {
        "gaps_ms": longest_gaps_ms(cmd_t, windows),
        "commands": len(cmd_t),
        "states": len(arrivals["state"]),
        "not_quiet": sum(not f.quiescent for f in freezes),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("main", "reader", "writer"), default="main")
    ap.add_argument("--topic", default="cmd")
    ap.add_argument("--rate", type=float, default=100.0, help="(writer role) publishing rate, Hz")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--stops", type=int, default=200)
    ap.add_argument("--domain", type=int, default=91)
    ap.add_argument("--load", type=int, default=1, help="busy processes beside the measurement (a loaded machine)")
    ap.add_argument("--rates", type=float, nargs="+", default=list(RATES_HZ), help="state writer rates to measure, Hz")
    ap.add_argument(
        "--stops-as",
        choices=("plain", "quiet", "both"),
        default="both",
        help="plain: SIGSTOP at any instant; quiet: only where no thread of the writer runs user code "
        "(the fault rig's freeze, tests/faults/freeze.py); both: one after the other, in this run",
    )
    args = ap.parse_args()
    if args.role == "writer":
        writer(args.topic, args.rate)
        return
    if args.role == "reader":
        reader(args.seconds, args.out)
        return
    import tempfile

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="deaf_reader_") as tmp:
            kinds = {"plain": [False], "quiet": [True], "both": [False, True]}[args.stops_as]
            for i, (rate, quiet) in enumerate((r, q) for r in args.rates for q in kinds):
                results[(rate, quiet)] = run(args.stops, rate, args.domain + i, Path(tmp), quiet)
    finally:
        for h in hogs:
            h.kill()
    print(
        f"{args.stops} stops of {STOP_S * 1e3:.0f} ms of the state writer, {args.load} busy process(es) beside; "
        f"the reader's longest gap in a {CMD_HZ:.0f} Hz stream from another, running writer:",
        flush=True,
    )
    for (rate, quiet), r in results.items():
        g = sorted(r["gaps_ms"])
        deaf = sum(x > DEAF_MS for x in g)
        print(
            f"state writer at {rate:5.0f} Hz, {'quiet' if quiet else 'plain'} stops: "
            f"stops that left the reader deaf (gap > {DEAF_MS:.0f} ms): {deaf}/{len(g)} "
            f"({100 * deaf / len(g):.1f} %; physical limit 0); gap median {g[len(g) // 2]:.0f} ms, worst {g[-1]:.0f} ms "
            f"({r['commands']} commands, {r['states']} states heard"
            + (f"; {r['not_quiet']} stop(s) found no quiet instant in the freeze's time" if quiet else "")
            + ")",
            flush=True,
        )


if __name__ == "__main__":
    main()
