"""LA eval, 10 systems: transformation vs Gaussian mixed model, model EER vs empirical EER.

Formula ``score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)`` with
``dispersion="~ label"``.  Scores that are probabilities are converted to logits (the
Gaussian fit clips p to [1e-7, 1-1e-7] as the studies do; the transformation fit uses the
exact logit, ±inf at 0/1 — it depends on the ranks only, so this is the same fit as on
the raw probabilities).  ``air_ocsoftmax`` is sign-flipped (lower = bona fide there).

For each system: overall conditional model EER vs the empirical ROCCH EER (``sm.eer``),
and per attack (all bona fide trials against one attack's trials, 13 attacks) the model
EER of the two classes' mixtures of per-trial latent Gaussians vs the empirical EER.

Usage::

    PYTHONPATH=src python3 benchmarks/transform_la.py [--systems a,b] [--csv out.csv]
        [--no-gaussian] [--stratified [--strata label]] [--dispersion "~ dgrp"]
        [--formula "score ~ label"]

``--stratified`` fits ``transform="monotone-by-class"`` (one transform per level of
``--strata``; ``dgrp`` = the attack, ``bonafide`` for bona fide trials) and evaluates the
model EERs with the predictive layer (one common score threshold, ``scoremix.predictive.axis``).

Prints the tables and writes ``docs/data/transform_la.csv`` (overall) and
``docs/data/transform_la_attack.csv`` (per attack) unless ``--csv`` names another stem.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.model_eer import mixture_eer, trial_moments

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "asvspoof2019_la_eval" / \
    "asvspoof2019_la_eval_multisystem_long.csv.gz"
FORMULA = 'score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'
PROB = {"rawnet2_transferfiles", "rawnet2_robeval", "air_softmax", "air_amsoftmax", "aasist_junjul"}


def system_scores(d: pd.DataFrame, system: str, clip: float | None) -> np.ndarray:
    """Logit scores (higher = bona fide) of one system; ``clip=None`` keeps ±inf."""
    s = d["score"].to_numpy(float)
    if system == "air_ocsoftmax":
        s = -s
    if system in PROB:
        p = s if clip is None else np.clip(s, clip, 1 - clip)
        with np.errstate(divide="ignore"):
            s = np.log(p) - np.log1p(-p)
    return s


def evaluate(fit, d: pd.DataFrame) -> tuple[float, pd.Series]:
    """Overall conditional model EER and per-attack model EERs (bona fide vs attack)."""
    if isinstance(getattr(fit, "transform", None), sm.StratifiedTransform):
        from scoremix.predictive import predictive
        pred = predictive(fit, label="label", positive="bonafide")   # one common score threshold
        att = d.loc[pred.frame.index, "attack"].to_numpy()
        y = pred.y == 1
        per = {a: float(pred.eer(y | (att == a))[0]) for a in sorted(set(att[~y]))}
        return float(pred.eer()[0]), pd.Series(per)
    mom = trial_moments(fit, conditional=True, label="label", positive="bonafide")
    eer_all = mixture_eer(mom["mean"][mom.y == 0], mom["sd"][mom.y == 0],
                          mom["mean"][mom.y == 1], mom["sd"][mom.y == 1])
    att = d.loc[mom.index, "attack"].to_numpy()
    pos = mom[mom.y == 1]
    per = {}
    for a in sorted(set(att[mom.y.to_numpy() == 0])):
        neg = mom[(mom.y == 0).to_numpy() & (att == a)]
        per[a] = mixture_eer(neg["mean"], neg["sd"], pos["mean"], pos["sd"])
    return float(eer_all), pd.Series(per)


def empirical(d: pd.DataFrame, s: np.ndarray) -> tuple[float, pd.Series]:
    """Empirical ROCCH EERs (of the dense ranks: the same EER, and ±inf scores allowed)."""
    s = pd.Series(s).rank(method="dense").to_numpy()
    y = (d["label"] == "bonafide").to_numpy()
    att = d["attack"].to_numpy()
    per = {a: sm.eer(np.r_[s[y], s[att == a]], np.r_[np.ones(y.sum()), np.zeros((att == a).sum())])
           for a in sorted(set(att[~y]))}
    return float(sm.eer(s, y.astype(int))), pd.Series(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=None)
    ap.add_argument("--csv", default=str(HERE.parent / "docs" / "data" / "transform_la"))
    ap.add_argument("--no-gaussian", action="store_true")
    ap.add_argument("--stratified", action="store_true",
                    help="transform='monotone-by-class' (one h per class) instead of one shared h")
    ap.add_argument("--strata", default="label",
                    help="with --stratified: the strata column ('dgrp': one transform per attack "
                         "and one for bona fide)")
    ap.add_argument("--formula", default=FORMULA, help="model formula of the transformation fit")
    ap.add_argument("--dispersion", default="~ label",
                    help="dispersion formula of the transformation fit ('~ dgrp': one level per "
                         "attack, bona fide its own level)")
    args = ap.parse_args()
    if not DATA.exists():
        raise SystemExit(f"data not found: {DATA}")
    long = pd.read_csv(DATA)
    systems = args.systems.split(",") if args.systems else sorted(long["system"].unique())
    rows, arows = [], []
    for system in systems:
        d = long[long["system"] == system].reset_index(drop=True)
        s_tr = system_scores(d, system, clip=None)
        emp, emp_att = empirical(d, s_tr)
        dt = d.assign(score=s_tr, dgrp=np.where(d["label"] == "bonafide", "bonafide", d["attack"]))
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always")
            ft = sm.lmer(args.formula, dt, dispersion=args.dispersion or None,
                         transform="monotone-by-class" if args.stratified else "monotone",
                         control=dict(strata=args.strata) if args.stratified else None)
        t_tr = time.perf_counter() - t0
        m_tr, m_tr_att = evaluate(ft, dt)
        m_g, m_g_att, t_g = np.nan, pd.Series(np.nan, index=m_tr_att.index), np.nan
        if not args.no_gaussian:
            dg = d.assign(score=system_scores(d, system, clip=1e-7))
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fg = sm.lmer(FORMULA, dg, dispersion="~ label", REML=False)
            t_g = time.perf_counter() - t0
            m_g, m_g_att = evaluate(fg, dg)
        info = ft.fit_info["transform"]
        rows.append(dict(system=system, eer_empirical=emp, eer_transform=m_tr, eer_gaussian=m_g,
                         relerr_transform=abs(m_tr / emp - 1), relerr_gaussian=abs(m_g / emp - 1),
                         seconds_transform=t_tr, seconds_gaussian=t_g, n_cells=info["n_cells"],
                         n_transform_par=info["n_transform_par"], converged=info["converged"],
                         warnings=len(wlist)))
        for a in m_tr_att.index:
            e = emp_att[a]
            arows.append(dict(system=system, attack=a, eer_empirical=e, eer_transform=m_tr_att[a],
                              eer_gaussian=m_g_att[a], relerr_transform=abs(m_tr_att[a] / e - 1),
                              relerr_gaussian=abs(m_g_att[a] / e - 1)))
        r = rows[-1]
        print(f"{system:24s} emp {100*emp:6.3f}%  transform {100*m_tr:6.3f}% ({100*r['relerr_transform']:5.1f}%)"
              f"  gaussian {100*m_g:6.3f}% ({100*r['relerr_gaussian']:6.1f}%)  fit {t_tr:5.2f}s "
              f"[{info['n_cells']} cells, {info['n_transform_par']} knots, conv={info['converged']}]",
              flush=True)
    tab = pd.DataFrame(rows)
    att = pd.DataFrame(arows)
    pd.set_option("display.width", 200)
    print()
    print(tab[["system", "eer_empirical", "eer_transform", "eer_gaussian", "relerr_transform",
               "relerr_gaussian", "seconds_transform"]].to_string(index=False, float_format="%.4f"))
    print()
    print(f"overall: median relative error transform {100*tab.relerr_transform.median():.1f}% "
          f"(max {100*tab.relerr_transform.max():.1f}%), gaussian "
          f"{100*tab.relerr_gaussian.median():.1f}% (max {100*tab.relerr_gaussian.max():.1f}%)")
    print(f"per attack ({len(att)} cells): median relative error transform "
          f"{100*att.relerr_transform.median():.1f}%, gaussian {100*att.relerr_gaussian.median():.1f}%")
    stem = Path(args.csv)
    stem.parent.mkdir(parents=True, exist_ok=True)
    tab.to_csv(f"{stem}.csv", index=False)
    att.to_csv(f"{stem}_attack.csv", index=False)
    print(f"wrote {stem}.csv and {stem}_attack.csv")


if __name__ == "__main__":
    main()
