"""Per-speaker held-out ratio on LA with the failure multiplier's posterior mean against its
median (issue 19, session 8), for every κ-choice rule.

For one system and split (``validate_model``'s: ``split_cells``, share A), ``score_model`` on A
without speaker pooling chooses the specification once (the choice does not depend on how the
multiplier is summarised); the model is then fitted with each ``failure_share`` variant, and
for each variant the held-out speaker EER / minDCF ratio of every fixed (κ−, κ+) pair is read
off one surface (:func:`speaker_pool_kappa_scan.surface`) and each rule picks its pair from the
within-speaker CV of that variant's fit.

    python3 benchmarks/speaker_failure_share_scan.py --systems rawgat_st_mul --share 0.2 --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from scoremix.locscale.fit import LocScaleData, fit_locscale
from scoremix.locscale.speaker_pool import rates_cv_entries, speaker_pooling_rates_cv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from speaker_holdout import DATA, system_table  # noqa: E402
from speaker_holdout_oracle import both_classes  # noqa: E402
from speaker_pool_kappa_scan import KAPPAS, RULES, split_fit, surface  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", nargs="*")
    ap.add_argument("--shares", nargs="*", type=float, default=[0.2])
    ap.add_argument("--seeds", nargs="*", type=int, default=[1])
    ap.add_argument("--variants", nargs="*", default=["mean", "median"])
    ap.add_argument("--rules", nargs="*", default=["1s-fold", "1s-paired", "1s-min"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--n-parts", type=int, default=2,
                    help="parts of the within-speaker CV of κ (train on one, test on the others)")
    ap.add_argument("--save", default=None, help="folder for each split's κ surface and CV entries (pickles)")
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    systems = a.systems or sorted(d["system"].unique())
    done = set()
    rows = []
    if a.out and Path(a.out).exists():
        old = pd.read_csv(a.out)
        rows = old.to_dict("records")
        done = set(zip(old.system, old.share, old.seed, old.variant))
    kap_idx = {k: i for i, k in enumerate(KAPPAS)}
    for share in a.shares:
        for seed in a.seeds:
            for sysname in systems:
                if all((sysname, share, seed, v) in done for v in a.variants):
                    continue
                t0 = time.perf_counter()
                A, B, y_a, y_b, fit0, _ = split_fit(both_classes(system_table(d, sysname)), share, seed)
                spec0 = fit0.locscale_spec
                for v in a.variants:
                    if (sysname, share, seed, v) in done:
                        continue
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if spec0.failure_quantile is None or spec0.failure_share == v:
                            fit = fit0
                        else:
                            spec = spec0.with_(failure_share=v)
                            fit = fit_locscale(LocScaleData(A, spec), spec)
                        surf = surface(fit, A, B, y_a, y_b)
                        ent = rates_cv_entries(fit, kappas=KAPPAS, n_splits=1, seed=0, n_parts=a.n_parts)
                    if a.save:
                        import pickle
                        Path(a.save).mkdir(parents=True, exist_ok=True)
                        with open(Path(a.save) / f"{sysname}_{share:g}_{seed}_{v}.pkl", "wb") as fh:
                            pickle.dump(dict(surf=surf, ent=ent, kappas=KAPPAS, chosen=spec0.name), fh)
                    best = np.unravel_index(int(np.argmin(surf["eer"])), surf["eer"].shape)
                    row = dict(system=sysname, share=share, seed=seed, variant=v, chosen=spec0.name,
                               model_alone=surf["eer"][-1, -1], model_alone_dcf=surf["min_dcf"][-1, -1],
                               best_pair=f"({KAPPAS[best[0]]:g},{KAPPAS[best[1]]:g})", best_eer=surf["eer"][best])
                    for r in a.rules:
                        pool = speaker_pooling_rates_cv(fit, kappas=KAPPAS, _entries=ent, n_parts=a.n_parts, **RULES[r])
                        i, j = kap_idx[pool.kappa[0]], kap_idx[pool.kappa[1]]
                        row[r] = f"({pool.kappa[0]:g},{pool.kappa[1]:g})"
                        row[f"{r}_eer"] = surf["eer"][i, j]
                        row[f"{r}_dcf"] = surf["min_dcf"][i, j]
                    row["seconds"] = round(time.perf_counter() - t0, 1)
                    rows.append(row)
                    print(pd.DataFrame([row]).round(3).to_string(index=False, header=len(rows) == 1), flush=True)
                    if a.out:
                        pd.DataFrame(rows).to_csv(a.out, index=False)
    out = pd.DataFrame(rows)
    pd.set_option("display.width", 250)
    cols = ["model_alone"] + [f"{r}_eer" for r in a.rules]
    print(out.pivot_table(index=["share", "system"], columns=["variant"], values=cols).round(3).to_string())


if __name__ == "__main__":
    main()
