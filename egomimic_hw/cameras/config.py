"""The camera node's settings, ROS-free: which cameras one process serves and how it publishes
and judges them (`CameraNodeConfig`), and how each camera's device is reached
(`CameraDeviceConfig`, parameters `<cam>.<field>`).

Every field is a node parameter: its `help` is the parameter's description and its `range` the
inclusive bounds rclpy enforces at start. `__post_init__` checks the same bounds and the rules
across fields, so a config built in a test or a bench is refused for the same reasons as a bad
YAML value, with a message naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from egomimic_hw.cameras.backends import BACKENDS, CameraSource
from egomimic_hw.cameras.faults import SPEC_HELP, CameraFault, parse_fault
from egomimic_hw.cameras.health import HealthConfig
from egomimic_hw.cameras.processing import OUTPUT_SIZE_RANGE_PX
from egomimic_hw.config_fields import check_ranges
from egomimic_hw.description import CAMERAS
from egomimic_hw.errors import ConfigError

RATE_RANGE_HZ = (1.0, 120.0)
"""Frame rates, Hz, a camera is rendered, requested or replayed at (`rate_hz`, `replay_fps`)."""
SOURCE_SIZE_RANGE_PX = (0, 8192)
"""Requested source width/height, px; 0 = the published size, 8192 above any mode of these cameras."""


@dataclass(frozen=True)
class CameraNodeConfig:
    """One camera process: its cameras, backend, published image, health thresholds, replay."""

    cameras: tuple[str, ...] = field(
        default=(CAMERAS[0],), metadata={"help": f"cameras this process serves ({', '.join(CAMERAS)})"}
    )
    backend: str = field(default="synthetic", metadata={"help": f"camera backend: {' | '.join(BACKENDS)}"})
    width: int = field(
        default=640,
        metadata={"help": "published image width, px (frames are area-resized to it)", "range": OUTPUT_SIZE_RANGE_PX},
    )
    height: int = field(default=480, metadata={"help": "published image height, px", "range": OUTPUT_SIZE_RANGE_PX})
    rate_hz: float = field(
        default=30.0,
        metadata={
            "help": "frame rate, Hz: synthetic renders at it, v4l2/realsense request it, health expects it",
            "range": RATE_RANGE_HZ,
        },
    )
    publish_compressed: bool = field(default=False, metadata={"help": "also publish image_raw/compressed (JPEG)"})
    jpeg_quality: int = field(default=85, metadata={"help": "JPEG quality of image_raw/compressed", "range": (1, 100)})
    stall_after_s: float = field(
        default=0.0,
        metadata={"help": "no frame for this long = STALLED, s (0 = 2.5 periods; else more than one period)"},
    )
    freeze_after_s: float = field(default=0.3, metadata={"help": "unchanged image for this long = FROZEN, s (> 0)"})
    freeze_max_abs_diff: int = field(
        default=1, metadata={"help": "grey levels under which a frame counts as unchanged", "range": (0, 255)}
    )
    health_check_hz: float = field(
        default=40.0,
        metadata={"help": "health timer rate, Hz: bounds how late silence is reported", "range": (5.0, 200.0)},
    )
    replay_path: str = field(
        default="", metadata={"help": "replay: an episode store (*.zarr) or a directory of images"}
    )
    replay_loop: bool = field(default=True, metadata={"help": "replay: restart at the end"})
    replay_fps: float = field(
        default=30.0,
        metadata={"help": "replay: frame rate of an image directory without timestamps.txt", "range": RATE_RANGE_HZ},
    )
    task_seed: int = field(
        default=-1,
        metadata={
            "help": "synthetic: show the simulated task's box placed from this seed (egomimic_hw.sim_task; "
            "the expert policy takes the same seed); -1 = no task; settable at runtime (a new trial)",
            "range": (-1, 2**31 - 1),
            "runtime": True,
        },
    )
    inject_fault: str = field(default="", metadata={"help": SPEC_HELP + " (settable at runtime)", "runtime": True})
    """The fault at start; the node applies later values of the parameter as they come."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cameras", tuple(self.cameras))  # a YAML list arrives as a list
        cameras = list(self.cameras)
        if not cameras or len(set(cameras)) != len(cameras) or any(c not in CAMERAS for c in cameras):
            raise ConfigError(f"cameras {cameras}: need unique names from {list(CAMERAS)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown camera backend {self.backend!r}; choices: {list(BACKENDS)}")
        check_ranges(self)
        # Built once here for their checks: HealthConfig's thresholds against the rate, and the
        # fault at start naming a camera served here.
        _ = (self.health, self.fault)

    @property
    def health(self) -> HealthConfig:
        return HealthConfig(
            expected_rate_hz=self.rate_hz,
            stall_after_s=self.stall_after_s,
            freeze_after_s=self.freeze_after_s,
            freeze_max_abs_diff=self.freeze_max_abs_diff,
        )

    @property
    def fault(self) -> CameraFault:
        return parse_fault(self.inject_fault, self.cameras)

    @property
    def compressed_quality(self) -> int | None:
        """The JPEG quality of image_raw/compressed; None when it is not published."""
        return self.jpeg_quality if self.publish_compressed else None

    def source(self, camera: str, device: CameraDeviceConfig) -> CameraSource:
        """What the backend opens for `camera`: the device settings, the node-wide rate and
        replay settings, and the published size where no source size is requested."""
        if camera not in self.cameras:
            raise ConfigError(f"camera {camera!r} is not served here; cameras: {list(self.cameras)}")
        return CameraSource(
            camera=camera,
            width=device.source_width or self.width,
            height=device.source_height or self.height,
            rate_hz=self.rate_hz,
            device=device.device,
            serial=device.serial,
            calibration_file=device.calibration_file,
            replay_path=self.replay_path,
            replay_loop=self.replay_loop,
            replay_fps=self.replay_fps,
            task_seed=self.task_seed,
        )


@dataclass(frozen=True)
class CameraDeviceConfig:
    """One camera's device and calibration (parameters `<cam>.<field>`); the backend in use
    reads what applies to it and ignores the rest."""

    source_width: int = field(
        default=0,
        metadata={"help": "source width to request, px (0 = the published width)", "range": SOURCE_SIZE_RANGE_PX},
    )
    source_height: int = field(
        default=0,
        metadata={"help": "source height to request, px (0 = the published height)", "range": SOURCE_SIZE_RANGE_PX},
    )
    # any_type: digits, which YAML and `-p` read as integers, are taken as the string they spell
    device: str = field(
        default="", metadata={"help": "v4l2: /dev/videoN, /dev/v4l/by-id/... or an index", "any_type": True}
    )
    serial: str = field(default="", metadata={"help": "realsense: device serial number", "any_type": True})
    calibration_file: str = field(
        default="", metadata={"help": "ROS camera calibration YAML (overrides the intrinsics)"}
    )

    def __post_init__(self) -> None:
        check_ranges(self)
