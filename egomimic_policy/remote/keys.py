"""CURVE keys of the policy link (ZeroMQ's CurveZMQ: the server authenticates its clients against
an allow-list of public keys, the client authenticates the server by its public key, and the
link is encrypted).

Key files are ZeroMQ's certificate files (`zmq.auth.create_certificates`): `<name>.key` holds the
public key, `<name>.key_secret` the public and the secret key (mode 0600). Nothing here prints or
logs a secret key; errors name the file, never its content.

    egomimic-policy-server keygen keys/ --name server    # on the GPU box
    egomimic-policy-server keygen keys/ --name robot     # on the robot PC
    copy robot.key into the server's allow-list directory, server.key to the robot
"""

from __future__ import annotations

import os
from pathlib import Path

import zmq
import zmq.auth

from egomimic_hw.errors import ConfigError


def keygen(directory: str | os.PathLike, name: str) -> tuple[Path, Path]:
    """Write `<name>.key` and `<name>.key_secret` (0600) into `directory`; refuses to overwrite."""
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"key name {name!r}: a plain file name, e.g. server or robot")
    out = Path(directory).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    public, secret = out / f"{name}.key", out / f"{name}.key_secret"
    for path in (public, secret):
        if path.exists():
            raise ConfigError(f"{path} exists already; a key is never overwritten (remove it first)")
    made_public, made_secret = zmq.auth.create_certificates(out, name)
    os.chmod(made_secret, 0o600)
    return Path(made_public), Path(made_secret)


def load_public(path: str | os.PathLike, what: str) -> bytes:
    """The public key in a key file (either file of a pair)."""
    public, _ = _load(path, what)
    return public


def load_pair(path: str | os.PathLike, what: str) -> tuple[bytes, bytes]:
    """(public, secret) from a `.key_secret` file."""
    public, secret = _load(path, what)
    if not secret:
        raise ConfigError(f"{what} {path}: holds no secret key (give the .key_secret file of the pair, not .key)")
    return public, secret


def _load(path: str | os.PathLike, what: str) -> tuple[bytes, bytes | None]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{what} {p}: no such file (egomimic-policy-server keygen makes one)")
    try:
        public, secret = zmq.auth.load_certificate(p)
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ConfigError(f"{what} {p}: not a ZeroMQ key file ({type(exc).__name__})") from None
    if not public:
        raise ConfigError(f"{what} {p}: holds no public key")
    return public, secret


def allowed_clients(directory: str | os.PathLike) -> Path:
    """The allow-list directory: at least one `<name>.key` public key in it."""
    d = Path(directory).expanduser()
    if not d.is_dir() or not any(d.glob("*.key")):
        raise ConfigError(f"client allow-list {d}: a directory with at least one client's public key (*.key)")
    return d


def client_keys(client_key_file: str, server_key_file: str) -> tuple[bytes, bytes, bytes] | None:
    """(client public, client secret, server public) when both files are given; None for neither
    (a plain link: loopback, or a server run with --insecure)."""
    if not client_key_file and not server_key_file:
        return None
    if not (client_key_file and server_key_file):
        raise ConfigError("an encrypted policy link needs both client_key_file and server_key_file")
    public, secret = load_pair(client_key_file, "client_key_file")
    return public, secret, load_public(server_key_file, "server_key_file")


def apply_client(sock: zmq.Socket, curve: tuple[bytes, bytes, bytes] | None) -> None:
    """Make `sock` a CURVE client with client_keys()'s result (None: leave it plain)."""
    if curve is not None:
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = curve
