"""Location-scale transformation mixed models (scoremix.locscale): likelihood against closed forms,
brute-force quadrature and glmmTMB; estimation against simulated truth; score_model; validate_model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

import scoremix as sm
from scoremix.locscale import LocScaleError, LocScaleSpec, fit_locscale
from scoremix.locscale.fit import LocScaleData, _maximise, _start, _stats
from scoremix.locscale.latent import truncated_moments
from scoremix.locscale.likelihood import CellStats, Params, UnitLikelihood
from scoremix.locscale.select import score_model
from scoremix.validation import rocch_eer, split_cells, validate_model

from locscale_helpers import simulate_ls

DATA = Path(__file__).resolve().parent / "data" / "locscale"


def _raw_stats(d: pd.DataFrame) -> tuple[CellStats, LocScaleData]:
    """Cell statistics of the raw scores (z = score, no transform)."""
    data = LocScaleData(d, LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide",
                                        strata=("attack",)))
    z = d["score"].to_numpy(float)
    st, *_ = _stats(data, z, z * z, np.ones(z.size, bool))
    return st, data


def _unit_obs(d: pd.DataFrame, data: LocScaleData, unit_id: int) -> tuple[np.ndarray, np.ndarray]:
    m = data.unit == unit_id
    return d["score"].to_numpy(float)[m], data.cells.stratum[m]


def test_truncated_moments_against_scipy():
    rng = np.random.default_rng(1)
    lo = rng.normal(0, 3, 50)
    hi = lo + rng.exponential(1.0, 50)
    lo[:5], hi[5:10] = -np.inf, np.inf
    m, s = rng.normal(0, 1, 50), rng.uniform(0.3, 2, 50)
    e1, e2 = truncated_moments(lo, hi, m, s)
    for k in range(50):
        a, b = (lo[k] - m[k]) / s[k], (hi[k] - m[k]) / s[k]
        mean, var = stats.truncnorm.stats(a, b, loc=m[k], scale=s[k], moments="mv")
        assert e1[k] == pytest.approx(float(mean), rel=1e-7, abs=1e-9)
        assert e2[k] == pytest.approx(float(var) + float(mean) ** 2, rel=1e-6, abs=1e-9)


def test_location_model_equals_multivariate_normal():
    """Without a scale effect a unit's marginal likelihood is the multivariate normal with
    covariance σ_s² I + τ_b² J + ω² (same-stratum blocks): closed form."""
    d = simulate_ls(n_speakers=6, n_per_cell=7, strata_neg=2, omega=0.3, seed=5)
    st, data = _raw_stats(d)
    lik = UnitLikelihood(st, scale=[False, False], corr=[False, False], omega=[True, False])
    p = Params(mu=np.array([2.9, -1.1, -1.4]), lam=np.log([1.1, 0.8, 0.9]), log_tb=np.log([0.5, 0.7]),
               log_tg=np.full(2, -30.0), z_rho=np.zeros(2), log_om=np.log([0.35, 1e-9]), log_nu=np.full(2, 20.0))
    ll = lik.unit_loglik(p)
    unit_ids = np.unique(data.unit)
    for k, uid in enumerate(unit_ids):
        z, s = _unit_obs(d, data, uid)
        c = uid % 2
        cov = np.diag(np.exp(2 * p.lam[s])) + np.exp(2 * p.log_tb[c])
        if c == 0:
            cov += np.exp(2 * p.log_om[0]) * (s[:, None] == s[None, :])
        ref = stats.multivariate_normal(mean=p.mu[s], cov=cov).logpdf(z)
        assert ll[k] == pytest.approx(ref, abs=1e-8)


@pytest.mark.parametrize("corr", [False, True])
def test_scale_model_against_bruteforce_quadrature(corr):
    """With speaker log-SD effects (optionally correlated with the location), adaptive
    Gauss-Hermite over g with b integrated in closed form equals a brute-force 2-D integral
    of the per-observation densities; Laplace (one node) is close."""
    d = simulate_ls(n_speakers=1, n_per_cell=5, strata_neg=2, seed=11)
    st, data = _raw_stats(d)
    rho = 0.5 if corr else 0.0
    p = Params(mu=np.array([3.0, -1.0, -1.5]), lam=np.log([1.0, 0.8, 1.0]), log_tb=np.log([0.6, 0.5]),
               log_tg=np.log([0.3, 0.4]), z_rho=np.full(2, np.arctanh(rho)), log_om=np.full(2, -30.0),
               log_nu=np.full(2, 20.0))
    out = {}
    for q in (1, 25):
        lik = UnitLikelihood(st, scale=[True, True], corr=[corr, corr], omega=[False, False], n_nodes=q)
        lik.recentre(p)
        out[q] = lik.unit_loglik(p)
    unit_ids = np.unique(data.unit)
    for k, uid in enumerate(unit_ids[:2]):
        z, s = _unit_obs(d, data, uid)
        c = uid % 2
        tb, tg = np.exp(p.log_tb[c]), np.exp(p.log_tg[c])
        cov = np.array([[tb ** 2, rho * tb * tg], [rho * tb * tg, tg ** 2]])

        b = np.linspace(-5, 5, 1001)[:, None]
        g = np.linspace(-2.5, 2.5, 601)[None, :]
        logf = np.zeros((b.size, g.size))
        for zj, sj in zip(z, s):
            sd = np.exp(p.lam[sj] + g)
            logf = logf + stats.norm.logpdf(zj, p.mu[sj] + b, sd)
        det = cov[0, 0] * cov[1, 1] - cov[0, 1] ** 2
        q = (cov[1, 1] * b ** 2 - 2 * cov[0, 1] * b * g + cov[0, 0] * g ** 2) / det
        logf = logf - 0.5 * q - np.log(2 * np.pi) - 0.5 * np.log(det)
        val = integrate.trapezoid(integrate.trapezoid(np.exp(logf - out[25][k]), g[0], axis=1), b[:, 0])
        assert out[25][k] + np.log(val) == pytest.approx(out[25][k], abs=1e-6)
        assert out[1][k] == pytest.approx(out[25][k], abs=0.05)


def test_loglik_matches_glmmtmb_reference():
    """Location models with fixed per-stratum dispersion (glmmTMB 1.1.5 cannot put random
    effects in dispformula): maximum log-likelihood and SDs agree with glmmTMB."""
    ref = json.loads((DATA / "glmmtmb_ref.json").read_text())
    d = pd.read_csv(DATA / "glmmtmb_input.csv")
    st, _ = _raw_stats(d)
    for key, omega in (("location", [False, False]), ("omega", [True, False])):
        lik = UnitLikelihood(st, scale=[False, False], corr=[False, False], omega=omega)
        x, ll = _maximise(lik, _start(st, lik), tol=1e-12)
        assert ll == pytest.approx(ref[f"loglik_{key}"], abs=2e-4)
        p = lik.unpack(x)
        # glmmTMB's diag(0 + pos + neg | speaker): SDs in the order (pos, neg)
        np.testing.assert_allclose(np.exp(p.log_tb[[1, 0]]), ref[f"sd_{key}"]["speaker"], rtol=2e-3)
    lik0 = UnitLikelihood(st, scale=[False, False], corr=[False, False], omega=[False, False])
    x0, _ = _maximise(lik0, _start(st, lik0), tol=1e-12)
    # glmmTMB's Gaussian dispersion parameters are σ² in R's level order ("-:A0", "-:A1", "+")
    np.testing.assert_allclose(np.exp(2 * lik0.unpack(x0).lam)[[1, 2, 0]], ref["sigma_location"], rtol=2e-3)


@pytest.mark.r
def test_loglik_matches_glmmtmb_live(rscript, tmp_path):
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "ref.json"
    subprocess.run([rscript, str(root / "r_scripts" / "locscale_glmmtmb.R"), str(DATA / "glmmtmb_input.csv"),
                    str(out)], check=True, capture_output=True, timeout=300)
    live, stored = json.loads(out.read_text()), json.loads((DATA / "glmmtmb_ref.json").read_text())
    assert live["loglik_location"] == pytest.approx(stored["loglik_location"], abs=1e-5)
    assert live["loglik_omega"] == pytest.approx(stored["loglik_omega"], abs=1e-5)


def test_recovers_simulated_speaker_spread():
    """Simulation with known truth: the speaker log-SD spread τ_g (scale free, so identified
    on the transformed scale) and the ratio of location spreads τ_b,+ / τ_b,- are recovered."""
    d = simulate_ls(n_speakers=60, n_per_cell=40, strata_neg=2, tau_b=(0.5, 0.5), tau_g=(0.35, 0.35), seed=2)
    fit = fit_locscale(d, LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide",
                                       strata=("attack",)), n_nodes=9)
    tg = np.exp(fit.params.log_tg)
    np.testing.assert_allclose(tg, [0.35, 0.35], rtol=0.3)
    tb_rel = np.exp(fit.params.log_tb) / np.exp(fit.params.lam[[1, 0]])   # per class: τ_b / σ of a stratum
    assert tb_rel[1] == pytest.approx(0.5, rel=0.3)
    # posterior log-SD effects track the simulated ones' ordering
    assert fit.ranef["speaker"]["g_pos"].std() > 0.15


def test_in_sample_strata_reproduce_counts_and_predictive_hook():
    """Marginal matching: per stratum, the model's rates at the fitted scores equal the
    empirical ones; sm.model_eer accepts the fit (overall and by speaker)."""
    d = simulate_ls(n_speakers=15, n_per_cell=20, strata_neg=2, seed=4)
    d["score"] = np.round(d["score"], 1)            # ties
    d.loc[d["attack"] == "A1", "score"] = -9.0      # a saturated stratum: a point mass
    fit = fit_locscale(d, LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide",
                                       strata=("attack",)), n_nodes=7)
    from scoremix.predictive import predictive
    pred = predictive(fit, label="label", positive="bonafide")
    y = pred.y == 1
    for att in ("bonafide", "A0", "A1"):
        m = (d["attack"] == att).to_numpy()
        tau = np.unique(d.loc[m, "score"])
        mask = m | (y if att != "bonafide" else np.zeros_like(m))
        fnr, fpr = pred.rates_at(tau, mask=mask)
        s = d.loc[m, "score"].to_numpy()
        emp = np.array([(s < t).mean() for t in tau]) if att == "bonafide" else np.array([(s >= t).mean() for t in tau])
        np.testing.assert_allclose(fnr[0] if att == "bonafide" else fpr[0], emp, atol=2e-4)
    e = sm.model_eer(fit, label="label", positive="bonafide")
    assert 0 <= e < 0.5
    tab = sm.model_eer(fit, by="speaker", label="label", positive="bonafide", n_boot=0, progress=False)
    assert len(tab) == 15 and tab["eer_model"].between(0, 0.5).all()


def test_model_subgroup_dcf_accepts_fit_and_reproduces_min_dcf_in_sample():
    """The fit goes through the predictive layer into model_subgroup_dcf; every stratum is
    reproduced at the fitted scores, so the overall model minimum DCF is the empirical one."""
    d = simulate_ls(n_speakers=12, n_per_cell=20, strata_neg=2, seed=4)
    d["gender"] = np.where(d["speaker"].str[-1].astype(int) % 2 == 0, "f", "m")
    fit = fit_locscale(d, LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide",
                                       strata=("attack",)), n_nodes=7)
    r = sm.model_subgroup_dcf(fit, d, ["gender"], label="label", positive="bonafide", n_boot=20, min_speakers=2)
    emp = sm.min_dcf(d["score"], (d["label"] == "bonafide").to_numpy(), p_target=0.05).value
    assert r.overall["min_dcf"] == pytest.approx(emp, abs=1e-9)
    assert set(r.table["gender"]) == {"f", "m"}


def test_rocch_eer_equals_metrics_eer():
    rng = np.random.default_rng(0)
    s = np.round(rng.normal(0, 1, 300), 1)
    y = (rng.random(300) < 0.4).astype(int)
    s[y == 1] += 1.0
    tau = np.unique(s)
    fnr = np.array([np.mean(s[y == 1] < t) for t in tau])
    fpr = np.array([np.mean(s[y == 0] >= t) for t in tau])
    assert rocch_eer(np.r_[fnr, 1.0], np.r_[fpr, 0.0]) == pytest.approx(sm.eer(s, y), abs=1e-9)


def test_split_cells_shares():
    d = simulate_ls(n_speakers=5, n_per_cell=10, strata_neg=2, seed=0)
    m = split_cells(d, 0.2, ["speaker", "label", "attack"], seed=1)
    per = pd.Series(m).groupby([d["speaker"], d["label"], d["attack"]]).sum()
    assert (per == 2).all()
    assert not (m == split_cells(d, 0.2, ["speaker", "label", "attack"], seed=2)).all()


def test_score_model_selects_scale_effects_and_validates():
    d = simulate_ls(n_speakers=24, n_per_cell=20, strata_neg=2, tau_g=(0.5, 0.5), seed=7)
    fit = score_model(d, score="score", label="label", speaker="speaker", factors=["attack"], positive="bonafide",
                      n_nodes=7, n_pass=2)
    sel = fit.selection
    assert sel.chosen.speaker_scale, sel.table
    tab = sel.table
    assert tab.loc["location", "cv_loglik"] < tab.loc["location+scale", "cv_loglik"]
    assert tab["chosen"].sum() == 1 and len(sel.fitted_freely) == 3
    assert LocScaleSpec.from_dict(sel.chosen.to_dict()) == sel.chosen


def test_validate_model_table():
    d = simulate_ls(n_speakers=20, n_per_cell=30, strata_neg=2, tau_g=(0.5, 0.5), seed=8)
    r = validate_model(d, score="score", label="label", speaker="speaker", factors=["attack"], positive="bonafide",
                       share=0.3, seed=0, candidates=[LocScaleSpec(score="score", label="label", speaker="speaker",
                                                                   positive="bonafide", strata=("attack",),
                                                                   name="ls")], n_pass=1, n_nodes=7)
    s = r.summary.loc["speaker"]
    assert s.loc["eer", "n_groups"] == 20
    g = r.groups
    mae = np.abs(g["eer_model"] - g["eer_heldout"]).mean()
    assert s.loc["eer", "mae_model"] == pytest.approx(mae, rel=1e-12)
    assert s.loc["eer", "ratio_model"] == pytest.approx(mae / s.loc["eer", "mae_count"], rel=1e-12)
    assert s.loc["eer", "mae_shrunk"] <= s.loc["eer", "mae_count"] + 1e-15


def test_bad_input_errors():
    d = simulate_ls(n_speakers=3, n_per_cell=5, strata_neg=1, seed=0)
    spec = LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide", strata=("attack",))
    with pytest.raises(LocScaleError, match="'session'"):
        fit_locscale(d, spec.with_(strata=("session",)))
    with pytest.raises(LocScaleError, match="class column 'label'"):
        fit_locscale(d[d["label"] == "spoof"], spec)
    bad = d.astype({"score": object})
    bad.loc[3, "score"] = "x"
    with pytest.raises(LocScaleError, match="row 3"):
        fit_locscale(bad, spec)


def test_validate_model_whole_speaker_split():
    """split='speakers': groups are subgroups, the held-out value is the empirical EER of the
    held-out speakers' trials (recomputed here from the same seeded speaker draw)."""
    d = simulate_ls(n_speakers=20, n_per_cell=20, strata_neg=2, seed=8)
    d["gender"] = np.where(d["speaker"].str[-1].astype(int) % 2 == 0, "f", "m")
    spec = LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide", strata=("attack",),
                        name="ls")
    r = validate_model(d, score="score", label="label", speaker="speaker", factors=["attack"], positive="bonafide",
                       share=0.5, split="speakers", by=["gender"], seed=0, candidates=[spec], n_pass=1, n_nodes=7,
                       also_by=[dict(by="gender", negative_by="attack")])
    spk = np.unique(d["speaker"].astype(str))
    fitted = set(np.random.default_rng(0).choice(spk, size=10, replace=False))
    B = d[~d["speaker"].isin(fitted)]
    g = r.groups[r.groups["cells"] == "gender"]
    for sex in ("f", "m"):
        b = B[B["gender"] == sex]
        assert g.loc[sex, "eer_heldout"] == pytest.approx(sm.eer(b["score"], (b["label"] == "bonafide").to_numpy()),
                                                          abs=1e-12)
    assert r.summary.loc[("gender × attack", "eer"), "n_groups"] == 4
