"""Posterior SVEva measures: wiring to a BayesLmerResult, closed-form checks, and the
frequentist coverage of 95 % credible intervals under an exact (conjugate) posterior."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar
from scipy.stats import chi2, norm

from scoremix.fairness import model_subgroup_dcf, posterior_subgroup_dcf, posterior_subgroup_measures
from scoremix.fairness.subgroups import SubgroupError


# ----------------------------------------------------------------------------- closed-form helpers
def pop_cost(t, neg, pos, p_target=0.05):
    """DCF of a population whose class scores are mixtures [(w, mu, sd)]."""
    t = np.asarray(t, float)
    fa = sum(w * norm.sf(t, m, s) for w, m, s in neg) / sum(w for w, _, _ in neg)
    mi = sum(w * norm.cdf(t, m, s) for w, m, s in pos) / sum(w for w, _, _ in pos)
    return p_target * mi + (1 - p_target) * fa


def pop_min(neg, pos):
    grid = np.linspace(-8, 12, 4001)
    k = int(np.argmin(pop_cost(grid, neg, pos)))
    o = minimize_scalar(lambda t: float(pop_cost(t, neg, pos)), bounds=(grid[max(k - 1, 0)], grid[min(k + 1, 4000)]),
                        method="bounded", options=dict(xatol=1e-11))
    return o.fun, o.x


# ----------------------------------------------------------------------------- stand-in posterior fit
BASE = {("a", 0): 0.0, ("a", 1): 3.0, ("b", 0): 0.6, ("b", 1): 2.7}
SIG = {0: 1.0, 1: 0.7}
SPK = {"s1": 0.3, "s2": -0.2, "s3": 0.1, "s4": -0.4, "s5": 0.25}
SPK_GROUP = {"s1": "a", "s2": "a", "s3": "b", "s4": "b", "s5": "b"}
SHIFT = (0.0, 0.15, -0.1)  # per draw


class StandInPosterior:
    """Posterior with 3 known draws: trial i of draw d ~ N(BASE[g,y] + b_spk + SHIFT[d], SIG[y]²)."""

    idata = None

    def class_moments(self, groups, data, label, positive, random, max_draws):
        assert random == "conditional"
        y = (data[label] == positive).astype(int).to_numpy()
        rows = []
        for d, sh in enumerate(SHIFT):
            mu = np.array([BASE[(g, c)] + SPK[s] + sh for g, c, s in zip(data["g"], y, data["speaker"])])
            v = np.array([SIG[c] ** 2 for c in y])
            f = pd.DataFrame({**{k: data[k].to_numpy() for k in groups}, "class": y, "mu": mu, "v": v})
            for key, sub in f.groupby(list(groups) + ["class"]):
                m = sub["mu"].mean()
                sd = np.sqrt(sub["v"].mean() + ((sub["mu"] - m) ** 2).mean())
                rows.append((*key, d, m, sd, len(sub)))
        return pd.DataFrame(rows, columns=list(groups) + ["class", "draw", "mean", "sd", "n"])


def standin_trials():
    cnt = {"s1": (6, 2), "s2": (3, 4), "s3": (5, 1), "s4": (2, 3), "s5": (4, 2)}
    rows = []
    for s, (nn, npos) in cnt.items():
        rows += [(s, SPK_GROUP[s], "nontarget")] * nn + [(s, SPK_GROUP[s], "target")] * npos
    return pd.DataFrame(rows, columns=["speaker", "g", "label"])


def test_posterior_dcf_matches_trial_mixture_per_draw():
    df = standin_trials()
    res = posterior_subgroup_dcf(StandInPosterior(), df, ["g"], max_draws=None)
    # the model_subgroup_dcf entry point dispatches a posterior fit to the same computation
    res2 = model_subgroup_dcf(StandInPosterior(), df, ["g"], max_draws=None)
    np.testing.assert_allclose(res2.draws["ratio_overall"], res.draws["ratio_overall"])
    r = res.draws["ratio_overall"]
    assert r.shape == (2, 3)
    for d, sh in enumerate(SHIFT):
        def comps(sub, c):
            lab = "target" if c else "nontarget"
            return [(1.0, BASE[(row.g, c)] + SPK[row.speaker] + sh, SIG[c])
                    for row in sub[sub["label"] == lab].itertuples()]
        all_min, tstar = pop_min(comps(df, 0), comps(df, 1))
        assert res.draws["all_min_dcf"][d] == pytest.approx(all_min, rel=1e-7)
        for k, g in enumerate("ab"):
            sub = df[df["g"] == g]
            at = float(pop_cost(tstar, comps(sub, 0), comps(sub, 1)))
            own, _ = pop_min(comps(sub, 0), comps(sub, 1))
            assert r[k, d] == pytest.approx(at / all_min, rel=1e-6)
            assert res.draws["min_dcf"][k, d] == pytest.approx(own, rel=1e-7)
    t = res.table
    assert list(t["subgroup"]) == ["a", "b"]
    assert list(t["n_speakers"]) == [2, 3]
    assert list(t["n_pos"]) == [6, 6] and list(t["n_neg"]) == [9, 11]
    assert t.loc[0, "ratio_overall"] == pytest.approx(np.median(r[0]), rel=1e-12)
    assert t.loc[0, "ratio_overall_lo"] == pytest.approx(np.quantile(r[0], 0.025), rel=1e-12)
    assert t.loc[1, "p_ratio_overall_gt_1"] == pytest.approx(np.mean(r[1] > 1))
    assert not t["reliable"].any()  # 2-3 speakers < 5
    fi = np.where(r > 1, r, 0).sum(axis=0)
    assert res.fairness_index == pytest.approx(np.median(fi))
    assert res.p_fairness_index_gt(0.0) == pytest.approx(np.mean(fi > 0))
    fig = res.plot_forest()
    assert len(fig.axes[0].get_yticklabels()) == 2


def test_posterior_dcf_errors():
    df = standin_trials()
    with pytest.raises(TypeError, match="BayesLmerResult"):
        posterior_subgroup_dcf(object(), df, ["g"])
    with pytest.raises(SubgroupError, match="split_by column 'room'"):
        posterior_subgroup_dcf(StandInPosterior(), df, ["g"], split_by=["room"])
    with pytest.raises(ValueError, match="random must be"):
        posterior_subgroup_dcf(StandInPosterior(), df, ["g"], random="new")


# ----------------------------------------------------------------------------- coverage, exact posterior
TRUE = {"neg": [(0.0, 1.0), (0.5, 1.1), (-0.3, 0.9)], "pos": [(3.0, 1.0), (2.6, 1.2), (3.2, 0.8)]}
N_NEG, N_POS = np.array([300, 200, 250]), np.array([80, 60, 70])


def true_ratio_overall():
    neg = [(N_NEG[g], *TRUE["neg"][g]) for g in range(3)]
    pos = [(N_POS[g], *TRUE["pos"][g]) for g in range(3)]
    all_min, tstar = pop_min(neg, pos)
    return np.array([pop_cost(tstar, [neg[g]], [pos[g]]) / all_min for g in range(3)])


def conjugate_draws(x, n_draws, rng):
    """Exact posterior of (μ, σ) for iid normal data under p(μ, σ²) ∝ 1/σ²:
    σ² = (n-1)s²/χ²_{n-1}, μ | σ² ~ N(x̄, σ²/n)."""
    n = x.size
    s2 = (n - 1) * x.var(ddof=1) / chi2.rvs(n - 1, size=n_draws, random_state=rng)
    mu = rng.normal(x.mean(), np.sqrt(s2 / n))
    return mu, np.sqrt(s2)


@pytest.mark.slow
def test_credible_intervals_cover_truth_exact_posterior():
    """200 seeded data sets from Gaussian subgroups; the exact conjugate posterior of each
    subgroup/class normal is pushed through the SVEva measures; the 95 % credible interval
    of ratio_overall (and of the FI) must cover the closed-form truth in 90-99 % of replicates."""
    truth = true_ratio_overall()
    R, D = 200, 300
    hit = np.zeros((R, 3), bool)
    fi_true = truth[truth > 1].sum()
    fi_hit = 0
    for rep in range(R):
        rng = np.random.default_rng(1000 + rep)
        arr = {k: np.empty((D, 3)) for k in ("mn", "sn", "mp", "sp")}
        for g in range(3):
            xn = rng.normal(*TRUE["neg"][g], N_NEG[g])
            xp = rng.normal(*TRUE["pos"][g], N_POS[g])
            arr["mn"][:, g], arr["sn"][:, g] = conjugate_draws(xn, D, rng)
            arr["mp"][:, g], arr["sp"][:, g] = conjugate_draws(xp, D, rng)
        res = posterior_subgroup_measures(arr["mn"], arr["sn"], arr["mp"], arr["sp"], N_NEG, N_POS, ci=0.95,
                                          n_grid=128)
        t = res.table
        hit[rep] = (t["ratio_overall_lo"] <= truth) & (truth <= t["ratio_overall_hi"])
        fi_hit += res.fairness_index_ci[0] <= fi_true <= res.fairness_index_ci[1]
    cover = hit.mean(axis=0)
    assert np.all((cover >= 0.90) & (cover <= 0.99)), cover
    assert 0.90 <= fi_hit / R <= 0.99, fi_hit / R


# ----------------------------------------------------------------------------- a real Bayesian fit
@pytest.mark.slow
def test_posterior_dcf_real_bayes_fit():
    pytest.importorskip("pymc")
    from scoremix.bayes import bayes_lmer
    from test_fairness_model import simulate, true_ratios

    df = simulate(0, 40, 2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayes_lmer("score ~ label * subgroup + (1 | speaker)", df, dispersion="~ label", draws=100, tune=150,
                         chains=2, cores=1, random_seed=1, progressbar=False)
    truth = true_ratios(df)  # closed form for new speakers of each subgroup
    res = posterior_subgroup_dcf(fit, df, ["subgroup"], random="marginal", max_draws=100)
    t = res.table
    assert list(t["subgroup"]) == list("abcd")
    np.testing.assert_allclose(t["ratio_overall"], truth, atol=0.2)
    # the worst subgroup (b, shifted nontargets) is worse off in (almost) every draw
    assert t.loc[1, "p_ratio_overall_gt_1"] >= 0.95 and t.loc[2, "p_ratio_overall_gt_1"] <= 0.05
    # per-draw values equal the closed form built from the fit's own class moments
    mom = fit.class_moments(["subgroup"], data=df, label="label", positive="target", random="marginal",
                            max_draws=100)
    d0 = mom[mom["draw"] == mom["draw"].min()].set_index(["subgroup", "class"])
    neg = [(d0.loc[(g, 0), "n"], d0.loc[(g, 0), "mean"], d0.loc[(g, 0), "sd"]) for g in "abcd"]
    pos = [(d0.loc[(g, 1), "n"], d0.loc[(g, 1), "mean"], d0.loc[(g, 1), "sd"]) for g in "abcd"]
    all_min, tstar = pop_min(neg, pos)
    r0 = [pop_cost(tstar, [neg[k]], [pos[k]]) / all_min for k in range(4)]
    np.testing.assert_allclose(res.draws["ratio_overall"][:, 0], r0, rtol=1e-6)
    cond = model_subgroup_dcf(fit, df, ["subgroup"], conditional=True, max_draws=50)
    assert cond.draws["ratio_overall"].shape == (4, 50)
    assert cond.fairness_index_ci[0] <= cond.fairness_index <= cond.fairness_index_ci[1]
