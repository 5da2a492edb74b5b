"""Tandem ASV + CM metrics against independent implementations of the published definitions
(tests/tandem_reference.py) on the real ASVspoof 2019 LA tables, published figures, ties and errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import tandem_reference as ref

import scoremix as sm
from scoremix.tandem import TandemInputError

TOL = 1e-9


@pytest.fixture(scope="module")
def la(shared_data):
    asv_path = shared_data / "asvspoof2019_la_asv_baseline" / "asvspoof2019_la_asv_baseline.csv.gz"
    cm_path = shared_data / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
    if not asv_path.exists() or not cm_path.exists():
        pytest.skip("ASVspoof 2019 LA ASV baseline / multisystem CM tables are absent")
    asv = pd.read_csv(asv_path)
    asv = asv[asv["split"] == "eval"].reset_index(drop=True)
    cm = pd.read_csv(cm_path)
    cm.loc[cm["system"] == "air_ocsoftmax", "score"] *= -1  # lower = bona fide in its file
    return asv, cm


def _split(asv):
    s, k = asv["score"].to_numpy(), asv["trial_type"].to_numpy()
    return s[k == "target"], s[k == "nontarget"], s[k == "spoof"]


def test_tdcf_equals_reference_on_all_ten_cms(la):
    asv, cm = la
    tar, non, spf = _split(asv)
    systems = sorted(cm["system"].unique())
    assert len(systems) == 10
    for name in systems:
        g = cm[cm["system"] == name]
        b = g["score"].to_numpy()[g["label"].to_numpy() == "bonafide"]
        s = g["score"].to_numpy()[g["label"].to_numpy() == "spoof"]
        for rev, model in (("2019", "asvspoof2019"), ("2021", "asvspoof2021")):
            got = sm.tdcf(asv["score"], asv["trial_type"], g["score"], g["label"], cost_model=model)
            want, t_asv = ref.min_tdcf(tar, non, spf, b, s, rev)
            assert abs(float(got) - want) < TOL, (name, rev)
            assert abs(float(got) - ref.min_tdcf_over_thresholds(tar, non, spf, b, s, rev)) < TOL, (name, rev)
            assert got.asv_threshold == t_asv
            # the reported CM threshold reproduces the minimum as accept s >= tau
            thr = got.threshold
            d = got.details
            pm, pf = np.mean(b < thr), np.mean(s >= thr)
            again = ((d["C0"] + d["C1"] * pm + d["C2"] * pf) / (d["C0"] + min(d["C1"], d["C2"])))
            assert abs(again - float(got)) < TOL, (name, rev)


#: the RawGAT-ST authors' own released eval scores (eurecom-asp/RawGAT-ST-antispoofing @ 2f770aa46d30,
#: Pre_trained_models/RawGAT_ST_mul/Scores.txt: ``utt attack key score``), if the data folder has them
RAWGAT_AUTHORS = ("asvspoof2019_la_eval", "rawgat_st_authors", "RawGAT_ST_mul_Scores.txt")


def test_published_min_tdcf(la):
    """Published figures are printed to 4 decimals, rounded half-up (Tak et al. 2021, Table 2);
    the test is ``round_half_up(ours, 4) == published``.  RawNet2 (soumyashaw/Transfer-Files
    scores): 0.129410 → 0.1294 = published.  RawGAT-ST mul from the shared table (the first 71,237
    clean lines of the authors' robustness-evaluation file ``..._RR_mod1.txt``, not the file the
    paper scored; its scores differ from the released ones by 0.011 on average): 0.0334450, which
    rounds to 0.0334 under any rule — it equals the reference implementation, and the published
    0.0335 is met with the authors' released file (:func:`test_published_min_tdcf_rawgat_authors_file`)."""
    from decimal import ROUND_HALF_UP, Decimal

    def half_up(x: float) -> float:
        return float(Decimal(repr(x)).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))

    asv, cm = la
    tar, non, spf = _split(asv)
    got = {}
    for name in ("rawnet2_transferfiles", "rawgat_st_mul"):
        g = cm[cm["system"] == name]
        got[name] = float(sm.tdcf(asv["score"], asv["trial_type"], g["score"], g["label"]))
        b = g["score"].to_numpy()[g["label"].to_numpy() == "bonafide"]
        s = g["score"].to_numpy()[g["label"].to_numpy() == "spoof"]
        assert abs(got[name] - ref.min_tdcf(tar, non, spf, b, s, "2019")[0]) < TOL
    assert half_up(got["rawnet2_transferfiles"]) == 0.1294
    # the RR_mod1 copy: documented value, not the published one
    assert abs(got["rawgat_st_mul"] - 0.0334450235) < 1e-9
    assert half_up(got["rawgat_st_mul"]) == 0.0334


def test_published_min_tdcf_rawgat_authors_file(la, shared_data):
    """RawGAT-ST mul, the authors' released score file: min t-DCF (2019 cost model, official ASV
    EER threshold) 0.0335389 → 0.0335 = published (Tak et al. 2021), CM EER (official
    ``compute_eer``) 1.0601 % → 1.06 % = published."""
    path = shared_data.joinpath(*RAWGAT_AUTHORS)
    if not path.exists():
        pytest.skip(f"{path} is absent (the authors' RawGAT-ST mul scores, eurecom-asp/RawGAT-ST-antispoofing "
                    "@2f770aa46d30 : Pre_trained_models/RawGAT_ST_mul/Scores.txt)")
    asv, _ = la
    tar, non, spf = _split(asv)
    c = pd.read_csv(path, sep=" ", header=None, names=["utt", "attack", "key", "score"])
    assert len(c) == 71237
    got = float(sm.tdcf(asv["score"], asv["trial_type"], c["score"], c["key"]))
    b = c["score"].to_numpy()[c["key"].to_numpy() == "bonafide"]
    s = c["score"].to_numpy()[c["key"].to_numpy() == "spoof"]
    assert abs(got - ref.min_tdcf(tar, non, spf, b, s, "2019")[0]) < TOL
    assert abs(got - 0.0335389467) < 1e-9
    assert round(got, 4) == 0.0335
    assert round(100 * ref.asv_eer(b, s)[0], 2) == 1.06


def _joined(asv, g):
    return asv.merge(g[["utt", "score"]].rename(columns={"score": "cm"}), on="utt", how="left", validate="many_to_one")


def test_adcf_sasv_equal_reference_on_all_ten_cms(la):
    asv, cm = la
    for name in sorted(cm["system"].unique()):
        j = _joined(asv, cm[cm["system"] == name])
        assert j["cm"].notna().all()
        keys = j["trial_type"].to_numpy()
        casc = sm.cascade_scores(j["score"], j["cm"], keys)
        got = sm.adcf(casc, keys)
        want = ref.min_adcf(casc[keys == "target"], casc[keys == "nontarget"], casc[keys == "spoof"])
        assert abs(float(got) - want) < TOL, name
        e = sm.sasv_eer(casc, keys)
        for g_, w_ in zip((e.sasv, e.sv, e.spf), ref.sasv_eers(casc, keys)):
            assert abs(float(g_) - w_) < TOL, name
    # the ASV baseline's own score as the SASV score
    keys = asv["trial_type"].to_numpy()
    e = sm.sasv_eer(asv["score"], keys)
    for g_, w_ in zip((e.sasv, e.sv, e.spf), ref.sasv_eers(asv["score"].to_numpy(), keys)):
        assert abs(float(g_) - w_) < TOL


def test_teer_equals_reference_on_subsamples_of_all_ten_cms(la):
    """The published double loop is O(N^2): 1,200 trials per CM (all ten), full kernel otherwise."""
    asv, cm = la
    rng = np.random.default_rng(7)
    for name in sorted(cm["system"].unique()):
        j = _joined(asv, cm[cm["system"] == name])
        idx = np.concatenate([rng.choice(np.flatnonzero(j["trial_type"] == k), n, replace=False)
                              for k, n in (("target", 300), ("nontarget", 500), ("spoof", 400))])
        sub = j.iloc[idx]
        k = sub["trial_type"].to_numpy()
        a, c = sub["score"].to_numpy(), sub["cm"].to_numpy()
        want = ref.teer(a[k == "target"], a[k == "nontarget"], a[k == "spoof"],
                        c[k == "target"], c[k == "nontarget"], c[k == "spoof"])
        got = sm.teer(a, c, k)
        assert abs(float(got) - want) < TOL, name


def test_teer_equals_stored_full_data_brute_force(la):
    """The published double loop on the FULL tables (O(N^2), ~4 min per CM, so run offline by
    tests/data/detection_eval/make_teer_full_reference.py and stored) equals sm.teer on all ten CMs."""
    import json

    from conftest import TEST_DATA

    ref_vals = json.loads((TEST_DATA / "detection_eval" / "teer_full_reference.json").read_text())
    asv, cm = la
    assert len(ref_vals) == 10
    for name, want in ref_vals.items():
        j = _joined(asv, cm[cm["system"] == name])
        assert abs(float(sm.teer(j["score"], j["cm"], j["trial_type"])) - want) < TOL, name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ties_and_small_samples_equal_reference(seed):
    rng = np.random.default_rng(seed)
    n_t, n_n, n_s = 40, 60, 50
    asv = np.round(np.concatenate([rng.normal(2, 1, n_t), rng.normal(-1, 1, n_n), rng.normal(1, 1, n_s)]), 1)
    cm = np.round(np.concatenate([rng.normal(1, 1, n_t + n_n), rng.normal(-1, 1, n_s)]), 1)
    keys = np.array(["target"] * n_t + ["nontarget"] * n_n + ["spoof"] * n_s)
    tar, non, spf = asv[:n_t], asv[n_t:n_t + n_n], asv[n_t + n_n:]
    bona, spoof = cm[:n_t + n_n], cm[n_t + n_n:]
    cm_keys = np.array(["bonafide"] * (n_t + n_n) + ["spoof"] * n_s)
    for rev, model in (("2019", "asvspoof2019"), ("2021", "asvspoof2021")):
        got = sm.tdcf(asv, keys, cm, cm_keys, cost_model=model)
        assert abs(float(got) - ref.min_tdcf(tar, non, spf, bona, spoof, rev)[0]) < TOL
    assert abs(float(sm.teer(asv, cm, keys)) - ref.teer(tar, non, spf, cm[:n_t], cm[n_t:n_t + n_n], spoof)) < TOL
    assert abs(float(sm.adcf(asv, keys)) - ref.min_adcf(tar, non, spf)) < TOL
    e = sm.sasv_eer(asv, keys)
    for g_, w_ in zip((e.sasv, e.sv, e.spf), ref.sasv_eers(asv, keys)):
        assert abs(float(g_) - w_) < TOL


def _toy(seed=3, n_spk=12):
    rng = np.random.default_rng(seed)
    rows = []
    for sp in range(n_spk):
        u = rng.normal(0, 0.5)
        for k, mu, n in (("target", 2.0, 6), ("nontarget", -1.0, 10), ("spoof", 1.0, 8)):
            for _ in range(n):
                rows.append((f"s{sp}", k, mu + u + rng.normal(), (-1.0 if k == "spoof" else 1.0) + rng.normal()))
    return pd.DataFrame(rows, columns=["speaker", "key", "asv", "cm"])


def test_bootstrap_replicate_is_the_metric_of_the_resampled_table():
    """A replicate (speakers drawn with replacement, the sorted trials repeated) equals the metric
    recomputed from scratch on the resampled table, for every metric."""
    from scoremix.resampling.bootstrap import draw_cluster_weights

    d = _toy()
    cmk = np.where(d["key"] == "spoof", "spoof", "bonafide")
    spk = np.unique(d["speaker"].astype(str))
    M = draw_cluster_weights(np.zeros(spk.size, np.int64), 3, np.random.default_rng(11)).astype(int)
    code = np.searchsorted(spk, d["speaker"].astype(str))
    t = sm.tdcf(d["asv"], d["key"], d["cm"], cmk, asv_speaker=d["speaker"], cm_speaker=d["speaker"], n_boot=3, seed=11)
    te = sm.teer(d["asv"], d["cm"], d["key"], speaker=d["speaker"], n_boot=3, seed=11)
    ad = sm.adcf(d["asv"], d["key"], speaker=d["speaker"], n_boot=3, seed=11)
    se = sm.sasv_eer(d["asv"], d["key"], speaker=d["speaker"], n_boot=3, seed=11)
    for b in range(3):
        r = d.loc[np.repeat(np.arange(len(d)), M[code, b])]
        rk = np.where(r["key"] == "spoof", "spoof", "bonafide")
        assert abs(t.replicates[b] - float(sm.tdcf(r["asv"], r["key"], r["cm"], rk))) < TOL
        assert abs(te.replicates[b] - float(sm.teer(r["asv"], r["cm"], r["key"]))) < TOL
        assert abs(ad.replicates[b] - float(sm.adcf(r["asv"], r["key"]))) < TOL
        assert abs(se.sasv.replicates[b] - float(sm.sasv_eer(r["asv"], r["key"]).sasv)) < TOL


def test_intervals_bracket_the_estimate_and_are_seeded():
    d = _toy(n_spk=20)
    cmk = np.where(d["key"] == "spoof", "spoof", "bonafide")
    a = sm.tdcf(d["asv"], d["key"], d["cm"], cmk, asv_speaker=d["speaker"], cm_speaker=d["speaker"],
                n_boot=200, seed=5)
    b = sm.tdcf(d["asv"], d["key"], d["cm"], cmk, asv_speaker=d["speaker"], cm_speaker=d["speaker"],
                n_boot=200, seed=5)
    assert a.lo == b.lo and a.hi == b.hi and a.n_clusters == 20 and a.interval == "shift-t"
    assert a.lo <= float(a) <= a.hi
    e = sm.teer(d["asv"], d["cm"], d["key"], speaker=d["speaker"], n_boot=200, seed=5)
    assert e.lo <= float(e) <= e.hi and e.interval == "expanded"


def test_bad_input_is_named():
    with pytest.raises(TandemInputError, match=r"'maybe' at row 2"):
        sm.adcf([1.0, 2.0, 3.0], ["target", "spoof", "maybe"])
    with pytest.raises(TandemInputError, match="no 'nontarget'"):
        sm.adcf([1.0, 2.0], ["target", "spoof"])
    with pytest.raises(TandemInputError, match="non-finite score .* row 1"):
        sm.teer([1.0, np.nan, 0.0], [1.0, 1.0, 0.0], ["target", "nontarget", "spoof"])
    with pytest.raises(TandemInputError, match="join the CM scores"):
        sm.teer([1.0, 2.0, 0.0], [1.0, 1.0], ["target", "nontarget", "spoof"])
    with pytest.raises(TandemInputError, match="cost_model"):
        sm.tdcf([1.0, 0.0, 0.5], ["target", "nontarget", "spoof"], [1.0, 0.0], ["bonafide", "spoof"],
                cost_model="asvspoof2077")
    with pytest.raises(TandemInputError, match="only used with n_boot"):
        sm.adcf([1.0, 0.0, 0.5], ["target", "nontarget", "spoof"], speaker=["a", "a", "b"])


def test_cli_tandem_matches_the_api(tmp_path, capsys):
    from scoremix.cli import main

    d = _toy(n_spk=8)
    d["utt"] = [f"u{i}" for i in range(len(d))]
    asv = d[["utt", "speaker", "key", "asv"]].rename(columns={"key": "trial_type", "asv": "score"})
    cm = d[["utt", "speaker", "cm"]].rename(columns={"cm": "score"})
    cm["label"] = np.where(d["key"] == "spoof", "spoof", "bonafide")
    asv.to_csv(tmp_path / "asv.csv", index=False)
    cm.to_csv(tmp_path / "cm.csv", index=False)
    rc = main(["tandem", str(tmp_path / "asv.csv"), str(tmp_path / "cm.csv"), "--join", "utt", "--json"])
    assert rc == 0
    import json

    row = json.loads(capsys.readouterr().out)[0]
    assert abs(row["min_tdcf_2019"] - float(sm.tdcf(asv["score"], asv["trial_type"], cm["score"], cm["label"]))) < TOL
    assert abs(row["teer"] - float(sm.teer(asv["score"], cm["score"], asv["trial_type"]))) < TOL
    rc = main(["tandem", str(tmp_path / "asv.csv"), str(tmp_path / "cm.csv"), "--join", "nope"])
    assert rc == 2
    assert "has no column 'nope'" in capsys.readouterr().err


def test_tandem_table_by_subgroup_equals_subset_calls():
    from scoremix.tandem.table import tandem_table

    d = _toy(n_spk=10)
    d["utt"] = [f"u{i}" for i in range(len(d))]
    d["sex"] = np.where(d["speaker"].str[1:].astype(int) % 2 == 0, "f", "m")
    asv = d[["utt", "speaker", "sex", "key", "asv"]].rename(columns={"key": "trial_type", "asv": "score"})
    cm = d[["utt", "speaker", "sex", "cm"]].rename(columns={"cm": "score"})
    cm["label"] = np.where(d["key"] == "spoof", "spoof", "bonafide")
    tab = tandem_table(asv, cm, by=("sex", "sex"))
    assert list(tab["group"]) == ["f", "m"]
    for lev, row in zip(("f", "m"), tab.itertuples()):
        a, c = asv[asv["sex"] == lev], cm[cm["sex"] == lev]
        assert abs(row.min_tdcf_2019 - float(sm.tdcf(a["score"], a["trial_type"], c["score"], c["label"]))) < TOL
