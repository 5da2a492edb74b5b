"""Goodness of fit on LA eval: the empirical EER's speaker-bootstrap interval and ``fit_ok``
beside the Gaussian and the transformation model's EER (:func:`scoremix.model_eer` tables).

Same data, score conversion and formula as ``benchmarks/transform_la.py`` (its
``system_scores``), ``n_boot=200`` speaker-cluster replicates.  Writes
``docs/data/transform_la_gof.csv`` (system, model, eer_model, eer_empirical,
eer_empirical_lo, eer_empirical_hi, fit_ok) and prints it; counts the ``ModelFitWarning`` s.

Usage::

    PYTHONPATH=src python3 benchmarks/transform_la_gof.py [--systems a,b]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from transform_la import DATA, FORMULA, system_scores  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=None)
    args = ap.parse_args()
    long = pd.read_csv(DATA)
    systems = args.systems.split(",") if args.systems else sorted(long["system"].unique())
    rows = []
    for system in systems:
        d = long[long["system"] == system].reset_index(drop=True)
        for model, clip, kw in (("gaussian", 1e-7, {"REML": False}), ("transform", None, {"transform": "monotone"})):
            dd = d.assign(score=system_scores(d, system, clip=clip))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = sm.lmer(FORMULA, dd, dispersion="~ label", **kw)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always", sm.ModelFitWarning)
                tab = sm.model_eer(fit, by=pd.Series(np.zeros(len(dd), int), name="all"), label="label",
                                   positive="bonafide", data=dd, n_boot=200, speaker="speaker")
            r = tab.iloc[0]
            rows.append(dict(system=system, model=model, eer_model=r["eer_model"], eer_empirical=r["eer_empirical"],
                             eer_empirical_lo=r["eer_empirical_lo"], eer_empirical_hi=r["eer_empirical_hi"],
                             fit_ok=bool(r["fit_ok"]),
                             warned=any(issubclass(x.category, sm.ModelFitWarning) for x in w)))
            print(rows[-1], flush=True)
    out = pd.DataFrame(rows)
    path = HERE.parent / "docs" / "data" / "transform_la_gof.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    out.to_csv(path, index=False)
    print(out.to_string(index=False))
    print(f"fit_ok: gaussian {out[out.model == 'gaussian'].fit_ok.sum()}/{len(systems)}, "
          f"transform {out[out.model == 'transform'].fit_ok.sum()}/{len(systems)}; wrote {path}")


if __name__ == "__main__":
    main()
