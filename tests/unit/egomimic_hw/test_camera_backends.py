"""Camera backends and frame shaping: every backend that can run here, and the clean failures
of the hardware ones (no device, no pyrealsense2), with their frame handling on recorded frames."""

from __future__ import annotations

import glob
import time

import cv2
import numpy as np
import pytest
import simplejpeg

from egomimic_data.episode_format import EpisodeMeta, EpisodeReader, EpisodeWriter, numeric_keys
from egomimic_hw.cameras.backends import BACKENDS, CameraSource, open_camera
from egomimic_hw.cameras.base import Frame, Intrinsics, default_intrinsics, load_calibration
from egomimic_hw.cameras.processing import FrameShaper
from egomimic_hw.cameras.realsense import color_data_to_array
from egomimic_hw.cameras.replay import ReplayCamera
from egomimic_hw.cameras.synthetic import WRIST_SCENE_CENTRE_X_M, WRIST_SCENE_CENTRE_Z_M
from egomimic_hw.cameras.v4l2 import V4l2Camera
from egomimic_hw.description import ARMS
from egomimic_hw.driver.sim import SimConfig
from egomimic_hw.errors import BackendUnavailable, ConfigError
from egomimic_hw.kinematics import ArmKinematics
from egomimic_policy.sim_episode import render_sim_episode


def textured(h, w, seed=0):
    """A smooth-ish image (JPEG-friendly) with distinct channels, so channel swaps show."""
    yy, xx = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    img = np.stack([(xx * 255 // w), (yy * 255 // h), np.full((h, w), 40)], axis=-1).astype(np.uint8)
    img[rng.integers(0, h, 50), rng.integers(0, w, 50)] = 255
    return img


# ---- shaping ---------------------------------------------------------------------------------


def test_shaper_area_resizes_960x720_and_scales_intrinsics():
    src = textured(720, 960)
    shaper = FrameShaper(640, 480)
    out = shaper.shape(Frame(src, 0, 0, "rgb8"))
    assert out.shape == (480, 640, 3)
    np.testing.assert_array_equal(out, cv2.resize(src, (640, 480), interpolation=cv2.INTER_AREA))
    k = shaper.output_intrinsics(Intrinsics(960, 720, 400.0, 400.0, 480.0, 360.0))
    assert (k.width, k.height, k.fx, k.cx, k.cy) == (640, 480, pytest.approx(266.6667, rel=1e-4), 320.0, 240.0)
    assert not shaper.aspect_changes(960, 720) and shaper.aspect_changes(1280, 720)


def test_shaper_converts_bgr_once_and_passes_rgb_through():
    rgb = textured(480, 640)
    shaper = FrameShaper(640, 480)
    assert shaper.shape(Frame(rgb, 0, 0, "rgb8")) is rgb  # right size, right order: no copy
    np.testing.assert_array_equal(shaper.shape(Frame(rgb[..., ::-1].copy(), 0, 0, "bgr8")), rgb)
    with pytest.raises(ConfigError):
        shaper.shape(Frame(rgb, 0, 0, "yuyv"))


def test_calibration_yaml_is_read(tmp_path):
    f = tmp_path / "cal.yaml"
    f.write_text(
        "image_width: 1280\nimage_height: 720\ncamera_name: left_wrist\n"
        "camera_matrix: {rows: 3, cols: 3, data: [640.5, 0, 641.2, 0, 640.1, 362.3, 0, 0, 1]}\n"
        "distortion_model: plumb_bob\n"
        "distortion_coefficients: {rows: 1, cols: 5, data: [-0.05, 0.06, 0.0, 0.001, -0.02]}\n"
    )
    k = load_calibration(f)
    assert (k.width, k.height, k.fx, k.fy, k.cx, k.cy) == (1280, 720, 640.5, 640.1, 641.2, 362.3)
    assert k.distortion == (-0.05, 0.06, 0.0, 0.001, -0.02)
    assert k.scaled(640, 360).distortion == k.distortion
    f.write_text("image_width: 10\n")
    with pytest.raises(ConfigError, match="not a camera calibration"):
        load_calibration(f)


def test_unknown_backend_lists_choices():
    with pytest.raises(ConfigError, match="choices"):
        open_camera("gige", CameraSource("front_1"))
    assert set(BACKENDS) == {"synthetic", "replay", "v4l2", "realsense"}


# ---- synthetic --------------------------------------------------------------------------------


def test_wrist_scene_is_centred_on_the_sim_start_pose_at_link6():
    start_m = ArmKinematics().forward(np.asarray(SimConfig().initial_joints_rad))[:3]
    assert abs(start_m[0] - WRIST_SCENE_CENTRE_X_M) < 0.01 and abs(start_m[2] - WRIST_SCENE_CENTRE_Z_M) < 0.01


def test_synthetic_paces_at_rate_and_follows_the_arm():
    ee = {arm: np.array([0.3, 0.0, 0.3]) for arm in ARMS}
    cam = open_camera("synthetic", CameraSource("left_wrist", rate_hz=50.0), ee_positions=lambda: ee)
    try:
        t0 = time.monotonic()
        first = cam.read(1.0)
        a = first.image.copy()
        stamps = [first.capture_ns]
        for _ in range(9):
            stamps.append(cam.read(1.0).capture_ns)
        elapsed = time.monotonic() - t0
        ee[ARMS[0]] = np.array([0.35, 0.05, 0.3])
        b = cam.read(1.0).image
    finally:
        cam.close()
    assert 9 * 0.02 * 0.8 < elapsed < 9 * 0.02 * 3  # paced, not free-running (loose: shared CPU)
    assert np.all(np.diff(stamps) > 0)
    assert np.mean(np.any(a[8:] != b[8:], axis=-1)) > 0.5  # the table moved under the wrist
    assert cam.read(0.01) is None  # closed


def test_synthetic_frames_are_stamped_when_their_exposure_was_due_not_when_rendered():
    """A render that ends late (a busy host) does not move the capture stamp, as with a hardware
    camera: the stamp is the pacer's deadline on the stamping clock, however long the render took."""
    ee = {arm: np.array([0.3, 0.0, 0.3]) for arm in ARMS}
    clock = iter(range(10**12, 10**12 + 10**10, 10**9))
    cam = open_camera(
        "synthetic", CameraSource("front_1", rate_hz=30.0), ee_positions=lambda: ee, clock_ns=lambda: next(clock)
    )
    try:
        frame = cam.read(1.0)
        due, now = cam._pacer.last_due, time.monotonic()
        assert due is not None and due <= now
        late_ns = 50_000_000  # pretend the render ended 50 ms after the deadline
        cam._pacer.last_due = time.monotonic() - late_ns / 1e9
        stamp = cam._exposure_ns()
    finally:
        cam.close()
    assert frame.capture_ns <= 10**12  # the first clock read, less the time since the deadline
    # the clock's next read (10**12 + 1 s) less at least the 50 ms since the deadline; a second
    # of slack below for a preempted thread between the two clock reads
    assert 10**12 + 10**9 - late_ns - 10**9 <= stamp <= 10**12 + 10**9 - late_ns


# ---- replay -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    path = tmp_path_factory.mktemp("ep") / "sim.zarr"
    render_sim_episode(path, seconds=1.0, fps=30.0)
    return path


def test_replay_episode_reproduces_frames_timing_and_calibration(episode):
    reader = EpisodeReader(episode)
    cam = ReplayCamera("front_1", episode, loop=True, start_monotonic=time.monotonic())
    try:
        assert len(cam) == 30
        assert cam.intrinsics == Intrinsics.from_dict(reader.intrinsics("front_1"))
        assert cam.intrinsics == default_intrinsics("front_1", 640, 480)  # what the renderer used
        got = []
        for k in range(33):
            if k == 10:
                time.sleep(0.05)  # a reader late by 1.5 frames: frame 10 is released late
            got.append(cam.read(1.0))
    finally:
        cam.close()
    np.testing.assert_array_equal(got[5].image, reader.image("front_1", 5))
    np.testing.assert_array_equal(got[31].image, reader.image("front_1", 1))  # looped
    assert got[31].index == 31
    # Stamped where each frame sits on the recorded timeline, however late it was released: the
    # recorded 33.3 ms spacing (to the microseconds between the two clock reads of a stamp), never
    # a burst. (Longer only where a stall of more than LATE_RESYNC_S shifted the timeline, which a
    # loaded machine may cause.)
    intervals = np.diff([f.capture_ns for f in got]) / 1e6
    recorded = np.median(np.diff(reader.timestamps_ns)) / 1e6
    assert np.all(intervals >= recorded - 1.0), intervals
    assert abs(np.median(intervals) - recorded) < 0.05, intervals


def test_replay_without_loop_ends(episode):
    cam = ReplayCamera("left_wrist", episode, loop=False, start_monotonic=time.monotonic() - 10.0)
    frames = [cam.read(0.5) for _ in range(31)]
    assert all(f is not None for f in frames[:30]) and frames[30] is None and cam.finished


def test_replay_directory_with_timestamps(tmp_path):
    imgs = [textured(240, 320, seed=i) for i in range(4)]
    for i, img in enumerate(imgs):
        cv2.imwrite(str(tmp_path / f"{i:04d}.png"), img[..., ::-1])  # PNG written from BGR
    (tmp_path / "timestamps.txt").write_text("\n".join(str(1000 + i * 50_000_000) for i in range(4)))
    # The timeline starts when the camera is built (start_monotonic taken before building let a
    # slow build, e.g. on a loaded machine, make the first frames due already: released at once)
    cam = ReplayCamera("front_1", tmp_path, loop=False)
    shaper = FrameShaper(640, 480)
    t0 = time.monotonic()
    frames = [cam.read(1.0) for _ in range(4)]
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.14  # 3 gaps of 50 ms
    out = shaper.shape(frames[2])
    np.testing.assert_array_equal(out, cv2.resize(imgs[2], (640, 480), interpolation=cv2.INTER_AREA))
    assert shaper.output_intrinsics(cam.intrinsics) == default_intrinsics("front_1")


def test_replay_refuses_missing_path_and_camera(tmp_path, episode):
    with pytest.raises(BackendUnavailable, match="does not exist"):
        open_camera("replay", CameraSource("front_1", replay_path=str(tmp_path / "nope.zarr")))
    with pytest.raises(ConfigError, match="holds no images"):
        ReplayCamera("front_1", tmp_path)
    meta = EpisodeMeta(task_name="one_cam", cameras=("front_1",))
    with EpisodeWriter(tmp_path / "one.zarr", meta) as w:
        w.add(
            0,
            {"front_1": textured(480, 640)},
            {k: np.zeros(7 if "pose" in k else 6 if "joints" in k else 1) for k in numeric_keys()},
        )
    with pytest.raises(ConfigError, match="no camera 'left_wrist'"):
        ReplayCamera("left_wrist", tmp_path / "one.zarr")


# ---- v4l2 -------------------------------------------------------------------------------------


@pytest.mark.skipif(bool(glob.glob("/dev/video*")), reason="a video device is present")
def test_v4l2_without_device_fails_cleanly_and_fast():
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable, match="cannot open '/dev/video0'.*video devices present: none"):
        open_camera("v4l2", CameraSource("front_1", device="/dev/video0"))
    assert time.monotonic() - t0 < 2.0
    with pytest.raises(ConfigError, match="needs a device"):
        open_camera("v4l2", CameraSource("front_1", device=""))


def test_v4l2_frame_handling_on_a_recorded_mjpg_file(tmp_path):
    """The same code path as a UVC camera (grab, stamp, retrieve, BGR) on a real MJPG recording
    at the upstream head-camera size 960x720; the shaper must hand out RGB 640x480."""
    video = tmp_path / "head.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (960, 720))
    src = [textured(720, 960, seed=i) for i in range(5)]
    for img in src:
        writer.write(np.ascontiguousarray(img[..., ::-1]))  # OpenCV writes BGR
    writer.release()
    stamps = iter(range(1000, 2000, 100))
    cam = V4l2Camera("front_1", str(video), capture=cv2.VideoCapture(str(video)), clock_ns=lambda: next(stamps))
    shaper = FrameShaper(640, 480)
    assert cam.source_size == (960, 720)
    assert shaper.output_intrinsics(cam.intrinsics) == default_intrinsics("front_1")
    outs = []
    for _ in range(5):
        frame = cam.read(1.0)
        assert frame.encoding == "bgr8"
        outs.append((frame.capture_ns, shaper.shape(frame).copy()))
    assert [s for s, _ in outs] == [1000, 1100, 1200, 1300, 1400]
    for (_, out), img in zip(outs, src):
        expected = cv2.resize(img, (640, 480), interpolation=cv2.INTER_AREA)
        assert out.shape == (480, 640, 3)
        assert np.mean(np.abs(out.astype(int) - expected.astype(int))) < 3.0  # MJPG loss only
        assert np.mean(out[..., 0]) > np.mean(out[..., 2])  # red ramp stays in R: no channel swap
    assert cam.read(0.1) is None  # end of the recording: a failed grab, not yet an error
    cam.close()


# ---- realsense --------------------------------------------------------------------------------


def test_realsense_without_library_fails_cleanly():
    try:
        import pyrealsense2  # noqa: F401

        pytest.skip("pyrealsense2 is installed here")
    except ImportError:
        pass
    with pytest.raises(BackendUnavailable, match="pyrealsense2 is not installed.*pip install pyrealsense2"):
        open_camera("realsense", CameraSource("left_wrist", serial="130322272000"))
    with pytest.raises(ConfigError, match="needs its serial"):
        open_camera("realsense", CameraSource("left_wrist", serial=""))


def test_realsense_frame_buffer_to_array_on_recorded_frames(episode):
    reader = EpisodeReader(episode)
    img = reader.image("left_wrist", 3)
    buffer = memoryview(img.tobytes())  # what rs.frame.get_data() exposes: a flat uint8 buffer
    out = color_data_to_array(buffer, 640, 480)
    np.testing.assert_array_equal(out, img)
    with pytest.raises(Exception, match="expected 848x480 rgb8"):
        color_data_to_array(buffer, 848, 480)


def test_jpeg_roundtrip_of_published_compressed_format():
    img = textured(480, 640)
    data = simplejpeg.encode_jpeg(img, quality=85, colorspace="RGB")
    back = simplejpeg.decode_jpeg(data, colorspace="RGB")
    assert back.shape == img.shape and np.mean(np.abs(back.astype(int) - img.astype(int))) < 4


def test_head_camera_draws_each_arm_where_it_projects():
    """The synthetic head camera's markers sit on the end effectors' projections (EVA's
    extrinsics and intrinsics), one disc per arm of about pi r^2 pixels."""
    from egomimic_hw.cameras.synthetic import MARKER_COLOURS, SyntheticScene, project_to_head_camera
    from egomimic_hw.description import Arm

    scene = SyntheticScene("front_1", default_intrinsics("front_1"))
    positions = {Arm.LEFT: np.array([0.32, 0.08, 0.21]), Arm.RIGHT: np.array([0.28, -0.11, 0.17])}
    image = scene.render(positions, 3)
    for arm, position in positions.items():
        u, v, depth = project_to_head_camera(arm, position, scene.intrinsics)
        radius = int(np.clip(40.0 / depth, 6, 60))
        ys, xs = np.nonzero(np.all(image == np.array(MARKER_COLOURS[arm], np.uint8), axis=-1))
        assert abs(xs.mean() - u) <= 0.6 and abs(ys.mean() - v) <= 0.6, (arm, xs.mean(), u, ys.mean(), v)
        assert abs(xs.size / (np.pi * radius**2) - 1.0) < 0.05, (arm, xs.size, radius)


def test_synthetic_box_changes_at_run_time_from_the_next_frame():
    """set_target (the camera node's task_seed parameter, a new trial) places another box from
    the next frame on, and None removes it; the frame in the caller's hands is never redrawn."""
    from egomimic_hw.sim_task import place_target

    ee = {arm: np.array([0.3, 0.0, 0.3]) for arm in ARMS}
    cam = open_camera("synthetic", CameraSource("front_1", rate_hz=100.0, task_seed=1), ee_positions=lambda: ee)
    try:
        box1 = cam.read(1.0).image.copy()
        held = cam.read(1.0).image
        before = held.copy()
        cam.set_target(place_target(2))
        assert np.array_equal(held, before), "set_target drew into the frame being published"
        box2 = cam.read(1.0).image.copy()
        cam.set_target(None)
        none = cam.read(1.0).image.copy()
        cam.set_target(place_target(1))
        again = cam.read(1.0).image.copy()
    finally:
        cam.close()

    def differ(a, b):  # rows below the time code, which changes every frame
        return float(np.mean(np.any(a[8:] != b[8:], axis=-1)))

    assert differ(box1, box2) > 0.005 and differ(box1, none) > 0.005 and differ(box2, none) > 0.005
    assert differ(box1, again) == 0.0, "the same seed draws the same box"
