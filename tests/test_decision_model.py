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
