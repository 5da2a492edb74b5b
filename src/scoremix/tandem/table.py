r"""One table of every tandem metric for an ASV score table joined to one or more CM systems.

The t-DCF uses the CM protocol's own trials (bona fide and spoof utterances); the t-EER, the
a-DCF and the SASV EERs use the ASV trials with the CM score of their test utterance joined on
``join`` (the SASV 2022 / ASVspoof 5 set-up).  a-DCF and the SASV EERs are those of the cascade
score (:func:`scoremix.tandem.api.cascade_scores`: the ASV at its EER threshold, then the CM).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from scoremix.tandem.api import adcf, cascade_scores, sasv_eer, tdcf, teer
from scoremix.tandem.errors import TandemInputError

__all__ = ["TANDEM_COLUMNS", "tandem_table"]

TANDEM_COLUMNS = ("min_tdcf_2019", "min_tdcf_2021", "teer", "min_adcf", "sasv_eer", "sv_eer", "spf_eer")


def _need(df: pd.DataFrame, cols: list[str | None], what: str) -> None:
    for c in cols:
        if c is not None and c not in df.columns:
            raise TandemInputError(f"{what} has no column {c!r} (columns: {list(df.columns)})")


def tandem_table(asv: pd.DataFrame, cm: pd.DataFrame, *, join: str = "utt", asv_score: str = "score",
                 asv_key: str = "trial_type", cm_score: str = "score", cm_key: str = "label",
                 system: str | None = None, asv_speaker: str | None = None, cm_speaker: str | None = None,
                 lower_is_bonafide: Any = (), n_boot: int = 0, seed: int = 0, level: float = 0.95,
                 by: tuple[str, str] | None = None) -> pd.DataFrame:
    """Every tandem metric (:data:`TANDEM_COLUMNS`, each with ``_lo``/``_hi`` when ``n_boot > 0``)
    per CM system (``system`` column of ``cm``; one system when None).

    ``lower_is_bonafide``: the systems whose CM scores are lower for bona fide (negated here).
    ``asv_speaker`` / ``cm_speaker``: cluster columns of the bootstrap (the t-EER, a-DCF and SASV
    intervals cluster the ASV trials by ``asv_speaker``).  ``by=(asv_column, cm_column)``: one row per
    system and level (e.g. ``("claimed_gender", "speaker_gender")``); each subgroup's ASV threshold is
    placed on its own trials, as a per-subgroup evaluation does."""
    if by is not None:
        a_col, c_col = by
        _need(asv, [a_col], "the ASV table")
        _need(cm, [c_col], "the CM table")
        parts = []
        for lev in sorted(set(asv[a_col].dropna().astype(str)) | set(cm[c_col].dropna().astype(str))):
            sa = asv[asv[a_col].astype(str) == lev].reset_index(drop=True)
            sc = cm[cm[c_col].astype(str) == lev].reset_index(drop=True)
            part = tandem_table(sa, sc, join=join, asv_score=asv_score, asv_key=asv_key, cm_score=cm_score,
                                cm_key=cm_key, system=system, asv_speaker=asv_speaker, cm_speaker=cm_speaker,
                                lower_is_bonafide=lower_is_bonafide, n_boot=n_boot, seed=seed, level=level)
            part.insert(1, "group", lev)
            parts.append(part)
        return pd.concat(parts, ignore_index=True)
    _need(asv, [join, asv_score, asv_key, asv_speaker], "the ASV table")
    _need(cm, [join, cm_score, cm_key, system, cm_speaker], "the CM table")
    if n_boot and (asv_speaker is None or cm_speaker is None):
        raise TandemInputError("n_boot > 0 needs asv_speaker and cm_speaker (the bootstrap clusters)")
    groups = cm.groupby(system, sort=True) if system else [("cm", cm)]
    flip = {lower_is_bonafide} if isinstance(lower_is_bonafide, str) else set(lower_is_bonafide)
    rows = []
    for name, g in groups:
        g = g.copy()
        if g[join].duplicated().any():
            dup = g.loc[g[join].duplicated(), join].iloc[0]
            raise TandemInputError(f"CM system {name!r}: {join} {dup!r} appears more than once")
        sc = g[cm_score].to_numpy(float) * (-1.0 if name in flip else 1.0)
        g["_cm"] = sc
        j = asv.merge(g[[join, "_cm"]], on=join, how="left")
        if j["_cm"].isna().any():
            miss = j.loc[j["_cm"].isna(), join].iloc[0]
            raise TandemInputError(f"CM system {name!r} has no score for the ASV trial's {join} {miss!r}")
        keys = j[asv_key].to_numpy()
        boot = dict(n_boot=n_boot, seed=seed, level=level)
        spk = j[asv_speaker].to_numpy() if n_boot else None
        ests = {
            "min_tdcf_2019": tdcf(asv[asv_score], asv[asv_key], sc, g[cm_key], "asvspoof2019",
                                  asv_speaker=asv[asv_speaker] if n_boot else None,
                                  cm_speaker=g[cm_speaker] if n_boot else None, **boot),
            "min_tdcf_2021": tdcf(asv[asv_score], asv[asv_key], sc, g[cm_key], "asvspoof2021",
                                  asv_speaker=asv[asv_speaker] if n_boot else None,
                                  cm_speaker=g[cm_speaker] if n_boot else None, **boot),
            "teer": teer(j[asv_score], j["_cm"], keys, speaker=spk, **boot),
        }
        casc = cascade_scores(j[asv_score], j["_cm"], keys)
        ests["min_adcf"] = adcf(casc, keys, speaker=spk, **boot)
        se = sasv_eer(casc, keys, speaker=spk, **boot)
        ests.update({"sasv_eer": se.sasv, "sv_eer": se.sv, "spf_eer": se.spf})
        row: dict[str, Any] = {"system": name}
        for k, e in ests.items():
            row[k] = float(e)
            if n_boot:
                row[f"{k}_lo"], row[f"{k}_hi"] = e.lo, e.hi
        row["asv_threshold"] = ests["min_tdcf_2019"].asv_threshold
        row["n_cm_trials"], row["n_asv_trials"] = len(g), len(j)
        rows.append(row)
    return pd.DataFrame(rows)
