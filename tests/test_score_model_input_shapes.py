"""Input shapes of issue 19's held-out protocol (session 9, s9robust): the failures found by
``benchmarks/score_model_input_shapes.py`` and their fixes.

Independent values:
(a) a table whose classes are separated within every speaker (every bona fide score above
    every spoof score of the same speaker) has speaker EER exactly 0 by counting
    (``sm.eer``), so the model's per-speaker EER at attainable thresholds must be 0 too;
(b) bad input is known by construction (which column, how many rows, the caller's row label);
(c) a table with a single negative trial has no negative in the held-out share B (a cell of
    one trial goes to A), so no speaker can be scored: ``n_groups = 0``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.locscale.fit import LocScaleError
from scoremix.locscale.speaker_pool import with_speaker_pooling
from scoremix.validation import ValidationError, validate_model


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def _table(n_spk: int = 8, n_per: int = 18, sep: float = 2.0, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    i = np.tile(np.arange(n_per), n_spk)
    spk = np.repeat(np.arange(n_spk), n_per)
    y = i % 3 == 0
    s = rng.normal(np.where(y, sep, 0.0), 1.0) + rng.normal(0, 0.5, n_spk)[spk]
    return pd.DataFrame({"speaker": [f"S{k:02d}" for k in spk], "label": np.where(y, "bonafide", "spoof"),
                         "attack": np.where(y, "-", np.where(i % 2 == 0, "A1", "A2")), "score": s})


def _two_negatives_per_speaker(t: pd.DataFrame) -> pd.DataFrame:
    """Every speaker keeps one spoof of each attack: each speaker × attack cell a single trial."""
    neg = t.index[t["label"] == "spoof"]
    keep = t.loc[neg].groupby(["speaker", "attack"]).head(1).index
    return t.drop(neg.difference(keep)).reset_index(drop=True)


def _one_positive_per_speaker(t: pd.DataFrame) -> pd.DataFrame:
    pos = t.index[t["label"] == "bonafide"]
    keep = t.loc[pos].groupby("speaker").head(1).index
    return t.drop(pos.difference(keep)).reset_index(drop=True)


@pytest.mark.parametrize("shape, criterion", [("negatives", "error_rates"), ("negatives", "crps"),
                                              ("positives", "error_rates")])
def test_speaker_pooling_with_single_trial_cells(shape, criterion):
    # Before s9robust the speaker-pooling CV refitted on a part holding no trial of one class
    # (every single-trial cell is dealt into part 0) and score_model raised "holds one class
    # only" (negatives) or "positive='bonafide' does not occur" (positives).
    t = (_two_negatives_per_speaker if shape == "negatives" else _one_positive_per_speaker)(_table(sep=40.0))
    cls = "spoof" if shape == "negatives" else "bonafide"
    assert t[t["label"] == cls].groupby(["speaker", "attack"]).size().eq(1).all()
    fit = _quiet(sm.score_model, t, factors=["attack"], positive="bonafide", speaker_pooling=criterion)
    tab = _quiet(sm.model_eer, fit, by="speaker", positive="bonafide", n_boot=0)
    counted = t.groupby("speaker").apply(lambda g: sm.eer(g["score"].to_numpy(), (g["label"] == "bonafide").to_numpy()),
                                         include_groups=False)
    assert (counted == 0).all()
    assert len(tab) == 8 and (tab["eer_model"] == 0).all()


def test_speaker_pooling_without_cv_evidence_is_the_model_alone():
    # No part can be refitted with both classes, so the CV has no entry: the pooling is the
    # most pooled candidate, κ = ∞ (the model alone), i.e. the fit without speaker pooling.
    t = _two_negatives_per_speaker(_table(sep=1.5, seed=2))
    fit = _quiet(sm.score_model, t, factors=["attack"], positive="bonafide")
    a = _quiet(sm.model_eer, fit, by="speaker", positive="bonafide", n_boot=0)["eer_model"]
    with_speaker_pooling(fit, np.inf)                   # the same fit, the model alone
    b = _quiet(sm.model_eer, fit, by="speaker", positive="bonafide", n_boot=0)["eer_model"]
    assert a.between(0, 0.5).all() and np.isfinite(a).all()
    np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), rtol=0, atol=1e-12)


def test_validate_model_many_speakers_with_singleton_cells_in_a():
    # 40 speakers × 12 trials at a 20 % share: every speaker × class × attack cell of A holds one
    # trial, so the speaker-pooling CV's second part was empty (numpy "zero-size array" error).
    t = _table(n_spk=40, n_per=12, sep=40.0, seed=3)
    r = _quiet(validate_model, t, factors=["attack"], positive="bonafide", share=0.2, seed=1)
    g = r.groups[r.groups["cells"] == "speaker"]
    assert r.info["n_fit"] == 40 * 3                       # one trial of each of 3 cells per speaker
    assert len(g) == 40 and (g["eer_heldout"] == 0).all() and (g["eer_model"] == 0).all()


def test_empty_table_is_a_locscale_error():
    with pytest.raises(LocScaleError, match="no rows"):
        sm.score_model(_table().iloc[:0], factors=["attack"], positive="bonafide")


def test_validate_model_nan_score_names_the_column_and_row():
    t = _table().set_axis(np.arange(100, 100 + 8 * 18))
    t.loc[[107, 150], "score"] = np.nan
    with pytest.raises(ValidationError, match=r"score column 'score' has 2 missing .*first at row 107"):
        validate_model(t, factors=["attack"], positive="bonafide", share=0.5, seed=1)


def test_validate_model_nan_factor_names_the_callers_row():
    # Before: the error came from score_model on A, whose rows are renumbered (the row named
    # was A's, not the caller's).
    t = _table()
    rows = t.index[t["label"] == "spoof"][[3, 8, 20]]
    t["attack"] = t["attack"].astype(object)
    t.loc[rows, "attack"] = np.nan
    with pytest.raises(ValidationError, match=rf"column 'attack' has 3 missing value\(s\) \(first at row {rows[0]}\)"):
        validate_model(t, factors=["attack"], positive="bonafide", share=0.2, seed=1)


def test_validate_model_with_no_scorable_speaker_reports_zero_groups():
    t = _table()
    neg = t.index[t["label"] == "spoof"]
    t = t.drop(neg[1:]).reset_index(drop=True)          # one negative trial: it goes to A
    r = _quiet(validate_model, t, factors=["attack"], positive="bonafide", share=0.5, seed=1)
    for m in ("eer", "min_dcf"):
        row = r.summary.loc[("speaker", m)]
        assert row["n_groups"] == 0 and np.isnan(row["ratio_model"]) and np.isnan(row["mae_model"])
    only = t.loc[t["label"] == "spoof", "speaker"].iloc[0]        # the one speaker with both classes
    assert r.info["n_fit"] + r.info["n_heldout"] == int((t["speaker"] == only).sum())


def test_ratio_is_infinite_when_counting_is_exact_and_the_model_is_not():
    # Counting MAE 0 with a model MAE > 0 was reported as NaN, like 0/0.
    from scoremix.validation import _summarise

    tab = pd.DataFrame({"eer_heldout": [0.0, 0.0], "eer_model": [0.01, 0.0], "eer_count": [0.0, 0.0],
                        "min_dcf_heldout": [0.0, 0.0], "min_dcf_model": [0.0, 0.0], "min_dcf_count": [0.0, 0.0]})
    out = _summarise(tab, {"eer": 0.0, "min_dcf": 0.0})
    assert out.loc["eer", "mae_model"] == pytest.approx(0.005, abs=1e-15)
    assert out.loc["eer", "ratio_model"] == np.inf
    assert np.isnan(out.loc["min_dcf", "ratio_model"])                # 0 / 0
    assert out.loc["eer", "mae_shrunk"] == 0 and np.isnan(out.loc["eer", "ratio_shrunk"])  # counts and pool exact
