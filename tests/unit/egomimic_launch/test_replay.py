"""The replay regression on the shipped fixture bags (tests/fixtures/bags, recorded from the sim
graph by `make replay-fixtures`): identical on the code that recorded them, and a changed gate
limit is caught with a diff that names the first decision that differs. No DDS: the bag's inputs
go through the gate node's own conversions and SafetyGate in process, on the bag's clock."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from egomimic_data.bags import BagError, open_reader, select
from egomimic_launch import bag_cli
from egomimic_launch.replay import PARAMS_FILE, configs_from_params, gate_params, replay
from egomimic_nodes import topics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bags"


def test_the_nominal_run_replays_identically():
    report = replay(FIXTURES / "nominal")
    assert report.ok, report.text()
    states = [t.state for t in report.recorded.transitions]
    assert states[:3] == ["DISARMED", "ARMING", "ARMED"], states
    forwarded = [v for v in report.replayed.verdicts if v.forwarded]
    assert len(forwarded) >= 100, f"only {len(forwarded)} commands forwarded: not a run of the armed graph"
    assert sum(v.forwarded for v in report.recorded.verdicts) == len(forwarded)
    assert report.replayed.poses_compared >= 200, "ee_pose -> ee_pose_dataset compared over the run"
    assert "identical" in report.text()


def test_the_frozen_camera_run_replays_identically_with_its_hold():
    report = replay(FIXTURES / "frozen_camera")
    assert report.ok, report.text()
    path = [(t.state, t.reason) for t in report.replayed.transitions]
    assert path[2:] == [("ARMED", ""), ("HOLD", "STALE_CAMERA"), ("ESTOP", "ESTOP")], path  # ESTOP: the gate's exit
    hold = report.replayed.transitions[3]
    assert "left_wrist" in hold.detail, hold
    armed = [v for v in report.replayed.verdicts if v.forwarded]
    assert len(armed) >= 30 and armed[-1].at_s < hold.at_s, "the fault comes after armed motion"
    after = [v for v in report.replayed.verdicts if v.at_s > hold.at_s]
    assert after and not any(v.forwarded for v in after), "nothing forwarded once HOLD latched"


def test_a_flipped_limit_fails_with_a_diff_naming_the_first_differing_decision():
    report = replay(FIXTURES / "nominal", overrides={"max_translation_step_m": 0.001})
    assert not report.ok
    text = report.text()
    first = min(report.differences, key=lambda d: d.at_s)
    lines = text.splitlines()
    assert lines[1].startswith(f"{len(report.differences)} difference(s); first at {first.at_s:.3f} s")
    assert lines[2].strip() == first.text, "the first difference comes first"
    assert "TRANSLATION_JUMP" in first.text and "recorded" in first.text and "replayed" in first.text, text


def test_a_changed_frame_conversion_is_caught(monkeypatch):
    """The dataset -> hardware rotation transposed the wrong way (the bug that stopped the first
    rollout): every converted command and observed pose differs from the recording."""
    from egomimic_hw import frames
    from egomimic_nodes import frames_node

    monkeypatch.setattr(frames_node, "pose_hw_from_ds", frames.pose_ds_from_hw)
    monkeypatch.setattr(frames_node, "pose_ds_from_hw", frames.pose_hw_from_ds)
    report = replay(FIXTURES / "nominal")
    assert not report.ok
    texts = [d.text for d in report.differences]
    assert any(t.startswith("frames: command/proposed #0 differs") for t in texts), texts[:3]
    assert any("ee_pose_dataset differs" in t for t in texts), texts[:3]


def _with_policy_params(tmp_path, fixture: str = "nominal", **changes) -> Path:
    """A copy of a fixture whose replay.yaml gives the policy node other parameters."""
    import shutil

    import yaml

    bag = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, bag)
    data = yaml.safe_load((bag / PARAMS_FILE).read_text())
    data["/**/policy"]["ros__parameters"].update(changes)
    (bag / PARAMS_FILE).write_text(yaml.safe_dump(data))
    return bag


def test_the_policy_stage_recomputes_every_chunk_and_action():
    report = replay(FIXTURES / "nominal")
    assert report.ok, report.text()
    assert not report.policy.skipped, report.policy.skipped
    assert report.policy.chunks >= 3 and report.policy.actions >= 100, report.policy
    assert report.policy.actions == len(report.recorded.verdicts), "every recorded action re-executed"


def test_a_changed_policy_or_executor_parameter_is_caught(tmp_path):
    report = replay(_with_policy_params(tmp_path / "a", **{"scripted.radius_m": 0.05}))
    assert not report.ok
    first = min(report.differences, key=lambda d: d.at_s)
    assert first.text.startswith("policy: "), report.text()
    chunks = [d.text for d in report.differences if d.text.startswith("policy: chunk")]
    # Chunk 1 answered a query made before the gate was ARMED: it holds the measured pose
    # (scripted.ClockDriven), whatever the radius; every chunk of the motion differs.
    assert chunks and chunks[0].startswith("policy: chunk 2 differs"), report.text()
    assert len(chunks) == report.policy.chunks - 1, report.text()
    report = replay(_with_policy_params(tmp_path / "b", **{"executor.commit_rows": 3}))  # the same chunks, cut short
    assert not report.ok
    assert any(d.text.startswith("policy: action at") for d in report.differences), report.text()
    assert not any(d.text.startswith("policy: chunk") for d in report.differences), "the chunks are the same"


def test_the_model_run_replays_identically_from_its_camera_frames():
    """`make run`'s default policy (the shipped checkpoint) recomputed from the recorded frames and
    arm state: every chunk and action within MODEL_TOLERANCE, every gate decision identical."""
    report = replay(FIXTURES / "model_nominal")
    assert report.ok, report.text()
    assert not report.policy.skipped, report.policy.skipped
    assert report.policy.chunks >= 5 and report.policy.actions >= 100, report.policy
    assert report.policy.actions == len(report.recorded.verdicts), "every recorded action re-executed"
    assert sum(v.forwarded for v in report.replayed.verdicts) >= 100


def test_a_model_change_or_other_frames_are_caught(tmp_path, monkeypatch):
    """Another sampler seed moves the first chunk; so do other camera frames (a black right wrist
    image): the model stage reads the recorded frames, not only the arm state."""
    monkeypatch.chdir(FIXTURES.parents[2])  # the copy's checkpoint path is the repository's
    report = replay(_with_policy_params(tmp_path, "model_nominal", seed=1))
    assert not report.ok
    texts = [d.text for d in report.differences]
    assert any(t.startswith("policy: chunk 1 differs from the recording: poses by") for t in texts), report.text()
    assert all(t.startswith("policy: ") for t in texts), "the gate is fed the recorded actions: only the policy differs"
    assert "the closest of" in texts[-1] or "differs" in texts[-1]

    from egomimic_launch import replay_policy

    recorded = replay_policy.image_to_array

    def black_right_wrist(msg):
        rgb = recorded(msg)
        return np.zeros_like(rgb) if msg.header.frame_id.startswith("right_wrist") else rgb

    monkeypatch.setattr(replay_policy, "image_to_array", black_right_wrist)
    report = replay(FIXTURES / "model_nominal")
    assert any(d.text.startswith("policy: chunk 1 differs") for d in report.differences), report.text()


def test_a_model_is_replayed_only_with_its_frames_and_its_checkpoint(tmp_path, monkeypatch):
    from egomimic_launch.replay_policy import checkpoint_path

    repo = FIXTURES.parents[2]
    with monkeypatch.context() as m:
        m.chdir(tmp_path)  # not found from here: from the bag's directory upwards
        assert checkpoint_path("policies/sim_box_grasp.ckpt", FIXTURES / "model_nominal") == (
            repo / "policies" / "sim_box_grasp.ckpt"
        )
        assert checkpoint_path("policies/sim_box_grasp.ckpt") is None
    assert [checkpoint_path(v) for v in ("scripted", "expert", "tcp://127.0.0.1:5555", "fold", "")] == [None] * 5
    monkeypatch.chdir(repo)
    report = replay(_with_policy_params(tmp_path / "a", policy="policies/sim_box_grasp.ckpt"))
    assert report.ok and "holds none of their frames" in report.policy.skipped, report.policy
    report = replay(_with_policy_params(tmp_path / "b", policy="tcp://127.0.0.1:5555"))
    assert report.ok and "is not replayed" in report.policy.skipped, report.policy


def test_a_refused_arm_request_and_a_deferral_say_why():
    """A camera age limit under the cameras' period: the recorded arm request is refused in the
    replay, and the diff says with what reason."""
    report = replay(FIXTURES / "nominal", overrides={"max_camera_age_s": 0.005})
    texts = [d.text for d in report.differences]
    assert texts and texts[0].startswith("gate: the recorded arm request was refused: cannot arm: camera"), texts[:3]


def test_the_cli_exits_0_when_identical_and_3_with_the_diff(capsys):
    assert bag_cli.main(["regress", str(FIXTURES / "nominal")]) == 0
    assert "identical" in capsys.readouterr().out
    assert bag_cli.main(["regress", str(FIXTURES / "nominal"), "--set", "max_translation_step_m=0.001"]) == 3
    out = capsys.readouterr().out
    assert "difference(s); first at" in out and "TRANSLATION_JUMP" in out


def test_a_bag_without_gate_parameters_or_topics_is_refused(tmp_path, capsys):
    bare = tmp_path / "bare"
    select(FIXTURES / "nominal", bare, [topics.SAFETY_STATUS.resolve("eva")])
    with pytest.raises(BagError, match="no gate parameters"):
        replay(bare)
    (bare / PARAMS_FILE).write_text((FIXTURES / "nominal" / PARAMS_FILE).read_text())
    with pytest.raises(BagError, match="lacks"):
        replay(bare)
    assert bag_cli.main(["regress", str(bare)]) == 1
    assert "lacks" in capsys.readouterr().err


def test_select_keeps_types_hashes_and_counts(tmp_path):
    source = open_reader(FIXTURES / "nominal")
    original = {c.topic: (c.msgtype, c.digest, c.msgcount) for c in source.connections}
    source.close()
    topic = topics.JOINT_STATES.resolve("eva", arm="left")
    counts = select(FIXTURES / "nominal", tmp_path / "one", [topic])
    copy = open_reader(tmp_path / "one")
    assert {c.topic: (c.msgtype, c.digest, c.msgcount) for c in copy.connections} == {topic: original[topic]}
    copy.close()
    assert counts == {topic: original[topic][2]}
    with pytest.raises(BagError, match="exists"):
        select(FIXTURES / "nominal", tmp_path / "one", [topic])
    # keep(): only the messages it accepts (the model fixture keeps the frames near its queries)
    first_ns = next(t for _c, t, _raw in open_reader(FIXTURES / "nominal").messages())
    cut = first_ns + 2_000_000_000
    counts = select(FIXTURES / "nominal", tmp_path / "two", [topic], keep=lambda _topic, t, _raw: t < cut)
    assert 0 < counts[topic] < original[topic][2]
    kept = open_reader(tmp_path / "two")
    assert all(t < cut for _c, t, _raw in kept.messages())
    kept.close()


def test_gate_parameters_are_checked_as_the_node_checks_them():
    params = gate_params(FIXTURES / "nominal" / PARAMS_FILE)
    config, node = configs_from_params(params)
    assert config.required_cameras and node.watchdog_rate_hz > 0
    with pytest.raises(BagError, match="unknown"):
        configs_from_params({**params, "max_translation_stp_m": 0.1})
    with pytest.raises(BagError, match="outside"):
        configs_from_params({**params, "max_translation_step_m": 5.0})
    assert configs_from_params({**params, "command_timeout_s": 1})[0].command_timeout_s == 1.0
