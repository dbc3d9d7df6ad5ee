"""The monitor's workspace request, run in process: a request the gate never answers (its reply
lost while the response writer had not matched the monitor's reader: fresh clone fc77) is given
up after WORKSPACE_ASK_TIMEOUT_S and asked again, a late answer to the abandoned one is ignored,
and the next answer gives the boxes."""

from __future__ import annotations

import pytest
from rcl_interfaces.msg import ParameterValue
from rcl_interfaces.srv import GetParameters
from rclpy.task import Future

from egomimic_hw.description import ARMS

pytestmark = pytest.mark.integration


class SilentGate:
    """Stands in for the gate's get_parameters client: requests are kept, never answered."""

    def __init__(self):
        self.futures: list[Future] = []
        self.removed: list[Future] = []

    def service_is_ready(self) -> bool:
        return True

    def call_async(self, request) -> Future:
        self.futures.append(Future())
        return self.futures[-1]

    def remove_pending_request(self, future) -> None:
        self.removed.append(future)


def answer(offset: float) -> GetParameters.Response:
    boxes = [[offset, -0.5, 0.0], [offset + 0.5, 0.5, 0.6]] * len(ARMS)
    return GetParameters.Response(values=[ParameterValue(double_array_value=b) for b in boxes])


def test_an_unanswered_workspace_request_is_asked_again(monkeypatch):
    import rclpy

    from egomimic_nodes import monitor_node

    rclpy.init(args=["--ros-args", "--disable-external-lib-logs"])
    node = monitor_node.MonitorNode()
    try:
        gate = node._gate_params = SilentGate()
        now = [100.0]
        monkeypatch.setattr(monitor_node.time, "monotonic", lambda: now[0])
        node._ask_workspace()
        now[0] += 0.5 * monitor_node.WORKSPACE_ASK_TIMEOUT_S
        node._ask_workspace()
        assert len(gate.futures) == 1 and not gate.removed, "pending: not asked twice"
        now[0] += monitor_node.WORKSPACE_ASK_TIMEOUT_S
        node._ask_workspace()
        assert gate.removed == gate.futures[:1] and len(gate.futures) == 2, "given up, asked again"
        assert node.counts["workspace_requests_unanswered"] == 1
        gate.futures[0].set_result(answer(0.9))  # the abandoned request's late answer
        assert not node.state.workspaces
        gate.futures[1].set_result(answer(0.1))
        assert node.state.workspaces[ARMS[0]] == ([0.1, -0.5, 0.0], [0.6, 0.5, 0.6])
        node._ask_workspace()  # nothing pending now: asks again only if called (the draw stops calling)
        assert len(gate.futures) == 3
    finally:
        node.destroy_node()
        rclpy.shutdown()
