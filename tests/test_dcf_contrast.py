"""Model-based DCF contrasts (female − male): point estimates equal the closed form of the
fitted Gaussian model, the parametric-bootstrap interval covers the simulation's truth, and
posterior contrasts equal the per-draw closed form."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import scoremix as sm
from scoremix.emm import EmmError
from scoremix.emm.dcf_contrast import dcf_contrast

P = 0.05
A, B = P, 1 - P          # cost weights (unnormalised)


def min_cost(mu_pos, mu_neg, s):
    """Closed form: equal variances, t* = (μp+μn)/2 + s² log(b/a)/(μp−μn)."""
    t = (mu_pos + mu_neg) / 2 + s ** 2 * np.log(B / A) / (mu_pos - mu_neg)
    return A * stats.norm.cdf((t - mu_pos) / s) + B * stats.norm.cdf((mu_neg - t) / s)


def cost_at(tau, mu_pos, mu_neg, s):
    return A * stats.norm.cdf((tau - mu_pos) / s) + B * stats.norm.cdf((mu_neg - tau) / s)


@pytest.fixture(scope="module")
def gender_data():
    rng = np.random.default_rng(7)
    rows = []
    for i in range(40):
        g = "female" if i % 2 == 0 else "male"
        u = rng.normal(0, 0.4)
        for lab in ("bonafide", "spoof"):
            mu = (2.5 if lab == "bonafide" else 0.0) + (0.8 if (lab == "bonafide" and g == "male") else 0.0)
            rows.append(pd.DataFrame({"speaker": f"s{i}", "gender": g, "label": lab,
                                      "score": mu + u + rng.normal(0, 1, 15)}))
    return pd.concat(rows, ignore_index=True)


@pytest.fixture(scope="module")
def gender_fit(gender_data):
    return sm.lmer("score ~ label * gender + (1 | speaker)", gender_data)


def _fitted_cells(m):
    b = m.fixef
    s = np.sqrt(m.sigma ** 2 + m.cov_re()[0][0, 0])
    # reference level: bonafide (positive); labelspoof shifts the negatives
    pos_f, neg_f = b["(Intercept)"], b["(Intercept)"] + b["labelspoof"]
    pos_m = b["(Intercept)"] + b["gendermale"]
    neg_m = pos_m + b["labelspoof"] + b["labelspoof:gendermale"]
    return (pos_f, neg_f), (pos_m, neg_m), s


def test_min_dcf_point_closed_form_and_interval_covers_truth(gender_fit):
    m = gender_fit
    r = dcf_contrast(m, "gender", measure="min_dcf", p_target=P, n_boot=40, seed=3, label="label",
                     positive="bonafide", thresholds="latent")
    (pf, nf), (pm, nm), s = _fitted_cells(m)
    assert r["dcf_a"].iloc[0] == pytest.approx(min_cost(pf, nf, s), abs=1e-8)
    assert r["dcf_b"].iloc[0] == pytest.approx(min_cost(pm, nm, s), abs=1e-8)
    truth = min_cost(2.5, 0.0, np.sqrt(1.16)) - min_cost(3.3, 0.0, np.sqrt(1.16))
    assert r["lower"].iloc[0] < truth < r["upper"].iloc[0]
    assert r["n_rep"].iloc[0] == 40 and r["interval"].iloc[0] == "parametric"
    # normalisation divides every cost by min(a, b)
    rn = dcf_contrast(m, "gender", p_target=P, n_boot=2, seed=3, label="label", positive="bonafide",
                      thresholds="latent", normalize=True)
    assert rn["estimate"].iloc[0] == pytest.approx(r["estimate"].iloc[0] / A, rel=1e-8)


def test_act_dcf_closed_form(gender_fit):
    m = gender_fit
    tau = np.log(B / A)
    r = dcf_contrast(m, "gender", measure="act_dcf", p_target=P, n_boot=5, seed=1, label="label",
                     positive="bonafide")
    (pf, nf), (pm, nm), s = _fitted_cells(m)
    assert r["dcf_a"].iloc[0] == pytest.approx(cost_at(tau, pf, nf, s), abs=1e-10)
    assert r["estimate"].iloc[0] == pytest.approx(cost_at(tau, pf, nf, s) - cost_at(tau, pm, nm, s), abs=1e-10)
    r2 = dcf_contrast(m, "gender", measure="act_dcf", threshold=1.0, p_target=P, n_boot=2, label="label",
                      positive="bonafide")
    assert r2["dcf_b"].iloc[0] == pytest.approx(cost_at(1.0, pm, nm, s), abs=1e-10)


def test_attainable_min_dcf_is_min_over_observed_scores(gender_fit, gender_data):
    """``thresholds="attainable"``: the minimum of the closed-form cost over the cell's own
    observed scores and reject-all."""
    m = gender_fit
    r = dcf_contrast(m, "gender", p_target=P, n_boot=2, seed=1, label="label", positive="bonafide")
    (pf, nf), _, s = _fitted_cells(m)
    sc = np.unique(gender_data.loc[gender_data["gender"] == "female", "score"])
    want = min(np.min(cost_at(sc, pf, nf, s)), A)
    assert r["dcf_a"].iloc[0] == pytest.approx(want, abs=1e-10)
    assert r["dcf_a"].iloc[0] >= min_cost(pf, nf, s) - 1e-12


def test_by_groups_and_errors(gender_fit, gender_data):
    d = gender_data.assign(cond=np.where(gender_data.index % 2 == 0, "clean", "mp3"))
    r = dcf_contrast(gender_fit, "gender", by="cond", data=d, p_target=P, n_boot=2, label="label",
                     positive="bonafide", thresholds="latent")
    assert list(r["cond"]) == ["clean", "mp3"] and list(r["contrast"]) == ["female - male"] * 2
    with pytest.raises(EmmError, match="nonbinary"):
        dcf_contrast(gender_fit, "gender", pairs=[("female", "nonbinary")], n_boot=2, label="label",
                     positive="bonafide")
    with pytest.raises(EmmError, match="measure"):
        dcf_contrast(gender_fit, "gender", measure="cllr", n_boot=2, label="label", positive="bonafide")
    with pytest.raises(EmmError, match="p_target"):
        dcf_contrast(gender_fit, "gender", p_target=1.5, n_boot=2, label="label", positive="bonafide")


# ----------------------------------------------------------------------------- posterior draws
SHIFT = (0.0, 0.3, -0.2, 0.1)
MU = {("f", 1): 2.5, ("f", 0): 0.0, ("m", 1): 3.2, ("m", 0): 0.1}


class StandInPosterior:
    """Four known draws: a trial of gender g and class c ~ N(MU[g, c] + c·SHIFT[d], 1)."""

    idata = None

    def class_moments(self, groups, data, label, positive, random, max_draws):
        y = (data[label] == positive).astype(int).to_numpy()
        rows = []
        for d, sh in enumerate(SHIFT):
            f = pd.DataFrame({**{k: data[k].to_numpy() for k in groups}, "class": y})
            for key, sub in f.groupby(list(groups) + ["class"]):
                g = data.loc[sub.index, "g"].iloc[0]
                rows.append((*key, d, MU[(g, key[-1])] + key[-1] * sh, 1.0, len(sub)))
        return pd.DataFrame(rows, columns=list(groups) + ["class", "draw", "mean", "sd", "n"])


def test_posterior_contrast_is_per_draw_closed_form():
    trials = pd.DataFrame({"g": ["f"] * 20 + ["m"] * 20, "label": (["t"] * 5 + ["n"] * 15) * 2})
    r = dcf_contrast(StandInPosterior(), "g", trials=trials, label="label", positive="t", p_target=P,
                     thresholds="latent", conditional=True)
    per_draw = np.array([min_cost(MU[("f", 1)] + sh, 0.0, 1.0) - min_cost(MU[("m", 1)] + sh, 0.1, 1.0)
                         for sh in SHIFT])
    assert r["interval"].iloc[0] == "posterior" and r["n_rep"].iloc[0] == 4
    assert r["estimate"].iloc[0] == pytest.approx(np.median(per_draw), abs=1e-8)
    assert r["SE"].iloc[0] == pytest.approx(per_draw.std(ddof=1), abs=1e-8)
    assert r["lower"].iloc[0] == pytest.approx(np.quantile(per_draw, 0.025), abs=1e-8)


def test_posterior_eer_contrast_is_per_draw_closed_form():
    """``eer_contrast`` on a posterior fit: per draw Φ(−Δ/2) (unit variances) differenced."""
    from scoremix.emm.eer_contrast import eer_contrast
    trials = pd.DataFrame({"g": ["f"] * 20 + ["m"] * 20, "label": (["t"] * 5 + ["n"] * 15) * 2})
    r = eer_contrast(StandInPosterior(), "g", trials=trials, label="label", positive="t",
                     thresholds="latent", conditional=True)
    per_draw = np.array([stats.norm.cdf(-(MU[("f", 1)] + sh) / 2) - stats.norm.cdf(-(MU[("m", 1)] + sh - 0.1) / 2)
                         for sh in SHIFT])
    assert r["interval"].iloc[0] == "posterior" and r["n_rep"].iloc[0] == 4
    assert r["estimate"].iloc[0] == pytest.approx(np.median(per_draw), abs=1e-8)
    assert r["upper"].iloc[0] == pytest.approx(np.quantile(per_draw, 0.975), abs=1e-8)
