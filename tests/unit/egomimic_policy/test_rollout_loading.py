"""The `policy` launch argument -> ChunkPolicy (loading.py), and injected latency."""

import time

import numpy as np
import pytest

from egomimic_hw.errors import ConfigError
from egomimic_policy.interface import ChunkPolicy, Observation
from egomimic_policy.loading import DelayedPolicy, choose_device, load_policy
from egomimic_policy.remote.client import RemoteConfig, RemoteUnavailable
from egomimic_policy.scripted import ScriptedChunkPolicy, ScriptedMotionConfig

OBS = Observation(
    1_000_000_000,
    {},
    np.array([0.3, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0]),
    np.array([0.3, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0]),
    0.5,
    0.5,
)


def test_scripted_is_a_chunk_policy_without_cameras():
    policy = load_policy("scripted")
    assert isinstance(policy, ChunkPolicy) and policy.spec.family == "scripted" and policy.spec.cameras == ()
    chunk = policy.infer(OBS)
    assert len(chunk) == policy.spec.chunk_length and chunk.observation_stamp_ns == OBS.stamp_ns
    assert np.allclose(chunk.left_pose[0], OBS.left_pose)  # anchored at the observation, ramp starts at 0


def test_the_given_scripted_configuration_is_used():
    custom = ScriptedChunkPolicy(ScriptedMotionConfig(radius_m=0.02), chunk_length=12)
    assert load_policy("scripted", scripted=custom) is custom


@pytest.mark.parametrize(
    "value,match",
    [
        ("none", "policy:=none"),
        ("", "policy:=none"),
        ("dreamer", "choices"),
        ("/nonexistent/ckpt.pt", "choices"),
        ("ws://127.0.0.1:8000", "tcp://"),
    ],
)
def test_unknown_values_are_refused_with_the_choices(value, match):
    with pytest.raises(ConfigError, match=match):
        load_policy(value)


def test_a_missing_server_is_reported_not_waited_for():
    start = time.monotonic()
    with pytest.raises(RemoteUnavailable):
        load_policy("tcp://127.0.0.1:9", remote=RemoteConfig(connect_timeout_s=0.3))
    assert time.monotonic() - start < 3.0


def test_injected_latency_delays_every_query_and_keeps_the_spec():
    policy = load_policy("scripted", inject_latency_ms=80)
    assert isinstance(policy, DelayedPolicy) and policy.spec == policy.inner.spec
    for _ in range(2):
        start = time.monotonic()
        policy.infer(OBS)
        assert time.monotonic() - start >= 0.08
    assert policy.status()["inject_latency_ms"] == pytest.approx(80.0)
    with pytest.raises(ConfigError, match="inject_latency_ms"):
        load_policy("scripted", inject_latency_ms=-5)


def test_a_model_that_asks_for_cuda_without_one_is_refused_unless_cpu_is_allowed(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="allow_cpu_policy"):
        choose_device("fold", "cuda")
    device, warning = choose_device("fold", "cuda:0", allow_cpu=True)
    assert device == "cpu" and "allow_cpu_policy" in warning
    assert choose_device("fold", "cpu") == ("cpu", "")  # asked for the CPU: no question
    assert choose_device("scripted", "cuda") == ("cuda", "")  # runs no model
    assert choose_device("tcp://127.0.0.1:5555", "cuda") == ("cuda", "")  # the server has the model
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert choose_device("fold", "cuda") == ("cuda", "")
