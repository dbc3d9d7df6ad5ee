"""Policy server and client over real zmq TCP on loopback: handshake, deadlines, heartbeats,
refusal of a mismatched server, and a real server process killed and restarted."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zmq

from egomimic_hw.errors import ConfigError
from egomimic_policy.interface import Observation
from egomimic_policy.loading import DelayedPolicy
from egomimic_policy.remote.client import (
    RemoteConfig,
    RemoteError,
    RemotePolicy,
    RemoteRefused,
    RemoteTimeout,
    RemoteUnavailable,
)
from egomimic_policy.remote.server import PolicyServer, main
from egomimic_policy.scripted import ScriptedChunkPolicy

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LEFT0 = np.array([0.30, 0.05, 0.25, 1.0, 0.0, 0.0, 0.0])
RIGHT0 = np.array([0.30, -0.05, 0.25, 0.0, 1.0, 0.0, 0.0])


def obs(stamp_ns=None, images=None) -> Observation:
    return Observation(stamp_ns or time.time_ns(), images or {}, LEFT0, RIGHT0, 0.5, 0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """A PolicyServer serving in a thread of this process (same code as the console script)."""

    def __init__(self, policy, bind="tcp://127.0.0.1:*", **options):
        self.server = PolicyServer(policy, bind, **options)
        self.address = self.server.address
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.server.serve, args=(self.stop,), daemon=True)
        self.thread.start()

    def close(self):
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def servers():
    started = []

    def start(policy, bind="tcp://127.0.0.1:*"):
        s = ServerThread(policy, bind)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def client(address, **kw):
    kw.setdefault("connect_timeout_s", 5.0)
    return RemotePolicy(RemoteConfig(address=address, **kw))


def test_handshake_and_remote_chunks_equal_local_ones(servers):
    srv = servers(ScriptedChunkPolicy())
    c = client(srv.address)
    try:
        assert c.spec == ScriptedChunkPolicy().spec
        local = ScriptedChunkPolicy()
        images = {"front_1": np.full((480, 640, 3), 7, np.uint8)}
        for k in range(3):
            o = obs(1_700_000_000_000_000_000 + k * 50_000_000, images)
            remote_chunk, local_chunk = c.infer(o), local.infer(o)
            assert remote_chunk.observation_stamp_ns == o.stamp_ns
            assert np.array_equal(remote_chunk.left_pose, local_chunk.left_pose)
            assert np.array_equal(remote_chunk.right_gripper, local_chunk.right_gripper)
        c.reset()
        assert c.status()["remote_state"] == "connected" and c.status()["timeouts"] == 0
        spec = ScriptedChunkPolicy().spec
        assert c.status()["server_family"] == spec.family and c.status()["server_fingerprint"] == spec.fingerprint
        assert c.status()["server_config_sha256"] == "none (no checkpoint)"
    finally:
        c.close()


@pytest.mark.parametrize(
    "expect,match",
    [
        ({"embodiment": "human_bimanual"}, "embodiment"),
        ({"rate_hz": 50.0}, "rate_hz"),
        ({"fingerprint": "fold-0123"}, "fingerprint"),
        ({"action_layout": "eva_bimanual_wrist_rel_20"}, "action_layout"),
        ({"chunk_length": 100}, "chunk_length"),
    ],
)
def test_a_mismatched_server_is_refused(servers, expect, match):
    srv = servers(ScriptedChunkPolicy())
    with pytest.raises(RemoteRefused, match=match):
        client(srv.address, **expect)


def test_no_server_fails_fast_with_the_reason():
    start = time.monotonic()
    with pytest.raises(RemoteUnavailable, match="start egomimic-policy-server"):
        client(f"tcp://127.0.0.1:{free_port()}", connect_timeout_s=0.5)
    assert time.monotonic() - start < 3.0


def test_slow_server_times_out_but_stays_connected_through_heartbeats(servers):
    srv = servers(DelayedPolicy(ScriptedChunkPolicy(), 1.5))  # longer than the heartbeat timeout
    c = client(srv.address, timeout_s=0.3, heartbeat_s=0.1, heartbeat_timeout_s=0.6)
    try:
        with pytest.raises(RemoteTimeout):
            c.infer(obs())
        time.sleep(1.6)  # the model is busy all this time; pings are still answered
        st = c.status()
        assert st["remote_state"] == "connected" and st["reconnects"] == 0 and st["timeouts"] == 1
        assert st["late_replies"] == 1  # the chunk for the abandoned request came, and was dropped
    finally:
        c.close()


def test_requests_that_waited_past_their_deadline_are_not_inferred(servers):
    policy = DelayedPolicy(ScriptedChunkPolicy(), 0.5)
    srv = servers(policy)
    a = client(srv.address, timeout_s=0.3)
    b = client(srv.address, timeout_s=0.3)
    try:
        results = {}

        def ask(name, c):
            try:
                c.infer(obs())
            except Exception as exc:  # noqa: BLE001
                results[name] = exc

        threads = [threading.Thread(target=ask, args=(n, c)) for n, c in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        assert all(isinstance(e, RemoteTimeout) for e in results.values()) and len(results) == 2
        time.sleep(0.8)
        assert srv.server.expired == 1 and srv.server.served == 1  # the second never reached the model
    finally:
        a.close()
        b.close()


def test_server_refuses_a_non_loopback_bind_unless_allowed():
    with pytest.raises(ConfigError, match="allow-remote"):
        PolicyServer(ScriptedChunkPolicy(), "tcp://0.0.0.0:*")


def test_server_error_is_reported_not_fatal(servers):
    class Failing(ScriptedChunkPolicy):
        def infer(self, observation):
            raise RuntimeError("CUDA out of memory")

    srv = servers(Failing())
    c = client(srv.address)
    try:
        with pytest.raises(RemoteError, match="INFER_FAILED.*out of memory"):
            c.infer(obs())
        assert c.status()["remote_state"] == "connected"
    finally:
        c.close()


def test_a_different_model_after_a_restart_is_refused(servers):
    port = free_port()
    first = servers(ScriptedChunkPolicy(chunk_length=30), f"tcp://127.0.0.1:{port}")
    c = client(first.address, heartbeat_s=0.1, heartbeat_timeout_s=0.4)
    try:
        first.close()
        deadline = time.monotonic() + 5
        while True:  # zmq releases the port asynchronously after close
            try:
                servers(ScriptedChunkPolicy(chunk_length=20), f"tcp://127.0.0.1:{port}")
                break
            except zmq.ZMQError:
                assert time.monotonic() < deadline, "port never released"
                time.sleep(0.05)
        deadline = time.monotonic() + 5
        while c.status()["remote_state"] != "refused" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.status()["remote_state"] == "refused" and "this session started with" in c.status()["remote_reason"]
        with pytest.raises(RemoteUnavailable):
            c.infer(obs())
    finally:
        c.close()


def test_killed_server_process_is_reported_then_reconnected(tmp_path):
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "egomimic_policy.remote.server", "--policy", "scripted", "--bind", address]

    def start():
        return subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    proc = start()
    try:
        c = client(address, connect_timeout_s=30.0, heartbeat_s=0.1, heartbeat_timeout_s=0.5)
        first_pid = c.status()["server_pid"]
        assert first_pid == proc.pid and len(c.infer(obs())) == 30
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        deadline = time.monotonic() + 5
        while c.connected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not c.connected and "no reply" in c.status()["remote_reason"]
        with pytest.raises(RemoteUnavailable):
            c.infer(obs())
        proc = start()
        deadline = time.monotonic() + 30
        while not c.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.connected and c.status()["server_pid"] == proc.pid != first_pid
        assert c.status()["reconnects"] == 1 and len(c.infer(obs())) == 30
        c.close()
    finally:
        proc.kill()
        proc.wait(5)


def test_cli_help_and_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "--bind" in capsys.readouterr().out
    assert main(["--policy", "tcp://127.0.0.1:1"]) == 2
    assert main(["--policy", "scripted", "--bind", "tcp://0.0.0.0:5555"]) == 2
    assert "allow-remote" in capsys.readouterr().err
