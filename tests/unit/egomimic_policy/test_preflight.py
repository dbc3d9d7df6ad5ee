"""policy:= checked before anything starts (issue 18): a checkpoint path that is missing, empty,
truncated or random bytes, or whose cache cannot be written, is one line; keywords and tcp://
addresses pass (they are built by the node)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from egomimic_policy.checkpoints import save_checkpoint
from egomimic_policy.families import build_algorithm
from egomimic_policy.features import neutral_norm_stats
from egomimic_policy.loading import preflight


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "fold.ckpt"
    return save_checkpoint(path, build_algorithm("fold", seed=1), neutral_norm_stats(), epoch=0, global_step=1)


@pytest.mark.parametrize("value", ["scripted", "expert", "fold", "pi", "moe", "none", "tcp://10.0.0.5:5555"])
def test_keywords_and_servers_pass(value):
    assert preflight(value) is None


def test_a_readable_checkpoint_with_a_writable_cache_passes(good, tmp_path):
    assert preflight(str(good), cache_dir=tmp_path / "cache") is None


def damaged(kind: str, good, tmp_path):
    path = tmp_path / f"{kind}.ckpt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "random":
        path.write_bytes(np.random.default_rng(0).bytes(100_000))
    elif kind == "directory":
        path.mkdir()
    return path


@pytest.mark.parametrize("kind", ["missing", "empty", "truncated", "random", "directory"])
def test_a_bad_checkpoint_is_one_line_naming_it(kind, good, tmp_path):
    path = damaged(kind, good, tmp_path)
    why = preflight(str(path), cache_dir=tmp_path / "cache")
    assert why is not None and why.startswith(f"policy:={path}") and "\n" not in why, why


def test_a_cache_that_cannot_be_written_is_one_line(good, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    why = preflight(str(good), cache_dir=blocker / "cache")
    assert why is not None and "cannot be written" in why and "not a directory" in why, why


def test_the_launcher_refuses_a_truncated_checkpoint_before_any_node_starts(good, tmp_path):
    path = damaged("truncated", good, tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "egomimic_launch.cli", "eva_bimanual.launch.py", f"policy:={path}", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, ROS_DOMAIN_ID="231"),
    )
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"egomimic-launch: policy:={path}"), out.stderr
    assert "[launch]" not in out.stdout, "nothing started"


def test_a_cache_without_room_for_the_prepared_checkpoint_is_one_line(good, tmp_path, monkeypatch):
    """A full disk made the policy node die in torch's writer after the drivers had started; the
    launcher now refuses first. (The write failure itself is tested for real in test_checkpoints.)"""
    import shutil
    from types import SimpleNamespace

    monkeypatch.setattr(shutil, "disk_usage", lambda _p: SimpleNamespace(total=10**9, used=10**9, free=1000))
    why = preflight(str(good), cache_dir=tmp_path / "cache")
    assert why is not None and "MB free" in why and "needs about" in why, why
