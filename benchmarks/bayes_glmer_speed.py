"""``bayes_glmer`` against plain PyMC on a 20k-row decision table: agreement and min-ESS/s.

Data: the ASVspoof 2019 LA dev table (LFCC-GMM; ``../shared/data``), 20,000 rows drawn
without replacement (seed 0), decisions at the overall EER threshold; the decision model
``err ~ 0 + cell + (0 + cls | spk) + (0 + isneg | f0)`` (cell = class × gender, f0 = attack,
which acts on spoofed trials only), as :func:`scoremix.bayes_decision_model` builds it.
Without the data a table of the same shape is simulated.

* ``bayes_glmer``: sufficient statistics per cell, non-centred random effects, default
  sampler (PyMC NUTS unless nutpie is installed).
* plain PyMC: the same priors (those ``bayes_glmer`` resolves), the full Bernoulli
  likelihood row by row (``pm.Bernoulli(logit_p=…)``), centred random effects, default
  ``pm.sample`` settings (target_accept 0.8).

Both run 2 chains × ``DRAWS`` after ``TUNE`` warm-up, sequentially (``cores=1``).  Reported:
min bulk ESS over all scalar parameters, sampling CPU seconds (``time.process_time``, load
independent) and wall seconds; posterior means/SDs side by side with
``z = Δmean / sqrt(mcse_a² + mcse_b²)``; frequentist ``glmer`` estimates beside them.

Run: ``nice -n 5 python3 benchmarks/bayes_glmer_speed.py [draws] [tune]``; writes
``benchmarks/results/bayes_glmer_speed.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

warnings.simplefilter("ignore")

import scoremix as sm  # noqa: E402
from scoremix.bayes.glmer import bayes_glmer, glmm_model_data, glmm_priors  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "asvspoof2019_la_dev" / "asvspoof2019_la_dev_lfcc_gmm.csv.gz"
N_ROWS = 20_000


def decision_frame() -> tuple[pd.DataFrame, str, str]:
    if DATA.exists():
        df = pd.read_csv(DATA)
        df = df.sample(N_ROWS, random_state=0).reset_index(drop=True)
        src = f"{DATA.name}, {N_ROWS} rows sampled (seed 0)"
    else:  # pragma: no cover - simulated stand-in
        rng = np.random.default_rng(0)
        spk = rng.integers(0, 20, N_ROWS)
        lab = np.where(rng.random(N_ROWS) < 0.1, "bonafide", "spoof")
        att = np.where(lab == "bonafide", "-", np.array([f"A0{i}" for i in range(1, 7)])[rng.integers(0, 6, N_ROWS)])
        u = rng.normal(0, 0.5, 20)
        score = np.where(lab == "bonafide", 2.0, -2.0) + u[spk] + rng.normal(0, 1.5, N_ROWS)
        df = pd.DataFrame({"speaker": spk.astype(str), "gender": np.where(spk < 10, "f", "m"), "label": lab,
                           "attack": att, "score": score})
        src = "simulated (LA dev table absent)"
    cols = {c.lower(): c for c in df.columns}
    return df, src, ("speaker_gender" if "speaker_gender" in df.columns else "gender")


def main() -> None:
    import arviz as az
    import pymc as pm
    import pytensor.tensor as pt

    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    tune = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    df, src, gcol = decision_frame()
    freq = sm.decision_model(df, "eer", [gcol], factors=["attack"], n_sim=10, n_boot=10)
    frame = freq.fit.spec.data.copy()
    from scoremix.glmm.response import Y_COL

    frame["err"] = frame[Y_COL]
    formula = freq.settings["formula"]
    out: dict = {"data": src, "formula": formula, "rows": int(len(frame)), "draws": draws, "tune": tune,
                 "chains": 2, "load_start": os.getloadavg()}

    # ---- bayes_glmer
    c0, w0 = time.process_time(), time.time()
    fit = bayes_glmer(formula, frame, draws=draws, tune=tune, chains=2, cores=1, seed=1, progress=False,
                      check=False)
    c1, w1 = time.process_time(), time.time()
    names = fit.param_names
    sa = az.summary(fit.idata, var_names=names)
    out["bayes_glmer"] = {"cpu_s": c1 - c0, "wall_s": w1 - w0, "cells": fit.model_data.cells.n_cells,
                          "min_ess_bulk": float(sa["ess_bulk"].min()), "sampler": fit.sampler,
                          "divergences": int(fit.idata.sample_stats["diverging"].values.sum())}
    print("bayes_glmer", out["bayes_glmer"], flush=True)

    # ---- plain PyMC: same priors, full Bernoulli likelihood, centred, defaults
    md = glmm_model_data(formula, frame, "binomial", None)
    ps = glmm_priors(md, None)
    spec = md.spec
    with pm.Model() as plain:
        mu = np.array([ps.fixef[n].params["mu"] for n in spec.fixef_names])
        sd = np.array([ps.fixef[n].params["sigma"] for n in spec.fixef_names])
        beta = pm.Normal("beta", mu, sd, shape=spec.p)
        eta = pm.math.dot(spec.X, beta)
        for k, t in enumerate(spec.terms):
            pri = [ps.sd[f"sd_{t.group}__{a}"] for a in t.term_names]
            sds = pm.HalfStudentT(f"sd_{k}", nu=3, sigma=np.array([p.params["sigma"] for p in pri]), shape=t.p)
            if t.p == 1:
                b = pm.Normal(f"b_{k}", 0, sds[0], shape=t.n_levels)[:, None]
            else:
                R = pm.LKJCorr(f"corr_{k}", n=t.p, eta=2.0, return_matrix=True)
                pm.Deterministic(f"R_{k}", R)
                chol = sds[:, None] * pt.linalg.cholesky(R)
                b = pm.MvNormal(f"b_{k}", mu=np.zeros(t.p), chol=chol, shape=(t.n_levels, t.p))
            eta = eta + (b[np.asarray(t.codes)] * np.asarray(t.X)).sum(axis=1)
        pm.Bernoulli("y", logit_p=eta, observed=md.y.astype(int))
    c0, w0 = time.process_time(), time.time()
    with plain:
        idp = pm.sample(draws=draws, tune=tune, chains=2, cores=1, random_seed=2, progressbar=False,
                        compute_convergence_checks=False)
    c1, w1 = time.process_time(), time.time()
    # map plain names to R names
    post = idp.posterior
    pdraws = {}
    for j, n in enumerate(spec.fixef_names):
        pdraws[n] = post["beta"].values[..., j]
    for k, t in enumerate(spec.terms):
        for a, nm in enumerate(t.term_names):
            pdraws[f"sd_{t.group}__{nm}"] = post[f"sd_{k}"].values[..., a]
        if t.p == 2:
            pdraws[f"cor_{t.group}__{t.term_names[0]}.{t.term_names[1]}"] = post[f"R_{k}"].values[..., 1, 0]
    pd_ = az.convert_to_dataset(pdraws)
    sp = az.summary(pd_)
    out["plain_pymc"] = {"cpu_s": c1 - c0, "wall_s": w1 - w0, "min_ess_bulk": float(sp["ess_bulk"].min()),
                         "divergences": int(idp.sample_stats["diverging"].values.sum())}
    print("plain", out["plain_pymc"], flush=True)
    a, b = out["bayes_glmer"], out["plain_pymc"]
    out["ess_per_cpu_s_ratio"] = (a["min_ess_bulk"] / a["cpu_s"]) / (b["min_ess_bulk"] / b["cpu_s"])
    out["ess_per_wall_s_ratio"] = (a["min_ess_bulk"] / a["wall_s"]) / (b["min_ess_bulk"] / b["wall_s"])

    # ---- agreement
    fe = freq.fit.fixef
    rows = []
    for n in names:
        ma, sa_, ea = sa.loc[n, "mean"], sa.loc[n, "sd"], sa.loc[n, "mcse_mean"]
        mb, sb, eb = sp.loc[n, "mean"], sp.loc[n, "sd"], sp.loc[n, "mcse_mean"]
        rows.append({"parameter": n, "mean_bayes_glmer": ma, "sd_bayes_glmer": sa_, "mean_plain": mb, "sd_plain": sb,
                     "z_mean": (ma - mb) / np.hypot(ea, eb), "sd_ratio": sa_ / sb,
                     "glmer_estimate": float(fe[n]) if n in fe.index else None})
    out["agreement"] = rows
    out["load_end"] = os.getloadavg()
    tab = pd.DataFrame(rows).set_index("parameter")
    pd.set_option("display.width", 200)
    print(tab.round(3))
    print(f"min-ESS/CPU-s ratio {out['ess_per_cpu_s_ratio']:.1f}, min-ESS/wall-s ratio {out['ess_per_wall_s_ratio']:.1f}")
    res = ROOT / "benchmarks" / "results" / "bayes_glmer_speed.json"
    res.write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
