"""web:=true on the simulated graph, over DDS: a WebSocket client speaking the Foxglove protocol
(as the Foxglove app does) subscribes and receives a camera frame (a JPEG that decodes to the
camera's size) and the gate's status (ARMED); the MCAP sink holds the same channels."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import struct
import time
from pathlib import Path

import pytest
import simplejpeg
import yaml
from mcap.reader import make_reader
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CompressedImage

from egomimic_msgs.msg import GateStatus
from egomimic_nodes import topics

from .conftest import start_launch, wait_for

pytestmark = pytest.mark.integration

websockets = pytest.importorskip("websockets")

NS = "eva"
CAMERA = topics.IMAGE_COMPRESSED.resolve(NS, cam="front_1")
STATUS = topics.SAFETY_STATUS.resolve(NS)
SUBPROTOCOL = "foxglove.sdk.v1"
MESSAGE_DATA = 0x01
"""Binary opcode of a message: then subscription id (u32 LE), log time (u64 LE), the CDR payload."""
FUNCTIONAL_CAMERA_SIZE = yaml.safe_load((Path(__file__).with_name("functional_cameras.yaml")).read_text())[
    "/**/cameras"
]["ros__parameters"]
LAUNCH_BACKSTOP_S = 300.0
"""The launcher's --duration: longer than the test's waits (60 s for the URL, 30 s per message)."""


async def first_messages(url: str, wanted: list[str], timeout_s: float) -> dict[str, bytes]:
    """Subscribe to `wanted` topics; the first payload of each (with its GateStatus ARMED for
    the gate's status, which is published on change and twice a second)."""
    got: dict[str, bytes] = {}
    async with websockets.connect(url, subprotocols=[SUBPROTOCOL], max_size=None) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        channels: dict[str, int] = {}
        while set(wanted) - set(channels):
            msg = await asyncio.wait_for(ws.recv(), timeout_s)
            if isinstance(msg, str) and json.loads(msg)["op"] == "advertise":
                for ch in json.loads(msg)["channels"]:
                    assert ch["encoding"] == "cdr" and ch["schemaEncoding"] == "ros2msg" and ch["schema"]
                    channels[ch["topic"]] = ch["id"]
        subs = dict(enumerate(wanted, start=1))
        await ws.send(
            json.dumps(
                {"op": "subscribe", "subscriptions": [{"id": i, "channelId": channels[t]} for i, t in subs.items()]}
            )
        )
        while set(wanted) - set(got):
            msg = await asyncio.wait_for(ws.recv(), timeout_s)
            if isinstance(msg, bytes) and msg[0] == MESSAGE_DATA:
                sub_id, _log_time = struct.unpack_from("<IQ", msg, 1)
                topic, payload = subs[sub_id], msg[13:]
                if topic == STATUS and deserialize_message(payload, GateStatus).state != GateStatus.ARMED:
                    continue
                got[topic] = payload
    return got


@pytest.mark.parametrize("record", [False, True], ids=["encoded_here", "cameras_jpeg_passed_through"])
def test_a_websocket_client_gets_a_camera_frame_and_the_gate_status(tmp_path, record):
    """Without record:=true the web view encodes the raw frames; with it the cameras publish JPEGs
    (for the recorder) and the web view passes them through (image_transport compressed)."""
    mcap_path = tmp_path / "view.mcap"
    params = tmp_path / "web.yaml"
    # The cameras at 320x240, as tests/integration/functional_cameras.yaml (function, not headroom:
    # that file says why): the web view's job is the same at any size.
    params.write_text(
        yaml.safe_dump(
            {
                "/**/webview": {"ros__parameters": {"mcap_path": str(mcap_path)}},
                "/**/cameras": {"ros__parameters": FUNCTIONAL_CAMERA_SIZE},
            }
        )
    )
    run_dir = tmp_path / "run"
    extra = ("record:=true", f"record_dir:={tmp_path / 'episodes'}") if record else ()
    # The test stops the graph itself; the launcher's own deadline is only a backstop, beyond
    # every wait below (a graph that ended at 60 s closed the socket mid-test once: 1005).
    launcher = start_launch(
        run_dir, "web:=true", "web_port:=0", f"params_file:={params}", *extra, duration_s=LAUNCH_BACKSTOP_S
    )
    started = time.monotonic()
    log = run_dir / "logs" / "webview.log"
    try:
        found: list[str] = []

        def url_logged() -> bool:
            m = log.exists() and re.search(r"web view: (ws://[\d.]+:\d+)", log.read_text())
            if m:
                found.append(m.group(1))
            return bool(m)

        assert wait_for(url_logged, 60.0), log.read_text() if log.exists() else "no webview log"
        try:
            got = asyncio.run(first_messages(found[0], [CAMERA, STATUS], timeout_s=30.0))
        except Exception as exc:
            raise AssertionError(
                f"{exc!r} {time.monotonic() - started:.1f} s after the launch (launcher "
                f"{'running' if launcher.poll() is None else f'exited {launcher.returncode}'}); webview.log:\n"
                + "\n".join(log.read_text().splitlines()[-15:])
            ) from exc
    finally:
        launcher.send_signal(signal.SIGINT)
        code = launcher.wait(60)
    assert code == 0
    frame = deserialize_message(got[CAMERA], CompressedImage)
    assert frame.header.frame_id == "front_1_optical"
    size = FUNCTIONAL_CAMERA_SIZE
    assert simplejpeg.decode_jpeg(bytes(frame.data)).shape == (size["height"], size["width"], 3)
    assert deserialize_message(got[STATUS], GateStatus).state == GateStatus.ARMED
    with open(mcap_path, "rb") as f:
        counts: dict[str, int] = {}
        for _schema, channel, _msg in make_reader(f).iter_messages():
            counts[channel.topic] = counts.get(channel.topic, 0) + 1
    assert counts.get(CAMERA, 0) > 0 and counts.get(STATUS, 0) > 0, counts
    assert counts.get(topics.TF.resolve(NS), 0) > 0, "the TF rviz draws the robot with"
    assert "forwarded" in log.read_text()
