"""Tests of the fixed effects of transformation fits (``transform="monotone"``): the
denominator df come from the Gaussian model of the latent responses, so monotone maps of the
scores (×10, exp) give identical tests, and in a balanced design the df of a within-speaker
effect is the classical within-speaker residual df ``N − k − (p − 1)``.

Before issue 24 the df came from the raw scores' Gaussian cross-products: 525 for the effect
below, 80430 after multiplying the scores by 10."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import scoremix as sm
from scoremix.lme.anova_tables import anova_table

K, M = 20, 24  # speakers, trials per speaker (balanced: y and x crossed within every speaker)


@pytest.fixture(scope="module")
def fits() -> dict[str, object]:
    rng = np.random.default_rng(0)
    spk = np.repeat(np.arange(K), M)
    n = spk.size
    y = (np.arange(n) % 2).astype(int)
    x = np.array(["a", "b", "c"])[(np.arange(n) // 2) % 3]
    s = 1.0 * y + 0.3 * (x == "b") + rng.normal(0, 0.7, K)[spk] + rng.normal(0, 1, n)
    df = pd.DataFrame({"score": s, "y": y, "x": x, "spk": spk.astype(str)})
    out = {}
    for name, f in (("raw", lambda v: v), ("x10", lambda v: 10 * v), ("exp", np.exp)):
        out[name] = sm.lmer("score ~ y + x + (1|spk)", df.assign(score=f(df.score)), transform="monotone")
    return out


def test_within_speaker_effect_has_the_classical_df(fits: dict) -> None:
    tab = fits["raw"].coef_table()
    n, p = K * M, 4
    assert tab.loc["y", "df"] == pytest.approx(n - K - (p - 1), abs=1e-3)  # 456 - 20 - 3 = 433
    m = fits["raw"]
    se = float(np.sqrt(m.vcov.loc["y", "y"]))
    assert tab.loc["y", "Std. Error"] == pytest.approx(se, rel=1e-12)
    t = m.fixef["y"] / se
    assert tab.loc["y", "Pr(>|t|)"] == pytest.approx(2 * stats.t.sf(abs(t), n - K - (p - 1)), rel=1e-5)


@pytest.mark.parametrize("other", ["x10", "exp"])
def test_monotone_maps_give_identical_tests(fits: dict, other: str) -> None:
    a, b = fits["raw"].coef_table(), fits[other].coef_table()
    pd.testing.assert_frame_equal(a, b, rtol=1e-5)
    fa, fb = anova_table(fits["raw"]), anova_table(fits[other])
    pd.testing.assert_frame_equal(fa, fb, rtol=1e-5)


def test_multi_df_term_wald_f(fits: dict) -> None:
    m = fits["raw"]
    tab = anova_table(m)
    idx = [i for i, c in enumerate(m.fixef.index) if c.startswith("x")]
    b = m.fixef.to_numpy()[idx]
    V = m.vcov.to_numpy()[np.ix_(idx, idx)]
    F = float(b @ np.linalg.solve(V, b)) / 2
    assert tab.loc["x", "F value"] == pytest.approx(F, rel=1e-8)
    assert tab.loc["x", "NumDF"] == 2
    assert tab.loc["x", "DenDF"] == pytest.approx(K * M - K - 3, abs=1e-3)
