"""The camera node's config: its checks, what it hands the backends and the health monitor, and
that the bring-up YAML files still name only its fields with values it accepts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from egomimic_hw.cameras.config import CameraDeviceConfig, CameraNodeConfig
from egomimic_hw.cameras.health import HealthConfig
from egomimic_hw.description import CAMERAS
from egomimic_hw.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parents[3] / "ros2_ws/src/egomimic_bringup/config"


def ranged_fields(cls):
    return [(cls, f.name, f.metadata["range"]) for f in dataclasses.fields(cls) if "range" in f.metadata]


RANGED = ranged_fields(CameraNodeConfig) + ranged_fields(CameraDeviceConfig)


def test_every_field_has_help_and_the_defaults_are_valid():
    for cls in (CameraNodeConfig, CameraDeviceConfig):
        assert all(f.metadata.get("help") for f in dataclasses.fields(cls)), cls
    config = CameraNodeConfig()
    assert config.health == HealthConfig(expected_rate_hz=30.0)
    assert not config.fault.active and config.compressed_quality is None


@pytest.mark.parametrize("cls, name, bounds", RANGED, ids=[f"{c.__name__}.{n}" for c, n, _ in RANGED])
def test_a_value_just_outside_a_range_is_refused_naming_the_field(cls, name, bounds):
    lo, hi = bounds
    step = 1 if isinstance(lo, int) else 0.5
    cls(**{name: lo})
    cls(**{name: hi})
    for bad in (lo - step, hi + step):
        with pytest.raises(ConfigError, match=rf"^{name} must be in \[{lo}, {hi}\], got {bad}"):
            cls(**{name: bad})


@pytest.mark.parametrize("cameras", [(), ("front_1", "front_1"), ("front_1", "head")])
def test_cameras_must_be_unique_known_names(cameras):
    with pytest.raises(ConfigError, match="need unique names from"):
        CameraNodeConfig(cameras=cameras)


def test_a_list_of_cameras_is_kept_as_a_tuple():
    assert CameraNodeConfig(cameras=list(CAMERAS)).cameras == CAMERAS


def test_unknown_backend_lists_the_choices():
    with pytest.raises(ConfigError, match=r"unknown camera backend 'gige'; choices: \['synthetic', 'replay'"):
        CameraNodeConfig(backend="gige")


def test_health_thresholds_are_checked_against_the_rate():
    with pytest.raises(ConfigError, match="must exceed one frame period"):
        CameraNodeConfig(rate_hz=30.0, stall_after_s=0.02)
    with pytest.raises(ConfigError, match="freeze_after_s"):
        CameraNodeConfig(freeze_after_s=0.0)
    health = CameraNodeConfig(rate_hz=60.0, stall_after_s=0.05, freeze_after_s=0.5, freeze_max_abs_diff=3).health
    assert (health.expected_rate_hz, health.stall_after_s, health.freeze_after_s, health.freeze_max_abs_diff) == (
        60.0,
        0.05,
        0.5,
        3,
    )


def test_the_fault_at_start_must_name_a_camera_served_here():
    assert CameraNodeConfig(cameras=("left_wrist",), inject_fault="stall:left_wrist").fault.stalls("left_wrist")
    with pytest.raises(ConfigError, match="not served here"):
        CameraNodeConfig(cameras=("left_wrist",), inject_fault="freeze:front_1")


def test_jpeg_quality_applies_only_when_compressed_images_are_published():
    assert CameraNodeConfig(jpeg_quality=40).compressed_quality is None
    assert CameraNodeConfig(jpeg_quality=40, publish_compressed=True).compressed_quality == 40


def test_source_takes_the_published_size_unless_a_source_size_is_asked():
    config = CameraNodeConfig(
        cameras=("front_1", "left_wrist"),
        width=320,
        height=240,
        rate_hz=15.0,
        replay_path="/data/ep.zarr",
        replay_loop=False,
        replay_fps=10.0,
    )
    src = config.source("front_1", CameraDeviceConfig(device="/dev/video2", calibration_file="/cal.yaml"))
    assert (src.camera, src.width, src.height, src.rate_hz) == ("front_1", 320, 240, 15.0)
    assert (src.device, src.calibration_file) == ("/dev/video2", "/cal.yaml")
    assert (src.replay_path, src.replay_loop, src.replay_fps) == ("/data/ep.zarr", False, 10.0)
    wrist = config.source("left_wrist", CameraDeviceConfig(source_width=848, source_height=480, serial="1303"))
    assert (wrist.width, wrist.height, wrist.serial) == (848, 480, "1303")
    with pytest.raises(ConfigError, match="not served here"):
        config.source("right_wrist", CameraDeviceConfig())


def camera_parameters(path: Path) -> dict[str, dict]:
    """The camera nodes' parameters in a bring-up YAML, nested keys joined with dots."""

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    data = yaml.safe_load(path.read_text()) or {}
    return {
        key: flat(value["ros__parameters"])
        for key, value in data.items()
        if key.split("/")[-1] == "cameras" or key.split("/")[-1].startswith("camera_")
    }


@pytest.mark.parametrize("yaml_file", sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
def test_the_bringup_yaml_sets_only_fields_with_values_they_accept(yaml_file):
    """What the node does with them: top-level names are CameraNodeConfig fields,
    `<cam>.<name>` CameraDeviceConfig fields (device and serial taken as text)."""
    node_fields = {f.name for f in dataclasses.fields(CameraNodeConfig)}
    device_fields = {f.name for f in dataclasses.fields(CameraDeviceConfig)}
    for node, params in camera_parameters(CONFIG_DIR / yaml_file).items():
        top = {k: v for k, v in params.items() if "." not in k}
        assert set(top) <= node_fields, (node, set(top) - node_fields)
        CameraNodeConfig(**top)
        for key in set(params) - set(top):
            cam, _, name = key.partition(".")
            assert cam in CAMERAS and name in device_fields, (node, key)
            CameraDeviceConfig(**{name: str(params[key]) if name in ("device", "serial") else params[key]})
