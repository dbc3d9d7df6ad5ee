"""Image transport latency between two node processes over real DDS (Fast DDS, localhost).

What: a publisher process sends 3 streams of 640x480 rgb8 sensor_msgs/Image at 30 Hz
(/bench/cam0..2/image_raw, QoS egomimic_nodes.qos.SENSOR: reliable, keep last 5) to a
subscriber process. Latency = receive time - header.stamp (both time.time_ns(); the stamp is
set just before publish, the subscriber views the data zero-copy with np.frombuffer). Reported:
p50/p99/max latency, received rate, loss (from a frame counter in the first 8 bytes of each
frame) and CPU% per process (100 % = one core), for two configurations, run one after the other:
  - profile: FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds_local.xml (8 MiB SHM segments);
  - default: no profile (512 KiB SHM segments: a 900 KiB frame falls back to UDP on lo);
  - node: the real camera node (egomimic_nodes.camera_node, synthetic backend, 3 cameras in one
    process, shipped profile) as the publisher: latency = receive time - capture stamp (the
    frame is stamped when rendered, so this includes render, health check, the buffer copy and
    DDS); loss from the frame counter the renderer draws into row 0; CPU of the node process,
    also per camera stream (it renders, checks health and publishes health + camera_info too).
plus the physical floor: copying the same bytes in-process (arr.tobytes() +
np.frombuffer().copy(); each 900 KiB buffer is fresh memory, so page faults are included, as
they are for a received message).
Why: the shipped profile exists for this case (config/fastdds_local.xml); this shows
whether it still pays off, and by how much, on this machine.
Every process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST on its own ROS_DOMAIN_ID
(--domain-base, +1 for the second configuration); nothing leaves loopback.
Run: `make bench`, i.e. `.venv/bin/python bench/image_transport.py --out out/bench/image_transport.json`
(--seconds, --warmup, --domain-base). The roles `pub` and `sub` are the child processes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from sensor_msgs.msg import Image

from egomimic_hw.description import CAMERAS
from egomimic_nodes import qos, topics

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "config" / "fastdds_local.xml"
H, W, RATE, STREAMS = 480, 640, 30.0, 3
TOPICS = [f"/bench/stream{i}" for i in range(STREAMS)]  # the bench's own, not the graph's
NODE_NS = "bench_node"
NODE_TOPICS = [topics.IMAGE_RAW.resolve(NODE_NS, cam=cam) for cam in CAMERAS]


def synthetic_frame_index(img) -> int:
    """The frame counter the synthetic renderer draws (16 bits, 8 px each, row 0)."""
    bits = img[0, 0:128:8, 0] > 127
    return int(np.sum(bits.astype(np.int64) << np.arange(16)))


NO_DATA_TIMEOUT_S = 20.0  # the subscriber gives up if nothing arrives within this


def make_node(name):
    rclpy.init()
    node = rclpy.create_node(name)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    return node, executor


def run_pub(a) -> int:
    node, executor = make_node("bench_image_pub")
    pubs = [node.create_publisher(Image, t, qos.SENSOR) for t in TOPICS]
    frame = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    counter = frame.reshape(-1)[:8].view(np.uint64)  # frame counter in the first 8 bytes
    st = {"seq": 0, "errors": 0}

    def tick():
        st["seq"] += 1
        frame[st["seq"] % H, 8:] = st["seq"] & 0xFF  # the image changes every frame
        counter[0] = st["seq"]
        for i, pub in enumerate(pubs):
            msg = Image(height=H, width=W, encoding="rgb8", step=W * 3)
            msg.header.frame_id = f"cam{i}"
            msg.data = frame.tobytes()
            t = time.time_ns()
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t, 1_000_000_000)
            try:
                pub.publish(msg)
            except Exception:  # noqa: BLE001 - a reliable writer can refuse; count it
                st["errors"] += 1

    node.create_timer(1.0 / RATE, tick)
    proc, t_match, cpu_started, written = psutil.Process(), None, False, False
    try:
        while rclpy.ok():
            executor.spin_once(timeout_sec=0.05)
            now = time.monotonic()
            if t_match is None:
                if all(p.get_subscription_count() > 0 for p in pubs):
                    t_match = now  # same window as the subscriber: warm-up, then --seconds
            elif not cpu_started and now >= t_match + a.warmup:
                proc.cpu_percent(None)
                cpu_started = True
            elif cpu_started and not written and now >= t_match + a.warmup + a.seconds:
                Path(a.result).write_text(json.dumps({"cpu_pct": proc.cpu_percent(None), **st}))
                written = True
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def run_sub(a) -> int:
    node, executor = make_node("bench_image_sub")
    topics = NODE_TOPICS if a.from_node else TOPICS
    lat = [[] for _ in topics]
    seqs = [[] for _ in topics]
    win = {"start": None, "end": None}

    def on_image(msg, i):
        now = time.time_ns()
        img = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3)  # zero-copy view
        if win["start"] is None:
            win["start"] = time.monotonic() + a.warmup
            win["end"] = win["start"] + a.seconds
        if win["start"] <= time.monotonic() < win["end"]:
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            lat[i].append((now - stamp) / 1e6)
            seqs[i].append(synthetic_frame_index(img) if a.from_node else int(img.reshape(-1)[:8].view(np.uint64)[0]))

    for i, t in enumerate(topics):
        node.create_subscription(Image, t, lambda m, i=i: on_image(m, i), qos.SENSOR)
    proc, cpu_started, t0 = psutil.Process(), False, time.monotonic()
    try:
        while rclpy.ok():
            executor.spin_once(timeout_sec=0.05)
            now = time.monotonic()
            if win["start"] is None and now - t0 > NO_DATA_TIMEOUT_S:
                break
            if win["start"] is not None and now >= win["start"] and not cpu_started:
                proc.cpu_percent(None)
                cpu_started = True
            if win["end"] is not None and now >= win["end"]:
                break
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        cpu = proc.cpu_percent(None) if cpu_started else None
        node.destroy_node()
        rclpy.try_shutdown()
    streams = {t: stats(lat[i], seqs[i], a.seconds) for i, t in enumerate(topics)}
    pooled = stats(sum(lat, []), None, a.seconds)  # rate_hz: all streams together
    n_exp = sum(s["expected"] for s in streams.values())
    pooled.update(expected=n_exp, loss_pct=100.0 * (1 - pooled["n"] / n_exp) if n_exp else None)
    Path(a.result).write_text(json.dumps({"streams": streams, "pooled": pooled, "cpu_pct": cpu}))
    return 0


def stats(lat, seqs, seconds):
    out = {"n": len(lat), "rate_hz": len(lat) / seconds}
    if lat:
        x = np.asarray(lat)
        out.update(p50_ms=float(np.percentile(x, 50)), p99_ms=float(np.percentile(x, 99)), max_ms=float(x.max()))
    if seqs is not None:
        out["expected"] = (int(np.sum(np.diff(seqs) % 65536)) + 1) if seqs else 0  # 16-bit node counter wraps
        out["loss_pct"] = 100.0 * (1 - len(seqs) / out["expected"]) if seqs else None
    return out


def copy_floor_ms(reps=200):
    arr = np.random.default_rng(1).integers(0, 256, (H, W, 3), dtype=np.uint8)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        np.frombuffer(arr.tobytes(), np.uint8).copy()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def run_config(name, profile, domain, a, tmp, procs, killed, from_node=False):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTDDS_BUILTIN_TRANSPORTS", "ROS_STATIC_PEERS")
    }
    env.update(ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(domain), ROS_LOG_DIR=str(tmp / "ros_log"))
    if profile:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(profile)
    common = [sys.executable, __file__, "--seconds", str(a.seconds), "--warmup", str(a.warmup)]
    if from_node:
        common.append("--from-node")

    def start(role):
        with open(tmp / f"{name}_{role}.log", "w") as log:
            cmd = common + ["--role", role, "--result", str(tmp / f"{name}_{role}.json")]
            if role == "node":
                cmd = [
                    sys.executable,
                    "-m",
                    "egomimic_nodes.camera_node",
                    "--ros-args",
                    "-r",
                    "__node:=cameras",
                    "-r",
                    f"__ns:=/{NODE_NS}",
                    "-p",
                    f"cameras:=[{','.join(CAMERAS)}]",
                    "-p",
                    "backend:=synthetic",
                ]
            p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        procs.append(p)
        return p

    sub = start("sub")
    pub = start("node" if from_node else "pub")
    cpu_samples = []  # (monotonic, cpu seconds) of the node process, to cut out the sub's window
    try:
        try:
            deadline = time.monotonic() + NO_DATA_TIMEOUT_S + a.warmup + a.seconds + 30
            ps = psutil.Process(pub.pid)
            while sub.poll() is None:
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(sub.args, 0)
                if from_node:
                    t = ps.cpu_times()
                    cpu_samples.append((time.monotonic(), t.user + t.system))
                time.sleep(0.1)
        except subprocess.TimeoutExpired:
            killed.append(stop(sub))
        deadline = time.monotonic() + 10  # the publisher writes its CPU at the end of the same window
        while (
            not from_node
            and not (tmp / f"{name}_pub.json").exists()
            and time.monotonic() < deadline
            and pub.poll() is None
        ):
            time.sleep(0.1)
    finally:
        killed.append(stop(pub))
    res = json.loads((tmp / f"{name}_sub.json").read_text()) if (tmp / f"{name}_sub.json").exists() else {}
    pub_res = tmp / f"{name}_pub.json"
    res["pub"] = json.loads(pub_res.read_text()) if pub_res.exists() else {}
    if from_node and cpu_samples:
        end_t, end_cpu = cpu_samples[-1]
        start_t, start_cpu = min(cpu_samples, key=lambda s: abs(s[0] - (end_t - a.seconds)))
        if end_t > start_t:
            res["pub"] = {"cpu_pct": 100.0 * (end_cpu - start_cpu) / (end_t - start_t)}
            res["pub"]["cpu_pct_per_stream"] = res["pub"]["cpu_pct"] / STREAMS
    res.update(domain=domain, profile=str(profile) if profile else None)
    if not res.get("pooled", {}).get("n"):
        for role in ("sub", "node" if from_node else "pub"):
            print(
                f"--- {name} {role} log (tail) ---\n" + (tmp / f"{name}_{role}.log").read_text()[-2000:],
                file=sys.stderr,
            )
    return res


def stop(p, timeout=5.0) -> bool:
    """SIGINT, then SIGKILL; True if it had to be killed."""
    if p.poll() is not None:
        return False
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return True


def ratio(x, y):
    return x / y if x is not None and y else None


def fmt(v, spec=".2f"):
    pct = spec.endswith("%")  # a number already in percent, printed with a % sign
    return "-" if v is None else format(v, spec.rstrip("%")) + ("%" if pct else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=("orchestrate", "pub", "sub"), default="orchestrate")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--domain-base", type=int, default=90)
    ap.add_argument("--out", default="out/bench/image_transport.json")
    ap.add_argument("--result", help="(pub/sub) where the child writes its JSON")
    ap.add_argument("--from-node", action="store_true", help="(sub) listen to the camera node's topics")
    a = ap.parse_args()
    if not 0 <= a.domain_base <= 230:
        ap.error("--domain-base must be in 0..230 (it and the next two ids are used)")
    if a.role != "orchestrate":
        return (run_pub if a.role == "pub" else run_sub)(a)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the cleanup below runs
    procs, killed, results = [], [], {}
    with tempfile.TemporaryDirectory(prefix="bench_img_") as tmpdir:
        try:
            for k, (name, prof) in enumerate((("profile", PROFILE), ("default", None), ("node", PROFILE))):
                results[name] = run_config(
                    name, prof, a.domain_base + k, a, Path(tmpdir), procs, killed, from_node=name == "node"
                )
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        finally:
            killed += [stop(p) for p in procs]
            if any(killed):
                subprocess.run(
                    ["fastdds", "shm", "clean"],
                    check=False,
                    env={**os.environ, "PATH": f"{REPO / '.venv/bin'}:{os.environ.get('PATH', '')}"},
                )
    floor = copy_floor_ms()

    print(f"{STREAMS} x {W}x{H} rgb8 @ {RATE:g} Hz, {a.seconds:g} s after {a.warmup:g} s warm-up, 2 processes")
    print(
        f"{'config':<8} | {'p50 ms':>7} | {'p99 ms':>7} | {'max ms':>7} | {'rate Hz':>7} | {'loss %':>6} | {'pub CPU':>7} | {'sub CPU':>7}"
    )
    for name, r in results.items():
        p = r.get("pooled", {})
        print(
            f"{name:<8} | {fmt(p.get('p50_ms')):>7} | {fmt(p.get('p99_ms')):>7} | {fmt(p.get('max_ms')):>7} | "
            f"{fmt(p.get('rate_hz', 0) / STREAMS, '.1f'):>7} | {fmt(p.get('loss_pct'), '.1f'):>6} | "
            f"{fmt(r['pub'].get('cpu_pct'), '.1f%'):>7} | {fmt(r.get('cpu_pct'), '.1f%'):>7}"
        )
    pr, df = results["profile"].get("pooled", {}), results["default"].get("pooled", {})
    nd = results["node"].get("pooled", {})
    ratios = {
        "default/profile p50": ratio(df.get("p50_ms"), pr.get("p50_ms")),
        "default/profile p99": ratio(df.get("p99_ms"), pr.get("p99_ms")),
        "profile p50 / copy floor": ratio(pr.get("p50_ms"), floor),
        "node p50 / copy floor": ratio(nd.get("p50_ms"), floor),
        "node p50 / profile p50": ratio(nd.get("p50_ms"), pr.get("p50_ms")),
    }
    print(f"copy floor (tobytes + frombuffer().copy(), {H * W * 3:,} B): {floor:.3f} ms")
    per_stream = results["node"]["pub"].get("cpu_pct_per_stream")
    print(f"camera node (synthetic, capture stamp -> subscriber): CPU per camera stream {fmt(per_stream, '.1f%')}")
    print("ratios: " + ", ".join(f"{k} = {fmt(v, '.1f')}x" for k, v in ratios.items()))

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "configs": results,
                "copy_floor_ms": floor,
                "ratios": ratios,
                "seconds": a.seconds,
                "warmup": a.warmup,
                "killed_children": any(killed),
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    empty = [n for n, r in results.items() if not r.get("pooled", {}).get("n")]
    if empty:
        print(f"FAIL: nothing received with {', '.join(empty)}", file=sys.stderr)
    return 1 if empty else 0


if __name__ == "__main__":
    sys.exit(main())
