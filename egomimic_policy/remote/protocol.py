"""The policy server protocol: message types, error codes, the handshake check.

Transport: pyzmq, the server a ROUTER, each client a DEALER (a REQ socket is stuck for good
when its server dies mid-request; a DEALER is not). One msgpack map per zmq message (wire.py),
each with `type` and a client-chosen integer `id` that the reply echoes, so a late reply to a
request the client gave up on is recognized and dropped.

client -> server                       server -> client
  hello  {v}                             meta  {v, spec, server: {pid, instance}}
  ping                                   pong  {busy, instance}   (answered even mid-inference)
  infer  {timeout_ms, observation}       chunk {chunk, infer_ms, queue_ms} | error
  reset                                  ok | error
error: {code, detail} with code in ERROR_CODES.
`instance` names one server run: a pong from another instance means the server behind the
address was restarted (zmq reconnects underneath), so the client shakes hands again.

Deadlines are relative (`timeout_ms`), since the two clocks may differ: the server drops a
request that waited longer than its timeout before the model got to it (EXPIRED), instead of
spending the model on an answer nobody waits for.
"""

from __future__ import annotations

import math

from egomimic_policy.interface import PolicySpec

HELLO, META, PING, PONG, INFER, CHUNK, RESET, OK, ERROR = (
    "hello",
    "meta",
    "ping",
    "pong",
    "infer",
    "chunk",
    "reset",
    "ok",
    "error",
)

EXPIRED = "EXPIRED"
"""The request waited longer than its timeout_ms before the model was free."""
BUSY = "BUSY"
"""Too many requests already queued."""
BAD_REQUEST = "BAD_REQUEST"
"""Undecodable or malformed message, unknown type, or protocol version mismatch."""
INFER_FAILED = "INFER_FAILED"
"""The policy raised; detail carries the exception."""
ERROR_CODES = (EXPIRED, BUSY, BAD_REQUEST, INFER_FAILED)


def spec_mismatches(
    remote: PolicySpec,
    *,
    embodiment: str,
    rate_hz: float,
    fingerprint: str = "",
    action_layout: str = "",
    chunk_length: int = 0,
) -> list[str]:
    """What makes `remote` unusable for this client ([] = compatible). Empty expectations
    (fingerprint "", action_layout "", chunk_length 0) accept any value."""
    problems = []
    if remote.embodiment.lower() != embodiment.lower():
        problems.append(f"embodiment {remote.embodiment!r} != expected {embodiment!r}")
    if not math.isclose(remote.rate_hz, rate_hz, rel_tol=1e-6):
        problems.append(f"rate_hz {remote.rate_hz} != control rate {rate_hz}")
    if fingerprint and remote.fingerprint != fingerprint:
        problems.append(f"fingerprint {remote.fingerprint!r} != expected {fingerprint!r}")
    if action_layout and remote.action_layout != action_layout:
        problems.append(f"action_layout {remote.action_layout!r} != expected {action_layout!r}")
    if chunk_length and remote.chunk_length != chunk_length:
        problems.append(f"chunk_length {remote.chunk_length} != expected {chunk_length}")
    if remote.chunk_length < 1:
        problems.append(f"chunk_length {remote.chunk_length} < 1")
    return problems
