"""Malformed episodes against the reader (issue 18, item 5): a store damaged anywhere (a file cut
short, overwritten with noise, deleted, or grown with junk) is read to the end or refused with an
EpisodeError naming the store; never another exception, never a hang. Training, replay and
`egomimic-episodes` all read through EpisodeReader, and each turns an EpisodeError into one line."""

from __future__ import annotations

import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egomimic_data.episode_format import EpisodeError, EpisodeReader
from tests.unit.egomimic_policy.training.episodes import write_episode

FRAMES = 4


def read_everything(path: Path) -> int:
    """What a consumer may read: length, meta, every array, every frame of every camera, the
    calibration and the annotations. Returns the number of images decoded."""
    reader = EpisodeReader(path)
    reader.meta()
    for key in sorted(reader.array_keys):
        if not key.startswith("images."):
            reader.array(key)
    assert len(reader.timestamps_ns) == len(reader)
    decoded = 0
    for cam in reader.cameras:
        reader.image_stamps_ns(cam)
        for t in range(len(reader)):
            reader.image(cam, t)
            decoded += 1
    _ = reader.calibration
    reader.annotations()
    return decoded


def _files(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*") if p.is_file())


def test_the_intact_episode_reads_whole(tmp_path):
    store = write_episode(tmp_path / "ok.zarr", FRAMES)
    reader = EpisodeReader(store)
    assert read_everything(store) == FRAMES * len(reader.cameras) > 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.integers(min_value=0),
    how=st.sampled_from(["cut", "noise", "delete", "grow"]),
    at=st.floats(min_value=0.0, max_value=1.0),
    noise=st.binary(min_size=1, max_size=64),
)
def test_a_damaged_episode_is_read_or_refused_with_an_episode_error(tmp_path_factory, which, how, at, noise):
    base = tmp_path_factory.getbasetemp() / "fuzz_base.zarr"
    if not base.exists():
        write_episode(base, FRAMES)
    store = Path(tmp_path_factory.mktemp("fuzz")) / "ep.zarr"
    shutil.copytree(base, store)
    files = _files(store)
    victim = files[which % len(files)]
    data = victim.read_bytes()
    cut = int(at * len(data))
    if how == "cut":
        victim.write_bytes(data[:cut])
    elif how == "noise":
        victim.write_bytes(data[:cut] + noise + data[cut + len(noise) :])
    elif how == "delete":
        victim.unlink()
    else:
        victim.write_bytes(data + noise)
    try:
        read_everything(store)
    except EpisodeError as exc:
        assert str(store) in str(exc), exc
