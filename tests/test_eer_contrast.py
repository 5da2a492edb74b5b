"""Model-based EER contrasts (female − male): point estimates equal the closed form of the
fitted model, and the parametric-bootstrap interval covers the simulation's truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import scoremix as sm
from scoremix.emm import EmmError
from scoremix.emm.eer_contrast import eer_contrast


@pytest.fixture(scope="module")
def gender_fit():
    rng = np.random.default_rng(1)
    rows = []
    for i in range(40):
        g = "female" if i % 2 == 0 else "male"
        u = rng.normal(0, 0.4)
        for lab in ("bonafide", "spoof"):
            mu = (2.0 if lab == "bonafide" else 0.0) + (0.6 if (lab == "bonafide" and g == "male") else 0.0)
            rows.append(pd.DataFrame({"speaker": f"s{i}", "gender": g, "label": lab,
                                      "score": mu + u + rng.normal(0, 1, 15)}))
    d = pd.concat(rows, ignore_index=True)
    return sm.lmer("score ~ label * gender + (1 | speaker)", d)


def test_point_is_closed_form_and_interval_covers_truth(gender_fit):
    m = gender_fit
    r = eer_contrast(m, "gender", n_boot=40, seed=3, label="label", positive="bonafide",
                     thresholds="latent")  # the closed form is the smooth crossing
    b = m.fixef
    sd = np.sqrt(m.sigma ** 2 + m.cov_re()[0][0, 0])
    d_f = -b["labelspoof"]
    d_m = -(b["labelspoof"] + b["labelspoof:gendermale"])
    e_f, e_m = stats.norm.cdf(-d_f / (2 * sd)), stats.norm.cdf(-d_m / (2 * sd))
    assert r["eer_a"].iloc[0] == pytest.approx(e_f, abs=1e-7)
    assert r["eer_b"].iloc[0] == pytest.approx(e_m, abs=1e-7)
    truth = stats.norm.cdf(-2 / (2 * np.sqrt(1.16))) - stats.norm.cdf(-2.6 / (2 * np.sqrt(1.16)))
    assert r["lower"].iloc[0] < truth < r["upper"].iloc[0]
    assert r["n_rep"].iloc[0] == 40 and r["interval"].iloc[0] == "parametric"


def test_bad_level(gender_fit):
    with pytest.raises(EmmError, match="nonbinary"):
        eer_contrast(gender_fit, "gender", pairs=[("female", "nonbinary")], n_boot=2,
                     label="label", positive="bonafide")
