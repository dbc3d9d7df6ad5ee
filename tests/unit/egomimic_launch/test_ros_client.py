"""What the launcher does when a lifecycle transition gets no answer (ros_client.reach,
after_no_answer): it trusts the node's state, not the lost reply, and asks again at most once;
the first call leaves time to ask."""

from lifecycle_msgs.msg import State, Transition

from egomimic_launch.ros_client import TRANSITIONS, after_no_answer
from egomimic_nodes import topics

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


def test_a_lost_configure_reply_leaves_time_to_ask_the_node_state():
    """The first ChangeState call may not wait the whole budget: a fresh-clone run lost a driver's
    configure reply (rmw "failed to send response (timeout)"), the call waited all 10 s, no state
    was asked, and a configured driver failed the start. No rclpy here: the two calls are faked."""
    import time

    from egomimic_launch import ros_client

    client = object.__new__(ros_client.LauncherClient)
    calls = []

    def lost_reply(srv_type, service, request, timeout_s):
        calls.append((service, timeout_s))
        time.sleep(timeout_s)  # the reply never comes
        return None

    client._call = lost_reply
    client.lifecycle_state = lambda fqn, timeout_s=2.0: INACTIVE  # it did configure
    t0 = time.monotonic()
    assert client.reach("/eva/driver_right", Transition.TRANSITION_CONFIGURE, timeout_s=1.0) == ""
    assert time.monotonic() - t0 < 1.0
    assert calls == [("/eva/driver_right/change_state", 0.5)], calls
    assert ros_client.FIRST_ANSWER_S < 10.0 / 2 + 1e-9, "the launcher's 10 s budget keeps time for the state"


class LosesFirstReply:
    """Stands in for an rclpy client whose first reply is lost: every later request is answered."""

    def __init__(self):
        self.requests, self.removed = [], []

    def wait_for_service(self, timeout_sec):
        return True

    def call_async(self, request):
        from rclpy.task import Future

        future = Future()
        self.requests.append(future)
        if len(self.requests) > 1:
            future.set_result(getattr(self, "answer", f"answer {len(self.requests)}"))
        return future

    def remove_pending_request(self, future):
        self.removed.append(future)


def fake_launcher_client(service_client):
    from egomimic_launch import ros_client

    client = object.__new__(ros_client.LauncherClient)
    client.unanswered = 0
    client._client = lambda srv_type, service: service_client
    return client


def test_a_request_that_may_be_made_twice_is_asked_again_when_its_reply_is_lost():
    """fc80: the policy applied a trial's task_seed, its reply was lost, and the trial was not
    set up after 5 s. A parameter set or a state query is asked again after ask_every_s."""
    fake = LosesFirstReply()
    client = fake_launcher_client(fake)
    assert client._call(object, "/eva/policy/set_parameters", "req", timeout_s=5.0, ask_every_s=0.05) == "answer 2"
    assert fake.removed == fake.requests[:1] and client.unanswered == 1


def test_a_request_that_must_not_be_repeated_is_not():
    """A Trigger or a lifecycle transition is given up, never sent twice."""
    fake = LosesFirstReply()
    client = fake_launcher_client(fake)
    assert client._call(object, topics.SAFETY_ARM.resolve("eva"), "req", timeout_s=0.1) is None
    assert len(fake.requests) == 1 and fake.removed == fake.requests and client.unanswered == 1


def test_set_parameter_survives_a_lost_reply_and_a_trigger_is_sent_once():
    from rcl_interfaces.msg import SetParametersResult
    from rcl_interfaces.srv import SetParameters
    from std_srvs.srv import Trigger

    fake = LosesFirstReply()
    fake.answer = SetParameters.Response(results=[SetParametersResult(successful=True)])
    client = fake_launcher_client(fake)
    assert client.set_parameter("/eva/policy", "expert.task_seed", 3, timeout_s=5.0) == (True, "")
    assert len(fake.requests) == 2, "asked again after ASK_AGAIN_S"

    fake = LosesFirstReply()
    fake.answer = Trigger.Response(success=True)
    client = fake_launcher_client(fake)
    ok, why = client.trigger(topics.SAFETY_ARM.resolve("eva"), timeout_s=0.2)
    assert not ok and "no answer" in why and len(fake.requests) == 1
