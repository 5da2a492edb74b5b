"""CPU time of the model checks (``fit.check()``) of a Gaussian LMM, a Poisson and a
Bernoulli GLMM and a transformation fit, on seeded simulated data of ``--n`` rows
(``--groups`` speakers), ``nsim`` simulations; the fit itself is timed beside it.

Usage::

    nice -n 5 python benchmarks/model_checks_speed.py --n 2000 --groups 50 --nsim 250
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd

import scoremix as sm


def _data(n: int, groups: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, n)
    lab = rng.integers(0, 2, n)
    x = rng.normal(size=n)
    z = 1.5 * lab + 0.3 * x + rng.normal(0, 0.5, groups)[g] + rng.normal(size=n)
    eta = -0.5 + 0.4 * x + rng.normal(0, 0.5, groups)[g]
    return pd.DataFrame(dict(score=z, label=lab.astype(str), x=x, spk=[f"s{i}" for i in g],
                             count=rng.poisson(np.exp(eta)), err=rng.binomial(1, 1 / (1 + np.exp(-eta)))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--nsim", type=int, default=250)
    a = ap.parse_args()
    d = _data(a.n, a.groups)
    models = {
        "lmer": lambda: sm.lmer("score ~ label + x + (1 | spk)", d),
        "glmer poisson": lambda: sm.glmer("count ~ x + (1 | spk)", d, family="poisson"),
        "glmer bernoulli": lambda: sm.glmer("err ~ x + (1 | spk)", d, family="binomial"),
        "lmer transform": lambda: sm.lmer("score ~ label + x + (1 | spk)", d.assign(score=np.exp(d["score"])),
                                          transform="monotone"),
    }
    print(f"n = {a.n}, groups = {a.groups}, nsim = {a.nsim}; CPU seconds (process time)")
    for name, fit in models.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.process_time()
            m = fit()
            t1 = time.process_time()
            m.check(nsim=a.nsim, influence=False)
            t2 = time.process_time()
        print(f"{name:16s} fit {t1 - t0:7.2f} s   check {t2 - t1:7.2f} s")


if __name__ == "__main__":
    main()
