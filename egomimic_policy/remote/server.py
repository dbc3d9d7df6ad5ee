"""egomimic-policy-server: serve any ChunkPolicy over pyzmq (ROUTER) with msgpack.

    egomimic-policy-server --policy fold --bind tcp://127.0.0.1:5555

Why two threads: the socket thread answers `hello` and `ping` at once, even while the model is
busy (a 300 ms query must not look like a dead server to the client's heartbeat); the model
thread runs infer/reset one at a time, in arrival order. Results come back to the socket
thread over an inproc PAIR socket (a zmq socket is used by one thread only).

Binds loopback by default; another interface needs `--allow-remote` (the observation carries
camera images, and anyone who can connect can drive the model).
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlparse

import zmq
from zmq.auth.thread import ThreadAuthenticator

from egomimic_hw.errors import ConfigError
from egomimic_policy.interface import ChunkPolicy, Observation
from egomimic_policy.remote import keys
from egomimic_policy.remote import protocol as P
from egomimic_policy.remote.wire import (
    PROTOCOL_VERSION,
    WireError,
    chunk_to_dict,
    observation_from_dict,
    pack,
    spec_to_dict,
    unpack,
)
from egomimic_policy.remote.wire import request_id as wire_request_id
from egomimic_policy.remote.wire import timeout_ms as wire_timeout_ms

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
INSECURE_WARNING = (
    "egomimic-policy-server: WARNING --insecure: no authentication, no encryption; anyone who reaches this "
    "port can answer in the model's place"
)
DEFAULT_MAX_CLIENTS = 8
"""Robots (or tools) one server answers at a time; a policy server serves one robot in practice."""
DEFAULT_IDLE_TIMEOUT_S = 10.0
"""A client that sent nothing for this long is forgotten and its slot freed (a connected policy
node pings every 0.2 s and gives up on the server after 1 s of silence)."""
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""A request larger than this is refused by zmq before it is allocated (--max-message-mb). Three
640x480 RGB images with two steps of history are about 5.5 MB."""


def is_loopback(address: str) -> bool:
    host = urlparse(address).hostname or ""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


class _RefusalLog(logging.Handler):
    """The ZAP authenticator's decisions: each refused client is counted and said on stderr (its
    public key, never a secret); allowed ones stay quiet."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.refused = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("DENIED"):
            self.refused += 1
            print(f"egomimic-policy-server: refused a client ({message})", file=sys.stderr, flush=True)


class _BadRequest(Exception):
    def __init__(self, request_id: int, detail: str):
        super().__init__(detail)
        self.request_id, self.detail = request_id, detail


@dataclass
class _Job:
    identity: bytes
    request_id: int
    kind: str
    received_s: float
    timeout_s: float = 0.0
    observation: Observation | None = None
    """Set on INFER jobs before they are queued; None on RESET."""


class PolicyServer:
    """A ROUTER socket in front of one policy. `serve(stop)` runs until `stop` is set."""

    def __init__(
        self,
        policy: ChunkPolicy,
        bind: str,
        *,
        allow_remote: bool = False,
        max_pending: int = 2,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        secret_key_file: str = "",
        client_keys_dir: str = "",
        insecure: bool = False,
        context: zmq.Context | None = None,
    ):
        if not bind.startswith("tcp://"):
            raise ConfigError(f"bind {bind!r}: expected tcp://host:port")
        if not allow_remote and not is_loopback(bind):
            raise ConfigError(f"bind {bind!r} is not loopback; pass --allow-remote to serve other machines")
        if bool(secret_key_file) != bool(client_keys_dir):
            raise ConfigError("an encrypted server needs both --secret-key and --allow-clients")
        self.encrypted = bool(secret_key_file)
        if not is_loopback(bind) and not self.encrypted and not insecure:
            raise ConfigError(
                f"bind {bind!r} serves the network without keys: anyone there could answer in the model's place. "
                "Give --secret-key and --allow-clients (egomimic-policy-server keygen), or --insecure"
            )
        self.insecure = insecure and not self.encrypted
        self.policy = policy
        self.spec = policy.spec
        # CURVE needs a ZAP authenticator of its own context (one per context)
        self._ctx = context or (zmq.Context() if self.encrypted else zmq.Context.instance())
        self._auth = None
        self._refusals = _RefusalLog()
        if self.encrypted:
            public, secret = keys.load_pair(secret_key_file, "--secret-key")
            allow_dir = keys.allowed_clients(client_keys_dir)
            auth_log = logging.getLogger(f"egomimic.policy_server.auth.{id(self)}")
            auth_log.setLevel(logging.DEBUG)
            auth_log.propagate = False
            auth_log.addHandler(self._refusals)
            self._auth = ThreadAuthenticator(self._ctx, log=auth_log)
            self._auth.start()
            self._auth.configure_curve(domain="*", location=str(allow_dir))
        self._clients_seen: set[bytes] = set()
        self._router = self._ctx.socket(zmq.ROUTER)
        if self.encrypted:
            self._router.curve_server = True
            self._router.curve_publickey, self._router.curve_secretkey = public, secret
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.ROUTER_MANDATORY, 0)
        # zmq refuses a larger message before allocating it, and drops that peer's connection
        self._router.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        self._router.bind(bind)
        self.address = self._router.getsockopt_string(zmq.LAST_ENDPOINT)
        inproc = f"inproc://policy-server-results-{id(self)}"
        self._results_rx = self._ctx.socket(zmq.PAIR)
        self._results_rx.bind(inproc)
        self._results_tx = self._ctx.socket(zmq.PAIR)
        self._results_tx.connect(inproc)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._max_pending = max_pending
        self.max_clients, self.idle_timeout_s = max_clients, idle_timeout_s
        self._clients: dict[bytes, float] = {}
        """Client identity -> when it last sent anything (monotonic s); idle ones are forgotten."""
        self.clients_refused = 0
        self._busy = threading.Event()
        self._started_ns = time.time_ns()
        self.instance = f"{os.getpid()}-{self._started_ns}"
        """Names this server run in every meta and pong, so a client notices a restart even
        when zmq reconnected underneath it faster than a heartbeat timeout."""
        self.served = 0
        self.expired = 0
        self.failed = 0
        self.bad_requests = 0

    @property
    def refused_clients(self) -> int:
        """Clients the CURVE allow-list turned away (each also said on stderr)."""
        return self._refusals.refused

    # --------------------------------------------------------- socket thread
    def serve(self, stop: threading.Event) -> None:
        worker = threading.Thread(target=self._model_loop, name="policy-server-model", daemon=True)
        worker.start()
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        poller.register(self._results_rx, zmq.POLLIN)
        try:
            while not stop.is_set():
                events = dict(poller.poll(100))
                if self._results_rx in events:
                    self._router.send_multipart(self._results_rx.recv_multipart())
                if self._router in events:
                    frames = self._router.recv_multipart()
                    if self.insecure and frames[0] not in self._clients_seen:
                        if len(self._clients_seen) > 10_000:
                            self._clients_seen.clear()
                        self._clients_seen.add(frames[0])
                        print(INSECURE_WARNING + f" (new client {frames[0].hex()})", file=sys.stderr, flush=True)
                    if len(frames) == 2:
                        self._on_request(frames[0], frames[1])
        finally:
            self._jobs.put(None)
            worker.join(2.0)
            for sock in (self._router, self._results_rx, self._results_tx):
                sock.close(0)
            if self._auth is not None:
                self._auth.stop()

    def _admit(self, identity: bytes, request_id: int) -> bool:
        """Count `identity` as a client (a session: hello, infer, reset; a ping is answered without
        one); a new one beyond max_clients is answered BUSY. A client silent for idle_timeout_s is
        forgotten, freeing its slot (a connected policy node pings every heartbeat)."""
        now = time.monotonic()
        if identity not in self._clients:
            for other, seen in list(self._clients.items()):
                if now - seen > self.idle_timeout_s:
                    del self._clients[other]
            if len(self._clients) >= self.max_clients:
                self.clients_refused += 1
                detail = f"{len(self._clients)} clients already (--max-clients {self.max_clients})"
                self._reply(identity, {"type": P.ERROR, "id": request_id, "code": P.BUSY, "detail": detail})
                return False
        self._clients[identity] = now
        return True

    def _reply(self, identity: bytes, message: dict) -> None:
        self._router.send_multipart([identity, pack(message)])

    def _on_request(self, identity: bytes, payload: bytes) -> None:
        """Answer one request; whatever it holds, the server stays up (a request it cannot read,
        or that fails in a way nobody foresaw, gets BAD_REQUEST and is counted)."""
        try:
            self._handle(identity, payload)
        except Exception as exc:  # noqa: BLE001 - one bad request must not stop the server
            self.bad_requests += 1
            detail = exc.detail if isinstance(exc, _BadRequest) else f"unreadable request ({type(exc).__name__}: {exc})"
            request_id = exc.request_id if isinstance(exc, _BadRequest) else -1
            self._reply(identity, {"type": P.ERROR, "id": request_id, "code": P.BAD_REQUEST, "detail": detail[:500]})

    def _handle(self, identity: bytes, payload: bytes) -> None:
        try:
            msg = unpack(payload)
            kind, request_id = msg["type"], wire_request_id(msg["id"])
        except (WireError, KeyError) as exc:
            raise _BadRequest(-1, str(exc)) from None
        if not isinstance(kind, str):
            raise _BadRequest(request_id, f"type must be text, got {type(kind).__name__}")
        if identity in self._clients:
            self._clients[identity] = time.monotonic()  # any message keeps a session alive
        elif kind in (P.HELLO, P.INFER, P.RESET) and not self._admit(identity, request_id):
            return
        if kind == P.PING:
            self._reply(
                identity, {"type": P.PONG, "id": request_id, "busy": self._busy.is_set(), "instance": self.instance}
            )
        elif kind == P.HELLO:
            if msg.get("v") != PROTOCOL_VERSION:
                self._reply(
                    identity,
                    {
                        "type": P.ERROR,
                        "id": request_id,
                        "code": P.BAD_REQUEST,
                        "detail": f"protocol version {msg.get('v')!r:.40} != server {PROTOCOL_VERSION}",
                    },
                )
                return
            self._reply(
                identity,
                {
                    "type": P.META,
                    "id": request_id,
                    "v": PROTOCOL_VERSION,
                    "spec": spec_to_dict(self.spec),
                    "server": {"pid": os.getpid(), "instance": self.instance},
                },
            )
        elif kind in (P.INFER, P.RESET):
            if self._jobs.qsize() >= self._max_pending:
                self._reply(
                    identity,
                    {
                        "type": P.ERROR,
                        "id": request_id,
                        "code": P.BUSY,
                        "detail": f"{self._jobs.qsize()} requests already queued",
                    },
                )
                return
            job = _Job(identity, request_id, kind, time.monotonic())
            if kind == P.INFER:
                try:
                    if not isinstance(msg["observation"], dict):
                        raise WireError("observation must be a map")
                    job.observation = observation_from_dict(msg["observation"])
                    job.timeout_s = wire_timeout_ms(msg["timeout_ms"]) / 1e3
                except (WireError, KeyError) as exc:
                    raise _BadRequest(request_id, str(exc)) from None
            self._jobs.put(job)
        else:
            self._reply(
                identity,
                {"type": P.ERROR, "id": request_id, "code": P.BAD_REQUEST, "detail": f"unknown message type {kind!r}"},
            )

    # ---------------------------------------------------------- model thread
    def _model_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._busy.set()
            try:
                reply = self._run(job)
            finally:
                self._busy.clear()
            self._results_tx.send_multipart([job.identity, pack(reply)])

    def _run(self, job: _Job) -> dict:
        if job.kind == P.RESET:
            try:
                self.policy.reset()
            except Exception as exc:  # noqa: BLE001 - reported to the client
                return {"type": P.ERROR, "id": job.request_id, "code": P.INFER_FAILED, "detail": f"reset: {exc!r}"}
            return {"type": P.OK, "id": job.request_id}
        queued_s = time.monotonic() - job.received_s
        if queued_s > job.timeout_s:
            self.expired += 1
            return {
                "type": P.ERROR,
                "id": job.request_id,
                "code": P.EXPIRED,
                "detail": f"waited {queued_s * 1e3:.0f} ms > timeout {job.timeout_s * 1e3:.0f} ms",
            }
        assert job.observation is not None  # an INFER job is queued only with its observation
        start = time.monotonic()
        try:
            chunk = self.policy.infer(job.observation)
        except Exception as exc:  # noqa: BLE001 - reported to the client, the server keeps serving
            self.failed += 1
            return {
                "type": P.ERROR,
                "id": job.request_id,
                "code": P.INFER_FAILED,
                "detail": f"{type(exc).__name__}: {exc}",
            }
        self.served += 1
        return {
            "type": P.CHUNK,
            "id": job.request_id,
            "chunk": chunk_to_dict(chunk),
            "infer_ms": (time.monotonic() - start) * 1e3,
            "queue_ms": queued_s * 1e3,
        }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="egomimic-policy-server",
        description="Serve a policy to EVA policy nodes (policy:=tcp://host:port) over pyzmq + msgpack.",
        epilog="Example: egomimic-policy-server --policy fold --bind tcp://127.0.0.1:5555\n"
        "Keys for a link between machines: egomimic-policy-server keygen --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--policy", required=True, help="scripted | fold | pi | moe | <checkpoint path> (as the policy launch argument)"
    )
    p.add_argument("--bind", default="tcp://127.0.0.1:5555", help="address to listen on (default: %(default)s)")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow binding a non-loopback address (with --secret-key and --allow-clients, or --insecure)",
    )
    p.add_argument(
        "--secret-key",
        default="",
        metavar="FILE",
        help="this server's key pair (NAME.key_secret from keygen): CURVE on",
    )
    p.add_argument(
        "--allow-clients",
        default="",
        metavar="DIR",
        help="directory of the client public keys (*.key) allowed to connect (with --secret-key)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="serve the network without keys (logs a warning at start and on every new client)",
    )
    p.add_argument(
        "--inject-latency-ms", type=float, default=0.0, help="extra latency per query (rehearse a slow model)"
    )
    p.add_argument("--cache-dir", default=None, help="checkpoint cache directory (families)")
    p.add_argument(
        "--config-sha256",
        default="",
        help="pin: refuse a checkpoint whose model config (canonical JSON) has another SHA-256 (a legacy Fold needs it)",
    )
    p.add_argument(
        "--max-clients",
        type=int,
        default=DEFAULT_MAX_CLIENTS,
        help="clients answered at a time; a further one gets BUSY (default: %(default)s)",
    )
    p.add_argument(
        "--idle-timeout-s",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="forget a client silent this long, freeing its slot (default: %(default)g)",
    )
    p.add_argument(
        "--max-message-mb",
        type=float,
        default=DEFAULT_MAX_MESSAGE_BYTES / 2**20,
        help="refuse (and disconnect) a request larger than this, before allocating it (default: %(default)g MiB)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for untrained rehearsal weights (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
    return p


def keygen_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="egomimic-policy-server keygen",
        description="Write a CURVE key pair for the policy link: NAME.key (public: give it to the other side) and "
        "NAME.key_secret (mode 0600: stays on this machine).",
        epilog="The server runs with --secret-key server.key_secret --allow-clients DIR (the robots' .key files); "
        "the policy node with remote.client_key_file:=robot.key_secret remote.server_key_file:=server.key.",
    )
    p.add_argument("directory", help="where to write the pair (created if missing)")
    p.add_argument("--name", default="server", help="file name of the pair (default: %(default)s)")
    args = p.parse_args(argv)
    try:
        public, secret = keys.keygen(args.directory, args.name)
    except ConfigError as exc:
        print(f"egomimic-policy-server keygen: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {public} (public) and {secret} (secret, mode 0600)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keygen"]:
        return keygen_main(argv[1:])
    args = build_parser().parse_args(argv)
    from egomimic_policy.loading import load_policy

    if args.policy.startswith("tcp://"):
        print("egomimic-policy-server: --policy must be a local policy, not another server", file=sys.stderr)
        return 2
    if args.max_clients < 1 or not 0.1 <= args.idle_timeout_s <= 86_400:
        print(
            "egomimic-policy-server: --max-clients must be >= 1 and --idle-timeout-s within [0.1, 86400]",
            file=sys.stderr,
        )
        return 2
    if not 0.001 <= args.max_message_mb <= 4096:
        print(
            f"egomimic-policy-server: --max-message-mb {args.max_message_mb:g} is outside [0.001, 4096]",
            file=sys.stderr,
        )
        return 2
    try:
        policy = load_policy(
            args.policy,
            inject_latency_ms=args.inject_latency_ms,
            cache_dir=args.cache_dir,
            seed=args.seed,
            device=args.device,
            pin_config_sha256=args.config_sha256.strip().lower(),
        )
        server = PolicyServer(
            policy,
            args.bind,
            allow_remote=args.allow_remote,
            max_message_bytes=int(args.max_message_mb * 2**20),
            max_clients=args.max_clients,
            idle_timeout_s=args.idle_timeout_s,
            secret_key_file=args.secret_key,
            client_keys_dir=args.allow_clients,
            insecure=args.insecure,
        )
    except (ConfigError, zmq.ZMQError) as exc:
        print(f"egomimic-policy-server: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    s = server.spec
    print(
        f"egomimic-policy-server: serving {s.family} (fingerprint {s.fingerprint}, {s.embodiment}, "
        f"{s.action_layout}, {s.chunk_length} rows at {s.rate_hz} Hz) on {server.address}, "
        + ("CURVE (encrypted, clients from the allow-list)" if server.encrypted else "no keys"),
        flush=True,
    )
    if server.insecure:
        print(INSECURE_WARNING, file=sys.stderr, flush=True)
    server.serve(stop)
    print(
        f"egomimic-policy-server: stopped after {server.served} chunks ({server.expired} expired, "
        f"{server.failed} failed)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
