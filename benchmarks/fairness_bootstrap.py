"""Benchmark: speaker-level cluster bootstrap of all SVEva measures.

VoxCeleb1-H-sized simulated table: 580,000 trials, 1,251 enrolment speakers,
18 subgroups (2 sexes x 9 nationalities), half target trials, EER about 2 %, scores
rounded to 4 decimals (ties).  Times ``subgroup_dcf(..., n_boot=B)`` for the point
estimate and B bootstrap replicates, with and without EERs.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/fairness_bootstrap.py [--n-boot 1000] [--n 580000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from scoremix.fairness import subgroup_dcf


def make_table(n: int, n_speakers: int = 1251, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, n_speakers, n)
    sex = np.where(np.arange(n_speakers) % 2 == 0, "f", "m")[spk]
    nat_levels = np.array([f"n{k}" for k in range(9)])
    nat = nat_levels[(np.arange(n_speakers) * 7 % 9)][spk]
    shift = rng.normal(0, 0.3, n_speakers)[spk] + (sex == "f") * 0.2
    y = rng.random(n) < 0.5
    score = np.round(rng.normal(0, 1, n) + 4.1 * y + shift * y - 0.5 * shift * (~y), 4)
    return pd.DataFrame({"speaker": spk, "sex": sex, "nationality": nat,
                         "label": np.where(y, "target", "nontarget"), "score": score})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=580_000)
    ap.add_argument("--n-boot", type=int, default=1000)
    args = ap.parse_args()
    df = make_table(args.n)
    for with_eer in (False, True):
        t0 = time.perf_counter()
        res = subgroup_dcf(df, ["sex", "nationality"], n_boot=0, eer=with_eer, progress=False)
        t1 = time.perf_counter()
        res = subgroup_dcf(df, ["sex", "nationality"], n_boot=args.n_boot, random_state=1, eer=with_eer,
                           progress=False)
        t2 = time.perf_counter()
        print(f"n={args.n} subgroups={len(res.table)} eer={with_eer}: point {t1 - t0:.2f} s, "
              f"point + {args.n_boot} replicates {t2 - t1:.2f} s; FI {res.fairness_index:.3f} "
              f"CI {res.fairness_index_ci[0]:.3f}-{res.fairness_index_ci[1]:.3f}")


if __name__ == "__main__":
    main()
