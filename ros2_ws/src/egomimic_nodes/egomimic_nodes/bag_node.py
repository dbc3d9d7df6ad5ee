"""Bag node: a rosbag2 (MCAP) of the graph's topics, from start to shutdown (the launch argument
bag:=true), written with `rosbags` (egomimic_data.bags): `ros2 bag info` / `ros2 bag play` on a ROS
install and `egomimic-bag info|play|repair` read it.

  sub  every topic of egomimic_nodes.topics in the namespace (per-arm and per-camera names
       expanded), /tf, /tf_static and /diagnostics; cameras/<cam>/image_raw and
       image_raw/compressed only with `images` (bag_images:=true). Each reader has its topic's
       reliability and durability (a latched status or /tf_static arrives when the node joins).
  pub  /diagnostics (bag path, messages written, and what is missing, counted per topic:
       dropped: the writer's queue was full; overwritten: a gap in a publisher's sequence
       numbers when a take found the reader's history full, i.e. it overflowed between two
       takes; lost: a gap when it was not full, so the samples never reached the reader
       (best-effort delivery on a busy machine, or the publisher's own history))

The messages are stored as they arrived: raw CDR bytes (`raw=True`, never deserialized), stamped
with their reception time (rosbag2's default), each topic with the type's full definition, its
RIHS01 hash and the QoS its publishers offer (topics.py). The readers live on a companion node
no executor spins (taken.py): every 1/`take_rate_hz` one pass takes what they hold and queues it
for the writer thread, which does all file work (bounded queue; a full one drops and counts).

Launch order: the launcher starts this node first and stops it last (teardown runs in reverse),
so the bag holds the start-up and the control nodes' last messages (the gate's final status, the
drivers' holds). SIGINT/SIGTERM close the bag (summary, metadata.yaml) and log what was written
and dropped; after a kill -9, `egomimic-bag repair <bag>` recovers what was flushed (every
`flush_period_s`).

Parameters: BagConfig (egomimic_data.bag_config).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from egomimic_data.bag_config import BagConfig
from egomimic_data.bags import BagTopic, BagWriter, InterfaceDefinitions, bag_name, make_qos
from egomimic_hw.description import ARMS, CAMERAS
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.outbox import Outbox
from egomimic_nodes.params import declare_config
from egomimic_nodes.spin import lower_this_thread, quiet_middleware_for_images, run_node
from egomimic_nodes.taken import SequenceGaps, TakenSubscriptions

IMAGE_TOPICS = (topics.IMAGE_RAW, topics.IMAGE_COMPRESSED)
READER_HISTORY_S = 2.0
"""Each reader keeps this much of its topic (at its nominal rate) between two takes: a bag node
stopped for 1.5 s on a busy machine (SIGSTOP, measured) lost 188 joint states and poses with 0.5 s;
with 2 s it loses none. Held only while the node is stalled; a few hundred kB for the non-image
topics."""
IMAGE_HISTORY_S = 0.5
"""Raw and compressed images (bag_images:=true) keep less: 0.5 s of three 640x480 cameras is 41 MB."""
EVENT_DEPTH = 100
"""History of a reader whose topic has no nominal rate (statuses, chunks, /diagnostics, about ten
publishers at 1 Hz)."""
DIAGNOSTICS_PERIOD_S = 1.0


def bag_topics(namespace: str, images: bool) -> list[tuple[topics.Topic, str]]:
    """(topic, fully qualified name) of everything the bag records, templates expanded."""
    out = []
    for topic in topics.TOPICS:
        if topic in IMAGE_TOPICS and not images:
            continue
        if "{arm}" in topic.template:
            out += [(topic, topic.resolve(namespace, arm=arm)) for arm in ARMS]
        elif "{cam}" in topic.template:
            out += [(topic, topic.resolve(namespace, cam=cam)) for cam in CAMERAS]
        else:
            out.append((topic, topic.resolve(namespace)))
    return out


def reader_qos(topic: topics.Topic) -> QoSProfile:
    keep_s = IMAGE_HISTORY_S if topic in IMAGE_TOPICS else READER_HISTORY_S
    depth = EVENT_DEPTH if topic.rate_hz is None else math.ceil(topic.rate_hz * keep_s)
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=max(depth, topic.qos.depth),
        reliability=topic.qos.reliability,
        durability=topic.qos.durability,
    )


def offered_qos(topic: topics.Topic):
    """The publishers' QoS (topics.py) as rosbag2 metadata records it: what `play` offers."""
    return make_qos(
        depth=topic.writer_qos.depth,
        reliable=topic.qos.reliability == ReliabilityPolicy.RELIABLE,
        transient_local=topic.qos.durability == DurabilityPolicy.TRANSIENT_LOCAL,
        keep_all=topic.qos.history == HistoryPolicy.KEEP_ALL,
    )


class BagNode(Node):
    PARAMETERS = ((BagConfig, "", ()),)
    """What --help lists."""

    def __init__(self):
        super().__init__("bag")
        self.config = declare_config(self, BagConfig)
        namespace = self.get_namespace()
        selected = bag_topics(namespace, self.config.images)
        path = Path(self.config.bag_dir).expanduser().resolve() / bag_name(time.time())
        path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = BagWriter(
            path,
            [BagTopic(name, topics.type_name(topic.type), (offered_qos(topic),)) for topic, name in selected],
            InterfaceDefinitions(),
            queue_messages=self.config.queue_messages,
            flush_period_s=self.config.flush_period_s,
            on_writer_start=self._lower_writer,
        )
        self._taken = TakenSubscriptions(self.context, f"{self.get_name()}_in", namespace)
        self._readers = [
            self._taken.subscribe(topic.type, name, reader_qos(topic), raw=True) for topic, name in selected
        ]
        self._names = [name for _topic, name in selected]
        quiet = quiet_middleware_for_images(sum(topic is topics.IMAGE_RAW for topic, _name in selected))
        if quiet:
            self.get_logger().info(f"middleware log: {quiet}")
        self._gaps = SequenceGaps()
        self.overwritten = [0] * len(selected)
        self.lost = [0] * len(selected)
        self._last_take: float | None = None
        self.longest_pause_s = 0.0
        """The longest interval between two take passes: what the readers' history had to hold."""
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        )
        self.create_timer(1.0 / self.config.take_rate_hz, self._take_all)
        self.create_timer(DIAGNOSTICS_PERIOD_S, self._publish_diagnostics)
        self.get_logger().info(
            f"bag: {len(selected)} topics to {path} (MCAP)"
            + ("" if self.config.images else "; camera images left out (bag_images:=true records them)")
        )

    def _lower_writer(self) -> None:
        done = lower_this_thread("background")
        if done:
            self.get_logger().info(f"scheduling: {done}")

    def _take_all(self) -> None:
        now = time.monotonic()
        if self._last_take is not None:
            self.longest_pause_s = max(self.longest_pause_s, now - self._last_take)
        self._last_take = now
        for index, sub in enumerate(self._readers):
            taken = self._taken.take(sub)
            full = len(taken) >= sub.qos_profile.depth
            for data, info in taken:
                (self.overwritten if full else self.lost)[index] += self._gaps.count(index, info)
                self.writer.submit(index, int(info.get("received_timestamp") or time.time_ns()), data)

    def missing(self, dropped: list[int] | tuple[int, ...]) -> str:
        """'dropped D (queue full), overwritten O (reader history full), lost L (never reached the
        reader)', then the topics with any, worst first."""
        line = (
            f"dropped {sum(dropped)} (queue full), overwritten {sum(self.overwritten)} (reader history full), "
            f"lost {sum(self.lost)} (never reached the reader); longest pause between takes "
            f"{self.longest_pause_s * 1e3:.0f} ms"
        )
        worst = sorted(
            (
                (d + o + lo, name)
                for name, d, o, lo in zip(self._names, dropped, self.overwritten, self.lost)
                if d + o + lo
            ),
            reverse=True,
        )
        return line + ("".join(f"; {name} {n}" for n, name in worst[:5]) if worst else "")

    def _publish_diagnostics(self) -> None:
        written, dropped = sum(self.writer.written), self.writer.dropped
        if self.writer.error:
            level, message = diagnostics.ERROR, self.writer.error
        elif sum(dropped) or sum(self.overwritten) or sum(self.lost):
            level, message = diagnostics.WARN, self.missing(dropped)
        else:
            level, message = diagnostics.OK, f"recording {self.writer.path.name}"
        values = {
            "path": str(self.writer.path),
            "messages": written,
            "dropped": sum(dropped),
            "overwritten": sum(self.overwritten),
            "lost": sum(self.lost),
            "longest_pause_ms": round(self.longest_pause_s * 1e3),
            "queued": self.writer.queued,
        }
        self._pub_diag.publish(
            diagnostics.array(self, diagnostics.status("bag", self.get_name(), level, message, values))
        )

    def on_exit(self) -> None:
        """Take what the readers still hold, then close the bag (summary, metadata.yaml)."""
        self._take_all()
        result = self.writer.close()
        line = (
            f"bag {result.path}: {result.messages} messages on {sum(1 for n in result.written.values() if n)} "
            f"topics; " + self.missing([result.dropped.get(name, 0) for name in self._names])
        )
        if result.error:
            self.get_logger().error(f"{line}; {result.error} (egomimic-bag repair recovers what was flushed)")
        else:
            self.get_logger().info(line)

    def destroy_node(self) -> None:
        self._pub_diag.close()
        self._taken.destroy()
        super().destroy_node()


def main(args=None) -> int:
    return run_node(BagNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
