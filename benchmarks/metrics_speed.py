"""Speed of scoremix.metrics on simulated trials (default 10 million).

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/metrics_speed.py [--n 10000000] [--repeat 3]

Simulates N trials, 10 % positives, scores N(0, 1) for negatives and N(2, 1) for
positives rounded to 6 decimals (so there are ties, as in real score files), then
times each EER method, min_dcf, det_curve, rates_at (1000 thresholds) and min_cllr,
printing the best of ``--repeat`` wall-clock times.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from scoremix.metrics import EER_METHODS, det_curve, eer, min_cllr, min_dcf, rates_at


def best_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    y = (rng.random(args.n) < 0.1).astype(np.int8)
    s = np.round(rng.normal(size=args.n) + 2.0 * y, 6)
    print(f"N = {args.n:,} trials ({int(y.sum()):,} positive), "
          f"{np.unique(s).size:,} distinct scores; best of {args.repeat}")

    rows: list[tuple[str, float, str]] = []
    for m in EER_METHODS:
        t, v = best_time(lambda m=m: eer(s, y, m), args.repeat)
        rows.append((f"eer({m!r})", t, f"{v:.6f}"))
    t, v = best_time(lambda: min_dcf(s, y), args.repeat)
    rows.append(("min_dcf(p=0.05)", t, f"{v.value:.6f}"))
    t, v = best_time(lambda: det_curve(s, y), args.repeat)
    rows.append(("det_curve", t, f"{len(v):,} points"))
    taus = np.linspace(-3, 5, 1000)
    t, v = best_time(lambda: rates_at(s, y, taus), args.repeat)
    rows.append(("rates_at(1000 thr)", t, ""))
    t, v = best_time(lambda: min_cllr(s, y), args.repeat)
    rows.append(("min_cllr", t, f"{v:.6f}"))

    print(f"{'call':<20} {'seconds':>8}  value")
    for name, sec, val in rows:
        print(f"{name:<20} {sec:8.3f}  {val}")


if __name__ == "__main__":
    main()
