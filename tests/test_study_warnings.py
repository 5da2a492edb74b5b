"""One warnings mechanism for studies: every warning raised while a study runs (in this process
or in a ``--jobs 2`` worker) is recorded, printed once as one line naming the system or model it
came from, listed in the report, and the process exits with bounded memory.

The study below warns on purpose: a singular fit (no speaker variance in the simulated scores),
a ModelFitWarning (Student-t(2) scores under a Gaussian model) and matplotlib's missing-glyph
warning (CJK subgroup names in the report's figures)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

STUDY = """
[study]
name = "warns"
seed = 1
[data]
file = "t.csv"
label = "y"
system = "sys"
speaker = "spk"
subgroups = ["grp"]
[[models]]
name = "m"
formula = "score ~ y + (1 | spk)"
[analyses.metrics]
by = ["grp"]
[analyses.model_eer]
by = ["grp"]
n_boot = 10
[analyses.fairness]
groups = ["grp"]
n_boot = 10
"""

#: peak resident memory allowed for the whole command and its workers (KiB); the hang grew
#: about 120 MB/s until the kernel killed it at 20+ GB
MAX_RSS_KIB = 1_500_000


def _write_study(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    spk = np.repeat(np.arange(40), 30)
    n = spk.size
    y = (np.arange(n) % 3 == 0).astype(int)
    s = np.where(y == 1, 2.0, 0.0) + rng.standard_t(2, n)  # heavy tails, no speaker effect
    pd.DataFrame({"spk": [f"s{i}" for i in spk], "grp": np.where(spk % 2 == 0, "男性", "女性"), "y": y,
                  "score": s, "sys": np.where(np.arange(n) % 2 == 0, "A", "B")}).to_csv(tmp_path / "t.csv",
                                                                                       index=False)
    (tmp_path / "s.toml").write_text(STUDY, encoding="utf-8")
    return tmp_path / "s.toml"


# run the CLI as a grandchild so that RUSAGE_CHILDREN holds only it (and its workers)
RUNNER = textwrap.dedent("""
    import json, resource, subprocess, sys
    p = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=240)
    print(json.dumps({"rc": p.returncode, "err": p.stderr, "out": p.stdout,
                      "maxrss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
""")


def _run(tmp_path: Path, jobs: int) -> dict:
    study = _write_study(tmp_path)
    cmd = [sys.executable, "-m", "scoremix.cli", "study", str(study), "--out", str(tmp_path / f"o{jobs}"),
           "--jobs", str(jobs), "--no-progress"]
    proc = subprocess.run([sys.executable, "-c", RUNNER, *cmd], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {**json.loads(proc.stdout), "dir": tmp_path / f"o{jobs}"}


def _warning_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("scoremix study: warning: ")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    return {j: _run(tmp_path_factory.mktemp(f"jobs{j}"), j) for j in (1, 2)}


@pytest.mark.parametrize("jobs", [1, 2])
def test_study_that_warns_exits_with_bounded_memory(runs: dict, jobs: int) -> None:
    r = runs[jobs]
    assert r["rc"] == 0, r["err"][-2000:]
    assert 0 < r["maxrss"] < MAX_RSS_KIB, f"peak RSS {r['maxrss']} KiB"


@pytest.mark.parametrize("jobs", [1, 2])
def test_each_warning_printed_once_naming_its_source(runs: dict, jobs: int) -> None:
    err = runs[jobs]["err"]
    lines = _warning_lines(err)
    assert len(lines) == len(set(lines)), "\n".join(lines)
    # nothing printed in Python's own two-line format (file:line: Category: text + source line)
    assert "Warning: " not in "\n".join(ln for ln in err.splitlines() if not ln.startswith("scoremix study:"))
    singular = [ln for ln in lines if "SingularFitWarning" in ln]
    assert singular and all(ln.startswith("scoremix study: warning: model m on system ") for ln in singular)
    mfw = [ln for ln in lines if "ModelFitWarning" in ln]
    assert mfw and all("model m on system " in ln for ln in mfw)
    assert not any("worst: 0:" in ln for ln in mfw)  # the overall row is named, not "0"
    glyph = [ln for ln in lines if "missing from" in ln]
    assert len(glyph) == 1 and "report" in glyph[0] and "男" in glyph[0] and "女" in glyph[0]


def test_jobs_1_and_2_print_the_same_warnings(runs: dict) -> None:
    assert sorted(_warning_lines(runs[1]["err"])) == sorted(_warning_lines(runs[2]["err"]))


@pytest.mark.parametrize("jobs", [1, 2])
def test_warnings_listed_in_the_report(runs: dict, jobs: int) -> None:
    html = (runs[jobs]["dir"] / "report.html").read_text(encoding="utf-8")
    assert ">Warnings<" in html
    assert "model m on system" in html and "SingularFitWarning" in html


def test_where_of_task_and_glyph_folding() -> None:
    from scoremix.study.warnlog import StudyWarning, summarise, where_of_task

    assert where_of_task("model/m/A") == "model m on system A"
    assert where_of_task("model/m/all") == "model m"
    assert where_of_task("boot:fairness/B/2") == "fairness on system B"
    glyph = "Glyph {} (\\N{{CJK UNIFIED IDEOGRAPH-{:X}}}) missing from font(s) DejaVu Sans."
    rec = [StudyWarning("report", UserWarning, glyph.format(ord(c), ord(c))) for c in "男女男性"]
    rec += [StudyWarning("model m on system A", RuntimeWarning, "x")] * 3
    out = summarise(rec)
    assert [w.where for w in out] == ["model m on system A", "report figures"]
    assert "3 character(s)" in out[1].message and "女 性 男" in out[1].message
