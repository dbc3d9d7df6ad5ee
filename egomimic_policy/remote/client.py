"""RemotePolicy: a ChunkPolicy served by `egomimic-policy-server` (pyzmq DEALER, msgpack).

Why it is built this way (the hazards of the upstream clients):
- No call waits without a deadline: `infer` fails after `timeout_s` (RemoteTimeout) and fails
  at once when the server is not connected (RemoteUnavailable). The executor calls it from its
  worker, so a dead or slow server only drains the queue; the control tick never waits.
- One I/O thread owns the socket: it forwards requests, matches replies by request id (a late
  reply to an abandoned request is counted and dropped), pings every `heartbeat_s` and, when
  nothing came back for `heartbeat_timeout_s`, declares the server lost, fails what is pending,
  opens a fresh socket and says hello again until a server answers (reconnect).
- Handshake: the server's PolicySpec must match what this robot runs (embodiment, control
  rate, and the fingerprint / action layout / chunk length when configured), and after a
  reconnect it must equal the first server's spec field by field: a different model swapped in
  mid-episode is refused, not used. A reconnected server gets a `reset` (a fresh window).
  Every pong names the server run (`instance`), so a restart behind the same address is
  noticed even when zmq reconnected before any heartbeat lapsed.
- `ZMQ_IMMEDIATE`: nothing is queued for a server that is not connected, so a restarted server
  never receives stale observations.
Callers: `infer`/`reset` from one thread at a time (the executor's worker); `status` from any.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import numpy as np
import zmq

from egomimic_hw.errors import ConfigError
from egomimic_policy.interface import Chunk, Observation, PolicySpec
from egomimic_policy.remote import keys
from egomimic_policy.remote import protocol as P
from egomimic_policy.remote.wire import (
    PROTOCOL_VERSION,
    WireError,
    chunk_from_dict,
    observation_to_dict,
    pack,
    spec_from_dict,
    unpack,
)


class RemoteUnavailable(RuntimeError):
    """No server is connected (not yet, or lost); the reason says which."""


class RemoteTimeout(TimeoutError):
    """The server did not answer within the request's deadline."""


class RemoteError(RuntimeError):
    """The server answered with an error (code and detail in the message)."""


class RemoteRefused(ConfigError):
    """The server's policy does not match what this robot runs (handshake mismatch)."""


@dataclass(frozen=True)
class RemoteConfig:
    address: str = field(default="tcp://127.0.0.1:5555", metadata={"help": "policy server address tcp://host:port"})
    timeout_s: float = field(
        default=1.0,
        metadata={"help": "deadline (s) of one query, queueing at the server included", "range": (0.0, 60.0)},
    )
    heartbeat_s: float = field(default=0.2, metadata={"help": "ping period (s)", "range": (0.0, 60.0)})
    heartbeat_timeout_s: float = field(
        default=1.0, metadata={"help": "silence (s) after which the server counts as lost", "range": (0.0, 60.0)}
    )
    connect_timeout_s: float = field(
        default=10.0, metadata={"help": "wait (s) for the first handshake at start-up", "range": (0.0, 600.0)}
    )
    embodiment: str = field(default="eva_bimanual", metadata={"help": "embodiment the server's policy must be for"})
    rate_hz: float = field(
        default=30.0, metadata={"help": "control rate (Hz) the server's policy must produce", "range": (0.0, 1000.0)}
    )
    fingerprint: str = field(
        default="", metadata={"help": "expected model fingerprint ('' = accept the first server's)"}
    )
    action_layout: str = field(default="", metadata={"help": "expected action layout ('' = any)"})
    chunk_length: int = field(default=0, metadata={"help": "expected chunk length (0 = any)", "range": (0, 10_000)})
    client_key_file: str = field(
        default="",
        metadata={
            "help": "this robot's CURVE key pair (NAME.key_secret from egomimic-policy-server keygen); '' = no keys"
        },
    )
    server_key_file: str = field(
        default="", metadata={"help": "the server's public key (its NAME.key): the only server this link accepts"}
    )

    def __post_init__(self) -> None:
        if not self.address.startswith("tcp://"):
            raise ConfigError(f"address {self.address!r}: expected tcp://host:port")
        for name in ("timeout_s", "heartbeat_s", "heartbeat_timeout_s", "connect_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be > 0 s, got {value}")
        if self.heartbeat_timeout_s <= self.heartbeat_s:
            raise ConfigError(
                f"heartbeat_timeout_s ({self.heartbeat_timeout_s}) must exceed heartbeat_s ({self.heartbeat_s})"
            )


class RemotePolicy:
    """ChunkPolicy over the network. Construction waits for the first handshake (so `spec` is
    known) and raises RemoteUnavailable or RemoteRefused if it does not succeed."""

    def __init__(self, config: RemoteConfig, context: zmq.Context | None = None):
        self.config = config
        self._curve = keys.client_keys(config.client_key_file, config.server_key_file)  # ConfigError here, not later
        self._ctx = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        inproc = f"inproc://remote-policy-{id(self)}"
        self._cmd_rx = self._ctx.socket(zmq.PAIR)
        self._cmd_rx.bind(inproc)
        self._cmd_tx = self._ctx.socket(zmq.PAIR)
        self._cmd_tx.connect(inproc)
        self._cmd_lock = threading.Lock()
        self._stop = threading.Event()
        self._handshake = threading.Event()
        self._connected = False
        self._state = "connecting"
        self._reason = f"waiting for the first handshake with {config.address}"
        self._first_spec: PolicySpec | None = None
        self._server_pid = 0
        self._instance = ""
        self._rtt_ms: deque[float] = deque(maxlen=100)
        self._server_infer_ms = float("nan")
        self.counters = {"reconnects": 0, "timeouts": 0, "late_replies": 0, "server_errors": 0, "refusals": 0}
        self._thread = threading.Thread(target=self._io_loop, name="remote-policy-io", daemon=True)
        self._thread.start()
        if not self._handshake.wait(config.connect_timeout_s) or self._first_spec is None:
            state, reason = self._state, self._reason
            self.close()
            if state == "refused":
                raise RemoteRefused(f"policy server {config.address} refused: {reason}")
            raise RemoteUnavailable(
                f"no policy server answered at {config.address} within "
                f"{config.connect_timeout_s} s ({reason}); start egomimic-policy-server first"
            )
        self.spec: PolicySpec = self._first_spec

    # ------------------------------------------------------------ public API
    def infer(self, observation: Observation) -> Chunk:
        reply = self._request(
            {
                "type": P.INFER,
                "timeout_ms": self.config.timeout_s * 1e3,
                "observation": observation_to_dict(observation),
            }
        )
        if reply["type"] != P.CHUNK:
            raise RemoteError(f"unexpected reply {reply['type']!r}")
        try:
            chunk = chunk_from_dict(reply.get("chunk"))
        except WireError as exc:
            self.counters["server_errors"] += 1
            raise RemoteError(f"malformed chunk from the server: {exc}") from None
        if chunk.observation_stamp_ns != observation.stamp_ns:
            raise RemoteError(f"chunk answers observation {chunk.observation_stamp_ns}, asked {observation.stamp_ns}")
        self._server_infer_ms = float(reply.get("infer_ms", float("nan")))
        return chunk

    def reset(self) -> None:
        """Reset the server's window; when disconnected this happens at the next handshake."""
        if not self._connected:
            return  # a (re)connected server is always reset on handshake
        self._request({"type": P.RESET})

    def status(self) -> dict:
        rtt = list(self._rtt_ms)
        spec = self._first_spec
        return {
            "remote_state": self._state,
            "remote_reason": self._reason,
            "remote_address": self.config.address,
            "server_pid": self._server_pid,
            # which model answers (the handshake's spec): logged by the node, in /diagnostics
            "server_family": spec.family if spec else "",
            "server_fingerprint": spec.fingerprint if spec else "",
            "server_config_sha256": spec.extra.get("config_sha256", "none (no checkpoint)") if spec else "",
            **self.counters,
            "rtt_p50_ms": round(float(np.median(rtt)), 2) if rtt else float("nan"),
            "server_infer_ms": round(self._server_infer_ms, 2),
        }

    @property
    def connected(self) -> bool:
        return self._connected

    def close(self) -> None:
        self._stop.set()
        with self._cmd_lock:
            try:
                self._cmd_tx.send_multipart([b"0", b""], zmq.NOBLOCK)  # wake the I/O thread
            except zmq.ZMQError:
                pass
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(2.0)
        with self._cmd_lock:
            self._cmd_tx.close(0)

    # --------------------------------------------------------------- helpers
    def _request(self, message: dict) -> dict:
        if not self._connected:
            raise RemoteUnavailable(f"policy server {self.config.address}: {self._reason}")
        request_id = next(self._ids)
        future: Future = Future()
        with self._lock:
            self._pending[request_id] = future
        payload = pack({**message, "id": request_id})
        start = time.monotonic()
        with self._cmd_lock:
            self._cmd_tx.send_multipart([str(request_id).encode(), payload])
        try:
            reply = future.result(timeout=self.config.timeout_s)
        except FutureTimeout:
            with self._lock:
                self._pending.pop(request_id, None)
            self.counters["timeouts"] += 1
            raise RemoteTimeout(f"no answer from {self.config.address} within {self.config.timeout_s} s") from None
        self._rtt_ms.append((time.monotonic() - start) * 1e3)
        if reply["type"] == P.ERROR:
            self.counters["server_errors"] += 1
            raise RemoteError(f"{reply.get('code')}: {reply.get('detail')}")
        return reply

    def _fail_pending(self, reason: str) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(RemoteUnavailable(reason))

    # ------------------------------------------------------------- I/O thread
    def _new_socket(self) -> zmq.Socket:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        keys.apply_client(sock, self._curve)
        sock.connect(self.config.address)
        return sock

    def _send(self, sock: zmq.Socket, payload: bytes) -> bool:
        try:
            sock.send(payload, zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def _io_loop(self) -> None:
        cfg = self.config
        sock = self._new_socket()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._cmd_rx, zmq.POLLIN)
        last_seen = time.monotonic()
        next_beat = 0.0
        try:
            while not self._stop.is_set():
                timeout_ms = max(0, math.ceil((next_beat - time.monotonic()) * 1e3))  # whole ms, never early
                events = dict(poller.poll(timeout_ms))
                if self._cmd_rx in events:
                    rid, payload = self._cmd_rx.recv_multipart()
                    if payload and not (self._connected and self._send(sock, payload)):
                        self._fail_one(int(rid), f"not connected ({self._reason})")
                if sock in events:
                    last_seen = time.monotonic()
                    self._on_message(sock, sock.recv())
                now = time.monotonic()
                if now >= next_beat:
                    kind = P.PING if self._connected else P.HELLO
                    self._send(sock, pack({"type": kind, "id": 0, "v": PROTOCOL_VERSION}))
                    next_beat = now + cfg.heartbeat_s
                if self._connected and now - last_seen > cfg.heartbeat_timeout_s:
                    self._lost(f"no reply for {now - last_seen:.1f} s (server dead or unreachable); reconnecting")
                    poller.unregister(sock)
                    sock.close(0)
                    sock = self._new_socket()
                    poller.register(sock, zmq.POLLIN)
                    last_seen = now
        finally:
            sock.close(0)
            self._cmd_rx.close(0)
            self._fail_pending("client closed")

    def _fail_one(self, request_id: int, reason: str) -> None:
        with self._lock:
            future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(RemoteUnavailable(reason))

    def _lost(self, reason: str) -> None:
        self._connected = False
        self._state, self._reason = "connecting", reason
        self.counters["reconnects"] += 1
        self._fail_pending(reason)

    def _on_message(self, sock: zmq.Socket, payload: bytes) -> None:
        try:
            msg = unpack(payload)
            kind, request_id = msg["type"], int(msg["id"])
        except (WireError, KeyError, TypeError, ValueError, OverflowError):
            self.counters["server_errors"] += 1
            return
        if kind == P.META:
            self._on_meta(sock, msg)
            return
        if kind == P.PONG:
            if self._connected and msg.get("instance") != self._instance:
                self._lost(f"server restarted (instance {msg.get('instance')}); shaking hands again")
            return
        if request_id == 0:
            return
        with self._lock:
            future = self._pending.pop(request_id, None)
        if future is None:
            self.counters["late_replies"] += 1
        elif not future.done():
            future.set_result(msg)

    def _on_meta(self, sock: zmq.Socket, msg: dict) -> None:
        if self._connected:
            return  # an answer to a repeated hello
        try:
            spec = spec_from_dict(msg["spec"])
        except (WireError, KeyError) as exc:
            self._refuse(f"malformed handshake: {exc}")
            return
        cfg = self.config
        problems = P.spec_mismatches(
            spec,
            embodiment=cfg.embodiment,
            rate_hz=cfg.rate_hz,
            fingerprint=cfg.fingerprint,
            action_layout=cfg.action_layout,
            chunk_length=cfg.chunk_length,
        )
        if self._first_spec is not None and spec != self._first_spec:
            problems.append(
                f"server now runs {spec.family} {spec.fingerprint}, not the {self._first_spec.family} "
                f"{self._first_spec.fingerprint} this session started with"
            )
        if problems:
            self._refuse("; ".join(problems))
            return
        reconnect = self._first_spec is not None
        self._first_spec = spec
        server = msg.get("server", {})
        self._server_pid, self._instance = int(server.get("pid", 0)), str(server.get("instance", ""))
        if reconnect:
            self._send(sock, pack({"type": P.RESET, "id": 0}))  # a fresh window on the new connection
        self._connected = True
        self._state, self._reason = "connected", f"connected to pid {self._server_pid}"
        self._handshake.set()

    def _refuse(self, reason: str) -> None:
        self.counters["refusals"] += 1
        self._state, self._reason = "refused", reason
        self._handshake.set()
