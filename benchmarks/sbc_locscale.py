"""Simulation-based calibration (Talts et al. 2018) of the Bayesian location-scale models.

Classes (``--model``):

* ``ls_gauss``: Gaussian location-scale model — one stratum per class, speaker location and
  log-SD effects per class, correlated in the positive class.
* ``ls_transform``: the same model observed through a known monotone transform with ties
  (``score = round(expit(z / 2), 3)``); the transform is fixed (at the truth) and the trials
  enter through their latent cell moments (midpoint and width²/12), as in the fit of real data.
* ``stratified``: a stratum per class × attack (1 bona fide + 2 attacks, own μ and σ each),
  speaker location and log-SD per class and a speaker × attack location effect (ω) in the
  negative class.
* ``sampled``: the stratified class with sampled transforms
  (``bayes_locscale(..., transform="sampled")``, :mod:`scoremix.bayes.locscale_sampled`): per
  stratum a Bernstein deformation (order 6) ``h_s`` of a fixed base (ML) scale on the fixed
  range ``[m_s - 2.5, m_s + 2.5]`` (``m_s`` the prior mean of ``mu_s``; linear beyond),
  ``w_s = softmax(tau_h gamma_s)``, ``gamma_s`` zero-sum N(0, I), ``tau_h ~ N+(0, 1)``, all drawn
  from the prior; the latent values ``z`` of the stratified model are observed on the base
  scale as ``h_s^{-1}(z)`` (continuous scores: a score ``expit(x / 2)`` of base value ``x``
  has its base value back exactly), and the model is fitted given that base scale as the
  "ML" transform.  The EER is read at a common threshold on the base (score) scale, each
  stratum's latent threshold ``h_s(t)``; ranks also of ``tau_h``, ``w[s, 1]``, ``w[s, M]``
  and two ``gamma`` components.
* ``sampled_datarange``: the same data sets (same seeds), fitted as ``bayes_locscale`` fits
  real data, on every stratum's range of the data instead of the fixed range of the
  simulator.  The model's parameters then mean something else (the Bernstein map and so
  ``mu_s``, ``sigma_s``, ``w`` live on another interval), so only the parameterisation-free
  EER and subgroup ratio are ranked: a check of the data-dependent range, not an SBC.  Not
  usable with this simulator (docs/bayes-locscale.md): where an end increment of the true map
  is small its linear tail throws base values far out, the data range is set by those
  outliers and the order-6 map on it is a different, misspecified model.

Per replicate: parameters from the prior, data from the model (8 speakers, 12 trials per
cell), NUTS (nutpie when installed, else PyMC, on the same graph; 1 chain, 500 tuning + 990 draws,
thinned every 10th → L = 99 draws), rank of
the true value among the 99 draws for every scalar parameter, the first speaker's ``b`` and
``g``, the EER (conditional on the realised effects) and the EER ratio of two speaker
subgroups (odd vs even speakers); and whether the 95 % equal-tailed intervals of the EER
and of the ratio cover their true values.  One compiled model and NUTS step per class
(``with_data`` / ``pm.set_data``), so a replicate costs ~1 s with nutpie.

Writes ``docs/data/sbc_<model>.csv`` (one row per replicate) as it goes; the
summary (chi-square test of 10 rank bins, KS test of the normalised ranks, coverage) is
printed by ``--summary`` and in ``docs/bayes-locscale.md``.

    nice -n 5 python3 benchmarks/sbc_locscale.py --model ls_gauss --reps 200
    python3 benchmarks/sbc_locscale.py --summary
    nice -n 5 python3 benchmarks/sbc_locscale.py --refit-divergent 0.95   # the sampled class's divergent replicates
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import expit, logit, ndtr

from scoremix.bayes.locscale import sample_locscale, scalar_draws
from scoremix.bayes.locscale_model import (
    LocScaleCells,
    LocScalePriors,
    build_locscale_model,
)
from scoremix.bayes.locscale_sampled import (
    SampledTransformData,
    basis_F,
    build_sampled_model,
    sampled_transform_data,
)
from scoremix.predictive.mixture import MixtureRates, batch_eer

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "data")
N_SPK, N_CELL, THIN, L = 8, 12, 10, 99
MODELS = ("ls_gauss", "ls_transform", "stratified", "sampled", "sampled_datarange")
ORDER, TAU_H_SCALE, HALF_RANGE = 6, 1.0, 2.5   # the sampled class's Bernstein order, prior scale, range


def design(model: str) -> tuple[LocScaleCells, LocScalePriors, np.ndarray]:
    """The fixed design (cells, units) and the prior of a class; returns a template
    ``LocScaleCells`` (statistics filled per replicate) and the speaker of every unit."""
    if model in ("stratified", "sampled", "sampled_datarange"):
        strata = ["+:bonafide", "-:A1", "-:A2"]
        sclass = np.array([1, 0, 0])
    else:
        strata = ["+", "-"]
        sclass = np.array([1, 0])
    unit, stratum = [], []
    for i in range(N_SPK):
        for c in (0, 1):
            for s in np.flatnonzero(sclass == c):
                unit.append(2 * i + c)
                stratum.append(s)
    unit, stratum = np.array(unit), np.array(stratum)
    ucls = np.tile([0, 1], N_SPK)
    C = unit.size
    omega = np.array([model in ("stratified", "sampled", "sampled_datarange"), False])
    cells = LocScaleCells(unit=unit, stratum=stratum, n=np.full(C, float(N_CELL)), sz=np.zeros(C),
                          szz=np.full(C, float(N_CELL)), unit_class=ucls, stratum_class=sclass,
                          scale=np.array([True, True]), corr=np.array([False, True]), omega=omega,
                          tail=np.array([False, False]), strata_levels=strata)
    mu_loc = np.where(sclass == 1, 1.5, -1.5)
    pri = LocScalePriors(mu_loc=mu_loc, mu_scale=0.5, lam_loc=np.zeros(sclass.size), lam_scale=0.25,
                         tb_scale=0.5, tg_scale=0.3, om_scale=0.3)
    return cells, pri, np.repeat(np.arange(N_SPK), 2)


def draw_truth(cells: LocScaleCells, pri: LocScalePriors, rng: np.random.Generator) -> dict:
    S = cells.n_strata
    mu = rng.normal(pri.mu_loc, pri.mu_scale)
    lam = rng.normal(pri.lam_loc, pri.lam_scale)
    tau_b = np.abs(rng.normal(0, pri.tb_scale, 2))
    tau_g = np.where(cells.scale, np.abs(rng.normal(0, pri.tg_scale, 2)), 0.0)
    rho = np.where(cells.corr, 2 * rng.beta(pri.lkj_eta, pri.lkj_eta, 2) - 1, 0.0)
    om = np.where(cells.omega, np.abs(rng.normal(0, pri.om_scale, 2)), 0.0)
    ucls = cells.unit_class
    e1, e2 = rng.standard_normal(cells.n_units), rng.standard_normal(cells.n_units)
    g = tau_g[ucls] * e1
    b = tau_b[ucls] * (rho[ucls] * e1 + np.sqrt(1 - rho[ucls] ** 2) * e2)
    u = om[ucls[cells.unit]] * rng.standard_normal(cells.unit.size)
    assert S == mu.size
    return dict(mu=mu, lam=lam, tau_b=tau_b, tau_g=tau_g, rho=rho, om2=om ** 2, nu=np.full(2, np.inf), g=g, b=b, u=u)


def simulate_stats(model: str, cells: LocScaleCells, t: dict, rng: np.random.Generator) -> LocScaleCells:
    C = cells.unit.size
    m = t["mu"][cells.stratum] + t["b"][cells.unit] + t["u"]
    s = np.exp(t["lam"][cells.stratum] + t["g"][cells.unit])
    z = m[:, None] + s[:, None] * rng.standard_normal((C, N_CELL))
    if model == "ls_transform":
        a = 0.5   # latent ±15 before the end cells: no saturation in practice; 999 tied values
        score = np.clip(np.round(expit(a * z), 3), 0.001, 0.999)
        lo = logit(score - 0.0005) / a
        hi = logit(score + 0.0005) / a
        ez = 0.5 * (lo + hi)
        ez2 = ez ** 2 + (hi - lo) ** 2 / 12
    else:
        ez, ez2 = z, z ** 2
    return LocScaleCells(unit=cells.unit, stratum=cells.stratum, n=cells.n, sz=ez.sum(1), szz=ez2.sum(1),
                         unit_class=cells.unit_class, stratum_class=cells.stratum_class, scale=cells.scale,
                         corr=cells.corr, omega=cells.omega, tail=cells.tail, strata_levels=cells.strata_levels)


def eer_and_ratio(cells: LocScaleCells, spk: np.ndarray, mu, lam, b, g, u) -> tuple[np.ndarray, np.ndarray]:
    """``(D,)`` EER of everyone and the ratio EER(odd speakers) / EER(even speakers)."""
    mu, lam, b, g, u = (np.atleast_2d(x) for x in (mu, lam, b, g, u))
    m = mu[:, cells.stratum] + b[:, cells.unit] + u
    s = np.exp(lam[:, cells.stratum] + g[:, cells.unit])
    pos = cells.stratum_class[cells.stratum] == 1
    odd = spk[cells.unit] % 2 == 1
    W = np.vstack([cells.n, cells.n * odd, cells.n * ~odd])
    E = batch_eer(MixtureRates(m, s, pos, W))
    return E[0], E[1] / E[2]


def transform_range(pri: LocScalePriors) -> tuple[np.ndarray, np.ndarray]:
    """The fixed Bernstein range ``[l_s, r_s]`` of the sampled class (prior mean of ``mu_s`` ± 2.5)."""
    m = np.asarray(pri.mu_loc, float)
    return m - HALF_RANGE, m + HALF_RANGE


def draw_transforms(S: int, rng: np.random.Generator) -> dict:
    """``tau_h ~ N+(0, s_h²)``, ``gamma_s`` zero-sum N(0, I) (an iid normal minus its mean: the
    covariance ``I - 11ᵀ/M`` of PyMC's ``ZeroSumNormal``), ``w_s = softmax(tau_h gamma_s)``."""
    tau_h = abs(rng.normal(0.0, TAU_H_SCALE))
    x = rng.standard_normal((S, ORDER))
    gamma = x - x.mean(axis=1, keepdims=True)
    e = np.exp(tau_h * gamma - (tau_h * gamma).max(axis=1, keepdims=True))
    return dict(tau_h=tau_h, gamma=gamma, w=e / e.sum(axis=1, keepdims=True))


def h_map(x: np.ndarray, s: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``h_s(x)`` of base values ``x`` in strata ``s`` (same shape), one draw's increments ``w``
    ``(S, M)``; linear beyond the range."""
    span = (hi - lo)[s]
    return lo[s] + span * np.sum(basis_F((x - lo[s]) / span, ORDER) * w[s], axis=-1)


def h_inverse(z: np.ndarray, s: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The base value ``x`` with ``h_s(x) = z`` (one draw's ``w``; bisection inside the range, to 1e-13)."""
    span = (hi - lo)[s]
    below, above = z < lo[s], z > hi[s]
    x = np.where(below, lo[s] + (z - lo[s]) / (ORDER * w[s, 0]),
                 np.where(above, hi[s] + (z - hi[s]) / (ORDER * w[s, -1]), np.nan))
    inside = ~(below | above)
    a, b = lo[s][inside], hi[s][inside]
    zi, si = z[inside], s[inside]
    for _ in range(int(np.ceil(np.log2(span.max() / 1e-13)))):
        mid = 0.5 * (a + b)
        up = h_map(mid, si, w, lo, hi) < zi
        a, b = np.where(up, mid, a), np.where(up, b, mid)
    x[inside] = 0.5 * (a + b)
    return x


def simulate_sampled(cells: LocScaleCells, t: dict, lo: np.ndarray, hi: np.ndarray,
                     rng: np.random.Generator, data_range: bool = False) -> tuple[LocScaleCells, SampledTransformData]:
    """Latent data of the stratified model observed on the base scale, ``x = h_s^{-1}(z)``; the
    cells (base-scale statistics) and the sampled-transform statistics on the fixed range (or,
    ``data_range``, on every stratum's range of the data, as ``bayes_locscale`` does)."""
    C = cells.unit.size
    m = t["mu"][cells.stratum] + t["b"][cells.unit] + t["u"]
    sd = np.exp(t["lam"][cells.stratum] + t["g"][cells.unit])
    z = (m[:, None] + sd[:, None] * rng.standard_normal((C, N_CELL))).ravel()
    tc = np.repeat(np.arange(C), N_CELL)
    x = h_inverse(z, cells.stratum[tc], t["w"], lo, hi)
    base = LocScaleCells(unit=cells.unit, stratum=cells.stratum, n=cells.n, sz=np.bincount(tc, x, C),
                         szz=np.bincount(tc, x * x, C), unit_class=cells.unit_class,
                         stratum_class=cells.stratum_class, scale=cells.scale, corr=cells.corr, omega=cells.omega,
                         tail=cells.tail, strata_levels=cells.strata_levels)
    td = sampled_transform_data(base, x, x * x, tc, order=ORDER, tau_h_scale=TAU_H_SCALE,
                                lo=None if data_range else lo, hi=None if data_range else hi)
    return base, td


def eer_and_ratio_sampled(cells: LocScaleCells, spk: np.ndarray, mu, lam, b, g, u, w, lo: np.ndarray,
                          hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """As :func:`eer_and_ratio`, at a common threshold ``t`` on the base (score) scale: stratum
    ``s``'s latent threshold is ``h_s(t)`` (draws' ``w`` ``(D, S, M)``).  FNR(t) − FPR(t) is
    increasing, so the crossing is found by bisection from [−200, 200] (widened tenfold where it
    lies beyond; to 1e-10 on the base scale); the EER is the rates' mean there."""
    mu, lam, b, g, u = (np.atleast_2d(x) for x in (mu, lam, b, g, u))
    w = w if w.ndim == 3 else w[None]
    D = mu.shape[0]
    m = mu[:, cells.stratum] + b[:, cells.unit] + u
    sd = np.exp(lam[:, cells.stratum] + g[:, cells.unit])
    pos = cells.stratum_class[cells.stratum] == 1
    odd = spk[cells.unit] % 2 == 1
    out = []
    for wt in (cells.n, cells.n * odd, cells.n * ~odd):
        def rates(t: np.ndarray, wt: np.ndarray = wt) -> tuple[np.ndarray, np.ndarray]:
            hs = lo + (hi - lo) * np.sum(basis_F((t[:, None] - lo) / (hi - lo), ORDER) * w, axis=-1)   # (D, S)
            zc = (hs[:, cells.stratum] - m) / sd
            fnr = (ndtr(zc[:, pos]) @ wt[pos]) / wt[pos].sum()
            fpr = (ndtr(-zc[:, ~pos]) @ wt[~pos]) / wt[~pos].sum()
            return fnr, fpr
        a, c = np.full(D, -200.0), np.full(D, 200.0)
        for _ in range(12):   # widen where the crossing lies beyond ±200 (flat end slopes); else unchanged
            fa, pa = rates(a)
            fc, pc = rates(c)
            out_lo, out_hi = fa > pa, fc < pc
            if not (out_lo.any() or out_hi.any()):
                break
            a, c = np.where(out_lo, 10 * a, a), np.where(out_hi, 10 * c, c)
        for _ in range(52 + int(np.ceil(np.log2(max(c.max(), -a.min()) / 200.0)))):
            mid = 0.5 * (a + c)
            fnr, fpr = rates(mid)
            up = fnr < fpr
            a, c = np.where(up, mid, a), np.where(up, c, mid)
        fnr, fpr = rates(0.5 * (a + c))
        out.append(0.5 * (fnr + fpr))
    return out[0], out[1] / out[2]


def run(model: str, reps: int, seed: int, start: int = 0, sampler: str | None = None) -> None:
    import pymc as pm

    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"sbc_{model}.csv")
    cells, pri, spk = design(model)
    sampled = model in ("sampled", "sampled_datarange")
    datarange = model == "sampled_datarange"
    lo, hi = transform_range(pri)
    if sampled:   # a template of the right shapes; every replicate sets its own data
        t0_ = {**draw_truth(cells, pri, np.random.default_rng(0)), **draw_transforms(cells.n_strata, np.random.default_rng(0))}
        pm_model = build_sampled_model(cells, simulate_sampled(cells, t0_, lo, hi, np.random.default_rng(0))[1], pri,
                                       centred=False)
    else:
        pm_model = build_locscale_model(cells, pri, centred=False)
    try:
        if sampler == "pymc":
            raise ImportError
        import nutpie

        sampler, step = "nutpie", None
        compiled = nutpie.compile_pymc_model(pm_model, freeze_model=False)
    except ImportError:
        sampler, compiled = "pymc", None
        step = pm.NUTS(model=pm_model, target_accept=0.9)
    done = pd.read_csv(path) if os.path.exists(path) else pd.DataFrame()
    have = set(done["rep"]) if len(done) else set()
    for r in range(start, start + reps):
        if r in have:
            continue
        rng = np.random.default_rng([seed, r])
        truth = draw_truth(cells, pri, rng)
        tdata = None
        if sampled:
            truth.update(draw_transforms(cells.n_strata, rng))
            data, tdata = simulate_sampled(cells, truth, lo, hi, rng, data_range=datarange)
        else:
            data = simulate_stats(model, cells, truth, rng)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = sample_locscale(data, pri, draws=L * THIN, tune=500, chains=1, cores=1, seed=int(rng.integers(2**31)),
                                centred=False, model=pm_model, step=step, sampler=sampler, compiled=compiled,
                                tdata=tdata)
        wall = time.perf_counter() - t0
        keep = np.arange(THIN - 1, L * THIN, THIN)
        dk = {k: (v[keep] if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == L * THIN else v)
              for k, v in d.items()}
        post = {} if datarange else scalar_draws(data, dk)
        tru = scalar_draws(data, {k: (np.atleast_1d(v)[None] if isinstance(v, (np.ndarray, float)) else v)
                                  for k, v in truth.items()})
        row: dict = dict(rep=r, seconds=wall, sampler=sampler, divergences=int(d["raw"].sample_stats["diverging"].values.sum()))
        for k in post:
            row[f"rank:{k}"] = int(np.sum(post[k] < tru[k][0]))
        if not datarange:
            row["rank:b[0]"] = int(np.sum(dk["b"][:, 0] < truth["b"][0]))
            row["rank:g[0]"] = int(np.sum(dk["g"][:, 0] < truth["g"][0]))
        if sampled:
            import arviz as az

            gam = np.asarray(d["raw"].posterior["gamma_raw"].values, float).reshape(L * THIN, cells.n_strata, ORDER)
            for si, lv in enumerate(cells.strata_levels):
                for k in (0, ORDER - 1):
                    if not datarange:
                        row[f"rank:w[{lv},{k + 1}]"] = int(np.sum(dk["w"][:, si, k] < truth["w"][si, k]))
            for si, k in ((0, 0), (1, 2)):
                if not datarange:
                    row[f"rank:gamma[{cells.strata_levels[si]},{k + 1}]"] = int(np.sum(gam[keep, si, k] < truth["gamma"][si, k]))
            row["ess:tau_h"] = float(az.ess(d["tau_h"][None]))
            row["true:tau_h"] = float(truth["tau_h"])
            row["mean:tau_h"] = float(d["tau_h"].mean())

            def eer_fn(dd: dict, data: LocScaleCells = data, truth: dict = truth,
                       tdata: SampledTransformData = tdata) -> tuple[np.ndarray, np.ndarray]:
                a, b = (lo, hi) if dd is truth else (tdata.lo, tdata.hi)   # the truth's map is on the fixed range
                return eer_and_ratio_sampled(data, spk, dd["mu"], dd["lam"], dd["b"], dd["g"], dd["u"], dd["w"], a, b)
        else:
            def eer_fn(dd: dict, data: LocScaleCells = data) -> tuple[np.ndarray, np.ndarray]:
                return eer_and_ratio(data, spk, dd["mu"], dd["lam"], dd["b"], dd["g"], dd["u"])
        e_true, r_true = eer_fn(truth)
        e_d, r_d = eer_fn(dk)
        row["rank:eer"] = int(np.sum(e_d < e_true[0]))
        row["rank:eer_ratio"] = int(np.sum(r_d < r_true[0]))
        # 95 % intervals from all (unthinned) draws
        e_all, r_all = eer_fn(d)
        for nm, tv, dv in (("eer", e_true[0], e_all), ("eer_ratio", r_true[0], r_all)):
            lo_, hi_ = np.nanquantile(dv, [0.025, 0.975])
            row[f"true:{nm}"] = tv
            row[f"cover95:{nm}"] = bool(lo_ <= tv <= hi_)
            lo_, hi_ = np.nanquantile(dv, [0.05, 0.95])
            row[f"cover90:{nm}"] = bool(lo_ <= tv <= hi_)
        if sampled:
            row["seconds_total"] = time.perf_counter() - t0
        pd.DataFrame([row]).to_csv(path, mode="a", header=not os.path.exists(path), index=False)
        print(model, r, f"{wall:.1f}s", flush=True)


def refit_divergent(target_accept: float, seed: int = 2026) -> None:
    """Refit the replicates of ``sbc_sampled.csv`` that had divergences with a higher
    ``target_accept`` (same data and sampler seed) and print their divergences before / after."""
    import nutpie

    d = pd.read_csv(os.path.join(OUT, "sbc_sampled.csv")).set_index("rep")
    cells, pri, _ = design("sampled")
    lo, hi = transform_range(pri)
    t0_ = {**draw_truth(cells, pri, np.random.default_rng(0)), **draw_transforms(cells.n_strata, np.random.default_rng(0))}
    pm_model = build_sampled_model(cells, simulate_sampled(cells, t0_, lo, hi, np.random.default_rng(0))[1], pri,
                                   centred=False)
    compiled = nutpie.compile_pymc_model(pm_model, freeze_model=False)
    before = after = still = 0
    for r in d.index[d["divergences"] > 0]:
        rng = np.random.default_rng([seed, r])
        truth = draw_truth(cells, pri, rng)
        truth.update(draw_transforms(cells.n_strata, rng))
        data, tdata = simulate_sampled(cells, truth, lo, hi, rng)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dd = sample_locscale(data, pri, draws=L * THIN, tune=500, chains=1, cores=1, seed=int(rng.integers(2**31)),
                                 centred=False, model=pm_model, sampler="nutpie", compiled=compiled, tdata=tdata,
                                 target_accept=target_accept)
        nd = int(dd["raw"].sample_stats["diverging"].values.sum())
        before, after, still = before + int(d.loc[r, "divergences"]), after + nd, still + (nd > 0)
        print(r, int(d.loc[r, "divergences"]), nd, f"{time.perf_counter() - t0:.1f}s", flush=True)
    print(f"divergences at 0.9: {before}; at {target_accept}: {after}, in {still} replicates")


def summary(model: str) -> pd.DataFrame | None:
    path = os.path.join(OUT, f"sbc_{model}.csv")
    if not os.path.exists(path):
        return None
    df = pd.read_csv(path)
    rows = []
    for c in [c for c in df.columns if c.startswith("rank:")]:
        rk = df[c].to_numpy()
        counts = np.bincount(np.minimum(rk // 10, 9), minlength=10)   # ranks 0..99 → 10 bins of 10
        chi = stats.chisquare(counts)
        rng = np.random.default_rng(0)
        ks = stats.kstest((rk + rng.random(rk.size)) / (L + 1), "uniform")
        rows.append(dict(parameter=c[5:], n=rk.size, chi2_p=chi.pvalue, ks_p=ks.pvalue,
                         uniform=bool(chi.pvalue >= 0.01)))
    tab = pd.DataFrame(rows)
    for nm in ("eer", "eer_ratio"):
        tab.attrs[f"coverage95:{nm}"] = float(df[f"cover95:{nm}"].mean())
        tab.attrs[f"coverage90:{nm}"] = float(df[f"cover90:{nm}"].mean())
    tab.attrs["reps"] = len(df)
    tab.attrs["seconds_median"] = float(df["seconds"].median())
    tab.attrs["divergent_reps"] = int((df["divergences"] > 0).sum())
    return tab


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=MODELS)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--sampler", choices=("nutpie", "pymc"), default=None)
    ap.add_argument("--refit-divergent", type=float, default=None, metavar="TARGET_ACCEPT")
    a = ap.parse_args()
    if a.summary:
        for m in MODELS:
            t = summary(m)
            if t is None:
                continue
            print(f"## {m}: {t.attrs['reps']} replicates, median {t.attrs['seconds_median']:.1f} s, "
                  f"{t.attrs['divergent_reps']} with divergences")
            print("| parameter | n | chi² p (10 bins) | KS p | uniform (p ≥ 0.01) |\n|---|---|---|---|---|")
            for _, r in t.iterrows():
                print(f"| {r.parameter} | {r.n} | {r.chi2_p:.3f} | {r.ks_p:.3f} | {'yes' if r.uniform else 'NO'} |")
            print({k: v for k, v in t.attrs.items() if k.startswith("coverage")})
        sys.exit(0)
    if a.refit_divergent is not None:
        refit_divergent(a.refit_divergent, a.seed)
        sys.exit(0)
    run(a.model, a.reps, a.seed, a.start, a.sampler)
