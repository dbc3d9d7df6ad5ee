"""Measured-state plausibility: what the gate and the driver refuse to trust."""

import numpy as np
import pytest

from egomimic_hw.description import X5_LIMITS
from egomimic_hw.errors import ConfigError
from egomimic_safety.plausibility import PlausibilityConfig, StateMonitor, clamp_to_limits

Q = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])
SPOOF = np.array([3.0, 3.6, 3.3, 1.58, 1.6, 2.1])
"""The adversarial test's spoofed state: each joint just past its X5 limit."""


def test_a_normal_stream_is_plausible():
    m = StateMonitor()
    rng = np.random.default_rng(0)
    q = Q.copy()
    for k in range(500):  # 5 s at 100 Hz moving at 0.9 x the speed limits, with noise
        q = np.clip(
            q + X5_LIMITS.vel_max * 0.9 * 0.01 * np.sign(np.sin(k / 50.0)), X5_LIMITS.pos_min, X5_LIMITS.pos_max
        )
        assert m.check(q + rng.normal(0, 2e-5, 6), k * 0.01) == ""
    assert m.implausible == 0


def test_spoofed_joints_past_the_limits_are_implausible_even_as_the_first_sample():
    m = StateMonitor()
    why = m.check(SPOOF, 0.0)
    assert "outside its limits" in why and m.last is None


@pytest.mark.parametrize("j", range(6))
def test_limit_margin_is_exact(j):
    cfg = PlausibilityConfig()
    q = Q.copy()
    q[j] = X5_LIMITS.pos_max[j] + cfg.limit_margin_rad * 0.99
    assert StateMonitor(cfg).check(q, 0.0) == ""
    q[j] = X5_LIMITS.pos_max[j] + cfg.limit_margin_rad * 1.01
    assert f"joint{j + 1}" in StateMonitor(cfg).check(q, 0.0)


def test_too_fast_is_implausible_and_the_reference_stays_the_last_plausible():
    m = StateMonitor()
    assert m.check(Q, 0.0) == ""
    jump = Q + np.r_[0.2, np.zeros(5)]  # 0.2 rad in 10 ms = 20 rad/s, limit 1.5 x 5 rad/s
    assert "moved 0.200 rad" in m.check(jump, 0.01)
    assert np.array_equal(m.last.joints_rad, Q)
    # the next good sample is judged against Q (20 ms later), not against the jump
    assert m.check(Q + 0.01, 0.02) == ""


def test_speed_allowance_is_factor_times_limit_plus_noise():
    cfg = PlausibilityConfig()
    dt = 0.01
    allowed = X5_LIMITS.vel_max[0] * cfg.speed_factor * dt + cfg.noise_rad
    for step, ok in ((allowed * 0.999, True), (allowed * 1.001, False)):
        m = StateMonitor(cfg)
        m.check(Q, 0.0)
        assert (m.check(Q + np.r_[step, np.zeros(5)], dt) == "") is ok


def test_stamps_going_back_are_implausible_equal_stamps_are_a_re_read():
    m = StateMonitor()
    assert m.check(Q, 1.0) == ""
    assert "before the previous" in m.check(Q, 0.99)
    assert m.check(Q + 1e-4, 1.0) == ""  # the same measurement read twice (noise only)
    assert "differ by" in m.check(Q + 0.05, 1.0)


@pytest.mark.parametrize("bad", [np.full(6, np.nan), np.zeros(5), "abc"])
def test_malformed_samples_are_implausible(bad):
    assert StateMonitor().check(bad, 0.0)


def test_non_finite_stamp_is_implausible():
    assert "non-finite" in StateMonitor().check(Q, float("nan"))


def test_config_is_validated():
    with pytest.raises(ConfigError):
        PlausibilityConfig(speed_factor=0.5)
    with pytest.raises(ConfigError):
        PlausibilityConfig(noise_rad=float("nan"))


def test_clamp_to_limits():
    q = clamp_to_limits(SPOOF, 0.01)
    assert np.all(q <= X5_LIMITS.pos_max - 0.01 + 1e-12) and np.all(q >= X5_LIMITS.pos_min + 0.01 - 1e-12)
    assert np.array_equal(clamp_to_limits(Q), Q)
