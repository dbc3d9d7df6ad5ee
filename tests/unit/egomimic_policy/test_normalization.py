"""Normalization: the upstream formulas exactly, exact inverses, per-embodiment selection, the
checkpoint form, and refusals (legacy ids, wrong widths, missing stats)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from egomimic_hw.embodiment import Embodiment
from egomimic_hw.errors import ConfigError
from egomimic_policy.features import ACTION_KEY, STATE_KEY, neutral_norm_stats
from egomimic_policy.normalization import EPS, KeyStats, NormMode, NormStats

RNG = np.random.default_rng(3)
DATA = RNG.normal([0.3, -0.1, 2.0], [0.05, 0.2, 1.5], size=(500, 3))


def stats_for(mode) -> NormStats:
    return NormStats(mode=mode, stats={int(Embodiment.EVA_BIMANUAL): {"k": KeyStats.from_samples(DATA)}})


def test_key_stats_from_samples_match_numpy():
    ks = KeyStats.from_samples(DATA.reshape(50, 10, 3))  # every axis but the last is reduced
    np.testing.assert_allclose(ks.mean, DATA.mean(0))
    np.testing.assert_allclose(ks.std, DATA.std(0))
    np.testing.assert_allclose(ks.quantile_1, np.quantile(DATA, 0.01, axis=0))
    np.testing.assert_allclose(ks.quantile_99, np.quantile(DATA, 0.99, axis=0))
    np.testing.assert_allclose(ks.median, np.median(DATA, 0))


@pytest.mark.parametrize("mode", list(NormMode))
def test_formulas_are_upstreams(mode):
    ns, ks = stats_for(mode), KeyStats.from_samples(DATA)
    x = DATA[:7]
    expected = {
        NormMode.QUANTILE: 2 * (x - ks.quantile_1) / (ks.quantile_99 - ks.quantile_1 + EPS) - 1,
        NormMode.MINMAX: 2 * (x - ks.min) / (ks.max - ks.min + EPS) - 1,
        NormMode.ZSCORE: (x - ks.mean) / (ks.std + EPS),
    }[mode]
    np.testing.assert_allclose(ns.normalize(Embodiment.EVA_BIMANUAL, "k", x), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", list(NormMode))
def test_quantile_and_minmax_map_the_range_to_minus_one_one(mode):
    ns, ks = stats_for(mode), KeyStats.from_samples(DATA)
    if mode is NormMode.ZSCORE:
        np.testing.assert_allclose(ns.normalize(6, "k", ks.mean), 0.0, atol=1e-12)
        return
    lo, hi = (ks.quantile_1, ks.quantile_99) if mode is NormMode.QUANTILE else (ks.min, ks.max)
    np.testing.assert_allclose(ns.normalize(6, "k", lo), -1.0, atol=1e-9)
    np.testing.assert_allclose(ns.normalize(6, "k", hi), 1.0, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(mode=st.sampled_from(list(NormMode)), x=arrays(np.float64, (4, 3), elements=st.floats(-50, 50)))
def test_unnormalize_inverts_normalize(mode, x):
    ns = stats_for(mode)
    back = ns.unnormalize(6, "k", ns.normalize(6, "k", x))
    np.testing.assert_allclose(back, x, rtol=1e-9, atol=1e-9)


def test_stats_are_chosen_by_embodiment():
    a, b = KeyStats.from_samples(DATA), KeyStats.from_samples(DATA * 3 + 1)
    ns = NormStats(mode="quantile", stats={6: {"k": a}, 3: {"k": b}})
    x = DATA[:3]
    assert not np.allclose(
        ns.normalize(Embodiment.EVA_BIMANUAL, "k", x), ns.normalize(Embodiment.HUMAN_BIMANUAL, "k", x)
    )
    np.testing.assert_allclose(ns.normalize(6, "k", x), stats_for("quantile").normalize(6, "k", x))


def test_state_round_trip_through_torch_weights_only(tmp_path):
    ns = stats_for(NormMode.QUANTILE)
    torch.save({"norm_stats_state": ns.to_state()}, tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=True)["norm_stats_state"]
    back = NormStats.from_state(state)
    assert back.mode is NormMode.QUANTILE and set(back.stats) == {6}
    np.testing.assert_array_equal(back.key_stats(6, "k").quantile_99, ns.key_stats(6, "k").quantile_99)


def test_refusals_name_the_problem():
    with pytest.raises(ConfigError, match="legacy checkpoints need migration"):
        NormStats(mode="quantile", stats={8: {"k": KeyStats.from_samples(DATA)}})
    ns = stats_for("zscore")
    with pytest.raises(ConfigError, match="no norm stats for embodiment human_bimanual"):
        ns.normalize(Embodiment.HUMAN_BIMANUAL, "k", DATA[:1])
    with pytest.raises(ConfigError, match="no norm stats for key 'other'"):
        ns.normalize(6, "other", DATA[:1])
    with pytest.raises(ConfigError, match="3 wide"):
        ns.normalize(6, "k", np.zeros((2, 4)))
    with pytest.raises(ConfigError, match="unknown norm mode"):
        NormStats(mode="robust", stats={})
    with pytest.raises(ConfigError, match="non-finite"):
        KeyStats.from_samples(np.array([[np.nan, 1.0]]))
    with pytest.raises(ConfigError, match="missing statistics"):
        KeyStats.from_dict({"mean": [0.0]})


def test_neutral_defaults_are_documented_ranges():
    ns = neutral_norm_stats()
    action = ns.key_stats(Embodiment.EVA_BIMANUAL, ACTION_KEY)
    state = ns.key_stats(Embodiment.EVA_BIMANUAL, STATE_KEY)
    assert action.dim == state.dim == 20
    # A model output of 0 (mid-range) decodes to no translation and the identity rotation.
    mid = ns.unnormalize(6, ACTION_KEY, np.zeros(20))
    np.testing.assert_allclose(mid[[0, 1, 2, 10, 11, 12]], 0.0, atol=1e-6)
    np.testing.assert_allclose(mid[3:9], [1, 0, 0, 0, 1, 0], atol=1e-6)
    extreme = ns.unnormalize(6, ACTION_KEY, np.ones(20))
    assert np.all(np.abs(extreme[[0, 1, 2, 10, 11, 12]]) <= 0.0031)  # NEUTRAL_ACTION_XYZ_M = 3 mm
    np.testing.assert_allclose(extreme[[9, 19]], 0.55, atol=1e-5)  # NEUTRAL_ACTION_GRIPPER
    # Consecutive rows of an untrained model can span the whole range: stay inside the gate's
    # per-step rate limit (0.6 m/s x 1/30 s = 20 mm).
    assert 2 * 0.003 < 0.6 / 30
