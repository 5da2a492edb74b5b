"""compare_systems: DeLong against pROC::roc.test (stored + live), paired replicates against
recomputation, Holm adjustment, named errors."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import REPO_ROOT, TEST_DATA

from scoremix.compare_systems import (
    SystemComparisonError,
    _WeightedAUC,
    compare_systems,
    delong_test,
)
from scoremix.metrics import auc, eer, min_dcf

DATA = TEST_DATA / "detection_eval"
LA_PAIRS = [("rawgat_st_mul", "rawgat_st_add"), ("rawnet2_transferfiles", "rawnet2_robeval"),
            ("air_amsoftmax", "lfcc_gmm_highres")]


def _check(cases: pd.DataFrame, ref: pd.DataFrame) -> None:
    for _, r in ref.iterrows():
        g = cases[cases["case"] == r["case"]]
        got = delong_test(g["a"], g["b"], g["y"])
        assert abs(got["p_value"] - r["p_value"]) < 1e-6
        assert abs(got["p_value"] - r["p_value"]) <= 1e-9 * max(r["p_value"], 1e-300) + 1e-12
        assert abs(got["z"] - r["z"]) < 1e-9
        assert abs(got["auc_a"] - r["auc_a"]) < 1e-12 and abs(got["auc_b"] - r["auc_b"]) < 1e-12


def test_delong_equals_stored_proc():
    _check(pd.read_csv(DATA / "delong_cases.csv"), pd.read_csv(DATA / "delong_proc_reference.csv", skipinitialspace=True))


def _la_cases(shared_data) -> pd.DataFrame:
    path = shared_data / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
    if not path.exists():
        pytest.skip("the LA multisystem table is absent")
    cm = pd.read_csv(path)
    w = cm.pivot(index="utt", columns="system", values="score")
    w["air_ocsoftmax"] *= -1
    y = (cm.drop_duplicates("utt").set_index("utt").loc[w.index, "label"] == "bonafide").astype(int).to_numpy()
    return pd.concat([pd.DataFrame({"case": c, "y": y, "a": w[a].to_numpy(), "b": w[b].to_numpy()})
                      for c, (a, b) in enumerate(LA_PAIRS)])


def test_delong_la_equals_stored_proc(shared_data):
    _check(_la_cases(shared_data), pd.read_csv(DATA / "delong_proc_la_reference.csv", skipinitialspace=True))


@pytest.mark.r
def test_delong_live_proc(tmp_path):
    if shutil.which("Rscript") is None or subprocess.run(
            ["Rscript", "-e", "library(pROC)"], capture_output=True).returncode != 0:
        pytest.skip("R with pROC is not installed (apt-get install r-cran-proc)")
    out = tmp_path / "ref.csv"
    subprocess.run(["Rscript", str(REPO_ROOT / "r_scripts" / "delong_reference.R"), str(DATA / "delong_cases.csv"),
                    str(out)], check=True, capture_output=True, timeout=300)
    _check(pd.read_csv(DATA / "delong_cases.csv"), pd.read_csv(out, skipinitialspace=True))


def _long(seed=0, n_spk=12, per=20, n_pos=8):
    rng = np.random.default_rng(seed)
    rows = []
    for sp in range(n_spk):
        u = rng.normal(0, 0.5)
        for i in range(per):
            y = int(i < n_pos)
            base = 1.5 * y + u + rng.normal()
            for s, noise in (("A", 0.5), ("B", 0.8), ("C", 1.0)):
                rows.append((f"{sp}_{i}", f"s{sp}", f"t{(sp + i) % 7}", y, s, round(base + noise * rng.normal(), 2)))
    return pd.DataFrame(rows, columns=["utt", "spk", "tspk", "label", "system", "score"])


def test_weighted_auc_equals_auc_of_the_resampled_trials():
    d = _long()
    a = d[d["system"] == "A"].reset_index(drop=True)
    s, y = a["score"].to_numpy(), a["label"].to_numpy().astype(bool)
    cl = np.unique(a["spk"], return_inverse=True)[1]
    rng = np.random.default_rng(3)
    M = rng.multinomial(12, np.ones(12) / 12, size=4).T.astype(float)
    got = _WeightedAUC(s, y, cl, 12)(M)
    for b in range(4):
        idx = np.repeat(np.arange(len(a)), M[cl, b].astype(int))
        assert abs(got[b] - auc(s[idx], y[idx])) < 1e-12


def test_points_equal_the_metrics_and_holm():
    d = _long()
    r = compare_systems(d, metrics=["eer", "min_dcf", "auc"], speaker="spk", trial="utt", n_boot=200, seed=1)
    assert list(r.columns[:7]) == ["metric", "system_a", "system_b", "value_a", "value_b", "difference", "lo"]
    for _, row in r.iterrows():
        for sysname, col in ((row["system_a"], "value_a"), (row["system_b"], "value_b")):
            g = d[d["system"] == sysname]
            want = {"eer": lambda: eer(g["score"], g["label"]),
                    "min_dcf": lambda: min_dcf(g["score"], g["label"], normalize=True).value,
                    "auc": lambda: auc(g["score"], g["label"])}[row["metric"]]()
            assert abs(row[col] - want) < 1e-9, (row["metric"], sysname)
        assert abs(row["difference"] - (row["value_a"] - row["value_b"])) < 1e-15
    for metric, g in r.groupby("metric"):
        p = g["p_value"].to_numpy()
        order = np.argsort(p)
        m = p.size
        holm = np.maximum.accumulate(np.minimum(1, (m - np.arange(m)) * p[order]))
        want = np.empty(m)
        want[order] = holm
        np.testing.assert_allclose(g["p_adjusted"].to_numpy(), want, rtol=0, atol=1e-15)
    assert (r.loc[r["metric"] == "auc", "method"] == "DeLong").all()


def test_paired_bootstrap_replicates_are_the_metric_on_resampled_speakers():
    """With one system compared to itself plus a shift, the difference is exactly 0 in every replicate
    (the same speakers are drawn for both systems), so the interval is [0, 0] and p = 1."""
    d = _long()
    d2 = d[d["system"] == "A"].assign(system="A2")
    d2["score"] = d2["score"] * 2.0 + 1.0  # a strictly increasing transform: same EER, same AUC
    both = pd.concat([d[d["system"] == "A"], d2])
    r = compare_systems(both, metrics=["eer", "auc"], test="bootstrap", speaker="spk", trial="utt", n_boot=100, seed=0)
    for _, row in r.iterrows():
        assert row["difference"] == pytest.approx(0, abs=1e-12)
        assert row["lo"] == pytest.approx(0, abs=1e-12) and row["hi"] == pytest.approx(0, abs=1e-12)
        assert row["p_value"] == 1.0


def test_two_way_runs_and_is_wider_or_equal_in_clusters():
    d = _long()
    r = compare_systems(d, systems=["A", "C"], metrics=["eer"], speaker="spk", test_speaker="tspk", trial="utt",
                        n_boot=200, seed=2)
    assert r["method"].iloc[0] == "paired two-way bootstrap"
    assert r["lo"].iloc[0] <= r["difference"].iloc[0] <= r["hi"].iloc[0]


def test_errors_name_the_problem():
    d = _long()
    with pytest.raises(SystemComparisonError, match="'Z'"):
        compare_systems(d, systems=["A", "Z"], trial="utt")
    with pytest.raises(SystemComparisonError, match="no score for trial"):
        compare_systems(d.drop(index=5), trial="utt", metrics=["auc"])
    with pytest.raises(SystemComparisonError, match="no column 'who'"):
        compare_systems(d, speaker="who", trial="utt")
    bad = d.copy()
    bad.loc[(bad["system"] == "B") & (bad["utt"] == "0_0"), "label"] = 0
    with pytest.raises(SystemComparisonError, match="different labels"):
        compare_systems(bad, trial="utt", metrics=["auc"])
    with pytest.raises(SystemComparisonError, match="metrics must be"):
        compare_systems(d, trial="utt", metrics=["f1"])


def test_cli_compare(tmp_path, capsys):
    import json

    from scoremix.cli import main

    d = _long()
    d.to_csv(tmp_path / "long.csv", index=False)
    rc = main(["compare", str(tmp_path / "long.csv"), "--trial", "utt", "--speaker", "spk", "--metrics", "eer", "auc",
               "--n-boot", "100", "--seed", "4", "--json"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    want = compare_systems(d, metrics=["eer", "auc"], speaker="spk", trial="utt", n_boot=100, seed=4)
    assert [r["p_value"] for r in rows] == pytest.approx(list(want["p_value"]), abs=1e-12)
    assert main(["compare", str(tmp_path / "long.csv"), "--systems", "A", "Q"]) == 2
    assert "'Q'" in capsys.readouterr().err


def test_two_way_replicate_is_the_metric_of_the_product_weighted_table():
    """Two-way crossed: a nontarget trial of (enrolment e, test t) counts m_e * m_t times, a target trial m_e
    times; the replicate difference equals EER(A) - EER(B) recomputed on that repeated table."""
    from scoremix.resampling.bootstrap import draw_cluster_weights, two_way_pairs

    d = _long()
    r = compare_systems(d, systems=["A", "B"], metrics=["eer"], speaker="spk", test_speaker="tspk", trial="utt",
                        n_boot=3, seed=9)
    reps = r.attrs["replicates"][("eer", "A", "B")]
    per = d[d["system"] == "A"].set_index("utt")
    wide = d.pivot(index="utt", columns="system", values="score")
    per = per.loc[wide.index]
    y = per["label"].to_numpy().astype(bool)
    en = np.unique(per["spk"].astype(str), return_inverse=True)[1]
    te_u, te = np.unique(per["tspk"].astype(str), return_inverse=True)
    te = np.where(y, -1, te)
    cl, design = two_way_pairs(en, te, int(en.max()) + 1, te_u.size)
    U = draw_cluster_weights(np.zeros(design.n_units, np.int64), 3, np.random.default_rng(9))
    W = design.pair_weights(U)
    for b in range(3):
        idx = np.repeat(np.arange(len(per)), W[cl, b].astype(int))
        want = eer(wide["A"].to_numpy()[idx], y[idx]) - eer(wide["B"].to_numpy()[idx], y[idx])
        assert abs(reps[b] - want) < 1e-9


def test_cli_compare_csv_and_text(tmp_path, capsys):
    """``--csv`` writes the same table the API returns (atomically: no temporary file is left),
    and the text output names the Holm adjustment."""
    from scoremix.cli import main

    d = _long()
    d.to_csv(tmp_path / "long.csv", index=False)
    out = tmp_path / "cmp.csv"
    rc = main(["compare", str(tmp_path / "long.csv"), "--trial", "utt", "--speaker", "spk", "--metrics", "eer",
               "--n-boot", "100", "--seed", "4", "--csv", str(out)])
    assert rc == 0
    assert "p_adjusted: Holm" in capsys.readouterr().out
    got = pd.read_csv(out)
    want = compare_systems(d, metrics=["eer"], speaker="spk", trial="utt", n_boot=100, seed=4)
    assert list(got.columns) == list(want.columns)
    np.testing.assert_allclose(got["p_value"], want["p_value"], atol=1e-12)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp.csv", "long.csv"]


def test_interval_variants_are_the_replicate_quantiles_at_their_levels():
    """percentile: levels α/2; scaled: Φ(∓z·√(C/(C−1))); expanded: Φ(∓√(C/(C−1))·t_{C−1}) — each the
    numpy quantile (linear) of the saved replicates at that level (12 speakers)."""
    from scipy.stats import norm
    from scipy.stats import t as student_t

    d = _long(seed=5)
    C = 12
    lv = {"percentile": 0.025,
          "scaled": norm.cdf(-norm.ppf(0.975) * np.sqrt(C / (C - 1))),
          "expanded": norm.cdf(-np.sqrt(C / (C - 1)) * student_t.ppf(0.975, C - 1))}
    for interval, q in lv.items():
        r = compare_systems(d, metrics=["eer", "min_dcf"], speaker="spk", trial="utt", n_boot=200, seed=4,
                            interval=interval)
        for _, row in r.iterrows():
            reps = r.attrs["replicates"][(row["metric"], row["system_a"], row["system_b"])]
            assert row["lo"] == pytest.approx(np.quantile(reps, q), abs=1e-12), (interval, row["metric"])
            assert row["hi"] == pytest.approx(np.quantile(reps, 1 - q), abs=1e-12), (interval, row["metric"])
    assert lv["percentile"] > lv["scaled"] > lv["expanded"]
    with pytest.raises(SystemComparisonError, match="scaled"):
        compare_systems(d, speaker="spk", trial="utt", n_boot=50, interval="bca")
