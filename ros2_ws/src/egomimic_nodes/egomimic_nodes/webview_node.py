"""Web view node: the graph live in a browser (the Foxglove app, web or desktop, "Open connection" to
ws://<host>:<port>) through the foxglove-sdk WebSocket server, and optionally into an MCAP file
(launch argument web:=true; pip extra `web`).

  sub  what rviz shows (rviz/eva.rviz): /tf, /tf_static, robot_description, viz/markers and the
       three cameras' image_raw; and safety/status, policy/action, command/proposed,
       <arm>/joint_states, <arm>/ee_pose, /diagnostics. Sensor and command readers are best
       effort: a view that falls behind never makes a publisher resend (reliable readers would);
       the latched topics are read as their publishers offer them (reliable, transient local), so a
       view started late still gets the robot description and the gate's state.
  out  one WebSocket channel per topic, `cdr` messages with their `ros2msg` schema (the full
       definition, as bags embed it): passed through as received, never deserialized. Camera
       images go out as <cam>/image_raw/compressed (sensor_msgs/CompressedImage, JPEG) at most
       `image_rate_hz` each: with `image_transport` compressed the cameras' own JPEGs, passed
       through (the launcher sets it when the cameras publish them, record:=true); with raw
       encoded here, only while a client (or the MCAP file) takes that camera.
  pub  /diagnostics: clients' subscriptions, messages forwarded, images skipped (rate), lost (a
       gap in a publisher's sequence numbers: reader history or best-effort delivery)

Why it cannot slow the robot: it is a reader only, at normal priority, off the control path (not
required: its death stops nothing); its readers are taken in one pass `take_rate_hz` times a second
(taken.py, no callback per message); the server's per-client queue is bounded (`client_backlog`
messages: a slow browser loses its oldest, inside the server) and nothing here waits on a client.
bench/monitoring.py measures the control stream with recording and monitoring on and off.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CompressedImage, Image

from egomimic_data.bags import InterfaceDefinitions
from egomimic_data.recording_config import IMAGE_TRANSPORTS
from egomimic_hw.description import ARMS, CAMERAS
from egomimic_nodes import diagnostics, topics
from egomimic_nodes.cdr_length import serialize
from egomimic_nodes.msg_convert import ns_to_stamp
from egomimic_nodes.outbox import Outbox
from egomimic_nodes.params import declare_config, field_meta
from egomimic_nodes.serialized import read_header, read_image
from egomimic_nodes.spin import quiet_middleware_for_images, run_node
from egomimic_nodes.taken import SequenceGaps, TakenSubscriptions

VIEWED = (
    topics.TF,
    topics.TF_STATIC,
    topics.ROBOT_DESCRIPTION,
    topics.VIZ_MARKERS,
    topics.SAFETY_STATUS,
    topics.POLICY_ACTION,
    topics.COMMAND_PROPOSED,
    topics.JOINT_STATES,
    topics.EE_POSE,
    topics.DIAGNOSTICS,
)
"""Passed through as received (per-arm names expanded); the cameras come as JPEG."""
READER_HISTORY_S = 0.5
"""Each reader keeps this much of its topic between two takes (at least its publishers' depth)."""
DIAGNOSTICS_PERIOD_S = 1.0


@dataclass(frozen=True)
class WebViewConfig:
    host: str = field(
        default="127.0.0.1",
        metadata=field_meta(
            "address the WebSocket server binds: 127.0.0.1 (this machine; reach it over an SSH tunnel) or 0.0.0.0 "
            "(every interface: anyone on the network can watch, nobody can command)"
        ),
    )
    port: int = field(default=8765, metadata=field_meta("WebSocket port (0: any free port, logged)", (0, 65535)))
    image_rate_hz: float = field(
        default=10.0, metadata=field_meta("at most this many JPEG frames per camera per second", (0.1, 60.0))
    )
    jpeg_quality: int = field(
        default=70, metadata=field_meta("JPEG quality of the camera frames it encodes (image_transport raw)", (10, 100))
    )
    image_transport: str = field(
        default="raw",
        metadata=field_meta(
            "raw: take cameras/<cam>/image_raw and encode; compressed: take the cameras' image_raw/compressed and "
            "pass it through (no raw frames received, nothing encoded here)"
        ),
    )
    take_rate_hz: float = field(
        default=30.0, metadata=field_meta("how often the readers are taken and forwarded, Hz", (1.0, 200.0))
    )
    client_backlog: int = field(
        default=256,
        metadata=field_meta(
            "messages the server queues per client; a client that falls further behind loses its oldest",
            (16, 100_000),
        ),
    )
    mcap_path: str = field(
        default="", metadata=field_meta("also write what is viewed to this MCAP file ('' = no file)")
    )


def reader_qos(topic: topics.Topic) -> QoSProfile:
    latched = topic.qos.durability == DurabilityPolicy.TRANSIENT_LOCAL
    depth = topic.writer_qos.depth if topic.rate_hz is None else math.ceil(topic.rate_hz * READER_HISTORY_S)
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=max(depth, topic.writer_qos.depth),
        reliability=ReliabilityPolicy.RELIABLE if latched else ReliabilityPolicy.BEST_EFFORT,
        durability=topic.qos.durability,
    )


def viewed_names(namespace: str) -> list[tuple[topics.Topic, str]]:
    out = []
    for topic in VIEWED:
        if "{arm}" in topic.template:
            out += [(topic, topic.resolve(namespace, arm=arm)) for arm in ARMS]
        else:
            out.append((topic, topic.resolve(namespace)))
    return out


class _Listener:
    """The server's subscription events, counted (foxglove.ServerListener's protocol)."""

    def __init__(self):
        self.subscriptions = 0

    def on_subscribe(self, client, channel) -> None:
        self.subscriptions += 1

    def on_unsubscribe(self, client, channel) -> None:
        self.subscriptions -= 1


class WebViewNode(Node):
    PARAMETERS = ((WebViewConfig, "", ()),)
    """What --help lists."""

    def __init__(self):
        super().__init__("webview")
        try:
            import foxglove
        except ImportError as e:
            raise RuntimeError(
                "web:=true needs foxglove-sdk: pip install 'egomimic-eva[web]' (make setup installs it)"
            ) from e
        self.config: WebViewConfig = declare_config(self, WebViewConfig)
        namespace = self.get_namespace()
        definitions = InterfaceDefinitions()
        self._view_context = foxglove.Context()
        self._listener = _Listener()
        self._server = foxglove.start_server(
            name=f"EVA {namespace}",
            host=self.config.host,
            port=self.config.port,
            context=self._view_context,
            server_listener=self._listener,
            message_backlog_size=self.config.client_backlog,
        )
        self._mcap = (
            foxglove.open_mcap(self.config.mcap_path, allow_overwrite=False, context=self._view_context)
            if self.config.mcap_path
            else None
        )

        def channel(name: str, msg_type: type):
            schema_name = topics.type_name(msg_type)
            msgdef, _ = definitions.definition(schema_name)
            schema = foxglove.Schema(name=schema_name, encoding="ros2msg", data=msgdef.encode())
            return foxglove.Channel(name, message_encoding="cdr", schema=schema, context=self._view_context)

        self._taken = TakenSubscriptions(self.context, f"{self.get_name()}_in", namespace)
        self._passed = [
            (self._taken.subscribe(topic.type, name, reader_qos(topic), raw=True), channel(name, topic.type), name)
            for topic, name in viewed_names(namespace)
        ]
        if self.config.image_transport not in IMAGE_TRANSPORTS:
            raise ValueError(
                f"image_transport must be one of {', '.join(IMAGE_TRANSPORTS)}, got {self.config.image_transport!r}"
            )
        self._passthrough = self.config.image_transport == "compressed"
        source = topics.IMAGE_COMPRESSED if self._passthrough else topics.IMAGE_RAW
        self._cameras = [
            (
                self._taken.subscribe(source.type, source.resolve(namespace, cam=cam), reader_qos(source), raw=True),
                channel(topics.IMAGE_COMPRESSED.resolve(namespace, cam=cam), CompressedImage),
                cam,
            )
            for cam in CAMERAS
        ]
        quiet = "" if self._passthrough else quiet_middleware_for_images(len(self._cameras))
        if quiet:
            self.get_logger().info(f"middleware log: {quiet}")
        self._last_jpeg = dict.fromkeys(CAMERAS, 0.0)
        self._gaps = SequenceGaps()
        self.forwarded = 0
        self.skipped = 0
        self.lost = 0
        self._pub_diag = Outbox(
            self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS.name(), topics.DIAGNOSTICS.qos)
        )
        self.create_timer(1.0 / self.config.take_rate_hz, self._forward)
        self.create_timer(DIAGNOSTICS_PERIOD_S, self._publish_diagnostics)
        self.get_logger().info(
            f"web view: ws://{self.config.host}:{self._server.port} ({len(self._passed)} topics, {len(CAMERAS)} "
            f"cameras as JPEG at <= {self.config.image_rate_hz:g} Hz)"
            + (f", MCAP -> {Path(self.config.mcap_path).resolve()}" if self._mcap else "")
        )

    # --- forwarding ---

    def _forward(self) -> None:
        for sub, channel, name in self._passed:
            for data, info in self._taken.take(sub):
                self.lost += self._gaps.count(name, info)
                if channel.has_sinks():
                    channel.log(bytes(data), log_time=int(info.get("received_timestamp") or time.time_ns()))
                    self.forwarded += 1
        now = time.monotonic()
        for sub, channel, cam in self._cameras:
            taken = self._taken.take(sub)
            if not taken:
                continue
            for _data, info in taken:
                self.lost += self._gaps.count(cam, info)
            if not channel.has_sinks() or now - self._last_jpeg[cam] < 1.0 / self.config.image_rate_hz:
                self.skipped += len(taken)
                continue
            self.skipped += len(taken) - 1
            self._last_jpeg[cam] = now
            data, info = taken[-1]  # the newest frame
            out = bytes(data) if self._passthrough else self._jpeg(bytes(data))
            channel.log(out, log_time=int(info.get("received_timestamp") or time.time_ns()))
            self.forwarded += 1

    def _jpeg(self, data: bytes) -> bytes:
        import simplejpeg

        out = CompressedImage(format="rgb8; jpeg compressed bgr8")
        try:  # rgb8 (this project's cameras): the pixels as a view of the bytes, no 900 KB copy
            stamp_ns, frame_id = read_header(data)
            _, pixels = read_image(data)
            out.header.stamp, out.header.frame_id, colorspace = ns_to_stamp(stamp_ns), frame_id, "RGB"
        except ValueError:  # a stock camera's bgr8 or mono8: build the message
            image: Image = deserialize_message(data, Image)
            out.header = image.header
            pixels = np.frombuffer(image.data, np.uint8).reshape(image.height, image.width, -1)
            colorspace = {"rgb8": "RGB", "bgr8": "BGR", "mono8": "GRAY"}.get(image.encoding)
            if colorspace is None:
                raise ValueError(f"web view: camera encoding {image.encoding!r} is not rgb8, bgr8 or mono8") from None
        out.data = simplejpeg.encode_jpeg(
            np.ascontiguousarray(pixels), quality=self.config.jpeg_quality, colorspace=colorspace
        )
        return serialize(out)

    # --- diagnostics and shutdown ---

    def _publish_diagnostics(self) -> None:
        values = {
            "url": f"ws://{self.config.host}:{self._server.port}",
            "subscriptions": self._listener.subscriptions,
            "forwarded": self.forwarded,
            "images_skipped": self.skipped,
            "lost": self.lost,
        }
        level = diagnostics.WARN if self.lost else diagnostics.OK
        message = f"{self.lost} lost (reader history or best effort)" if self.lost else "serving"
        self._pub_diag.publish(
            diagnostics.array(self, diagnostics.status("webview", self.get_name(), level, message, values))
        )

    def on_exit(self) -> None:
        if self._mcap is not None:
            self._mcap.close()
        self._server.stop()
        self.get_logger().info(
            f"web view: {self.forwarded} messages forwarded, {self.skipped} camera frames skipped, {self.lost} lost"
        )

    def destroy_node(self) -> None:
        self._pub_diag.close()
        self._taken.destroy()
        super().destroy_node()


def main(args=None) -> int:
    return run_node(WebViewNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
