"""A camera's JPEG stored as it came (egomimic_data.jpeg_frame): its quality read from its
tables, accepted only 4:4:4 with three components; stored byte for byte by the episode writer
at the episode's quality and size."""

import numpy as np
import pytest
import simplejpeg

from egomimic_data.episode_format import EpisodeError, EpisodeMeta, EpisodeReader, EpisodeWriter
from egomimic_data.jpeg_frame import JpegFrame, jpeg_frame, quantization_tables, reference_tables

RNG = np.random.default_rng(11)
RGB = RNG.integers(0, 256, (48, 64, 3), dtype=np.uint8)


def encode(rgb=RGB, quality=85, **kw):
    return simplejpeg.encode_jpeg(rgb, quality=quality, colorspace="RGB", **kw)


@pytest.mark.parametrize("quality", [85, 90, 40, 1, 100])
def test_a_frame_carries_its_size_and_the_quality_its_tables_say(quality):
    data = encode(quality=quality)
    frame = jpeg_frame(memoryview(data))
    assert isinstance(frame, JpegFrame) and bytes(frame) == data
    assert frame.shape == (48, 64, 3) and frame.quality == quality
    assert quantization_tables(data) == reference_tables(quality)


def test_subsampled_gray_or_foreign_tables_or_not_a_jpeg_is_refused():
    for sub in ("420", "422"):
        with pytest.raises(ValueError, match="expected 4:4:4"):
            jpeg_frame(encode(colorsubsampling=sub))
    gray = simplejpeg.encode_jpeg(RGB[:, :, :1].copy(), quality=85, colorspace="GRAY")
    with pytest.raises(ValueError, match="Gray JPEG"):
        jpeg_frame(gray)
    data = bytearray(encode())
    tables_at = bytes(data).index(b"\xff\xdb") + 5
    data[tables_at] ^= 0x01  # one quantizer changed: an encoder other than libjpeg's tables
    with pytest.raises(ValueError, match="not libjpeg's of any quality"):
        jpeg_frame(bytes(data))
    for bad in (b"", b"\xff\xd8", b"not a jpeg at all", encode()[:20]):
        with pytest.raises(ValueError):
            jpeg_frame(bad)


def test_the_writer_stores_a_camera_jpeg_byte_for_byte_at_the_episodes_quality_and_size(tmp_path):
    meta = EpisodeMeta(task_name="t", cameras=("front_1",), image_width=64, image_height=48, jpeg_quality=85)
    values = {key: np.zeros(w) for key, w in _numeric_widths().items()}
    data = encode()
    writer = EpisodeWriter(tmp_path / "e.zarr", meta, block_steps=2)
    writer.add(1, {"front_1": jpeg_frame(data)}, values)
    with pytest.raises(EpisodeError, match="32x24 JPEG, expected 64x48"):
        writer.add(2, {"front_1": jpeg_frame(encode(RGB[:24, :32].copy()))}, values)
    with pytest.raises(EpisodeError, match="quality 90 JPEG, the episode's is 85"):
        writer.add(2, {"front_1": jpeg_frame(encode(quality=90))}, values)
    writer.add(3, {"front_1": jpeg_frame(data)}, values)
    writer.close()
    reader = EpisodeReader(tmp_path / "e.zarr")
    assert len(reader) == 2 and reader.jpeg("front_1", 0) == data and reader.attrs["jpeg_quality"] == 85
    assert np.array_equal(reader.image("front_1", 1), simplejpeg.decode_jpeg(data, colorspace="RGB"))


def _numeric_widths():
    from egomimic_data.episode_format import NUMERIC_FIELDS, numeric_keys

    return {key: NUMERIC_FIELDS[key.split(".", 1)[1]] for key in numeric_keys()}
