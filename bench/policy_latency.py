"""Per-family CPU latency of one policy query, and what a checkpoint start costs the second time.

Upstream (--upstream-queries, default 3): the lab's real-size Fold (306M) and MoE (358M) built
from their own config trees (tests/fixtures/upstream) with random weights, queried through the
UpstreamRolloutPolicy the policy node runs; p50 / max per query, and p50 as a fraction of the
control period and of upstream's 1 s replanning interval (--device cuda where one exists).
What: for each family (fold, pi, moe) at its DEFAULT size with seeded untrained weights,
`make_policy(family, num_threads=--threads)` then `--warmup` + `--queries` calls of infer() on
640x480 RGB observations (fresh images and slightly moving poses each query, as live). Reported
per family: total ms p50 / p99 / max from a monotonic clock around infer(), the phases the
policy reports (encode = image resize + image encoder, model = conditioning + sampler,
decode = unnormalize + wrist-relative decode), parameter count, and p50 / p99 as a FRACTION OF
THE 33.3 ms CONTROL PERIOD (the physical budget: above 1.0 a synchronous loop would stall).
Checkpoint start: a legacy-layout Fold checkpoint (compile prefixes, legacy ids, optimizer
state) prepared twice into a fresh cache: time of each start, bytes this process wrote
(/proc/self/io wchar delta), whether the cache listing (name, size, mtime, inode) and the source
directory changed. The second start should write 0 bytes and change nothing.
Why: what a policy query costs per family on a CPU at the default size, and the promise that a
checkpoint is prepared once and reused (the second start does no write), measured.
Run: `.venv/bin/python bench/policy_latency.py` (--queries, --warmup, --threads, --out);
writes out/bench/policy_latency.json. CPU only; numbers depend on the load of the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.* helpers when run from anywhere

from egomimic_hw.description import CAMERAS, CONTROL_RATE_HZ  # noqa: E402
from egomimic_policy.checkpoints import load_checkpoint, model_config_of, sha256_of  # noqa: E402
from egomimic_policy.families import FAMILIES, FoldAlgorithm, build_algorithm, make_policy  # noqa: E402
from egomimic_policy.interface import Observation  # noqa: E402

PERIOD_MS = 1000.0 / CONTROL_RATE_HZ


def wchar() -> int:
    """Bytes this process has passed to write() so far (Linux /proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no wchar")


def listing(directory: Path) -> dict:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino) for p in sorted(directory.iterdir())}


def observations(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    frames = [{c: rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for c in CAMERAS} for _ in range(4)]
    for i in range(n):
        s = 0.01 * np.sin(i / 10)
        yield Observation(
            stamp_ns=1_000_000_000 + i * 33_333_333,
            images=frames[i % len(frames)],
            left_pose=np.array([0.3 + s, 0.1, 0.2, 1.0, 0.0, 0.0, 0.0]),
            right_pose=np.array([0.3, -0.1 - s, 0.2, 0.0, 1.0, 0.0, 0.0]),
            left_gripper=0.5,
            right_gripper=0.5,
        )


def bench_family(family: str, queries: int, warmup: int, threads: int) -> dict:
    policy = make_policy(family, num_threads=threads)
    params = sum(p.numel() for p in policy.algorithm.parameters())
    totals, phases = [], {"encode": [], "model": [], "decode": []}
    for i, obs in enumerate(observations(warmup + queries)):
        t0 = time.monotonic()
        chunk = policy.infer(obs)
        dt = 1e3 * (time.monotonic() - t0)
        assert len(chunk) == policy.spec.chunk_length and np.all(np.isfinite(chunk.left_pose))
        if i >= warmup:
            totals.append(dt)
            for k in phases:
                phases[k].append(policy.last_timing_ms[k])
    t = np.array(totals)
    cfg = policy.algorithm.config
    return {
        "family": family,
        "params": int(params),
        "queries": queries,
        "threads": threads,
        "config": {
            "d_model": cfg.d_model,
            "n_layers": cfg.n_layers,
            "chunk_length": cfg.chunk_length,
            "n_obs_steps": cfg.n_obs_steps,
            "steps": getattr(cfg, "num_inference_steps", getattr(cfg, "flow_steps", None)),
        },
        "ms_p50": float(np.percentile(t, 50)),
        "ms_p99": float(np.percentile(t, 99)),
        "ms_max": float(t.max()),
        "phase_ms_p50": {k: float(np.median(v)) for k, v in phases.items()},
        "period_fraction_p50": float(np.percentile(t, 50) / PERIOD_MS),
        "period_fraction_p99": float(np.percentile(t, 99) / PERIOD_MS),
    }


def bench_checkpoint_start() -> dict:
    from tests.unit.egomimic_policy.test_checkpoints import legacy_checkpoint  # the golden legacy layout

    with tempfile.TemporaryDirectory(prefix="egomimic-bench-ckpt-") as tmp:
        root = Path(tmp)
        source = legacy_checkpoint(build_algorithm("fold", seed=0), root / "src" / "fold.ckpt")
        cache = root / "cache"
        src_before = listing(source.parent)
        runs = []
        for _ in range(2):
            w0, t0 = wchar(), time.monotonic()
            pin = sha256_of(model_config_of(load_checkpoint(source)))  # a legacy Fold runs only pinned
            prepared = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin)
            runs.append(
                {
                    "s": time.monotonic() - t0,
                    "bytes_written": wchar() - w0,
                    "reused": prepared.reused,
                    "cache_listing": listing(cache),
                }
            )
        return {
            "source_bytes": source.stat().st_size,
            "artifact_bytes": prepared.artifact_path.stat().st_size,
            "first_start_s": runs[0]["s"],
            "first_bytes_written": runs[0]["bytes_written"],
            "second_start_s": runs[1]["s"],
            "second_bytes_written": runs[1]["bytes_written"],
            "second_reused": runs[1]["reused"],
            "cache_unchanged_by_second": runs[0]["cache_listing"] == runs[1]["cache_listing"],
            "source_dir_unchanged": listing(source.parent) == src_before,
            "second_over_first_time": runs[1]["s"] / runs[0]["s"],
        }


UPSTREAM_FIXTURES = REPO / "tests" / "fixtures" / "upstream"
REPLAN_MS = 1000.0
"""Upstream's live rollout queries every 30 ticks (1 Hz replanning at 30 Hz, docs/eva.md)."""


def bench_upstream(name: str, queries: int, threads: int, device: str, profile_dir: Path | None = None) -> dict:
    """Upstream's real-size Fold or MoE (its own config tree, random weights) behind the same
    UpstreamRolloutPolicy the policy node runs, on 640x480 x3 cameras."""
    import yaml

    from egomimic_policy.features import neutral_norm_stats
    from egomimic_policy.upstream.policy import UpstreamRolloutPolicy
    from egomimic_policy.upstream.targets import instantiate

    torch.set_num_threads(threads)
    config = yaml.safe_load((UPSTREAM_FIXTURES / f"config_tree_{name}.yaml").read_text())
    t0 = time.monotonic()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        algo = instantiate(config["model"]["robomimic_model"])
    build_s = time.monotonic() - t0
    cameras = {"front_img_1": "front_1", "left_wrist_img": "left_wrist", "right_wrist_img": "right_wrist"}
    meta = {
        "hyper_parameters": {
            "config_tree": config,
            "norm_stats_state": {
                "key_types": {6: {**dict.fromkeys(cameras, "camera_keys"), "state_ee_pose": "proprio_keys"}},
                "zarr_keys": {6: {k: f"images.{c}" for k, c in cameras.items()}},
            },
        }
    }
    policy = UpstreamRolloutPolicy(
        algo, neutral_norm_stats(), meta, embodiment_id=6, fingerprint=name, device=device, num_threads=threads
    )
    params = sum(p.numel() for p in algo.parameters())
    totals, phases = [], {"encode": [], "model": [], "decode": []}
    for i, obs in enumerate(observations(queries + 1)):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.monotonic()
        chunk = policy.infer(obs)
        dt = 1e3 * (time.monotonic() - t0)
        assert len(chunk) == policy.spec.chunk_length and np.all(np.isfinite(chunk.left_pose))
        if i >= 1:  # the first query pays one-time allocations
            totals.append(dt)
            for k in phases:
                phases[k].append(policy.last_timing_ms[k])
    if profile_dir is not None:  # where the time goes: torch.profiler over 2 more queries
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=activities) as prof:
            for obs in observations(2, seed=1):
                policy.infer(obs)
        sort = "self_cuda_time_total" if device.startswith("cuda") else "self_cpu_time_total"
        table = prof.key_averages().table(sort_by=sort, row_limit=25)
        profile_dir.mkdir(parents=True, exist_ok=True)
        (profile_dir / f"profile_upstream_{name}_{device}.txt").write_text(table)
        print(f"profile of 2 queries of upstream {name} on {device} (by {sort}):\n{table}")
    t = np.array(totals)
    sampler = algo.policy.stages[2]
    return {
        "model": f"upstream {name}",
        "params": int(params),
        "device": device,
        "threads": threads,
        "queries": queries,
        "build_s": build_s,
        "steps": int(getattr(sampler, "num_inference_steps", 0)),
        "ms_p50": float(np.percentile(t, 50)),
        "ms_max": float(t.max()),
        "phase_ms_p50": {k: float(np.median(v)) for k, v in phases.items()},
        "period_fraction_p50": float(np.percentile(t, 50) / PERIOD_MS),
        "replan_fraction_p50": float(np.percentile(t, 50) / REPLAN_MS),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (rollout default 1)")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench" / "policy_latency.json")
    ap.add_argument(
        "--upstream-queries", type=int, default=3, help="queries of each real-size upstream model (0: skip)"
    )
    ap.add_argument("--upstream-threads", type=int, default=2, help="torch threads for the real-size upstream models")
    ap.add_argument("--device", default="cpu", help="device of the real-size upstream models (cpu | cuda)")
    ap.add_argument("--profile-dir", type=Path, help="also profile 2 queries of each upstream model (torch.profiler)")
    a = ap.parse_args()

    results = [bench_family(f, a.queries, a.warmup, a.threads) for f in FAMILIES]
    print(
        f"policy query latency, CPU, {a.threads} torch thread(s), {a.queries} queries after {a.warmup} warm-up, "
        f"640x480 x3 cameras; control period {PERIOD_MS:.1f} ms"
    )
    print(
        f"{'family':8}{'params':>10}{'steps':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'p50/period':>12}{'p99/period':>12}"
        f"{'encode':>9}{'model':>9}{'decode':>9}"
    )
    for r in results:
        ph = r["phase_ms_p50"]
        print(
            f"{r['family']:8}{r['params']:>10}{r['config']['steps']:>7}{r['ms_p50']:>9.1f}{r['ms_p99']:>9.1f}"
            f"{r['ms_max']:>9.1f}{r['period_fraction_p50']:>12.2f}{r['period_fraction_p99']:>12.2f}"
            f"{ph['encode']:>9.1f}{ph['model']:>9.1f}{ph['decode']:>9.1f}"
        )
    upstream = [
        bench_upstream(name, a.upstream_queries, a.upstream_threads, a.device, a.profile_dir)
        for name in (("fold", "moe") if a.upstream_queries > 0 else ())
    ]
    if upstream:
        print(
            f"upstream real-size models (config trees of real checkpoints, random weights), {a.device}, "
            f"{a.upstream_threads} thread(s), {a.upstream_queries} queries after 1; upstream replans every "
            f"{REPLAN_MS:.0f} ms (30 ticks)"
        )
        print(
            f"{'model':16}{'params':>12}{'steps':>7}{'p50 ms':>10}{'max ms':>10}{'p50/period':>12}{'p50/replan':>12}"
            f"{'encode':>9}{'model':>10}"
        )
    for r in upstream:
        ph = r["phase_ms_p50"]
        print(
            f"{r['model']:16}{r['params']:>12}{r['steps']:>7}{r['ms_p50']:>10.0f}{r['ms_max']:>10.0f}"
            f"{r['period_fraction_p50']:>12.1f}{r['replan_fraction_p50']:>12.2f}{ph['encode']:>9.1f}{ph['model']:>10.0f}"
        )
    ck = bench_checkpoint_start()
    print(
        f"checkpoint start (legacy Fold, source {ck['source_bytes']} B -> artifact {ck['artifact_bytes']} B): "
        f"first {1e3 * ck['first_start_s']:.1f} ms, {ck['first_bytes_written']} B written; "
        f"second {1e3 * ck['second_start_s']:.1f} ms ({ck['second_over_first_time']:.2f}x), "
        f"{ck['second_bytes_written']} B written, reused={ck['second_reused']}, "
        f"cache unchanged={ck['cache_unchanged_by_second']}, source dir unchanged={ck['source_dir_unchanged']}"
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps(
            {
                "families": results,
                "upstream": upstream,
                "checkpoint_start": ck,
                "period_ms": PERIOD_MS,
                "torch": torch.__version__,
                "machine": platform.machine(),
                "cpu_count": __import__("os").cpu_count(),
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {a.out}")
    ok = (
        ck["second_reused"]
        and ck["second_bytes_written"] == 0
        and ck["cache_unchanged_by_second"]
        and ck["source_dir_unchanged"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
