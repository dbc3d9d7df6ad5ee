"""Norm stats from the data: state over every frame, actions over the real (unpadded) rows,
quantile mode with the median, degenerate spans widened, and the checkpoint form round-trips."""

from __future__ import annotations

import numpy as np
import pytest

from egomimic_policy.features import ACTION_KEY, EMBODIMENT, STATE_KEY
from egomimic_policy.normalization import KeyStats, NormMode, NormStats
from egomimic_policy.training.dataset import EpisodeWindows
from egomimic_policy.training.stats import MIN_SPAN, compute_norm_stats, widen_degenerate, window_sample
from tests.unit.egomimic_policy.training.episodes import write_episode


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats")
    write_episode(root / "a.zarr", 12)
    write_episode(root / "b.zarr", 5)
    return EpisodeWindows([root], n_obs_steps=2, chunk_length=6)


def test_state_stats_cover_every_frame_once(dataset):
    norm = compute_norm_stats(dataset)
    assert norm.mode is NormMode.QUANTILE
    got = norm.key_stats(EMBODIMENT, STATE_KEY)
    frames = np.concatenate([dataset.episodes[0].state, dataset.episodes[1].state])
    assert frames.shape == (17, 20)
    want = widen_degenerate(KeyStats.from_samples(frames))
    for name in ("mean", "std", "min", "max", "median", "quantile_1", "quantile_99"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), err_msg=name)
    np.testing.assert_allclose(got.median, np.median(frames, axis=0))
    # the measured y never moves (0.1 left): its span is widened around it, not left at 0
    assert got.quantile_1[1] == pytest.approx(0.1 - MIN_SPAN / 2, abs=1e-6)
    assert got.quantile_99[1] == pytest.approx(0.1 + MIN_SPAN / 2, abs=1e-6)
    assert norm.normalize(EMBODIMENT, STATE_KEY, frames)[:, 1] == pytest.approx(0.0, abs=1e-3)


def test_action_stats_use_only_real_rows(dataset):
    got = compute_norm_stats(dataset).key_stats(EMBODIMENT, ACTION_KEY)
    real, padded = [], []
    for i in range(len(dataset)):
        actions, mask = dataset.actions(i)
        real.append(actions[mask > 0])
        padded.append(actions)
    want = widen_degenerate(KeyStats.from_samples(np.concatenate(real)))
    with_padding = KeyStats.from_samples(np.concatenate(padded))
    np.testing.assert_allclose(got.mean, want.mean)
    np.testing.assert_allclose(got.quantile_99, want.quantile_99)
    assert not np.allclose(got.mean, with_padding.mean)  # padding would have shifted them
    # the data's own actions normalize into [-1, 1] but for the 1 % tails on either side
    norm = NormStats(NormMode.QUANTILE, {int(EMBODIMENT): {ACTION_KEY: got}})
    x = norm.normalize(EMBODIMENT, ACTION_KEY, np.concatenate(real))
    assert np.mean(np.abs(x) <= 1 + 1e-6) > 0.95


def test_stats_round_trip_through_the_checkpoint_form(dataset):
    norm = compute_norm_stats(dataset, mode="minmax")
    back = NormStats.from_state(norm.to_state())
    assert back.mode is NormMode.MINMAX
    for key in (STATE_KEY, ACTION_KEY):
        a, b = norm.key_stats(EMBODIMENT, key), back.key_stats(EMBODIMENT, key)
        np.testing.assert_array_equal(a.median, b.median)
        np.testing.assert_array_equal(a.quantile_1, b.quantile_1)


def test_subsampled_action_stats_are_seeded_and_bounded(dataset):
    assert window_sample(10, 20, 0).tolist() == list(range(10))
    a, b = window_sample(1000, 50, 3), window_sample(1000, 50, 3)
    assert len(a) == 50 == len(set(a.tolist())) and np.array_equal(a, b)
    assert not np.array_equal(a, window_sample(1000, 50, 4))
    small = compute_norm_stats(dataset, max_windows=4, seed=1).key_stats(EMBODIMENT, ACTION_KEY)
    assert np.all(np.isfinite(small.mean))


def test_widening_keeps_real_spans_and_centres_constant_ones():
    stats = KeyStats.from_samples(np.stack([np.linspace(0, 1, 101), np.full(101, 0.25)], axis=1))
    wide = widen_degenerate(stats)
    assert wide.quantile_1[0] == stats.quantile_1[0] and wide.quantile_99[0] == stats.quantile_99[0]
    assert wide.quantile_99[1] - wide.quantile_1[1] == pytest.approx(MIN_SPAN)
    assert (wide.quantile_1[1] + wide.quantile_99[1]) / 2 == pytest.approx(0.25)
    assert wide.max[1] - wide.min[1] == pytest.approx(MIN_SPAN) and wide.std[1] == pytest.approx(MIN_SPAN / 2)
