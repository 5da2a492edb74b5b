"""Per-speaker held-out prediction on any trial table (issue 19's split-half protocol).

The protocol of ``benchmarks/speaker_holdout.py`` (LA eval) for any data file: speakers with
both classes; every speaker × class × factor cell split at random into a fitted share A and a
held-out share B; ``sm.score_model`` fitted on A; each speaker's model EER / minDCF
(p_target = 0.05, attainable thresholds) compared with the speaker's empirical ROCCH value on
B.  Ratio = model MAE / MAE of the speaker's own counts on A (below 1: the model wins);
beside it the oracle best linear shrinkage of the counts.  With ``--gender`` also
gender × factor cells (all positives of a gender against one factor level's negatives).

With ``--check-model-eer`` the per-speaker model values are also recomputed by the public calls,
``sm.model_eer(fit, by=speaker)`` and ``sm.model_subgroup_dcf(fit, A, by=[speaker])``: columns
``ratio_public`` (the ratio with those values) and ``max_diff_public`` (largest difference from
``validate_model``'s model column; it must be ~1e-8, the tolerance of the ROCCH optimiser).

Examples (from the repository root)::

    D=../shared/data
    python3 benchmarks/speaker_holdout_any.py --data $D/asvspoof2019_la_dev/asvspoof2019_la_dev_lfcc_gmm.csv.gz \\
        --factors attack --positive bonafide --gender speaker_gender --shares 0.2 0.5 --seeds 1 2
    python3 benchmarks/speaker_holdout_any.py --data $D/asvspoof2019_la_asv_baseline/asvspoof2019_la_asv_baseline.csv.gz \\
        --speaker claimed_speaker --label trial_type --positive target --factors attack \\
        --system split --gender claimed_gender
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.validation import validate_model
from speaker_holdout import chosen_label, print_summary  # benchmarks/ is sys.path[0]


def load(a: argparse.Namespace) -> pd.DataFrame:
    path = Path(a.data)
    d = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, low_memory=False)
    if a.query:
        d = d.query(a.query)
    if a.dropna_speaker:
        d = d[d[a.speaker].notna()]
    return d.reset_index(drop=True)


def transform_scores(t: pd.DataFrame, score: str, how: str) -> pd.DataFrame:
    """``none``; ``negate`` (lower = positive: distances); ``logit`` (probabilities, clipped
    to [1e-12, 1 − 1e-12])."""
    s = pd.to_numeric(t[score], errors="coerce").to_numpy(float)
    if how == "negate":
        s = -s
    elif how == "logit":
        p = np.clip(s, 1e-12, 1 - 1e-12)
        s = np.log(p) - np.log1p(-p)
    return t.assign(**{score: s})


def public_ratios(r, fit_pair, a: argparse.Namespace, positive: object) -> dict:
    """Per measure the ratio of the model values of the public calls the issue names —
    ``sm.model_eer(fit, by=speaker)`` and ``sm.model_subgroup_dcf(fit, A, by=[speaker])``'s
    ``min_dcf`` — and their largest difference from :func:`validate_model`'s model column."""
    A, fit = fit_pair
    g = r.groups[r.groups["cells"] == a.speaker]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = sm.model_eer(fit, by=a.speaker, label=a.label, positive=positive, n_boot=0)["eer_model"]
        t = sm.model_subgroup_dcf(fit, A, by=[a.speaker], label=a.label, speaker=a.speaker, positive=positive,
                                  p_target=0.05, n_boot=0).table.set_index(a.speaker)["min_dcf"]
    out = {}
    for m, v in (("eer", e), ("min_dcf", t)):
        v = v.groupby(level=0).first()
        v.index = v.index.astype(str)
        gi = g.set_axis(g.index.astype(str))
        x = gi[[f"{m}_heldout", f"{m}_count", f"{m}_model"]].assign(pub=v.reindex(gi.index)).dropna()
        mae_c = float(np.abs(x[f"{m}_count"] - x[f"{m}_heldout"]).mean())
        mae_p = float(np.abs(x["pub"] - x[f"{m}_heldout"]).mean())
        out[m] = dict(ratio_public=mae_p / mae_c if mae_c > 0 else np.nan,
                      max_diff_public=float(np.abs(x["pub"] - x[f"{m}_model"]).max()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--score", default="score")
    ap.add_argument("--label", default="label")
    ap.add_argument("--positive", default=None, help="positive class value (strings; ints are tried too)")
    ap.add_argument("--speaker", default="speaker")
    ap.add_argument("--factors", nargs="*", default=[])
    ap.add_argument("--system", default=None, help="column: one fit per level")
    ap.add_argument("--systems", nargs="*", help="levels of --system to run (default all)")
    ap.add_argument("--gender", default=None, help="column: also gender × factor cells")
    ap.add_argument("--query", default=None, help="pandas query selecting rows first")
    ap.add_argument("--dropna-speaker", action="store_true", help="drop rows without a speaker first")
    ap.add_argument("--transform", default="none", choices=["none", "negate", "logit"])
    ap.add_argument("--logit-systems", nargs="*", default=[], help="systems whose scores are probabilities")
    ap.add_argument("--negate-systems", nargs="*", default=[], help="systems with lower = positive")
    ap.add_argument("--shares", nargs="*", type=float, default=[0.2, 0.5])
    ap.add_argument("--seeds", nargs="*", type=int, default=[1])
    ap.add_argument("--failure-quantile", default="0.99")
    ap.add_argument("--speaker-pooling", default="error_rates")
    ap.add_argument("--check-model-eer", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    d = load(a)
    positive: object = a.positive
    if positive is not None and positive not in set(d[a.label].astype(str)) and positive.lstrip("-").isdigit():
        positive = int(positive)
    systems = [None] if a.system is None else (a.systems or sorted(d[a.system].astype(str).unique()))
    fq = None if a.failure_quantile.lower() == "none" else float(a.failure_quantile)
    pool = None if a.speaker_pooling.lower() == "none" else a.speaker_pooling
    also = []
    if a.gender:
        also = [dict(by=a.gender, negative_by=a.factors[0])] if a.factors else [[a.gender]]
    rows = []
    for share in a.shares:
        for seed in a.seeds:
            for sysname in systems:
                t = d if sysname is None else d[d[a.system].astype(str) == sysname].reset_index(drop=True)
                how = ("logit" if sysname in a.logit_systems else "negate" if sysname in a.negate_systems
                       else a.transform)
                t = transform_scores(t, a.score, how)
                fits = []

                def fitter(A, **kw):
                    fits.append((A, sm.score_model(A, **kw)))
                    return fits[-1][1]

                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = validate_model(t, score=a.score, label=a.label, speaker=a.speaker, factors=a.factors,
                                       positive=positive, share=share, seed=seed, also_by=also, fitter=fitter,
                                       failure_quantile=fq, speaker_pooling=pool)
                dt = time.perf_counter() - t0
                chosen = chosen_label(r)
                pub = public_ratios(r, fits[-1], a, positive) if a.check_model_eer else {}
                for (cells, m), row in r.summary.iterrows():
                    rows.append(dict(system=sysname or "-", share=share, seed=seed, cells=cells, measure=m,
                                     **row.to_dict(), seconds=dt, n_fit=r.info["n_fit"], chosen=chosen,
                                     **(pub.get(m, {}) if cells == a.speaker else {})))
                print(pd.DataFrame(rows[-len(r.summary):])[["system", "share", "seed", "cells", "measure",
                      "ratio_model", "ratio_shrunk", "n_groups", "seconds", *(["ratio_public", "max_diff_public"] if a.check_model_eer else [])]]
                      .round(4).to_string(header=False), chosen, flush=True)
    out = pd.DataFrame(rows)
    print_summary(out, "  (ratio = model MAE / counting MAE; mean over seeds)")
    print("\nfit+validate seconds (median per share):", out.groupby("share")["seconds"].median().round(1).to_dict())
    if a.out:
        out.to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
