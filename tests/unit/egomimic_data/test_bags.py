"""egomimic_data.bags without ROS: definitions and hashes of the installed types, a written bag read
back by rosbags and by the independent `mcap` reader, drops counted, a crash (the writer never
closed) repaired, and `info` in `ros2 bag info`'s layout."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
import yaml
from mcap.reader import make_reader
from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore

from egomimic_data.bags import (
    BagTopic,
    BagWriter,
    InterfaceDefinitions,
    definition_from_text,
    info_text,
    make_qos,
    needs_repair,
    repair,
)

KILTED = get_typestore(Stores.ROS2_KILTED)
STRING = "std_msgs/msg/String"
GRAPH_TYPES = [
    "sensor_msgs/msg/Image",
    "sensor_msgs/msg/CameraInfo",
    "sensor_msgs/msg/JointState",
    "geometry_msgs/msg/PoseStamped",
    "diagnostic_msgs/msg/DiagnosticArray",
    "tf2_msgs/msg/TFMessage",
    "visualization_msgs/msg/MarkerArray",
    "egomimic_msgs/msg/BimanualCommand",
    "egomimic_msgs/msg/ActionChunk",
    "egomimic_msgs/msg/GateStatus",
    "egomimic_msgs/msg/RecorderStatus",
    "egomimic_msgs/msg/CameraHealth",
]


def cdr_string(text: str) -> bytes:
    return bytes(KILTED.serialize_cdr(KILTED.types[STRING](data=text), STRING))


@pytest.fixture(scope="module")
def definitions():
    return InterfaceDefinitions()


@pytest.mark.parametrize("type_name", GRAPH_TYPES)
def test_definition_hash_is_the_installed_types(definitions, type_name):
    msgdef, rihs01 = definitions.definition(type_name)
    assert rihs01 == definitions.installed_hash(type_name)
    assert rihs01.startswith("RIHS01_")
    if type_name in KILTED.fielddefs:  # a standard type: rosbags' own Kilted store agrees
        assert rihs01 == KILTED.hash_rihs01(type_name)
    # the stored text alone gives the same hash (what repair falls back to for a type not installed)
    assert definition_from_text(type_name, msgdef)[1] == rihs01


def test_unknown_type_is_refused(definitions, tmp_path):
    with pytest.raises(Exception, match="no interface file"):
        BagWriter(tmp_path / "b", [BagTopic("/x", "nope_msgs/msg/Nothing")], definitions)


def _write(tmp_path, definitions, n=50, flush_period_s=1.0, close=True, **kw):
    topics = [
        BagTopic("/eva/a", STRING, (make_qos(depth=5),)),
        BagTopic("/eva/b", STRING, (make_qos(depth=1, transient_local=True),)),
        BagTopic("/eva/silent", STRING),
    ]
    writer = BagWriter(tmp_path / "bag", topics, definitions, flush_period_s=flush_period_s, **kw)
    t0 = 1_700_000_000_000_000_000
    for i in range(n):
        assert writer.submit(0, t0 + i * 10_000_000, cdr_string(f"a{i}"))
        if i % 10 == 0:
            assert writer.submit(1, t0 + i * 10_000_000 + 1, cdr_string(f"b{i}"))
    return writer, (writer.close() if close else None)


def test_round_trip_with_rosbags_and_mcap(tmp_path, definitions):
    _, result = _write(tmp_path, definitions)
    assert result.written == {"/eva/a": 50, "/eva/b": 5, "/eva/silent": 0} and not result.error
    with Reader(tmp_path / "bag") as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
        assert counts == {"/eva/a": 50, "/eva/b": 5}, "a topic without messages is not listed"
        for conn in reader.connections:
            assert conn.digest == definitions.definition(STRING)[1]
            assert conn.ext.serialization_format == "cdr"
        got = [bytes(data) for conn, _, data in reader.messages() if conn.topic == "/eva/a"]
        assert got == [cdr_string(f"a{i}") for i in range(50)]
        qos = next(c for c in reader.connections if c.topic == "/eva/b").ext.offered_qos_profiles[0]
        assert qos.durability.name == "TRANSIENT_LOCAL" and qos.depth == 1
    meta = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 9 and meta["storage_identifier"] == "mcap" and meta["message_count"] == 55
    assert {t["topic_metadata"]["type_description_hash"] for t in meta["topics_with_message_count"]} == {
        definitions.definition(STRING)[1]
    }
    with open(next((tmp_path / "bag").glob("*.mcap")), "rb") as f:
        mcap = make_reader(f)
        seen = [(channel.topic, schema.name, schema.encoding) for schema, channel, _ in mcap.iter_messages()]
    assert len(seen) == 55 and set(seen) == {("/eva/a", STRING, "ros2msg"), ("/eva/b", STRING, "ros2msg")}


def test_full_queue_drops_and_counts(tmp_path, definitions):
    release = threading.Event()
    writer = BagWriter(
        tmp_path / "bag", [BagTopic("/x", STRING)], definitions, queue_messages=10, on_writer_start=release.wait
    )
    accepted = sum(writer.submit(0, i, cdr_string("x")) for i in range(25))
    assert accepted == 10 and writer.dropped == [15]
    release.set()
    result = writer.close()
    assert result.written == {"/x": 10} and result.dropped == {"/x": 15}


def test_crash_is_repaired(tmp_path, definitions):
    writer, _ = _write(tmp_path, definitions, n=50, flush_period_s=0.05, close=False)
    deadline = time.monotonic() + 5
    while writer.queued and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # a flush period after the last write: everything is on disk
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "bag", crashed)  # the bag as a kill -9 would leave it
    writer.close()
    assert not (crashed / "metadata.yaml").exists() and needs_repair(crashed)
    with pytest.raises(Exception, match="egomimic-bag repair"):
        info_text(crashed)
    result = repair(crashed, definitions)
    assert result.messages == 55 and result.topics == {"/eva/a": 50, "/eva/b": 5}
    assert result.kept is not None and result.kept.exists()
    with Reader(crashed) as reader:
        assert {c.topic: c.msgcount for c in reader.connections} == {"/eva/a": 50, "/eva/b": 5}
        assert all(c.digest == definitions.definition(STRING)[1] for c in reader.connections)
    again = repair(crashed, definitions)
    assert again.kept is None and again.messages == 55


def test_crash_mid_record_keeps_the_complete_chunks(tmp_path, definitions):
    writer, _ = _write(tmp_path, definitions, n=50, flush_period_s=0.05, close=False)
    time.sleep(0.3)
    mcap_file = next((tmp_path / "bag").glob("*.mcap"))
    size_before = mcap_file.stat().st_size
    for i in range(50, 60):
        writer.submit(0, 1_800_000_000_000_000_000 + i, cdr_string(f"a{i}"))
    time.sleep(0.3)
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "bag", crashed)
    writer.close()
    cut = next(crashed.glob("*.mcap"))
    cut.write_bytes(cut.read_bytes()[: size_before + 40])  # the last chunk torn off mid-record
    result = repair(crashed, definitions)
    assert result.topics == {"/eva/a": 50, "/eva/b": 5} and result.stopped_at


def test_info_has_ros2_bag_infos_fields(tmp_path, definitions):
    _write(tmp_path, definitions)
    text = info_text(tmp_path / "bag")
    for label in (
        "Files:",
        "Bag size:",
        "Storage id:        mcap",
        "Duration:",
        "Start:",
        "End:",
        "Messages:          55",
    ):
        assert label in text, text
    assert "Topic: /eva/a | Type: std_msgs/msg/String | Count: 50 | Serialization Format: cdr" in text
    assert "Duration:          0.490000001s" in text
