"""Camera health monitor: rate, jitter, drops, duplicates, stall and freeze detection."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_hw.cameras.base import default_intrinsics
from egomimic_hw.cameras.health import CameraHealthMonitor, HealthConfig, HealthState
from egomimic_hw.cameras.synthetic import SyntheticScene
from egomimic_hw.description import ARMS
from egomimic_hw.errors import ConfigError

MS = 1_000_000
PERIOD = 33_333_333
T0 = 5_000_000 * MS


def frames(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for _ in range(n)]


def test_steady_stream_is_ok_with_rate_and_no_jitter():
    mon = CameraHealthMonitor("front_1")
    imgs = frames(40)
    for i, img in enumerate(imgs):
        report = mon.on_frame(T0 + i * PERIOD, img)
    assert report.state == HealthState.OK
    assert report.rate_hz == pytest.approx(30.0, abs=1.0)
    assert report.interval_jitter_s < 1e-6
    assert report.dropped == 0 and report.duplicated == 0 and report.frames == 40
    assert report.last_frame_ns == report.last_change_ns == T0 + 39 * PERIOD


def test_starting_until_first_frame():
    mon = CameraHealthMonitor("front_1")
    assert mon.check(T0).state == HealthState.STARTING


def test_stall_reported_after_two_and_a_half_periods():
    mon = CameraHealthMonitor("front_1")
    last = T0 + 9 * PERIOD
    for i, img in enumerate(frames(10)):
        mon.on_frame(T0 + i * PERIOD, img)
    assert mon.check(last + 83 * MS).state == HealthState.OK
    report = mon.check(last + 84 * MS)
    assert report.state == HealthState.STALLED and "no frame for 84 ms" in report.detail
    # recovers with the next frame; the gap counts as drops
    report = mon.on_frame(last + 4 * PERIOD, frames(1, seed=9)[0])
    assert report.state == HealthState.OK and report.dropped == 3


def test_jitter_and_drop_counting():
    mon = CameraHealthMonitor("front_1")
    stamps = [T0, T0 + 30 * MS, T0 + 66 * MS, T0 + 100 * MS, T0 + 200 * MS]
    for s, img in zip(stamps, frames(5)):
        report = mon.on_frame(s, img)
    intervals = np.diff(stamps) / 1e9
    assert report.interval_jitter_s == pytest.approx(float(np.std(intervals)), rel=1e-6)
    assert report.dropped == 2  # 100 ms gap = 3 periods: 2 frames missing


def test_frozen_after_threshold_then_recovers():
    mon = CameraHealthMonitor("front_1", HealthConfig(freeze_after_s=0.3))
    img = frames(1)[0]
    for i in range(10):  # 9 repeats = 300 ms unchanged: not yet more than the threshold
        report = mon.on_frame(T0 + i * PERIOD, img)
    assert report.state == HealthState.OK and report.duplicated == 9
    assert report.rate_hz == pytest.approx(30.0, abs=0.5)  # over the 0.3 s seen so far, not the 1 s window
    report = mon.on_frame(T0 + 10 * PERIOD, img)
    assert report.state == HealthState.FROZEN and report.last_change_ns == T0
    assert report.last_frame_ns > report.last_change_ns
    report = mon.on_frame(T0 + 11 * PERIOD, frames(1, seed=3)[0])
    assert report.state == HealthState.OK


def test_near_identical_frames_count_as_unchanged_but_not_duplicated():
    mon = CameraHealthMonitor("front_1", HealthConfig(freeze_after_s=0.1, freeze_max_abs_diff=1))
    base = np.full((480, 640, 3), 100, np.uint8)
    for i in range(6):
        report = mon.on_frame(T0 + i * PERIOD, base + np.uint8(i % 2))  # +-1 grey level flicker
    assert report.state == HealthState.FROZEN and report.duplicated == 0
    report = mon.on_frame(T0 + 6 * PERIOD, base + np.uint8(3))
    assert report.state == HealthState.OK


def test_error_until_next_frame():
    mon = CameraHealthMonitor("left_wrist")
    mon.on_frame(T0, frames(1)[0])
    mon.on_error("device lost")
    assert mon.check(T0 + MS).state == HealthState.ERROR
    assert mon.on_frame(T0 + PERIOD, frames(1, 1)[0]).state == HealthState.OK


def test_still_synthetic_scene_is_not_frozen():
    """The renderer's frame code must be visible to the fingerprint: a still arm is not a
    frozen camera (else the gate would refuse to arm a robot that is simply not moving)."""
    for cam in ("front_1", "left_wrist"):
        scene = SyntheticScene(cam, default_intrinsics(cam))
        mon = CameraHealthMonitor(cam)
        still = {arm: np.array([0.3, 0.0, 0.3]) for arm in ARMS}
        for i in range(40):
            report = mon.on_frame(T0 + i * PERIOD, scene.render(still, i))
        assert report.state == HealthState.OK and report.duplicated == 0, cam


@pytest.mark.parametrize(
    "kwargs",
    [
        {"expected_rate_hz": 0.0},
        {"freeze_after_s": -1.0},
        {"stall_after_s": 0.01},
        {"freeze_max_abs_diff": 300},
        {"window_s": float("nan")},
    ],
)
def test_bad_config_raises(kwargs):
    with pytest.raises(ConfigError):
        HealthConfig(**kwargs)
