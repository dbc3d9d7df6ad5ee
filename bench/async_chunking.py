"""Asynchronous chunk execution vs the synchronous loop upstream runs, side by side.

One run, three parts:
1. Tick rate and worst gap of the published action with a model taking 100 ms and 300 ms per
   query (latency injected, as `inject_latency_ms` does in the node), for
   - the async executor (egomimic_policy.rollout, cadence low_water), and
   - a synchronous baseline: query inline every 30 ticks and execute the chunk's rows, as
     upstream's RateLoop does; the tick after each query is late by the model's latency.
   Both are driven by a real timer thread (absolute deadlines, time.sleep) on the wall clock;
   the acceptance bar is 30 Hz within 1 % and a worst gap <= 2 periods for the async executor.
2. Chunk-boundary jerk with and without blending: the scripted motion with a per-chunk offset
   (seeded, 5 mm std on x/y/z: a stand-in for a sampled model whose consecutive chunks
   disagree), queried every 10 ticks, executed with blend none / ensemble / crossfade / inpaint.
   The scripted policy ignores the committed prefix (it cannot inpaint), so the inpaint row
   measures the executor's side only: committed rows kept exactly, then a crossfade after the
   prefix; the model side (fold / pi / moe return the prefix as their first rows) is checked in
   tests/unit/egomimic_policy/test_families_inpaint.py.
   Jerk = third difference of the commanded left position per tick / period^3 (m/s^3).
3. Remote vs local query overhead (bench/remote_overhead.py): the same policy behind
   egomimic-policy-server in another process.

    .venv/bin/python bench/async_chunking.py [--seconds 6] [--out out/bench/async_chunking.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from egomimic_policy.interface import Chunk, Observation  # noqa: E402
from egomimic_policy.loading import DelayedPolicy  # noqa: E402
from egomimic_policy.rollout import AsyncChunkExecutor, ExecutorConfig  # noqa: E402
from egomimic_policy.scripted import ScriptedChunkPolicy, ScriptedMotionConfig  # noqa: E402

RATE_HZ = 30.0
PERIOD_S = 1.0 / RATE_HZ
CHUNK_LENGTH = 100  # Fold / PI horizon (docs/eva.md)
QUERY_EVERY = 30  # upstream query_frequency
LEFT0 = np.array([0.30, 0.05, 0.25, 1.0, 0.0, 0.0, 0.0])
RIGHT0 = np.array([0.30, -0.05, 0.25, 0.0, 1.0, 0.0, 0.0])
MOTION = ScriptedMotionConfig(ramp_s=0.0)


def observe(now_ns: int) -> Observation:
    """A fresh observation (5 ms old, like arm state arriving over DDS)."""
    return Observation(now_ns - 5_000_000, {}, LEFT0, RIGHT0, 0.5, 0.5)


class ChunkOffsets:
    """Wraps a policy: each chunk shifted by a seeded random offset (a model that changes its
    mind between queries). Used only for the seam-jerk part."""

    def __init__(self, policy, std_m: float, seed: int = 0):
        self.inner, self.spec, self.std_m = policy, policy.spec, std_m
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.inner.reset()

    def infer(self, observation) -> Chunk:
        c = self.inner.infer(observation)
        d = self.rng.normal(0.0, self.std_m, 3)
        left, right = c.left_pose.copy(), c.right_pose.copy()
        left[:, :3] += d
        right[:, :3] += d
        return replace(c, left_pose=left, right_pose=right)


def timer_loop(seconds: float, on_tick) -> None:
    """Call on_tick(now_ns) at RATE_HZ on absolute deadlines; a late tick is not made up for
    (the next deadline is re-based), as a rate loop on a robot does."""
    next_s = time.monotonic()
    end = next_s + seconds
    while next_s < end:
        delay = next_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        on_tick(time.time_ns())
        next_s += PERIOD_S
        if next_s < time.monotonic():
            next_s = time.monotonic()


def rate_stats(emit_s: list[float], seconds: float) -> dict:
    t = np.asarray(emit_s)
    gaps = np.diff(t)
    return {
        "published": len(t),
        "rate_hz": round((len(t) - 1) / (t[-1] - t[0]), 3) if len(t) > 1 else 0.0,
        "rate_error_pct": round(abs((len(t) - 1) / (t[-1] - t[0]) - RATE_HZ) / RATE_HZ * 100, 3)
        if len(t) > 1
        else 100.0,
        "worst_gap_ms": round(float(gaps.max()) * 1e3, 2) if len(gaps) else float("inf"),
        "worst_gap_periods": round(float(gaps.max()) / PERIOD_S, 2) if len(gaps) else float("inf"),
        "gap_p99_ms": round(float(np.percentile(gaps, 99)) * 1e3, 2) if len(gaps) else float("inf"),
    }


def run_async(policy, seconds: float, config: ExecutorConfig) -> tuple[dict, list]:
    ex = AsyncChunkExecutor(policy, config, observe)
    emit_s, positions, tick_us = [], [], []

    def on_tick(now_ns):
        t = time.perf_counter()
        r = ex.tick(now_ns)
        tick_us.append((time.perf_counter() - t) * 1e6)
        if r.target is not None:
            emit_s.append(now_ns / 1e9)
            positions.append(r.target.left_pose[:3].copy())

    timer_loop(0.5, lambda now_ns: ex.tick(now_ns))  # first chunk in the queue before measuring
    timer_loop(seconds, on_tick)
    stats = ex.stats(time.time_ns())
    ex.stop()
    out = rate_stats(emit_s, seconds)
    out.update(
        tick_p50_us=round(float(np.median(tick_us)), 1),
        tick_max_us=round(float(np.max(tick_us)), 1),
        dry_ticks=stats["dry_ticks"],
        chunks=stats["chunks"],
        latency_p50_ms=stats["latency_p50_ms"],
        rows_dropped_late=stats["rows_dropped_late"],
    )
    return out, positions


def run_sync(policy, seconds: float) -> dict:
    """Upstream's loop: every QUERY_EVERY ticks call the model inline, then execute row k."""
    state = {"step": 0, "chunk": None}
    emit_s = []

    def on_tick(now_ns):
        k = state["step"] % QUERY_EVERY
        if k == 0:
            state["chunk"] = policy.infer(observe(now_ns))  # the tick waits for the model here
        state["step"] += 1
        emit_s.append(time.time_ns() / 1e9)  # published once the row is available

    timer_loop(seconds, on_tick)
    return rate_stats(emit_s, seconds)


def jerk_stats(positions: list) -> dict:
    x = np.asarray(positions)
    steps = np.linalg.norm(np.diff(x, axis=0), axis=1)
    jerk = np.linalg.norm(np.diff(x, n=3, axis=0), axis=1) / PERIOD_S**3
    return {
        "jerk_max_m_s3": round(float(jerk.max()), 2),
        "jerk_p99_m_s3": round(float(np.percentile(jerk, 99)), 2),
        "jerk_rms_m_s3": round(float(np.sqrt(np.mean(jerk**2))), 2),
        "max_step_mm": round(float(steps.max()) * 1e3, 3),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=6.0, help="measured seconds per configuration")
    p.add_argument("--out", default="out/bench/async_chunking.json")
    p.add_argument("--skip-remote", action="store_true")
    args = p.parse_args()
    results: dict = {"rate_hz": RATE_HZ, "chunk_length": CHUNK_LENGTH, "seconds": args.seconds, "latency": {}}

    print(f"1. policy/action timing, real timer thread, {args.seconds:.0f} s each; chunk {CHUNK_LENGTH} rows")
    print(
        f"{'model latency':<15}{'loop':<28}{'rate Hz':>9}{'err %':>7}{'worst gap ms':>14}{'periods':>9}{'dry ticks':>11}"
    )
    for latency_s in (0.1, 0.3):
        policy = DelayedPolicy(ScriptedChunkPolicy(MOTION, chunk_length=CHUNK_LENGTH), latency_s)
        a, _ = run_async(policy, args.seconds, ExecutorConfig(cadence="low_water"))
        s = run_sync(DelayedPolicy(ScriptedChunkPolicy(MOTION, chunk_length=CHUNK_LENGTH), latency_s), args.seconds)
        a["pass"] = a["rate_error_pct"] <= 1.0 and a["worst_gap_periods"] <= 2.0
        results["latency"][f"{int(latency_s * 1e3)}ms"] = {"async": a, "sync_baseline": s}
        for name, r, dry in (("async executor", a, a["dry_ticks"]), (f"sync (query every {QUERY_EVERY})", s, "-")):
            print(
                f"{latency_s * 1e3:>6.0f} ms      {name:<28}{r['rate_hz']:>9.2f}{r['rate_error_pct']:>7.2f}"
                f"{r['worst_gap_ms']:>14.1f}{r['worst_gap_periods']:>9.2f}{dry:>11}"
            )
        print(
            f"{'':15}async: tick p50 {a['tick_p50_us']} us, max {a['tick_max_us']} us; "
            f"{a['chunks']} chunks, latency p50 {a['latency_p50_ms']} ms; acceptance "
            f"(rate within 1 %, worst gap <= 2 periods): {'PASS' if a['pass'] else 'FAIL'}"
        )

    print(
        f"\n2. chunk-seam jerk: per-chunk offsets of 5 mm std, query every 10 ticks, 100 ms model, {args.seconds:.0f} s each"
    )
    print(f"{'blend':<12}{'jerk max m/s^3':>16}{'p99':>10}{'rms':>10}{'max step mm':>13}")
    results["jerk"] = {}
    for blend in ("none", "ensemble", "crossfade", "inpaint"):
        policy = DelayedPolicy(ChunkOffsets(ScriptedChunkPolicy(MOTION, chunk_length=CHUNK_LENGTH), 0.005), 0.1)
        cfg = ExecutorConfig(cadence="every_n", query_every_n_ticks=10, blend=blend)
        _, positions = run_async(policy, args.seconds, cfg)
        j = jerk_stats(positions)
        results["jerk"][blend] = j
        print(
            f"{blend:<12}{j['jerk_max_m_s3']:>16.1f}{j['jerk_p99_m_s3']:>10.1f}{j['jerk_rms_m_s3']:>10.1f}"
            f"{j['max_step_mm']:>13.3f}"
        )
    none_max = results["jerk"]["none"]["jerk_max_m_s3"]
    print(
        "ratios vs no blending (max jerk): "
        + ", ".join(
            f"{b} {results['jerk'][b]['jerk_max_m_s3'] / none_max:.2f}" for b in ("ensemble", "crossfade", "inpaint")
        )
    )
    clean = jerk_stats(
        run_async(
            DelayedPolicy(ScriptedChunkPolicy(MOTION, chunk_length=CHUNK_LENGTH), 0.1),
            min(args.seconds, 3.0),
            ExecutorConfig(cadence="every_n", query_every_n_ticks=10, blend="none"),
        )[1]
    )
    results["jerk"]["reference_no_offsets"] = clean
    print(
        f"reference (same motion, chunks that agree): jerk max {clean['jerk_max_m_s3']:.1f} m/s^3, "
        f"max step {clean['max_step_mm']:.3f} mm"
    )

    if not args.skip_remote:
        import remote_overhead

        print()
        r = remote_overhead.measure(queries=30)
        results["remote"] = r
        print("3. ", end="")
        remote_overhead.print_report(r)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
