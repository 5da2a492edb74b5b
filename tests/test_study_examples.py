"""Every example study in ``examples/*.toml`` parses and runs with reduced settings (those that
read ../shared/data skip cleanly without it), and the pooled EERs of the LA eval example
match the data set's own check file."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.study import parse_study, run_study
from scoremix.study.config import apply_overrides

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SHARED = ("asvspoof2019_la_eval", "asvspoof2021_df_interventions", "asvspoof2019_asv_baseline")

# reduced settings per example: fewer trials/utterances, fewer bootstrap replicates
REDUCED = {
    "asvspoof2019_la_eval": {"data.sample_per_system": 1000, "data.sample_by": "utt",
                             "data.filters": {"system": ["lfcc_gmm_highres", "rawgat_st_add"]},
                             "analyses.fairness.n_boot": 20, "analyses.compare.n_boot": 20,
                             "analyses.model_eer.n_boot": 40},
    "asvspoof2021_df_interventions": {"data.sample_per_system": 300, "analyses.model_eer.n_boot": 40},
    "asvspoof2019_asv_baseline": {"data.sample_per_system": 2500, "data.sample_by": "utt",
                                  "analyses.fairness.n_boot": 20, "analyses.model_eer.n_boot": 40},
    "sv_fairness_voxceleb1h": {"data.simulate.n_trials": 4000, "analyses.fairness.n_boot": 20,
                               "analyses.model_eer.n_boot": 40},
}


def _raw(name: str) -> dict:
    return tomllib.loads((EXAMPLES / f"{name}.toml").read_text(encoding="utf-8"))


def _use_shared(shared_data: Path, monkeypatch) -> None:
    monkeypatch.setenv("SCOREMIX_SHARED_DATA", str(shared_data))


def test_every_example_is_listed_and_parses(monkeypatch, tmp_path):
    monkeypatch.setenv("SCOREMIX_SHARED_DATA", str(tmp_path))  # parsing needs no data
    names = sorted(p.stem for p in EXAMPLES.glob("*.toml"))
    assert names == sorted(REDUCED)
    for name in names:
        cfg = parse_study(apply_overrides(_raw(name), REDUCED[name]), base_dir=EXAMPLES)
        assert cfg.models and cfg.analyses.enabled()
        for f in cfg.data.files:
            assert str(f).startswith(str(tmp_path))


def _run(name: str, tmp_path: Path):
    cfg = parse_study(apply_overrides(_raw(name), REDUCED[name]), base_dir=EXAMPLES, source=EXAMPLES / name)
    res = run_study(cfg, out_dir=tmp_path / name, progress=False)
    assert not res.failed, res.failed
    assert (tmp_path / name / "report.html").is_file()
    return res


def test_sv_fairness_example(tmp_path):
    res = _run("sv_fairness_voxceleb1h", tmp_path)
    out = tmp_path / "sv_fairness_voxceleb1h"
    fair = pd.read_csv(out / "fairness.csv").set_index("subgroup")
    trials = pd.read_csv(out / "trials.csv")
    # subgroup membership follows the enrolment speaker
    spk = trials.groupby("subgroup")["enrol_speaker"].nunique()
    for g, n in spk.items():
        assert fair.loc[g, "n_speakers"] == n
    # india_f nontarget scores are raised by 0.06 in the simulation (shift = [negative, positive])
    non = trials[trials["label"] == "nontarget"]
    assert non[non["subgroup"] == "india_f"]["score"].mean() > non[non["subgroup"] != "india_f"]["score"].mean()
    rec = res.recovered.set_index("parameter")
    row = rec[rec.index.str.startswith("beta_same_sex")].iloc[0]
    assert abs(row["estimate"] - row["true"]) < 4 * row["se"]


@pytest.mark.shared_data
@pytest.mark.parametrize("name", SHARED)
def test_shared_data_examples_run(name, shared_data, monkeypatch, tmp_path):
    _use_shared(shared_data, monkeypatch)
    res = _run(name, tmp_path)
    out = tmp_path / name
    metrics = pd.read_csv(out / "metrics.csv")
    assert set(metrics["system"]) == set(res.data.systems)
    fe = pd.read_csv(out / "fixed_effects.csv")
    assert set(fe["model"]) == {m.name for m in res.config.models}
    manifest = json.loads((out / "manifest.json").read_text())
    assert all((out / v["path"]).is_file() for v in manifest.values())
    if name == "asvspoof2019_asv_baseline":
        # analyses.fairness.filters keeps target and nontarget trials only (no spoofs)
        fair = pd.read_csv(out / "fairness.csv").set_index(["system", "subgroup"])
        t = res.data.table
        want = t[t["label"] == "nontarget"].groupby(["split", "claimed_gender"]).size()
        assert {k: fair.loc[k, "n_neg"] for k in want.index} == want.to_dict()
        # analyses.model_eer.filters: the model fits target, nontarget and spoof trials, its EER is
        # read on target vs nontarget rows only, as the empirical metrics are (without the filter it
        # is ~30 %, against ~2.5 %).  Tolerance: two binomial standard errors of the empirical EER,
        # 2·sqrt(e(1-e)/n_pos) (the few targets of the reduced sample dominate its sampling error).
        me = pd.read_csv(out / "model_eer.csv")
        me = me[me["by"] == "overall"].set_index("system")
        emp = metrics[metrics["by"] == "overall"].set_index("system")
        for split in res.data.systems:
            assert me.loc[split, "n_neg"] == emp.loc[split, "n_neg"] == want.xs(split).sum()
            assert me.loc[split, "n_pos"] == emp.loc[split, "n_pos"]
            e, n = emp.loc[split, "eer"], emp.loc[split, "n_pos"]
            assert abs(me.loc[split, "eer_model"] - e) < 2 * np.sqrt(e * (1 - e) / n)
            assert me.loc[split, "eer_model"] < 0.1


@pytest.mark.shared_data
def test_la_eval_pooled_eer_matches_check_file(shared_data, monkeypatch, tmp_path):
    _use_shared(shared_data, monkeypatch)
    raw = _raw("asvspoof2019_la_eval")
    systems = ["lfcc_gmm_highres", "rawgat_st_add", "air_ocsoftmax"]
    raw["data"]["filters"] = {"system": systems}
    raw["data"]["standardize"] = False  # a monotone map per system would not change the EER anyway
    raw["models"] = []
    raw["analyses"] = {"metrics": {"eer_method": "asvspoof"}}
    res = run_study(parse_study(raw, base_dir=EXAMPLES), out_dir=tmp_path / "o", progress=False, report=False)
    check = json.loads((shared_data / "asvspoof2019_la_eval" / "system_eer_check.json").read_text())
    m = pd.read_csv(tmp_path / "o" / "metrics.csv").set_index("system")
    for s in systems:
        assert m.loc[s, "n_trials"] == check[s]["n"] == 71237
        # the check file gives the pooled EER in percent rounded to 2-3 decimals; air_ocsoftmax is
        # scored with lower = bona fide, which the example's negate flips
        assert 100 * m.loc[s, "eer"] == pytest.approx(check[s]["eer_pct"], abs=0.006)
    assert len(res.data.table) == 3 * 71237


@pytest.mark.shared_data
def test_la_eval_per_attack_eer_matches_check_file(shared_data, monkeypatch, tmp_path):
    """``negatives_by = ["attack"]`` (as in the example): each attack's EER is all bona fide trials
    of a system against that attack's spoofs, the ASVspoof convention.  It reproduces the data
    set's per_attack_eer_check.csv (EER in percent, rounded to 2 decimals: tolerance half a unit
    of the last digit) for all 10 systems and 13 attacks, with the ASVspoof EER method."""
    _use_shared(shared_data, monkeypatch)
    raw = _raw("asvspoof2019_la_eval")
    assert raw["analyses"]["metrics"]["negatives_by"] == ["attack"]
    raw["data"]["standardize"] = False  # monotone per system: the EER is unchanged anyway
    raw["models"] = []
    raw["analyses"] = {"metrics": {**raw["analyses"]["metrics"], "by": ["attack"]}}
    assert raw["analyses"]["metrics"]["eer_method"] == "asvspoof"
    res = run_study(parse_study(raw, base_dir=EXAMPLES), out_dir=tmp_path / "o", progress=False, report=False)
    m = pd.read_csv(tmp_path / "o" / "metrics.csv")
    m = m[m["by"] == "attack"].set_index(["system", "cell"])
    check = pd.read_csv(shared_data / "asvspoof2019_la_eval" / "per_attack_eer_check.csv").set_index("attack")
    assert sorted(res.data.systems) == sorted(check.columns)
    t = res.data.table
    n_bona = (t["y"] == 1).sum() // len(check.columns)
    for system in check.columns:
        got = m.loc[system]
        assert sorted(got.index) == sorted(check.index)  # no bona fide-only cell
        assert (got["n_pos"] == n_bona).all()
        assert (100 * got.loc[check.index, "eer"] - check[system]).abs().max() <= 0.005 + 1e-9


@pytest.mark.shared_data
def test_asv_baseline_zero_effort_eer_matches_readme(shared_data, monkeypatch, tmp_path):
    """The example's metrics use the zero-effort view (analyses.metrics.filters: target vs
    nontarget); its EERs equal the data README's check (2.43 % dev, 2.46 % eval, rounded to 2
    decimals), and the counts equal a pandas count of the raw file."""
    _use_shared(shared_data, monkeypatch)
    raw = _raw("asvspoof2019_asv_baseline")
    raw["models"] = []
    raw["analyses"] = {"metrics": raw["analyses"]["metrics"]}
    run_study(parse_study(raw, base_dir=EXAMPLES), out_dir=tmp_path / "o", progress=False, report=False)
    m = pd.read_csv(tmp_path / "o" / "metrics.csv")
    m = m[m["by"] == "overall"].set_index("system")
    df = pd.read_csv(shared_data / "asvspoof2019_la_asv_baseline" / "asvspoof2019_la_asv_baseline.csv.gz",
                     usecols=["split", "trial_type"])
    for split, want in (("dev", 2.43), ("eval", 2.46)):
        g = df[df["split"] == split]["trial_type"]
        assert m.loc[split, "n_pos"] == (g == "target").sum()
        assert m.loc[split, "n_neg"] == (g == "nontarget").sum()  # spoofs filtered out
        assert 100 * m.loc[split, "eer"] == pytest.approx(want, abs=0.0051)


def test_shared_paths_default_next_to_checkout(monkeypatch):
    monkeypatch.delenv("SCOREMIX_SHARED_DATA", raising=False)
    cfg = parse_study(_raw("asvspoof2019_la_eval"), base_dir=EXAMPLES)
    want = (EXAMPLES / ".." / ".." / "shared" / "data").resolve()
    assert str(cfg.data.files[0]).startswith(str(want))
    assert os.path.basename(cfg.data.files[0]) == "asvspoof2019_la_eval_multisystem_long.csv.gz"
