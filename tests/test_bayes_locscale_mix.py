"""The Bayesian fit of what score_model chose: failure mixture and per-speaker shape pooling
(scoremix.bayes.locscale_mix, s7bayes-api).

* the failure trials are out of the sampled likelihood (as in the ML fit) and the notes name
  both carried parts;
* with kappa_c = 0 every speaker's posterior EER and minimum DCF equal the speaker's empirical
  values (scoremix.metrics) in every draw, to 1e-9;
* with kappa = inf (no pooling) and with kappa = 5, every speaker's posterior EER in every draw
  equals (to 1e-8 as a fraction) the ROCCH EER (scoremix.validation.rocch_eer, a different
  implementation) of rates
  computed here from the draws directly: core Gaussians of the draw weighted by the failure
  mixture's weights, the failure distribution N(0, 1) on its transform, and the point masses
  of the speaker's own scores as indicators, blended with omega = n / (n + kappa);
* transform="sampled" and thresholds="latent" are refused by name.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtr

pytest.importorskip("pymc")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import scoremix as sm  # noqa: E402
from scoremix.bayes.locscale import BayesLocScaleError  # noqa: E402
from scoremix.locscale import LocScaleSpec, fit_locscale  # noqa: E402
from scoremix.locscale.speaker_pool import with_speaker_pooling  # noqa: E402
from scoremix.validation import rocch_eer  # noqa: E402


def _data():
    from locscale_helpers import simulate_ls

    df = simulate_ls(n_speakers=8, n_per_cell=25, strata_neg=2, seed=3)
    rng = np.random.default_rng(1)
    bad = df.index[(df.label == "bonafide") & df.speaker.isin(["s00", "s01"])][:10]
    df.loc[bad, "score"] = rng.normal(-3.0, 0.5, bad.size)      # catastrophic bona fide trials
    bad = df.index[(df.label == "spoof") & df.speaker.isin(["s03"])][:6]
    df.loc[bad, "score"] = rng.normal(4.0, 0.5, bad.size)       # spoofs scored as bona fide
    return df


@pytest.fixture(scope="module")
def mixed():
    df = _data()
    fit = fit_locscale(df, LocScaleSpec(strata=("attack",), positive="bonafide", failure_quantile=0.97))
    assert fit._data.failure.sum() >= 10
    with_speaker_pooling(fit, 5.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sm.bayes_locscale(fit, draws=30, tune=40, chains=1, cores=1, seed=2)
    return df, fit, res


def test_failures_leave_the_likelihood_and_notes_name_the_parts(mixed):
    df, fit, res = mixed
    fail = fit._data.failure
    assert res.cells.n.sum() == (~fail).sum()
    levels = res.cells.strata_levels
    for k, lv in enumerate(levels):
        assert (res.cells.stratum == k).any() == (not lv.endswith(":failure"))
        assert (f"mu[{lv}]" in res.summary().index) == (not lv.endswith(":failure"))
    text = " ".join(res.notes)
    assert "failure mixture carried" in text and "failure_quantile=None" in text
    assert "speaker shape pooling carried with kappa fixed" in text and "speaker_pooling=None" in text


def test_kappa_zero_gives_every_speakers_empirical_eer_and_dcf_in_every_draw(mixed):
    df, fit, res = mixed
    with_speaker_pooling(fit, 0.0)
    try:
        labels, E, info = res.eer_draws("speaker", max_draws=None, max_thresholds=None)
        labs_d, M, info_d, _ = res.dcf_draws("speaker", max_draws=None, max_thresholds=None)
    finally:
        with_speaker_pooling(fit, 5.0)
    assert labels[1:] == sorted(df.speaker.unique()) and E.shape[1] == 30
    y = (df.label == "bonafide").to_numpy()
    for k, spk in enumerate(labels[1:], start=1):
        m = (df.speaker == spk).to_numpy()
        emp = 100 * sm.eer(df.score[m].to_numpy(), y[m])
        np.testing.assert_allclose(E[k], emp, rtol=0, atol=1e-9)
        dcf = 100 * float(sm.min_dcf(df.score[m].to_numpy(), y[m], p_target=0.05).value)
        np.testing.assert_allclose(M[k], dcf, rtol=0, atol=1e-9)


def _independent_eer(fit, res, spk: str, kappa: float) -> np.ndarray:
    """Per draw, the speaker's ROCCH EER (percent) from the draws and the fit's mixture weights."""
    data = fit._data
    frame = data.frame
    rows = np.flatnonzero(frame["speaker"].to_numpy() == spk)
    y = data.y[rows]
    score = data.score[rows]
    w1, _, _, st2, w2 = fit.trial_mixture()
    w1, w2, st2 = np.asarray(w1)[rows], np.asarray(w2)[rows], np.asarray(st2, object)[rows]
    strata = fit.strata.to_numpy(dtype=object)[rows]
    tc = res.maps["trial_cell"][rows]
    cells, d = res.cells, res.draws
    tau = np.unique(data.score)          # everyone's observed scores (max_thresholds=None)
    tr = fit.transform

    def lat(level, t):
        return np.asarray(tr.stratum(level).lower(t), float)

    n_cls = {c: float((y == c).sum()) for c in (0, 1)}
    omega = {c: (n_cls[c] / (n_cls[c] + kappa) if np.isfinite(kappa) else 0.0) for c in (0, 1)}
    out = []
    for dd in range(d["mu"].shape[0]):
        rate = {}
        for c in (0, 1):
            num, den = np.zeros(tau.size), 0.0
            for t in np.flatnonzero(y == c):
                om = omega[c]
                if tc[t] >= 0 and w1[t] > 0:
                    k = tc[t]
                    m = d["mu"][dd, cells.stratum[k]] + d["b"][dd, cells.unit[k]] + d["u"][dd, k]
                    s = np.exp(d["lam"][dd, cells.stratum[k]] + d["g"][dd, cells.unit[k]])
                    z = (lat(strata[t], tau) - m) / s
                    num += (1 - om) * w1[t] * (ndtr(z) if c == 1 else ndtr(-z))
                elif w1[t] > 0:                      # an all-failure cell: the failure row's own N(0, 1)
                    z = lat(strata[t], tau)
                    num += (1 - om) * w1[t] * (ndtr(z) if c == 1 else ndtr(-z))
                den += (1 - om) * w1[t]
                if w2[t] > 0:
                    z = lat(st2[t], tau)
                    num += (1 - om) * w2[t] * (ndtr(z) if c == 1 else ndtr(-z))
                    den += (1 - om) * w2[t]
                num += om * ((score[t] < tau) if c == 1 else (score[t] >= tau))
                den += om
            rate[c] = num / den
        fnr, fpr = np.r_[0.0, rate[1], 1.0], np.r_[1.0, rate[0], 0.0]
        out.append(100 * rocch_eer(fnr, fpr))
    return np.array(out)


@pytest.mark.parametrize("kappa", [np.inf, 5.0])
def test_speaker_posterior_eer_equals_the_draws_mixture_computed_directly(mixed, kappa):
    df, fit, res = mixed
    with_speaker_pooling(fit, kappa)
    try:
        labels, E, _ = res.eer_draws("speaker", max_draws=None, max_thresholds=None)
        for spk in ("s00", "s03", "s05"):
            ref = _independent_eer(fit, res, spk, kappa)
            # percent; rocch_eer maximises over the hull weight by bounded Brent (~1e-9 on the fraction)
            np.testing.assert_allclose(E[labels.index(spk)], ref, rtol=0, atol=1e-6)
    finally:
        with_speaker_pooling(fit, 5.0)


def test_sampled_transform_and_latent_thresholds_are_refused_by_name(mixed):
    df, fit, res = mixed
    with pytest.raises(BayesLocScaleError, match="speaker shape pooling.*speaker_pooling=None"):
        sm.bayes_locscale(fit, transform="sampled", draws=5, tune=5, chains=1)
    with pytest.raises(BayesLocScaleError, match="thresholds='latent' is not defined"):
        res.posterior_eer("speaker", thresholds="latent")
    with pytest.raises(BayesLocScaleError, match="by column 'nope'"):
        res.posterior_dcf("nope")
