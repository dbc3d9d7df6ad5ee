"""The encrypted policy link (CURVE) over real zmq on loopback: keygen's files, a client on the
allow-list is served, a client off it or one expecting another server never gets a handshake,
a plain client cannot talk to an encrypted server, and serving the network without keys is
refused unless --insecure."""

from __future__ import annotations

import stat

import pytest

from egomimic_hw.errors import ConfigError
from egomimic_policy.remote import keys
from egomimic_policy.remote.client import RemoteConfig, RemotePolicy, RemoteUnavailable
from egomimic_policy.remote.server import PolicyServer, main
from egomimic_policy.scripted import ScriptedChunkPolicy

from .test_remote_client_server import ServerThread, obs

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
def test_others_never_get_a_handshake(encrypted_server, pki, who):
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
