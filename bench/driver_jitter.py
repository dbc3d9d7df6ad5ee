"""Driver joint-state publication jitter at 100 Hz: the real driver nodes against a bare rclpy timer.

What is measured, two phases run one after the other in this one invocation:
  - driver: the two real driver processes (`egomimic_nodes.driver_node`, backend sim, idle and
    holding: no commands), started and activated the way `egomimic-launch eva_bimanual.launch.py
    policy:=none auto_arm:=false` does it (the same graph definition, params files, command lines,
    lifecycle configure + activate), with nothing else of the graph running;
  - baseline: two processes that are a bare rclpy node (same init/spin plumbing, same executor,
    same QoS) whose 100 Hz timer publishes a JointState of the same size (7 names, 7 positions,
    7 velocities, stamped with the node clock just before publish), i.e. what the ROS executor
    itself achieves on this machine.
This process subscribes to both arms' `joint_states` (QoS egomimic_nodes.qos.SENSOR) and, after
--warmup s, records --duration s per phase. Per message: the header stamp,
the DDS source timestamp (writer side) and received timestamp (reader side) from the message
info, and the callback time here (time.time_ns for latency, time.monotonic_ns for intervals).
Reported (both arms pooled; per arm in the JSON):
  - rate: messages per second over the window (the period is 10 ms; nominal 100 Hz);
  - jitter = |interval - 10 ms| of consecutive header stamps, of DDS source timestamps (when
    the sample was written) and of receive times (callback here), p50/p99 and max, plus
    "late": intervals over 15 ms (a missed or badly late tick);
  - latency: stamp -> callback here, split into stamp -> written, written -> received (DDS
    transport) and received -> callback (this executor).
Stamps differ by design: the driver stamps joint_states with the MEASUREMENT time (the SDK's
latest joint reading; in sim the last 2 ms interpolation substep), the baseline with the time just
before publish. So the driver's stamp -> written holds the measurement age plus its work after
the reading, and its stamp intervals carry the 2 ms measurement grid; the written (DDS source
timestamp) intervals are the publication jitter proper in both phases.
How to read: `driver/base` ratios > 1 are the driver's own overhead (its tick work: simulated
SDK step and FK, the extra ee_pose message, the lifecycle publisher); `p99/period` puts a jitter
against the physical 10 ms period. The machine is shared: the load average is printed and stored,
and the baseline runs under the same load right after the driver phase.
Clean shutdown: every child runs in its own session and is stopped SIGINT -> SIGTERM -> SIGKILL
(the launcher's NodeProcess.stop) in a finally block, also on Ctrl-C / SIGTERM / exceptions; Fast
DDS shared memory is cleaned if anything had to be killed.
Exit code 1 if a phase got no data or under half the nominal rate (nothing is asserted on timing).
Environment: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, ROS_DOMAIN_ID=--domain (default: the
environment's, else 92), FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds_local.xml, for this process
and every child. Run: `.venv/bin/python bench/driver_jitter.py [--duration 15] [--domain N]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from egomimic_hw.description import ARMS

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "config" / "fastdds_local.xml"
RATE_HZ = 100.0
"""The drivers' state rate (config eva_sim.yaml / eva_arx5.yaml `rate_hz`)."""
PERIOD_MS = 1e3 / RATE_HZ
LATE_FACTOR = 1.5
"""An interval over LATE_FACTOR periods counts as a late (or missed) tick."""
FIRST_MESSAGE_TIMEOUT_S = 20.0
BASELINE_NS = "bench_baseline"
DEFAULT_DOMAIN = 92


# -- baseline child: a bare 100 Hz JointState publisher ------------------------------------------
def run_baseline(arm_name: str, rate_hz: float) -> int:
    """The minimal node: same message, QoS, stamping, init and executor as the driver; no work."""
    from rclpy.node import Node
    from sensor_msgs.msg import JointState

    from egomimic_hw.description import Arm
    from egomimic_nodes import topics
    from egomimic_nodes.spin import run_node

    arm = Arm.parse(arm_name)

    class BaselinePublisher(Node):
        def __init__(self):
            super().__init__(f"baseline_{arm.value}", namespace=f"/{BASELINE_NS}")
            self._pub = self.create_publisher(JointState, topics.JOINT_STATES.name(arm), topics.JOINT_STATES.qos)
            self._names = arm.joint_names
            self._positions = [0.0] * len(self._names)
            self.create_timer(1.0 / rate_hz, self._on_tick)

        def _on_tick(self) -> None:
            js = JointState()
            js.header.stamp = self.get_clock().now().to_msg()
            js.header.frame_id = arm.hw_frame
            js.name = self._names
            js.position = list(self._positions)
            js.velocity = list(self._positions)
            self._pub.publish(js)

    return run_node(BaselinePublisher, ["baseline", "--ros-args", "--disable-external-lib-logs"])


class BaselineProcess:
    """A baseline child in its own session (like NodeProcess), output to a log file."""

    def __init__(self, arm: str, run_dir: Path, env: dict, rate_hz: float):
        self.name = f"baseline_{arm}"
        log_path = run_dir / "logs" / f"{self.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--role", "baseline", "--arm", arm, "--rate-hz", str(rate_hz)],
                env=env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self):
        return self.proc.poll()

    def stop(self, timeout_s: float = 5.0) -> int:
        from egomimic_launch.process import stop_process_group

        return stop_process_group(self.proc, timeout_s)


# -- the measuring side -------------------------------------------------------------------------
class Recorder:
    """Subscribes to `<prefix>/<arm>/joint_states`; records per-message times while `recording`."""

    def __init__(self, node, prefix: str):
        from sensor_msgs.msg import JointState

        from egomimic_nodes import topics

        self.samples: dict[str, list] = {arm.value: [] for arm in ARMS}
        self.first_seen: dict[str, bool] = {arm.value: False for arm in ARMS}
        self.recording = False
        self._subs = [
            node.create_subscription(
                JointState,
                topics.JOINT_STATES.resolve(prefix, arm),
                lambda msg, info, arm=arm.value: self._on_msg(arm, msg, info),
                topics.JOINT_STATES.qos,
            )
            for arm in ARMS
        ]
        self._node = node

    def _on_msg(self, arm: str, msg, info) -> None:
        wall_ns, mono_ns = time.time_ns(), time.monotonic_ns()
        self.first_seen[arm] = True
        if self.recording:
            stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            self.samples[arm].append(
                (stamp_ns, info["source_timestamp"], info["received_timestamp"], wall_ns, mono_ns, len(msg.position))
            )

    def close(self) -> None:
        for sub in self._subs:
            self._node.destroy_subscription(sub)


def proc_name(p) -> str:
    """A launcher NodeProcess is named by its spec, a BaselineProcess by itself."""
    return p.spec.name if hasattr(p, "spec") else p.name


def spin_for(executor, seconds: float, until=None) -> bool:
    """Spin `executor` for `seconds` or until `until()` is true (then True)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.01)
        if until is not None and until():
            return True
    return until is None


def measure_phase(name: str, prefix: str, node, executor, processes, a) -> dict:
    """Wait for both arms, warm up, record --duration s; per-arm and pooled statistics."""
    import psutil

    recorder = Recorder(node, prefix)
    try:
        if not spin_for(executor, FIRST_MESSAGE_TIMEOUT_S, lambda: all(recorder.first_seen.values())):
            dead = {proc_name(p): p.poll() for p in processes if p.poll() is not None}
            raise RuntimeError(
                f"{name}: no joint_states on {prefix}/<arm> within {FIRST_MESSAGE_TIMEOUT_S:.0f} s"
                f" (exited children: {dead or 'none'}; logs in {a.run_dir_used}/logs)"
            )
        spin_for(executor, a.warmup)
        procs = {proc_name(p): psutil.Process(p.pid) for p in processes}
        cpu0 = {k: sum(v.cpu_times()[:2]) for k, v in procs.items()}
        load0 = os.getloadavg()[0]
        recorder.recording = True
        t0 = time.monotonic()
        spin_for(executor, a.duration)
        window_s = time.monotonic() - t0
        recorder.recording = False
        cpu = {k: 100.0 * (sum(v.cpu_times()[:2]) - cpu0[k]) / window_s for k, v in procs.items()}
        load1 = os.getloadavg()[0]
    finally:
        recorder.close()
    per_arm = {arm.value: analyse(recorder.samples[arm.value], window_s) for arm in ARMS}
    pooled = pool(per_arm)
    return {
        "prefix": prefix,
        "window_s": window_s,
        "arms": per_arm,
        "pooled": pooled,
        "cpu_pct": cpu,
        "loadavg_1min": [load0, load1],
    }


# -- statistics ---------------------------------------------------------------------------------
def pct(x: np.ndarray) -> dict:
    if x.size == 0:
        return {"p50": None, "p99": None, "max": None, "n": 0}
    return {
        "p50": float(np.percentile(x, 50)),
        "p99": float(np.percentile(x, 99)),
        "max": float(x.max()),
        "n": int(x.size),
    }


def analyse(samples: list, window_s: float) -> dict:
    """Rates, interval jitter and latency split of one stream (ms throughout)."""
    if len(samples) < 3:
        return {"n": len(samples), "rate_hz": len(samples) / window_s, "raw": {}}
    s = np.asarray(samples, dtype=np.int64)
    stamp, source, received, wall, mono = (s[:, i] for i in range(5))
    raw = {
        "stamp_interval_ms": np.diff(stamp) / 1e6,
        "source_interval_ms": np.diff(source) / 1e6,
        "recv_interval_ms": np.diff(mono) / 1e6,
        "lat_total_ms": (wall - stamp) / 1e6,
        "lat_stamp_to_written_ms": (source - stamp) / 1e6,
        "lat_transport_ms": (received - source) / 1e6,
        "lat_executor_ms": (wall - received) / 1e6,
    }
    out = {
        "n": int(len(s)),
        "rate_hz": len(s) / window_s,
        "values_per_msg": int(s[0, 5]),
        "stamp_rate_hz": (len(s) - 1) / ((stamp[-1] - stamp[0]) / 1e9),
        "raw": raw,
    }
    out.update(derive(raw))
    return out


def derive(raw: dict) -> dict:
    out = {}
    for key in ("stamp", "source", "recv"):
        interval = raw[f"{key}_interval_ms"]
        out[f"{key}_jitter_ms"] = pct(np.abs(interval - PERIOD_MS))
        out[f"{key}_late"] = int(np.sum(interval > LATE_FACTOR * PERIOD_MS))
    for key in ("lat_total_ms", "lat_stamp_to_written_ms", "lat_transport_ms", "lat_executor_ms"):
        out[key] = pct(raw[key])
    return out


def pool(per_arm: dict) -> dict:
    """Both arms' intervals and latencies together (each interval is within one arm's stream)."""
    raws = [r["raw"] for r in per_arm.values() if r.get("raw")]
    arms = per_arm.values()
    out = {"n": sum(r["n"] for r in arms), "rate_hz": float(np.mean([r["rate_hz"] for r in arms]))}
    if raws:
        out.update(derive({k: np.concatenate([r[k] for r in raws]) for k in raws[0]}))
    return out


def strip_raw(phase: dict) -> dict:
    phase = dict(phase)
    phase["arms"] = {arm: {k: v for k, v in r.items() if k != "raw"} for arm, r in phase["arms"].items()}
    return phase


def ratio(x, y):
    return x / y if x is not None and y else None


def fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def report(results: dict, a) -> dict:
    drv, base = results.get("driver", {}).get("pooled", {}), results.get("baseline", {}).get("pooled", {})
    rows = [
        ("rate Hz", "rate_hz", None),
        ("stamp jitter p50 ms", "stamp_jitter_ms", "p50"),
        ("stamp jitter p99 ms", "stamp_jitter_ms", "p99"),
        ("stamp jitter max ms", "stamp_jitter_ms", "max"),
        ("written jitter p50 ms", "source_jitter_ms", "p50"),
        ("written jitter p99 ms", "source_jitter_ms", "p99"),
        ("recv jitter p50 ms", "recv_jitter_ms", "p50"),
        ("recv jitter p99 ms", "recv_jitter_ms", "p99"),
        ("recv jitter max ms", "recv_jitter_ms", "max"),
        ("late stamp intervals (>15 ms)", "stamp_late", None),
        ("late recv intervals (>15 ms)", "recv_late", None),
        ("latency stamp->cb p50 ms", "lat_total_ms", "p50"),
        ("latency stamp->cb p99 ms", "lat_total_ms", "p99"),
        ("  stamp->written p50 ms", "lat_stamp_to_written_ms", "p50"),
        ("  stamp->written p99 ms", "lat_stamp_to_written_ms", "p99"),
        ("  written->received p50 ms", "lat_transport_ms", "p50"),
        ("  written->received p99 ms", "lat_transport_ms", "p99"),
        ("  received->cb p50 ms", "lat_executor_ms", "p50"),
        ("  received->cb p99 ms", "lat_executor_ms", "p99"),
    ]

    def get(d, key, sub):
        v = d.get(key)
        return v.get(sub) if isinstance(v, dict) else v

    print(
        f"joint_states at {RATE_HZ:g} Hz (period {PERIOD_MS:g} ms), both arms pooled, {a.duration:g} s per phase "
        f"after {a.warmup:g} s warm-up; ROS_DOMAIN_ID={a.domain}"
    )
    print(f"{'':<30} {'driver':>9} {'baseline':>9} {'drv/base':>9} {'drv/period':>10}")
    table = {}
    for label, key, sub in rows:
        d, b = get(drv, key, sub), get(base, key, sub)
        r = None if key.endswith("_late") else ratio(d, b)  # a ratio of rare counts says nothing
        per = ratio(d, PERIOD_MS) if key.endswith("_ms") else None
        table[label] = {"driver": d, "baseline": b, "driver_over_baseline": r, "driver_over_period": per}
        spec = ".2f" if key == "rate_hz" else ("d" if key.endswith("_late") else ".3f")
        print(
            f"{label:<30} {fmt(d, spec):>9} {fmt(b, spec):>9} {fmt(r, '.2f'):>8}{'x' if r is not None else ' '} "
            f"{fmt(per, '.1%'):>10}"
        )
    for name, phase in results.items():
        cpu = ", ".join(f"{k} {v:.1f}%" for k, v in phase["cpu_pct"].items())
        la = phase["loadavg_1min"]
        print(f"{name}: CPU (100% = one core) {cpu}; load average {la[0]:.2f} -> {la[1]:.2f}")
    return table


# -- orchestration ------------------------------------------------------------------------------
def ros_env(domain: int, run_dir: Path) -> dict:
    env = dict(os.environ)
    for key in ("FASTDDS_BUILTIN_TRANSPORTS", "ROS_STATIC_PEERS", "ROS_LOCALHOST_ONLY"):
        env.pop(key, None)
    env.update(
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_DOMAIN_ID=str(domain),
        FASTDDS_DEFAULT_PROFILES_FILE=str(PROFILE),
        ROS_LOG_DIR=str(run_dir / "ros_logs"),
        PYTHONUNBUFFERED="1",
    )
    return env


def orchestrate(a) -> int:
    run_dir = Path(a.run_dir) if a.run_dir else Path(tempfile.mkdtemp(prefix="bench_driver_jitter_"))
    run_dir.mkdir(parents=True, exist_ok=True)
    a.run_dir_used = run_dir
    env = ros_env(a.domain, run_dir)
    os.environ.update(
        {
            k: env[k]
            for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID", "FASTDDS_DEFAULT_PROFILES_FILE", "ROS_LOG_DIR")
        }
    )
    for key in ("FASTDDS_BUILTIN_TRANSPORTS", "ROS_STATIC_PEERS", "ROS_LOCALHOST_ONLY"):
        os.environ.pop(key, None)

    import rclpy  # after the environment is set
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from egomimic_launch.cli import Launcher, clean_shared_memory, load_graph
    from egomimic_launch.ros_client import LauncherClient

    graph = load_graph("eva_bimanual.launch.py", {"policy": "none", "auto_arm": "false", "backend": "sim"})
    drivers = tuple(s for s in graph.nodes if s.module.endswith(".driver_node"))
    driver_graph = dataclasses.replace(graph, nodes=drivers)

    context = rclpy.Context()
    rclpy.init(
        context=context,
        args=["--ros-args", "--disable-external-lib-logs"],
        signal_handler_options=SignalHandlerOptions.NO,
    )
    client = LauncherClient("bench_driver_jitter_launcher")
    node = rclpy.create_node("bench_driver_jitter", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)

    def interrupt(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, interrupt)  # after rclpy installed its own: ours wins
    signal.signal(signal.SIGTERM, interrupt)
    print(f"[bench] ROS_DOMAIN_ID={a.domain}, logs in {run_dir}", flush=True)

    launcher = Launcher(driver_graph, run_dir, echo=False)
    baselines: list[BaselineProcess] = []
    results, killed, code = {}, False, 0
    try:
        phases = ("driver", "baseline") if not a.baseline_first else ("baseline", "driver")
        for phase in phases:
            if phase == "driver":
                err = launcher.start(client, env)
                if err:
                    raise RuntimeError(f"driver start failed: {err}")
                results["driver"] = measure_phase("driver", f"/{graph.namespace}", node, executor, launcher.procs, a)
                launcher.teardown()
            else:
                baselines = [BaselineProcess(arm.value, run_dir, env, RATE_HZ) for arm in ARMS]
                results["baseline"] = measure_phase("baseline", f"/{BASELINE_NS}", node, executor, baselines, a)
                for p in baselines:
                    killed |= p.stop() == -signal.SIGKILL
    except (KeyboardInterrupt, ExternalShutdownException) as exc:
        print(f"[bench] interrupted ({exc or 'SIGINT'}); stopping everything", file=sys.stderr, flush=True)
        code = 143 if str(exc) == "SIGTERM" else 130
    except RuntimeError as exc:
        print(f"[bench] FAIL: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # teardown must finish; it escalates to SIGKILL itself
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        launcher.teardown()
        killed |= launcher.killed_any
        for p in baselines:
            killed |= p.stop() == -signal.SIGKILL
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        client.close()
        if killed or code:
            clean_shared_memory(a.domain)
        alive = [p.pid for p in [*launcher.procs, *baselines] if p.poll() is None]
        if alive:
            print(f"[bench] WARNING: children still alive: {alive}", file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if code:
        return code

    table = report(results, a)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "period_ms": PERIOD_MS,
                "rate_hz": RATE_HZ,
                "duration_s": a.duration,
                "warmup_s": a.warmup,
                "domain": a.domain,
                "phase_order": list(results),
                "table": table,
                "phases": {k: strip_raw(v) for k, v in results.items()},
                "killed_children": killed,
                "driver_nodes": [s.name for s in drivers],
                "run_dir": str(run_dir),
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    short = [n for n, r in results.items() if r["pooled"]["rate_hz"] < 0.5 * RATE_HZ]
    if short:
        print(f"FAIL: {', '.join(short)} published under half the nominal rate", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--duration", type=float, default=15.0, help="recorded seconds per phase (default 15)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds after the first message before recording")
    ap.add_argument(
        "--domain",
        type=int,
        default=int(os.environ.get("ROS_DOMAIN_ID", DEFAULT_DOMAIN)),
        help=f"ROS_DOMAIN_ID for everything this starts (default: $ROS_DOMAIN_ID, else {DEFAULT_DOMAIN})",
    )
    ap.add_argument("--baseline-first", action="store_true", help="run the baseline phase before the driver phase")
    ap.add_argument("--run-dir", help="where child logs go (default: a new temp dir)")
    ap.add_argument("--out", default="out/bench/driver_jitter.json", help="JSON result path")
    ap.add_argument("--role", choices=("orchestrate", "baseline"), default="orchestrate", help=argparse.SUPPRESS)
    ap.add_argument("--arm", default=ARMS[0].value, help=argparse.SUPPRESS)
    ap.add_argument("--rate-hz", type=float, default=RATE_HZ, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.role == "baseline":
        return run_baseline(a.arm, a.rate_hz)
    if a.duration <= 0 or a.warmup < 0:
        ap.error("--duration must be > 0 and --warmup >= 0")
    if not 0 <= a.domain <= 232:
        ap.error("--domain must be in 0..232")
    return orchestrate(a)


if __name__ == "__main__":
    sys.exit(main())
