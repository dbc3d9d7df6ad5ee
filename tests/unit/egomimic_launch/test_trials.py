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


class _Status:
    def __init__(self, state):
        self.state, self.reason, self.detail, self.forwarded, self.rejected = state, "", "", 0, 0


class _Observer:
    """The run monitor as the runner reads it: the arms at rest, a policy acting now."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()
        self.gate_status = _Status(0)
        self.gate_history: list[tuple[float, int, str]] = []
        self.task = self.task_first_action_s = self.task_success_s = None

    @property
    def cmd_path(self):
        import time

        from egomimic_hw.description import ARMS

        return {arm: ([time.time()], None) for arm in ARMS}

    def measured_positions(self):
        import numpy as np

        return np.zeros((2, 3))


class _Client:
    """Services as the graph answers them; the recorder hears the policy only after `deaf_s`."""

    def __init__(self, observer, deaf_s):
        import time

        self.obs, self.calls, self.t0, self.deaf_s = observer, [], time.monotonic(), deaf_s

    def trigger(self, name, timeout_s=None):
        import time

        from egomimic_nodes import topics

        kind = {topics.SAFETY_ARM.resolve("/eva"): "arm", topics.POLICY_RESET.resolve("/eva"): "reset"}
        self.calls.append((time.monotonic(), kind.get(name, name)))
        if name == topics.SAFETY_ARM.resolve("/eva"):
            with self.obs.lock:
                self.obs.gate_history += [(time.time(), 1, "arming"), (time.time(), 2, "armed")]
            return True, "arming"
        if name == topics.RECORDER_START.resolve("/eva"):
            if time.monotonic() - self.t0 < self.deaf_s:
                return False, "left.cmd_ee_pose: no sample yet"
            return False, "left.cmd_joints: no sample yet"
        return True, ""

    def set_parameter(self, node, name, value, timeout_s=None):
        return True, ""


@pytest.mark.parametrize("deaf_s, resets", [(0.0, 1), (2.5, 2)])
def test_the_policy_is_reset_again_when_arming_comes_long_after_its_reset(deaf_s, resets):
    """The expert's plan runs on in time while the arms wait: a recorder slow to hear the streams
    (2.3 s in a CI run) let it run 0.2 m ahead, and the gate refused to arm. Arming follows the
    last reset within RESET_AGE_S (plus the fresh action's wait)."""
    from egomimic_launch.trials import ACTION_SETTLE_S, RESET_AGE_S, TrialRunner

    obs = _Observer()
    client = _Client(obs, deaf_s)
    runner = TrialRunner(
        client, obs, "eva", [5], expert=True, record=True, timeout_s=0.1, stopped=lambda: False, log=lambda _: None
    )
    result = runner.trial(5)
    assert result.outcome == "timeout", result  # armed, then nothing fed the task
    names = [name for _, name in client.calls]
    assert names.count("reset") == resets, names
    last_reset = max(t for t, name in client.calls if name == "reset")
    arm = next(t for t, name in client.calls if name == "arm")
    assert 0 < arm - last_reset <= RESET_AGE_S + ACTION_SETTLE_S + 0.5, (arm - last_reset, names)


class _LateArmClient(_Client):
    """The gate answers a retried arm "already arming" (ARMING began at the first, late call),
    then gives ARMING up: DISARMED with why."""

    def trigger(self, name, timeout_s=None):
        import time

        from egomimic_nodes import topics

        if name != topics.SAFETY_ARM.resolve("/eva"):
            return super().trigger(name, timeout_s)
        self.calls.append((time.monotonic(), "arm"))
        with self.obs.lock:
            self.obs.gate_history += [(time.time() - 1.0, 1, "arming")]  # before this call
            self.obs.gate_history += [(time.time() + 0.01, 0, "no command within 10.0 s of arming")]
        return True, "already arming: waiting for a command"


def test_an_arming_given_up_after_already_arming_is_the_verdict_at_once():
    import time

    from egomimic_launch.trials import ARM_TIMEOUT_S, TrialRunner

    obs = _Observer()
    runner = TrialRunner(
        _LateArmClient(obs, 0.0),
        obs,
        "eva",
        [5],
        expert=False,
        record=False,
        timeout_s=0.1,
        stopped=lambda: False,
        log=lambda _: None,
    )
    runner._reset_at = time.monotonic()  # a fresh reset: the arm call comes first
    t0 = time.monotonic()
    ok, detail = runner._arm()
    assert (ok, detail) == (False, "no command within 10.0 s of arming")
    assert time.monotonic() - t0 < ARM_TIMEOUT_S / 2, "not waited out to the arm timeout"
