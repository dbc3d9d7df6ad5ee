"""The console's only contact with the graph: the topics and services of the interface contract
(docs/interfaces.md), through one rclpy node of its own (egomimic_launch.ros_client).

It publishes nothing and holds no control path: every action is a Trigger call the gate or the
recorder answers (or a parameter of the recorder), so losing the console leaves the graph as it
was. The streams are taken raw in a batch by a timer on the spin thread (egomimic_nodes/taken.py:
no executor callback and no deserialization per sample; an age is the DDS reception time).
"""

from __future__ import annotations

import os
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Image
from std_srvs.srv import Trigger

from egomimic_launch.operator.model import OperatorModel, Snapshot, console_streams
from egomimic_launch.ros_client import LauncherClient
from egomimic_msgs.msg import GateStatus, RecorderStatus
from egomimic_nodes import topics
from egomimic_nodes.diagnostics import qualified_name

POLL_PERIOD_S = 0.1
IMAGE_DEPTH = 10
"""Reader history of the images: 330 ms at 30 Hz, three polls' worth."""
STREAM_DEPTH = 100
"""Reader history of the small streams: 1 s of a 100 Hz stream."""
RECORDER_NODE = "recorder"
"""The recorder node's name in the robot namespace (egomimic_bringup.graph, record:=true)."""
ACTIONS = {
    "arm": topics.SAFETY_ARM,
    "disarm": topics.SAFETY_DISARM,
    "estop": topics.SAFETY_ESTOP,
    "reset": topics.SAFETY_RESET,
    "record_start": topics.RECORDER_START,
    "record_stop": topics.RECORDER_STOP,
}
"""Every service the console calls, by the name of its key's action."""


class GraphLink:
    def __init__(self, model: OperatorModel):
        from egomimic_nodes.taken import TakenSubscriptions

        self.model = model
        ns = model.namespace
        self.client = LauncherClient(f"egomimic_operator_{os.getpid()}")
        node = self.client.node
        self._taken = TakenSubscriptions(node.context, f"{node.get_name()}_streams")
        self._take_lock = threading.Lock()
        self._streams = []
        for label, name, topic in console_streams(ns):
            profile = QoSProfile(
                history=topic.qos.history,
                depth=IMAGE_DEPTH if topic.type is Image else STREAM_DEPTH,
                reliability=topic.qos.reliability,
                durability=topic.qos.durability,
            )
            self._streams.append((label, self._taken.subscribe(topic.type, name, profile, raw=True)))
        node.create_subscription(
            GateStatus,
            topics.SAFETY_STATUS.resolve(ns),
            lambda msg: model.on_gate(msg, time.time()),
            topics.SAFETY_STATUS.qos,
        )
        node.create_subscription(
            RecorderStatus,
            topics.RECORDER_STATUS.resolve(ns),
            lambda msg: model.on_recorder(msg, time.time()),
            topics.RECORDER_STATUS.qos,
        )
        node.create_subscription(
            DiagnosticArray, topics.DIAGNOSTICS.name(), lambda msg: model.on_diagnostics(msg, time.time()), 50
        )
        # Clients made once: an e-stop must not wait for a new client's discovery.
        self._clients = {action: node.create_client(Trigger, svc.resolve(ns)) for action, svc in ACTIONS.items()}
        self._recorder_fqn = qualified_name(ns, RECORDER_NODE)
        node.create_timer(POLL_PERIOD_S, self.poll)

    def poll(self) -> None:
        """Account every stream sample received since the last poll."""
        with self._take_lock:
            for label, sub in self._streams:
                for _raw, info in self._taken.take(sub, limit=10_000):
                    ns = info.get("received_timestamp")
                    self.model.add_sample(label, ns * 1e-9 if ns else time.time())

    def snapshot(self) -> Snapshot:
        return self.model.snapshot(time.time())

    def trigger(self, action: str, timeout_s: float = 2.0) -> tuple[bool, str]:
        """Call the Trigger service of `action` (a key of ACTIONS); (success, its message)."""
        client = self._clients[action]
        service = client.srv_name
        if not client.wait_for_service(timeout_sec=timeout_s):
            return False, f"{service}: not available"
        done = threading.Event()
        future = client.call_async(Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout_s):
            client.remove_pending_request(future)  # a late answer is dropped, not kept forever
            return False, f"{service}: no answer within {timeout_s:g} s"
        result = future.result()
        if result is None:
            return False, f"{service}: call failed"
        return bool(result.success), result.message

    def set_task_name(self, task_name: str, timeout_s: float = 2.0) -> tuple[bool, str]:
        """The recorder's `task_name` parameter (applies to the next episode)."""
        return self.client.set_parameter(self._recorder_fqn, "task_name", task_name, timeout_s)

    def close(self) -> None:
        self.client.close()
        self._taken.destroy()
