"""``bayes_glmer`` against an independent sampler on the same model and priors.

Data: one seeded draw of the SBC design (20 speakers × (10 positive + 10 negative) 0/1
trials, decision model ``err ~ 0 + cell + (0 + cls | spk)``, the SBC priors).  Reference:
plain PyMC with the full Bernoulli likelihood row by row (``pm.Bernoulli(logit_p=…)``,
PyMC's own density code instead of the cell potential), non-centred speaker effects
(``b = z·diag(sd)·chol(R)ᵀ``), LKJ(2) correlation; both 4 chains × 1000 draws after 1000
warm-up.  Reported per parameter: both posterior means and SDs and
``z = Δmean / sqrt(mcse_a² + mcse_b²)`` (|z| < 3 expected for every parameter).

Run: ``nice -n 5 python3 benchmarks/bayes_glmer_agreement.py``.
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pandas as pd

warnings.simplefilter("ignore")
sys.path.insert(0, os.path.dirname(__file__))

import sbc_bayes_glmer as S  # noqa: E402
from scoremix.bayes.glmer import bayes_glmer  # noqa: E402


def main() -> None:
    import arviz as az
    import pymc as pm
    import pytensor.tensor as pt

    d = S.design()
    rng = np.random.default_rng(2024)
    spk = d["spk"].str[1:].astype(int).to_numpy()
    cls = (d["cls"] == "pos").to_numpy().astype(int)
    b = rng.normal(0, 0.5, (S.N_SPK, 2))
    eta = np.array([-1.2, -1.8, -1.5, -1.0])[d["cell"].cat.codes.to_numpy()] + b[spk, cls]
    df = d.copy()
    df["err"] = (rng.random(len(d)) < 1 / (1 + np.exp(-eta))).astype(int)
    kw = dict(draws=1000, tune=1000, chains=4, cores=1)
    fit = bayes_glmer("err ~ 0 + cell + (0 + cls | spk)", df, priors=S.priors(), seed=int(os.environ.get("SEED", 1)), progress=False,
                      check=False, **kw)
    a = az.summary(fit.idata, var_names=fit.param_names, round_to="none")
    X = pd.get_dummies(d["cell"]).to_numpy(float)
    with pm.Model():
        beta = pm.Normal("beta", S.MU0, S.SD0, shape=4)
        sd = pm.HalfNormal("sd", S.SDSD, shape=2)
        R = pm.LKJCorr("corr", n=2, eta=S.ETA, return_matrix=True)
        pm.Deterministic("r", R[1, 0])
        z = pm.Normal("z", 0, 1, shape=(S.N_SPK, 2))
        bb = pt.dot(z, (sd[:, None] * pt.linalg.cholesky(R)).T)
        pm.Bernoulli("y", logit_p=pt.dot(X, beta) + bb[spk, cls], observed=df["err"].to_numpy())
        ip = pm.sample(random_seed=int(os.environ.get("SEED", 1)) + 1, progressbar=False, compute_convergence_checks=False, target_accept=0.9, **kw)
    post = ip.posterior
    ref = {f"cell{c}": post["beta"].values[..., j] for j, c in enumerate(S.CELLS)}
    ref["sd_spk__clsneg"] = post["sd"].values[..., 0]
    ref["sd_spk__clspos"] = post["sd"].values[..., 1]
    ref["cor_spk__clsneg.clspos"] = post["r"].values
    b_ = az.summary(az.convert_to_dataset(ref), round_to="none")
    rows = []
    for n in fit.param_names:
        rows.append({"parameter": n, "mean_bayes_glmer": a.loc[n, "mean"], "mean_plain": b_.loc[n, "mean"],
                     "sd_bayes_glmer": a.loc[n, "sd"], "sd_plain": b_.loc[n, "sd"],
                     "z": (a.loc[n, "mean"] - b_.loc[n, "mean"]) / np.hypot(a.loc[n, "mcse_mean"], b_.loc[n, "mcse_mean"]),
                     "sd_ratio": a.loc[n, "sd"] / b_.loc[n, "sd"],
                     "ess_bayes_glmer": a.loc[n, "ess_bulk"], "ess_plain": b_.loc[n, "ess_bulk"]})
    tab = pd.DataFrame(rows).set_index("parameter")
    pd.set_option("display.width", 200)
    print(tab.round(3).to_string())
    print("divergences:", int(fit.idata.sample_stats["diverging"].values.sum()),
          int(ip.sample_stats["diverging"].values.sum()), "load", os.getloadavg())


if __name__ == "__main__":
    main()
