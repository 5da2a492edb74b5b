"""Atomic writes (issue 24, item 6): a full disk (``OSError(ENOSPC)`` raised part-way through a
write) leaves no partial or 0-byte file, and ``--overwrite`` keeps the old complete result.

The disk is "filled" by wrapping ``open``: writes into the files chosen by ``match`` raise
ENOSPC once ``limit`` bytes have been written (pandas, json and pathlib all write through it)."""

from __future__ import annotations

import builtins
import errno
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.atomic import write_table, write_text
from scoremix.cli import main


class _Full:
    def __init__(self, fh, budget: list[int]):
        self._fh, self._budget = fh, budget

    def write(self, data):
        self._budget[0] -= len(data)
        if self._budget[0] < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._fh.write(data)

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def __iter__(self):
        return iter(self._fh)


@pytest.fixture()
def full_disk(monkeypatch):
    """``full_disk(match, limit)``: files whose path contains ``match`` fail after ``limit`` bytes."""
    real = builtins.open

    def arm(match: str, limit: int = 64) -> None:
        def fake(file, mode="r", *args, **kwargs):
            fh = real(file, mode, *args, **kwargs)
            if isinstance(file, (str, Path)) and match in str(file) and any(c in mode for c in "wax"):
                return _Full(fh, [limit])
            return fh

        monkeypatch.setattr(builtins, "open", fake)
        monkeypatch.setattr(io, "open", fake)
    return arm


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or ".partial-" in p.name)


def test_write_text_and_table_keep_the_old_file(tmp_path, full_disk):
    p = tmp_path / "a.json"
    write_text(p, '{"old": true}')
    t = tmp_path / "t.csv"
    write_table(pd.DataFrame({"x": [1, 2]}), t)
    full_disk(".tmp-", limit=5)
    with pytest.raises(OSError) as e:
        write_text(p, "x" * 1000)
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        write_table(pd.DataFrame({"x": np.arange(1000)}), t)
    assert p.read_text() == '{"old": true}'
    assert pd.read_csv(t)["x"].tolist() == [1, 2]
    assert _leftovers(tmp_path) == []


def test_fit_json_on_a_full_disk(tmp_path, full_disk, capsys):
    rng = np.random.default_rng(0)
    spk = np.repeat(np.arange(10), 10)
    pd.DataFrame({"score": rng.normal(size=100) + rng.normal(size=10)[spk], "spk": spk}).to_csv(tmp_path / "d.csv",
                                                                                            index=False)
    out = tmp_path / "fit.json"
    assert main(["fit", str(tmp_path / "d.csv"), "--formula", "score ~ 1 + (1|spk)", "--json", str(out)]) == 0
    before = out.read_text()
    full_disk("fit.json", limit=200)
    assert main(["fit", str(tmp_path / "d.csv"), "--formula", "score ~ 1 + (1|spk)", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "fit.json" in err
    assert out.read_text() == before and json.loads(before)
    new = tmp_path / "new.json"
    full_disk("new.json", limit=200)
    assert main(["fit", str(tmp_path / "d.csv"), "--formula", "score ~ 1 + (1|spk)", "--json", str(new)]) == 2
    assert not new.exists() and _leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["sim.csv", "sim.csv.gz"])
def test_simulate_on_a_full_disk_leaves_no_file(tmp_path, full_disk, capsys, name):
    out = tmp_path / name
    full_disk(name, limit=1000)
    assert main(["simulate", "--out", str(out), "--n-trials", "3000", "--truth", str(tmp_path / "truth.json")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "truth.json").exists()
    assert _leftovers(tmp_path) == []


STUDY = """
[study]
name = "atomic"
seed = 1
[data]
speaker = "speaker"
[data.simulate]
kind = "cm"
n_trials = 1200
params = { n_speakers = 40 }
[analyses.metrics]
"""


def test_study_overwrite_keeps_the_old_result_when_the_report_fails(tmp_path, full_disk, capsys):
    study = tmp_path / "s.toml"
    study.write_text(STUDY, encoding="utf-8")
    out = tmp_path / "res"
    assert main(["study", str(study), "--out", str(out), "--no-progress"]) == 0
    old = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert "report.html" in old
    capsys.readouterr()
    full_disk("report.html", limit=2000)
    rc = main(["study", str(study), "--out", str(out), "--no-progress", "--overwrite"])
    err = capsys.readouterr()
    assert rc != 0
    assert "No space left on device" in err.err
    assert "report.html" not in err.out  # no pointer at a report that was not written
    new = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert new == old  # the complete earlier run, untouched
    assert _leftovers(tmp_path) == []
