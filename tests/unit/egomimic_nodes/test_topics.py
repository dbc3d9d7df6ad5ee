"""The names of the graph live in one place (egomimic_nodes.topics) and agree with the messages."""

import pytest

from egomimic_hw.description import ARMS, CAMERAS, Arm
from egomimic_nodes import topics
from egomimic_safety.gate import GateState


def test_gate_states_are_the_status_message_constants():
    from egomimic_msgs.msg import GateStatus

    constants = {
        name: getattr(GateStatus, name)
        for name in dir(GateStatus)
        if name.isupper() and isinstance(getattr(GateStatus, name), int)
    }
    assert constants == {s.name: s.value for s in GateState}


def test_reason_codes_are_the_status_message_constants():
    from egomimic_msgs.msg import GateStatus
    from egomimic_safety.reasons import Reason

    constants = {
        name.removeprefix("REASON_"): getattr(GateStatus, name)
        for name in dir(GateStatus)
        if name.startswith("REASON_")
    }
    assert constants == {r.name: r.value for r in Reason}
    assert all(k == v for k, v in constants.items()), "a code's constant name is its value"


def test_recorder_states_are_the_status_message_constants():
    from egomimic_data.recording import RecorderState
    from egomimic_msgs.msg import RecorderStatus

    constants = {
        name: getattr(RecorderStatus, name)
        for name in dir(RecorderStatus)
        if name.isupper() and isinstance(getattr(RecorderStatus, name), int)
    }
    assert constants == {s.name: s.value for s in RecorderState}
    assert topics.RECORDER_STATUS.resolve("eva") == "/eva/recorder/status"
    assert topics.RECORDER_START.resolve("eva") == "/eva/recorder/start"
    assert topics.RECORDER_STOP.resolve("eva") == "/eva/recorder/stop"


def test_templates_expand_per_arm_and_camera_and_resolve_in_a_namespace():
    assert topics.JOINT_STATES.name(Arm.LEFT) == "left/joint_states"
    assert topics.JOINT_STATES.name("right") == "right/joint_states"
    assert topics.IMAGE_RAW.resolve("eva", cam="front_1") == "/eva/cameras/front_1/image_raw"
    assert topics.SAFETY_STATUS.resolve("/robot2/") == "/robot2/safety/status"
    assert topics.DIAGNOSTICS.resolve("eva") == "/diagnostics", "an absolute name stays absolute"
    assert topics.SAFETY_ESTOP.resolve("") == "/safety/estop"
    with pytest.raises(ValueError):
        topics.JOINT_STATES.name("middle")  # not an arm


def test_every_name_is_unique_once_expanded():
    names = []
    for t in topics.TOPICS:
        arms = ARMS if "{arm}" in t.template else (None,)
        cams = CAMERAS if "{cam}" in t.template else (None,)
        names += [t.name(a, c) for a in arms for c in cams]
    names += [s.name for s in topics.SERVICES]
    assert len(names) == len(set(names)) and not any("{" in n for n in names)


def test_diagnostic_names_carry_the_namespace_and_read_back_per_robot():
    from egomimic_nodes import diagnostics

    class FakeNode:
        def get_namespace(self):
            return "/eva_a"

        def get_clock(self):
            from rclpy.clock import Clock

            return Clock()

    msg = diagnostics.array(FakeNode(), diagnostics.status("driver/left", "arx5_left", diagnostics.OK, "ok", {}))
    assert msg.status[0].name == "/eva_a/driver/left"
    assert diagnostics.local_name(msg.status[0].name, "eva_a") == "driver/left"
    assert diagnostics.local_name(msg.status[0].name, "/eva_a/") == "driver/left"
    assert diagnostics.local_name(msg.status[0].name, "eva") is None, "another robot's entry is not ours"
    assert diagnostics.qualified_name("/", "safety_gate") == "/safety_gate"
