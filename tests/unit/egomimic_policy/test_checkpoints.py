"""Patched cached checkpoints: the layout save_checkpoint writes (upstream's), golden migration of
a legacy upstream-layout checkpoint and of the project's format_version 1 layout, reuse without
any write, separate processes starting together do the work once, corrupt or other-layout entries
are rebuilt, a read-only source works, and refusals happen before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from egomimic_hw.embodiment import Embodiment
from egomimic_policy.checkpoints import CheckpointError, load_checkpoint, save_checkpoint, sha256_of, upgrade_layout
from egomimic_policy.checkpoints import cache as cache_module
from egomimic_policy.checkpoints.layout import FORMAT_VERSION, WRAPPER_TARGET, model_config_of, model_state_dict
from egomimic_policy.families import FoldAlgorithm, PIAlgorithm, build_algorithm, make_policy
from egomimic_policy.features import ACTION_KEY, STATE_KEY, neutral_norm_stats
from egomimic_policy.normalization import KeyStats, NormStats
from tests.unit.egomimic_policy.conftest import make_observation

REPO = Path(__file__).resolve().parents[3]
HUMAN_STATE = KeyStats.from_samples(np.random.default_rng(1).normal(size=(200, 20)))


def legacy_checkpoint(algo, path: Path, *, ids=(8, 18), target="egomimic.pipeline.algo.PipelineAlgo") -> Path:
    """The upstream layout: `nets.policy.` keys with torch.compile prefixes, config under
    config_tree (beside another config section), legacy ids, and training state (optimizer,
    schedulers, loops, callbacks)."""
    neutral = neutral_norm_stats().to_state()["norm_stats"][int(Embodiment.EVA_BIMANUAL)]
    human = {STATE_KEY: HUMAN_STATE.to_dict(), ACTION_KEY: neutral[ACTION_KEY]}
    config = {**algo.model_config(), "_target_": target}
    ckpt = {
        "state_dict": {"nets.policy._orig_mod." + k: v.clone() for k, v in algo.state_dict().items()},
        "hyper_parameters": {
            "config_tree": {
                "model": {"_target_": WRAPPER_TARGET, "robomimic_model": config},
                "trainer": {"devices": 1},
            },
            "norm_stats_state": {
                "norm_mode": "quantile",
                "embodiments": list(ids),
                "reduce_all_but_last": True,
                "norm_stats": dict(zip(ids, (neutral, human))),
            },
            "data_schematic": {"keys": ["front_img_1"]},
        },
        "epoch": 3,
        "global_step": 133665,
        "pytorch-lightning_version": "2.4.0",
        "optimizer_states": [{"state": {0: {"exp_avg": torch.randn(4000)}}, "param_groups": [{"lr": 1e-4}]}],
        "lr_schedulers": [{"last_epoch": 3}],
        "loops": {"fit_loop": {"epoch_progress": 3}},
        "callbacks": {"ModelCheckpoint": {"best": 0.1}},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


def v1_checkpoint(algo, norm, path: Path, *, optimizer=None) -> Path:
    """What save_checkpoint wrote at format_version 1 (before upstream's layout), key for key."""
    ckpt = {
        "state_dict": {"model." + k: v.detach().clone() for k, v in algo.state_dict().items()},
        "hyper_parameters": {
            "model_config": algo.model_config(),
            "norm_stats_state": norm.to_state(),
            "format_version": 1,
        },
        "epoch": 1,
        "global_step": 12,
    }
    if optimizer is not None:
        ckpt["optimizer_states"] = [optimizer.state_dict()]
        ckpt["loops"] = {"windows": 3}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


def pin_of(path: Path) -> str:
    """The config pin a legacy Fold checkpoint must be started with (migrations.LEGACY_FOLD_TARGET)."""
    return sha256_of(model_config_of(load_checkpoint(path)))


def snapshot(*dirs: Path) -> dict:
    """Every file under dirs with (size, mtime_ns, inode, sha256): equal snapshots = nothing written."""
    out = {}
    for d in dirs:
        for p in sorted(d.rglob("*")):
            if p.is_file():
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns, st.st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.fixture
def fold():
    return build_algorithm("fold", seed=1)


def test_golden_legacy_migration(fold, tmp_path):
    source = legacy_checkpoint(fold, tmp_path / "src" / "fold_epoch3.ckpt")
    source_config = load_checkpoint(source)["hyper_parameters"]["config_tree"]["model"]["robomimic_model"]
    prepared = FoldAlgorithm.prepare_rollout_checkpoint(
        source, cache_dir=tmp_path / "cache", pin_config_sha256=pin_of(source)
    )
    assert not prepared.reused and prepared.rebuild_reason is None
    assert prepared.artifact_path.parent == tmp_path / "cache"
    assert prepared.artifact_path.name == f"fold_epoch3.rollout-fold-v1-{prepared.fingerprint[:16]}.ckpt"

    art = torch.load(prepared.artifact_path, weights_only=True)
    assert sorted(art) == ["epoch", "global_step", "hyper_parameters", "pytorch-lightning_version", "state_dict"]
    assert (art["epoch"], art["global_step"]) == (3, 133665)
    assert sorted(art["hyper_parameters"]) == ["config_tree", "format_version", "norm_stats_state"]
    assert art["hyper_parameters"]["format_version"] == FORMAT_VERSION
    assert art["hyper_parameters"]["config_tree"] == {
        "model": {"_target_": WRAPPER_TARGET, "robomimic_model": {**source_config, "_target_": FoldAlgorithm.target()}}
    }
    expected_sd = fold.state_dict()
    assert sorted(art["state_dict"]) == sorted("nets.policy." + k for k in expected_sd)
    for k, v in expected_sd.items():
        torch.testing.assert_close(art["state_dict"]["nets.policy." + k], v, rtol=0, atol=0)
    norm = art["hyper_parameters"]["norm_stats_state"]
    assert norm["embodiments"] == [3, 6] and sorted(norm["norm_stats"]) == [3, 6]
    assert norm["norm_stats"][3][STATE_KEY] == HUMAN_STATE.to_dict()  # 18 -> 3 kept its own stats
    assert norm["norm_stats"][6] == neutral_norm_stats().to_state()["norm_stats"][6]  # 8 -> 6

    marker = json.loads(prepared.marker_path.read_text())
    assert marker["migration"]["applied"] == [
        f"strip_orig_mod({len(expected_sd)} keys)",
        f"retarget(egomimic.pipeline.algo.PipelineAlgo -> {FoldAlgorithm.target()})",
        "remap_embodiment_ids(8->6, 18->3)",
        "drop_training_state",
    ]
    assert marker["migration"]["embodiment_remap"] == {"8": 6, "18": 3}
    assert marker["migration"]["dropped_keys"] == [
        "callbacks",
        "loops",
        "lr_schedulers",
        "optimizer_states",
        "hyper_parameters.data_schematic",
        "hyper_parameters.config_tree.trainer",
    ]
    assert marker["migration"]["source_model_config_sha256"] == sha256_of(source_config)
    assert marker["fingerprint"] == prepared.fingerprint and marker["compat_version"] == "fold-v1"
    assert marker["cache_version"] == cache_module.CACHE_VERSION
    assert marker["artifact_size"] == prepared.artifact_path.stat().st_size
    assert marker["source"]["path"] == str(source.resolve())
    assert prepared.artifact_path.stat().st_size < source.stat().st_size  # optimizer state gone

    # The migrated model runs and is the same network as the one that was saved.
    policy = make_policy(str(source), cache_dir=tmp_path / "cache", seed=2, pin_config_sha256=pin_of(source))
    assert policy.spec.family == "fold" and policy.spec.extra["cache"] == "reused"
    assert policy.spec.fingerprint == prepared.fingerprint
    assert policy.spec.extra["config_sha256"] == pin_of(source), "what the handshake reports is the pin"
    obs = make_observation()
    direct = fold.eval().create_rollout_policy(neutral_norm_stats(), fingerprint="x", seed=2).infer(obs)
    np.testing.assert_allclose(policy.infer(obs).left_pose, direct.left_pose, atol=1e-6)


def test_second_start_writes_nothing_and_source_is_untouched(fold, tmp_path):
    source = legacy_checkpoint(fold, tmp_path / "src" / "a.ckpt")
    cache = tmp_path / "cache"
    before_source = snapshot(source.parent)
    first = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin_of(source))
    assert snapshot(source.parent) == before_source  # first start: nothing next to the source
    cache_after_first = snapshot(cache)
    assert {Path(p).name for p in cache_after_first} == {
        first.artifact_path.name,
        first.marker_path.name,
        first.artifact_path.name + ".lock",
    }
    time.sleep(0.02)  # a rewrite would now get a different mtime
    second = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin_of(source))
    assert second.reused and second.artifact_path == first.artifact_path
    assert snapshot(cache) == cache_after_first
    assert snapshot(source.parent) == before_source
    policy = make_policy(
        str(source), cache_dir=cache, pin_config_sha256=pin_of(source)
    )  # the full start path also reuses
    assert policy.spec.extra["cache"] == "reused" and snapshot(cache) == cache_after_first


CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    import egomimic_policy.families.base as base
    from egomimic_policy.families import FoldAlgorithm
    source, cache, go, log = map(Path, sys.argv[1:5])
    pin = sys.argv[5]
    real = base.migrate_checkpoint
    def slow(ckpt, **kw):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(1.0)  # hold the lock long enough for the others to queue on it
        return real(ckpt, **kw)
    base.migrate_checkpoint = slow
    (Path(str(go) + f".ready.{os.getpid()}")).touch()
    while not go.exists():
        time.sleep(0.005)
    p = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin)
    print(json.dumps({"reused": p.reused, "artifact": str(p.artifact_path)}))
    """
)


def test_concurrent_starts_in_separate_processes_do_the_work_once(fold, tmp_path):
    source = legacy_checkpoint(fold, tmp_path / "src" / "a.ckpt")
    cache, go, log = tmp_path / "cache", tmp_path / "go", tmp_path / "builds.log"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(source), str(cache), str(go), str(log), pin_of(source)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.ready.*"))) < 3:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["reused"] for r in results) == [False, True, True]
    assert len({r["artifact"] for r in results}) == 1
    assert len(log.read_text().split()) == 1  # the migration ran in exactly one process
    assert FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin_of(source)).reused
    assert not list(cache.glob(".*.partial"))


@pytest.mark.parametrize(
    "damage", ["garbage marker", "truncated artifact", "foreign marker", "flipped byte", "no marker"]
)
def test_corrupt_or_mismatched_entry_is_rebuilt(fold, tmp_path, damage):
    source = legacy_checkpoint(fold, tmp_path / "src" / "a.ckpt")
    cache = tmp_path / "cache"
    first = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin_of(source))
    good = first.artifact_path.read_bytes()
    if damage == "garbage marker":
        first.marker_path.write_text("{not json")
    elif damage == "truncated artifact":
        first.artifact_path.write_bytes(good[: len(good) // 2])
    elif damage == "foreign marker":
        first.marker_path.write_text(json.dumps({**first.marker, "fingerprint": "0" * 64}))
    elif damage == "flipped byte":
        first.artifact_path.write_bytes(good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])
    else:
        first.marker_path.unlink()
    again = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin_of(source))
    assert not again.reused and again.rebuild_reason, again
    assert again.artifact_path.read_bytes() == good
    assert FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin_of(source)).reused


def test_changed_source_gets_a_new_entry(fold, tmp_path):
    source = legacy_checkpoint(fold, tmp_path / "src" / "a.ckpt")
    cache = tmp_path / "cache"
    first = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin_of(source))
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    second = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=pin_of(source))
    assert second.fingerprint != first.fingerprint and not second.reused


READ_ONLY_CHILD = textwrap.dedent(
    """
    import json, sys
    from egomimic_policy.families import make_policy
    from tests.unit.egomimic_policy.conftest import make_observation
    policy = make_policy(sys.argv[1], cache_dir=sys.argv[2], pin_config_sha256=sys.argv[3])
    chunk = policy.infer(make_observation())
    print(json.dumps({"rows": len(chunk), "cache": policy.spec.extra["cache"]}))
    """
)


def read_only_prefix() -> list[str]:
    """Command prefix under which file modes bind this process: root ignores them unless it
    drops CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (setpriv, util-linux)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only mode cannot be enforced")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def test_read_only_source_works(fold, tmp_path):
    source = save_checkpoint(tmp_path / "src" / "ro.ckpt", fold, neutral_norm_stats(), epoch=0, global_step=1)
    cache = tmp_path / "cache"
    os.chmod(source, 0o444)
    os.chmod(source.parent, 0o555)
    try:
        before = snapshot(source.parent)
        prefix = read_only_prefix()
        probe = subprocess.run(
            [*prefix, sys.executable, "-c", f"open({str(source.parent / 'x')!r}, 'w')"], capture_output=True, text=True
        )
        assert probe.returncode != 0 and "Permission denied" in probe.stderr  # the source dir really is read-only
        done = subprocess.run(
            [*prefix, sys.executable, "-c", READ_ONLY_CHILD, str(source), str(cache), pin_of(source)],
            capture_output=True,
            text=True,
            timeout=180,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"rows": 100, "cache": "built"}
        assert snapshot(source.parent) == before
        assert len(list(cache.glob("*.ckpt"))) == 1
    finally:
        os.chmod(source.parent, 0o755)


def test_pin_and_refusals_write_nothing(fold, tmp_path):
    cache = tmp_path / "cache"
    source = legacy_checkpoint(fold, tmp_path / "src" / "a.ckpt")
    config = load_checkpoint(source)["hyper_parameters"]["config_tree"]["model"]["robomimic_model"]
    with pytest.raises(CheckpointError, match="fingerprint mismatch"):
        FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256="ab" * 32)
    assert not list(cache.glob("*.ckpt"))
    pinned = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=cache, pin_config_sha256=sha256_of(config))
    assert pinned.marker["pin_config_sha256"] == sha256_of(config)

    cases = {
        "unknown_id": (legacy_checkpoint(fold, tmp_path / "bad" / "ids.ckpt", ids=(5, 18)), "legacy embodiment id 5"),
        "hpt": (
            legacy_checkpoint(fold, tmp_path / "bad" / "hpt.ckpt", target="egomimic.algo.hpt.HPT"),
            "HPT is not ported",
        ),
    }
    wrong_family = legacy_checkpoint(fold, tmp_path / "bad" / "pi.ckpt", target="egomimic.algo.pi.PI")
    for path, message in cases.values():
        with pytest.raises(CheckpointError, match=message):
            make_policy(str(path), cache_dir=tmp_path / "cache2", pin_config_sha256=pin_of(path))
    with pytest.raises(CheckpointError, match="not a 'egomimic_policy.families.fold.FoldAlgorithm'"):
        FoldAlgorithm.prepare_rollout_checkpoint(wrong_family, cache_dir=tmp_path / "cache2")
    with pytest.raises(Exception, match="PIConfig has no field|does not support"):
        PIAlgorithm.prepare_rollout_checkpoint(wrong_family, cache_dir=tmp_path / "cache2")
    missing = fold.state_dict()
    missing.pop("head.proj.weight")
    torch.save(
        {
            "state_dict": {"model." + k: v for k, v in missing.items()},
            "hyper_parameters": {
                "model_config": fold.model_config(),
                "format_version": 1,
                "norm_stats_state": neutral_norm_stats().to_state(),
            },
            "epoch": 0,
            "global_step": 0,
        },
        tmp_path / "bad" / "missing.ckpt",
    )
    with pytest.raises(CheckpointError, match=r"missing \['head.proj.weight'\]"):
        make_policy(str(tmp_path / "bad" / "missing.ckpt"), cache_dir=tmp_path / "cache2")
    (tmp_path / "bad" / "junk.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        make_policy(str(tmp_path / "bad" / "junk.ckpt"), cache_dir=tmp_path / "cache2")
    assert not list((tmp_path / "cache2").glob("*.ckpt"))


def test_current_format_checkpoint_keeps_current_ids(tmp_path):
    algo = build_algorithm("pi", seed=0)
    stats = neutral_norm_stats().to_state()["norm_stats"][6]
    norm = NormStats.from_state({"norm_mode": "quantile", "norm_stats": {6: stats, 3: stats}})
    path = save_checkpoint(tmp_path / "pi.ckpt", algo, norm, epoch=1, global_step=2)
    prepared = PIAlgorithm.prepare_rollout_checkpoint(path, cache_dir=tmp_path / "cache")
    assert prepared.marker["migration"]["applied"] == []  # nothing to migrate, nothing claimed
    art = load_checkpoint(prepared.artifact_path)
    assert sorted(art["hyper_parameters"]["norm_stats_state"]["norm_stats"]) == [3, 6]
    policy = make_policy(str(path), cache_dir=tmp_path / "cache", overrides={"flow_steps": 4})
    assert policy.algorithm.config.flow_steps == 4 and policy.spec.fingerprint != prepared.fingerprint
    with pytest.raises(Exception, match="cannot change on trained weights"):
        make_policy(str(path), cache_dir=tmp_path / "cache", overrides={"d_model": 128})


def test_a_legacy_fold_runs_only_pinned_and_the_refusal_gives_its_pin(fold, tmp_path):
    source = legacy_checkpoint(fold, tmp_path / "src" / "a.ckpt")
    with pytest.raises(CheckpointError, match=f"config_sha256:={pin_of(source)}"):
        make_policy(str(source), cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # refused before anything is written


def test_post_collapse_ids_without_format_version_are_taken_as_they_are(fold, tmp_path):
    """A checkpoint written after upstream collapsed its ids (eva_bimanual 6, human_bimanual 3)
    has no format_version but must not be remapped as legacy (nor refused)."""
    source = legacy_checkpoint(fold, tmp_path / "src" / "a.ckpt", ids=(6, 3))
    prepared = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=tmp_path / "cache")
    art = load_checkpoint(prepared.artifact_path)
    assert sorted(art["hyper_parameters"]["norm_stats_state"]["norm_stats"]) == [3, 6]
    assert prepared.marker["migration"]["embodiment_remap"] == {}


def test_save_checkpoint_writes_upstreams_layout(fold, tmp_path):
    opt = torch.optim.AdamW(fold.parameters(), lr=1e-3)
    path = save_checkpoint(
        tmp_path / "own.ckpt", fold, neutral_norm_stats(), epoch=2, global_step=9, optimizer=opt, loops={"w": 1}
    )
    ckpt = load_checkpoint(path)
    assert sorted(ckpt) == ["epoch", "global_step", "hyper_parameters", "loops", "optimizer_states", "state_dict"]
    assert sorted(ckpt["state_dict"]) == sorted("nets.policy." + k for k in fold.state_dict())
    hp = ckpt["hyper_parameters"]
    assert sorted(hp) == ["config_tree", "format_version", "norm_stats_state"] and hp["format_version"] == 2
    assert hp["config_tree"] == {"model": {"_target_": WRAPPER_TARGET, "robomimic_model": fold.model_config()}}
    assert hp["config_tree"]["model"]["robomimic_model"]["_target_"] == FoldAlgorithm.target()
    assert upgrade_layout(ckpt)[1] == []  # nothing to upgrade
    for k, v in fold.state_dict().items():
        assert torch.equal(model_state_dict(ckpt)[k], v)


def test_format_version_1_checkpoint_loads_through_the_migration(fold, tmp_path, caplog):
    """A checkpoint save_checkpoint wrote before upstream's layout (`model.`, model_config) runs as
    it did: the same chunk as the network in memory, the layout migrations named in the marker,
    the pin unchanged (the config dict is the same), the artifact in the current layout."""
    norm = neutral_norm_stats()
    opt = torch.optim.AdamW(fold.parameters(), lr=1e-3)
    source = v1_checkpoint(fold, norm, tmp_path / "src" / "v1.ckpt", optimizer=opt)
    assert pin_of(source) == sha256_of(fold.model_config())
    with caplog.at_level("INFO", logger="egomimic_policy.checkpoints.migrations"):
        policy = make_policy(str(source), cache_dir=tmp_path / "cache", seed=4)  # current ids: no pin needed
    assert "'model.' -> 'nets.policy.'" in caplog.text and "hyper_parameters.model_config ->" in caplog.text
    prepared = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=tmp_path / "cache")
    assert prepared.reused and policy.spec.fingerprint == prepared.fingerprint
    migration = prepared.marker["migration"]
    assert migration["applied"] == [
        f"rename_model_prefix({len(fold.state_dict())} keys)",
        "relocate_model_config",
        "drop_training_state",
    ]
    assert migration["embodiment_remap"] == {} and migration["dropped_keys"] == ["loops", "optimizer_states"]
    art = load_checkpoint(prepared.artifact_path)
    assert all(k.startswith("nets.policy.") for k in art["state_dict"])
    assert art["hyper_parameters"]["config_tree"]["model"]["robomimic_model"] == fold.model_config()
    assert art["hyper_parameters"]["format_version"] == FORMAT_VERSION
    obs = make_observation()
    direct = fold.eval().create_rollout_policy(norm, fingerprint="x", seed=4).infer(obs)
    chunk = policy.infer(obs)
    np.testing.assert_array_equal(chunk.left_pose, direct.left_pose)
    np.testing.assert_array_equal(chunk.right_gripper, direct.right_gripper)


def test_round_trip_new_layout_cache_policy_is_the_algorithm(fold, tmp_path):
    """save_checkpoint -> prepared cache -> policy: the artifact has the source's layout and
    tensors, and the policy's chunk is bit for bit the in-memory algorithm's."""
    stats = neutral_norm_stats().to_state()["norm_stats"][6]
    norm = NormStats.from_state({"norm_mode": "quantile", "norm_stats": {6: stats, 3: stats}})
    source = save_checkpoint(tmp_path / "run" / "last.ckpt", fold, norm, epoch=1, global_step=2)
    policy = make_policy(str(source), cache_dir=tmp_path / "cache", seed=7)
    prepared = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=tmp_path / "cache")
    assert prepared.reused and prepared.marker["migration"]["applied"] == []
    src, art = load_checkpoint(source), load_checkpoint(prepared.artifact_path)
    assert art["hyper_parameters"] == src["hyper_parameters"]
    assert sorted(art["state_dict"]) == sorted(src["state_dict"])
    assert all(torch.equal(art["state_dict"][k], v) for k, v in src["state_dict"].items())
    obs = make_observation(stamp_ns=5)
    direct = fold.eval().create_rollout_policy(norm, fingerprint="in-memory", seed=7)
    for _ in range(2):  # the sampler's generator advances alike
        a, b = policy.infer(obs), direct.infer(obs)
        for field in ("left_pose", "right_pose", "left_gripper", "right_gripper"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_an_entry_of_another_cache_version_is_prepared_again(fold, tmp_path, monkeypatch):
    """An artifact written in another layout is never misread: the cache version is part of the
    fingerprint, so the entry of the other version is not even looked at."""
    source = save_checkpoint(tmp_path / "src" / "a.ckpt", fold, neutral_norm_stats(), epoch=0, global_step=1)
    monkeypatch.setattr(cache_module, "CACHE_VERSION", cache_module.CACHE_VERSION - 1)
    old = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=tmp_path / "cache")
    monkeypatch.undo()
    new = FoldAlgorithm.prepare_rollout_checkpoint(source, cache_dir=tmp_path / "cache")
    assert not new.reused and new.artifact_path != old.artifact_path and new.fingerprint != old.fingerprint
    assert old.artifact_path.exists()  # left for the code that wrote it


def test_upgrade_layout_refuses_twins_and_conflicting_configs(fold):
    sd = {"model.a": torch.zeros(1), "nets.policy.a": torch.ones(1)}
    base = {"hyper_parameters": {"norm_stats_state": {}}, "epoch": 0, "global_step": 0}
    with pytest.raises(CheckpointError, match="both 'model.' and 'nets.policy.'"):
        upgrade_layout({**base, "state_dict": sd})
    hp = {"model_config": fold.model_config(), "config_tree": {"model": {"robomimic_model": {"_target_": "x"}}}}
    with pytest.raises(CheckpointError, match="they differ"):
        upgrade_layout({**base, "state_dict": {}, "hyper_parameters": hp})
    ckpt = {**base, "state_dict": {"model.a": torch.zeros(1)}, "hyper_parameters": {"model_config": {"_target_": "x"}}}
    before = {k: dict(v) if isinstance(v, dict) else v for k, v in ckpt.items()}
    upgraded, applied = upgrade_layout(ckpt)
    assert applied == ["rename_model_prefix(1 keys)", "relocate_model_config"]
    assert list(upgraded["state_dict"]) == ["nets.policy.a"] and model_config_of(upgraded) == {"_target_": "x"}
    assert ckpt.keys() == before.keys() and list(ckpt["state_dict"]) == ["model.a"]  # input untouched
    assert "model_config" in ckpt["hyper_parameters"]


@pytest.mark.parametrize("damage", ["empty", "truncated", "random bytes", "a directory"])
def test_a_damaged_checkpoint_is_one_line_naming_the_file(tmp_path, damage):
    path = tmp_path / "model.ckpt"
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        torch.save({"state_dict": {"w": torch.zeros(1000)}, "hyper_parameters": {}}, path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(5000))
    else:
        path.mkdir()
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message and len(message) < 400, message


CACHE_WRITE_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    from egomimic_policy.checkpoints import CheckpointError
    from egomimic_policy.families import FoldAlgorithm
    if sys.argv[3] == "fsize":  # the file-size limit makes writes fail as a full disk does (EFBIG, not SIGXFSZ)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    try:
        FoldAlgorithm.prepare_rollout_checkpoint(sys.argv[1], cache_dir=sys.argv[2])
    except CheckpointError as exc:
        print(exc)
        sys.exit(3)
    """
)


@pytest.mark.parametrize("how", ["fsize", "read_only"])
def test_a_cache_that_cannot_be_written_is_one_line_and_leaves_nothing(fold, tmp_path, how):
    """A full disk (a file-size limit stands in: the same failed write, without a small
    filesystem to mount) and a read-only cache directory each give one CheckpointError line
    naming the cache, and leave neither a partial artifact nor a marker behind."""
    source = save_checkpoint(tmp_path / "src" / "w.ckpt", fold, neutral_norm_stats(), epoch=0, global_step=1)
    cache = tmp_path / "cache"
    cache.mkdir()
    prefix = []
    if how == "read_only":
        os.chmod(cache, 0o555)
        prefix = read_only_prefix()
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", CACHE_WRITE_CHILD, str(source), str(cache), how],
            capture_output=True,
            text=True,
            timeout=180,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
    finally:
        os.chmod(cache, 0o755)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr[-2000:])
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and str(cache) in lines[0], lines
    if how == "fsize":
        assert "cannot write the prepared checkpoint" in lines[0] and "MB free" in lines[0], lines
    else:
        assert "Permission denied" in lines[0], lines
    assert "Traceback" not in done.stderr
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []
