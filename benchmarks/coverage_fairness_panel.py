"""Coverage of the fairness-panel intervals (``sm.fairness_panel``) against closed-form truth.

Usage::

    PYTHONPATH=src nice -n 5 python3 benchmarks/coverage_fairness_panel.py [--n-sets 150] [--n-boot 300] [--fpr 0.05]

Model: two groups with ``n/2`` speakers each (n = 16, 30, 60), 10 target and 40 nontarget trials per
speaker, speaker effect ``b_j ~ N(0, σ_b²)`` (σ_b = 0.5) shared by both classes, trial noise N(0, 1):
group f targets ``N(2.5, v)``, nontargets ``N(0.3, v)``; group m targets ``N(2.0, v)``, nontargets
``N(0, v)`` in the speaker population, ``v = 1 + σ_b²``.  The threshold is the overall EER threshold of
the population (equal group weights): ``½Σ_g Φ((τ−d_g)/√v) = ½Σ_g Φ((m_g−τ)/√v)``; true per-group
rates at it give the true GARBE, FDR, Max/GeoMean and max/min.  ``--fpr F``: the operating point is instead
the threshold where the population's overall FPR is ``F`` (``½Σ_g Φ((m_g−τ)/√v) = F``; the panel's
``{"fpr": F}``), to check the intervals away from the EER (fairness over a range of operating points).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import ndtr

from scoremix.fairness.panel import fdr, garbe, max_geomean, max_min_ratio
from scoremix.resampling.intervals import percentile_interval

SB = 0.5
GROUPS = {"f": (2.5, 0.3), "m": (2.0, 0.0)}
MEASURES = ["GARBE", "FDR", "max/geomean FMR", "max/geomean FNMR", "max/min FNMR"]


def truth(fpr: float | None = None) -> dict[str, float]:
    sv = np.sqrt(1 + SB ** 2)
    pm = lambda t: np.mean([ndtr((t - d) / sv) for d, _ in GROUPS.values()])
    pf = lambda t: np.mean([ndtr((m - t) / sv) for _, m in GROUPS.values()])
    if fpr is None:
        tau = brentq(lambda t: pm(t) - pf(t), -5, 8, xtol=1e-14)
    else:
        tau = brentq(lambda t: pf(t) - fpr, -5, 8, xtol=1e-14)
    fnmr = np.array([ndtr((tau - d) / sv) for d, _ in GROUPS.values()])
    fmr = np.array([ndtr((m - tau) / sv) for _, m in GROUPS.values()])
    return {"GARBE": float(garbe(fmr, fnmr)), "FDR": float(fdr(fmr, fnmr)), "max/geomean FMR": float(max_geomean(fmr)),
            "max/geomean FNMR": float(max_geomean(fnmr)), "max/min FNMR": float(max_min_ratio(fnmr))}


def simulate(n_spk: int, rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for k, (grp, (d, m)) in enumerate(GROUPS.items()):
        for j in range(n_spk // 2):
            b = rng.normal(0, SB)
            rows.append(pd.DataFrame({"grp": grp, "speaker": f"{grp}{j}", "label": np.r_[np.ones(10), np.zeros(40)],
                                      "score": np.r_[d + b + rng.normal(size=10), m + b + rng.normal(size=40)]}))
    return pd.concat(rows, ignore_index=True)


def main() -> None:
    from scoremix.fairness.panel import fairness_panel

    ap = argparse.ArgumentParser()
    ap.add_argument("--n-sets", type=int, default=150)
    ap.add_argument("--n-boot", type=int, default=300)
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 30, 60])
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--fpr", type=float, default=None, help="operating point: overall FPR target (default: EER)")
    args = ap.parse_args()
    tr = truth(args.fpr)
    op = "eer" if args.fpr is None else {"fpr": args.fpr}
    op_name = "overall EER" if args.fpr is None else f"overall FPR {args.fpr:g}"
    print("truth:", {k: round(v, 5) for k, v in tr.items()})
    rows = []
    for n in args.sizes:
        t0 = time.time()
        hits: dict[tuple, list] = {(m, iv): [] for m in MEASURES for iv in ("expanded", "percentile")}
        for k in range(args.n_sets):
            d = simulate(n, np.random.default_rng([args.seed, n, k]))
            p = fairness_panel(d, "grp", speaker="speaker", n_boot=args.n_boot, seed=[args.seed, n, k, 1],
                               interval="expanded", operating_points=[op])
            t = p.table.set_index("measure")
            for m in MEASURES:
                hits[(m, "expanded")].append(bool(t.loc[m, "lo"] <= tr[m] <= t.loc[m, "hi"]))
                lo, hi = percentile_interval(p.replicates[f"{op_name}: {m}"][None, :], 0.95)
                hits[(m, "percentile")].append(bool(np.ravel(lo)[0] <= tr[m] <= np.ravel(hi)[0]))
        for (m, iv), h in hits.items():
            c = float(np.mean(h))
            rows.append({"speakers": n, "measure": m, "interval": iv, "coverage": c,
                         "mc_se": float(np.sqrt(c * (1 - c) / len(h))), "n_sets": len(h),
                         "seconds": round(time.time() - t0, 1)})
        print(pd.DataFrame(rows).to_string(index=False), flush=True)


if __name__ == "__main__":
    main()
