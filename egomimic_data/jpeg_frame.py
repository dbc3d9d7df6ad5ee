"""A camera's JPEG, recorded as it came: no decode, no second encode.

Why: the recorder's largest cost was encoding 90 frames a second (3 cameras x 30 Hz, ~1 ms
each), after receiving them raw (900 KB each). A camera that publishes image_raw/compressed
already encoded each frame exactly as an episode stores it (simplejpeg, RGB in, quality 85,
4:4:4: upstream's ZarrWriter), so the recorder can take those bytes (50-100 KB) and store them.

What keeps that honest: an episode says its JPEG quality (`jpeg_quality`), and a training run
reads the frames as that quality's. A frame's quality is read from its quantization tables
(libjpeg's tables are fixed per quality: matched byte for byte against the ones simplejpeg
writes at each quality 1-100), and a frame is accepted only with such tables, three components
at 4:4:4 (upstream's encoding) and, by the episode writer, the episode's quality and size (all
read from the JPEG's header, ~3 us a frame).
"""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np
import simplejpeg

SOF_MARKERS = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
DQT, SOS = 0xDB, 0xDA


class JpegFrame(bytes):
    """The bytes of one JPEG frame, with the (height, width, 3) its header declares and the
    quality its tables say: stored as they are by the episode writer, sized like an image by
    the step assembler."""

    shape: tuple[int, int, int]
    quality: int

    def __new__(cls, data: bytes | bytearray | memoryview, height: int, width: int, quality: int) -> JpegFrame:
        frame = super().__new__(cls, data)
        frame.shape = (int(height), int(width), 3)
        frame.quality = int(quality)
        return frame


def quantization_tables(data: bytes | bytearray | memoryview) -> bytes:
    """The payloads of every DQT segment before the first frame or scan header, concatenated.
    ValueError on bytes that are not a JPEG's marker segments."""
    if len(data) < 4 or data[0] != 0xFF or data[1] != 0xD8:
        raise ValueError("not a JPEG (no SOI marker)")
    pos, tables = 2, []
    while True:
        if pos + 4 > len(data) or data[pos] != 0xFF:
            raise ValueError("a JPEG header segment runs past the data")
        marker = data[pos + 1]
        length = (data[pos + 2] << 8) | data[pos + 3]
        if length < 2 or pos + 2 + length > len(data):
            raise ValueError("a JPEG header segment runs past the data")
        if marker == DQT:
            tables.append(bytes(data[pos + 4 : pos + 2 + length]))
        if marker in SOF_MARKERS or marker == SOS:
            return b"".join(tables)
        pos += 2 + length


@cache
def reference_tables(quality: int) -> bytes:
    """The quantization tables simplejpeg (libjpeg-turbo) writes at `quality`."""
    return quantization_tables(simplejpeg.encode_jpeg(np.zeros((8, 8, 3), np.uint8), quality=quality, colorspace="RGB"))


@lru_cache(maxsize=1)
def _qualities() -> dict[bytes, int]:
    """Tables -> quality, for every quality 1-100 (~2 ms, once). Where two qualities share
    tables (none do at 8-bit precision), the higher wins."""
    return {reference_tables(q): q for q in range(1, 101)}


def jpeg_frame(data: bytes | bytearray | memoryview) -> JpegFrame:
    """A JpegFrame of `data` if it is a three-component 4:4:4 JPEG with libjpeg's tables of
    some quality; ValueError saying what differs otherwise."""
    frame = JpegFrame(data, 0, 0, 0)  # the one copy of the camera's bytes; size and quality set below
    try:
        height, width, colorspace, subsampling = simplejpeg.decode_jpeg_header(frame)
    except ValueError as exc:
        raise ValueError(f"not a readable JPEG: {exc}") from None
    if colorspace not in ("YCbCr", "RGB"):
        raise ValueError(f"a {colorspace} JPEG, expected three colour components")
    if subsampling != "444":
        raise ValueError(f"a {subsampling} JPEG, expected 4:4:4 (no chroma subsampling, as upstream encodes)")
    quality = _qualities().get(quantization_tables(frame))
    if quality is None:
        raise ValueError("a JPEG whose quantization tables are not libjpeg's of any quality")
    frame.shape, frame.quality = (int(height), int(width), 3), quality
    return frame
