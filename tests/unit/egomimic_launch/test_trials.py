"""The trial runner's argument and report (the runner itself runs in test_sim_graph)."""

import json

import pytest

from egomimic_launch.trials import TrialResult, TrialsReport, parse_seeds


def test_seeds_are_a_range_or_a_list_and_nothing_else():
    assert parse_seeds("100:103") == [100, 101, 102]
    assert parse_seeds("3, 5,9") == [3, 5, 9]
    for bad in ("", "5:5", "a:b", "-1,2", "3;4"):
        with pytest.raises(ValueError, match="--trials"):
            parse_seeds(bad)


def test_the_report_counts_successes_and_keeps_every_trial(tmp_path):
    report = TrialsReport(
        "expert",
        [
            TrialResult(7, True, "success", success_after_s=7.4, final_errors_mm={"left": 0.4, "right": 0.3}),
            TrialResult(8, False, "hold: TRANSLATION_JUMP: left: 23 mm", forwarded=12, rejected=1),
            TrialResult(9, False, "not armed: arming failed: left: 0.110 m from the measured pose"),
        ],
    )
    assert report.successes == 1
    lines = report.lines()
    assert lines[0] == "[trials] policy expert: 1/3 succeeded"
    assert "seed    8: hold: TRANSLATION_JUMP" in lines[2] and "rejected 1" in lines[2]
    report.write(tmp_path / "t.json")
    body = json.loads((tmp_path / "t.json").read_text())
    assert body["seeds"] == [7, 8, 9] and body["successes"] == 1 and body["success_rate"] == pytest.approx(1 / 3)
    assert body["results"][2]["outcome"].startswith("not armed")
