"""[analyses.tandem] (issue 22): the study's tandem table equals scoremix.tandem.table.tandem_table called
directly on the same trials — on the real ASVspoof 2019 LA tables (point values, published RawNet2 figure)
and on a small simulated ASV + CM pair with speaker-bootstrap intervals and per-gender rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scoremix.study import load_study, run_study
from scoremix.study.config import StudyConfigError
from scoremix.study.parallel import task_seed
from scoremix.tandem.table import TANDEM_COLUMNS, tandem_table


def test_study_tandem_on_the_la_tables(tmp_path, shared_data):
    asv_path = shared_data / "asvspoof2019_la_asv_baseline" / "asvspoof2019_la_asv_baseline.csv.gz"
    cm_path = shared_data / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
    if not asv_path.exists() or not cm_path.exists():
        pytest.skip("ASVspoof 2019 LA ASV baseline / multisystem CM tables are absent")
    systems = ["rawgat_st_mul", "rawnet2_transferfiles"]
    toml = tmp_path / "la.toml"
    toml.write_text(f'''[study]
name = "la_tandem"
seed = 5
[data]
file = "{cm_path.as_posix()}"
label = "label"
positive = "bonafide"
system = "system"
speaker = "speaker"
filters = {{ system = {systems!r} }}
[analyses.tandem]
asv_file = "{asv_path.as_posix()}"
asv_filters = {{ split = ["eval"] }}
join = "utt"
n_boot = 0
[analyses.systems]
metrics = ["auc"]
trial_id = "utt"
n_boot = 0
''', encoding="utf-8")
    res = run_study(load_study(toml), out_dir=tmp_path / "out", progress=False, report=True)
    assert not res.failed, res.failed
    got = pd.read_csv(tmp_path / "out" / "tandem.csv")
    asv = pd.read_csv(asv_path)
    asv = asv[asv["split"] == "eval"].reset_index(drop=True)
    cm = pd.read_csv(cm_path)
    cm = cm[cm["system"].isin(systems)]
    want = tandem_table(asv, cm, join="utt", system="system")
    assert list(got["system"]) == systems == list(want["system"])
    for c in TANDEM_COLUMNS:
        np.testing.assert_allclose(got[c], want[c], rtol=0, atol=1e-12, err_msg=c)
    # the published RawNet2 figure (Tak et al. 2021), rounded as the paper rounds (4 decimals)
    assert round(float(got.loc[got["system"] == "rawnet2_transferfiles", "min_tdcf_2019"].iloc[0]), 4) == 0.1294
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Tandem ASV + CM evaluation" in html and "min t-DCF (2019)" in html
    # the pairwise section states its multiplicity control
    assert "Pairwise system comparison" in html and "holm-adjusted within each metric" in html


def _simulated(rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """12 speakers (gender = speaker parity), 20 bona fide + 30 spoof utterances each; every bona fide
    utterance is one target and one same-gender nontarget ASV trial, every spoof one spoof trial."""
    rows_cm, rows_asv = [], []
    n_spk = 12
    for s in range(n_spk):
        g = "female" if s % 2 else "male"
        for i in range(50):
            utt, bona = f"u{s}_{i}", i < 20
            for sys, d in (("A", 2.0), ("B", 3.0)):
                rows_cm.append({"utt": utt, "speaker": f"s{s}", "gender": g, "label": "bonafide" if bona else "spoof",
                                "system": sys, "score": rng.normal(d if bona else 0.0, 1.0)})
            if bona:
                rows_asv.append({"utt": utt, "claimed": f"s{s}", "g": g, "trial_type": "target",
                                 "score": rng.normal(3.0, 1.0)})
                other = (s + 2 * rng.integers(1, n_spk // 2)) % n_spk
                rows_asv.append({"utt": utt, "claimed": f"s{other}", "g": g, "trial_type": "nontarget",
                                 "score": rng.normal(0.0, 1.0)})
            else:
                rows_asv.append({"utt": utt, "claimed": f"s{s}", "g": g, "trial_type": "spoof",
                                 "score": rng.normal(2.0, 1.2)})
    return pd.DataFrame(rows_asv), pd.DataFrame(rows_cm)


def test_study_tandem_intervals_and_groups(tmp_path):
    asv, cm = _simulated(np.random.default_rng(7))
    asv.to_csv(tmp_path / "asv.csv", index=False)
    cm.to_csv(tmp_path / "cm.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('''[study]
name = "sim_tandem"
seed = 11
[data]
file = "cm.csv"
label = "label"
positive = "bonafide"
system = "system"
speaker = "speaker"
[analyses.tandem]
asv_file = "asv.csv"
asv_speaker = "claimed"
by = ["g", "gender"]
n_boot = 40
''', encoding="utf-8")
    res = run_study(load_study(toml), out_dir=tmp_path / "out", progress=False, report=True)
    assert not res.failed, res.failed
    got = pd.read_csv(tmp_path / "out" / "tandem.csv")
    want = tandem_table(asv, cm, join="utt", system="system", asv_speaker="claimed", cm_speaker="speaker",
                        n_boot=40, seed=task_seed(11, "tandem"), by=("g", "gender"))
    assert list(zip(got["system"], got["group"])) == list(zip(want["system"], want["group"]))
    assert len(got) == 4
    for c in TANDEM_COLUMNS:
        for suffix in ("", "_lo", "_hi"):
            np.testing.assert_allclose(got[c + suffix], want[c + suffix], rtol=0, atol=1e-12, err_msg=c + suffix)
    assert (got["min_tdcf_2019_lo"] <= got["min_tdcf_2019"]).all()
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Tandem ASV + CM evaluation" in html and "tandem forest plot" in html


@pytest.mark.parametrize("body, key", [
    ("n_boot = 10\n", "asv_file"),
    ('asv_file = "a.csv"\nby = ["g"]\n', "analyses.tandem.by"),
    ('asv_file = "a.csv"\nn_boot = 10\n', "analyses.tandem.n_boot"),
    ('asv_file = "a.csv"\ncolour = 1\n', "analyses.tandem.colour"),
])
def test_study_tandem_config_errors(tmp_path, body, key):
    pd.DataFrame({"score": [0.1, 0.9], "y": [0, 1]}).to_csv(tmp_path / "t.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text(f'[study]\nname = "x"\n[data]\nfile = "t.csv"\nlabel = "y"\n[analyses.tandem]\n{body}',
                    encoding="utf-8")
    with pytest.raises(StudyConfigError, match=key):
        load_study(toml)


def test_study_tandem_missing_cm_score_is_named(tmp_path):
    asv, cm = _simulated(np.random.default_rng(3))
    asv.to_csv(tmp_path / "asv.csv", index=False)
    cm[cm["utt"] != "u0_0"].to_csv(tmp_path / "cm.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "m"\n[data]\nfile = "cm.csv"\nlabel = "label"\npositive = "bonafide"\n'
                    'system = "system"\nspeaker = "speaker"\n[analyses.tandem]\nasv_file = "asv.csv"\nn_boot = 0\n',
                    encoding="utf-8")
    res = run_study(load_study(toml), out_dir=tmp_path / "out", progress=False, report=False)
    assert res.failed and "u0_0" in res.failed[0]["error"]
