"""The launcher's own rclpy node: graph queries, lifecycle transitions, Trigger calls.

It spins in a background thread; callers block on futures with explicit timeouts, so a dead
node never hangs the launcher.
"""

from __future__ import annotations

import threading
import time

import rclpy
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_srvs.srv import Trigger

FIRST_ANSWER_S = 3.0
"""How long a lifecycle transition's reply is awaited before the node's state is asked instead
(a driver configures in tens of milliseconds; a node still mid-transition is then polled)."""


ASK_AGAIN_S = 1.0
"""A parameter set unanswered this long is sent again (within the caller's timeout): discovery of
a new client's reply reader takes well under a second on the 2-core machine, and a second set
to the same value changes nothing."""


class LauncherClient:
    def __init__(self, name: str = "egomimic_launcher", enclave: str = ""):
        """`enclave`: with security:=true, the SROS2 enclave of this participant (Graph.launcher_enclave)."""
        self.context = rclpy.Context()
        ros_args = ["--ros-args", "--disable-external-lib-logs", *(["--enclave", enclave] if enclave else [])]
        rclpy.init(context=self.context, args=ros_args)
        self.node = Node(name, context=self.context)
        self._clients: dict[tuple[type, str], object] = {}
        self._clients_lock = threading.Lock()
        self.unanswered = 0
        """Requests given up for want of a reply (each asked again where that is safe)."""
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="launcher-spin", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - shutdown races end the spin
            pass

    def node_present(self, name: str, namespace: str) -> bool:
        ns = "/" + namespace.strip("/") if namespace else "/"
        return (name, ns) in self.node.get_node_names_and_namespaces()

    def graph_nodes_running(self, graph, wait_s: float) -> list[str]:
        """Nodes of `graph` (by name, in its namespace, companions like `safety_gate_estop`
        and `safety_gate_state` included) that are already running: listens up to `wait_s` for discovery, and 0.5 s
        more once one is seen, to name the others too."""
        ns = "/" + graph.namespace.strip("/") if graph.namespace.strip("/") else "/"
        names = {spec.name for spec in graph.nodes}
        deadline = time.monotonic() + wait_s
        first_seen = None
        while True:
            found = sorted(
                f"{n_ns.rstrip('/')}/{n}"
                for n, n_ns in self.node.get_node_names_and_namespaces()
                if n_ns == ns and (n in names or n.rsplit("_", 1)[0] in names)
            )
            if found and first_seen is None:
                first_seen = time.monotonic()  # listen a little longer to name them all
            if time.monotonic() >= deadline or (first_seen is not None and time.monotonic() - first_seen >= 0.5):
                return found
            time.sleep(0.05)

    def wait_for_node(self, name: str, namespace: str, timeout_s: float, alive=lambda: True) -> bool:
        """Poll the graph (graph queries lag behind data, so polling is the reliable way)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.node_present(name, namespace):
                return True
            if not alive():
                return False
            time.sleep(0.05)
        return False

    def _client(self, srv_type, service: str):
        """One client per service for the launcher's life. Why not one per call: a service
        answers through a writer that must first match the caller's response reader, and rmw
        drops the reply when it has not within its wait ("failed to send response (timeout)" in
        the node's log). A new client per call was a new reader each time, so every call on a
        busy machine could lose its reply (a driver's configure in a fresh-clone run: the whole
        fault battery failed to start); a kept client is matched once."""
        key = (srv_type, service)
        with self._clients_lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = self.node.create_client(srv_type, service)
            return client

    def _call(self, srv_type, service: str, request, timeout_s: float, ask_every_s: float | None = None):
        """The reply to `request`, or None after `timeout_s`. `ask_every_s`: for a request that
        may be made twice (a parameter set to a value), one unanswered this long is asked again
        within `timeout_s`: a reply is lost when the server's response writer has not matched
        this client's reader yet (rmw: "failed to send response (timeout)"), and the first call
        of a new client is the one at risk (fresh clone fc80: a trial's task_seed was applied by
        the policy, the reply lost, and the trial not set up after 5 s)."""
        client = self._client(srv_type, service)
        deadline = time.monotonic() + timeout_s
        if not client.wait_for_service(timeout_sec=timeout_s):
            return None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            future = client.call_async(request)
            done = threading.Event()
            future.add_done_callback(lambda _f, done=done: done.set())
            if done.wait(min(left, ask_every_s) if ask_every_s else left):
                return future.result()
            client.remove_pending_request(future)
            self.unanswered += 1
            if not ask_every_s:
                return None

    def trigger(self, service: str, timeout_s: float = 2.0) -> tuple[bool, str]:
        result = self._call(Trigger, service, Trigger.Request(), timeout_s)
        if result is None:
            return False, f"{service}: no answer within {timeout_s} s"
        return bool(result.success), result.message

    def set_parameter(self, node_fqn: str, name: str, value, timeout_s: float = 2.0) -> tuple[bool, str]:
        """Set one parameter of a running node (what `ros2 param set` does); (ok, why not)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
        # Setting a value twice is harmless: a lost reply is asked again (ASK_AGAIN_S).
        result = self._call(SetParameters, f"{node_fqn}/set_parameters", request, timeout_s, ask_every_s=ASK_AGAIN_S)
        if result is None:
            return False, f"{node_fqn}/set_parameters: no answer within {timeout_s} s"
        outcome = result.results[0]
        return bool(outcome.successful), outcome.reason

    def lifecycle_transition(self, fqn: str, transition_id: int, timeout_s: float = 10.0) -> bool:
        req = ChangeState.Request()
        req.transition.id = transition_id
        result = self._call(ChangeState, f"{fqn}/change_state", req, timeout_s)
        return bool(result and result.success)

    def lifecycle_state(self, fqn: str, timeout_s: float = 2.0) -> int | None:
        """The node's lifecycle state id (lifecycle_msgs/State), None without an answer."""
        result = self._call(GetState, f"{fqn}/get_state", GetState.Request(), timeout_s, ask_every_s=ASK_AGAIN_S)
        return None if result is None else int(result.current_state.id)

    def reach(self, fqn: str, transition_id: int, timeout_s: float = 10.0) -> str:
        """Take `transition_id` (configure or activate); "" once the node is in its goal state.

        A transition the node refused is a failure. One that got no answer is checked with the
        node's state before anything else: the node may have done it while its reply was lost
        (a start-up on a busy machine: rmw "failed to send response (timeout)" in the node's log,
        the launcher's client not yet matched), and asking again would be refused as an invalid
        transition. Still in the start state: asked once more; mid-transition: polled."""
        start, goal = TRANSITIONS[transition_id]
        deadline = time.monotonic() + timeout_s
        req = ChangeState.Request()
        req.transition.id = transition_id
        # Not the whole budget: a lost reply must leave time to ask the node's state (a first
        # call that waited all of it left none, and a configured driver failed the start).
        result = self._call(ChangeState, f"{fqn}/change_state", req, min(FIRST_ANSWER_S, timeout_s / 2))
        if result is not None:
            return "" if result.success else "refused (see its log)"
        asked_again = False
        while time.monotonic() < deadline:
            state = self.lifecycle_state(fqn, min(2.0, max(0.1, deadline - time.monotonic())))
            step = after_no_answer(state, start, goal, asked_again)
            if step == "done":
                return ""
            if step == "ask again":
                asked_again = True
                result = self._call(ChangeState, f"{fqn}/change_state", req, max(0.1, deadline - time.monotonic()))
                if result is not None:
                    return "" if result.success else "refused (see its log)"
            elif step == "failed":
                return f"ended in lifecycle state {state} (see its log)"
            time.sleep(0.1)
        return f"no answer within {timeout_s:.0f} s"

    def activate(self, fqn: str, timeout_s: float = 10.0) -> str:
        """configure + activate; "" on success, else what failed."""
        err = self.reach(fqn, Transition.TRANSITION_CONFIGURE, timeout_s)
        if err:
            return f"configure: {err}"
        err = self.reach(fqn, Transition.TRANSITION_ACTIVATE, timeout_s)
        return f"activate: {err}" if err else ""

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self._thread.join(timeout=2.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


TRANSITIONS = {
    Transition.TRANSITION_CONFIGURE: (State.PRIMARY_STATE_UNCONFIGURED, State.PRIMARY_STATE_INACTIVE),
    Transition.TRANSITION_ACTIVATE: (State.PRIMARY_STATE_INACTIVE, State.PRIMARY_STATE_ACTIVE),
}
"""Transition -> (the state it starts from, the state it ends in)."""


def after_no_answer(state: int | None, start: int, goal: int, asked_again: bool) -> str:
    """What to do when a transition request got no answer, given the node's state now: "done"
    (it is in the goal state), "ask again" (still in the start state, asked only once more),
    "wait" (no state yet, or mid-transition), "failed" (any other primary state)."""
    if state == goal:
        return "done"
    if state is None or state >= State.TRANSITION_STATE_CONFIGURING:  # ids 10-15: transition states
        return "wait"
    if state == start:
        return "wait" if asked_again else "ask again"
    return "failed"
