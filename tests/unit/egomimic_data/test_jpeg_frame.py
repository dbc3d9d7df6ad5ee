"""A camera's JPEG stored as it came (egomimic_data.jpeg_frame): accepted only at the episode's
quality and size, with three components; stored byte for byte by the episode writer."""

import numpy as np
import pytest
import simplejpeg

from egomimic_data.episode_format import EpisodeError, EpisodeMeta, EpisodeReader, EpisodeWriter
from egomimic_data.jpeg_frame import JpegFrame, jpeg_frame, quantization_tables, reference_tables

RNG = np.random.default_rng(11)
RGB = RNG.integers(0, 256, (48, 64, 3), dtype=np.uint8)


def encode(rgb=RGB, quality=85, **kw):
    return simplejpeg.encode_jpeg(rgb, quality=quality, colorspace="RGB", **kw)


@pytest.mark.parametrize("quality", [85, 90, 40])
def test_a_frame_encoded_at_the_quality_is_accepted_with_its_size(quality):
    data = encode(quality=quality)
    frame = jpeg_frame(memoryview(data), quality)
    assert isinstance(frame, JpegFrame) and bytes(frame) == data and frame.shape == (48, 64, 3)
    assert quantization_tables(data) == reference_tables(quality)


def test_another_quality_another_kind_or_not_a_jpeg_is_refused():
    with pytest.raises(ValueError, match="not encoded at quality 85"):
        jpeg_frame(encode(quality=90), 85)
    gray = simplejpeg.encode_jpeg(RGB[:, :, :1].copy(), quality=85, colorspace="GRAY")
    with pytest.raises(ValueError, match="Gray JPEG"):
        jpeg_frame(gray, 85)
    for bad in (b"", b"\xff\xd8", b"not a jpeg at all", encode()[:20]):
        with pytest.raises(ValueError):
            jpeg_frame(bad, 85)


def test_the_writer_stores_a_camera_jpeg_byte_for_byte_and_refuses_another_size(tmp_path):
    meta = EpisodeMeta(task_name="t", cameras=("front_1",), image_width=64, image_height=48)
    values = {key: np.zeros(w) for key, w in _numeric_widths().items()}
    data = encode()
    writer = EpisodeWriter(tmp_path / "e.zarr", meta, block_steps=2)
    writer.add(1, {"front_1": jpeg_frame(data, 85)}, values)
    small = jpeg_frame(encode(RGB[:24, :32].copy()), 85)
    with pytest.raises(EpisodeError, match="32x24 JPEG, expected 64x48"):
        writer.add(2, {"front_1": small}, values)
    writer.add(3, {"front_1": jpeg_frame(data, 85)}, values)
    writer.close()
    reader = EpisodeReader(tmp_path / "e.zarr")
    assert len(reader) == 2 and reader.jpeg("front_1", 0) == data
    assert np.array_equal(reader.image("front_1", 1), simplejpeg.decode_jpeg(data, colorspace="RGB"))


def _numeric_widths():
    from egomimic_data.episode_format import NUMERIC_FIELDS, numeric_keys

    return {key: NUMERIC_FIELDS[key.split(".", 1)[1]] for key in numeric_keys()}
