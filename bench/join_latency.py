"""A new process publishing to a process that has been running for a while: how long until its
first message arrives? Measured against the physical limit (a loopback send: well under 1 ms).

What: a reader process subscribes to /bench/x and idles for --idle-s seconds. A writer process
then starts and publishes /bench/x at 100 Hz for --publish-s seconds at once, without waiting for
a match (as a tool that joins a running graph does). Per trial the bench reports the delay from
the writer's first publish to the reader's first message (discovery: the two participants
finding each other and matching the endpoints) and the writer's slowest publish() call.
--trials times per profile: config/fastdds_local.xml (the project's: shared memory and UDP on
loopback) against a copy without the shared-memory transport (UDP on loopback only).
Why: `egomimic-bag play` started into a test's subscription lost its first seconds: on this
machine the match took about 60 ms in most trials and about 2.3 s in the others, with either
profile (2026-12-06), so a fixed start-up delay is not enough; play now has
--wait-for-subscribers.
Every process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST on its own ROS_DOMAIN_ID
(--domain, +1 per profile); nothing leaves loopback.
Run: `.venv/bin/python bench/join_latency.py [--trials 8] [--idle-s 7]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "config" / "fastdds_local.xml"

READER = r"""
import sys, time, rclpy
from std_msgs.msg import Float64
rclpy.init()
node = rclpy.create_node("bench_idle_reader")
first = []
def cb(msg):
    if not first:
        first.append(time.time())
        print(f"FIRST {first[0]:.6f}", flush=True)
node.create_subscription(Float64, "/bench/x", cb, 10)
print("READY", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    rclpy.spin_once(node, timeout_sec=0.05)
"""

WRITER = r"""
import sys, time, rclpy
from std_msgs.msg import Float64
rclpy.init()
node = rclpy.create_node("bench_new_writer")
pub = node.create_publisher(Float64, "/bench/x", 10)
msg = Float64()
slowest = 0.0
start = time.time()
print(f"START {start:.6f}", flush=True)
period, n = 0.01, int(float(sys.argv[1]) / 0.01)
t_next = time.monotonic()
for i in range(n):
    msg.data = float(i)
    t0 = time.monotonic()
    pub.publish(msg)
    slowest = max(slowest, time.monotonic() - t0)
    t_next += period
    time.sleep(max(0.0, t_next - time.monotonic()))
print(f"SLOWEST {slowest:.6f}", flush=True)
"""


def udp_only_profile(tmp: Path) -> Path:
    """The project's profile without its shared-memory transport."""
    text = PROFILE.read_text()
    text, n = re.subn(r"\s*<transport_id>shm_big</transport_id>(?=\s*<transport_id>udp_lo)", "", text)
    assert n == 1, "config/fastdds_local.xml lists shm_big before udp_lo in userTransports"
    out = tmp / "fastdds_udp_only.xml"
    out.write_text(text)
    return out


def trial(profile: Path, domain: int, idle_s: float, publish_s: float) -> dict:
    env = dict(
        os.environ,
        FASTDDS_DEFAULT_PROFILES_FILE=str(profile),
        ROS_DOMAIN_ID=str(domain),
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
    )
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(idle_s + publish_s + 3.0)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout.readline().strip() == "READY"
        time.sleep(idle_s)  # the reader has run a while, as a running graph's node has
        writer = subprocess.run(
            [sys.executable, "-c", WRITER, str(publish_s)], env=env, capture_output=True, text=True, timeout=60
        )
        values = dict(line.split() for line in writer.stdout.splitlines() if line.startswith(("START", "SLOWEST")))
        first = reader.stdout.readline().split()
    finally:
        reader.kill()
        reader.wait()
    start = float(values["START"])
    return {
        "slowest_publish_ms": round(float(values["SLOWEST"]) * 1e3, 1),
        "first_delivery_ms": round((float(first[1]) - start) * 1e3, 1) if first[:1] == ["FIRST"] else None,
    }


def main() -> int:
    from egomimic_launch.shm import remove_stale

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--idle-s", type=float, default=7.0, help="the reader's idle time before the writer starts")
    parser.add_argument("--publish-s", type=float, default=3.0)
    parser.add_argument("--domain", type=int, default=71)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench" / "join_latency.json")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        profiles = [("project (shm + udp)", PROFILE), ("udp only", udp_only_profile(Path(tmp)))]
        for i, (name, profile) in enumerate(profiles):
            domain = args.domain + i
            runs = []
            for _ in range(args.trials):
                remove_stale(domains=[domain])  # a dead trial's leftovers would slow the next
                runs.append(trial(profile, domain, args.idle_s, args.publish_s))
                print(f"{name}: {runs[-1]}", flush=True)
            slow = [r["slowest_publish_ms"] for r in runs]
            first = [r["first_delivery_ms"] for r in runs if r["first_delivery_ms"] is not None]
            results[name] = {
                "runs": runs,
                "slowest_publish_ms_max": max(slow),
                "slowest_publish_ms_median": statistics.median(slow),
                "first_delivery_ms_median": round(statistics.median(first), 1) if first else None,
                "first_delivery_ms_max": max(first) if first else None,
                "trials_over_1s": sum(f > 1000 for f in first),
                "trials_without_delivery": len(runs) - len(first),
            }
    print(
        f"\nA new writer to a reader running for {args.idle_s:.0f} s, {args.trials} trials per profile (physical limit: < 1 ms)"
    )
    for name, r in results.items():
        print(
            f"  {name:20s} first delivery median {r['first_delivery_ms_median']} ms, max {r['first_delivery_ms_max']} ms, "
            f"{r['trials_over_1s']}/{args.trials} over 1 s, {r['trials_without_delivery']} without; "
            f"slowest publish() {r['slowest_publish_ms_max']:.1f} ms"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
