"""Speed of ``lmer(..., transform="monotone")``, with ``ordinal::clmm`` side by side.

1. LA eval, one system (71,237 rows), ``score ~ label + (1|speaker) + (0 + dummy(label,
   "spoof")|attack)``, ``dispersion="~ label"``: wall and CPU seconds.
2. 1,000,000 simulated rows (500 speakers, 20 attacks, continuous scores → 1M cells, the
   sieve): same formula.
3. The same LA rows binned into 40 pooled-quantile bins, ``bin ~ label + (1|speaker) +
   (1|attack)`` (clmm has no scale model and only random intercepts): scoremix vs
   ``ordinal::clmm`` (Laplace) on ``--clmm-rows`` rows (a seeded subsample; clmm is slow:
   on 10,000 rows it had not finished after 2.2 CPU minutes).

Wall time on a shared machine is noisy; CPU seconds (``time.process_time``) are printed
beside it.  Usage::

    PYTHONPATH=src python3 benchmarks/transform_speed.py [--skip-1m] [--clmm-rows 2000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm

HERE = Path(__file__).resolve().parent
LA = HERE.parent.parent / "shared" / "data" / "asvspoof2019_la_eval" / \
    "asvspoof2019_la_eval_multisystem_long.csv.gz"
FORMULA = 'score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def simulate(n: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, 500, n)
    att = rng.integers(0, 20, n)
    spoof = rng.random(n) < 0.9
    z = (np.where(spoof, -3.0, 0.0) + rng.normal(0, 0.4, 500)[spk]
         + np.where(spoof, rng.normal(0, 1.0, 20)[att], 0.0)
         + rng.standard_t(5, n) * np.where(spoof, 1.4, 1.0))
    return pd.DataFrame(dict(score=np.sinh(z), label=np.where(spoof, "spoof", "bonafide"),
                             speaker=spk.astype(str), attack=np.where(spoof, att.astype(str), "bonafide")))


def fit_row(label: str, name: str, data: pd.DataFrame) -> tuple:
    """Time one transformation fit of FORMULA on ``data``, print it and return its table row."""
    fit, wall, cpu = timed(lambda: sm.lmer(FORMULA, data, dispersion="~ label", transform="monotone"))
    info = fit.fit_info["transform"]
    print(f"{name}: {len(data)} rows, {info['n_cells']} cells, wall {wall:.2f}s, cpu {cpu:.2f}s, "
          f"{info['n_eval']} evaluations, converged={info['converged']}", flush=True)
    return (label, len(data), wall, cpu, info["n_eval"], info["converged"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="rawgat_st_add")
    ap.add_argument("--skip-1m", action="store_true")
    ap.add_argument("--clmm-rows", type=int, default=2000)
    args = ap.parse_args()
    rows = []
    if LA.exists():
        long = pd.read_csv(LA)
        d = long[long["system"] == args.system].reset_index(drop=True)
        rows.append(fit_row("LA 71k, speaker+attack, dispersion", f"LA {args.system}", d))
    else:
        print(f"LA data not found at {LA}; skipping")
        d = None
    if not args.skip_1m:
        big = simulate(1_000_000)
        rows.append(fit_row("simulated 1M, speaker+attack, dispersion", "1M simulated", big))
        del big
    if d is not None:
        sub = d.sample(n=min(args.clmm_rows, len(d)), random_state=1).reset_index(drop=True)
        cuts = np.quantile(sub["score"], np.linspace(0, 1, 41)[1:-1])
        sub["bin"] = np.searchsorted(np.unique(cuts), sub["score"], side="left") + 1
        f_b = "bin ~ label + (1|speaker) + (1|attack)"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit, wall, cpu = timed(lambda: sm.lmer(f_b, sub, transform="monotone"))
        rows.append((f"binned 40, {len(sub)} rows, scoremix", len(sub), wall, cpu,
                     fit.fit_info["transform"]["n_eval"], fit.fit_info["transform"]["converged"]))
        print(f"binned ({len(sub)} rows, {sub['bin'].nunique()} bins): scoremix wall {wall:.2f}s cpu {cpu:.2f}s "
              f"loglik {fit.loglik:.3f} beta {fit.fixef['labelspoof']:.5f} "
              f"sd {np.sqrt(fit.varcorr['vcov'].iloc[:2].to_numpy())}", flush=True)
        if shutil.which("Rscript"):
            with tempfile.TemporaryDirectory() as tmp:
                csv = Path(tmp) / "d.csv"
                sub[["bin", "label", "speaker", "attack"]].to_csv(csv, index=False)
                out = Path(tmp) / "o.json"
                t0 = time.perf_counter()
                subprocess.run(["Rscript", str(HERE.parent / "r_scripts" / "fit_clm.R"), str(csv),
                                str(out), "clmm_formula", f_b], check=True)
                r_wall = time.perf_counter() - t0
                ref = json.loads(out.read_text())
            rows.append((f"binned 40, {len(sub)} rows, ordinal::clmm", len(sub), r_wall, ref["seconds"],
                         None, True))
            print(f"ordinal::clmm: wall {r_wall:.2f}s (R elapsed in clmm {ref['seconds']:.2f}s) "
                  f"loglik {ref['loglik']:.3f} beta {ref['beta']:.5f} sd {ref['sd']}", flush=True)
        else:
            print("Rscript not found: clmm comparison skipped")
    print()
    print(pd.DataFrame(rows, columns=["case", "rows", "wall_s", "cpu_s", "n_eval", "converged"])
          .to_string(index=False, float_format="%.2f"))


if __name__ == "__main__":
    main()
