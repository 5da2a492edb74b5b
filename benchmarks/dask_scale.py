"""One mixed model on 10M / 30M / 100M trials from partitioned parquet files, on Dask.

For each size N the script

1. generates N trials *partition by partition* (``--partition-rows`` rows per parquet file,
   partition ``j`` from ``numpy.random.default_rng([seed, N, j])``; the generator never
   holds more than one partition): 2000 speakers, 13 attacks, a class label, a covariate
   ``x`` and ``score = μ(label, x) + u_speaker + 1{spoof}·v_attack + ε`` with known effects;
2. fits ``score ~ label * x + (1|speaker) + (0 + dummy(label, "spoof")|attack)`` (REML) with
   ``sm.lmer`` on ``dd.read_parquet(<folder>/*.parquet)`` on
   ``LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="3GB")``, and computes
   ``sm.eer`` / ``sm.min_dcf`` on the same Dask frame;
3. where N ≤ ``--in-memory-max``, fits the same rows in memory (``pd.read_parquet`` +
   ``sm.lmer``) and computes ``sm.eer`` / ``sm.min_dcf`` in memory; above it, up to
   ``--in-memory-metrics-max``, only the metrics, on the score and label columns.

Every step runs in its own Python process, so its peak RSS (``ru_maxrss``) is its own:
"client" is the process that holds the Dask client (and the fit), "worker" the largest peak
of the two worker processes (asked through ``client.run``).  The table reports wall time,
peak client RSS, peak worker RSS and, beside the in-memory fit, the relative differences of
the REML criterion and fixed effects and whether EER/minDCF are equal.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/dask_scale.py --sizes 10e6 30e6 [100e6] \\
        --dir /tmp/scoremix-dask [--in-memory-max 3e7] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

FORMULA = 'score ~ label * x + (1|speaker) + (0 + dummy(label, "spoof")|attack)'
N_SPEAKERS = 2000
N_ATTACKS = 13


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB → GiB


# ----------------------------------------------------------------------------- generate
def generate(n: int, folder: Path, partition_rows: int, seed: int = 2026) -> dict:
    """Write ``n`` rows as parquet files of ``partition_rows`` rows each."""
    import pandas as pd
    from tqdm.auto import tqdm

    folder.mkdir(parents=True, exist_ok=True)
    truth = np.random.default_rng([seed, 0])
    u = truth.normal(0.0, 0.5, N_SPEAKERS)        # speaker effects
    v = truth.normal(0.0, 0.8, N_ATTACKS)         # attack effects (spoof trials only)
    spk = pd.Categorical.from_codes(np.arange(N_SPEAKERS), [f"S{i:04d}" for i in range(N_SPEAKERS)])
    att = [f"A{i:02d}" for i in range(N_ATTACKS)]
    n_parts = -(-n // partition_rows)
    for j in tqdm(range(n_parts), desc=f"generate {n:,} rows", leave=False):
        m = min(partition_rows, n - j * partition_rows)
        rng = np.random.default_rng([seed, n, j])
        s = rng.integers(0, N_SPEAKERS, m)
        spoof = rng.random(m) < 0.8
        a = np.where(spoof, rng.integers(0, N_ATTACKS, m), 0)
        x = rng.normal(0.0, 1.0, m)
        mu = np.where(spoof, -1.5, 2.0) + np.where(spoof, 0.3, 0.5) * x
        score = mu + u[s] + spoof * v[a] + rng.normal(0.0, 1.0, m)
        df = pd.DataFrame({
            "score": score, "x": x,
            "label": pd.Categorical(np.where(spoof, "spoof", "bonafide"), categories=["bonafide", "spoof"]),
            "speaker": pd.Categorical.from_codes(s, spk.categories),
            "attack": pd.Categorical(np.where(spoof, np.asarray(att, dtype=object)[a], "bonafide"),
                                     categories=["bonafide"] + att),
        })
        df.to_parquet(folder / f"part-{j:05d}.parquet", index=False)
    return dict(n=n, partitions=n_parts)


# ----------------------------------------------------------------------------- fits
def fit_dask(folder: Path, workers: int, memory_limit: str) -> dict:
    import warnings

    import dask.dataframe as dd
    from dask.distributed import Client, LocalCluster

    import scoremix as sm

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, memory_limit=memory_limit,
                           processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        ddf = dd.read_parquet(str(folder / "*.parquet"))
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = sm.lmer(FORMULA, ddf)
        t_fit = time.perf_counter() - t0
        rss_fit = _peak_rss_gb()
        worker_rss_fit = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20)
        t0 = time.perf_counter()
        e = dcf_value = dcf_thr = None
        metrics_error = None
        try:
            e = sm.eer(ddf.score, ddf.label)
            d = sm.min_dcf(ddf.score, ddf.label)
            dcf_value, dcf_thr = float(d.value), d.threshold
        except Exception as exc:  # report the fit even if the metrics fail
            metrics_error = f"{type(exc).__name__}: {exc}"[:300]
        t_metrics = time.perf_counter() - t0
        worker_rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20)
        return dict(wall_fit=t_fit, wall_metrics=t_metrics, client_rss_fit=rss_fit,
                    client_rss=_peak_rss_gb(), worker_rss_fit=max(worker_rss_fit.values()),
                    worker_rss=max(worker_rss.values()), metrics_error=metrics_error,
                    loglik=m.loglik, fixef=m.fixef.to_dict(), eer=e, min_dcf=dcf_value,
                    min_dcf_thr=dcf_thr, nobs=m.nobs, partitions=int(ddf.npartitions))
    finally:
        client.close()
        cluster.close()


def fit_memory(folder: Path) -> dict:
    import warnings

    import pandas as pd

    import scoremix as sm

    t0 = time.perf_counter()
    df = pd.read_parquet(folder)
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.lmer(FORMULA, df)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    e = sm.eer(df.score, df.label)
    d = sm.min_dcf(df.score, df.label)
    t_metrics = time.perf_counter() - t0
    return dict(wall_read=t_read, wall_fit=t_fit, wall_metrics=t_metrics, client_rss=_peak_rss_gb(),
                loglik=m.loglik, fixef=m.fixef.to_dict(), eer=e, min_dcf=float(d.value),
                min_dcf_thr=d.threshold, nobs=m.nobs)


def metrics_memory(folder: Path) -> dict:
    """In-memory ``sm.eer`` / ``sm.min_dcf`` of the score and label columns only (beyond the
    in-memory fit's reach, the exact metrics of 10⁸ trials still fit in RAM)."""
    import pandas as pd

    import scoremix as sm

    t0 = time.perf_counter()
    df = pd.read_parquet(folder, columns=["score", "label"])
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    e = sm.eer(df.score, df.label)
    d = sm.min_dcf(df.score, df.label)
    return dict(wall_read=t_read, wall_metrics=time.perf_counter() - t0, client_rss=_peak_rss_gb(), eer=e,
                min_dcf=float(d.value), min_dcf_thr=d.threshold)


# ----------------------------------------------------------------------------- driver
def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    if out.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=float, default=[10e6, 30e6])
    ap.add_argument("--dir", default="/tmp/scoremix-dask-bench")
    ap.add_argument("--partition-rows", type=float, default=2e6)
    ap.add_argument("--in-memory-max", type=float, default=3e7,
                    help="fit in memory too up to this many rows (10M rows need ~2.4 GB)")
    ap.add_argument("--in-memory-metrics-max", type=float, default=1e8,
                    help="above --in-memory-max, still compute EER/minDCF in memory (score and label "
                         "columns only) up to this many rows")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="3GB")
    ap.add_argument("--keep", action="store_true", help="keep the generated parquet files")
    ap.add_argument("--json", help="write the rows of the table here")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.step:
        folder = Path(a.folder)
        if a.step == "generate":
            res = generate(int(a.sizes[0]), folder, int(a.partition_rows))
            res["client_rss"] = _peak_rss_gb()
        elif a.step == "dask":
            res = fit_dask(folder, a.workers, a.memory_limit)
        elif a.step == "metrics":
            res = metrics_memory(folder)
        else:
            res = fit_memory(folder)
        print(json.dumps(res))
        return
    rows = []
    print(f"LocalCluster(n_workers={a.workers}, threads_per_worker=1, memory_limit={a.memory_limit!r}); "
          f"{a.partition_rows:,.0f} rows per partition; model {FORMULA}")
    for n in [int(s) for s in a.sizes]:
        folder = Path(a.dir) / f"n{n}"
        if folder.exists():
            shutil.rmtree(folder)
        t0 = time.perf_counter()
        gen = _child(["--step", "generate", "--folder", str(folder), "--sizes", str(n),
                      "--partition-rows", str(a.partition_rows)])
        t_gen = time.perf_counter() - t0
        dk = _child(["--step", "dask", "--folder", str(folder), "--workers", str(a.workers),
                     "--memory-limit", a.memory_limit])
        mem = met = None
        if n <= a.in_memory_max:
            mem = _child(["--step", "memory", "--folder", str(folder)])
        elif n <= a.in_memory_metrics_max:
            met = _child(["--step", "metrics", "--folder", str(folder)])
        row = dict(n=n, generate_s=t_gen, generate_rss_gb=gen["client_rss"], dask=dk, memory=mem,
                   memory_metrics=met)
        if met is not None:
            row["eer_equal"] = dk["eer"] == met["eer"]
            row["min_dcf_equal"] = dk["min_dcf"] == met["min_dcf"] and dk["min_dcf_thr"] == met["min_dcf_thr"]
        if mem is not None:
            row["crit_rel_diff"] = abs(dk["loglik"] - mem["loglik"]) / abs(mem["loglik"])
            fd, fm = np.array(list(dk["fixef"].values())), np.array(list(mem["fixef"].values()))
            row["fixef_rel_diff"] = float(np.max(np.abs(fd - fm) / np.maximum(np.abs(fm), 1.0)))
            row["eer_equal"] = dk["eer"] == mem["eer"]
            row["min_dcf_equal"] = dk["min_dcf"] == mem["min_dcf"] and dk["min_dcf_thr"] == mem["min_dcf_thr"]
        rows.append(row)
        print(f"\nN = {n:,} ({dk['partitions']} partitions; generated in {t_gen:.0f} s, generator peak "
              f"RSS {gen['client_rss']:.2f} GB)")
        print(f"  dask     : fit {dk['wall_fit']:7.1f} s  eer+minDCF {dk['wall_metrics']:6.1f} s  "
              f"peak client RSS fit {dk['client_rss_fit']:.2f} GB (with metrics {dk['client_rss']:.2f} GB)  "
              f"peak worker RSS fit {dk['worker_rss_fit']:.2f} GB (with metrics {dk['worker_rss']:.2f} GB)")
        if dk["metrics_error"]:
            print(f"  dask metrics failed: {dk['metrics_error']}")
        if mem is not None:
            print(f"  in-memory: fit {mem['wall_fit']:7.1f} s  eer+minDCF {mem['wall_metrics']:6.1f} s  "
                  f"peak RSS {mem['client_rss']:.2f} GB (read {mem['wall_read']:.1f} s)")
            print(f"  REML criterion rel diff {row['crit_rel_diff']:.1e}, fixef max rel diff "
                  f"{row['fixef_rel_diff']:.1e}, EER equal {row['eer_equal']}, minDCF equal "
                  f"{row['min_dcf_equal']}")
        elif met is not None:
            print(f"  in-memory: fit not run (above --in-memory-max); eer+minDCF of the score/label columns "
                  f"{met['wall_metrics']:6.1f} s, peak RSS {met['client_rss']:.2f} GB; EER equal "
                  f"{row['eer_equal']}, minDCF equal {row['min_dcf_equal']}")
        else:
            print("  in-memory: not run (above --in-memory-max)")
        if not a.keep:
            shutil.rmtree(folder)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
