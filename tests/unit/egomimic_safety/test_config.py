"""The gate's configuration as parameters: every field is described, numeric ones have a range
that holds their default, and the gate node's own settings are checked like the gate's."""

import dataclasses
import typing

import pytest

from egomimic_hw.description import ARMS, X5_LIMITS
from egomimic_hw.errors import ConfigError
from egomimic_safety.config import GateConfig, GateNodeConfig


@pytest.mark.parametrize("cls", [GateConfig, GateNodeConfig])
def test_every_field_is_described_and_every_number_has_a_range_holding_its_default(cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        assert len(f.metadata.get("help", "")) > 20, f"{cls.__name__}.{f.name}: no help text"
        if hints[f.name] in (int, float):
            lo, hi = f.metadata["range"]
            assert lo <= f.default <= hi, f"{cls.__name__}.{f.name}: default {f.default} outside [{lo}, {hi}]"


def test_the_safety_arguments_are_the_parameter_descriptions():
    help_ = {f.name: f.metadata["help"] for f in dataclasses.fields(GateConfig)}
    assert "Safety argument" in help_["state_hold_after_s"] and "Safety argument" in help_["camera_hold_after_s"]
    assert "within 310 ms" in help_["command_timeout_s"]
    assert all(
        "workspace box" in help_[f"workspace_{arm}_{end}_m"]
        for arm in (a.value for a in ARMS)
        for end in ("min", "max")
    )


def test_the_speed_limits_cannot_be_raised_past_the_arms_declaration():
    """The SDK does not enforce the X5's declared EE speeds: the gate's limits are all that does."""
    fields = {f.name: f for f in dataclasses.fields(GateConfig)}
    assert fields["max_ee_speed_m_s"].metadata["range"][1] == X5_LIMITS.ee_speed_max_m_s
    assert fields["max_ee_angular_speed_rad_s"].metadata["range"][1] == X5_LIMITS.ee_angular_speed_max_rad_s


def test_gate_node_config_defaults_and_watchdog_rate():
    cfg = GateNodeConfig()
    assert (cfg.watchdog_rate_hz, cfg.check_state_publishers, cfg.kinematics) == (100.0, True, "auto")
    assert cfg.watchdog_period_s == pytest.approx(0.01)
    assert GateNodeConfig(watchdog_rate_hz=10.0).watchdog_period_s == pytest.approx(0.1)
    for bad in (9.9, 1001.0, True, "100"):
        with pytest.raises(ConfigError, match="watchdog_rate_hz"):
            GateNodeConfig(watchdog_rate_hz=bad)
    assert cfg.camera_liveness == "health_reports", "freeze detection by default"
    assert GateNodeConfig(camera_liveness="image_stamps").camera_liveness == "image_stamps"
    with pytest.raises(ConfigError, match="camera_liveness"):
        GateNodeConfig(camera_liveness="stamps")
