"""transform = "monotone" in study files, the goodness-of-fit columns of study tables and the
CLI's model-based EER table."""

from __future__ import annotations

import tomllib
import warnings

import numpy as np
import pandas as pd
import pytest

from scoremix.study import StudyConfigError, parse_study
from scoremix.study.config import ModelConfig, ModelEERConfig
from scoremix.study.tasks import fit_model

TOML = """
[study]
name = "t"
[data]
file = "x.csv"
[[models]]
name = "m"
formula = "score ~ label + (1 | speaker)"
"""


def _sim(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, 30, n)
    y = rng.random(n) < 0.4
    z = -1 + 2.4 * y + rng.normal(0, 0.4, 30)[spk] + rng.standard_normal(n)
    return pd.DataFrame({"score": z, "label": np.where(y, "bonafide", "spoof"), "y": y.astype(int),
                         "speaker": [f"s{k}" for k in spk], "sex": np.where(spk % 2, "f", "m")})


@pytest.mark.parametrize("patch, needle", [
    ({"transform": "spline"}, r"models\[0\]\.transform: unknown value 'spline'; choose one of monotone"),
    ({"transform": "monotone", "backend": "lme4"}, r"models\[0\]\.transform: 'monotone' needs backend 'native' or"),
])
def test_transform_key_is_validated(patch, needle):
    raw = tomllib.loads(TOML)
    raw["models"][0].update(patch)
    with pytest.raises(StudyConfigError, match=needle):
        parse_study(raw, base_dir=".")
    raw["models"][0].update({"transform": "monotone", "backend": "native"})
    assert parse_study(raw, base_dir=".").models[0].transform == "monotone"


def test_fit_model_passes_transform_and_records_it(monkeypatch):
    """The study hands transform= to lmer (a real transformation fit) and records it; the
    model_eer table carries the empirical interval and fit_ok (checked against model_eer of
    the same fit directly)."""
    import scoremix.lme.api as api
    from scoremix.model_eer import model_eer

    seen = {}
    real = api.lmer

    def spy(*a, **kw):
        seen.update(kw)
        return real(*a, **kw)

    monkeypatch.setattr(api, "lmer", spy)
    df = _sim()
    m = ModelConfig(name="m", formula="score ~ label + (1 | speaker)", dispersion="~ label", transform="monotone")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fit_model(m, "sys", df, 0, ModelEERConfig(by=["sex"], n_boot=50), None, "speaker")
    assert seen["transform"] == "monotone"
    assert out["transform"] == "monotone"
    tab = out["model_eer"]
    assert set(tab["transform"]) == {"monotone"}
    assert {"eer_empirical_lo", "eer_empirical_hi", "fit_ok", "term_note"} <= set(tab.columns)
    assert set(tab["eer_model_interval"]) == {"speakers"}  # a transformation fit: labelled speaker re-weighting
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = real("score ~ label + (1 | speaker)", df, dispersion="~ label", transform="monotone")
        direct = model_eer(fit, by="sex", label="y", data=df, n_boot=50, speaker="speaker")
    got = tab[tab["by"] == "sex"].set_index("cell")
    np.testing.assert_allclose(got["eer_model"], direct["eer_model"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(got["eer_empirical_lo"], direct["eer_empirical_lo"].to_numpy(), rtol=1e-12)
    assert "no term for ['sex']" in got["term_note"].iloc[0]
    assert out.get("det_png", b"")[:4] == b"\x89PNG"
    ov = tab[tab["by"] == "overall"].iloc[0]
    assert ov["eer_empirical_lo"] <= ov["eer_empirical"] <= ov["eer_empirical_hi"]


def test_cli_fit_prints_model_vs_empirical_eer(tmp_path, capsys):
    from scoremix.cli import main

    df = _sim(2000, seed=1)
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    rc = main(["fit", str(path), "--formula", "score ~ label + (1 | speaker)", "--dispersion", "~ label",
               "--model-eer", "sex"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Model-based vs empirical EER" in out and "fit_ok" in out
    lines = [ln.split() for ln in out.splitlines() if ln.strip().startswith(("overall", "sex"))]
    assert [ln[1] for ln in lines] == ["all", "f", "m"]
    assert "no term for ['sex']" in out
