"""LA eval: where the formula of issue 10 is misspecified (likelihood-ratio tests).

The acceptance formula of issue 10 is

    score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack),  dispersion = "~ label"

with one monotone transform.  It makes two restrictions that the error rates depend on:

1. one speaker effect shared by both classes (a bona fide and a spoofed utterance of
   speaker s move together, correlation +1, equal variances);
2. one latent residual SD for all 13 attacks (every bona fide-vs-attack DET line on
   probit axes has the same slope).

For every system this script fits the formula and its two relaxations by maximum
likelihood with the *same* transform sieve (the knots depend on the scores only, so the
fits are nested) and reports the likelihood-ratio statistics:

* ``(0 + label|speaker)`` instead of ``(1|speaker)`` (class-specific speaker effects,
  2 extra parameters; the fitted correlation is printed);
* ``dispersion = "~ dgrp"`` (one residual SD per attack and one for bona fide, 12 extra
  parameters); the fitted spoof/bona fide SD ratios per attack are printed as a range.

Usage::

    PYTHONPATH=src python3 benchmarks/transform_la_misfit.py [--systems a,b]
        [--csv docs/data/transform_la_misfit.csv]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import chi2
from tqdm import tqdm

import scoremix as sm
from transform_la import DATA, FORMULA, system_scores

HERE = Path(__file__).resolve().parent
FORMULA_SPK = 'score ~ label + (0 + label|speaker) + (0 + dummy(label, "spoof")|attack)'


def speaker_correlation(fit) -> float:
    """Fitted correlation of the bona fide and spoof speaker effects."""
    vc = fit.varcorr
    row = vc[(vc.grp == "speaker") & vc.var2.notna()]
    return float(row.sdcor.iloc[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=None)
    ap.add_argument("--csv", default=str(HERE.parent / "docs" / "data" / "transform_la_misfit.csv"))
    args = ap.parse_args()
    data = pd.read_csv(DATA)
    systems = sorted(data["system"].unique()) if args.systems is None else args.systems.split(",")
    rows = []
    for system in tqdm(systems, desc="systems"):
        d = data[data["system"] == system].reset_index(drop=True).copy()
        d["score"] = system_scores(d, system, None)
        d["dgrp"] = np.where(d["label"] == "bonafide", "bonafide", d["attack"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            base = sm.lmer(FORMULA, d, transform="monotone", dispersion="~ label")
            spk = sm.lmer(FORMULA_SPK, d, transform="monotone", dispersion="~ label")
            att = sm.lmer(FORMULA, d, transform="monotone", dispersion="~ dgrp")
        ratio = att.sigma_by.drop("bonafide") / att.sigma_by["bonafide"]
        lr_spk = 2 * (spk.loglik - base.loglik)
        lr_att = 2 * (att.loglik - base.loglik)
        rows.append(dict(
            system=system,
            speaker_corr=speaker_correlation(spk),
            lr_speaker=lr_spk, p_speaker=float(chi2.sf(lr_spk, 2)),
            sd_ratio_min=float(ratio.min()), sd_ratio_max=float(ratio.max()),
            sd_ratio_min_attack=str(ratio.idxmin()), sd_ratio_max_attack=str(ratio.idxmax()),
            lr_dispersion=lr_att, p_dispersion=float(chi2.sf(lr_att, len(ratio) - 1)),
        ))
        print(pd.Series(rows[-1]).to_string(), flush=True)
    out = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(out.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    out.to_csv(args.csv, index=False)
    print("wrote", args.csv)


if __name__ == "__main__":
    main()
