"""ASVspoof 2021 DF (20k-utterance subset): which class's scores move under signal interventions?

Data: ``../shared/data/asvspoof2021_df_subset_interventions`` (20,000 utterances × 3
countermeasures × 28–50 test-side interventions; see its README).  The detectors were trained
on clean ASVspoof 2019 LA, so every condition is a test-side intervention of both classes
(configuration ``M_te`` against the clean baseline ``O``).

Scores are probabilities of bona fide; they are mapped to log-odds
:math:`\\operatorname{logit}(p)` (clipped to ``[1e-7, 1-1e-7]``) and then z-normalised
separately per system and condition (intervention × dB level), as in the paper.

Models (fitted with :func:`scoremix.lme.api.lmer`, per system):

* **Intervention-level** (per condition ``c``; clean rows ``t = 0`` plus the rows of ``c``,
  ``t = 1``; every utterance appears twice)::

      z ~ y + t_neg + t_pos + (1 | utt),   t_neg = t(1 - y),  t_pos = t·y

  i.e. :math:`z_i = \\mu + d\\,y_i + \\beta^{neg} t_i(1-y_i) + \\beta^{pos} t_i y_i + b_{utt(i)} + \\varepsilon_i`.
  With both classes intervened and balanced z-scored data, :math:`\\beta^{neg} \\approx -\\beta^{pos}`
  (the paper's :math:`\\beta^*` parametrisation, :math:`\\beta^* = (\\beta^{neg}-\\beta^{pos})/2`);
  the class-mean difference under the intervention is :math:`d + \\beta^{pos} - \\beta^{neg}`.
* **Observational** (all conditions of a system, z-scored per system only)::

      z ~ y + (1 | utt) + (1 + y | condition)

  the condition shifts both the level and the class separation (random slope of ``y``).
* **Speaker subset** (only 647 utterances have a known speaker)::

      z ~ y + (1 | speaker) + (1 | utt) + (1 + y | condition)

Model-based EERs (:func:`scoremix.model_eer.model_eer`) are printed next to the empirical
EERs (:func:`scoremix.metrics.eer`), conditional on the fitted utterance effects and
marginal (new utterances).

Whisper files carry no utterance ids; with ``--whisper`` its ``row_in_file`` is used as the
utterance key (the README's evidence: identical label sequence in every file).

Run ``python examples/asvspoof2021_df_interventions.py --help``; the default (2,000 utterances
per system, seeded) takes 2–3 minutes on two cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from scoremix.design import partial_bias_grid, zscore_by
from scoremix.lme.api import lmer
from scoremix.metrics import eer
from scoremix.model_eer import model_eer
from scoremix.trials import label_to_binary

SYSTEMS = {"acm": "acm_transferfiles", "rawnet2": "rawnet2_transferfiles",
           "whisper": "whisper_transferfiles"}
FOLDER = "asvspoof2021_df_subset_interventions"


def default_data_dir() -> Path:
    env = os.environ.get("SCOREMIX_SHARED_DATA")
    root = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return root / FOLDER


def load(path: Path, systems: list[str]) -> pd.DataFrame:
    """Read the table, add ``y``, ``condition`` and the logit score ``s``."""
    csv = path / f"{FOLDER}.csv.gz" if path.is_dir() else path
    df = pd.read_csv(csv, dtype={"utt": str, "speaker": str, "label": str, "system": str,
                                 "intervention": str})
    df = df[df["system"].isin([SYSTEMS[s] for s in systems])].copy()
    df["system"] = df["system"].map({v: k for k, v in SYSTEMS.items()})
    lvl = df["level_db"]
    df["condition"] = np.where(lvl.isna(), df["intervention"],
                               df["intervention"] + "_" + lvl.fillna(0).astype(int).astype(str) + "dB")
    df["y"] = label_to_binary(df["label"]).astype(float)
    p = df["score_raw"].clip(1e-7, 1 - 1e-7)
    df["s"] = np.log(p / (1 - p))
    return df


def subsample_utts(df: pd.DataFrame, key: str, n: int | None, seed: int) -> pd.DataFrame:
    """Keep ``n`` utterances (half per class when possible), chosen with ``seed``."""
    if n is None:
        return df
    utts = df[[key, "y"]].drop_duplicates(key)
    rng = np.random.default_rng(seed)
    keep = []
    for _, g in utts.groupby("y"):
        k = min(len(g), n // 2)
        keep.append(g[key].to_numpy()[rng.choice(len(g), k, replace=False)])
    return df[df[key].isin(np.concatenate(keep))]


def intervention_table(d: pd.DataFrame, key: str, conditions: list[str]) -> pd.DataFrame:
    """Table IV-like: one intervention-level model per condition."""
    d = d.assign(z=zscore_by(d, "s", "condition"))
    clean = d[d["condition"] == "none"]
    rows = []
    for cond in conditions:
        part = pd.concat([clean, d[d["condition"] == cond]], ignore_index=True)
        part["t"] = (part["condition"] != "none").astype(float)
        part["t_neg"] = part["t"] * (1 - part["y"])
        part["t_pos"] = part["t"] * part["y"]
        part["utt_key"] = part[key].astype(str)
        fit = lmer("z ~ y + t_neg + t_pos + (1 | utt_key)", part)
        fe = fit.fixef
        cond_tab = model_eer(fit, by="t", label="y", data=part)
        marg_tab = model_eer(fit, by="t", label="y", data=part, conditional=False)
        vc = fit.varcorr.set_index("grp")["sdcor"]
        rows.append({
            "condition": cond,
            "mu": fe["(Intercept)"], "d": fe["y"], "beta_neg": fe["t_neg"], "beta_pos": fe["t_pos"],
            "beta_star": (fe["t_neg"] - fe["t_pos"]) / 2,
            "d_intervened": fe["y"] + fe["t_pos"] - fe["t_neg"],
            "sigma_eps": fit.sigma, "sd_utt": vc["utt_key"],
            "eer_clean_emp": cond_tab.loc[0.0, "eer_empirical"],
            "eer_clean_model": cond_tab.loc[0.0, "eer_model"],
            "eer_int_emp": cond_tab.loc[1.0, "eer_empirical"],
            "eer_int_model": cond_tab.loc[1.0, "eer_model"],
            "eer_int_model_marg": marg_tab.loc[1.0, "eer_model"],
        })
    return pd.DataFrame(rows).set_index("condition")


def observational(d: pd.DataFrame, key: str, with_speaker: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All conditions pooled, condition as a random effect with a class slope."""
    d = d.assign(z=zscore_by(d.assign(_all=1), "s", "_all"), utt_key=d[key].astype(str))
    formula = "z ~ y + (1 | utt_key) + (1 + y | condition)"
    if with_speaker:
        formula = "z ~ y + (1 | speaker) + (1 | utt_key) + (1 + y | condition)"
    fit = lmer(formula, d)
    by = model_eer(fit, by="condition", label="y")
    emp_check = {c: eer(g["z"].to_numpy(), g["y"].to_numpy()) for c, g in d.groupby("condition")}
    assert np.allclose(by["eer_empirical"], pd.Series(emp_check).reindex(by.index))
    return fit.varcorr, by


def grid_for(d: pd.DataFrame, key: str, condition: str, seed: int) -> pd.DataFrame:
    """Partially biased test sets: each test-negative (test-positive) utterance is taken
    from ``condition`` with probability ρ_te,n (ρ_te,p), else clean.  Uses the logit
    scores (not z-scored per condition, which would remove the intervention's shift)."""
    d = d.assign(z=d["s"])
    clean = d[d["condition"] == "none"].set_index(key)
    cond = d[d["condition"] == condition].set_index(key)
    common = clean.index.intersection(cond.index)
    grid = np.linspace(0, 1, 5)
    return partial_bias_grid(clean.loc[common, "z"], cond.loc[common, "z"], clean.loc[common, "y"],
                             rho_te_neg=grid, rho_te_pos=grid, random_state=seed, progress=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=default_data_dir(), help="folder or .csv.gz")
    ap.add_argument("--systems", nargs="+", default=["acm", "rawnet2"], choices=list(SYSTEMS))
    ap.add_argument("--whisper", action="store_true", help="also fit Whisper (row_in_file as utterance key)")
    ap.add_argument("--conditions", nargs="*", default=None,
                    help="conditions to model (e.g. gaussian_noise_5dB codec_opus); default: all")
    ap.add_argument("--max-utts", type=int, default=2000,
                    help="utterances per system (balanced, seeded); 0 = all 20,000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-observational", action="store_true")
    ap.add_argument("--grid-condition", default=None,
                    help="also print a partial-bias EER grid for this condition (e.g. codec_opus)")
    args = ap.parse_args(argv)
    systems = list(dict.fromkeys(args.systems + (["whisper"] if args.whisper else [])))
    if not args.data.exists():
        print(f"data not found: {args.data} (set SCOREMIX_SHARED_DATA or --data)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    df = load(args.data, systems)
    print(f"read {len(df):,} rows in {time.perf_counter() - t0:.1f} s")
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    for system in systems:
        key = "row_in_file" if system == "whisper" else "utt"
        full = df[df["system"] == system]
        d = subsample_utts(full, key, args.max_utts or None, args.seed)
        conds = sorted(c for c in d["condition"].unique() if c != "none")
        if args.conditions:
            unknown = sorted(set(args.conditions) - set(conds))
            if unknown:
                print(f"[{system}] unknown condition(s) {unknown}; available: {conds}", file=sys.stderr)
                return 2
            conds = [c for c in conds if c in args.conditions]
        n_utt = d[key].nunique()
        print(f"\n=== {system}: {n_utt:,} utterances, {len(conds)} conditions (+ clean) ===")
        t1 = time.perf_counter()
        tab = intervention_table(d, key, conds)
        print(f"Intervention-level models z ~ y + t_neg + t_pos + (1 | utt)  "
              f"[{time.perf_counter() - t1:.1f} s; EER in %]")
        show = tab.copy()
        for c in [c for c in show.columns if c.startswith("eer")]:
            show[c] = 100 * show[c]
        print(show.round(3).to_string())
        if system == "rawnet2":
            print("note: RawNet2 volume_reduction 13/16 dB and 14/19 dB have identical score files "
                  "in the source (README: suspect duplicates); ACM bg_noise2 10/15 dB likewise.")
        elif system == "acm":
            print("note: ACM bg_noise2 10 dB and 15 dB have identical score files in the source "
                  "(README: suspect duplicate).")
        if args.grid_condition:
            if args.grid_condition not in conds:
                print(f"[{system}] --grid-condition {args.grid_condition!r} not among {conds}",
                      file=sys.stderr)
                return 2
            g = grid_for(d, key, args.grid_condition, args.seed)
            for what in ("eer_empirical", "eer_model"):
                print(f"\npartial-bias grid, {args.grid_condition}: {what} in % "
                      "(rows ρ_te,n = P(spoof intervened), columns ρ_te,p = P(bona fide intervened))")
                print((100 * g.pivot(index="rho_te_neg", columns="rho_te_pos", values=what)).round(2).to_string())
        if not args.no_observational:
            sub = d[d["condition"].isin(conds + ["none"])]
            t1 = time.perf_counter()
            vc, by = observational(sub, key)
            print(f"\nObservational model z ~ y + (1 | utt) + (1 + y | condition)  "
                  f"[{time.perf_counter() - t1:.1f} s]")
            print(vc.round(4).to_string(index=False))
            print("model (conditional on utterance and condition effects) vs empirical EER, %:")
            print((100 * by[["eer_model", "eer_empirical"]]).round(2).to_string())
            # every utterance with a known speaker (not only the subsample)
            spk = full[full["speaker"].notna() & full["condition"].isin(conds + ["none"])]
            if system != "whisper" and spk["speaker"].nunique() > 1:
                t1 = time.perf_counter()
                vc_s, _ = observational(spk, key, with_speaker=True)
                print(f"\nSpeaker subset ({spk[key].nunique()} utterances, {spk['speaker'].nunique()} "
                      f"speakers): z ~ y + (1 | speaker) + (1 | utt) + (1 + y | condition)  "
                      f"[{time.perf_counter() - t1:.1f} s]")
                print(vc_s.round(4).to_string(index=False))
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
