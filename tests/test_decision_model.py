"""``decision_model``: binomial GLMM of misses and false alarms at a threshold.

Checks: the empirical columns equal direct counting; ``threshold="min_dcf"`` is SVEva's
``τ*``; on a simulated table with known per-subgroup rates the model rates recover them;
on ASVspoof 2019 LA (gender subgroups, SVEva threshold) the model values lie inside the
empirical 95 % intervals in at least 90 % of the cells (issue 20's acceptance).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import special

import scoremix as sm
from scoremix.fairness.decision_model import MEASURES, decision_model


def simulated(seed: int = 3, n_spk: int = 40, per: int = 60) -> tuple[pd.DataFrame, dict]:
    """Scores whose error indicators at τ = 0 follow a logit-normal speaker model with
    known subgroup means."""
    rng = np.random.default_rng(seed)
    truth = {("f", "pos"): -1.5, ("m", "pos"): -1.0, ("f", "neg"): -2.5, ("m", "neg"): -2.0}
    rows = []
    for k in range(n_spk):
        g = "f" if k % 2 == 0 else "m"
        bpos, bneg = rng.normal(0, 0.5, 2)
        for cls, b in (("pos", bpos), ("neg", bneg)):
            p = special.expit(truth[(g, cls)] + b)
            err = rng.random(per) < p
            # an error is a miss (pos scored below 0) or a false alarm (neg scored >= 0)
            score = np.where(err, -1.0, 1.0) if cls == "pos" else np.where(err, 1.0, -1.0)
            score = score * rng.uniform(0.5, 2.0, per)
            rows.append(pd.DataFrame({"score": score, "label": "target" if cls == "pos" else "nontarget",
                                      "speaker": f"s{k:02d}", "gender": g}))
    return pd.concat(rows, ignore_index=True), truth


def test_empirical_columns_are_counts_and_model_recovers_truth():
    t, truth = simulated()
    r = decision_model(t, 0.0, ["gender"], n_sim=200, n_boot=200, seed=1)
    y = t["label"] == "target"
    for g in ("f", "m"):
        sub = t[t.gender == g]
        yy = sub["label"] == "target"
        fnr = np.mean(sub.score[yy] < 0)
        fpr = np.mean(sub.score[~yy] >= 0)
        assert r.table.loc[g, "fnr_emp"] == pytest.approx(fnr, abs=1e-12)
        assert r.table.loc[g, "fpr_emp"] == pytest.approx(fpr, abs=1e-12)
        dcf_all = 0.05 * np.mean(t.score[y] < 0) + 0.95 * np.mean(t.score[~y] >= 0)
        assert r.table.loc[g, "ratio_overall_emp"] == pytest.approx((0.05 * fnr + 0.95 * fpr) / dcf_all)
    # the model's marginal rates against the true marginal rates (σ = 0.5 on the logit scale)
    z = np.random.default_rng(0).normal(0, 0.5, 200_000)
    for g in ("f", "m"):
        for cls, col in (("pos", "fnr_model"), ("neg", "fpr_model")):
            true_rate = special.expit(truth[(g, cls)] + z).mean()
            lo, hi = r.table.loc[g, col + "_lo"], r.table.loc[g, col + "_hi"]
            assert lo < r.table.loc[g, col] < hi
            assert abs(r.table.loc[g, col] - true_rate) < 0.05
    assert set(r.inside().columns) == set(MEASURES)


def test_min_dcf_threshold_is_sveva_tau_star():
    t, _ = simulated(seed=5, n_spk=20, per=30)
    r = decision_model(t, "min_dcf", ["gender"], n_sim=50, n_boot=50)
    s = sm.subgroup_dcf(t, ["gender"], n_boot=0, progress=False)
    assert r.threshold == s.threshold


def test_bad_columns_are_named():
    t, _ = simulated(n_spk=6, per=10)
    with pytest.raises(sm.SubgroupError, match="'age'"):
        decision_model(t, 0.0, ["age"])
    with pytest.raises(sm.SubgroupError, match="at least one"):
        decision_model(t, 0.0, [])


@pytest.mark.slow
@pytest.mark.shared_data
def test_la_gender_model_inside_empirical_intervals(shared_data):
    path = shared_data / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
    d = pd.read_csv(path)
    inside = []
    for system in ("rawnet2_transferfiles",):   # all 10 systems: docs/glmm.md (119/120 cells)
        t = d[d.system == system]
        r = decision_model(t, "min_dcf", ["speaker_gender"], positive="bonafide", factors=["attack"],
                           n_sim=300, n_boot=300, seed=1)
        inside.append(r.inside().to_numpy().ravel())
    share = np.concatenate(inside).mean()
    assert share >= 0.9, share


def test_logit_normal_mean_equals_adaptive_quadrature():
    """The trapezoidal marginal rate against scipy's adaptive quadrature, to 1e-8 relative,
    over rare to common rates and speaker SDs up to 4 (and σ = 0 is the plain inverse
    logit)."""
    from scipy import integrate, stats

    from scoremix.fairness.decision_model import logit_normal_mean

    etas = np.linspace(-14.0, 6.0, 6)
    sds = np.array([0.0, 0.3, 1.0, 2.0, 4.0])
    got = logit_normal_mean(etas[:, None], sds[None, :])
    for i, eta in enumerate(etas):
        for j, sd in enumerate(sds):
            ref = integrate.quad(lambda z: special.expit(eta + sd * z) * stats.norm.pdf(z),
                                 -np.inf, np.inf, epsabs=1e-15, epsrel=1e-13, limit=200)[0]
            assert got[i, j] == pytest.approx(ref, rel=1e-8)
    assert logit_normal_mean(np.array([-3.0]), np.array([0.0]))[0] == pytest.approx(special.expit(-3.0), rel=1e-12)


def test_observed_speaker_rates_recover_finite_population_truth():
    """``speakers="observed"``: the rate of the table's own speakers.  Truth: the
    trial-weighted mean of each simulated speaker's true error probability.  The model
    interval covers it, and the point is within 0.03 of it; ``point="mode"`` is the
    plug-in at the conditional modes (the default), at most the posterior mean for these
    rare rates."""
    rng = np.random.default_rng(11)
    means = {("f", "pos"): -2.0, ("m", "pos"): -1.2, ("f", "neg"): -3.0, ("m", "neg"): -2.2}
    rows, truth_num, truth_den = [], {}, {}
    for k in range(30):
        g = "f" if k % 2 == 0 else "m"
        for cls, b in zip(("pos", "neg"), rng.normal(0, 0.8, 2)):
            per = int(rng.integers(40, 120))
            p = special.expit(means[(g, cls)] + b)
            truth_num[(g, cls)] = truth_num.get((g, cls), 0.0) + per * p
            truth_den[(g, cls)] = truth_den.get((g, cls), 0) + per
            err = rng.random(per) < p
            score = np.where(err, -1.0, 1.0) if cls == "pos" else np.where(err, 1.0, -1.0)
            rows.append(pd.DataFrame({"score": score, "label": "target" if cls == "pos" else "nontarget",
                                      "speaker": f"s{k:02d}", "gender": g}))
    t = pd.concat(rows, ignore_index=True)
    r = decision_model(t, 0.0, ["gender"], n_sim=400, n_boot=10, seed=2, speakers="observed",
                       point="mean")
    r_mode = decision_model(t, 0.0, ["gender"], n_sim=10, n_boot=10, seed=2, speakers="observed",
                            point="mode")
    for g in ("f", "m"):
        for cls, col in (("pos", "fnr_model"), ("neg", "fpr_model")):
            true_rate = truth_num[(g, cls)] / truth_den[(g, cls)]
            assert r.table.loc[g, col + "_lo"] < true_rate < r.table.loc[g, col + "_hi"]
            assert abs(r.table.loc[g, col] - true_rate) < 0.03
            assert r_mode.table.loc[g, col] <= r.table.loc[g, col] + 1e-12
            assert abs(r_mode.table.loc[g, col] - true_rate) < 0.03
    with pytest.raises(ValueError, match="speakers"):
        decision_model(t, 0.0, ["gender"], speakers="all")
    with pytest.raises(ValueError, match="point"):
        decision_model(t, 0.0, ["gender"], point="median")


def test_pooled_subgroup_means_recover_truth():
    """``pool_groups=True``: class means plus a random class × subgroup effect; on the
    logit-normal simulation the new-speaker rates are within 0.05 of the true marginal
    rates (as the free-mean model's are)."""
    t, truth = simulated()
    r = decision_model(t, 0.0, ["gender"], n_sim=100, n_boot=10, seed=1, pool_groups=True)
    assert "(1 | cell)" in r.settings["formula"]
    z = np.random.default_rng(0).normal(0, 0.5, 200_000)
    for g in ("f", "m"):
        for cls, col in (("pos", "fnr_model"), ("neg", "fpr_model")):
            assert abs(r.table.loc[g, col] - special.expit(truth[(g, cls)] + z).mean()) < 0.05
