"""The calibration attribute: the project's form stored as upstream's v3.1 block (nothing lost,
poses composed right), blocks refused with the field named, and every stored form read back."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from egomimic_data import calibration as calib
from egomimic_data.episode_format import EpisodeError, EpisodeMeta, EpisodeReader, EpisodeWriter, fps_attribute
from egomimic_hw.cameras.base import Intrinsics
from egomimic_hw.description import ARMS

from .test_upstream_interchange import image, values, write_ours


def pose(x: float, y: float, z: float, yaw: float = 0.0) -> np.ndarray:
    t = np.eye(4)
    c, s = np.cos(yaw), np.sin(yaw)
    t[:2, :2] = [[c, -s], [s, c]]
    t[:3, 3] = (x, y, z)
    return t


def test_the_project_form_becomes_upstreams_block_and_reads_back_unchanged():
    head = Intrinsics(640, 480, 266.5, 266.0, 321.0, 239.5)
    wrist = Intrinsics(640, 480, 380.0, 381.0, 318.0, 242.0, (0.1, -0.05, 0.001, 0.002, 0.01))
    base_T_head, base_T_wrist = pose(0.1, 0.3, 0.6, 0.4), pose(0.4, 0.0, 0.2, -1.0)
    block = calib.to_block(
        {
            "front_1": head.as_dict(),
            "left_wrist": wrist.as_dict(),
            "extrinsics": {
                f"{ARMS[0].value}_base_T_front_1": base_T_head.tolist(),
                f"{ARMS[1].value}_base_T_front_1": pose(0.1, -0.3, 0.6).tolist(),
                f"{ARMS[0].value}_base_T_left_wrist": base_T_wrist.tolist(),
            },
        }
    )
    assert block is not None and calib.block_problems(block) == []
    assert block["reference_frame"] == "camera:front_1"
    assert block["cameras"]["front_1"] == {
        "K": [[266.5, 0.0, 321.0, 0.0], [0.0, 266.0, 239.5, 0.0], [0.0, 0.0, 1.0, 0.0]],
        "resolution": [640, 480],
        "model": "PINHOLE",
        "rectified": True,
    }
    assert block["cameras"]["left_wrist"]["model"] == "OPENCV" and not block["cameras"]["left_wrist"]["rectified"]
    np.testing.assert_allclose(block["arm_bases"][ARMS[0].value], np.linalg.inv(base_T_head))  # ref_T_armbase
    # the wrist camera in the reference frame: ref_T_base @ base_T_wrist
    np.testing.assert_allclose(block["cameras"]["left_wrist"]["ref_T_cam"], np.linalg.inv(base_T_head) @ base_T_wrist)
    assert Intrinsics.from_dict(calib.intrinsics_of(block, "front_1")) == head
    assert Intrinsics.from_dict(calib.intrinsics_of(block, "left_wrist")) == wrist
    legacy = calib.legacy_attrs(block)
    np.testing.assert_allclose(legacy["extrinsics"][ARMS[0].value], base_T_head, atol=1e-12)
    assert set(legacy["intrinsics"]) == {"front_1", "left_wrist"}


@pytest.mark.parametrize(
    ("calibration", "named"),
    [
        ({"reference_frame": "camera:front_1", "cameras": {"front_1": {"K": np.eye(3).tolist()}}, "K": 1}, "unknown"),
        ({"reference_frame": "camera:left_wrist", "cameras": {"front_1": {}}}, "reference_frame"),
        ({"reference_frame": "robot_base", "cameras": {"front_1": {"K": [[1, 0], [0, 1]]}}}, ".K: expected shape"),
        ({"front_1": {"width": 640, "height": 480, "fx": 1.0}}, "must hold"),
        ({"extrinsics": {"head_T_front_1": np.eye(4).tolist()}}, "'<side>_base_T_<camera>'"),
    ],
)
def test_a_bad_calibration_is_refused_by_name_before_anything_is_written(tmp_path, calibration, named):
    with pytest.raises(EpisodeError, match="calibration") as e:
        EpisodeWriter(tmp_path / "e.zarr", EpisodeMeta(task_name="x", calibration=calibration))
    assert named in str(e.value)
    assert not (tmp_path / "e.zarr").exists()


def test_an_upstream_block_is_stored_as_given(tmp_path):
    block = {
        "reference_frame": "robot_base",
        "cameras": {"front_1": {"K": [[50.0, 0, 32, 0], [0, 50.0, 24, 0], [0, 0, 1, 0]]}},
    }
    meta = EpisodeMeta(task_name="x", image_width=64, image_height=48, calibration=block)
    with EpisodeWriter(tmp_path / "b.zarr", meta) as w:
        w.add(0, {c: image(0, c) for c in meta.cameras}, values(0))
    r = EpisodeReader(tmp_path / "b.zarr")
    assert r.attrs["calibration"] == block and r.attrs["intrinsics"] == {"front_1": block["cameras"]["front_1"]["K"]}
    assert r.intrinsics("front_1")["width"] == 64  # no resolution in the block: the stored images'
    assert r.meta().calibration == block  # a meta read back writes the same episode again


def test_older_forms_are_read_format_version_1_and_upstreams_legacy_attributes(tmp_path):
    write_ours(tmp_path / "v1.zarr", 3)
    group = zarr.open_group(str(tmp_path / "v1.zarr"), mode="r+", zarr_format=3)
    head = Intrinsics(64, 48, 40.0, 40.0, 32.5, 23.5)
    for key in ("intrinsics", "extrinsics"):
        del group.attrs[key]
    group.attrs.update({"format_version": 1, "fps": 30.0, "calibration": {"front_1": head.as_dict()}})
    assert Intrinsics.from_dict(EpisodeReader(tmp_path / "v1.zarr").intrinsics("front_1")) == head

    group.attrs.update({"calibration": {}, "intrinsics": [[40.0, 0, 32.5], [0, 40.0, 23.5], [0, 0, 1]]})
    r = EpisodeReader(tmp_path / "v1.zarr")  # upstream's oldest: a bare 3x3 is front_1's K
    assert Intrinsics.from_dict(r.intrinsics("front_1")) == head and r.intrinsics("left_wrist") is None


def test_fps_is_stored_as_an_int_when_integral():
    assert fps_attribute(30.0) == 30 and isinstance(fps_attribute(30.0), int)
    assert fps_attribute(29.97) == 29.97  # kept as measured; `egomimic-episodes check` flags it
