"""Coverage of posterior intervals of bayes_lmer(..., transform=...) over seeded simulations.

Scores ``round(expit(1.5 z), 2)`` of a latent LMM (``tests/test_bayes_transform.simulate``:
101 tied cells, saturated at 0 and 1, a male target shift), transform fixed at the true
cells.  For every seed: does the 95 % interval of the conditional posterior EER, and of each
sex's ``ratio_overall``, contain the truth (the measures of the true per-trial latent
Gaussians)?  Prints the coverage per quantity (binomial SE beside it).

Usage::

    PYTHONPATH=src python3 benchmarks/bayes_transform_coverage.py [--seeds 20] [--n 800]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_bayes_transform import simulate  # noqa: E402

from scoremix.bayes import bayes_lmer  # noqa: E402
from scoremix.fairness import posterior_subgroup_dcf  # noqa: E402
from scoremix.fairness.model_measures import gaussian_mixture_measures  # noqa: E402
from scoremix.model_eer import model_eer  # noqa: E402
from scoremix.predictive.mixture import mixture_eer  # noqa: E402


def one(seed: int, n: int) -> dict[str, bool]:
    df, tr, mean, y, sex = simulate(seed, n=n, n_spk=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_lmer("score ~ label * sex + (1 | speaker)", df, dispersion="~ label", transform=tr,
                         draws=300, tune=300, chains=1, cores=1, seed=seed, progress=False)
        pe = model_eer(res, progress=False, n_boot=0, level=0.95)
        fair = posterior_subgroup_dcf(res, df, ["sex"], max_draws=150, n_boot=0, ci=0.95, random="marginal")
    sd = np.where(y, 0.8, 1.0)
    true_eer = mixture_eer(mean[~y], sd[~y], mean[y], sd[y])
    lo, hi = pe.interval_columns
    s = pe.summary.loc["all"]
    W = np.vstack([np.ones(len(df)), sex == "f", sex == "m"]).astype(float)
    sdm = np.sqrt(sd ** 2 + 0.25)  # new speakers: the population truth
    truth = gaussian_mixture_measures(df["fixed"].to_numpy()[None, :], sdm[None, :], y.astype(bool), W)
    t = fair.table.set_index("subgroup")
    out = {"eer": bool(s[lo] <= true_eer <= s[hi])}
    for k, g in enumerate(["f", "m"]):
        out[f"ratio_overall[{g}]"] = bool(t.loc[g, "ratio_overall_lo"] <= truth["ratio_overall"][k, 0]
                                          <= t.loc[g, "ratio_overall_hi"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--n", type=int, default=800)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = [one(seed, args.n) for seed in tqdm(range(args.seeds), desc="seeds")]
    for key in rows[0]:
        c = np.mean([r[key] for r in rows])
        print(f"{key:22s} coverage {100 * c:5.1f} %  (± {100 * np.sqrt(c * (1 - c) / len(rows)):.1f}, "
              f"nominal 95 %)")
    print(f"{args.seeds} seeds in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
