"""Coverage of the 95 % model-EER intervals (old speaker re-weighting vs parametric bootstrap) and
of the empirical EER interval, in a simulation with known truth (issue 11).

Usage::

    PYTHONPATH=src OPENBLAS_NUM_THREADS=1 python3 benchmarks/coverage_model_eer.py          # docs/intervals.md table
    PYTHONPATH=src OPENBLAS_NUM_THREADS=1 python3 benchmarks/coverage_model_eer.py --sets 30 --boot 100   # quick

Simulation (the one of ``tests/test_model_eer_interval.py``): ``n`` speakers with
``b_s ~ N(0, 0.5²)``, 40 target trials ``N(3 + b_s, 1)`` and 400 nontarget trials
``N(b_s, 1)`` per speaker; the fit is ``score ~ label + (1 | speaker)`` (REML); the truth is the
population EER ``Φ(−3 / (2 √(1 + 0.5²)))`` = 8.99 %.  Data set ``k`` of ``n`` speakers has seed
``1000 n + k``; every bootstrap of it seed ``k``.

Rows (coverage of the truth by the 95 % interval, median width in EER percentage points):

* ``speakers (old)``: :func:`scoremix.predictive.gof.model_eer_interval` — the conditional
  model EER's per-trial Gaussians re-weighted by resampled speakers (parameters fixed);
* ``parametric normal`` / ``basic`` / ``percentile``: :mod:`scoremix.predictive.param_boot` —
  simulate from the fit with new speakers, refit, recompute the model EER; bias-corrected normal
  (the default of ``model_eer``), basic or percentile interval on the logit scale, all at the
  expanded small-sample levels; for the conditional model EER (``conditional=True``, the tables'
  default) and the marginal one (``conditional=False``);
* ``empirical``: :func:`scoremix.predictive.gof.empirical_eer_interval` (speaker-cluster
  bootstrap of the ROCCH EER, expanded percentile interval).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd
from scipy.stats import norm
from tqdm.auto import tqdm

from scoremix import lmer
from scoremix.predictive import predictive
from scoremix.predictive.gof import empirical_eer_interval, model_eer_interval
from scoremix.predictive.param_boot import PARAMETRIC_KINDS, parametric_interval, parametric_refits, population_eer

D, SD_B = 3.0, 0.5
TRUE_EER = float(norm.cdf(-D / (2 * np.sqrt(1 + SD_B ** 2))))


def simulate(n_spk: int, seed: int, n_tar: int = 40, n_non: int = 400) -> pd.DataFrame:
    """The test's simulation: speaker effects N(0, SD_B²), classes N(b, 1) and N(D + b, 1)."""
    rng = np.random.default_rng(seed)
    spk = np.repeat(np.arange(n_spk), n_tar + n_non)
    y = np.tile(np.r_[np.ones(n_tar), np.zeros(n_non)], n_spk)
    b = rng.normal(0, SD_B, n_spk)
    return pd.DataFrame({"speaker": [f"s{j:02d}" for j in spk], "label": np.where(y == 1, "target", "nontarget"),
                         "score": D * y + b[spk] + rng.normal(size=y.size)})


def one_set(n_spk: int, k: int, n_boot: int) -> dict[str, tuple[float, float]]:
    """All intervals of data set ``k``: name → (lo, hi)."""
    df = simulate(n_spk, 1000 * n_spk + k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = lmer("score ~ label + (1 | speaker)", df)
    mask = np.ones(len(df), bool)
    spk = pd.factorize(df["speaker"], sort=True)[0]
    pc = predictive(fit, data=df)
    pm = predictive(fit, data=df, conditional=False)
    e_c, e_m = float(pc.eer()[0]), float(pm.eer()[0])
    truth_hat = float(population_eer(fit, [mask], data=df)[0])
    reps_c, reps_m = np.empty(n_boot), np.empty(n_boot)
    for r, refit in enumerate(parametric_refits(fit, n_boot, seed=k, progress=False)):
        reps_c[r] = float(predictive(refit, data=df).eer()[0])
        reps_m[r] = float(predictive(refit, data=df, conditional=False).eer()[0])
    emp = empirical_eer_interval(df["score"].to_numpy(), (df["label"] == "target").to_numpy(), spk, n_boot=n_boot,
                                 seed=k)
    out = {"speakers (old), conditional": model_eer_interval(pc, mask, spk, n_boot=n_boot, seed=k)}
    for mode, e, reps in (("conditional", e_c, reps_c), ("marginal", e_m, reps_m)):
        for kind in PARAMETRIC_KINDS:
            out[f"parametric {kind}, {mode}"] = parametric_interval(e, reps, truth_hat, n_spk, kind=kind)
    out["empirical (speaker bootstrap)"] = (emp["lo"], emp["hi"])
    return out


def markdown(t: pd.DataFrame) -> str:
    """A markdown table of ``t`` (row labels first; two decimals)."""
    cols = [str(c) for c in t.columns]
    lines = ["| " + " | ".join([t.index.name or "", *cols]) + " |", "|---" + "|---:" * len(cols) + "|"]
    for i, r in t.iterrows():
        lines.append("| " + " | ".join([str(i), *(f"{v:.2f}" for v in r)]) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speakers", type=int, nargs="+", default=[5, 10, 30])
    ap.add_argument("--sets", type=int, default=100, help="data sets per size")
    ap.add_argument("--boot", type=int, default=200, help="refits / bootstrap replicates per data set")
    ap.add_argument("--csv", help="also save the per-data-set intervals here")
    a = ap.parse_args()
    t0 = time.perf_counter()
    long = []
    for n in a.speakers:
        for k in tqdm(range(a.sets), desc=f"{n} speakers"):
            for name, (lo, hi) in one_set(n, k, a.boot).items():
                long.append(dict(speakers=n, set=k, interval=name, lo=lo, hi=hi))
    d = pd.DataFrame(long)
    d["covers"] = (d["lo"] <= TRUE_EER) & (TRUE_EER <= d["hi"])
    d["below"] = d["hi"] < TRUE_EER
    d["width_pp"] = 100 * (d["hi"] - d["lo"])
    tab = d.groupby(["interval", "speakers"], sort=False).agg(coverage=("covers", "mean"), misses_below=("below", "mean"),
                                                              median_width_pp=("width_pp", "median"))
    cov = tab["coverage"].unstack("speakers")
    wid = tab["median_width_pp"].unstack("speakers")
    print(f"truth: population EER {100 * TRUE_EER:.2f} %; {a.sets} data sets per size, {a.boot} refits / replicates "
          f"each; {time.perf_counter() - t0:.0f} s")
    print("\n95 % interval coverage (speakers per data set in columns):")
    print(markdown(cov))
    print("\nshare of data sets whose interval lies below the truth:")
    print(markdown(tab["misses_below"].unstack("speakers")))
    print("\nmedian width (EER percentage points):")
    print(markdown(wid))
    if a.csv:
        d.to_csv(a.csv, index=False)


if __name__ == "__main__":
    main()
