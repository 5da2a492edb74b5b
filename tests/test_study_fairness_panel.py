"""The fairness panel in subgroup_dcf (SubgroupDCFResult.panel) and in the study's fairness section
(issue 22): equal to fairness_panel called directly on the same trials; fairness over a range of
operating points (table and plot); per-group calibration with the per-group APE plot."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scoremix.fairness import subgroup_dcf
from scoremix.fairness.panel import (
    FPR_GRID,
    fairness_panel,
    operating_point_sweep,
    plot_group_ape,
    plot_operating_points,
)
from scoremix.fairness.subgroups import SubgroupError
from scoremix.study import load_study, run_study
from scoremix.study.parallel import task_seed


def _llr_trials(seed: int = 4, n_spk: int = 24) -> pd.DataFrame:
    """Speakers in two groups; group "b" is shifted and mis-calibrated (LLR scale 1.6)."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_spk):
        g = "a" if s % 2 else "b"
        b = rng.normal(0, 0.4)
        for i in range(40):
            y = int(i < 10)
            x = rng.normal(1.5 if y else -1.5, 1.0) + b
            rows.append({"spk": f"s{s}", "g": g, "y": y, "score": x * (1.6 if g == "b" else 1.0) - 0.5 * (g == "b")})
    return pd.DataFrame(rows)


def test_subgroup_dcf_panel_equals_fairness_panel():
    d = _llr_trials()
    res = subgroup_dcf(d, ["g"], score="score", label="y", speaker="spk", n_boot=0, progress=False)
    ops = ["eer", {"fpr": 0.05}, {"fpr": 0.1}]
    got = res.panel(operating_points=ops, n_boot=40, seed=3, llr=True)
    want = fairness_panel(d, "g", score="score", label="y", speaker="spk", operating_points=ops, n_boot=40,
                          seed=3, llr=True)
    pd.testing.assert_frame_equal(got.table, want.table, check_exact=False, rtol=0, atol=1e-12)
    pd.testing.assert_frame_equal(got.groups, want.groups, check_exact=False, rtol=0, atol=1e-12)
    # the default operating points: the overall EER and the FPR grid
    dflt = res.panel()
    assert list(dict.fromkeys(dflt.table["operating_point"])) == ["overall EER"] + [f"overall FPR {f:g}" for f in FPR_GRID]


def test_operating_point_sweep_and_plots():
    d = _llr_trials()
    p = fairness_panel(d, "g", score="score", label="y", speaker="spk",
                       operating_points=[{"fpr": 0.2}, "eer", {"fpr": 0.02}, {"fpr": 0.05}], n_boot=40, seed=1)
    sw = operating_point_sweep(p)
    garbe = sw[sw["measure"] == "GARBE"]
    assert list(garbe["fpr_target"]) == [0.02, 0.05, 0.2]
    # each sweep row is the panel's own row at that operating point
    t = p.table.set_index(["operating_point", "measure"])
    for _, r in garbe.iterrows():
        assert r["value"] == t.loc[(r["operating_point"], "GARBE"), "value"]
    fig = plot_operating_points(p)
    assert len([a for a in fig.axes if a.get_visible()]) == 6
    # the EER marker sits at the overall FPR of the EER threshold
    tau = p.table.set_index(["operating_point", "measure"]).loc[("overall EER", "threshold"), "value"]
    assert p.settings["eer_fpr"] == pytest.approx(float(np.mean(d["score"][d["y"] == 0] >= tau)), abs=1e-15)
    only_eer = fairness_panel(d, "g", score="score", label="y", speaker="spk")
    with pytest.raises(SubgroupError, match="overall-FPR"):
        plot_operating_points(only_eer)
    ape = plot_group_ape(d, "g", label="y")
    labels = [ln.get_label() for ln in ape.axes[0].get_lines()]
    assert "a (actual)" in labels and "b (PAV minimum)" in labels
    with pytest.raises(SubgroupError, match="one class"):
        plot_group_ape(d[~((d["g"] == "a") & (d["y"] == 1))], "g", label="y")


def test_study_fairness_section_has_the_panel(tmp_path):
    d = _llr_trials()
    d.to_csv(tmp_path / "t.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "panel"\nseed = 9\n[data]\nfile = "t.csv"\nlabel = "y"\nspeaker = "spk"\n'
                    'subgroups = ["g"]\n[analyses.fairness]\nn_boot = 40\npanel_fpr = [0.1, 0.01, 0.05]\n'
                    'panel_llr = true\n', encoding="utf-8")
    res = run_study(load_study(toml), out_dir=tmp_path / "out", progress=False, report=True)
    assert not res.failed, res.failed
    got = pd.read_csv(tmp_path / "out" / "fairness_panel.csv")
    want = fairness_panel(d, "g", score="score", label="y", speaker="spk",
                          operating_points=["eer", {"fpr": 0.01}, {"fpr": 0.05}, {"fpr": 0.1}], n_boot=40,
                          seed=task_seed(9, "fairness_panel/all"), llr=True)
    assert list(got["measure"]) == list(want.table["measure"])
    for c in ("value", "lo", "hi"):
        np.testing.assert_allclose(got[c], want.table[c], rtol=0, atol=1e-12, err_msg=c)
    groups = pd.read_csv(tmp_path / "out" / "fairness_panel_groups.csv")
    assert {"fmr", "fnmr", "act_dcf", "cllr", "act_dcf_lo", "cllr_hi"} <= set(groups.columns)
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    for text in ("fairness panel per operating point", "fairness sweep", "per-group APE", "GARBE", "FDR",
                 "max/geomean FMR", "Cllr"):
        assert text in html, text


def test_study_panel_config(tmp_path):
    from scoremix.study.config import StudyConfigError

    pd.DataFrame({"score": [0.1, 0.9], "y": [0, 1], "g": ["a", "b"]}).to_csv(tmp_path / "t.csv", index=False)
    toml = tmp_path / "s.toml"
    base = '[study]\nname = "x"\n[data]\nfile = "t.csv"\nlabel = "y"\n[analyses.fairness]\ngroups = ["g"]\n'
    toml.write_text(base + "panel_fpr = [0.5, 1.5]\n", encoding="utf-8")
    with pytest.raises(StudyConfigError, match="panel_fpr"):
        load_study(toml)
    toml.write_text(base + "panel = false\n", encoding="utf-8")
    assert load_study(toml).analyses.fairness.panel is False


def test_panel_skips_one_class_subgroups(tmp_path):
    d = _llr_trials()
    d.loc[d["spk"].isin(["s0", "s2"]), "g"] = "c"  # a third subgroup ...
    d = d[~((d["g"] == "c") & (d["y"] == 1))]      # ... with nontarget trials only
    res = subgroup_dcf(d, ["g"], score="score", label="y", speaker="spk", n_boot=0, progress=False)
    with pytest.raises(SubgroupError, match="one class"):
        res.panel(operating_points=["eer"])
    p = res.panel(operating_points=["eer"], n_boot=40, seed=2, skip_one_class=True)
    assert p.settings["skipped"] == ["c"]
    want = fairness_panel(d[d["g"] != "c"], "g", score="score", label="y", speaker="spk", n_boot=40, seed=2)
    np.testing.assert_allclose(p.table["value"], want.table["value"], rtol=0, atol=1e-12)
    # in a study the report names the skipped subgroup; the panel of the other two is written
    d.to_csv(tmp_path / "t.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "skip"\n[data]\nfile = "t.csv"\nlabel = "y"\nspeaker = "spk"\n'
                    'subgroups = ["g"]\nmin_speakers = 2\n[analyses.fairness]\nn_boot = 0\npanel_fpr = [0.05]\n',
                    encoding="utf-8")
    res = run_study(load_study(toml), out_dir=tmp_path / "out", progress=False, report=True)
    assert not res.failed, res.failed
    assert set(pd.read_csv(tmp_path / "out" / "fairness_panel_groups.csv")["group"]) == {"a", "b"}
    assert "left out of the panel: c" in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
