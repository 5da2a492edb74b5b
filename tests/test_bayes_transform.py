"""bayes_lmer(..., transform=...): the exact cell likelihood with a fixed transform, and
seeded simulations from a known transformation model whose posterior intervals of the EER
and of the subgroup ratios cover the truth as often as a binomial bound allows."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, logit
from scipy.stats import norm

from scoremix.bayes.transform import TransformSpecError, latent_cells
from scoremix.predictive.mixture import mixture_eer

pytest.importorskip("pymc")


class CellTransform:
    """Test double of a fitted monotone transform with known cells: distinct scores
    ``values`` and latent upper edges ``alpha`` (``h⁻``/``h⁺`` as the engine defines them)."""

    def __init__(self, values, alpha):
        self.values = np.asarray(values, float)
        self.alpha = np.asarray(alpha, float)
        self._ext = np.r_[-np.inf, self.alpha, np.inf]

    def lower(self, s):
        return self._ext[np.searchsorted(self.values, np.asarray(s, float), side="left")]

    def upper(self, s):
        return self._ext[np.searchsorted(self.values, np.asarray(s, float), side="right")]

    def __call__(self, s):
        return np.interp(np.asarray(s, float), self.values[:-1], self.alpha)

    def inverse(self, z):
        return np.interp(np.asarray(z, float), self.alpha, self.values[:-1])


A = 1.5  # scores = round(expit(A·z), 2): 101 tied cells, saturated at 0 and 1


def simulate(seed, n=1200, n_spk=24):
    rng = np.random.default_rng(seed)
    b = rng.normal(0, 0.5, n_spk)
    spk = rng.integers(0, n_spk, n)
    sex = np.where(np.arange(n_spk) % 2 == 0, "f", "m")[spk]
    y = rng.random(n) < 0.5
    shift = np.where(sex == "f", 0.0, -0.6) * y  # males' targets score lower
    fixed = -1.0 + 2.2 * y + shift
    mean = fixed + b[spk]
    z = mean + rng.standard_normal(n) * np.where(y, 0.8, 1.0)
    s = np.round(expit(A * z), 2)
    df = pd.DataFrame({"score": s, "label": np.where(y, "target", "nontarget"),
                       "speaker": [f"s{k:02d}" for k in spk], "sex": sex, "z": z})
    values = np.round(np.arange(0, 101) / 100, 2)
    alpha = logit(values[:-1] + 0.005) / A  # rounding boundaries on the latent scale
    return df.assign(fixed=fixed), CellTransform(values, alpha), mean, y, sex


def test_latent_cells_are_the_one_sided_limits():
    df, tr, *_ = simulate(0, n=200)
    lo, hi = latent_cells(tr, df["score"])
    s = df["score"].to_numpy()
    # a score k/100 means A·z ∈ (logit((k-.5)/100), logit((k+.5)/100)]
    np.testing.assert_allclose(lo[s > 0], logit(s[s > 0] - 0.005) / A, atol=1e-9)
    np.testing.assert_allclose(hi[s < 1], logit(s[s < 1] + 0.005) / A, atol=1e-9)
    assert np.all(np.isneginf(lo[s == 0])) and np.all(np.isposinf(hi[s == 1]))
    with pytest.raises(TransformSpecError, match="lower"):
        latent_cells(object(), [0.1])


def test_cell_loglik_graph_equals_scipy():
    import pytensor.tensor as pt

    from scoremix.bayes.joint import cell_loglik_graph

    rng = np.random.default_rng(1)
    mu = rng.normal(0, 2, 50)
    sd = rng.uniform(0.5, 2, 50)
    lo = rng.normal(0, 2, 50)
    hi = lo + rng.uniform(1e-6, 3, 50)
    lo[:5] = -np.inf
    hi[5:10] = np.inf
    lo[10:15] = 7.0  # far upper tail: needs the complement form
    hi[10:15] = 7.5
    a, b = (lo - mu) / sd, (hi - mu) / sd
    want = np.sum(np.log(norm.cdf(b[:10]) - norm.cdf(a[:10]))) + np.sum(np.log(norm.sf(a[10:]) - norm.sf(b[10:])))
    got = cell_loglik_graph(pt.constant(mu), pt.constant(sd), lo, hi).eval()
    assert got == pytest.approx(want, rel=1e-10)


#: data sets of the coverage test and the most misses allowed per quantity: under nominal 95 %
#: coverage P(Bin(5, 0.05) >= 3) = 0.00116, so the chance that any of the three quantities fails
#: is at most 3 x 0.00116 = 0.0035 (union bound: whatever their correlation within a data set)
COVER_SEEDS, MAX_MISSES = range(5), 2


@pytest.mark.slow
def test_posterior_eer_and_subgroup_ratios_cover_the_truth():
    """Five seeded data sets from the known transformation model (400 trials, 16 speakers; h
    fixed at the true cells): the 95 % posterior intervals of the conditional EER and of both
    sexes' ``ratio_overall`` (new speakers) miss their truth in at most ``MAX_MISSES`` of the
    five data sets per quantity; the latent residual SD is on the true scale.  (A single seed
    at 99 % failed or passed with the BLAS build — the truth sat at an interval edge; the
    repeated-sampling coverage at more seeds is measured by
    ``benchmarks/bayes_transform_coverage.py``.)"""
    from scipy.stats import binom

    from scoremix.bayes import bayes_lmer
    from scoremix.fairness import posterior_subgroup_dcf
    from scoremix.fairness.model_measures import gaussian_mixture_measures
    from scoremix.model_eer import model_eer

    assert 3 * binom.sf(MAX_MISSES, len(COVER_SEEDS), 0.05) < 0.005
    misses = {"eer": [], "f": [], "m": []}
    sigma = []
    for seed in COVER_SEEDS:
        df, tr, mean, y, sex = simulate(seed, n=400, n_spk=16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bayes_lmer("score ~ label * sex + (1 | speaker)", df, dispersion="~ label", transform=tr,
                             draws=200, tune=200, chains=1, cores=1, seed=seed, progress=False)
            pe = model_eer(res, progress=False, n_boot=0, level=0.95, thresholds="latent")  # truth: smooth crossing
            fair = posterior_subgroup_dcf(res, df, ["sex"], max_draws=100, n_boot=0, ci=0.95, random="marginal")
        assert res.transform is tr
        # truth: the class mixtures of the true per-trial latent Gaussians (realised speakers)
        sd = np.where(y, 0.8, 1.0)
        true_eer = mixture_eer(mean[~y], sd[~y], mean[y], sd[y])
        lo, hi = pe.interval_columns
        s = pe.summary.loc["all"]
        if not s[lo] <= true_eer <= s[hi]:
            misses["eer"].append(seed)
        sigma.append(float(np.mean(res.draws("sigma_target"))))
        # subgroup ratios for new speakers: class distributions N(fixed_i, σ_y² + 0.5²) (population truth)
        W = np.vstack([np.ones(len(df)), sex == "f", sex == "m"]).astype(float)
        truth = gaussian_mixture_measures(df["fixed"].to_numpy()[None, :], np.sqrt(sd ** 2 + 0.25)[None, :],
                                          y.astype(bool), W)
        t = fair.table.set_index("subgroup")
        for k, g in enumerate(["f", "m"]):
            if not t.loc[g, "ratio_overall_lo"] <= truth["ratio_overall"][k, 0] <= t.loc[g, "ratio_overall_hi"]:
                misses[g].append(seed)
    assert all(len(v) <= MAX_MISSES for v in misses.values()), misses
    # the latent residual SD of targets is on the true scale (h fixed at the truth): the mean of five
    # posterior means (each with a sampling SD of about 0.04 at 400 trials) within 0.08 of 0.8
    assert float(np.mean(sigma)) == pytest.approx(0.8, abs=0.08), sigma
