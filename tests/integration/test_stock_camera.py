"""A stock camera driver in place of ours (camera_backend:=external): realsense2_camera or usb_cam
publish cameras/<cam>/image_raw best effort with capture stamps and no health topic. The gate
then judges the cameras by those images' stamps (camera_liveness image_stamps): it arms on them,
and a camera that goes silent holds it (STALE_CAMERA) within the same bound as a stalled camera
of ours (tests/faults/test_gate_faults.py stale_camera_bound)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image

from egomimic_hw.description import ARMS, CAMERAS
from egomimic_nodes import topics
from egomimic_nodes.msg_convert import ns_to_stamp
from tests.faults.rig import Rig
from tests.faults.test_gate_faults import LOAD_ALLOWANCE_S, WATCHDOG_PERIOD_S

pytestmark = pytest.mark.integration

RATE_HZ = 30.0
SILENT_CAMERA = "left_wrist"


class StockCamera:
    """Three best-effort image publishers at 30 Hz (small rgb8 frames, stamped at publish time,
    as a driver stamps capture); `silence(cam)` stops one, as an unplugged camera."""

    def __init__(self, node):
        self.pubs = {
            cam: node.create_publisher(Image, topics.IMAGE_RAW.resolve("eva", cam=cam), qos_profile_sensor_data)
            for cam in CAMERAS
        }
        self.silent: set[str] = set()
        self.last_sent: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        msg = Image(height=48, width=64, encoding="rgb8", step=64 * 3, data=bytes(48 * 64 * 3))
        next_t = time.monotonic()
        while not self._stop.is_set():
            for cam, pub in self.pubs.items():
                if cam in self.silent:
                    continue
                now = time.time()
                msg.header.stamp = ns_to_stamp(int(now * 1e9))
                msg.header.frame_id = f"{cam}_optical"
                pub.publish(msg)
                self.last_sent[cam] = now
            next_t += 1.0 / RATE_HZ
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def silence(self, cam: str) -> float:
        self.silent.add(cam)
        return self.last_sent.get(cam, time.time())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def test_a_best_effort_stock_camera_lets_the_gate_arm_and_its_silence_holds_it(tmp_path):
    rig = Rig(tmp_path, CAMERAS, launch_args=("camera_backend:=external",))
    camera = None
    try:
        camera = StockCamera(rig.node)
        assert rig.wait_ready(90), (tmp_path / "launch.log").read_text()[-3000:]
        deadline, ok, msg = time.time() + 10.0, False, ""
        t_arm = time.time()
        while not ok and time.time() < deadline:  # the first frames may still be on their way
            ok, msg = rig.call("arm")
            if not ok:
                time.sleep(0.2)
        assert ok, f"the gate refused to arm on the stock camera's images: {msg}"
        rig.start_stream({a: rig.measured_pose(a) for a in ARMS})
        armed = rig.wait_state({"ARMED"}, t_arm, 5.0)
        assert armed, rig.statuses[-1]

        last_frame = camera.silence(SILENT_CAMERA)
        bound = rig.config.camera_hold_after_s + WATCHDOG_PERIOD_S + LOAD_ALLOWANCE_S
        hold = rig.wait_state({"HOLD", "ESTOP"}, armed.stamp_s, 3.0)
        assert hold is not None and hold.state == "HOLD", rig.statuses[-1]
        assert hold.reason == "STALE_CAMERA" and SILENT_CAMERA in hold.detail, (hold.reason, hold.detail)
        took = hold.stamp_s - last_frame
        print(f"\nstock camera silent: HOLD {took * 1e3:.0f} ms after its last frame (bound {bound * 1e3:.0f} ms)")
        assert took <= bound, f"HOLD {took:.3f} s after the last frame (bound {bound:.3f} s)"
        assert np.isfinite(took)
    finally:
        if camera is not None:
            camera.close()
        rig.close()
