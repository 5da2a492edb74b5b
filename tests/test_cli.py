"""Tests of the scoremix command line (in-process ``main`` and ``python -m scoremix.cli``)
and of ``scoremix demo`` / ``run_demo``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix._version import __version__
from scoremix.cli import main

# Hand-made table. Positive scores 1, 2, 3, 4; negative scores -3, -2, -1, 2.5.
# ROC points (P_fa, P_miss) over thresholds (accept = score >= τ):
#   τ > 4: (0, 1); τ = 4: (0, .75); τ = 3: (0, .5); τ = 2.5: (.25, .5); τ = 2: (.25, .25);
#   τ = 1: (.25, 0); then P_fa rises to 1 with P_miss = 0.
# Lower convex hull in (P_fa, P_miss): (0, 1) → (0, .5) → (.25, 0) → (1, 0); the segment
# (0, .5)–(.25, 0) is P_miss = .5 − 2 P_fa, which meets P_miss = P_fa at 1/6:
#   ROCCH EER = 1/6 = 16.6667 %.
# minDCF (p_target .05, unit costs, unnormalised) = min of .05 P_miss + .95 P_fa:
#   reject all .05; τ=4 .0375; τ=3 .025; τ=2.5 .025+.2375; τ=2 .0125+.2375; τ≤1 ≥ .2375
#   → .025, reached for τ in (2.5, 3].
POS = [1.0, 2.0, 3.0, 4.0]
NEG = [-3.0, -2.0, -1.0, 2.5]


@pytest.fixture()
def small_csv(tmp_path: Path) -> Path:
    df = pd.DataFrame({
        "utt": [f"u{i}" for i in range(8)],
        "cm_score": POS + NEG,
        "key": ["bonafide"] * 4 + ["spoof"] * 4,
        "answer": ["yes"] * 4 + ["no"] * 4,
    })
    path = tmp_path / "scores.csv"
    df.to_csv(path, index=False)
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert __version__ in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("eer", "demo", "simulate"):
        assert cmd in out
    assert main([]) == 2  # no subcommand: help and usage status


def test_eer_hand_computed(small_csv: Path, capsys):
    rc = main(["eer", str(small_csv), "--score", "cm_score", "--label", "key", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert res["eer"] == pytest.approx(1 / 6, abs=1e-12)
    assert res["min_dcf"] == pytest.approx(0.025, abs=1e-12)
    assert 2.5 < res["min_dcf_threshold"] <= 3.0
    assert (res["n_trials"], res["n_positive"], res["n_negative"]) == (8, 4, 4)
    # text output: EER in percent, minDCF, threshold
    rc = main(["eer", str(small_csv), "--score", "cm_score", "--label", "key"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "16.6667 %" in out and "0.025000" in out and "threshold" in out


def test_eer_positive_value_and_options(small_csv: Path, capsys):
    rc = main(["eer", str(small_csv), "--score", "cm_score", "--label", "answer", "--positive", "yes",
               "--p-target", "0.5", "--normalize", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    # p_target .5, unit costs: C = .5 P_miss + .5 P_fa, min over the ROC points above:
    # τ=3 → .25, τ=2 → .25, τ=1 → .125, τ=2.5 → .375 … → .125; normalised by min(.5, .5) → .25
    assert res["min_dcf"] == pytest.approx(0.25, abs=1e-12)
    assert res["eer"] == pytest.approx(1 / 6, abs=1e-12)


@pytest.mark.parametrize("args, needle", [
    (["--score", "nope", "--label", "key"], "nope"),
    (["--score", "cm_score", "--label", "missing_label"], "missing_label"),
    (["--score", "cm_score", "--label", "answer"], "answer"),  # yes/no is not a known vocabulary
    (["--score", "cm_score", "--label", "key", "--positive", "target"], "target"),
])
def test_eer_input_errors_exit_2_with_one_line(small_csv: Path, capsys, args, needle):
    rc = main(["eer", str(small_csv), *args])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("scoremix eer: error: ") and str(small_csv) in err and needle in err


def test_eer_missing_file_and_bad_rows(tmp_path: Path, capsys):
    rc = main(["eer", str(tmp_path / "absent.csv")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "absent.csv" in err and "no such file" in err
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"score": [0.1, np.nan, 0.3, 0.4], "label": ["target", "nontarget"] * 2}).to_csv(bad, index=False)
    rc = main(["eer", str(bad)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.csv" in err and "1" in err  # row 1 holds the NaN


def test_unknown_method_is_a_usage_error(small_csv: Path):
    with pytest.raises(SystemExit) as exc:
        main(["eer", str(small_csv), "--method", "magic"])
    assert exc.value.code == 2


def test_python_dash_m_subprocess(small_csv: Path):
    out = subprocess.run(
        [sys.executable, "-m", "scoremix.cli", "eer", str(small_csv), "--score", "cm_score",
         "--label", "key", "--json"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["eer"] == pytest.approx(1 / 6, abs=1e-12)
    bad = subprocess.run(
        [sys.executable, "-m", "scoremix.cli", "eer", str(small_csv), "--score", "nope"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )
    assert bad.returncode == 2 and "nope" in bad.stderr
    ver = subprocess.run([sys.executable, "-m", "scoremix.cli", "--version"],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert ver.returncode == 0 and __version__ in ver.stdout


def test_simulate_subcommand(tmp_path: Path, capsys):
    out = tmp_path / "sv.csv"
    truth = tmp_path / "truth.json"
    rc = main(["simulate", "--out", str(out), "--kind", "sv", "--n-trials", "500", "--seed", "3",
               "--truth", str(truth)])
    assert rc == 0
    df = pd.read_csv(out)
    assert len(df) == 500 and {"enrol_speaker", "test_speaker", "same_sex"} <= set(df.columns)
    assert json.loads(truth.read_text())["model"] == "sv"
    assert main(["simulate", "--out", str(out), "--n-trials", "0"]) == 2
    assert "n_trials" in capsys.readouterr().err


def test_demo_writes_files_and_embedded_images(tmp_path: Path, capsys):
    out_dir = tmp_path / "demo"
    rc = main(["demo", "--out", str(out_dir), "--seed", "2", "--n-trials", "4000", "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    for name in ("trials.csv", "truth.json", "metrics.json", "report.html"):
        assert (out_dir / name).is_file()
        assert str(out_dir / name) in printed
    html = (out_dir / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") >= 2
    assert "<table" in html and "india_f" in html
    truth = json.loads((out_dir / "truth.json").read_text())
    assert truth["mu"] == -2.0 and truth["d"] == 4.0 and len(truth["speaker_effects"]) == 1000
    metrics = json.loads((out_dir / "metrics.json").read_text())

    # the reported EER/minDCF are those of the written table, recomputed independently here
    from scoremix import metrics as M

    trials = pd.read_csv(out_dir / "trials.csv")
    assert len(trials) == 4000
    assert ((trials["label"] == "bonafide") == (trials["y"] == 1)).all()
    s, y = trials["score"].to_numpy(), trials["y"].to_numpy()
    assert metrics["overall"]["eer"] == pytest.approx(M.eer(s, y), abs=1e-12)
    cost = [0.05 * np.mean(s[y == 1] < t) + 0.95 * np.mean(s[y == 0] >= t) for t in np.unique(s)]
    assert metrics["overall"]["min_dcf"] == pytest.approx(min(min(cost), 0.05), abs=1e-12)
    # empirical EER near the truth: binomial SE at n = 2000 per class
    true_eer = metrics["overall"]["true_eer"]
    assert abs(metrics["overall"]["eer"] - true_eer) < 5 * np.sqrt(true_eer * (1 - true_eer) / 2000)
    # subgroup table: trial counts add up to the table, per subgroup
    sub = metrics["subgroups"]
    assert sum(v["trials"] for v in sub.values()) == 4000
    assert sub["india_f"]["trials"] == int((trials["subgroup"] == "india_f").sum())


def test_run_demo_extensible_sections(tmp_path: Path):
    from scoremix import report_html as rh
    from scoremix.demo import SECTIONS, run_demo

    seen = {}

    def extra(ctx):
        seen["n"] = len(ctx.table)
        ctx.metrics["extra"] = {"mean_score": float(ctx.table["score"].mean())}
        return rh.Section("Extra section", [rh.Paragraph("added <by> a test")])

    res = run_demo(tmp_path, seed=0, n_trials=1000, progress=False, sections=[*SECTIONS[:2], extra])
    assert seen["n"] == 1000
    assert res["sections"] == ["Simulated trials", "Overall error rates", "Extra section"]
    html = res["files"]["report"].read_text(encoding="utf-8")
    assert "Extra section" in html and "added &lt;by&gt; a test" in html
    assert json.loads(res["files"]["metrics"].read_text())["extra"]["mean_score"] == pytest.approx(
        pd.read_csv(res["files"]["trials"])["score"].mean(), rel=1e-9)


@pytest.mark.shared_data
def test_eer_on_real_asvspoof2019_la_eval(shared_data: Path, capsys):
    folder = shared_data / "asvspoof2019_la_eval"
    path = folder / "asvspoof2019_la_eval.csv.gz"
    check = json.loads((folder / "system_eer_check.json").read_text())["rawnet2_transferfiles"]
    rc = main(["eer", str(path), "--score", "score_logit", "--label", "label", "--method", "asvspoof", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n_trials"] == check["n"]
    # the check file states the pooled EER in percent rounded to 3 decimals
    assert round(100 * res["eer"], 3) == pytest.approx(check["eer_pct"], abs=1e-9)
    # minDCF recomputed from sklearn's ROC (positive prediction = score >= threshold) plus reject-all
    from sklearn.metrics import roc_curve

    df = pd.read_csv(path)
    y = (df["label"] == "bonafide").to_numpy().astype(int)
    fpr, tpr, _ = roc_curve(y, df["score_logit"].to_numpy(), drop_intermediate=False)
    want = min(float(np.min(0.05 * (1 - tpr) + 0.95 * fpr)), 0.05)
    assert res["min_dcf"] == pytest.approx(want, abs=1e-12)
