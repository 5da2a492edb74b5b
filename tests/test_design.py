"""Tests of scoremix.design: configurations, Δ regressors, class-mean differences, grids."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from scoremix.design import (
    CONFIGURATIONS,
    Configuration,
    DesignError,
    class_mean_difference,
    class_means,
    delta_covariates,
    delta_covariates_for,
    expected_deltas,
    partial_bias_grid,
    zscore_by,
)

# distinct magnitudes so that every sign combination is distinguishable
MU, D, BP, BN = -0.5, 1.0, 0.1, 0.01
FIT = {"mu": MU, "d": D, "beta_pos": BP, "beta_neg": BN}


def test_configuration_bits_match_studies_table():
    table = {
        "O": (0, 0, 0, 0), "I": (1, 1, 1, 1), "M_tr": (1, 1, 0, 0), "M_te": (0, 0, 1, 1),
        "IT_p": (0, 1, 0, 1), "IT_n": (1, 0, 1, 0), "IV_pn": (0, 1, 1, 0), "IV_np": (1, 0, 0, 1),
        "O_n": (0, 0, 1, 0), "O_p": (0, 0, 0, 1),
    }
    assert set(CONFIGURATIONS) == set(table)
    for name, bits in table.items():
        assert CONFIGURATIONS[name].bits == bits
        assert CONFIGURATIONS[name].description


# hand derivations from studies.md A.1
HAND = {
    "O": D, "I": D, "M_tr": D, "M_te": D,
    "IT_p": D + BN - BP, "IT_n": D + BN - BP,
    "IV_pn": D + BP - BN, "IV_np": D + BP - BN,
    "O_n": D - BP - BN, "O_p": D + BP + BN,
}


@pytest.mark.parametrize("name", list(HAND))
def test_class_mean_difference_matches_hand_derivation(name):
    assert class_mean_difference(name, FIT) == pytest.approx(HAND[name], abs=1e-12)


def test_it_p_worked_example_class_means():
    # negative test trials: Δpos = 1, Δneg = 0 → μ + β^pos; positives: Δpos 0, Δneg 1 → μ + d + β^neg
    assert class_means("IT_p", FIT) == pytest.approx((MU + BP, MU + D + BN))
    ed = expected_deltas("IT_p")
    assert ed.loc["neg"].tolist() == [1.0, 0.0]
    assert ed.loc["pos"].tolist() == [0.0, 1.0]


def test_class_mean_difference_accepts_objects_and_lmer_names():
    class Obj:
        mu, d, beta_pos, beta_neg = MU, D, BP, BN

    assert class_mean_difference("O_n", Obj()) == pytest.approx(HAND["O_n"])

    class Lmer:
        fixef = pd.Series({"(Intercept)": MU, "labelbonafide": D, "delta_pos": BP, "delta_neg": BN})

    names = {"mu": "(Intercept)", "d": "labelbonafide", "beta_pos": "delta_pos", "beta_neg": "delta_neg"}
    assert class_mean_difference("IV_pn", Lmer(), names=names) == pytest.approx(HAND["IV_pn"])
    with pytest.raises(DesignError, match="'labelspoof'"):
        class_mean_difference("O", Lmer(), names={**names, "d": "labelspoof"})
    with pytest.raises(DesignError, match="names="):
        class_mean_difference("O", Lmer())
    with pytest.raises(DesignError, match="unknown configuration 'IT'"):
        class_mean_difference("IT", FIT)
    with pytest.raises(DesignError, match="beta_neg"):
        class_mean_difference("O", {"mu": 0, "d": 1, "beta_pos": 0})


def test_delta_covariates_definition():
    t = pd.Series([0, 1, 0.25, 1], index=list("abcd"))
    out = delta_covariates(t, rho_train_neg=0.0, rho_train_pos=1.0)
    assert list(out.index) == list("abcd")
    np.testing.assert_allclose(out["delta_pos"], [1, 0, 0.75, 0])
    np.testing.assert_allclose(out["delta_neg"], [0, 1, 0.25, 1])
    with pytest.raises(DesignError, match="test_intervened"):
        delta_covariates([0, 2], 0, 0)


def test_delta_covariates_for_corner_configuration():
    labels = pd.Series(["bonafide", "spoof", "spoof", "bonafide"], index=[10, 11, 12, 13])
    out = delta_covariates_for("IT_p", labels)
    # IT_p: positives t = 1 → (Δpos, Δneg) = (0, 1); negatives t = 0 → (1, 0)
    assert out.loc[10].tolist() == [0.0, 1.0]
    assert out.loc[11].tolist() == [1.0, 0.0]
    realised = delta_covariates_for("O", labels, intervened=[1, 0, 1, 0])
    assert realised["delta_pos"].tolist() == [1.0, 0.0, 1.0, 0.0]


def test_expected_deltas_for_partial_probabilities_match_simulation():
    """Mixed probabilities: the derived class means agree with simulated Bernoulli designs."""
    cfg = Configuration("partial", tr_n=0.3, tr_p=0.8, te_n=0.6, te_p=0.1)
    rng = np.random.default_rng(0)
    n = 400_000
    y = rng.integers(0, 2, n)
    t = (rng.random(n) < np.where(y == 1, cfg.te_p, cfg.te_n)).astype(float)
    dl = delta_covariates(t, cfg.tr_n, cfg.tr_p)
    s = MU + D * y + BP * dl["delta_pos"].to_numpy() + BN * dl["delta_neg"].to_numpy()
    sim_diff = s[y == 1].mean() - s[y == 0].mean()
    assert class_mean_difference(cfg, FIT) == pytest.approx(sim_diff, abs=2e-3)
    with pytest.raises(DesignError, match="te_p"):
        Configuration("bad", 0, 0, 0, 1.5)


def test_zscore_by_groups():
    df = pd.DataFrame({"s": [1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 5.0, 7.0],
                       "cfg": ["a", "a", "a", "b", "b", "b", "c", "c"]})
    z = zscore_by(df, "s", "cfg")
    # group a: mean 2, sd 1 → (-1, 0, 1); b: mean 20, sd 10; c: mean 6, sd √2
    np.testing.assert_allclose(z.to_numpy(), [-1, 0, 1, -1, 0, 1, -1 / np.sqrt(2), 1 / np.sqrt(2)])
    assert z.name == "s_z"
    bad = pd.DataFrame({"s": [1.0, 1.0, 2.0, 3.0], "cfg": ["x", "x", "y", "y"]})
    with pytest.raises(DesignError, match="'x'"):
        zscore_by(bad, "s", "cfg")
    with pytest.raises(DesignError, match="'nope'"):
        zscore_by(df, "s", ["cfg", "nope"])


def _paired(n, seed, rho_tr_n, rho_tr_p, sigma=1.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    base = MU + 1.5 * y

    def shift(t):
        return 0.8 * abs(t - rho_tr_p) + (-0.6) * abs(t - rho_tr_n)

    s0 = base + shift(0) + sigma * rng.standard_normal(n)
    s1 = base + shift(1) + sigma * rng.standard_normal(n)
    return s0, s1, y


def test_partial_bias_grid_model_matches_empirical_and_closed_form():
    rho_tr_n, rho_tr_p = 0.0, 1.0  # IT_p-style training
    s0, s1, y = _paired(40_000, 1, rho_tr_n, rho_tr_p)
    fit = {"mu": MU, "d": 1.5, "beta_pos": 0.8, "beta_neg": -0.6, "sigma": 1.0}
    grid = partial_bias_grid(s0, s1, y, rho_te_neg=[0.0, 0.5, 1.0], rho_te_pos=[0.0, 1.0],
                             rho_train_neg=rho_tr_n, rho_train_pos=rho_tr_p, fit=fit,
                             random_state=3, progress=False)
    assert len(grid) == 6
    assert np.all(np.abs(grid["eer_model"] - grid["eer_empirical"]) < 0.012)
    cell = grid.set_index(["rho_te_neg", "rho_te_pos"])
    # corner cell (te_n, te_p) = (0, 1) is IT_p: difference d + β^neg − β^pos
    assert cell.loc[(0.0, 1.0), "eer_model"] == pytest.approx(norm.cdf(-(1.5 - 0.6 - 0.8) / 2))
    # (1, 0) is IV_pn: d + β^pos − β^neg
    assert cell.loc[(1.0, 0.0), "eer_model"] == pytest.approx(norm.cdf(-(1.5 + 0.8 + 0.6) / 2))
    # saturated (no fit) version agrees with the truth-based model
    sat = partial_bias_grid(s0, s1, y, rho_te_neg=[0.0, 0.5, 1.0], rho_te_pos=[0.0, 1.0],
                            random_state=3, progress=False)
    np.testing.assert_allclose(sat["eer_model"], grid["eer_model"], atol=0.01)
    # reproducible with a seed; replicates give an SD
    again = partial_bias_grid(s0, s1, y, rho_te_neg=[0.5], rho_te_pos=[0.5], random_state=9,
                              n_rep=3, progress=False)
    again2 = partial_bias_grid(s0, s1, y, rho_te_neg=[0.5], rho_te_pos=[0.5], random_state=9,
                               n_rep=3, progress=False)
    pd.testing.assert_frame_equal(again, again2)
    assert again["eer_empirical_sd"].iloc[0] > 0


def test_partial_bias_grid_errors():
    s0, s1, y = _paired(100, 2, 0, 0)
    with pytest.raises(DesignError, match="same length"):
        partial_bias_grid(s0, s1[:-1], y, progress=False)
    with pytest.raises(DesignError, match="rho_te_pos"):
        partial_bias_grid(s0, s1, y, rho_te_pos=[1.2], progress=False)
    bad = s1.copy()
    bad[4] = np.nan
    with pytest.raises(DesignError, match=r"scores_intervened has 1 NaN.*\[4\]"):
        partial_bias_grid(s0, bad, y, progress=False)
    with pytest.raises(DesignError, match="sigma"):
        partial_bias_grid(s0, s1, y, fit=FIT, progress=False)


# ---------------------------------------------------------------------------------------
# the real-study example on ASVspoof 2021 DF (needs ../shared/data)
# ---------------------------------------------------------------------------------------
def _example_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "asvspoof2021_df_interventions.py"
    spec = importlib.util.spec_from_file_location("asvspoof2021_df_interventions", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.shared_data
def test_example_intervention_model_on_asvspoof2021_df(shared_data):
    pytest.importorskip("scoremix.lme.api")
    ex = _example_module()
    df = ex.load(shared_data / ex.FOLDER, ["rawnet2"])
    d = df[df["condition"].isin(["none", "gaussian_noise_5dB"])]
    tab = ex.intervention_table(d, "utt", ["gaussian_noise_5dB"])
    row = tab.loc["gaussian_noise_5dB"]
    # every utterance appears once clean and once intervened (balanced, y constant within
    # utterance), so the GLS fixed effects equal the cell-mean contrasts of the z-scores
    z = d["s"].groupby(d["condition"]).transform(lambda v: (v - v.mean()) / v.std())
    cell = z.groupby([d["condition"], d["y"]]).mean()
    assert row["mu"] == pytest.approx(cell[("none", 0.0)], abs=1e-6)
    assert row["d"] == pytest.approx(cell[("none", 1.0)] - cell[("none", 0.0)], abs=1e-6)
    assert row["beta_neg"] == pytest.approx(cell[("gaussian_noise_5dB", 0.0)] - cell[("none", 0.0)], abs=1e-6)
    assert row["beta_pos"] == pytest.approx(cell[("gaussian_noise_5dB", 1.0)] - cell[("none", 1.0)], abs=1e-6)
    # empirical EERs: the dataset README's check (interpolated EER 23.74 % and 25.34 %);
    # the ROCCH EER is never above it and close to it
    assert 0.2374 - 0.005 < row["eer_clean_emp"] <= 0.2374 + 1e-9
    assert 0.2534 - 0.005 < row["eer_int_emp"] <= 0.2534 + 1e-9
    assert 0.0 < row["eer_int_model"] < 0.5
