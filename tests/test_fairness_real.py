"""Gender subgroups on real ASVspoof 2019 LA scores (shared data; skipped when absent)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from scoremix.fairness import compare_subgroup_dcf, subgroup_dcf

pytestmark = pytest.mark.shared_data

SYSTEMS = ("lfcc_gmm_highres", "rawgat_st_add")


@pytest.fixture(scope="module")
def cm_two_systems(shared_data):
    path = shared_data / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
    df = pd.read_csv(path, usecols=["utt", "speaker", "speaker_gender", "label", "system", "score"])
    return df[df["system"].isin(SYSTEMS)].reset_index(drop=True)


def test_cm_gender_two_systems(shared_data, cm_two_systems):
    metrics = pytest.importorskip("scoremix.metrics")
    check = json.loads((shared_data / "asvspoof2019_la_eval" / "system_eer_check.json").read_text())
    cmp = compare_subgroup_dcf(cm_two_systems, ["speaker_gender"], systems=SYSTEMS, trial_id="utt",
                               n_boot=200, random_state=0, progress=False, measures=("ratio_overall", "eer"))
    for sysname in SYSTEMS:
        sub = cm_two_systems[cm_two_systems.system == sysname]
        res = subgroup_dcf(sub, ["speaker_gender"], progress=False)
        # pooled EER agrees with the data's own check (ROCCH vs their EER: within 0.05 points)
        assert res.overall["eer"] == pytest.approx(check[sysname]["eer_pct"] / 100, abs=5e-4)
        tab = res.table.set_index("subgroup")
        assert tab.loc["female", "n_speakers"] == 37 and tab.loc["male", "n_speakers"] == 30
        assert tab["n_pos"].sum() == 7355 and (tab["n_pos"] + tab["n_neg"]).sum() == 71237
        y = (sub["label"] == "bonafide").to_numpy()
        md = metrics.min_dcf(sub["score"], y)
        for g in ("female", "male"):
            m = (sub["speaker_gender"] == g).to_numpy()
            at = metrics.dcf(sub["score"][m], y[m], md.threshold)
            assert tab.loc[g, "ratio_overall"] == pytest.approx(at / md.value, rel=1e-10)
        np.testing.assert_allclose(cmp.table[f"ratio_overall_{sysname}"], res.table["ratio_overall"], rtol=1e-12)
        lo, hi = cmp.table[f"ratio_overall_{sysname}_lo"], cmp.table[f"ratio_overall_{sysname}_hi"]
        assert ((lo <= cmp.table[f"ratio_overall_{sysname}"]) & (cmp.table[f"ratio_overall_{sysname}"] <= hi)).all()
    d = cmp.table["ratio_overall_diff"]
    assert ((cmp.table["ratio_overall_diff_lo"] <= d) & (d <= cmp.table["ratio_overall_diff_hi"])).all()


def test_asv_baseline_claimed_gender(shared_data):
    path = shared_data / "asvspoof2019_la_asv_baseline" / "asvspoof2019_la_asv_baseline.csv.gz"
    df = pd.read_csv(path)
    df = df[(df["split"] == "eval") & (df["trial_type"] != "spoof")].reset_index(drop=True)
    kw = dict(label="trial_type", positive="target", speaker="claimed_speaker", progress=False)
    res = subgroup_dcf(df, ["claimed_gender"], n_boot=100, random_state=0, **kw)
    # README check: target vs nontarget EER of the eval baseline is 2.46 %
    assert res.overall["eer"] == pytest.approx(0.0246, abs=5e-4)
    # no ASVspoof non-target trial crosses genders, so 'both' membership equals 'enrol'
    both = subgroup_dcf(df, ["claimed_gender"], membership="both", test_speaker="test_speaker",
                        test_groups=["test_gender"], **kw)
    pd.testing.assert_frame_equal(both.table[["n_pos", "n_neg", "ratio_overall"]],
                                  res.table[["n_pos", "n_neg", "ratio_overall"]])
    t = res.table
    assert (t["ratio_overall_lo"] <= t["ratio_overall_hi"]).all()
    assert set(t["subgroup"]) == {"female", "male"}
