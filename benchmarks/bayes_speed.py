"""Speed of Bayesian crossed-LMM fits: min bulk-ESS per second and wall time.

Simulated ASVspoof-like data (67 speakers × 13 attacks + bona fide, label effect, class
dispersion off) fitted with ``score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)``.

Contenders:
  rows      naive per-row PyMC model (bayes_lmer method="joint", likelihood="rows", PyMC NUTS)
  joint     joint model on sufficient statistics (PyMC NUTS)
  collapsed scoremix default (β, b integrated out, PyMC NUTS)
  nutpie    collapsed model with nutpie (if installed)
  numpyro   collapsed model with numpyro (if installed)
  bambi     bambi's default model (if installed)

Usage::

    python benchmarks/bayes_speed.py                       # everything at 20k, 100k, 1M
    python benchmarks/bayes_speed.py --n 20000 --only rows collapsed --draws 500 --chains 2
    # the run documented in docs/bayes.md ("Performance"):
    python benchmarks/bayes_speed.py --n 20000 100000 1000000 --draws 500 --tune 500 \
        --chains 2 --cores 2 --max-rows-naive 20000

Reported per run: cold wall seconds (formula/model frame + sufficient statistics + model
build + compilation + sampling), the sampler's own sampling time (warm-up + draws, from
``sample_stats.attrs["sampling_time"]``; PyMC's sampler and bambi record it, nutpie and
numpyro through PyMC do not: NaN), the warm refit time, min bulk ESS over the scalar
parameters, min bulk ESS / wall, max R-hat and divergent transitions.

Every contender runs with the same draws/tune/chains/cores. Each scoremix fit starts cold
in-process (the model cache is cleared, so the model is rebuilt and, for nutpie, recompiled to
numba; PyTensor's on-disk C cache is warm after the first run of a model). The suffstats
contenders (joint, collapsed, nutpie, numpyro) are then refitted once with the cached model
(``refit_s``: the cost of a further fit of the same model shape, e.g. with new data or priors);
``--no-refit`` skips that. ESS/s is always min bulk ESS / cold wall time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

FORMULA = 'score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'
ALL = ["rows", "joint", "collapsed", "nutpie", "numpyro", "bambi"]


def simulate(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, 67, n)
    spoof = rng.random(n) < 0.9
    att = np.where(spoof, rng.integers(0, 13, n), -1)
    y = (2.0 - 4.0 * spoof + rng.normal(0, 0.5, 67)[spk]
         + np.where(spoof, rng.normal(0, 1.5, 13)[np.maximum(att, 0)], 0.0) + rng.normal(0, 1.0, n))
    return pd.DataFrame({
        "score": y,
        "label": np.where(spoof, "spoof", "bonafide"),
        "speaker": [f"S{i:03d}" for i in spk],
        "attack": np.where(spoof, [f"A{i:02d}" for i in np.maximum(att, 0)], "bonafide"),
    })


def _sampling_time(idata) -> float:
    """Seconds the sampler itself reports (warm-up + draws); NaN when it records none."""
    ss = getattr(idata, "sample_stats", None)
    t = None if ss is None else ss.attrs.get("sampling_time")
    return float(t) if t is not None else float("nan")


def run_scoremix(df, kind, draws, tune, chains, seed, cores, refit):
    from scoremix.bayes import BayesConvergenceWarning, bayes_lmer
    from scoremix.bayes.cache import clear_model_cache

    clear_model_cache()
    kw = dict(draws=draws, tune=tune, chains=chains, seed=seed, progress=False,
              cores=cores)
    if kind == "rows":
        kw.update(method="joint", likelihood="rows")
    elif kind == "joint":
        kw.update(method="joint", likelihood="suffstats")
    elif kind in ("nutpie", "numpyro"):
        kw.update(sampler=kind)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BayesConvergenceWarning)
        res = bayes_lmer(FORMULA, df, **kw)
        wall = time.perf_counter() - t0
        refit_s = float("nan")
        if refit and kind != "rows":
            t1 = time.perf_counter()
            bayes_lmer(FORMULA, df, **kw)
            refit_s = time.perf_counter() - t1
    clear_model_cache()
    d = res.diagnostics
    return wall, _sampling_time(res.idata), refit_s, d.min_ess_bulk, d.max_rhat, d.n_divergent


def run_bambi(df, draws, tune, chains, seed, cores):
    import arviz as az
    import bambi as bmb

    d = df.assign(spoof=(df["label"] == "spoof").astype(float))
    t0 = time.perf_counter()
    m = bmb.Model("score ~ label + (1|speaker) + (0 + spoof|attack)", d)
    idata = m.fit(draws=draws, tune=tune, chains=chains, cores=cores, random_seed=seed,
                  progressbar=False)
    wall = time.perf_counter() - t0
    # scalar parameters only (as for scoremix): fixed effects and the variance parameters
    scalars = [v for v in idata.posterior.data_vars if idata.posterior[v].ndim == 2]
    s = az.summary(idata, var_names=scalars, kind="diagnostics")
    n_div = int(np.asarray(idata.sample_stats["diverging"]).sum())
    return wall, _sampling_time(idata), float("nan"), float(s["ess_bulk"].min()), float(s["r_hat"].max()), n_div


def _preimport(kinds) -> None:
    """Import every contender's libraries before any clock starts.

    Otherwise the first timed fit of a process pays for importing PyMC/PyTensor (seconds),
    and nutpie/numpyro runs pay for importing numba/JAX.
    """
    import pymc  # noqa: F401

    import scoremix.bayes  # noqa: F401

    for kind, mods in (("nutpie", ["nutpie"]), ("numpyro", ["jax", "numpyro"]), ("bambi", ["bambi"])):
        if kind in kinds and importlib.util.find_spec(mods[-1]) is not None:
            for m in mods:
                importlib.import_module(m)


def main() -> None:
    ap = argparse.ArgumentParser(description="bulk-ESS/s of Bayesian crossed LMM fits")
    ap.add_argument("--n", type=int, nargs="+", default=[20_000, 100_000, 1_000_000])
    ap.add_argument("--only", nargs="+", choices=ALL, default=ALL)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cores", type=int, default=1,
                    help="parallel chains for every contender (1: sequential, fair on a busy machine)")
    ap.add_argument("--no-refit", action="store_true",
                    help="skip the warm refit of the suffstats contenders")
    ap.add_argument("--csv", default=None, help="also write the table to this CSV file")
    ap.add_argument("--max-rows-naive", type=int, default=100_000,
                    help="skip the per-row contenders (rows, bambi) above this N")
    args = ap.parse_args()
    _preimport(args.only)
    out = []
    for n in args.n:
        df = simulate(n, args.seed)
        for kind in args.only:
            if kind in ("rows", "bambi") and n > args.max_rows_naive:
                print(f"N={n:>9,} {kind:<9} skipped (--max-rows-naive)")
                continue
            if kind in ("nutpie", "numpyro") and importlib.util.find_spec(kind) is None:
                print(f"N={n:>9,} {kind:<9} not installed")
                continue
            if kind == "bambi" and importlib.util.find_spec("bambi") is None:
                print(f"N={n:>9,} {kind:<9} not installed")
                continue
            if kind == "bambi":
                r = run_bambi(df, args.draws, args.tune, args.chains, args.seed, args.cores)
            else:
                r = run_scoremix(df, kind, args.draws, args.tune, args.chains, args.seed,
                                 args.cores, not args.no_refit)
            wall, samp, refit_s, ess, rhat, n_div = r
            out.append((n, kind, wall, samp, refit_s, ess, ess / wall, rhat, n_div))
            print(f"N={n:>9,} {kind:<9} wall {wall:8.1f} s (sampling {samp:7.1f} s, "
                  f"refit {refit_s:7.1f} s)  "
                  f"min bulk ESS {ess:7.0f}  ESS/s {ess / wall:8.2f}  max R-hat {rhat:.3f}  "
                  f"divergences {n_div}", flush=True)
    if out:
        tab = pd.DataFrame(out, columns=["n", "method", "wall_s", "sampling_s", "refit_s",
                                         "min_ess_bulk", "ess_per_s", "max_rhat", "divergences"])
        print()
        print(tab.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        if args.csv:
            tab.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
