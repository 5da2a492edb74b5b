"""Peak memory (RSS) of a Bayesian study-like workload, stage by stage.

Workload (what a Bayesian study does per system, :func:`scoremix.study.tasks.fit_model`):

1. ``bayes_lmer(FORMULA, df, draws, chains, cores=1)`` (collapsed NUTS);
2. ``model_eer(fit, by="speaker_gender", method="mixture", max_draws=400)``;
3. ``posterior_subgroup_dcf(fit, df, ["speaker_gender"], max_draws=200)``;
4. optionally ``fit.loo(group="speaker")`` (pointwise log-likelihood, chunked over draws).

Systems: the 10 systems of ``asvspoof2019_la_eval_multisystem_long.csv.gz`` (each subsampled to
``--trials`` trials, scores on the logit scale), or simulated ASVspoof-like systems when the shared
data are absent.  A further stage fits ``--big`` simulated rows (the "1M-row Bayesian fit").

Peak RSS is sampled every 20 ms by a background thread (``psutil``) and also read from
``resource.getrusage`` (``ru_maxrss``, the process high-water mark).  Every fit's result is kept
until the end (as a study keeps its tables), so the high-water mark is that of the whole study.

Usage::

    nice -n 5 python benchmarks/bayes_memory.py --systems 2 --trials 2000 --draws 200 --chains 2
    # the acceptance run (10 LA systems × 7000 trials, 2000 draws × 2 chains, then 1M rows):
    nice -n 5 python benchmarks/bayes_memory.py --systems 10 --trials 7000 --draws 2000 --chains 2 \
        --big 1000000
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

FORMULA = 'score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'
GB = 1024.0**3


class PeakRSS:
    """Background sampler of the process RSS (psutil), with per-stage peaks."""

    def __init__(self, every: float = 0.02) -> None:
        import psutil

        self._p = psutil.Process()
        self._every = every
        self.peak = self._p.memory_info().rss
        self._stage_peak = self.peak
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            r = self._p.memory_info().rss
            self.peak = max(self.peak, r)
            self._stage_peak = max(self._stage_peak, r)
            time.sleep(self._every)

    def now(self) -> int:
        return self._p.memory_info().rss

    def stage(self) -> int:
        """Peak since the previous call; starts a new stage."""
        out = max(self._stage_peak, self.now())
        self._stage_peak = self.now()
        return out

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def ru_maxrss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0 / GB  # Linux: KiB


def la_systems(n_systems: int, n_trials: int, seed: int) -> list[tuple[str, pd.DataFrame]]:
    here = Path(__file__).resolve().parents[1]
    shared = Path(os.environ.get("SCOREMIX_SHARED_DATA", here.parent / "shared" / "data"))
    path = shared / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
    if n_systems <= 0:
        return []
    if not path.exists():
        print(f"{path} absent: simulated systems")
        return [(f"sim{i}", simulate(n_trials, seed + i)) for i in range(n_systems)]
    long = pd.read_csv(path)
    rng = np.random.default_rng(seed)
    out = []
    for name in sorted(long["system"].unique())[:n_systems]:
        d = long[long["system"] == name].reset_index(drop=True)
        d = d.iloc[np.sort(rng.choice(len(d), size=min(n_trials, len(d)), replace=False))].reset_index(drop=True)
        s = d["score"].to_numpy(np.float64)
        if name == "air_ocsoftmax":
            s = -s
        if 0.0 <= s.min() and s.max() <= 1.0:  # probabilities → logits
            p = np.clip(s, 1e-12, 1 - 1e-12)
            s = np.log(p / (1 - p))
        out.append((name, d.assign(score=s)))
    del long
    return out


def simulate(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, 67, n)
    spoof = rng.random(n) < 0.9
    att = np.where(spoof, rng.integers(0, 13, n), -1)
    y = (2.0 - 4.0 * spoof + rng.normal(0, 0.5, 67)[spk]
         + np.where(spoof, rng.normal(0, 1.5, 13)[np.maximum(att, 0)], 0.0) + rng.normal(0, 1.0, n))
    return pd.DataFrame({"score": y, "label": np.where(spoof, "spoof", "bonafide"),
                         "speaker": np.char.add("LA_", spk.astype(str)),
                         "speaker_gender": np.where(spk % 2 == 0, "female", "male"),
                         "attack": np.where(spoof, np.char.add("A", att.astype(str)), "bonafide")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", type=int, default=2)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--tune", type=int, default=None, help="default: = draws, at most 1000")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--big", type=int, default=0, help="rows of the large single fit (0: skip)")
    ap.add_argument("--no-loo", action="store_true")
    ap.add_argument("--big-transform", action="store_true",
                    help="the large fit as a transformation model (transform='monotone', dispersion='~ label')")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    tune = args.tune if args.tune is not None else min(args.draws, 1000)

    import scoremix as sm
    from scoremix.fairness import posterior_subgroup_dcf
    from scoremix.model_eer import model_eer

    mon = PeakRSS()
    print(f"start: RSS {mon.now() / GB:.2f} GB")
    systems = la_systems(args.systems, args.trials, args.seed)
    print(f"data: RSS {mon.now() / GB:.2f} GB, stage peak {mon.stage() / GB:.2f} GB")
    keep = []
    rows = []
    for name, df in systems:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sm.bayes_lmer(FORMULA, df, draws=args.draws, tune=tune, chains=args.chains, cores=1,
                                seed=args.seed, progress=False)
            t_fit = time.perf_counter() - t0
            p_fit = mon.stage()
            e = model_eer(fit, by="speaker_gender", data=df, label="label", method="mixture", max_draws=400,
                          progress=False)
            p_eer = mon.stage()
            f = posterior_subgroup_dcf(fit, df, ["speaker_gender"], label="label", speaker="speaker",
                                       max_draws=200, n_boot=0)
            p_dcf = mon.stage()
            p_loo = np.nan
            if not args.no_loo:
                fit.loo(group="speaker")
                p_loo = mon.stage() / GB
        keep.append((fit, e, f))
        rows.append((name, len(df), round(t_fit, 1), p_fit / GB, p_eer / GB, p_dcf / GB, p_loo,
                     mon.now() / GB, ru_maxrss_gb()))
        print(rows[-1], flush=True)
    tab = pd.DataFrame(rows, columns=["system", "rows", "fit_s", "peak_fit_GB", "peak_model_eer_GB",
                                      "peak_subgroup_dcf_GB", "peak_loo_GB", "rss_after_GB", "ru_maxrss_GB"])
    with pd.option_context("display.width", 200, "display.precision", 3):
        print(tab.to_string(index=False) if len(tab) else "(no systems)")
    post_bytes = sum(k[0].idata.posterior.nbytes for k in keep)
    print(f"posterior draws held (all systems): {post_bytes / GB:.3f} GB")
    print(f"study peak RSS: {mon.peak / GB:.2f} GB (sampled), ru_maxrss {ru_maxrss_gb():.2f} GB")
    if args.big:
        del keep
        df = simulate(args.big, args.seed)
        mon.stage()
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tkw = dict(transform="monotone", dispersion="~ label") if args.big_transform else {}
            fit = sm.bayes_lmer(FORMULA, df, draws=args.draws, tune=tune, chains=args.chains, cores=1,
                                seed=args.seed, progress=False, **tkw)
        print(f"{args.big:,}-row fit{' (transform)' if args.big_transform else ''}: {time.perf_counter() - t0:.0f} s, stage peak {mon.stage() / GB:.2f} GB, "
              f"ru_maxrss {ru_maxrss_gb():.2f} GB")
        if not args.no_loo:
            fit.loo()
            print(f"{args.big:,}-row loo: stage peak {mon.stage() / GB:.2f} GB, ru_maxrss {ru_maxrss_gb():.2f} GB")
    mon.stop()


if __name__ == "__main__":
    main()
