"""Coverage of the paired speaker-cluster bootstrap intervals of ``sm.compare_systems``
(differences of EER and minDCF between two correlated systems) against closed-form truth.

Usage::

    PYTHONPATH=src nice -n 5 python3 benchmarks/coverage_compare.py [--n-sets 500] [--n-boot 400] [--out per_set.csv]

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
from scipy.stats import norm

from scoremix.compare_systems import compare_systems
from scoremix.resampling.intervals import (
    expanded_percentile_interval,
    expanded_z,
    percentile_interval,
    shift_t_interval,
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


INTERVALS = ("expanded", "scaled", "percentile", "t-se", "basic", "shift-t")


def intervals_of(point: float, d: np.ndarray, n: int, level: float = 0.95) -> dict[str, tuple[float, float]]:
    """Every candidate interval of one difference from the same replicates ``d`` (``n`` speakers):
    ``expanded`` (Hesterberg), ``percentile``, ``t-se`` (``d̂ ± √(n/(n−1))·t_{n−1}·sd(d*)``, the
    interval that matches compare_systems' p-value), ``basic`` (``2d̂ − Q``), ``shift-t``
    (expanded, shifted by twice the bootstrap bias) and ``scaled`` (percentiles at
    ``Φ(∓z_{1−α/2}·√(n/(n−1)))``: the bootstrap's ``(n−1)/n`` variance corrected, normal tails — the
    tail levels of the resampling layer's studentised interval of minima)."""
    d = d[np.isfinite(d)]
    lo_e, hi_e = expanded_percentile_interval(d[None, :], np.array([float(n)]), level)
    lo_p, hi_p = percentile_interval(d[None, :], level)
    lo_s, hi_s = shift_t_interval(np.array([point]), d[None, :], np.array([float(n)]), level)
    half = float(expanded_z(np.array([float(n)]), level)[0] * np.std(d, ddof=1))
    q = np.quantile(d, [(1 - level) / 2, (1 + level) / 2])
    qs = scaled_levels(n, level)
    sc = np.quantile(d, [qs, 1 - qs])
    f = lambda x: float(np.ravel(x)[0])
    return {"expanded": (f(lo_e), f(hi_e)), "percentile": (f(lo_p), f(hi_p)),
            "t-se": (point - half, point + half), "basic": (2 * point - q[1], 2 * point - q[0]),
            "shift-t": (f(lo_s), f(hi_s)), "scaled": (float(sc[0]), float(sc[1]))}


def scaled_levels(n: int, level: float = 0.95) -> float:
    """Lower tail level ``Φ(−z_{(1+level)/2}·√(n/(n−1)))`` of the ``scaled`` interval."""
    return float(norm.cdf(-norm.ppf(0.5 + level / 2) * np.sqrt(n / (n - 1))))


def run_cell(n: int, n_sets: int, n_boot: int, seed: int, true: dict, save: str | None = None) -> pd.DataFrame:
    """One row per data set × metric × interval (estimate, bootstrap bias, interval, hit); with
    ``save``, the rows so far are written there every 50 data sets (a long run can be read early)."""
    out = []
    reps_all: dict[str, list[np.ndarray]] = {"eer": [], "min_dcf": []}
    for k in range(n_sets):
        if save and k and k % 50 == 0:
            pd.DataFrame(out).to_csv(save, index=False)
            np.savez_compressed(save + ".replicates.npz", **{m: np.array(v) for m, v in reps_all.items()})
        d = simulate(n, np.random.default_rng([seed, n, k]))
        r = compare_systems(d, metrics=["eer", "min_dcf"], speaker="spk", trial="utt", n_boot=n_boot,
                            seed=[seed, n, k, 1])
        for _, row in r.iterrows():
            m = row["metric"]
            reps = r.attrs["replicates"][(m, "A", "B")]
            reps_all[m].append(reps)
            for iv, (lo, hi) in intervals_of(float(row["difference"]), reps, n).items():
                out.append({"speakers": n, "set": k, "metric": m, "interval": iv, "estimate": row["difference"],
                            "boot_bias": float(np.nanmean(reps)) - row["difference"], "lo": lo, "hi": hi,
                            "hit": lo <= true[m] <= hi, "p_value": row["p_value"]})
    if save:
        np.savez_compressed(save + ".replicates.npz", **{m: np.array(v) for m, v in reps_all.items()})
    return pd.DataFrame(out)


def summarise(per_set: pd.DataFrame, true: dict) -> pd.DataFrame:
    """Coverage, its Monte-Carlo SE, misses below/above, mean width, bias of the estimate and power per cell."""
    rows = []
    for (n, m, iv), g in per_set.groupby(["speakers", "metric", "interval"], sort=True):
        c = float(g["hit"].mean())
        rows.append({"speakers": n, "metric": f"{m} difference", "interval": iv, "coverage": round(c, 3),
                     "mc_se": round(float(np.sqrt(c * (1 - c) / len(g))), 3),
                     "miss_low": round(float(np.mean(g["hi"] < true[m])), 3),
                     "miss_high": round(float(np.mean(g["lo"] > true[m])), 3),
                     "mean_width": round(float(np.mean(g["hi"] - g["lo"])), 4),
                     "bias": round(float(g["estimate"].mean() - true[m]), 4),
                     "boot_bias": round(float(g["boot_bias"].mean()), 4),
                     "power p<0.05": round(float(np.mean(g["p_value"] < 0.05)), 3), "n_sets": len(g)})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-sets", type=int, default=500)
    ap.add_argument("--n-boot", type=int, default=400)
    ap.add_argument("--sizes", type=int, nargs="+", default=[15, 30, 60])
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", default=None, help="CSV of the per-data-set rows (appended cell by cell)")
    args = ap.parse_args()
    (ea, ma), (eb, mb) = truth(DA), truth(DB)
    true = {"eer": ea - eb, "min_dcf": ma - mb}
    print(f"true differences A - B: EER {true['eer']:.5f}, minDCF {true['min_dcf']:.5f}")
    parts = []
    for n in args.sizes:
        t0 = time.time()
        parts.append(run_cell(n, args.n_sets, args.n_boot, args.seed, true,
                              save=f"{args.out}.{n}.partial" if args.out else None))
        print(f"{n} speakers: {time.time() - t0:.0f} s", flush=True)
        allp = pd.concat(parts, ignore_index=True)
        if args.out:
            allp.to_csv(args.out, index=False)
        print(summarise(allp, true).to_string(index=False), flush=True)


if __name__ == "__main__":
    main()
