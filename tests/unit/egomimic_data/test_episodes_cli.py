"""`egomimic-episodes list|check|repair`: what each prints, its exit codes (0 fine, 1 a problem,
2 bad usage), and that it runs as a console script and with `python -m`."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import zarr

from egomimic_data.episode_format import EpisodeMeta, EpisodeWriter
from egomimic_data.episodes_cli import main
from egomimic_hw.description import CAMERAS

from .test_upstream_interchange import image, project_calibration, upstream_data, values
from .upstream_reference import pinhole_block, write_like_upstream

REPO = Path(__file__).resolve().parents[3]
W, H = 64, 48


def write(path, n, *, status: str | None = "complete") -> EpisodeWriter:
    meta = EpisodeMeta(task_name="cli", image_width=W, image_height=H, calibration=project_calibration())
    w = EpisodeWriter(path, meta, block_steps=10)
    for t in range(n):
        w.add(1_700_000_000_000_000_000 + t * 33_333_333, {c: image(t, c) for c in CAMERAS}, values(t))
    if status is not None:
        w.close(status)
    return w


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(map(str, argv)))
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture
def episodes(tmp_path):
    d = tmp_path / "episodes"
    d.mkdir()
    write(d / "2026-01-01-00-00-00-000000.zarr", 30)
    write(d / "2026-01-01-00-01-00-000000.zarr", 12, status="partial")
    w = write(d / "2026-01-01-00-02-00-000000.zarr", 25, status=None)
    del w  # dropped unclosed: what a SIGKILL leaves (test_crash_safety does it for real)
    numeric, images = upstream_data(20)
    write_like_upstream(
        d / "upstream.zarr",
        numeric,
        images,
        attrs={"calibration": pinhole_block(dict.fromkeys(CAMERAS, (W, H)), fx=40.0)},
    )
    (d / "notes.txt").write_text("not an episode")
    return d


def test_list_names_status_frames_duration_cameras_and_size(capsys, episodes):
    code, out = run(capsys, "list", episodes)
    assert code == 0, out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:5]}
    assert rows["2026-01-01-00-00-00-000000.zarr"][1:5] == ["complete", "30", "1.0", "s"]
    assert rows["2026-01-01-00-01-00-000000.zarr"][1:3] == ["partial", "12"]
    assert rows["2026-01-01-00-02-00-000000.zarr"][1:3] == ["partial", "20"]  # the 2 committed blocks
    assert rows["upstream.zarr"][1:3] == ["complete", "20"]
    assert rows["upstream.zarr"][-1] == ",".join(CAMERAS) and rows["upstream.zarr"][-2] == "kB"
    assert "2026-01-01-00-02-00-000000.zarr: never closed (writer died): run `egomimic-episodes repair`" in out
    assert out.splitlines()[-1] == "4 episode(s): 2 complete, 2 partial"


def test_list_reports_a_live_recording_and_an_unreadable_store(capsys, episodes):
    live = write(episodes / "2026-01-01-00-03-00-000000.zarr", 15, status=None)
    zarr.open_group(str(episodes / "broken.zarr"), mode="w", zarr_format=3)  # a group, not an episode
    code, out = run(capsys, "list", episodes)
    assert code == 1, out  # an unreadable store is a problem
    assert "2026-01-01-00-03-00-000000.zarr  recording" in out
    assert "broken.zarr: " in out and "neither total_frames" in out
    live.close()
    assert run(capsys, "list", episodes / "missing")[0] == 2


def test_check_passes_good_episodes_and_names_each_problem(capsys, episodes):
    good = episodes / "2026-01-01-00-00-00-000000.zarr"
    code, out = run(capsys, "check", good, episodes / "upstream.zarr")
    assert code == 0, out
    assert f"OK   {good}: complete, 30 frames" in out and "2 of 2 episode(s) pass" in out

    group = zarr.open_group(str(good), mode="r+", zarr_format=3)
    group.attrs.update({"fps": 30.0, "total_frames": 29, "schema_version": "v9"})
    features = dict(group.attrs["features"])
    del features["left.obs_joints"]
    group.attrs["features"] = features
    del group["right.obs_gripper"]
    code, out = run(capsys, "check", good)
    assert code == 1 and f"FAIL {good}" in out
    for problem in (
        "attribute fps must be an int >= 1 (upstream's schema), got 30.0",
        "total_frames 29 differs from the commit marker 30",
        "schema_version 'v9' is not one of ['v3.0', 'v3.1']",
        "features has no {dtype, shape, names} entry for array left.obs_joints",
        "right.obs_gripper is missing (upstream requires it for a parallel-jaw arm)",
    ):
        assert f"  error: {problem}" in out, (problem, out)


def test_check_strict_turns_warnings_into_failures(capsys, episodes):
    partial = episodes / "2026-01-01-00-01-00-000000.zarr"
    code, out = run(capsys, "check", partial)
    assert code == 0 and "warning: data_status is 'partial'" in out
    code, out = run(capsys, "check", "--strict", partial)
    assert code == 1 and "error: data_status is 'partial'" in out
    assert run(capsys, "check", episodes / "nope.zarr")[0] == 2


def test_repair_dry_run_then_repair_then_nothing_to_do(capsys, episodes):
    crashed = episodes / "2026-01-01-00-02-00-000000.zarr"
    code, out = run(capsys, "check", crashed)
    assert code == 1 and "never closed (its writer died)" in out
    code, out = run(capsys, "repair", "--dry-run", crashed)
    assert code == 0 and f"{crashed}: would:" in out and "data_status 'recording' -> 'partial'" in out
    assert zarr.open_group(str(crashed), mode="r").attrs["data_status"] == "recording"  # unchanged
    code, out = run(capsys, "repair", crashed)
    assert code == 0 and "-> finalized as partial with 20 frames" in out
    code, out = run(capsys, "repair", crashed)
    assert code == 0 and "already final: partial, 20 frames; nothing to do" in out
    assert run(capsys, "check", crashed)[0] == 0
    code, out = run(capsys, "repair", episodes / "upstream.zarr")
    assert code == 0 and "no commit marker" in out


def test_repair_refuses_a_live_recording_and_a_non_episode(capsys, episodes):
    live_path = episodes / "2026-01-01-00-04-00-000000.zarr"
    live = write(live_path, 15, status=None)
    try:
        code, out = run(capsys, "repair", live_path)
        assert code == 1 and "refused: " in out and "live writer" in out
        assert zarr.open_group(str(live_path), mode="r").attrs["data_status"] == "recording"
    finally:
        live.close()
    assert run(capsys, "repair", episodes / "notes.txt")[0] == 2


def test_help_usage_errors_console_script_and_python_m(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "examples:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["egomimic-episodes"] == "egomimic_data.episodes_cli:main"
    done = subprocess.run(
        [sys.executable, "-m", "egomimic_data.episodes_cli", "repair", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "--dry-run" in done.stdout


def test_an_episode_closed_without_frames_lists_and_fails_check(capsys, tmp_path):
    path = tmp_path / "empty.zarr"
    write(path, 0)
    code, out = run(capsys, "list", tmp_path)
    assert code == 0 and out.splitlines()[1].split()[:3] == ["empty.zarr", "complete", "0"]
    code, out = run(capsys, "check", path)
    assert code == 1 and "attribute total_frames must be an int >= 1, got 0" in out  # upstream's min 1
    assert zarr.open_group(str(path), mode="r")["left.obs_ee_pose"].shape == (0, 7)
