"""Tests of scoremix.trials: label normalisation, loading, validation, readers."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.trials import (
    ColumnConflictError,
    DuplicateTrialError,
    EmptyTableError,
    LabelError,
    MissingColumnError,
    NonFiniteScoreError,
    NonNumericScoreError,
    SingleClassError,
    TrialTableError,
    UnmatchedTrialError,
    label_to_binary,
    load_trials,
    read_asvspoof_cm,
    read_kaldi_trials,
)

FIX = Path(__file__).resolve().parent / "data" / "trials"


# ----------------------------------------------------------------------------- labels
@pytest.mark.parametrize(
    "values, expected",
    [
        (["target", "nontarget", "Target", "NON-TARGET", "non_target"], [1, 0, 1, 0, 0]),
        (["bonafide", "bona fide", "Bona-Fide", "spoof", "SPOOF"], [1, 1, 1, 0, 0]),
        (["genuine", "impostor", "Genuine", "imposter"], [1, 0, 1, 0]),
        (["real", "fake", "REAL"], [1, 0, 1]),
        ([1, 0, 0, 1], [1, 0, 0, 1]),
        ([True, False, True], [1, 0, 1]),
        (["1", "0", "true", "False"], [1, 0, 1, 0]),
        (np.array([1.0, 0.0]), [1, 0]),
        (pd.Series(["spoof", "bonafide"], dtype="category"), [0, 1]),
    ],
)
def test_label_vocabularies(values, expected):
    y = label_to_binary(values)
    assert y.dtype == np.int8
    assert y.tolist() == expected


def test_label_positive_explicit():
    vals = ["target", "nontarget", "spoof", "Target"]
    # positive='target': only the target rows (case-insensitive) are 1, spoof becomes 0
    assert label_to_binary(vals, positive="target").tolist() == [1, 0, 0, 1]
    assert label_to_binary(["a", "b", "c"], positive="b").tolist() == [0, 1, 0]
    assert label_to_binary([3, 7, 3], positive=7).tolist() == [0, 1, 0]


def test_label_unknown_names_column_and_values():
    with pytest.raises(LabelError, match=r"'cls'.*'maybe'.*positive="):
        label_to_binary(["target", "maybe"], column="cls")
    # rows holding the unknown value are counted and their positions given (0-based)
    with pytest.raises(LabelError, match=r"'spof' \(2 row\(s\), first at position\(s\) 1, 3\)"):
        label_to_binary(["spoof", "spof", "bonafide", "spof"], column="label")
    with pytest.raises(LabelError, match="0.5"):
        label_to_binary(np.array([0.0, 0.5, 1.0]))


def test_label_mixed_vocabularies_rejected():
    with pytest.raises(LabelError, match="mixes label vocabularies"):
        label_to_binary(["target", "nontarget", "spoof"])


def test_label_missing_values():
    with pytest.raises(LabelError, match=r"1 missing label.*position\(s\) 1"):
        label_to_binary(["target", None, "nontarget"])
    with pytest.raises(LabelError, match="missing"):
        label_to_binary(np.array([1.0, np.nan]))


def test_label_positive_absent():
    with pytest.raises(LabelError, match="does not occur"):
        label_to_binary(["a", "b"], positive="target")


def test_errors_are_value_errors():
    assert issubclass(LabelError, ValueError)
    assert issubclass(MissingColumnError, TrialTableError)
    assert issubclass(TrialTableError, ValueError)


# ----------------------------------------------------------------------------- load_trials
def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "utt": ["u1", "u2", "u3", "u4"],
            "spk": ["a", "a", "b", "b"],
            "cm_score": [0.5, -1.0, 2, 3],
            "key": ["bonafide", "spoof", "spoof", "bonafide"],
        }
    )


def test_load_dataframe_keeps_columns_and_does_not_modify_input():
    src = _frame()
    before = src.copy()
    df = load_trials(src, score="cm_score", label="key", trial_id="utt")
    pd.testing.assert_frame_equal(src, before)
    assert list(df.columns) == ["utt", "spk", "score", "label", "y"]
    assert df["score"].dtype == np.float64
    assert df["y"].dtype == np.int8
    assert df["label"].tolist() == ["bonafide", "spoof", "spoof", "bonafide"]
    assert df["y"].tolist() == [1, 0, 0, 1]
    assert df["score"].tolist() == [0.5, -1.0, 2.0, 3.0]


@pytest.mark.parametrize("name, sep", [("t.csv", ","), ("t.tsv", "\t"), ("t.csv.gz", ","),
                                       ("t.tsv.gz", "\t"), ("t.txt", "\t"), ("t.dat", " ")])
def test_load_text_formats(tmp_path, name, sep):
    src = _frame()
    path = tmp_path / name
    text = src.to_csv(sep=sep, index=False)
    if name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    df = load_trials(path, score="cm_score", label="key")
    assert df["y"].tolist() == [1, 0, 0, 1]
    assert df["score"].tolist() == [0.5, -1.0, 2.0, 3.0]
    assert df["utt"].tolist() == ["u1", "u2", "u3", "u4"]


def test_load_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "t.parquet"
    _frame().to_parquet(path)
    df = load_trials(str(path), score="cm_score", label="key")
    assert df["y"].tolist() == [1, 0, 0, 1]
    assert list(df.columns) == ["utt", "spk", "score", "label", "y"]


def test_load_explicit_sep_and_read_kw(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("# comment\nscore;label\n1;target\n2;nontarget\n")
    df = load_trials(path, sep=";", comment="#")
    assert df["y"].tolist() == [1, 0]


def test_empty_table(tmp_path):
    with pytest.raises(EmptyTableError, match="no rows"):
        load_trials(pd.DataFrame({"score": [], "label": []}))
    path = tmp_path / "e.csv"
    path.write_text("")
    with pytest.raises(EmptyTableError):
        load_trials(path)
    path.write_text("score,label\n")
    with pytest.raises(EmptyTableError):
        load_trials(path)


def test_missing_columns_named_with_available():
    with pytest.raises(MissingColumnError, match=r"score column 'score'.*'cm_score'"):
        load_trials(_frame(), label="key")
    with pytest.raises(MissingColumnError, match=r"label column 'label'.*'key'"):
        load_trials(_frame(), score="cm_score")
    with pytest.raises(MissingColumnError, match="trial id column 'trial'"):
        load_trials(_frame(), score="cm_score", label="key", trial_id="trial")


def test_column_conflicts():
    df = _frame().assign(score=1.0)
    with pytest.raises(ColumnConflictError, match="'score'"):
        load_trials(df, score="cm_score", label="key")
    df = _frame().assign(y=1)  # disagrees with the labels (rows 1 and 2 are negative)
    with pytest.raises(ColumnConflictError, match=r"'y'.*rows \[1, 2\]"):
        load_trials(df, score="cm_score", label="key")


def test_existing_y_that_agrees_is_accepted():
    base = load_trials(_frame(), score="cm_score", label="key")
    again = load_trials(_frame().assign(y=base["y"].to_numpy()), score="cm_score", label="key")
    assert again["y"].tolist() == [1, 0, 0, 1]
    assert again["y"].dtype == np.int8


def test_non_numeric_scores():
    df = _frame()
    df["cm_score"] = ["0.5", "oops", "2", "3"]
    with pytest.raises(NonNumericScoreError, match=r"'oops'.*position\(s\) \[1\]"):
        load_trials(df, score="cm_score", label="key")


def test_non_finite_scores_count_and_rows():
    df = _frame()
    df["cm_score"] = [np.nan, 1.0, np.inf, -np.inf]
    with pytest.raises(NonFiniteScoreError, match=r"3 non-finite.*1 NaN.*2 infinite.*\[0, 2, 3\]"):
        load_trials(df, score="cm_score", label="key")


def test_single_class():
    df = _frame()
    df["key"] = "spoof"
    with pytest.raises(SingleClassError, match="only negative trials.*no positive"):
        load_trials(df, score="cm_score", label="key")
    df["key"] = "bonafide"
    with pytest.raises(SingleClassError, match="only positive trials"):
        load_trials(df, score="cm_score", label="key")


def test_duplicate_trial_ids():
    df = _frame()
    df.loc[2, "utt"] = "u1"
    with pytest.raises(DuplicateTrialError, match=r"1 duplicated.*'u1'.*\[0, 2\]"):
        load_trials(df, score="cm_score", label="key", trial_id="utt")
    # a pair of columns is a composite id: (a, u1) and (b, u1) differ
    out = load_trials(df, score="cm_score", label="key", trial_id=["spk", "utt"])
    assert len(out) == 4


def test_label_error_from_load_names_column():
    df = _frame()
    df.loc[0, "key"] = "unknown"
    with pytest.raises(LabelError, match="'key'.*'unknown'"):
        load_trials(df, score="cm_score", label="key")


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        load_trials("/nonexistent/trials.csv")


# ----------------------------------------------------------------------------- readers
@pytest.mark.parametrize("scores", ["cm_scores_2col.txt", "cm_scores_4col.txt"])
def test_read_asvspoof_cm_2019(scores):
    df = read_asvspoof_cm(FIX / "cm_protocol_2019.txt", FIX / scores)
    assert list(df.columns) == ["speaker", "utt", "attack", "label", "score", "y"]
    # protocol order; scores looked up by utterance id in the (shuffled) score file
    assert df["utt"].tolist() == ["LA_E_0001", "LA_E_0002", "LA_E_0003", "LA_E_0004", "LA_E_0005"]
    assert df["score"].tolist() == [-2.25, 3.5, -1.5, 2.0, 0.125]
    assert df["y"].tolist() == [0, 1, 0, 1, 0]
    assert df["attack"].tolist() == ["A11", "-", "A14", "-", "A09"]


def test_read_asvspoof_cm_2021_wide_protocol():
    df = read_asvspoof_cm(FIX / "cm_protocol_2021.txt", FIX / "cm_scores_2021.txt")
    assert df["attack"].tolist() == ["A07", "bonafide", "A12"]
    assert df["score"].tolist() == [-3.0, 4.0, -0.5]
    assert df["y"].tolist() == [0, 1, 0]
    assert df["field3"].tolist() == ["alaw", "none", "ulaw"]
    assert df["field8"].tolist() == ["eval", "eval", "progress"]


def test_read_asvspoof_cm_unmatched(tmp_path):
    sc = tmp_path / "s.txt"
    sc.write_text("LA_E_0001 1\nLA_E_0002 2\nLA_E_0003 3\nLA_E_0004 4\n")
    with pytest.raises(UnmatchedTrialError, match=r"1 utterance.*protocol.*'LA_E_0005'"):
        read_asvspoof_cm(FIX / "cm_protocol_2019.txt", sc)
    out = read_asvspoof_cm(FIX / "cm_protocol_2019.txt", sc, require_all=False)
    assert len(out) == 4
    sc.write_text("LA_E_0001 1\nLA_E_0002 2\nLA_E_0003 3\nLA_E_0004 4\nLA_E_0005 5\nLA_E_9999 0\n")
    with pytest.raises(UnmatchedTrialError, match="'LA_E_9999'"):
        read_asvspoof_cm(FIX / "cm_protocol_2019.txt", sc, require_all=False)


def test_read_asvspoof_cm_label_disagreement(tmp_path):
    sc = tmp_path / "s.txt"
    text = (FIX / "cm_scores_4col.txt").read_text().replace("LA_E_0001 A11 spoof", "LA_E_0001 A11 bonafide")
    sc.write_text(text)
    with pytest.raises(LabelError, match="LA_E_0001"):
        read_asvspoof_cm(FIX / "cm_protocol_2019.txt", sc)


def test_read_asvspoof_cm_duplicate_scores(tmp_path):
    sc = tmp_path / "s.txt"
    sc.write_text((FIX / "cm_scores_2col.txt").read_text() + "LA_E_0001 9\n")
    with pytest.raises(DuplicateTrialError, match="LA_E_0001"):
        read_asvspoof_cm(FIX / "cm_protocol_2019.txt", sc)


def test_read_kaldi_trials():
    df = read_kaldi_trials(FIX / "kaldi_trials.txt", FIX / "kaldi_scores.txt")
    assert list(df.columns) == ["enrol", "test", "label", "score", "y"]
    assert df["test"].tolist() == ["id10001-a", "id10002-b", "id10002-c", "id10001-d"]
    assert df["score"].tolist() == [0.75, -0.5, 0.5, -0.25]
    assert df["y"].tolist() == [1, 0, 1, 0]


def test_read_kaldi_trials_unmatched(tmp_path):
    sc = tmp_path / "s.txt"
    sc.write_text("id10001 id10001-a 0.75\nid10002 id10002-c 0.5\nid10002 id10001-d -0.25\n")
    with pytest.raises(UnmatchedTrialError, match=r"1 trial.*'id10001 id10002-b'"):
        read_kaldi_trials(FIX / "kaldi_trials.txt", sc)


# ----------------------------------------------------------------------------- real data
def test_load_real_asvspoof_table(shared_data):
    path = shared_data / "asvspoof2019_la_eval" / "asvspoof2019_la_eval.csv.gz"
    df = load_trials(path, score="score_logit", label="label", trial_id="utt")
    # README: 71,237 trials, 7,355 bona fide, 13 attacks x 4,914 spoofed trials
    assert len(df) == 71_237
    assert int(df["y"].sum()) == 7_355
    assert int((df["y"] == 0).sum()) == 13 * 4_914
    assert {"utt", "speaker", "speaker_gender", "attack", "score_raw"} <= set(df.columns)


def test_label_positive_matches_across_types():
    # positive given as typed on a command line ("1") selects the 1s of a numeric column
    assert label_to_binary(np.array([1, 0, 1]), positive="1").tolist() == [1, 0, 1]
    assert label_to_binary(np.array([2.0, 1.0, 3.0]), positive="2").tolist() == [1, 0, 0]
    assert label_to_binary(["1", "0"], positive=1).tolist() == [1, 0]
    assert label_to_binary([True, False, True], positive="true").tolist() == [1, 0, 1]
    assert label_to_binary(["Bona Fide", "spoof", "bonafide"], positive="bonafide").tolist() == [1, 0, 1]
    # and through load_trials on an integer 0/1 file column
    df = pd.DataFrame({"score": [0.1, 0.2, 0.3], "label": [0, 1, 1]})
    assert load_trials(df, positive="1")["y"].tolist() == [0, 1, 1]
    assert load_trials(df, positive="0")["y"].tolist() == [1, 0, 0]


def test_read_asvspoof_cm_real_protocol_round_trip(shared_data, tmp_path):
    # Write the real eval table as an official 2019 protocol (bona fide attack field "-")
    # and a shuffled 2-column score file, read them back: same trials, and the pooled EER
    # of system_eer_check.json (ASVspoof recipe, percent, 3 decimals) is reproduced.
    import json

    from scoremix.metrics import eer

    folder = shared_data / "asvspoof2019_la_eval"
    t = pd.read_csv(folder / "asvspoof2019_la_eval.csv.gz")
    attack = t["attack"].where(t["label"] != "bonafide", "-")
    proto = tmp_path / "ASVspoof2019.LA.cm.eval.trl.txt"
    proto.write_text("".join(f"{s} {u} - {a} {lab}\n" for s, u, a, lab in
                             zip(t["speaker"], t["utt"], attack, t["label"])))
    shuffled = t.sample(frac=1.0, random_state=0)
    scores = tmp_path / "scores.txt"
    scores.write_text("".join(f"{u} {v!r}\n" for u, v in zip(shuffled["utt"], shuffled["score_logit"])))
    df = read_asvspoof_cm(proto, scores)
    assert df["utt"].tolist() == t["utt"].tolist()  # protocol order
    np.testing.assert_array_equal(df["score"].to_numpy(), t["score_logit"].to_numpy())
    assert int(df["y"].sum()) == 7_355 and len(df) == 71_237
    ref = json.loads((folder / "system_eer_check.json").read_text())["rawnet2_transferfiles"]
    assert round(100 * eer(df["score"], df["y"], "asvspoof"), 3) == ref["eer_pct"]


def test_read_kaldi_trials_real_asv_baseline(shared_data, tmp_path):
    # The ASVspoof 2019 official ASV baseline, target vs nontarget, as a Kaldi trials list
    # (claimed speaker, test utterance, target|nontarget) and a shuffled score file. Its
    # README gives the EER as 2.43 % (dev) and 2.46 % (eval), 2 decimals.
    from scoremix.metrics import eer

    d = pd.read_csv(shared_data / "asvspoof2019_la_asv_baseline" / "asvspoof2019_la_asv_baseline.csv.gz")
    for split, ref in (("dev", 2.43), ("eval", 2.46)):
        g = d[(d["split"] == split) & (d["trial_type"] != "spoof")]
        trials, scores = tmp_path / f"trials_{split}", tmp_path / f"scores_{split}"
        trials.write_text("".join(f"{e} {u} {k}\n" for e, u, k in
                                  zip(g["claimed_speaker"], g["utt"], g["trial_type"])))
        sh = g.sample(frac=1.0, random_state=1)
        scores.write_text("".join(f"{e} {u} {v!r}\n" for e, u, v in
                                  zip(sh["claimed_speaker"], sh["utt"], sh["score"])))
        df = read_kaldi_trials(trials, scores)
        assert len(df) == len(g)
        assert df["test"].tolist() == g["utt"].tolist()
        np.testing.assert_array_equal(df["score"].to_numpy(), g["score"].to_numpy())
        assert int(df["y"].sum()) == int((g["trial_type"] == "target").sum())
        assert round(100 * eer(df["score"], df["y"], "asvspoof"), 2) == ref


def test_kaldi_reader_names_a_file_with_the_wrong_field_count(tmp_path):
    (tmp_path / "trials").write_text("a b target extra\n")
    (tmp_path / "scores").write_text("a b 1.0\n")
    with pytest.raises(TrialTableError, match=r"trials file .* has 4 fields per line; expected 3 "
                                              r"\(enrol test target\|nontarget\)"):
        read_kaldi_trials(tmp_path / "trials", tmp_path / "scores")
    (tmp_path / "trials").write_text("a b target\n")
    (tmp_path / "scores").write_text("a 1.0\n")
    with pytest.raises(TrialTableError, match=r"score file .* has 2 fields per line; expected 3 "
                                              r"\(enrol test score\)"):
        read_kaldi_trials(tmp_path / "trials", tmp_path / "scores")
