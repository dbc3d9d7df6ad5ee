"""Remote vs local policy query overhead: the same policy in-process and behind
`egomimic-policy-server` (a separate process, pyzmq over loopback TCP, msgpack).

Both sides run in this one invocation: a local ScriptedChunkPolicy, and a RemotePolicy talking
to a server process serving the same policy. The observation is what the policy node sends
for a model family: 3 RGB 480x640 frames (2.76 MB) plus proprio; also measured without
images (the scripted policy's observation). Overhead = remote p50 - local p50 (ms): the
serialization + transport + server scheduling cost per query.

    .venv/bin/python bench/remote_overhead.py [--queries 40] [--out out/bench/remote_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from egomimic_hw.description import CAMERAS  # noqa: E402
from egomimic_policy.interface import Observation  # noqa: E402
from egomimic_policy.remote.client import RemoteConfig, RemotePolicy  # noqa: E402
from egomimic_policy.scripted import ScriptedChunkPolicy  # noqa: E402

LEFT0 = np.array([0.30, 0.05, 0.25, 1.0, 0.0, 0.0, 0.0])
RIGHT0 = np.array([0.30, -0.05, 0.25, 0.0, 1.0, 0.0, 0.0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _observation(stamp_ns: int, images: bool) -> Observation:
    rng = np.random.default_rng(stamp_ns % 1000)
    imgs = {cam: rng.integers(0, 255, (480, 640, 3), dtype=np.uint8) for cam in CAMERAS} if images else {}
    return Observation(stamp_ns, imgs, LEFT0, RIGHT0, 0.5, 0.5, np.zeros(6), np.zeros(6))


def _timed(fn, observations) -> list[float]:
    out = []
    for obs in observations:
        t = time.perf_counter()
        fn(obs)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def _summary(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p90_ms": round(float(np.percentile(a, 90)), 3),
        "max_ms": round(float(a.max()), 3),
        "n": len(ms),
    }


def measure(queries: int = 40) -> dict:
    """Local vs remote query time for the same policy, with and without 3 camera frames."""
    address = f"tcp://127.0.0.1:{_free_port()}"
    server = subprocess.Popen(
        [sys.executable, "-m", "egomimic_policy.remote.server", "--policy", "scripted", "--bind", address],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        remote = RemotePolicy(RemoteConfig(address=address, connect_timeout_s=30.0, timeout_s=5.0))
        local = ScriptedChunkPolicy(chunk_length=remote.spec.chunk_length)
        results = {"chunk_length": remote.spec.chunk_length, "address": address}
        for label, images in (("with_3_images", True), ("proprio_only", False)):
            base = time.time_ns()
            observations = [_observation(base + k * 33_000_000, images) for k in range(queries)]
            for obs in observations[:5]:  # warm both paths (allocators, zmq connection)
                local.infer(obs)
                remote.infer(obs)
            local_ms = _timed(local.infer, observations)
            remote_ms = _timed(remote.infer, observations)
            payload = sum(img.nbytes for img in observations[0].images.values())
            results[label] = {
                "payload_image_bytes": payload,
                "local": _summary(local_ms),
                "remote": _summary(remote_ms),
                "overhead_p50_ms": round(float(np.median(remote_ms) - np.median(local_ms)), 3),
            }
        results["client_status"] = remote.status()
        remote.close()
        return results
    finally:
        server.terminate()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()


def print_report(r: dict) -> None:
    print(f"remote vs local query (scripted policy, {r['chunk_length']} rows; server process on {r['address']})")
    print(
        f"{'observation':<16}{'bytes':>11}{'local p50 ms':>14}{'remote p50 ms':>15}{'remote p90 ms':>15}{'overhead ms':>13}"
    )
    for label in ("with_3_images", "proprio_only"):
        x = r[label]
        print(
            f"{label:<16}{x['payload_image_bytes']:>11}{x['local']['p50_ms']:>14.2f}{x['remote']['p50_ms']:>15.2f}"
            f"{x['remote']['p90_ms']:>15.2f}{x['overhead_p50_ms']:>13.2f}"
        )
    print(
        f"(overhead vs the 33.3 ms control period: {r['with_3_images']['overhead_p50_ms'] / 33.33 * 100:.1f} % "
        "with images; the executor hides it in the worker)"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=40)
    p.add_argument("--out", default="out/bench/remote_overhead.json")
    args = p.parse_args()
    r = measure(args.queries)
    print_report(r)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
