"""The policy node's parameters come from these dataclasses: every field is described, and every
number that has a physical span has a range that holds its default."""

import dataclasses
import typing

import pytest

from egomimic_policy.remote.client import RemoteConfig
from egomimic_policy.rollout import ExecutorConfig, RolloutConfig
from egomimic_policy.scripted import ScriptedChunkConfig, ScriptedMotionConfig

UNBOUNDED = {("RolloutConfig", "seed"), ("ScriptedMotionConfig", "wrist_amplitude_rad")}
"""Numbers with no physical span: any seed; an amplitude whose sign only flips the oscillation."""


@pytest.mark.parametrize(
    "cls", [RolloutConfig, ExecutorConfig, ScriptedMotionConfig, ScriptedChunkConfig, RemoteConfig]
)
def test_every_field_is_described_and_ranged(cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        assert f.metadata.get("help"), f"{cls.__name__}.{f.name}: no help text"
        if hints[f.name] in (int, float) and (cls.__name__, f.name) not in UNBOUNDED:
            lo, hi = f.metadata["range"]
            assert lo <= f.default <= hi, f"{cls.__name__}.{f.name}: default {f.default} outside [{lo}, {hi}]"


def test_the_node_parameters_keep_their_names_types_and_defaults():
    """The policy node's top-level parameters: the launcher and the YAML files set them by name."""
    expected = {
        "policy": "scripted",
        "rate_hz": 30.0,
        "inject_latency_ms": 0.0,
        "max_input_age_s": 0.2,
        "max_image_age_s": 0.15,
        "sync_tolerance_s": 0.05,
        "cache_dir": "",
        "config_sha256": "",
        "seed": 0,
        "device": "cpu",
        "allow_cpu_policy": False,
    }
    got = dataclasses.asdict(RolloutConfig())
    assert got == expected
    assert all(type(got[name]) is type(value) for name, value in expected.items())
    assert ScriptedChunkConfig().chunk_length == 30
