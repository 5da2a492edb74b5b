"""Coverage of the overall speaker-cluster bootstrap intervals of ``sm.eer``, ``sm.min_dcf``,
``sm.act_dcf`` and ``sm.cllr`` (``n_boot=``, ``speaker=``) against closed-form truth.

Usage::

    PYTHONPATH=src python3 benchmarks/coverage_overall.py            # table in docs/intervals.md
    PYTHONPATH=src python3 benchmarks/coverage_overall.py --quick    # fewer data sets

Model (:mod:`scoremix.fairness.coverage`, one subgroup): ``n`` speakers, 40 target and 400
nontarget trials each, ``s = d·y + b_j + ε`` with speaker effect ``b_j ~ N(0, σ_b²)`` shared by
both classes of a speaker, ``ε ~ N(0, 1)``, ``d = 3``.  The scores are turned into the
*population* log-likelihood ratio ``ℓ(s) = (d/v)(s − d/2)``, ``v = 1 + σ_b²`` (the classes of
the speaker population are ``N(0, v)`` and ``N(d, v)``), so actDCF and Cllr have a calibrated
truth.  True values (the infinite-speaker limit the estimators target):

* EER ``Φ(−d/(2√v))``;
* minDCF ``min_τ p·Φ((τ−d)/√v) + (1−p)·Φ(−τ/√v)`` (1-D search to 1e-10), p = 0.05;
* actDCF: the same cost at the Bayes threshold ``ℓ = log((1−p)/p)``;
* Cllr ``½(E_tar log₂(1+e^{−ℓ}) + E_non log₂(1+e^{ℓ}))`` with ``ℓ | y ~ N(±d²/(2v), d²/v)``
  (Gauss–Hermite quadrature, 80 nodes).

Every data set and bootstrap has a fixed seed (``[seed, size, k]``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.special import ndtr
from tqdm.auto import tqdm

import scoremix as sm
from scoremix.fairness.coverage import CoverageDesign, simulate_subgroup_trials

D, P = 3.0, 0.05


def truth(sd_b: float) -> dict[str, float]:
    """Closed-form population values (module docstring)."""
    v = 1.0 + sd_b ** 2
    sv = np.sqrt(v)
    cost = lambda t: P * ndtr((t - D) / sv) + (1 - P) * ndtr(-t / sv)  # noqa: E731
    r = minimize_scalar(cost, bounds=(-2.0, D + 6.0), method="bounded", options={"xatol": 1e-10})
    eta = np.log((1 - P) / P)
    t_bayes = eta * v / D + D / 2  # ℓ(t) = eta
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    m, s = D ** 2 / (2 * v), D / sv
    cllr = 0.5 * (w @ np.logaddexp(0, -(m + s * x)) + w @ np.logaddexp(0, (-m + s * x))) / np.log(2)
    return {"eer": float(ndtr(-D / (2 * sv))), "min_dcf": float(r.fun), "act_dcf": float(cost(t_bayes)),
            "cllr": float(cllr)}


def one(n_spk: int, sd_b: float, seed: list[int], n_boot: int) -> dict[str, tuple[float, float, float]]:
    design = CoverageDesign(sizes=(n_spk,), shift_non=(0.0,), shift_tar=(0.0,), sd_speaker=sd_b, d=D)
    df = simulate_subgroup_trials(design, seed=np.random.default_rng(seed))
    v = 1.0 + sd_b ** 2
    llr = (D / v) * (df["score"].to_numpy() - D / 2)
    y, spk = df["label"].to_numpy(), df["speaker"].to_numpy()
    kw = dict(n_boot=n_boot, speaker=spk, seed=np.random.default_rng(seed + [1]))
    e = sm.eer(llr, y, **kw)
    md = sm.min_dcf(llr, y, p_target=P, **kw)
    ad = sm.act_dcf(llr, y, p_target=P, **kw)
    cl = sm.cllr(llr, y, **kw)
    return {"eer": (float(e), e.lo, e.hi), "min_dcf": (float(md.value), md.lo, md.hi),
            "act_dcf": (float(ad), ad.lo, ad.hi), "cllr": (float(cl), cl.lo, cl.hi)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 data sets, 300 replicates")
    ap.add_argument("--datasets", type=int, default=None, help="data sets per cell (default 100)")
    ap.add_argument("--boot", type=int, default=None, help="replicates (default 400)")
    ap.add_argument("--sizes", default="5,10,30", help="speakers per data set (comma-separated)")
    ap.add_argument("--sd-speaker", default="0.5,0", help="speaker-effect SDs σ_b (comma-separated)")
    ap.add_argument("--seed", type=int, default=21)
    args = ap.parse_args()
    n_sets = args.datasets or (40 if args.quick else 100)
    n_boot = args.boot or (300 if args.quick else 400)
    sizes = [int(x) for x in args.sizes.split(",")]
    t0 = time.perf_counter()
    rows = []
    for sd_b in [float(x) for x in args.sd_speaker.split(",")]:
        tr = truth(sd_b)
        for n in sizes:
            for k in tqdm(range(n_sets), desc=f"sd_b={sd_b} n={n}", unit="set"):
                for m, (est, lo, hi) in one(n, sd_b, [args.seed, n, k, int(sd_b * 10)], n_boot).items():
                    rows.append(dict(sd_b=sd_b, n_speakers=n, measure=m, truth=tr[m], estimate=est, lo=lo, hi=hi,
                                     covered=bool(lo <= tr[m] <= hi), below=bool(hi < tr[m])))
    res = pd.DataFrame(rows)
    print(f"\n{n_sets} data sets per cell, B = {n_boot}, 95 % intervals; {time.perf_counter() - t0:.0f} s")
    print("truth:", {k: round(v, 5) for k, v in truth(0.5).items()}, "(sd_b 0.5);",
          {k: round(v, 5) for k, v in truth(0.0).items()}, "(sd_b 0)")
    pd.set_option("display.width", 200)
    cov = res.pivot_table(index=["measure", "sd_b"], columns="n_speakers", values="covered", aggfunc="mean")
    below = res.pivot_table(index=["measure", "sd_b"], columns="n_speakers", values="below", aggfunc="mean")
    print("\ncoverage")
    print(cov.round(3).to_string())
    print("\nshare of intervals entirely below the truth (nominal 0.025)")
    print(below.round(3).to_string())


if __name__ == "__main__":
    main()
