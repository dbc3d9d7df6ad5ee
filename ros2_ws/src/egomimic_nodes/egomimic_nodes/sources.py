"""Who sent this message? Publisher identity for the topics a safety decision rests on.

Every DDS sample carries its writer's GID (rclpy passes it as `publisher_gid` in the message
info), and the ROS graph maps GIDs to the node that created the writer. A `SourceCheck` accepts
a message only when its writer belongs to the expected node (by fully qualified name), so a
second process publishing on `<arm>/joint_states` or `<arm>/joint_command` is refused by name,
message by message, instead of being trusted because it used the right topic.

Limits (no DDS security on pip installs, see README "Safety"): node names are not
authenticated. A process that names its node `safety_gate` in the robot's namespace passes this
check; what it then sends still meets the driver's own limits (joint range, step from the
measured position) and the gate-status condition. This check stops accidents (a stray test
script, a second launch, a replayed bag), not an attacker on the machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

UNKNOWN_NODE_MARK = "_NODE_NAME_UNKNOWN_"
"""What rmw reports as the node of a writer whose node it has not learnt yet (discovery lag)."""


@dataclass(frozen=True)
class Verdict:
    ok: bool
    foreign: bool = False
    """The writer is known to belong to another node (a fault); False with `ok` False means the
    writer is not known yet (just discovered, or no id): the message is dropped, no fault."""
    why: str = ""


def node_fqn(namespace: str, name: str) -> str:
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    return f"{ns}/{name}"


class SourceCheck:
    """Accepts messages on `topic` only from writers of the node `expected_fqn`."""

    REFRESH_MIN_INTERVAL_S = 0.05
    """An unknown writer triggers a graph query at most this often (a flood of foreign
    messages must not turn into a flood of graph queries)."""

    def __init__(self, node, topic: str, expected_fqn: str):
        self._node = node
        self.topic = topic
        self.expected = expected_fqn
        self._owner: dict[bytes, str] = {}
        """Writer GID -> fully qualified name of its node, as the graph last said."""
        self._last_refresh = -1e9
        self.refused = 0
        self.unknown = 0
        self.last_refusal = ""

    def refresh(self) -> None:
        self._last_refresh = time.monotonic()
        owner = {}
        for info in self._node.get_publishers_info_by_topic(self.topic):
            owner[bytes(info.endpoint_gid)] = node_fqn(info.node_namespace, info.node_name)
        self._owner = owner

    def publishers(self) -> list[str]:
        """The nodes publishing on the topic now (a fresh graph query)."""
        self.refresh()
        return sorted(self._owner.values())

    def foreign_publishers(self) -> list[str]:
        """Publishers on the topic known to be other than the expected node (a fresh graph
        query; writers whose node is not known yet are left for the next query)."""
        return [p for p in self.publishers() if p != self.expected and UNKNOWN_NODE_MARK not in p]

    def verdict(self, message_info) -> Verdict:
        """Accept the message only from the expected node's writers (see Verdict)."""
        gid = _gid(message_info)
        if gid is None:
            return self._refuse(False, "the message carries no publisher id")
        owner = self._owner.get(gid)
        if (
            owner is None or UNKNOWN_NODE_MARK in owner
        ) and time.monotonic() - self._last_refresh >= self.REFRESH_MIN_INTERVAL_S:
            self.refresh()
            owner = self._owner.get(gid)
        if owner == self.expected:
            return Verdict(True)
        if owner is None:
            # Two different gaps of discovery, told apart for the logs: this one means the
            # middleware matched the writer (its data arrives) but never told rmw's graph.
            return self._refuse(False, f"{self.topic} from a writer the ROS graph does not list yet")
        if UNKNOWN_NODE_MARK in owner:
            # ... and this one that the writer is listed, but the node that owns it is not (rmw's
            # ros_discovery_info from that process has not arrived).
            return self._refuse(False, f"{self.topic} from a writer whose node the ROS graph does not know yet")
        return self._refuse(True, f"{self.topic} from {owner}, only {self.expected} is accepted")

    def _refuse(self, foreign: bool, why: str) -> Verdict:
        if foreign:
            self.refused += 1
        else:
            self.unknown += 1
        self.last_refusal = why
        return Verdict(False, foreign, why)


def _gid(message_info) -> bytes | None:
    try:
        return bytes(message_info["publisher_gid"]["data"])
    except (KeyError, TypeError):
        return None
