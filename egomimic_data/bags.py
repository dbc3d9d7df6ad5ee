"""rosbag2 bags (MCAP storage) written, read, described and repaired with `rosbags`, without ROS.

What a ROS install's `ros2 bag` needs from a bag, and where it comes from here:
- `metadata.yaml` (rosbag2 format version 9: topics, types, counts, offered QoS, type hashes),
  written by rosbags' Writer on close, or by `repair` after a crash;
- in the MCAP file, per type a schema with the full message definition (`ros2msg`: the type's
  .msg text, then every type it uses after a `====` / `MSG: pkg/msg/Type` line, rosbag2's own
  layout) and per topic a channel with its offered QoS.
Definitions and RIHS01 type hashes come from the interface files installed beside the live types
(`<prefix>/share/<pkg>/msg/<Type>.msg` and `.json`, the files rosidl generated the Python types
from; `ros2 bag record` reads the same): a type whose definition would hash to anything but its
installed hash is refused, so a bag never claims a definition the publishers did not use.

Crash safety: rosbags buffers one MCAP chunk (up to 1 MiB) in memory and writes the summary
(indexes, statistics) only on close. `BagWriter` closes the chunk and flushes the file every
`flush_period_s`, so a kill -9 loses at most that much; what is on disk is a valid MCAP stream
without a summary section, which `repair` reads record by record with the independent `mcap`
reader (up to the last complete record) and writes again as a complete bag. Closing a chunk
early is rosbags' own `McapWriter.close_chunk` (pinned rosbags==0.11.9; tests/unit/egomimic_data/
test_bags.py covers it), the one reach into its internals.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from rosbags.interfaces import (
    ConnectionExtRosbag2,
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode
from rosbags.rosbag2.metadata import parse_qos
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.msg import get_types_from_msg

BAG_VERSION: Literal[9] = 9
"""rosbag2's metadata format of Jazzy and Kilted (type hashes, QoS as a YAML list)."""
STORAGE_SUFFIX = ".mcap"
TRUNCATED_SUFFIX = ".truncated"
"""`repair` keeps the file it recovered from beside the new one, renamed `<name>.mcap.truncated`."""


class BagError(RuntimeError):
    """A bag cannot be written, read or repaired; the message says which and why."""


# ---------------------------------------------------------------------------------- definitions
def interface_prefixes() -> list[Path]:
    """Where installed interface files are looked up: AMENT_PREFIX_PATH (a ROS install), then this
    Python's prefix (the pip venv, where the ROS wheels put share/<pkg>/msg)."""
    found = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    return [*found, Path(sys.prefix)]


def _refs(obj) -> Iterable[str]:
    """Every message type named in a rosbags field description (nested tuples)."""
    if isinstance(obj, str):
        if "/msg/" in obj:
            yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _refs(item)


class InterfaceDefinitions:
    """Full message definitions and RIHS01 hashes of installed message types (`pkg/msg/Type`)."""

    def __init__(self, prefixes: Sequence[Path] | None = None):
        self.prefixes = list(prefixes) if prefixes is not None else interface_prefixes()
        self.typestore = get_typestore(Stores.EMPTY)
        self._cache: dict[str, tuple[str, str]] = {}

    def _file(self, type_name: str, suffix: str) -> Path | None:
        pkg, _, name = type_name.split("/")
        for prefix in self.prefixes:
            path = prefix / "share" / pkg / "msg" / f"{name}{suffix}"
            if path.is_file():
                return path
        return None

    def installed_hash(self, type_name: str) -> str | None:
        """The RIHS01 hash rosidl generated for the installed type (the one on the wire)."""
        path = self._file(type_name, ".json")
        if path is None:
            return None
        desc = json.loads(path.read_text())
        return next((h["hash_string"] for h in desc.get("type_hashes", ()) if h["type_name"] == type_name), None)

    def _register(self, type_name: str) -> None:
        pending, types = [type_name], {}
        while pending:
            name = pending.pop()
            if name in types or name in self.typestore.fielddefs:
                continue
            path = self._file(name, ".msg")
            if path is None:
                raise BagError(f"no interface file for {name} under {[str(p) for p in self.prefixes]}")
            parsed = get_types_from_msg(path.read_text(), name)
            types.update(parsed)
            pending.extend(ref for fields in parsed.values() for ref in _refs(fields))
        self.typestore.register(types)

    def definition(self, type_name: str) -> tuple[str, str]:
        """(message definition as rosbag2 stores it, RIHS01 hash) of `type_name`."""
        if type_name not in self._cache:
            self._register(type_name)
            msgdef, _ = self.typestore.generate_msgdef(type_name, ros_version=2)
            computed = self.typestore.hash_rihs01(type_name)
            installed = self.installed_hash(type_name)
            if installed is not None and installed != computed:
                raise BagError(
                    f"{type_name}: the installed definition hashes to {computed}, the installed type to "
                    f"{installed}; the interface files and the generated type disagree (rebuild the messages)"
                )
            self._cache[type_name] = (msgdef, computed)
        return self._cache[type_name]


def definition_from_text(type_name: str, msgdef: str) -> tuple[str, str]:
    """(msgdef, RIHS01) from a stored rosbag2 definition: for a type not installed here (repair)."""
    store = get_typestore(Stores.EMPTY)
    sections = msgdef.split("=" * 80 + "\n")
    types = get_types_from_msg(sections[0], type_name)
    for section in sections[1:]:
        header, _, text = section.partition("\n")
        name = header.removeprefix("MSG: ").strip()
        if "/msg/" not in name:
            pkg, _, base = name.partition("/")
            name = f"{pkg}/msg/{base}"
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return msgdef, store.hash_rihs01(type_name)


def make_qos(*, depth: int, reliable: bool = True, transient_local: bool = False, keep_all: bool = False) -> Qos:
    """An offered QoS profile as metadata.yaml records it (infinite deadline, lifespan, lease)."""
    infinite = QosTime(0x7FFFFFFF, 0xFFFFFFFF)
    return Qos(
        QosHistory.KEEP_ALL if keep_all else QosHistory.KEEP_LAST,
        depth,
        QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
        infinite,
        infinite,
        QosLiveliness.AUTOMATIC,
        infinite,
        False,
    )


def bag_name(now_s: float) -> str:
    """`rosbag2_YYYY_MM_DD-HH_MM_SS` (UTC), `ros2 bag record`'s default name."""
    return datetime.fromtimestamp(now_s, UTC).strftime("rosbag2_%Y_%m_%d-%H_%M_%S")


# ---------------------------------------------------------------------------------------- write
@dataclass(frozen=True)
class BagTopic:
    name: str
    """Fully qualified (`/eva/left/joint_states`)."""
    type_name: str
    """`pkg/msg/Type`."""
    qos: tuple[Qos, ...] = ()
    """The offered QoS recorded for it (what `ros2 bag play` publishes with)."""


@dataclass
class BagResult:
    path: Path
    written: dict[str, int]
    dropped: dict[str, int]
    error: str = ""

    @property
    def messages(self) -> int:
        return sum(self.written.values())


_CLOSE = object()


@dataclass
class BagWriter:
    """A rosbag2 (MCAP) writer behind a bounded queue: `submit` never waits (a full queue drops
    the message and counts it); a thread of its own writes, and closes the MCAP chunk every
    `flush_period_s` (module docstring). A topic's connection is added at its first message, so
    the bag lists the topics that carried data."""

    path: Path
    topics: Sequence[BagTopic]
    definitions: InterfaceDefinitions
    queue_messages: int = 4000
    flush_period_s: float = 1.0
    on_writer_start: Callable[[], None] | None = None
    written: list[int] = field(init=False)
    dropped: list[int] = field(init=False)
    error: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.path.exists():
            raise BagError(f"{self.path} exists already; a bag is never overwritten")
        for topic in self.topics:
            self.definitions.definition(topic.type_name)  # refuse an unknown type before the first message
        self.written = [0] * len(self.topics)
        self.dropped = [0] * len(self.topics)
        self._queue: queue.Queue = queue.Queue(maxsize=self.queue_messages)
        self._writer = Writer(self.path, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
        try:
            self._writer.open()
        except Exception as exc:
            raise BagError(f"cannot create {self.path}: {exc}") from exc
        self._connections: dict[int, object] = {}
        self._thread = threading.Thread(target=self._run, name="bag_writer", daemon=True)
        self._thread.start()

    def submit(self, index: int, stamp_ns: int, data: bytes) -> bool:
        """Queue one serialized message of `topics[index]` received at `stamp_ns`; False: dropped."""
        if self.error:
            self.dropped[index] += 1
            return False
        try:
            self._queue.put_nowait((index, stamp_ns, data))
            return True
        except queue.Full:
            self.dropped[index] += 1
            return False

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def _connection(self, index: int):
        conn = self._connections.get(index)
        if conn is None:
            topic = self.topics[index]
            msgdef, rihs01 = self.definitions.definition(topic.type_name)
            conn = self._writer.add_connection(
                topic.name, topic.type_name, msgdef=msgdef, rihs01=rihs01, offered_qos_profiles=list(topic.qos)
            )
            self._connections[index] = conn
        return conn

    def _run(self) -> None:
        if self.on_writer_start is not None:
            self.on_writer_start()
        next_flush = time.monotonic() + self.flush_period_s
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, next_flush - time.monotonic()))
            except queue.Empty:
                item = None
            if item is _CLOSE:
                return
            if item is not None and not self.error:
                index, stamp_ns, data = item
                try:
                    self._writer.write(self._connection(index), stamp_ns, data)
                    self.written[index] += 1
                except Exception as exc:  # noqa: BLE001 - a full disk, a closed file: stop writing, say why
                    self.error = f"write failed: {type(exc).__name__}: {exc}"
                    self.dropped[index] += 1
            if time.monotonic() >= next_flush:
                next_flush = time.monotonic() + self.flush_period_s
                if not self.error:
                    try:
                        flush_chunk(self._writer)
                    except OSError as exc:
                        self.error = f"flush failed: {exc}"

    def close(self, timeout_s: float = 10.0) -> BagResult:
        """Write what is queued, the MCAP summary and metadata.yaml; returns what was written."""
        try:
            self._queue.put(_CLOSE, timeout=timeout_s)
        except queue.Full:
            self.error = self.error or f"the writer did not drain its queue within {timeout_s:.0f} s"
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.error = self.error or f"the writer did not finish within {timeout_s:.0f} s"
        else:
            while True:  # what the writer never took (it stopped on an error)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not _CLOSE:
                    self.dropped[item[0]] += 1
            try:
                self._writer.close()
            except Exception as exc:  # noqa: BLE001 - report; `repair` recovers the flushed chunks
                self.error = self.error or f"close failed: {type(exc).__name__}: {exc}"
        names = [t.name for t in self.topics]
        return BagResult(self.path, dict(zip(names, self.written)), dict(zip(names, self.dropped)), self.error)


def flush_chunk(writer: Writer) -> None:
    """Put the messages buffered in rosbags' open MCAP chunk on disk (module docstring)."""
    storage = writer.storage
    if storage is None or not hasattr(storage, "close_chunk"):
        return
    if storage.chunk.msgs:  # type: ignore[attr-defined]
        storage.close_chunk()
    storage.bio.flush()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------- read / info
def open_reader(path: Path | str) -> Reader:
    path = Path(path)
    if not (path / "metadata.yaml").is_file():
        hint = " (a crashed recording? `egomimic-bag repair` rebuilds it)" if list(path.glob("*.mcap")) else ""
        raise BagError(f"{path}: no metadata.yaml{hint}")
    reader = Reader(path)
    try:
        reader.open()
    except Exception as exc:
        raise BagError(f"{path}: {exc}") from exc
    return reader


def _size(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if num_bytes < 1024 or unit == "GiB":
            return f"{num_bytes:.1f} {unit}" if unit != "B" else f"{int(num_bytes)} B"
        num_bytes /= 1024
    return f"{num_bytes:.1f} GiB"


def _stamp(ns: int) -> str:
    sec, rem = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(sec, UTC).strftime("%b %e %Y %H:%M:%S")
    return f"{text}.{rem:09d} ({sec}.{rem:09d})"


def info_text(path: Path | str) -> str:
    """What `ros2 bag info` prints: files, size, storage, duration, start and end, messages, and per
    topic its type, count and serialization format (times in UTC)."""
    import yaml

    path = Path(path)
    reader = open_reader(path)
    try:
        meta = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
        files = [path / name for name in meta.get("relative_file_paths", ())]
        size = sum(p.stat().st_size for p in files if p.is_file())
        count = reader.message_count
        start = reader.start_time if count else 0
        end = reader.end_time if count else 0
        lines = [
            f"Files:             {'  '.join(p.name for p in files)}",
            f"Bag size:          {_size(size)}",
            f"Storage id:        {meta.get('storage_identifier', '')}",
            f"ROS Distro:        {reader.ros_distro or 'unknown'}",
            f"Duration:          {(end - start) / 1e9:.9f}s",
            f"Start:             {_stamp(start)}",
            f"End:               {_stamp(end)}",
            f"Messages:          {count}",
        ]
        topics = sorted(reader.connections, key=lambda c: c.topic)
        label = "Topic information: "
        for conn in topics:
            fmt = getattr(conn.ext, "serialization_format", "cdr")
            lines.append(
                f"{label}Topic: {conn.topic} | Type: {conn.msgtype} | Count: {conn.msgcount} | "
                f"Serialization Format: {fmt}"
            )
            label = " " * len(label)
        if not topics:
            lines.append(label)
        lines += ["Services:          0", "Service information: "]
        return "\n".join(lines)
    finally:
        reader.close()


# --------------------------------------------------------------------------------------- repair
@dataclass
class RepairResult:
    path: Path
    messages: int
    topics: dict[str, int]
    kept: Path | None
    """The file recovered from, renamed (None: nothing needed repair)."""
    stopped_at: str = ""
    """Why reading stopped before the end of the file ("" when it ended cleanly)."""


def needs_repair(path: Path) -> bool:
    """A bag without metadata.yaml, or whose MCAP file has no valid footer."""
    if not (path / "metadata.yaml").is_file():
        return True
    try:
        open_reader(path).close()
    except BagError:
        return True
    return False


def repair(path: Path | str, definitions: InterfaceDefinitions | None = None) -> RepairResult:
    """Rebuild a bag whose writer died (kill -9, power loss): read its MCAP file up to the last
    complete record, write every message found into a complete bag of the same name (summary,
    metadata.yaml), and keep the original beside it as `<name>.mcap.truncated`."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Message, Schema
    from mcap.stream_reader import StreamReader

    path = Path(path).resolve()
    files = sorted(path.glob(f"*{STORAGE_SUFFIX}"))
    if not path.is_dir() or len(files) != 1:
        raise BagError(f"{path}: expected a bag directory with one {STORAGE_SUFFIX} file, found {len(files)}")
    if not needs_repair(path):
        reader = open_reader(path)
        topics = {c.topic: c.msgcount for c in reader.connections}
        reader.close()
        return RepairResult(path, sum(topics.values()), topics, None)
    definitions = definitions or InterfaceDefinitions()
    work = path.parent / f".{path.name}.repair"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    writer = Writer(work / path.name, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    connections: dict[int, object] = {}
    counts: dict[str, int] = {}
    stopped_at = ""
    with files[0].open("rb") as stream:
        try:
            for record in StreamReader(stream, skip_magic=False).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record
                elif isinstance(record, Channel):
                    channels[record.id] = record
                elif isinstance(record, Message):
                    channel = channels.get(record.channel_id)
                    if channel is None:
                        continue  # its channel record was lost: nothing says what it is
                    conn = connections.get(channel.id)
                    if conn is None:
                        schema = schemas[channel.schema_id]
                        try:
                            msgdef, rihs01 = definitions.definition(schema.name)
                        except BagError:
                            msgdef, rihs01 = definition_from_text(schema.name, schema.data.decode())
                        conn = writer.add_connection(
                            channel.topic,
                            schema.name,
                            msgdef=msgdef,
                            rihs01=rihs01,
                            serialization_format=channel.message_encoding,
                            offered_qos_profiles=parse_qos(channel.metadata.get("offered_qos_profiles", "")),
                        )
                        connections[channel.id] = conn
                    writer.write(conn, record.log_time, record.data)  # type: ignore[arg-type]
                    counts[channel.topic] = counts.get(channel.topic, 0) + 1
        except (McapError, struct.error, ValueError, EOFError) as exc:
            stopped_at = f"{type(exc).__name__}: {exc}"
    writer.close()
    kept = files[0].with_name(files[0].name + TRUNCATED_SUFFIX)
    files[0].rename(kept)
    (path / "metadata.yaml").unlink(missing_ok=True)
    for item in (work / path.name).iterdir():
        item.rename(path / item.name)
    shutil.rmtree(work)
    return RepairResult(path, sum(counts.values()), counts, kept, stopped_at)


def select(
    source: Path | str,
    dest: Path | str,
    topics: Iterable[str],
    compress: bool = False,
    since_ns: int = 0,
    keep: Callable[[str, int, bytes], bool] | None = None,
) -> dict[str, int]:
    """Copy the messages of `topics` from the bag `source` into a new complete bag `dest` (each
    topic with its recorded type, definition, hash and QoS; reception stamps kept): a small bag for
    one purpose, e.g. the replay regression's fixtures. `compress`: rosbag2's file compression
    (zstd, `<name>.mcap.zstd`; rosbags and `ros2 bag` read it); `since_ns`: only messages received
    from then on; `keep(topic, received_ns, raw)`: False leaves that message out (e.g. the camera
    frames far from any policy query). Returns messages per topic copied."""
    dest = Path(dest)
    if dest.exists():
        raise BagError(f"{dest} exists already; a bag is never overwritten")
    wanted = set(topics)
    reader = open_reader(source)
    try:
        missing = sorted(wanted - {c.topic for c in reader.connections})
        if missing:
            raise BagError(f"{source}: no such topic(s) in the bag: {missing}")
        conns = [c for c in reader.connections if c.topic in wanted]
        writer = Writer(dest, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
        if compress:
            writer.set_compression(CompressionMode.FILE, CompressionFormat.ZSTD)
        writer.open()
        out = {}
        for c in conns:
            ext = c.ext
            if not isinstance(ext, ConnectionExtRosbag2):
                raise BagError(f"{source}: {c.topic} is not a rosbag2 connection")
            out[c.id] = writer.add_connection(
                c.topic,
                c.msgtype,
                msgdef=c.msgdef.data,
                rihs01=c.digest,
                serialization_format=ext.serialization_format,
                offered_qos_profiles=ext.offered_qos_profiles,
            )
        counts = {c.topic: 0 for c in conns}
        for conn, stamp_ns, data in reader.messages(connections=conns, start=since_ns or None):
            if keep is not None and not keep(conn.topic, stamp_ns, bytes(data)):
                continue
            writer.write(out[conn.id], stamp_ns, data)
            counts[conn.topic] += 1
        writer.close()
    finally:
        reader.close()
    return counts
