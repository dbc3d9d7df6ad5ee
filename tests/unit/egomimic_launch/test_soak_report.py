"""The soak's report lines one stream's worst publication gap up with the others': every stream
silent at once is the machine standing still, one alone is that producer's own stall."""

import importlib.util
from pathlib import Path

from egomimic_hw.description import ARMS, CAMERAS
from egomimic_nodes import topics

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("soak_tool", REPO / "tools" / "soak.py")
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)


def stream(topic: str, gap_s: float, end_s: float) -> dict:
    return {"topic": topic, "max_source_gap_s": gap_s, "max_source_gap_end_s": end_s}


ACTION = topics.POLICY_ACTION.resolve("eva")
LEFT_STATE, RIGHT_STATE = (topics.JOINT_STATES.resolve("eva", arm=arm) for arm in ARMS)
HEAD_IMAGE = topics.IMAGE_RAW.resolve("eva", cam=CAMERAS[0])


def test_gaps_at_the_same_time_are_named_and_others_are_not():
    action = stream(ACTION, 0.085, 1000.0)
    streams = [
        action,
        stream(LEFT_STATE, 0.067, 999.99),  # overlaps
        stream(HEAD_IMAGE, 0.078, 1000.05),  # began before the action's gap ended
        stream(RIGHT_STATE, 0.02, 500.0),  # long before
    ]
    line = soak.coinciding_gaps(action, streams)
    assert "overlaps the worst gap of 2 of the 3 other streams" in line
    assert f"{LEFT_STATE} 67 ms" in line and f"{HEAD_IMAGE} 78 ms" in line
    assert RIGHT_STATE not in line


def test_no_timing_is_said_plainly():
    assert "no gap timing" in soak.coinciding_gaps({"topic": ACTION}, [])
