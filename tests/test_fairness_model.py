"""Model-based and posterior SVEva measures against closed-form Gaussian truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq, minimize_scalar
from scipy.stats import norm

from scoremix.fairness import model_subgroup_dcf, posterior_subgroup_measures


def closed_form(comps, p_target=0.05):
    """comps: list per population of (neg list[(w, mu, sd)], pos list[(w, mu, sd)]).
    Returns the rates function and the cost minimiser of each population via scipy."""

    def rates(t, pop):
        neg, pos = pop
        fa = sum(w * norm.sf(t, m, s) for w, m, s in neg) / sum(w for w, _, _ in neg)
        mi = sum(w * norm.cdf(t, m, s) for w, m, s in pos) / sum(w for w, _, _ in pos)
        return mi, fa

    def cost(t, pop):
        mi, fa = rates(t, pop)
        return p_target * mi + (1 - p_target) * fa

    def minimise(pop):
        grid = np.linspace(-6, 10, 3201)
        k = int(np.argmin(cost(grid, pop)))  # vectorised over the grid
        o = minimize_scalar(lambda t: cost(t, pop), bounds=(grid[max(k - 1, 0)], grid[min(k + 1, 3200)]),
                            method="bounded", options=dict(xatol=1e-11))
        return o.fun, o.x

    return rates, cost, minimise


def test_posterior_measures_closed_form_single_draw():
    mn, sn = np.array([0.0, 0.3, -0.2]), np.array([1.0, 1.2, 0.9])
    mp, spp = np.array([3.0, 2.5, 3.2]), np.array([1.0, 1.1, 0.8])
    nn, npos = np.array([100.0, 50.0, 80.0]), np.array([30.0, 20.0, 40.0])
    res = posterior_subgroup_measures(mn, sn, mp, spp, nn, npos, names=["a", "b", "c"])
    pops = [([(nn[g], mn[g], sn[g])], [(npos[g], mp[g], spp[g])]) for g in range(3)]
    overall = ([(nn[g], mn[g], sn[g]) for g in range(3)], [(npos[g], mp[g], spp[g]) for g in range(3)])
    rates, cost, minimise = closed_form(None)
    all_min, tstar = minimise(overall)
    assert res.draws["all_min_dcf"][0] == pytest.approx(all_min, rel=1e-7)
    assert res.draws["all_threshold"][0] == pytest.approx(tstar, abs=1e-5)
    fi = 0.0
    for g in range(3):
        own, town = minimise(pops[g])
        at = cost(tstar, pops[g])
        eer_t = brentq(lambda t: np.subtract(*rates(t, pops[g])), -5, 8, xtol=1e-12)
        row = res.table.iloc[g]
        assert row["min_dcf"] == pytest.approx(own, rel=1e-7)
        assert row["threshold_own"] == pytest.approx(town, abs=1e-5)
        assert row["dcf_at_overall"] == pytest.approx(at, rel=1e-7)
        assert row["ratio_overall"] == pytest.approx(at / all_min, rel=1e-6)
        assert row["ratio_own"] == pytest.approx(own / at, rel=1e-6)
        assert row["eer"] == pytest.approx(rates(eer_t, pops[g])[0], abs=1e-9)
        fi += at / all_min if at / all_min > 1 else 0.0
    assert res.fairness_index == pytest.approx(fi, rel=1e-6)


def test_posterior_draws_summaries():
    rng = np.random.default_rng(0)
    D, G = 400, 3
    mn = rng.normal([0.0, 0.4, 0.0], 0.05, (D, G))
    mp = rng.normal([3.0, 3.0, 3.5], 0.05, (D, G))
    sd = np.ones((D, G))
    res = posterior_subgroup_measures(mn, sd, mp, sd, n_neg=[1, 1, 1], n_pos=[1, 1, 1], ci=0.9)
    t = res.table
    # subgroup 1 has shifted negatives: its false alarms dominate -> worse off in every draw
    assert t.loc[1, "p_ratio_overall_gt_1"] == 1.0
    assert t.loc[2, "p_ratio_overall_gt_1"] == 0.0
    r = res.draws["ratio_overall"]
    assert t.loc[0, "ratio_overall"] == pytest.approx(np.median(r[0]), rel=1e-12)
    assert t.loc[0, "ratio_overall_lo"] == pytest.approx(np.quantile(r[0], 0.05), rel=1e-12)
    assert res.fairness_index_ci[0] <= res.fairness_index <= res.fairness_index_ci[1]


class StandInFit:
    """Minimal LmerResult stand-in: score ~ fixed mean + speaker intercept."""

    def __init__(self, fixed, ranef, sigma, sd_speaker, sigma_by=None):
        self._fixed, self._ranef = fixed, ranef
        self.sigma, self.sigma_by = sigma, sigma_by
        self.varcorr = pd.DataFrame({"grp": ["speaker", "Residual"], "var1": ["(Intercept)", None],
                                     "var2": [None, None], "vcov": [sd_speaker ** 2, sigma ** 2],
                                     "sdcor": [sd_speaker, sigma]})
        self.ranef = {"speaker": pd.DataFrame({"(Intercept)": ranef})}
        self.spec = None

    def predict(self, newdata, re_form=None, allow_new_levels=None):
        fx = newdata.apply(lambda r: self._fixed[(r["g"], r["label"])], axis=1).to_numpy()
        re = 0.0 if re_form is not None else self._ranef.reindex(newdata["speaker"]).to_numpy()
        return pd.Series(fx + re, index=newdata.index)


def _standin_case():
    fixed = {("a", "nontarget"): 0.0, ("a", "target"): 3.0, ("b", "nontarget"): 0.5, ("b", "target"): 2.6}
    ranef = pd.Series({"s1": 0.3, "s2": -0.2, "s3": 0.1, "s4": -0.4})
    spk_group = {"s1": "a", "s2": "a", "s3": "b", "s4": "b"}
    rows = []
    for spk, cnt in (("s1", (5, 2)), ("s2", (3, 4)), ("s3", (6, 1)), ("s4", (2, 3))):
        rows += [(spk, spk_group[spk], "nontarget")] * cnt[0] + [(spk, spk_group[spk], "target")] * cnt[1]
    df = pd.DataFrame(rows, columns=["speaker", "g", "label"])
    return StandInFit(fixed, ranef, sigma=0.9, sd_speaker=0.5), df, fixed, ranef


@pytest.mark.parametrize("conditional", [True, False])
def test_model_subgroup_dcf_standin_closed_form(conditional):
    fit, df, fixed, ranef = _standin_case()
    res = model_subgroup_dcf(fit, df, ["g"], conditional=conditional)
    sd = 0.9 if conditional else np.hypot(0.9, 0.5)
    pops = {}
    for g in ("a", "b"):
        sub = df[df["g"] == g]
        comps = {}
        for lab in ("nontarget", "target"):
            c = sub[sub["label"] == lab]
            comps[lab] = [(1.0, fixed[(g, lab)] + (ranef[s] if conditional else 0.0), sd) for s in c["speaker"]]
        pops[g] = (comps["nontarget"], comps["target"])
    overall = (pops["a"][0] + pops["b"][0], pops["a"][1] + pops["b"][1])
    rates, cost, minimise = closed_form(None)
    all_min, tstar = minimise(overall)
    assert res.min_dcf == pytest.approx(all_min, rel=1e-7)
    for k, g in enumerate(("a", "b")):
        at = cost(tstar, pops[g])
        own, _ = minimise(pops[g])
        row = res.table.iloc[k]
        assert row["ratio_overall"] == pytest.approx(at / all_min, rel=1e-6)
        assert row["min_dcf"] == pytest.approx(own, rel=1e-7)
        assert row["n_pos"] == (df[(df["g"] == g)]["label"] == "target").sum()


# ----------------------------------------------------------------------------- real LMM fits
MU = {("a", 0): 0.0, ("a", 1): 3.0, ("b", 0): 0.3, ("b", 1): 2.8, ("c", 0): -0.2, ("c", 1): 3.3,
      ("d", 0): 0.1, ("d", 1): 3.0}
SB, SIG = 0.2, {0: 1.0, 1: 0.8}


def simulate(seed: int, n_spk: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, n_spk, n)
    sg = np.array(list("abcd"))[np.arange(n_spk) % 4][spk]
    y = rng.random(n) < 0.3
    m = np.array([MU[(g, int(k))] for g, k in zip(sg, y)])
    s = m + rng.normal(0, SB, n_spk)[spk] + rng.normal(0, 1, n) * np.where(y, SIG[1], SIG[0])
    return pd.DataFrame({"speaker": [f"s{k}" for k in spk], "subgroup": sg,
                         "label": np.where(y, "target", "nontarget"), "score": s})


def true_ratios(df: pd.DataFrame) -> np.ndarray:
    """Closed form: subgroup g, class y ~ N(MU[g,y], SB² + SIG[y]²) (new speakers); the overall
    population mixes the subgroups with the table's class counts."""
    cnt = df.groupby(["subgroup", "label"]).size()
    pops = {g: ([(1.0, MU[(g, 0)], np.hypot(SB, SIG[0]))], [(1.0, MU[(g, 1)], np.hypot(SB, SIG[1]))])
            for g in "abcd"}
    overall = ([(cnt[(g, "nontarget")], MU[(g, 0)], np.hypot(SB, SIG[0])) for g in "abcd"],
               [(cnt[(g, "target")], MU[(g, 1)], np.hypot(SB, SIG[1])) for g in "abcd"])
    _, cost, minimise = closed_form(None)
    all_min, tstar = minimise(overall)
    return np.array([cost(tstar, pops[g]) / all_min for g in "abcd"])


@pytest.mark.slow
def test_model_based_ratios_converge_to_truth():
    lme = pytest.importorskip("scoremix.lme.api")
    errs = {}
    for n_spk, n in ((40, 4000), (400, 40000)):
        e = []
        for seed in range(2):
            df = simulate(seed, n_spk, n)
            fit = lme.lmer("score ~ label * subgroup + (1 | speaker)", df, dispersion="~ label")
            r = model_subgroup_dcf(fit, df, ["subgroup"], conditional=False)
            e.append(np.max(np.abs(r.table["ratio_overall"].to_numpy() - true_ratios(df))))
        errs[n] = np.mean(e)
    assert errs[40000] < 0.06
    assert errs[40000] < errs[4000]
