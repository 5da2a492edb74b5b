"""``bayes_locscale`` against an independent sampler on the same model and priors (issue 25).

Three model classes, each on one seeded simulated data set:

* ``ls_gauss`` — location-scale Gaussian (``LocScaleSpec(transform=False)``): one stratum per
  class, speaker location and log-SD per class, correlated in the positive class;
* ``ls_transform`` — location-scale transformation: the same latent model observed through
  ``score = expit(z / 2)`` (monotone, untied), one transform per class fixed at its ML
  estimate (``fit_locscale``);
* ``stratified`` — stratified transformation: a stratum (own transform, μ_s, σ_s) per class ×
  attack (bona fide + 2 attacks), speaker location/log-SD per class (correlated in the
  positive class), speaker × attack location ω in the negative class, transforms fixed.

scoremix samples μ, log σ, τ, ρ, ω and the log-SD effects ``g`` on per-cell sufficient
statistics with the location effects ``b``, ``u`` integrated out (and, for a transform, every
trial entering through the first two moments of its latent cell; see
``docs/bayes-locscale.md``).  The reference is **plain PyMC on the full trial likelihood**:
``b``, ``g``, ``u`` explicit per speaker / cell (non-centred), the same priors
(``default_locscale_priors`` of the same cells), and per trial

* Gaussian: ``pm.Normal(μ_s + b + u, σ_s e^g, observed=score)``;
* transformation: the exact probability of the trial's latent cell under the **same fixed
  transform** (the ML edges ``α``), ``log{Φ((α_k − m)/s) − Φ((α_{k−1} − m)/s)}``, computed on
  the upper tail above 0 (open end cells at ±1e4 latent units).

Reported per parameter: both posterior means and SDs, ``z = Δmean / √(mcse₁² + mcse₂²)`` and
the SD ratio with ``z_sd = Δsd / √(mcse_sd₁² + mcse_sd₂²)`` (MCSE of the SD by the delta method).  Where the two models are the same (Gaussian) |z| < 3 is expected; for the
transformation classes the reference is the exact interval likelihood while scoremix uses cell
moments, so a difference beyond MC error would measure that approximation.

Run: ``OPENBLAS_NUM_THREADS=1 nice -n 5 python3 benchmarks/bayes_locscale_agreement.py
[--classes ls_gauss ls_transform stratified] [--draws 1000 --tune 1000 --chains 4]``.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd

from scoremix.locscale import LocScaleSpec, fit_locscale

CLASS_NAMES = ("ls_gauss", "ls_transform", "stratified")


def simulate(n_speakers: int = 12, n_per_cell: int = 15, strata_neg: int = 1, omega: float = 0.0,
             transform: bool = False, seed: int = 0, rho_pos: float = 0.5) -> pd.DataFrame:
    """Trials of speaker ``i``, class ``c``, stratum ``s``:
    ``z = μ_s + b_ic + u_is + σ_s e^{g_ic} ε`` with ``(b, g)`` correlated (ρ = 0.5) in the positive
    class (``rho_pos``); ``score = z`` or ``expit(z / 2)`` (``transform``)."""
    rng = np.random.default_rng(seed)
    mu = {"bonafide": 2.0, **{f"A{k}": -1.0 - 0.6 * k for k in range(strata_neg)}}
    sd = {"bonafide": 0.8, **{f"A{k}": 0.7 + 0.3 * k for k in range(strata_neg)}}
    tau_b, tau_g, rho = (0.5, 0.6), (0.3, 0.35), (0.0, rho_pos)
    rows = []
    for i in range(n_speakers):
        for c, lab, strata in ((1, "bonafide", ["bonafide"]), (0, "spoof", [f"A{k}" for k in range(strata_neg)])):
            e1, e2 = rng.standard_normal(2)
            g = tau_g[c] * e1
            b = tau_b[c] * (rho[c] * e1 + np.sqrt(1 - rho[c] ** 2) * e2)
            for s in strata:
                u = rng.normal(0, omega) if (c == 0 and omega > 0) else 0.0
                z = mu[s] + b + u + sd[s] * np.exp(g) * rng.standard_normal(n_per_cell)
                score = 1.0 / (1.0 + np.exp(-z / 2.0)) if transform else z
                rows.append(pd.DataFrame({"speaker": f"s{i:02d}", "label": lab, "attack": s, "score": score}))
    return pd.concat(rows, ignore_index=True)


def case(name: str, seed: int = 1, small: bool = False) -> tuple[pd.DataFrame, LocScaleSpec]:
    """Data and specification of one model class (``small``: the test's size)."""
    n_spk, n_per = (8, 10) if small else (12, 15)
    if name == "ls_gauss":
        df = simulate(n_spk, n_per, 1, transform=False, seed=seed)
        spec = LocScaleSpec(positive="bonafide", transform=False, correlated=("positive",))
    elif name == "ls_transform":
        df = simulate(n_spk, n_per, 1, transform=True, seed=seed)
        spec = LocScaleSpec(positive="bonafide", transform=True, correlated=("positive",))
    elif name == "stratified":
        df = simulate(n_spk, n_per, 2, omega=0.3, transform=True, seed=seed)
        spec = LocScaleSpec(positive="bonafide", strata=("attack",), transform=True, correlated=("positive",),
                            speaker_by_stratum=("negative",))
    else:
        raise ValueError(f"unknown class {name!r}; choose from {CLASS_NAMES}")
    return df, spec


def _trial_arrays(fit: Any, res: Any) -> dict[str, np.ndarray]:
    """Per informative trial: cell, stratum, unit, and the observed score (Gaussian) or the
    latent interval ``(lo, hi]`` of its cell under the fixed ML transform."""
    data = fit._data
    tc = np.asarray(res.maps["trial_cell"])
    keep = tc >= 0
    cells = res.cells
    out = dict(cell=tc[keep], stratum=cells.stratum[tc[keep]], unit=cells.unit[tc[keep]])
    if fit.locscale_spec.transform:
        cc = data.cells
        lo = np.empty(cc.stratum.size)
        hi = np.empty(cc.stratum.size)
        for s in range(cc.n_strata):
            idx = np.flatnonzero(cc.stratum == s)
            ext = np.concatenate([[-1e4], np.asarray(fit._edges[s], float), [1e4]])
            lo[idx], hi[idx] = ext[cc.k[idx]], ext[cc.k[idx] + 1]
        out["lo"], out["hi"] = lo[keep], hi[keep]
    else:
        out["score"] = np.asarray(data.score, float)[keep]
    return out


def plain_pymc_reference(fit: Any, res: Any, *, draws: int, tune: int, chains: int, seed: int,
                         target_accept: float = 0.95) -> dict[str, np.ndarray]:
    """Plain PyMC on the full trial likelihood (module docstring), same priors as ``res``.
    Returns ``{parameter name: (chain, draw) draws}`` under ``res.summary()``'s names plus
    ``b[0]``, ``g[0]`` (unit 0's location and log-SD effect)."""
    import pymc as pm
    import pytensor.tensor as pt
    from pymc.distributions.dist_math import normal_lccdf, normal_lcdf

    from scoremix.bayes.locscale_model import CLASSES, default_locscale_priors

    cells = res.cells
    pri = default_locscale_priors(cells)
    t = _trial_arrays(fit, res)
    uc = cells.unit_class
    ks, kc, ko = np.flatnonzero(cells.scale), np.flatnonzero(cells.corr), np.flatnonzero(cells.omega)
    with pm.Model():
        mu = pm.Normal("mu", np.asarray(pri.mu_loc, float), pri.mu_scale, shape=cells.n_strata)
        lam = pm.Normal("lam", np.asarray(pri.lam_loc, float), pri.lam_scale, shape=cells.n_strata)
        tau_b = pm.HalfNormal("tau_b", pri.tb_scale, shape=2)
        tg = pt.zeros((2,))
        if ks.size:
            tg = pt.set_subtensor(tg[ks], pm.HalfNormal("tau_g", pri.tg_scale, shape=ks.size))
        rho = pt.zeros((2,))
        if kc.size:
            rho = pt.set_subtensor(rho[kc], 2 * pm.Beta("rho01", pri.lkj_eta, pri.lkj_eta, shape=kc.size) - 1)
        om = pt.zeros((2,))
        if ko.size:
            om = pt.set_subtensor(om[ko], pm.HalfNormal("omega", pri.om_scale, shape=ko.size))
        e1 = pm.Normal("e1", 0, 1, shape=cells.n_units)
        e2 = pm.Normal("e2", 0, 1, shape=cells.n_units)
        g = pm.Deterministic("g", tg[uc] * e1)
        b = pm.Deterministic("b", tau_b[uc] * (rho[uc] * e1 + pt.sqrt(1 - rho[uc] ** 2) * e2))
        u = om[uc[cells.unit]] * pm.Normal("u_raw", 0, 1, shape=cells.unit.size)
        m = mu[t["stratum"]] + b[t["unit"]] + u[t["cell"]]
        s = pt.exp(lam[t["stratum"]] + g[t["unit"]])
        if "score" in t:
            pm.Normal("z", m, s, observed=t["score"])
        else:
            lo, hi = t["lo"], t["hi"]
            # exact cell probability, on the tail where it is accurate
            lcdf_hi, lcdf_lo = normal_lcdf(m, s, hi), normal_lcdf(m, s, lo)
            lccdf_lo, lccdf_hi = normal_lccdf(m, s, lo), normal_lccdf(m, s, hi)
            above = pt.ge(0.5 * (lo + hi), m)
            ll = pt.switch(above, pm.math.logdiffexp(lccdf_lo, lccdf_hi), pm.math.logdiffexp(lcdf_hi, lcdf_lo))
            pm.Potential("cells", ll.sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ip = pm.sample(draws, tune=tune, chains=chains, cores=1, random_seed=seed, progressbar=False,
                           target_accept=target_accept, compute_convergence_checks=False)
    post = ip.posterior
    out: dict[str, np.ndarray] = {}
    for k, lv in enumerate(cells.strata_levels):
        out[f"mu[{lv}]"] = post["mu"].values[..., k]
    for k, lv in enumerate(cells.strata_levels):
        out[f"sigma[{lv}]"] = np.exp(post["lam"].values[..., k])
    for c, cn in enumerate(CLASSES):
        out[f"tau_b[{cn}]"] = post["tau_b"].values[..., c]
        if cells.scale[c]:
            out[f"tau_g[{cn}]"] = post["tau_g"].values[..., list(ks).index(c)]
        if cells.corr[c]:
            out[f"rho[{cn}]"] = 2 * post["rho01"].values[..., list(kc).index(c)] - 1
        if cells.omega[c]:
            out[f"omega[{cn}]"] = post["omega"].values[..., list(ko).index(c)]
    out["b[0]"] = post["b"].values[..., 0]
    out["g[0]"] = post["g"].values[..., 0]
    out["_divergences"] = np.asarray(int(ip.sample_stats["diverging"].values.sum()))
    return out


def _mcse_sd(x: np.ndarray) -> float:
    """Monte Carlo SE of the posterior SD of ``(chain, draw)`` draws: the MCSE of the variance
    (SD of the squared deviations over √ESS of them) by the delta method, ``/ (2 sd)``."""
    import arviz as az

    d2 = (x - x.mean()) ** 2
    ess = float(az.ess(az.convert_to_dataset({"x": d2}))["x"])
    return float(d2.std() / np.sqrt(ess) / (2.0 * x.std()))


def agreement_table(res: Any, ref: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per parameter: means, SDs, MCSEs, ``z = Δmean / √(mcse₁² + mcse₂²)``, SD ratio."""
    import arviz as az

    nc = int(res.idata.posterior.sizes["chain"])
    mine = {k: np.asarray(res.idata.posterior[k].values) for k in res.idata.posterior.data_vars}
    mine["b[0]"] = np.asarray(res.draws["b"][:, 0]).reshape(nc, -1)
    mine["g[0]"] = np.asarray(res.draws["g"][:, 0]).reshape(nc, -1)
    rows = []
    for name, r in ref.items():
        if name.startswith("_") or name not in mine:
            continue
        a = mine[name]
        sa = az.summary(az.convert_to_dataset({"x": a}), round_to="none").iloc[0]
        sr = az.summary(az.convert_to_dataset({"x": np.asarray(r)}), round_to="none").iloc[0]
        ea, er = _mcse_sd(a), _mcse_sd(np.asarray(r))
        rows.append({"parameter": name, "mean_scoremix": sa["mean"], "mean_plain": sr["mean"],
                     "sd_scoremix": sa["sd"], "sd_plain": sr["sd"],
                     "mcse_scoremix": sa["mcse_mean"], "mcse_plain": sr["mcse_mean"],
                     "z": (sa["mean"] - sr["mean"]) / np.hypot(sa["mcse_mean"], sr["mcse_mean"]),
                     "sd_ratio": sa["sd"] / sr["sd"], "z_sd": (sa["sd"] - sr["sd"]) / np.hypot(ea, er),
                     "ess_scoremix": sa["ess_bulk"], "ess_plain": sr["ess_bulk"]})
    return pd.DataFrame(rows).set_index("parameter")


def run_class(name: str, *, draws: int, tune: int, chains: int, seed: int = 1, small: bool = False,
              ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Fit one class both ways; the agreement table and run facts."""
    from scoremix.bayes.locscale import bayes_locscale

    df, spec = case(name, seed=seed, small=small)
    fit = fit_locscale(df, spec)
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_locscale(fit, draws=draws, tune=tune, chains=chains, cores=1, seed=seed, centred=False)
    cpu_a = time.process_time() - t0
    t0 = time.process_time()
    ref = plain_pymc_reference(fit, res, draws=draws, tune=tune, chains=chains, seed=seed + 100)
    cpu_b = time.process_time() - t0
    facts = dict(trials=len(df), cells=int(res.cells.n.size), cpu_scoremix=cpu_a, cpu_plain=cpu_b,
                 div_scoremix=int(res.idata.sample_stats["diverging"].values.sum()),
                 div_plain=int(ref["_divergences"]))
    return agreement_table(res, ref), facts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--classes", nargs="+", default=list(CLASS_NAMES))
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    pd.set_option("display.width", 200)
    for name in a.classes:
        print(f"== {name}: load {os.getloadavg()}", flush=True)
        tab, facts = run_class(name, draws=a.draws, tune=a.tune, chains=a.chains, seed=a.seed)
        print(facts)
        print(tab.round(4).to_string(), flush=True)
        print(f"max |z| {tab['z'].abs().max():.2f}; SD ratio {tab['sd_ratio'].min():.3f}–{tab['sd_ratio'].max():.3f}; "
              f"load {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
