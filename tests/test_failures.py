"""Studies and the command line under failure (issue 13): exit statuses, output folders that
never lie, clean shutdown on signals, named errors for corrupt or degenerate input, reversed
scores, and the report's tidy-ups.  Each test reproduces one defect of the issue."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from conftest import REPO_ROOT
from scoremix.cli import main
from scoremix.metrics import MetricInputError, ScoreDirectionWarning
from scoremix.study import load_study, parse_study, run_study
from scoremix.trials import CorruptFileError, SeparatorError

SRC = REPO_ROOT / "src"

STUDY = """
[study]
name = "fail"
seed = 5

[data]
speaker = "speaker"
subgroups = ["sex"]

[data.simulate]
kind = "cm"
n_trials = {n}
params = {{ n_speakers = 60 }}

[[models]]
name = "crossed"
formula = 'score ~ y + (1 | speaker) + (0 + dummy(label, "spoof") | attack)'

[analyses.metrics]
by = ["sex"]

[analyses.fairness]
groups = ["sex"]
n_boot = {n_boot}
boot_chunk = {chunk}
"""


def _study(tmp_path: Path, n: int = 600, n_boot: int = 0, chunk: int = 250, extra: str = "") -> Path:
    path = tmp_path / "study.toml"
    path.write_text(STUDY.format(n=n, n_boot=n_boot, chunk=chunk) + extra, encoding="utf-8")
    return path


def _cli(*argv: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SRC), OPENBLAS_NUM_THREADS="1", MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "scoremix.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


# ------------------------------------------------------------------------------ exit codes
def test_formula_typo_exits_2_before_any_work_even_without_progress(tmp_path, capsys):
    study = _study(tmp_path)
    rc = main(["study", str(study), "--out", str(tmp_path / "r1"), "--no-progress",
               "--set", "models[0].formula='score ~ y + (1 | speaker'"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "models[0].formula" in err[0] and "expected ')'" in err[0]
    assert not (tmp_path / "r1").exists()  # nothing was written: the formula was checked first


def test_unknown_column_in_a_formula_is_bad_input(tmp_path, capsys):
    study = _study(tmp_path)
    rc = main(["study", str(study), "--out", str(tmp_path / "r"), "--no-progress",
               "--set", "models[0].formula='score ~ y + (1 | enrol_speaker)'"])
    err = capsys.readouterr().err
    assert rc == 2 and "models[0].formula" in err and "'enrol_speaker' not in the trial table" in err
    assert not (tmp_path / "r").exists()


def test_failed_model_exits_1_with_one_stderr_line_whatever_the_progress_setting(tmp_path, capsys):
    # (1 | trial_id): one level per row, which lme4's rules refuse at fit time (not a config error)
    extra = "\n[[models]]\nname = \"broken\"\nformula = 'score ~ y + (1 | trial_id)'\n"
    study = _study(tmp_path, extra=extra)
    rc = main(["study", str(study), "--out", str(tmp_path / "r"), "--no-progress"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 1
    lines = [e for e in err if "broken" in e]
    assert len(lines) == 1 and "model broken failed" in lines[0] and "GroupingError" in lines[0]
    report = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "Steps that failed" in report and "model broken" in report


def test_task_failures_are_captured_by_key():
    from scoremix.study.parallel import Task, TaskFailure, run_tasks

    def ok() -> int:
        return 1

    out = run_tasks([Task("a", ok), Task("b", int, ("x",))], progress=False, capture_errors=True)
    assert out[0] == 1
    assert isinstance(out[1], TaskFailure) and out[1].key == "b" and out[1].error.startswith("ValueError: ")


# --------------------------------------------------------------------------- output folders
def test_existing_folder_refused_naming_overwrite_and_overwrite_replaces_it(tmp_path, capsys):
    out = tmp_path / "d"
    out.mkdir()
    (out / "metrics.json").write_text("{}")
    (out / "models").mkdir()
    (out / "models" / "crossed__all.json").write_text("{}")
    study = _study(tmp_path)
    rc = main(["study", str(study), "--out", str(out), "--no-progress", "--no-report"])
    err = capsys.readouterr().err
    assert rc == 2 and "--overwrite" in err and "not empty" in err
    assert _files(out) == {"metrics.json", "models/crossed__all.json"}  # untouched
    rc = main(["study", str(study), "--out", str(out), "--no-progress", "--overwrite"])
    assert rc == 0
    files = _files(out)
    assert "metrics.json" not in files  # the earlier run's files are gone
    manifest = json.loads((out / "manifest.json").read_text())
    assert {v["path"] for v in manifest.values()} == files  # and the manifest lists every file
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name or ".old-" in p.name]


def test_interrupted_run_leaves_the_old_folder_complete_and_no_partial_one(tmp_path, monkeypatch):
    study = _study(tmp_path)
    out = tmp_path / "r"
    run_study(load_study(study), out_dir=out, progress=False, report=False)
    before = {p: (out / p).read_bytes() for p in _files(out)}

    import scoremix.study.report as report

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "write_report", boom)
    cfg = load_study(study, overrides={"study.seed": 6})
    with pytest.raises(KeyboardInterrupt):
        run_study(cfg, out_dir=out, progress=False, overwrite=True)
    assert {p: (out / p).read_bytes() for p in _files(out)} == before  # the old complete run, unmixed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r", "study.toml"]  # no staging folder left


# ----------------------------------------------------------------------------------- signals
def _descendants(pid: int) -> list[int]:
    try:
        import psutil
    except ImportError:
        from scoremix.study.parallel import child_processes

        return child_processes(pid)
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to follow the worker processes")
@pytest.mark.parametrize("sig, jobs", [(signal.SIGTERM, "2"), (signal.SIGINT, "1")])
def test_signal_stops_the_study_and_every_worker(tmp_path, sig, jobs):
    study = _study(tmp_path, n=3000, n_boot=4000, chunk=100)  # 40 bootstrap chunks: seconds of work
    out = tmp_path / "r"
    env = dict(os.environ, PYTHONPATH=str(SRC), OPENBLAS_NUM_THREADS="1", MPLBACKEND="Agg")
    proc = subprocess.Popen([sys.executable, "-m", "scoremix.cli", "study", str(study), "--out", str(out),
                             "--jobs", jobs, "--no-progress"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    staging = None
    deadline = time.monotonic() + 240
    kids: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        kids = _descendants(proc.pid)
        staging = next((p for p in tmp_path.iterdir() if ".partial-" in p.name), None)
        if staging is not None and (len(kids) >= 2 or jobs == "1"):
            break  # tasks are running (the workers exist and the staging folder is being written)
        time.sleep(0.2)
    assert proc.poll() is None, "the study finished before it could be interrupted"
    time.sleep(1.0)
    kids = _descendants(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    time.sleep(5)
    assert [k for k in kids if _alive(k)] == []  # no worker or resource tracker outlives the study
    assert proc.returncode == 128 + sig
    assert "Traceback" not in err
    lines = [e for e in err.splitlines() if e.strip()]
    assert lines == [f"scoremix study: interrupted by {signal.Signals(sig).name}; stopped, "
                     "no partial output left behind"]
    assert not out.exists() and not staging.exists()


# ---------------------------------------------------------------------------------- paths
def test_relative_path_from_an_environment_variable_is_resolved_from_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "examples").mkdir()
    study = tmp_path / "examples" / "s.toml"
    study.write_text('[data]\nfile = "${SHARED:-../default}/t.csv"\n[[models]]\nname = "m"\n'
                     "formula = 'score ~ label'\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHARED", "data")
    assert load_study(study).data.files == [(tmp_path / "data" / "t.csv").resolve()]
    monkeypatch.delenv("SHARED")  # the default is written in the file: relative to the file
    assert load_study(study).data.files == [(tmp_path / "default" / "t.csv").resolve()]


# ------------------------------------------------------------------------- score direction
def _separated(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.r_[rng.normal(2, 1, n), rng.normal(0, 1, n)], np.r_[np.ones(n), np.zeros(n)]


def test_reversed_scores_warn_and_higher_is_positive_false_fixes_them():
    s, y = _separated()
    with pytest.warns(ScoreDirectionWarning, match="reversed") as rec:
        bad = sm.eer(-s, y)
    assert "higher_is_positive=False" in str(rec[0].message)
    assert bad == 0.5  # the ROCCH hull of reversed scores is the chance diagonal: EER 50 %, silently
    with pytest.warns(ScoreDirectionWarning):
        assert sm.eer(-s, y, method="asvspoof") > 0.5
    with pytest.warns(ScoreDirectionWarning, match="reversed"):
        sm.min_dcf(-s, y)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ScoreDirectionWarning)
        good = sm.eer(s, y)
        assert sm.eer(-s, y, higher_is_positive=False) == good
        md, md_rev = sm.min_dcf(s, y), sm.min_dcf(-s, y, higher_is_positive=False)
    assert md_rev.value == md.value and md_rev.threshold == -md.threshold  # accept = score <= threshold
    # the AUC behind the warning, by its definition over all pairs
    pos, neg = -s[y == 1], -s[y == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert sm.auc(-s, y) == pytest.approx(pairs, abs=1e-12)


def test_cli_and_study_warn_on_reversed_scores(tmp_path, capsys):
    s, y = _separated()
    pd.DataFrame({"score": -s, "label": np.where(y == 1, "bonafide", "spoof")}).to_csv(tmp_path / "r.csv",
                                                                                       index=False)
    assert main(["eer", str(tmp_path / "r.csv")]) == 0
    err = capsys.readouterr().err
    assert "ScoreDirectionWarning" in err and "reversed" in err and "--lower-is-positive" in err
    assert main(["eer", str(tmp_path / "r.csv"), "--lower-is-positive"]) == 0
    assert "reversed" not in capsys.readouterr().err
    raw = tomllib.loads(STUDY.format(n=600, n_boot=0, chunk=250))
    raw["data"]["negate"] = {"sex": ["f", "m"]}  # every score negated: the whole study runs backwards
    with pytest.warns(ScoreDirectionWarning, match="reversed.*negate"):
        run_study(parse_study(raw), out_dir=tmp_path / "o", progress=False, report=False)


# ---------------------------------------------------------------------------- named errors
@pytest.fixture()
def table_bytes() -> bytes:
    sim = sm.simulate_trials(n_trials=3000, n_speakers=50, seed=2).table
    return sim.to_csv(index=False).encode()


def test_truncated_gzip_names_file_and_position(tmp_path, table_bytes, capsys):
    full = gzip.compress(table_bytes)
    path = tmp_path / "t.csv.gz"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(CorruptFileError, match=r"t\.csv\.gz: the gzip stream is damaged or truncated after "
                                               r"\d+ decompressed byte\(s\) \(line \d+\)"):
        sm.load_trials(path)
    assert main(["eer", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "truncated" in err and "Traceback" not in err


def test_plain_file_named_gz(tmp_path, table_bytes):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(table_bytes)
    with pytest.raises(CorruptFileError, match="not gzip-compressed"):
        sm.load_trials(path)


def test_non_utf8_names_line_and_byte(tmp_path, table_bytes):
    lines = table_bytes.splitlines(keepends=True)
    bad = lines[:7] + [b"x,caf\xe9\n"] + lines[7:]
    path = tmp_path / "t.csv"
    path.write_bytes(b"".join(bad))
    byte = sum(map(len, lines[:7])) + len(b"x,caf")  # the offending byte, counted by hand
    with pytest.raises(CorruptFileError, match=rf"line 8 \(byte {byte}\) is not valid utf-8.*encoding='latin-1'"):
        sm.load_trials(path)


def test_semicolon_csv_suggests_sep(tmp_path, table_bytes):
    path = tmp_path / "t.csv"
    path.write_bytes(table_bytes.replace(b",", b";"))
    with pytest.raises(SeparatorError, match="pass sep=';'"):
        sm.load_trials(path)
    assert len(sm.load_trials(path, sep=";")) == 3000


def test_study_reads_corrupt_files_with_named_errors(tmp_path, table_bytes, capsys):
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(table_bytes)[:-40])
    study = tmp_path / "s.toml"
    study.write_text('[data]\nfile = "t.csv.gz"\n[[models]]\nname = "m"\nformula = \'score ~ y\'\n')
    assert main(["study", str(study), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "t.csv.gz" in err and "truncated" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def sim_table() -> pd.DataFrame:
    return sm.simulate_trials(n_trials=1000, n_speakers=50, seed=4).table


def test_constant_response_names_the_column(sim_table):
    with pytest.raises(sm.ConstantResponseError, match="response column 'score' is constant"):
        sm.lmer("score ~ label + (1|speaker)", sim_table.assign(score=0.25))
    with pytest.raises(sm.ConstantResponseError, match="'score' is constant"):
        sm.bayes_lmer("score ~ label + (1|speaker)", sim_table.assign(score=0.25), draws=10, tune=10, chains=1)


def test_overflowing_response_suggests_rescaling(sim_table, tmp_path, capsys):
    big = sim_table.assign(score=sim_table["score"] * 1e300)
    with pytest.raises(sm.ResponseScaleError, match="overflow float64; rescale it"):
        sm.lmer("score ~ label + (1|speaker)", big)
    big.to_csv(tmp_path / "big.csv", index=False)
    assert main(["fit", str(tmp_path / "big.csv"), "--formula", "score ~ label + (1|speaker)"]) == 2
    assert "rescale" in capsys.readouterr().err


def test_empty_data_model_eer_of_a_string_and_bayes_draws_0(sim_table):
    with pytest.raises(sm.EmptyDataError, match="data has no rows"):
        sm.lmer("score ~ label + (1|speaker)", sim_table.iloc[:0])
    from scoremix.model_eer import ModelEERError

    with pytest.raises(ModelEERError, match="needs a fitted model.*got str 'hello'"):
        sm.model_eer("hello")
    with pytest.raises(ValueError, match="draws must be an integer >= 1, got 0"):
        sm.bayes_lmer("score ~ label + (1|speaker)", sim_table, draws=0)


def test_string_and_2d_scores():
    with pytest.raises(MetricInputError, match=r"scores must be numbers: 1 value\(s\) are not, the first at "
                                               r"position 2 \('high'\)"):
        sm.eer(["0.1", "0.7", "high", "0.2"], [1, 1, 0, 0])
    with pytest.raises(MetricInputError, match=r"one-dimensional .* shape \(4, 2\)"):
        sm.eer(np.zeros((4, 2)), [1, 1, 0, 0])


def test_duplicated_trial_id_in_compare_names_id_and_system(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 200
    one = pd.DataFrame({"utt": [f"u{i}" for i in range(n)], "speaker": [f"s{i % 20}" for i in range(n)],
                        "sex": np.where(np.arange(n) % 40 < 20, "f", "m"),
                        "label": np.where(np.arange(n) % 2 == 0, "bonafide", "spoof")})
    one["score"] = rng.normal(size=n) + (one["label"] == "bonafide")
    t = pd.concat([one.assign(system="A"), one.assign(system="B")], ignore_index=True)
    t.loc[t.index[(t["system"] == "B")][5], "utt"] = "u3"  # u3 twice in system B
    t.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "s.toml").write_text('[data]\nfile = "t.csv"\nsystem = "system"\n[analyses.compare]\n'
                                     'systems = ["A", "B"]\ngroups = ["sex"]\ntrial_id = "utt"\nn_boot = 0\n')
    assert main(["study", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "trial id 'u3' occurs 2 times in system 'B'" in err and "reindex" not in err


def test_fit_json_into_an_unwritable_folder_fails_before_fitting(tmp_path, capsys, sim_table):
    sim_table.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "afile").write_text("x")
    rc = main(["fit", str(tmp_path / "t.csv"), "--formula", "score ~ label + (1|speaker)",
               "--json", str(tmp_path / "afile" / "fit.json")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""  # no summary printed before the error
    assert err.count("\n") == 1 and "is a file, not a folder" in err


# ----------------------------------------------------------------------------------- report
def test_report_tidy(tmp_path):
    raw = tomllib.loads(STUDY.format(n=800, n_boot=0, chunk=250))
    res = run_study(parse_study(raw, base_dir=tmp_path), out_dir=tmp_path / "o", progress=False)
    html = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    assert "<td>None</td>" not in html  # empty variance-component cells
    assert str(tmp_path) not in html  # no absolute paths
    re_ = pd.read_csv(tmp_path / "o" / "random_effects.csv")
    assert "bonafide" in set(re_.loc[re_["group"] == "attack", "level"])  # in the CSV (a 0 mode) ...
    from scoremix.study.report import levels_with_data

    kept = levels_with_data(res, "all", "attack", 'dummy(label, "spoof")',
                                    re_[(re_["group"] == "attack")])
    assert "bonafide" not in set(kept["level"]) and len(kept) == res.data.table.query("y == 0")["attack"].nunique()


def test_sv_report_does_not_mention_attacks_and_help_has_no_double_percent(tmp_path, capsys):
    raw = tomllib.loads('[data]\nspeaker = "enrol_speaker"\n[data.simulate]\nkind = "sv"\nn_trials = 600\n'
                        "[[models]]\nname = \"m\"\nformula = 'score ~ y + (1 | enrol_speaker)'\n")
    run_study(parse_study(raw), out_dir=tmp_path / "o", progress=False)
    html = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    assert "attacks)" not in html
    with pytest.raises(SystemExit):
        main(["eer", "--help"])
    assert "%%" not in capsys.readouterr().out


def test_score_histograms_have_axis_labels_and_tau_in_the_legend():
    import matplotlib

    matplotlib.use("Agg")
    t = sm.simulate_trials(n_trials=1500, n_speakers=60, seed=1).table
    res = sm.fairness.subgroup_dcf(t, ["sex"], score="score", label="y", speaker="speaker", progress=False)
    fig = res.plot_scores()
    axes = [a for a in fig.axes if a.axison]
    assert all(a.get_ylabel() == "density" for a in axes)
    assert all(a.get_xlabel() == "score" for a in axes)
    labels = axes[0].get_legend_handles_labels()[1]
    assert any(lab.startswith("τ*") for lab in labels)


# ----------------------------------------------------------------------------------- layout
CYCLE_TOOL = REPO_ROOT.parent / "shared" / "tools" / "import_cycles.py"
# an import that climbs from layer 2 (metrics) to layer 8 (study), inside a function, where a
# checker that reads only top-of-file imports cannot see it
PLANTED = "\n\ndef _planted_climb():\n    from scoremix.study import runner\n    return runner\n"


def _copy_with_planted_climb(tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "src"
    shutil.copytree(SRC / "scoremix", dst / "scoremix", ignore=shutil.ignore_patterns("__pycache__"))
    metrics = dst / "scoremix" / "metrics.py"
    metrics.write_text(metrics.read_text() + PLANTED)
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return dst


def _cycles(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CYCLE_TOOL), str(src / "scoremix")], capture_output=True,
                          text=True, timeout=120)


def test_no_import_cycle_counting_imports_inside_functions(tmp_path):
    """The shared checker (imports inside functions and implicit package __init__ imports
    count) finds no cycle in scoremix, and does find the one a planted in-function import makes."""
    if not CYCLE_TOOL.is_file():
        pytest.skip(f"{CYCLE_TOOL} is absent (the shared import-cycle checker)")
    res = _cycles(SRC)
    assert res.returncode == 0 and "0 import cycle(s)" in res.stdout, res.stdout
    planted = _cycles(_copy_with_planted_climb(tmp_path))
    assert planted.returncode == 1 and "scoremix.metrics -> scoremix.study" in planted.stdout, planted.stdout


def _lint_imports(cwd: Path, src: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_layers_contract_holds_and_catches_a_climbing_import_inside_a_function(tmp_path):
    """import-linter's ``layers`` contract of pyproject.toml (the table of docs/architecture.md)
    is kept; the same contract breaks on a copy of the package with one in-function import from
    metrics (layer 2) up to study (layer 8)."""
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra (pip install -e '.[dev]')")
    res = _lint_imports(REPO_ROOT, SRC)
    assert res.returncode == 0 and "1 kept, 0 broken" in res.stdout, res.stdout + res.stderr
    planted = _lint_imports(tmp_path, _copy_with_planted_climb(tmp_path))
    assert planted.returncode == 1 and "scoremix.metrics -> scoremix.study" in planted.stdout, planted.stdout
