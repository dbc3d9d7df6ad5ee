"""What the launcher does when a lifecycle transition gets no answer (ros_client.after_no_answer):
it trusts the node's state, not the lost reply, and asks again at most once."""

from lifecycle_msgs.msg import State, Transition

from egomimic_launch.ros_client import TRANSITIONS, after_no_answer

UNCONFIGURED, INACTIVE, ACTIVE = (
    State.PRIMARY_STATE_UNCONFIGURED,
    State.PRIMARY_STATE_INACTIVE,
    State.PRIMARY_STATE_ACTIVE,
)


def test_a_configure_whose_reply_was_lost_is_taken_from_the_node_state():
    start, goal = TRANSITIONS[Transition.TRANSITION_CONFIGURE]
    assert (start, goal) == (UNCONFIGURED, INACTIVE)
    assert after_no_answer(INACTIVE, start, goal, asked_again=False) == "done"
    assert after_no_answer(State.TRANSITION_STATE_CONFIGURING, start, goal, False) == "wait"
    assert after_no_answer(None, start, goal, False) == "wait", "no answer to get_state either: poll"


def test_a_node_still_in_the_start_state_is_asked_once_more_only():
    start, goal = TRANSITIONS[Transition.TRANSITION_ACTIVATE]
    assert (start, goal) == (INACTIVE, ACTIVE)
    assert after_no_answer(INACTIVE, start, goal, asked_again=False) == "ask again"
    assert after_no_answer(INACTIVE, start, goal, asked_again=True) == "wait"


def test_any_other_state_is_a_failure():
    start, goal = TRANSITIONS[Transition.TRANSITION_CONFIGURE]
    assert after_no_answer(State.PRIMARY_STATE_FINALIZED, start, goal, False) == "failed"
    assert after_no_answer(ACTIVE, *TRANSITIONS[Transition.TRANSITION_CONFIGURE], False) == "failed"
    assert after_no_answer(State.TRANSITION_STATE_ERRORPROCESSING, start, goal, False) == "wait"
