"""Injected camera faults: the spec strings, and the wrapping backend that freezes or stalls a
camera so that the health monitor sees exactly the failure it must report."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_hw.cameras.base import Frame, default_intrinsics
from egomimic_hw.cameras.faults import CameraFault, FaultInjectingCamera, parse_fault
from egomimic_hw.cameras.health import CameraHealthMonitor, HealthConfig, HealthState
from egomimic_hw.errors import ConfigError

PERIOD_NS = 33_333_333


class Counting:
    """A backend delivering a new picture each read into ONE reused buffer (as OpenCV does),
    stamped every period."""

    def __init__(self, camera: str = "front_1"):
        self.camera = camera
        self.intrinsics = default_intrinsics(camera, 64, 48)
        self._buffer = np.zeros((48, 64, 3), np.uint8)
        self._rng = np.random.default_rng(0)
        self.index = 0
        self.closed = False

    def read(self, timeout_s: float) -> Frame | None:
        self.index += 1
        self._buffer[:] = self._rng.integers(0, 256, self._buffer.shape, dtype=np.uint8)
        return Frame(self._buffer, self.index * PERIOD_NS, self.index, "bgr8")

    def close(self) -> None:
        self.closed = True


def test_fault_specs():
    cams = ["front_1", "left_wrist"]
    assert not parse_fault("", cams).active and parse_fault("  ", cams).describe() == ""
    f = parse_fault("freeze:front_1", cams)
    assert f.freezes("front_1") and not f.freezes("left_wrist") and not f.stalls("front_1")
    assert f.describe() == "freeze:front_1"
    assert parse_fault("stall:left_wrist", cams).stalls("left_wrist")
    for bad, why in (("freeze", "expected ''"), ("melt:front_1", "expected ''"), ("stall:right_wrist", "not served")):
        with pytest.raises(ConfigError, match=why):
            parse_fault(bad, cams)


def test_without_a_fault_frames_pass_through_untouched():
    inner = Counting()
    cam = FaultInjectingCamera(inner)
    frame = cam.read(0.1)
    assert frame.index == 1 and frame.image is inner._buffer and frame.encoding == "bgr8"
    assert cam.camera == "front_1" and cam.intrinsics == inner.intrinsics
    cam.close()
    assert inner.closed


def test_freeze_repeats_one_picture_with_fresh_stamps_until_cleared():
    inner = Counting()
    cam = FaultInjectingCamera(inner, parse_fault("freeze:front_1", ["front_1"]))
    frames = [cam.read(0.1) for _ in range(5)]
    first = frames[0].image.copy()
    assert [f.capture_ns for f in frames] == [k * PERIOD_NS for k in range(1, 6)]
    assert all(np.array_equal(f.image, first) for f in frames), "the backend reuses its buffer: a freeze must copy"
    assert {f.encoding for f in frames} == {"bgr8"}
    cam.fault = CameraFault()
    assert not np.array_equal(cam.read(0.1).image, first)
    cam.fault = parse_fault("freeze:front_1", ["front_1"])
    refrozen = cam.read(0.1).image.copy()
    assert not np.array_equal(refrozen, first), "a new freeze holds the picture of its own start"


def test_stall_delivers_nothing_and_a_fault_of_another_camera_changes_nothing():
    inner = Counting("left_wrist")
    cam = FaultInjectingCamera(inner, parse_fault("stall:left_wrist", ["front_1", "left_wrist"]))
    assert [cam.read(0.1) for _ in range(3)] == [None, None, None]
    assert inner.index == 3, "the device keeps being read: only the delivery stops"
    for other in ("stall:front_1", "freeze:front_1"):
        cam.fault = parse_fault(other, ["front_1", "left_wrist"])
        a, b = cam.read(0.1).image.copy(), cam.read(0.1).image
        assert not np.array_equal(a, b)


@pytest.mark.parametrize(
    "spec, expected", [("freeze:front_1", HealthState.FROZEN), ("stall:front_1", HealthState.STALLED)]
)
def test_the_health_monitor_reports_the_injected_fault(spec, expected):
    """What the camera node does per frame: read, then judge what it would publish."""
    config = HealthConfig(expected_rate_hz=30.0)
    monitor = CameraHealthMonitor("front_1", config)
    cam = FaultInjectingCamera(Counting())
    now_ns = 0
    for _ in range(30):
        frame = cam.read(0.1)
        now_ns = frame.capture_ns
        monitor.on_frame(now_ns, frame.image)
    assert monitor.check(now_ns).state == HealthState.OK
    cam.fault = parse_fault(spec, ["front_1"])
    states = []
    for _ in range(int(1.5 * config.freeze_after_s * 30)):
        frame = cam.read(0.1)
        now_ns += PERIOD_NS
        if frame is not None:
            monitor.on_frame(frame.capture_ns, frame.image)
        states.append(monitor.check(now_ns).state)
    assert states[0] == HealthState.OK and states[-1] == expected, states
