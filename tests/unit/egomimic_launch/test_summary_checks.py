"""The run summary's verdict: REQUIRED checks decide it, a RATE check that fails is a WARN (a
measurement of the machine), an OUTCOME check (a learned policy's grasp) is PASS or MISS and
decides nothing."""

from egomimic_hw.description import ARMS
from egomimic_launch.summary import OUTCOME, RATE, REQUIRED, judge, learned_policy
from egomimic_nodes import topics

LEFT_STATE = topics.JOINT_STATES.resolve("eva", arm=ARMS[0])


def test_a_missed_grasp_and_a_slow_stream_leave_the_loop_verdict_to_the_required_checks():
    checks = [
        ("joint commands applied by driver_left (10)", True, REQUIRED),
        (f"{LEFT_STATE} at 100 Hz (+-5 %)", False, RATE),
        ("the policy grasps the box (seed 1004)", False, OUTCOME),
    ]
    lines, verdict, rates_nominal = judge(checks)
    assert verdict and not rates_nominal
    assert lines == [
        "  [PASS] joint commands applied by driver_left (10)",
        f"  [WARN] {LEFT_STATE} at 100 Hz (+-5 %)",
        "  [MISS] the policy grasps the box (seed 1004)",
    ]


def test_a_failed_required_check_fails_the_verdict_whatever_the_others():
    lines, verdict, rates_nominal = judge(
        [("safety gate armed and never held", False, REQUIRED), ("grasp", True, OUTCOME)]
    )
    assert not verdict and rates_nominal and lines[0] == "  [FAIL] safety gate armed and never held"


def test_which_policies_are_learned():
    assert [learned_policy(p) for p in ("fold", " /ckpt/last.ckpt ", "tcp://127.0.0.1:5555")] == [True] * 3
    assert [learned_policy(p) for p in (None, "", "none", "scripted", " expert ")] == [False] * 5
