"""Readers and inputs that used to fail silently or with a raw traceback (issue 24, items 7–8)."""

from __future__ import annotations

import bz2
import lzma
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.cli import main
from scoremix.trials import TrialTableError


def _df(n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    y = np.arange(n) % 2
    return pd.DataFrame({"score": np.round(rng.normal(size=n) + 2 * y, 6), "label": np.where(y == 1, "target",
                                                                                             "nontarget"),
                         "spk": [f"s{i % 5}" for i in range(n)]})


def test_parquet_folder(tmp_path: Path) -> None:
    df = _df()
    folder = tmp_path / "data"  # a partitioned data set: a folder of parquet files, no suffix
    df.to_parquet(folder, partition_cols=["spk"])
    assert folder.is_dir()
    t = sm.load_trials(folder)
    assert len(t) == len(df) and sorted(t["score"]) == sorted(df["score"])


def test_folder_without_tables_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrialTableError, match="is a folder"):
        sm.load_trials(tmp_path / "empty")


@pytest.mark.parametrize("name,sep", [("t.csv.xz", ","), ("t.tsv.bz2", "\t"), ("t.txt.zip", ";"),
                                      ("t.txt.xz", "\t"), ("t.csv.bz2", ",")])
def test_compressed_files_keep_their_separator(tmp_path: Path, name: str, sep: str) -> None:
    df = _df()
    path = tmp_path / name
    text = df.to_csv(index=False, sep=sep).encode()
    if name.endswith(".xz"):
        path.write_bytes(lzma.compress(text))
    elif name.endswith(".bz2"):
        path.write_bytes(bz2.compress(text))
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(name[:-4], text)
    t = sm.load_trials(path)
    assert list(t.columns) == ["score", "label", "spk", "y"]
    np.testing.assert_array_equal(t["score"].to_numpy(), df["score"].to_numpy())


def test_dev_stdin_keeps_its_header(tmp_path: Path) -> None:
    df = _df()
    text = df.to_csv(index=False)
    code = "import scoremix as sm; t = sm.load_trials('/dev/stdin'); print(len(t), list(t.columns))"
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-1500:]
    assert out.stdout.strip() == f"{len(df)} ['score', 'label', 'spk', 'y']"


def test_ragged_line_names_the_line(tmp_path: Path) -> None:
    lines = _df(200).to_csv(index=False).splitlines()
    lines[137] += ",extra"
    path = tmp_path / "r.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TrialTableError, match=r"r\.csv: line 138 has 4 fields, the header has 3"):
        sm.load_trials(path)
    assert main(["eer", str(path)]) == 2


@pytest.mark.parametrize("name", ["c.txt", "c.csv"])
def test_comma_decimals_get_the_decimal_hint(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("score;label\n0,5;target\n-1,25;nontarget\n1,75;target\n0,1;nontarget\n")
    with pytest.raises(TrialTableError, match=r"decimal=','"):
        sm.load_trials(path)
    t = sm.load_trials(path, sep=";", decimal=",")
    assert t["score"].tolist() == [0.5, -1.25, 1.75, 0.1]


def test_duplicated_score_column_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("score,label,score\n1,target,3\n2,nontarget,4\n")
    with pytest.raises(TrialTableError, match="'score' appears 2 times"):
        sm.load_trials(path)


def test_duplicated_columns_in_a_dataframe() -> None:
    df = pd.DataFrame([[1.0, "target", 2.0], [0.5, "nontarget", 1.0]], columns=["score", "label", "score"])
    with pytest.raises(TrialTableError, match="'score' appears 2 times"):
        sm.load_trials(df)


@pytest.mark.parametrize("pos,neg", [("target", "impostor"), ("genuine", "spoof")])
def test_standard_label_pairs(pos: str, neg: str) -> None:
    y = sm.trials.label_to_binary(pd.Series([pos, neg, neg, pos]))
    assert y.tolist() == [1, 0, 0, 1]


def test_two_positive_spellings_still_refused() -> None:
    with pytest.raises(sm.trials.LabelError, match="mixes label vocabularies"):
        sm.trials.label_to_binary(pd.Series(["target", "genuine", "impostor"]))


def test_infinite_logits_advice_keeps_the_trials(tmp_path: Path, capsys) -> None:
    df = _df()
    df.loc[3, "score"] = -np.inf
    path = tmp_path / "l.csv"
    df.to_csv(path, index=False)
    assert main(["eer", str(path)]) == 2
    err = capsys.readouterr().err
    assert "remove" not in err and "keep them" in err  # dropping saturated trials biases the EER
    assert "order" in err and "transform" in err


def test_simulate_feather_writes_feather(tmp_path: Path) -> None:
    out = tmp_path / "x.feather"
    assert main(["simulate", "--out", str(out), "--n-trials", "500"]) == 0
    t = pd.read_feather(out)
    assert len(t) == 500 and "score" in t.columns


def test_simulate_unknown_suffix_refused(tmp_path: Path, capsys) -> None:
    assert main(["simulate", "--out", str(tmp_path / "x.xlsx"), "--n-trials", "500"]) == 2
    assert "unknown table format" in capsys.readouterr().err
    assert not (tmp_path / "x.xlsx").exists()


def test_transform_fit_json_reload_keeps_its_transform() -> None:
    from scoremix.lme.result import LmerResult

    rng = np.random.default_rng(1)
    spk = np.repeat(np.arange(15), 20)
    y = np.arange(spk.size) % 2
    s = np.exp(0.5 * (1.5 * y + rng.normal(0, 0.5, 15)[spk] + rng.normal(size=spk.size)))
    df = pd.DataFrame({"score": s, "y": y, "spk": spk.astype(str)})
    fit = sm.lmer("score ~ y + (1|spk)", df, transform="monotone")
    import json

    back = LmerResult.from_dict(json.loads(fit.to_json()))
    assert getattr(back, "transform", None) is not None
    grid = np.quantile(s, [0.1, 0.5, 0.9])
    np.testing.assert_allclose(back.transform(grid), fit.transform(grid), rtol=1e-12)
    np.testing.assert_allclose(back.fixef.to_numpy(), fit.fixef.to_numpy(), rtol=1e-12)


def test_zst_without_zstandard_is_a_named_error(tmp_path):
    """A ``.zst`` table without the optional ``zstandard`` package: a named error saying what to
    install, not a raw ``ImportError``."""
    import importlib.util

    if importlib.util.find_spec("zstandard") is not None:
        pytest.skip("zstandard is installed: the .zst path reads the file")
    from scoremix.trials import CorruptFileError, load_trials

    f = tmp_path / "scores.csv.zst"
    f.write_bytes(b"\x28\xb5\x2f\xfd not really zstd")
    with pytest.raises(CorruptFileError, match="zstandard"):
        load_trials(f)
