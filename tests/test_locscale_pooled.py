"""Pooled per-level shapes (:mod:`scoremix.locscale.pooled`): simulations with known truth.

* Every level log-normal (one shared shape: the class transform is ``log``), few trials per
  level: the CV chooses strong pooling and the pooled per-level distribution is closer to
  the true one than the level's empirical distribution.
* Half the levels bimodal, many trials per level: the CV keeps (almost) every level's own
  distribution.
* The fit: κ = 0 is the one-transform-per-stratum fit exactly; otherwise each stratum's
  model distribution equals the pooled one at its distinct scores.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import ndtr
from scipy.stats import norm

import scoremix as sm
from scoremix.locscale import LocScaleSpec, fit_locscale
from scoremix.locscale.pooled import fit_pooled_shapes, pooled_cdf, shape_pooling

L = 10
MUS = np.linspace(-1, 1, L)
SDS = np.linspace(0.8, 1.3, L)
TAU = 0.4


def _sim(seed: int, n_spk: int, per: int, bimodal: bool) -> pd.DataFrame:
    """Negatives: level ℓ has latent μ_ℓ + b_i + σ_ℓ ε (ε bimodal for odd ℓ when ``bimodal``),
    score exp(latent); positives one level."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_spk):
        b = rng.normal(0, TAU)
        zp = 3 + rng.normal(0, 0.3) + rng.normal(0, 1, 3 * per)
        rows.append(pd.DataFrame(dict(score=np.exp(zp), label=1, speaker=f"s{i:02d}", attack="bonafide")))
        for k in range(L):
            e = rng.normal(0, 1, per)
            if bimodal and k % 2:
                e = np.where(rng.random(per) < 0.3, rng.normal(-2.0, 0.3, per), rng.normal(0.8, 0.5, per))
            rows.append(pd.DataFrame(dict(score=np.exp(MUS[k] + b + SDS[k] * e), label=0, speaker=f"s{i:02d}",
                                          attack=f"A{k:02d}")))
    return pd.concat(rows, ignore_index=True)


def _args(df: pd.DataFrame):
    return df["score"].to_numpy(float), df["attack"].to_numpy(object), df["label"].to_numpy(), df["speaker"].to_numpy()


def test_shared_shape_few_trials_pools_and_beats_counting():
    """80 trials per level.  Error = mean over levels of the integrated squared difference from
    the true CDF Φ((log v − μ_ℓ)/√(σ_ℓ² + τ²)) over 200 quantiles of the class's scores;
    measured 0.00108 (pooled) against 0.00151 (empirical): required ≤ 0.85 × empirical."""
    df = _sim(1, 40, 2, bimodal=False)
    s, lv, y, spk = _args(df)
    pool = shape_pooling(s, lv, y, spk)
    assert pool.kappa >= 300
    assert pool.table["chosen"].sum() == 1 and pool.table.loc[pool.table["chosen"], "delta"].iloc[0] == 0
    neg = df[df["label"] == 0]
    grid = np.quantile(neg["score"], (np.arange(200) + 0.5) / 200)
    e_pool = e_emp = 0.0
    for k in range(L):
        name = f"A{k:02d}"
        truth = norm.cdf((np.log(grid) - MUS[k]) / np.hypot(SDS[k], TAU))
        x = np.sort(neg.loc[neg["attack"] == name, "score"])
        e_emp += np.mean((np.searchsorted(x, grid, side="right") / x.size - truth) ** 2)
        e_pool += np.mean((pooled_cdf(s, lv, y, pool, name, grid) - truth) ** 2)
    assert e_pool <= 0.85 * e_emp


def test_different_shapes_many_trials_keep_their_own():
    """1,600 trials per level, half bimodal: κ ≤ 100, so every level keeps ≥ 94 % weight on its
    own distribution (measured κ = 30)."""
    df = _sim(2, 40, 40, bimodal=True)
    pool = shape_pooling(*_args(df))
    assert pool.kappa <= 100
    assert min(pool.weights.values()) >= 0.94
    assert pool.weights["bonafide"] == 1.0            # a class with one stratum is never pooled


@pytest.mark.slow
def test_pooled_fit_matches_pooled_distribution():
    df = _sim(3, 16, 3, bimodal=False)
    spec = LocScaleSpec(label="label", positive=1, strata=("attack",), speaker_scale=())
    # κ = 0: one free transform per stratum, the ordinary fit
    f0 = fit_pooled_shapes(df, spec, kappa=0.0)
    ref = fit_locscale(df, spec)
    for a, b in zip(f0._edges, ref._edges):
        np.testing.assert_array_equal(a, b)
    # κ > 0: every stratum's model distribution (the mixture of its trials' fitted Gaussians at
    # the transform's edges) equals the pooled one at the stratum's distinct scores, to 1e-5
    f = fit_pooled_shapes(df, spec, kappa=50.0)
    s, att, y, _ = _args(df)
    lv = np.where(y == 1, "+", "-").astype(object) + ":" + att     # the fit's stratum labels
    cells = f._data.cells
    for k, name in enumerate(cells.levels):
        if name == "+:bonafide":
            continue
        idx = cells.stratum == k
        edges = f._edges[k]
        model = ndtr((edges[:, None] - f.trial_mean[idx][None]) / f.trial_sd[idx][None]).mean(axis=1)
        want = pooled_cdf(s, lv, y, f.shape_pooling, name, cells.values[k][:-1])
        np.testing.assert_allclose(model, want, atol=1e-5)
        assert f.shape_pooling.weights[name] == pytest.approx(np.sum(lv == name) / (np.sum(lv == name) + 50.0))
    # as a score_model candidate: strata with weight < 1 are reported as predicted, not fitted freely
    fit = sm.score_model(df, label="label", factors=["attack"], positive=1, pool_shapes=True,
                         candidates=[spec.with_(name="location")])
    sel = fit.selection
    assert fit.shape_pooling.kappa > 0
    assert sel.fitted_freely == ["+:bonafide"]
    assert sum("shape pooled" in p for p in sel.predicted) == L
    assert any(n.startswith("shape pooling: kappa") for n in sel.notes)
