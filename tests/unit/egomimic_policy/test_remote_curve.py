"""The encrypted policy link (CURVE) over real zmq on loopback: keygen's files, a client on the
allow-list is served, a client off it or one expecting another server never gets a handshake,
a plain client cannot talk to an encrypted server, the refusal is said, what crosses the wire is
not plaintext, a 100 MB request is refused without the server growing, and serving the network
without keys is refused unless --insecure."""

from __future__ import annotations

import select
import socket
import stat
import subprocess
import sys
import threading

import psutil
import pytest
import zmq

from egomimic_hw.errors import ConfigError
from egomimic_policy.remote import keys
from egomimic_policy.remote.client import RemoteConfig, RemotePolicy, RemoteUnavailable
from egomimic_policy.remote.server import PolicyServer, main
from egomimic_policy.scripted import ScriptedChunkPolicy

from .test_remote_client_server import ServerThread, free_port, obs

REFUSED_WITHIN_S = 1.5
"""A client that cannot complete the CURVE handshake never shakes hands: it gives up after this."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    server_pub, server_secret = keys.keygen(root / "server", "server")
    robot_pub, robot_secret = keys.keygen(root / "robot", "robot")
    _, stranger_secret = keys.keygen(root / "stranger", "stranger")
    _, impostor_secret = keys.keygen(root / "impostor", "impostor")
    allow = root / "allowed"
    allow.mkdir()
    (allow / "robot.key").write_bytes(robot_pub.read_bytes())
    return {
        "server_pub": server_pub,
        "server_secret": server_secret,
        "robot_secret": robot_secret,
        "stranger_secret": stranger_secret,
        "impostor_pub": impostor_secret.with_suffix(".key"),
        "allow": allow,
    }


@pytest.fixture
def encrypted_server(pki):
    running = ServerThread(
        ScriptedChunkPolicy(), secret_key_file=str(pki["server_secret"]), client_keys_dir=str(pki["allow"])
    )
    yield running.server
    running.close()


def connect(address, connect_timeout_s=5.0, **files) -> RemotePolicy:
    return RemotePolicy(RemoteConfig(address=address, connect_timeout_s=connect_timeout_s, **files))


def test_keygen_writes_a_public_file_and_a_private_secret_and_never_overwrites(tmp_path, capsys):
    assert main(["keygen", str(tmp_path), "--name", "robot"]) == 0
    out = capsys.readouterr().out
    public, secret = tmp_path / "robot.key", tmp_path / "robot.key_secret"
    assert public.is_file() and secret.is_file()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    secret_text = secret.read_text()
    assert "secret-key" in secret_text and "secret-key" not in public.read_text()
    key_line = next(line for line in secret_text.splitlines() if "secret-key" in line)
    assert key_line.split('"')[1] not in out, "the secret key is never printed"
    assert main(["keygen", str(tmp_path), "--name", "robot"]) == 2
    assert "exists already" in capsys.readouterr().err


def test_a_client_on_the_allow_list_is_served(encrypted_server, pki):
    c = connect(
        encrypted_server.address, client_key_file=str(pki["robot_secret"]), server_key_file=str(pki["server_pub"])
    )
    try:
        chunk = c.infer(obs())
        assert chunk.left_pose.shape[1] == 7
    finally:
        c.close()


@pytest.mark.parametrize(
    "who",
    ["a client off the allow-list", "a client expecting another server", "a plain client"],
)
def test_others_never_get_a_handshake(encrypted_server, pki, who, capsys):
    files = {
        "a client off the allow-list": {
            "client_key_file": str(pki["stranger_secret"]),
            "server_key_file": str(pki["server_pub"]),
        },
        "a client expecting another server": {
            "client_key_file": str(pki["robot_secret"]),
            "server_key_file": str(pki["impostor_pub"]),
        },
        "a plain client": {},
    }[who]
    with pytest.raises(RemoteUnavailable):
        connect(encrypted_server.address, connect_timeout_s=REFUSED_WITHIN_S, **files)
    assert encrypted_server.served == 0
    if who == "a client off the allow-list":
        assert encrypted_server.refused_clients >= 1
        assert "refused a client (DENIED (CURVE)" in capsys.readouterr().err, "the server says whom it refused"


def test_serving_the_network_without_keys_is_refused_unless_insecure():
    with pytest.raises(ConfigError, match="without keys"):
        PolicyServer(ScriptedChunkPolicy(), "tcp://0.0.0.0:*", allow_remote=True)


def test_key_file_mistakes_are_named(pki, tmp_path):
    with pytest.raises(ConfigError, match="key_secret"):
        keys.client_keys(str(pki["server_pub"]), str(pki["server_pub"]))  # a public file given as a pair
    with pytest.raises(ConfigError, match="no such file"):
        keys.client_keys(str(tmp_path / "nope.key_secret"), str(pki["server_pub"]))
    with pytest.raises(ConfigError, match="both"):
        keys.client_keys(str(pki["robot_secret"]), "")
    garbage = tmp_path / "garbage.key"
    garbage.write_bytes(b"\x00\x01not a key")
    with pytest.raises(ConfigError, match="not a ZeroMQ key file|no public key"):
        keys.client_keys(str(pki["robot_secret"]), str(garbage))
    empty = tmp_path / "no_clients"
    empty.mkdir()
    with pytest.raises(ConfigError, match="allow-list"):
        PolicyServer(
            ScriptedChunkPolicy(),
            "tcp://127.0.0.1:*",
            secret_key_file=str(pki["server_secret"]),
            client_keys_dir=str(empty),
        )


class Relay(threading.Thread):
    """A TCP relay between one client and the server that keeps what the client sent: the bytes an
    eavesdropper on the lab network would see."""

    def __init__(self, target_port: int):
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target_port, self.sent, self.done = target_port, bytearray(), threading.Event()

    def run(self) -> None:
        client, _ = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.target_port))
        for s in (client, server):
            s.setblocking(False)
        while not self.done.is_set():
            ready, _, _ = select.select([client, server], [], [], 0.05)
            for src in ready:
                data = src.recv(1 << 16)
                if not data:
                    self.done.set()
                    break
                (server if src is client else client).sendall(data)
                if src is client:
                    self.sent += data
        client.close()
        server.close()
        self.listener.close()


@pytest.mark.parametrize("encrypted", [False, True])
def test_with_curve_the_link_carries_no_plaintext(pki, encrypted):
    options = {"secret_key_file": str(pki["server_secret"]), "client_keys_dir": str(pki["allow"])} if encrypted else {}
    files = (
        {"client_key_file": str(pki["robot_secret"]), "server_key_file": str(pki["server_pub"])} if encrypted else {}
    )
    running = ServerThread(ScriptedChunkPolicy(), **options)
    relay = Relay(int(running.address.rsplit(":", 1)[1]))
    relay.start()
    try:
        c = connect(f"tcp://127.0.0.1:{relay.port}", **files)
        try:
            c.infer(obs())
        finally:
            c.close()
    finally:
        relay.done.set()
        relay.join(5)
        running.close()
    marker = b"left_gripper"  # a key of every observation, plain msgpack text on an open link
    assert (marker in relay.sent) is not encrypted, f"{len(relay.sent)} bytes sent"


def test_a_100_mb_request_is_refused_without_the_server_growing(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "egomimic_policy.remote.server",
            "--policy",
            "scripted",
            "--bind",
            f"tcp://127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        c = connect(f"tcp://127.0.0.1:{port}", connect_timeout_s=30.0)  # the server is up and has served
        c.infer(obs())
        server = psutil.Process(proc.pid)
        rss = server.memory_info().rss
        big = zmq.Context.instance().socket(zmq.DEALER)
        big.setsockopt(zmq.LINGER, 0)
        big.connect(f"tcp://127.0.0.1:{port}")
        big.send(b"\x00" * (100 * 2**20))  # over the 64 MiB default: refused as its header arrives
        big.close(0)
        c.infer(obs())  # still serving
        c.close()
        assert server.memory_info().rss < rss + 10 * 2**20, (rss, server.memory_info().rss)
    finally:
        proc.kill()
        proc.wait(5)
