"""[analyses.systems]: the study's pairwise system comparison equals compare_systems on the same table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scoremix.compare_systems import compare_systems
from scoremix.study import load_study, run_study
from scoremix.study.parallel import task_seed


def test_study_systems_analysis(tmp_path):
    rng = np.random.default_rng(1)
    n = 24 * 12
    spk = np.arange(n) % 24
    y = (np.arange(n) // 24) % 3 == 0
    a = rng.normal(0, 1, n) + 2.0 * y + rng.normal(0, 0.5, 24)[spk]
    df = pd.DataFrame({"utt": np.tile(np.arange(n), 3), "spk": np.tile(spk, 3), "y": np.tile(y.astype(int), 3),
                       "sys": np.repeat(["A", "B", "C"], n),
                       "score": np.r_[a, a + rng.normal(0, 0.6, n), a + rng.normal(0, 1.2, n)]})
    df.to_csv(tmp_path / "t.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "sys"\nseed = 3\n[data]\nfile = "t.csv"\nlabel = "y"\nsystem = "sys"\n'
                    'speaker = "spk"\n[analyses.systems]\nmetrics = ["eer", "auc"]\ntrial_id = "utt"\nn_boot = 50\n',
                    encoding="utf-8")
    res = run_study(load_study(toml), out_dir=tmp_path / "out", progress=False, report=True)
    assert not res.failed, res.failed
    got = pd.read_csv(tmp_path / "out" / "systems_compare.csv")
    want = compare_systems(df, metrics=["eer", "auc"], speaker="spk", trial="utt", system="sys", label="y",
                           n_boot=50, seed=task_seed(3, "systems"))
    assert len(got) == 6
    np.testing.assert_allclose(got["difference"], want["difference"], atol=1e-12)
    np.testing.assert_allclose(got["p_adjusted"], want["p_adjusted"], atol=1e-12)
    assert "Pairwise system comparison" in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")


def test_study_systems_needs_a_system_column(tmp_path):
    from scoremix.study.config import StudyConfigError

    pd.DataFrame({"score": [0.1, 0.9], "y": [0, 1]}).to_csv(tmp_path / "t.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "x"\n[data]\nfile = "t.csv"\nlabel = "y"\n[analyses.systems]\n', encoding="utf-8")
    with pytest.raises(StudyConfigError, match="system"):
        load_study(toml)
