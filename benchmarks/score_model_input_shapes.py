"""Robustness sweep of input shapes for issue 19's held-out protocol (session 9, s9robust).

A check we do not see will run, on a table this project has never used,
``fit = sm.score_model(A, score=, label=, speaker=, factors=[...], positive=)``, then
``sm.model_eer(fit, by=speaker)`` and ``sm.model_subgroup_dcf(...)`` and
``sm.validate_model(...)``.  This script builds variants of one base table that differ in
*input shape* — column dtypes, score scale and ties, non-finite values, design — and runs each
through

* ``validate_model(..., share=s, seed=1)`` for every ``--shares`` (the per-speaker EER ratio
  model MAE / counting MAE, and whether every model EER lies in [0, 0.5]);
* the public path on the whole table: ``score_model`` → ``model_eer(fit, by=speaker)`` →
  ``model_subgroup_dcf(fit, table, by=[speaker])`` (finite model EERs in [0, 0.5] for every
  speaker with both classes, the ``fit_ok`` counts).

Base tables: ``--base synthetic`` (20 speakers × 30 trials, two attacks, Gaussian scores with a
speaker offset) or ``--base la:<system>:<n_speakers>`` (the first ``n`` speakers of the LA eval
multisystem table, one system, probabilities as logits and OC-softmax negated as in
``speaker_holdout.system_table``).  Variants that need an invalid table (NaN scores, NaN factor)
must fail with a scoremix error naming the column; the row says which error.

Example (from the repository root)::

    python3 benchmarks/score_model_input_shapes.py --base synthetic
    python3 benchmarks/score_model_input_shapes.py --base la:lfcc_gmm_highres:12 --shares 0.2 0.5
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.validation import validate_model

LA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "asvspoof2019_la_eval" / \
    "asvspoof2019_la_eval_multisystem_long.csv.gz"


def synthetic(n_spk: int = 20, n_per: int = 30, seed: int = 0, sep: float = 2.0) -> pd.DataFrame:
    """``n_spk`` speakers × ``n_per`` trials (a third bona fide, N(sep, 1); spoofs N(0, 1) of
    attacks A1/A2), every speaker's scores shifted by N(0, 0.5²)."""
    rng = np.random.default_rng(seed)
    i = np.tile(np.arange(n_per), n_spk)
    spk = np.repeat(np.arange(n_spk), n_per)
    y = i % 3 == 0
    off = rng.normal(0, 0.5, n_spk)[spk]
    return pd.DataFrame({"speaker": [f"S{s:03d}" for s in spk], "label": np.where(y, "bonafide", "spoof"),
                         "attack": np.where(y, "-", np.where(i % 2 == 0, "A1", "A2")),
                         "score": rng.normal(np.where(y, sep, 0.0), 1.0) + off})


def la_table(system: str, n_speakers: int) -> pd.DataFrame:
    """One LA eval system, the first ``n_speakers`` speakers (sorted), scores as in
    ``benchmarks/speaker_holdout.system_table``."""
    from speaker_holdout import system_table  # benchmarks/ is sys.path[0]

    d = pd.read_csv(LA, usecols=["speaker", "attack", "label", "system", "score"])
    t = system_table(d[d["system"] == system], system)
    keep = sorted(t["speaker"].unique())[:n_speakers]
    return t[t["speaker"].isin(keep)].reset_index(drop=True)[["speaker", "label", "attack", "score"]]


def _logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 − p)) without clipping: probabilities of exactly 0 or 1 give ∓inf."""
    with np.errstate(divide="ignore"):
        return np.log(p) - np.log1p(-p)


def _set(t: pd.DataFrame, rows, col: str, value) -> pd.DataFrame:
    t = t.copy()
    t[col] = t[col].astype(object) if isinstance(value, float) and np.isnan(value) and t[col].dtype != float else t[col]
    t.loc[rows, col] = value
    return t


def variants(base: pd.DataFrame, la: bool) -> dict[str, tuple[Callable[[], pd.DataFrame], dict]]:
    """name → (table builder, keyword overrides of the calls)."""
    b = base
    bf = b["label"] == "bonafide"
    spk = sorted(b["speaker"].unique())
    p = 1 / (1 + np.exp(-b["score"].to_numpy()))

    def one_class_speakers():
        return b[~(b["speaker"].isin(spk[:2]) & bf)].reset_index(drop=True)

    def single_bonafide():
        drop = b.index[(b["speaker"] == spk[3]) & bf][1:]
        return b.drop(drop).reset_index(drop=True)

    def rare_level():
        m = ~bf & b["speaker"].isin(spk[:2]) & (b["attack"] == sorted(b.loc[~bf, "attack"].unique())[-1])
        return b.assign(attack=np.where(m, "A_rare", b["attack"]))

    def few_negatives():     # every speaker keeps 2 spoofs: positive class ≫ negative class
        neg = b.index[~bf]
        keep = b.loc[neg].groupby("speaker").head(2).index
        return b.drop(neg.difference(keep)).reset_index(drop=True)

    def one_positive_per_speaker():
        pos = b.index[bf]
        keep = b.loc[pos].groupby("speaker").head(1).index
        return b.drop(pos.difference(keep)).reset_index(drop=True)

    def one_attack():        # the negative class holds a single attack
        a0 = sorted(b.loc[~bf, "attack"].unique())[0]
        return b[bf | (b["attack"] == a0)].reset_index(drop=True)

    def single_negative_trial():
        neg = b.index[~bf]
        return b.drop(neg[1:]).reset_index(drop=True)

    v: dict[str, tuple[Callable[[], pd.DataFrame], dict]] = {
        "baseline": (lambda: b, {}),
        "speaker int IDs": (lambda: b.assign(speaker=pd.factorize(b["speaker"], sort=True)[0] + 1001), {}),
        "label 0/1 int, positive=1": (lambda: b.assign(label=bf.astype(int)), dict(positive=1)),
        "label 0/1 int, positive=None": (lambda: b.assign(label=bf.astype(int)), dict(positive=None)),
        "label bool, positive=True": (lambda: b.assign(label=bf.to_numpy()), dict(positive=True)),
        "label target/nontarget": (lambda: b.assign(label=np.where(bf, "target", "nontarget")), dict(positive="target")),
        "label human/machine": (lambda: b.assign(label=np.where(bf, "human", "machine")), dict(positive="human")),
        "factor integer codes": (lambda: b.assign(attack=pd.factorize(b["attack"], sort=True)[0]), {}),
        "factor categorical dtype": (lambda: b.assign(attack=b["attack"].astype("category")), {}),
        "speaker + label categorical": (lambda: b.assign(speaker=b["speaker"].astype("category"),
                                                         label=b["label"].astype("category")), {}),
        "factor with NaN (3 rows)": (lambda: _set(b, b.index[~bf][[0, 5, 9]], "attack", np.nan), {}),
        "score probabilities [0,1], ties at 0/1": (lambda: b.assign(score=np.round(p, 3)), {}),
        "score logit of rounded probabilities (±inf)": (lambda: b.assign(score=_logit(np.round(1 / (1 + np.exp(-3 * b["score"])), 3))), {}),
        "score ×1e6": (lambda: b.assign(score=b["score"] * 1e6), {}),
        "score 0.01·s + 1000": (lambda: b.assign(score=b["score"] * 0.01 + 1000), {}),
        "score rounded to 0.1": (lambda: b.assign(score=b["score"].round(1)), {}),
        "score ±inf (2 rows)": (lambda: _set(_set(b, b.index[bf][:1], "score", np.inf), b.index[~bf][:1], "score",
                                             -np.inf), {}),
        "score NaN (1 row)": (lambda: _set(b, b.index[7:8], "score", np.nan), {}),
        "index with gaps (query, no reset)": (lambda: b[b.index % 7 != 3], {}),
        "index duplicated (concat)": (lambda: pd.concat([b.iloc[: len(b) // 2], b.iloc[len(b) // 2:]]).set_axis(
            np.r_[np.arange(len(b) // 2), np.arange(len(b) - len(b) // 2)]), {}),
        "index strings": (lambda: b.set_axis([f"u{i}" for i in range(len(b))]), {}),
        "columns renamed (llr, key, spk, attack_id)": (
            lambda: b.rename(columns=dict(score="llr", label="key", speaker="spk", attack="attack_id")),
            dict(score="llr", label="key", speaker="spk", factors=["attack_id"])),
        "no factor": (lambda: b, dict(factors=[])),
        "factor one level": (lambda: b.assign(attack=np.where(bf, "-", "A")), {}),
        "factor level in 2 speakers": (rare_level, {}),
        "speaker with 1 bona fide": (single_bonafide, {}),
        "2 speakers one class only": (one_class_speakers, {}),
        "positives: 1 per speaker": (one_positive_per_speaker, {}),
        "negatives: one attack": (one_attack, {}),
        "negatives: 2 per speaker": (few_negatives, {}),
        "negatives: 1 trial": (single_negative_trial, {}),
    }
    if not la:
        v["500 speakers × 20"] = (lambda: synthetic(500, 20, seed=3), {})
        v["separable"] = (lambda: synthetic(seed=4, sep=40.0), {})
        v["near chance"] = (lambda: synthetic(seed=5, sep=0.0), {})
    else:
        v["separable (bona fide +100)"] = (lambda: b.assign(score=np.where(bf, b["score"].max() + 100 + b["score"],
                                                                            b["score"])), {})
        v["near chance (labels shuffled in speaker)"] = (
            lambda: b.assign(label=b.groupby("speaker")["label"].transform(
                lambda s: s.sample(frac=1, random_state=0).to_numpy())), {})
    return v


def run_one(t: pd.DataFrame, kw: dict, shares: list[float], public: bool) -> dict:
    args = dict(score="score", label="label", speaker="speaker", factors=["attack"], positive="bonafide") | kw
    out: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in shares:
            t0 = time.perf_counter()
            try:
                r = validate_model(t, share=s, seed=1, **args)
                row = r.summary.loc[(args["speaker"], "eer")]
                g = r.groups[r.groups["cells"] == args["speaker"]]
                e, h = g["eer_model"], g["eer_heldout"]
                sane = bool(e[h.notna()].between(0, 0.5).all())
                out[f"v{s}"] = (f"ok {time.perf_counter() - t0:.0f}s ratio {row['ratio_model']:.3f} "
                                f"n={int(row['n_groups'])}{'' if sane else ' MODEL EER OUT OF [0,0.5]'}")
            except Exception as exc:  # noqa: BLE001 - the sweep records every failure
                out[f"v{s}"] = f"FAIL {time.perf_counter() - t0:.0f}s {type(exc).__name__}: {str(exc)[:160]}"
        if public:
            t0 = time.perf_counter()
            try:
                fit = sm.score_model(t, **args)
                e = sm.model_eer(fit, by=args["speaker"], label=args["label"], positive=args["positive"])
                d = sm.model_subgroup_dcf(fit, t, by=[args["speaker"]], label=args["label"], speaker=args["speaker"],
                                          positive=args["positive"])
                both = e["n_pos"].gt(0) & e["n_neg"].gt(0)
                sane = bool(e.loc[both, "eer_model"].between(0, 0.5).all()) and bool(d.table["min_dcf"].dropna().ge(0).all())
                out["public"] = (f"ok {time.perf_counter() - t0:.0f}s EER [{e['eer_model'].min():.3g}, "
                                 f"{e['eer_model'].max():.3g}] fit_ok {int(e['fit_ok'].sum())}/{len(e)}"
                                 f"{'' if sane else ' OUT OF RANGE'}")
            except Exception as exc:  # noqa: BLE001
                out["public"] = f"FAIL {time.perf_counter() - t0:.0f}s {type(exc).__name__}: {str(exc)[:160]}"
    return out


def _short(x: object) -> str:
    import re

    if not isinstance(x, str):
        return "—"
    m = re.match(r"ok (\d+)s ratio (\S+) n=(\d+)(.*)", x)
    if m:
        r = f"{float(m[2]):.2f}" if m[2] != "nan" else "0/0"
        return r + f" (n={m[3]})" + (" **out of [0, 0.5]**" if m[4] else "")
    m = re.match(r"ok (\d+)s EER \[(\S+), (\S+)\] fit_ok (\S+)(.*)", x)
    if m:
        return f"EER {m[2]}–{m[3]}, fit_ok {m[4]}" + (" **out of range**" if m[5] else "")
    m = re.match(r"FAIL (\d+)s (\w+):", x)
    return f"`{m[2]}`" if m else x


def _seconds(r: pd.Series) -> int:
    import re

    return sum(int(m[1]) for c in ("v0.2", "v0.5", "public") if (m := re.match(r"\w+ (\d+)s", str(r.get(c)))))


def markdown(after: str, before: str | None = None) -> None:
    """Markdown table of a results CSV (and the status of the same variants in ``before``)."""
    a = pd.read_csv(after)
    b = pd.read_csv(before) if before else None
    print("| variant | before: 20 % / 50 % / public | EER ratio 20 % | EER ratio 50 % | public path | s (3 calls) | load |")
    print("|---|---|---|---|---|---|---|")
    for _, r in a.iterrows():
        st = "not run"
        if b is not None and (r["variant"] == b["variant"]).any():
            q = b[b["variant"] == r["variant"]].iloc[0]
            st = " / ".join("ok" if str(q[c]).startswith("ok") else _short(q[c]) for c in ("v0.2", "v0.5", "public"))
        print(f"| {r['variant']} | {st} | {_short(r['v0.2'])} | {_short(r['v0.5'])} | {_short(r['public'])} | "
              f"{_seconds(r)} | {r['load']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="synthetic", help="synthetic or la:<system>:<n_speakers>")
    ap.add_argument("--shares", nargs="*", type=float, default=[0.2, 0.5])
    ap.add_argument("--only", nargs="*", default=None, help="variant names (substrings) to run")
    ap.add_argument("--no-public", action="store_true", help="skip score_model → model_eer → model_subgroup_dcf")
    ap.add_argument("--out", default=None, help="CSV of the results")
    ap.add_argument("--table", nargs="+", default=None, metavar="CSV",
                    help="print a markdown table of AFTER.csv [BEFORE.csv] and stop")
    a = ap.parse_args()
    if a.table:
        markdown(*a.table)
        return
    if a.base == "synthetic":
        base, la = synthetic(), False
    else:
        _, system, n = a.base.split(":")
        base, la = la_table(system, int(n)), True
    print(f"# base {a.base}: {len(base)} trials, {base['speaker'].nunique()} speakers; load {os.getloadavg()}")
    rows = []
    for name, (make, kw) in variants(base, la).items():
        if a.only and not any(o in name for o in a.only):
            continue
        res = run_one(make(), kw, a.shares, not a.no_public)
        rows.append(dict(base=a.base, variant=name, **res, load=round(os.getloadavg()[0], 1)))
        print(" | ".join(str(x) for x in rows[-1].values()), flush=True)
    if a.out:
        pd.DataFrame(rows).to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
