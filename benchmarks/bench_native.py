"""Timing of the native LMM engine on a simulated crossed detector table.

``score ~ label + x + (1 | speaker) + (1 | attack)`` with 1000 speakers × 13 attacks;
reports the time to form the cross-products and to optimise (the ModelSpec is built by hand,
so formula parsing is excluded).  Run: ``python benchmarks/bench_native.py [N ...]``.
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np
import pandas as pd

from scoremix.lme import native
from scoremix.lme.spec import ModelSpec, RandomTerm


def simulate_spec(n: int, seed: int = 1) -> ModelSpec:
    rng = np.random.default_rng(seed)
    ns, na = 1000, 13
    spk = rng.integers(0, ns, n)
    att = rng.integers(0, na, n)
    label = rng.binomial(1, 0.5, n).astype(float)
    x = rng.standard_normal(n)
    y = (-1 + 3 * label + 0.2 * x + rng.normal(0, 0.5, ns)[spk] + rng.normal(0, 2, na)[att]
         + rng.standard_normal(n))
    X = np.column_stack([np.ones(n), label, x])
    one = np.ones((n, 1))
    terms = [RandomTerm("speaker", "speaker", ["(Intercept)"], spk, [f"s{i:04d}" for i in range(ns)], one),
             RandomTerm("attack", "attack", ["(Intercept)"], att, [f"A{i:02d}" for i in range(na)], one)]
    return ModelSpec("score ~ label + x + (1 | speaker) + (1 | attack)", "score", y, X,
                     ["(Intercept)", "label", "x"], terms, pd.DataFrame(index=pd.RangeIndex(n)))


def main(sizes: list[int]) -> None:
    for n in sizes:
        spec = simulate_spec(n)
        best = None
        for _ in range(3):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = native.fit(spec)
            tot = time.perf_counter() - t0
            if best is None or tot < best[0]:
                best = (tot, m.fit_info)
        tot, fi = best
        print(f"N={n:>8d}: total {tot:.3f} s (cross-products {fi['time_crossproducts']:.3f} s, "
              f"optimise {fi['time_optimize']:.3f} s in {fi['n_eval']} evaluations, "
              f"finalise {fi['time_finalize']:.3f} s)")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [20_000, 200_000, 1_000_000])
