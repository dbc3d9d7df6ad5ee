"""The run summary's verdict: REQUIRED checks decide it, a RATE check that fails is a WARN (a
measurement of the machine), an OUTCOME check (a learned policy's grasp) is PASS or MISS and
decides nothing."""

import threading
import time

from egomimic_hw.description import ARMS
from egomimic_launch.observer import GraphObserver
from egomimic_launch.stats import StreamAccumulator
from egomimic_launch.summary import OUTCOME, RATE, REQUIRED, gate_lines, hold_look_back_lines, judge, learned_policy
from egomimic_msgs.msg import GateStatus
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


class _Observer:
    """What the summary's look back reads of egomimic_launch.observer.GraphObserver."""

    hold_look_back = GraphObserver.hold_look_back
    look_back_at_hold = GraphObserver.look_back_at_hold

    def __init__(self, first_hold_s):
        self.lock = threading.Lock()
        self.first_hold_s, self.before_hold = first_hold_s, None
        self.streams = {ACTION: StreamAccumulator(ACTION, 30.0), PROPOSED: StreamAccumulator(PROPOSED, 30.0)}


ACTION, PROPOSED = topics.POLICY_ACTION.resolve("eva"), topics.COMMAND_PROPOSED.resolve("eva")


def test_the_summary_shows_which_writer_stalled_before_the_first_hold():
    """The policy wrote on time; the frames node wrote nothing in the 0.3 s before the HOLD and
    then what it held 105+ ms late: the look back names the hop, by the writers' clocks."""
    hold = time.time() - 1.0
    o = _Observer(hold)
    for k in range(60):  # 2 s of ticks up to 0.1 s after the HOLD
        stamp = hold - 1.9 + k / 30
        o.streams[ACTION].add(stamp + 0.004, 0.004, stamp + 0.002)
        proposed_at = stamp + 0.003 if stamp < hold - 0.4 else hold + 0.05  # frames stopped 0.4 s before
        o.streams[PROPOSED].add(proposed_at + 0.001, proposed_at + 0.001 - stamp, proposed_at)
    lines = hold_look_back_lines(o)
    assert lines[0].startswith("the 1 s before the first HOLD")
    action, proposed = (next(line.split() for line in lines if name in line) for name in (ACTION, PROPOSED))
    assert action[1:6] == ["30", "silent", "33.3", "ms", "written"] and action[6] == "2.0"
    # the last one written on time was stamped 0.433 s before the HOLD and written 3 ms later
    assert proposed[1:6] == ["18", "silent", "430.3", "ms", "written"] and proposed[6] == "3.0"
    assert o.before_hold is not None and hold_look_back_lines(o) == lines  # taken once


def test_no_hold_no_look_back():
    assert hold_look_back_lines(_Observer(None)) == []


def _status(**fields):
    msg = GateStatus(state=GateStatus.DISARMED, forwarded=555, detail="disarmed by operator")
    msg.reason_codes, msg.reason_counts = ["STALE_CAMERA"], [1]
    for k, v in fields.items():
        setattr(msg, k, v)
    return msg


def test_the_gate_lines_say_what_it_deferred_only_when_it_deferred():
    quiet = gate_lines(_status(), {"deferred": "0"}, gate_dead=False)
    assert quiet == [
        "safety gate: final state DISARMED; forwarded 555, rejected 0, clamped 0; reasons: STALE_CAMERA=1",
        "             last detail: disarmed by operator",
    ]
    diag = {"deferred": "7", "deferral_runs": "3", "deferral_run_max_ms": "26.0", "last_deferral": "command arrived"}
    busy = gate_lines(_status(), diag, gate_dead=False)
    assert busy[:2] == quiet and busy[2].startswith("             deferred 7 ") and "the longest 26.0 ms" in busy[2]
    assert gate_lines(_status(), {}, gate_dead=True)[0].startswith(
        "safety gate: last status before the gate process died"
    )
    assert gate_lines(None, diag, gate_dead=False) == ["safety gate: no status received"]
