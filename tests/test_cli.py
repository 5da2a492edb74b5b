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
    for cmd in ("eer", "demo", "simulate", "study", "fit", "fairness"):
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
    # one subprocess (each costs an import of scoremix): `python -m scoremix.cli` runs main and
    # passes its exit status and stderr message through; stdout/JSON are checked in-process above
    bad = subprocess.run(
        [sys.executable, "-m", "scoremix.cli", "eer", str(small_csv), "--score", "nope"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )
    assert bad.returncode == 2 and "nope" in bad.stderr and str(small_csv) in bad.stderr
    assert bad.stdout == ""


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


def test_demo_runs_the_study_prints_outputs_and_renders(tmp_path: Path, capsys):
    """One demo run (the slowest CLI path) checked three ways: the printed summary, the numbers
    in its files (recomputed here), and its report rendered in headless Chromium with every
    image decoded (skipped with a message without Chromium)."""
    out_dir = tmp_path / "demo"
    rc = main(["demo", "--out", str(out_dir), "--seed", "2", "--n-trials", "3000", "--n-boot", "10",
               "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    for name in ("trials.csv", "truth.json", "metrics.json", "report.html", "fixed_effects.csv", "fairness.csv",
                 "recovered_vs_true.csv", "refit_lme4.R", "models/crossed__all.json"):
        assert (out_dir / name).is_file(), name
        assert str(out_dir / name) in printed
    assert "recovered vs true" in printed and "beta_x" in printed
    html = (out_dir / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") >= 8
    assert "<table" in html and "india_f" in html and "Recovered vs true" in html
    assert "http://" not in html and "https://" not in html  # self-contained: nothing fetched

    # the printed SD lines carry the realised SD of the drawn effects, recomputed from truth.json
    truth = json.loads((out_dir / "truth.json").read_text())
    trials = pd.read_csv(out_dir / "trials.csv")
    spoof_attacks = sorted(set(trials.loc[trials["y"] == 0, "attack"]))
    realised_attack = np.std([truth["attack_effects"][a] for a in spoof_attacks], ddof=1)
    line = next(ln for ln in printed.splitlines() if ln.strip().startswith("sd_attack"))
    assert f"realised {realised_attack:8.4f}" in line and "true   1.5000" in line
    # realised residual SD: score minus its conditional mean given the drawn effects and x
    spk = trials["speaker"].map(truth["speaker_effects"]).to_numpy()
    att = trials["attack"].map(truth["attack_effects"]).fillna(0.0).to_numpy()
    shift = [truth["subgroup_shift"][g]["bonafide" if yy else "spoof"]
             for g, yy in zip(trials["subgroup"], trials["y"])]
    eps = (trials["score"] - truth["mu"] - truth["d"] * trials["y"] - spk - att * (1 - trials["y"]) - shift
           - truth["beta_x"] * trials["x"])
    rec = pd.read_csv(out_dir / "recovered_vs_true.csv")
    sig = rec[(rec["model"] == "crossed") & rec["parameter"].str.startswith("sigma")].iloc[0]
    assert sig["realised"] == pytest.approx(np.std(eps, ddof=1), rel=1e-9)

    from test_report_render import rendered_image_count

    ok, total, dom = rendered_image_count(out_dir / "report.html", tmp_path)
    assert total == html.count("<img ") and ok == total
    for title in ("Data summary", "Model crossed", "Subgroup fairness", "Recovered vs true (simulation)"):
        assert f"<h2>{title}</h2>" in dom
    assert truth["mu"] == -2.0 and truth["d"] == 4.0 and len(truth["speaker_effects"]) == 1000
    metrics = json.loads((out_dir / "metrics.json").read_text())

    # the reported EER/minDCF are those of the written table, recomputed independently here
    from scoremix import metrics as M

    assert len(trials) == 3000
    assert ((trials["label"] == "bonafide") == (trials["y"] == 1)).all()
    s, y = trials["score"].to_numpy(), trials["y"].to_numpy()
    assert metrics["overall"]["eer"] == pytest.approx(M.eer(s, y), abs=1e-12)
    cost = [0.05 * np.mean(s[y == 1] < t) + 0.95 * np.mean(s[y == 0] >= t) for t in np.unique(s)]
    assert metrics["overall"]["min_dcf"] == pytest.approx(min(min(cost), 0.05), abs=1e-12)
    # empirical EER near the truth: binomial SE at n = 1500 per class
    true_eer = metrics["overall"]["true_eer"]
    assert abs(metrics["overall"]["eer"] - true_eer) < 5 * np.sqrt(true_eer * (1 - true_eer) / 1500)
    sub = metrics["subgroups"]
    assert sum(v["trials"] for v in sub.values()) == 3000
    assert sub["india_f"]["trials"] == int((trials["subgroup"] == "india_f").sum())


def _study_file(tmp_path: Path) -> Path:
    toml = tmp_path / "s.toml"
    toml.write_text("""
[study]
name = "cli"
seed = 1
[data]
subgroups = ["sex"]
[data.simulate]
n_trials = 1200
params = { n_speakers = 80 }
[[models]]
name = "m"
formula = "score ~ y + x + (1 | speaker)"
[analyses.metrics]
[analyses.fairness]
n_boot = 0
""", encoding="utf-8")
    return toml


def test_study_subcommand(tmp_path: Path, capsys):
    toml = _study_file(tmp_path)
    out = tmp_path / "o"
    rc = main(["study", str(toml), "--out", str(out), "--no-progress", "--set", "analyses.fairness.n_boot=5"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "1200 trials" in printed and str(out / "report.html") in printed
    cfg = json.loads((out / "study.json").read_text())["config"]
    assert cfg["analyses"]["fairness"]["n_boot"] == 5
    assert "ratio_overall_lo" in pd.read_csv(out / "fairness.csv").columns
    # a bad key: one line naming it, status 2
    rc = main(["study", str(toml), "--out", str(out), "--set", "models[0].backend=lme5"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "models[0].backend" in err and "lme5" in err
    assert main(["study", str(tmp_path / "absent.toml")]) == 2
    assert "absent.toml" in capsys.readouterr().err


def test_study_data_error_names_file_and_column(tmp_path: Path, small_csv: Path, capsys):
    toml = tmp_path / "s.toml"
    toml.write_text(f'[study]\nname = "x"\n[data]\nfile = "{small_csv}"\nscore = "cm_score"\nlabel = "key"\n'
                    'subgroups = ["gender"]\n[analyses.metrics]\n', encoding="utf-8")
    rc = main(["study", str(toml), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and str(small_csv) in err and "'gender'" in err


def test_fit_subcommand(tmp_path: Path, capsys):
    from scoremix.simulate import simulate_trials

    sim = simulate_trials(n_trials=1500, n_speakers=60, seed=4)
    path = tmp_path / "t.csv"
    sim.table.to_csv(path, index=False)
    js = tmp_path / "fit.json"
    rc = main(["fit", str(path), "--formula", "score ~ y + x + (1 | speaker)", "--json", str(js)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "Linear mixed model fit by REML" in out and "Fixed effects" in out
    res = json.loads(js.read_text())
    # the slope of x: true 0.5, its SE is about 1.5/sqrt(1500) ≈ 0.04 → within 0.2
    assert abs(res["fixef"]["x"] - 0.5) < 0.2 and res["nobs"] == 1500
    rc = main(["fit", str(path), "--formula", "score ~ y + nope + (1 | speaker)"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "nope" in err and str(path) in err and len(err.splitlines()) == 1
    # a non-numeric score: the file, the column, the 0-based row and the file line (header = line 1)
    bad = sim.table.head(10).astype({"score": object})
    bad.loc[5, "score"] = "n/a?"
    bad_path = tmp_path / "bad.csv"
    bad.to_csv(bad_path, index=False)
    rc = main(["fit", str(bad_path), "--formula", "score ~ y + (1 | speaker)"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert str(bad_path) in err and "'score'" in err and "row 5 (line 7: 'n/a?')" in err
    assert bad_path.read_text().splitlines()[6].split(",")[list(bad.columns).index("score")] == "n/a?"


def test_fairness_subcommand(tmp_path: Path, capsys):
    # two speakers per sex; hand-made scores: women's bona fide scores overlap the spoofs
    df = pd.DataFrame({
        "speaker": ["f1"] * 4 + ["f2"] * 4 + ["m1"] * 4 + ["m2"] * 4,
        "sex": ["f"] * 8 + ["m"] * 8,
        "label": ["bonafide", "bonafide", "spoof", "spoof"] * 4,
        "score": [1.0, 0.2, 0.5, -1.0, 1.2, 0.9, -0.5, -2.0, 3.0, 2.0, -1.0, -2.0, 2.5, 2.2, -1.5, -3.0],
    })
    path = tmp_path / "f.csv"
    df.to_csv(path, index=False)
    csv = tmp_path / "table.csv"
    rc = main(["fairness", str(path), "--groups", "sex", "--csv", str(csv), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "Fairness Index" in out
    tab = pd.read_csv(csv).set_index("subgroup")
    # overall minDCF (p=.05, unit costs): brute force over thresholds, then the cost per sex at τ*
    s, y = df["score"].to_numpy(), (df["label"] == "bonafide").to_numpy()
    ts = np.r_[np.unique(s), np.inf]
    costs = [0.05 * np.mean(s[y] < t) + 0.95 * np.mean(s[~y] >= t) for t in ts]
    tau = ts[int(np.argmin(costs))]
    for sex in ("f", "m"):
        g = (df["sex"] == sex).to_numpy()
        want = 0.05 * np.mean(s[g & y] < tau) + 0.95 * np.mean(s[g & ~y] >= tau)
        assert tab.loc[sex, "dcf_at_overall"] == pytest.approx(want, abs=1e-12)
        assert tab.loc[sex, "n_speakers"] == 2
    rc = main(["fairness", str(path), "--groups", "nationality"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "nationality" in err and str(path) in err


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
