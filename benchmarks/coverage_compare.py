"""Coverage of the paired speaker-cluster bootstrap intervals of ``sm.compare_systems``
(differences of EER and minDCF between two correlated systems) against closed-form truth.

Usage::

    PYTHONPATH=src nice -n 5 python3 benchmarks/coverage_compare.py [--n-sets 200] [--n-boot 400]

Model: ``n`` speakers (15, 30, 60), 10 target and 40 nontarget trials each.  Speaker ``j`` has
an effect ``b_j ~ N(0, σ_b²)``, σ_b = 0.5, shared by both systems and both classes; trial noise
``ε_A ~ N(0, 1)`` and ``ε_B = ρ ε_A + √(1−ρ²) ε'`` with ρ = 0.6; scores
``s_A = d_A y + b_j + ε_A`` and ``s_B = d_B y + b_j + ε_B`` with ``d_A = 2.0``, ``d_B = 2.5``.
Each class of each system is ``N(d y, v)``, ``v = 1 + σ_b²``, in the speaker population, so the
truth is ``EER = Φ(−d/(2√v))`` and ``minDCF = min_τ [p Φ((τ−d)/√v) + (1−p) Φ(−τ/√v)] / min(p, 1−p)``
(p = 0.05, normalised), and the true differences are ``θ_A − θ_B``.  Every data set has the seed
``[seed, n, k]``; the bootstrap its own.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.special import ndtr

from scoremix.compare_systems import compare_systems
from scoremix.resampling.intervals import (
    expanded_percentile_interval,
    percentile_interval,
)

SB, RHO, DA, DB, P = 0.5, 0.6, 2.0, 2.5, 0.05


def truth(d: float) -> tuple[float, float]:
    sv = np.sqrt(1 + SB ** 2)
    eer = float(ndtr(-d / (2 * sv)))
    f = lambda t: (P * ndtr((t - d) / sv) + (1 - P) * ndtr(-t / sv)) / min(P, 1 - P)
    r = minimize_scalar(f, bounds=(-5, 10), method="bounded", options={"xatol": 1e-10})
    return eer, float(r.fun)


def simulate(n_spk: int, rng: np.random.Generator) -> pd.DataFrame:
    n_t, n_n = 10, 40
    spk = np.repeat(np.arange(n_spk), n_t + n_n)
    y = np.tile(np.r_[np.ones(n_t), np.zeros(n_n)], n_spk)
    b = rng.normal(0, SB, n_spk)[spk]
    ea = rng.normal(size=spk.size)
    eb = RHO * ea + np.sqrt(1 - RHO ** 2) * rng.normal(size=spk.size)
    utt = np.arange(spk.size)
    a = pd.DataFrame({"utt": utt, "spk": spk, "label": y.astype(int), "system": "A", "score": DA * y + b + ea})
    bb = pd.DataFrame({"utt": utt, "spk": spk, "label": y.astype(int), "system": "B", "score": DB * y + b + eb})
    return pd.concat([a, bb], ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-sets", type=int, default=200)
    ap.add_argument("--n-boot", type=int, default=400)
    ap.add_argument("--sizes", type=int, nargs="+", default=[15, 30, 60])
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    (ea, ma), (eb, mb) = truth(DA), truth(DB)
    true = {"eer": ea - eb, "min_dcf": ma - mb}
    print(f"true differences A - B: EER {true['eer']:.5f}, minDCF {true['min_dcf']:.5f}")
    rows = []
    for n in args.sizes:
        t0 = time.time()
        keys = [(m, iv) for m in ("eer", "min_dcf") for iv in ("expanded", "percentile")]
        hits: dict = {k: [] for k in keys}
        width: dict = {k: [] for k in keys}
        pvals: dict = {m: [] for m in ("eer", "min_dcf")}
        for k in range(args.n_sets):
            d = simulate(n, np.random.default_rng([args.seed, n, k]))
            r = compare_systems(d, metrics=["eer", "min_dcf"], speaker="spk", trial="utt", n_boot=args.n_boot,
                                seed=[args.seed, n, k, 1])
            for _, row in r.iterrows():
                m = row["metric"]
                d = r.attrs["replicates"][(m, "A", "B")]
                pvals[m].append(row["p_value"])
                for iv in ("expanded", "percentile"):
                    if iv == "expanded":
                        lo, hi = expanded_percentile_interval(d[None, :], np.array([float(n)]), 0.95)
                    else:
                        lo, hi = percentile_interval(d[None, :], 0.95)
                    lo, hi = float(np.ravel(lo)[0]), float(np.ravel(hi)[0])
                    hits[(m, iv)].append(lo <= true[m] <= hi)
                    width[(m, iv)].append(hi - lo)
        for (m, iv) in keys:
            c = float(np.mean(hits[(m, iv)]))
            rows.append({"speakers": n, "metric": f"{m} difference", "interval": iv, "coverage": c,
                         "mc_se": float(np.sqrt(c * (1 - c) / len(hits[(m, iv)]))),
                         "mean_width": float(np.mean(width[(m, iv)])), "power p<0.05": float(np.mean(np.array(pvals[m]) < 0.05)),
                         "n_sets": len(hits[(m, iv)]), "seconds": round(time.time() - t0, 1)})
        print(pd.DataFrame(rows).to_string(index=False), flush=True)


if __name__ == "__main__":
    main()
