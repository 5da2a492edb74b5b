"""One API convention and the three hazards it removes (issue 21).

* every metric returns a float-like value: ``sm.min_dcf(...) < 0.5`` works, extras are attributes;
* ``gaussian_eer`` and ``mixture_eer`` take ``(mean_neg, sd_neg, mean_pos, sd_pos)``; an old
  positional ``gaussian_eer`` call keeps its old meaning (with a FutureWarning), never another answer;
* one ``SingleClassError``: ``except sm.SingleClassError`` catches every single-class error;
* old argument names (``ci``, ``hdi_prob``, ``random_state``, ``random_seed``, ``groups``, ``split``,
  ``bys``) keep working for one release with a FutureWarning and give the same result.
Reference values are closed forms or brute-force counts computed here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

import scoremix as sm
from scoremix._deprecate import renamed_kwargs


def _data(n=400, seed=0):
    r = np.random.default_rng(seed)
    s = np.r_[r.normal(1.2, 1.0, n), r.normal(0.0, 1.0, n)]
    y = np.r_[np.ones(n, int), np.zeros(n, int)]
    return s, y


def _brute_min_dcf(s, y, p_target=0.05, c_miss=1.0, c_fa=1.0):
    best = c_fa * (1 - p_target) * 1.0  # accept all: P_fa = 1 at the lowest threshold ... checked below
    for t in np.r_[np.unique(s), np.inf]:
        pm = np.mean(s[y == 1] < t)
        pf = np.mean(s[y == 0] >= t)
        best = min(best, c_miss * p_target * pm + c_fa * (1 - p_target) * pf)
    return best


# ------------------------------------------------------------------ hazard 1: float-like metrics
def test_min_dcf_compares_formats_and_computes_like_a_float():
    s, y = _data()
    m = sm.min_dcf(s, y)
    want = _brute_min_dcf(s, y)
    assert m < 0.5 and m > 0.0 and abs(m - want) < 1e-12
    assert f"{m:.6f}" == f"{want:.6f}" and round(m, 9) == round(want, 9)
    assert isinstance(m, float) and float(m) == m.value
    assert type(m + 0.0) is float and type(2 * m) is float  # arithmetic gives plain floats
    # extras are attributes, and the threshold reproduces the value exactly
    assert sm.dcf(s, y, m.threshold) == pytest.approx(float(m), abs=1e-15)
    assert m.p_miss == np.mean(s[y == 1] < m.threshold) and m.p_fa == np.mean(s[y == 0] >= m.threshold)
    assert sorted([m, 0.9, 0.01])[1] == m


def test_every_metric_returns_a_float():
    s, y = _data()
    for v in (sm.eer(s, y), sm.min_dcf(s, y), sm.act_dcf(s - 3, y), sm.cllr(s - 0.6, y),
              sm.min_cllr(s, y), sm.dcf(s, y, 0.5), sm.auc(s, y), sm.eer_threshold(s, y)):
        assert isinstance(v, float) and v < 10


def test_bootstrapped_metrics_stay_float_like_with_interval_attributes():
    s, y = _data(150)
    spk = np.repeat(np.arange(30), 10)
    e = sm.eer(s, y, n_boot=64, seed=3, speaker=spk)
    m = sm.min_dcf(s, y, n_boot=64, seed=3, speaker=spk)
    for v in (e, m):
        assert v < 0.5 and v.lo <= float(v) <= v.hi and v.level == 0.95 and v.n_boot == 64
    assert isinstance(e, sm.Estimate) and float(e) == sm.eer(s, y)


# ------------------------------------------------------------------ hazard 2: argument order
def test_gaussian_and_mixture_eer_share_one_argument_order():
    mn, sn, mp, sp = 0.3, 1.5, 2.0, 0.7
    closed = norm.cdf(-(mp - mn) / (sn + sp))
    g = sm.gaussian_eer(mean_neg=mn, sd_neg=sn, mean_pos=mp, sd_pos=sp)
    mix = sm.mixture_eer(mn, sn, mp, sp)
    assert g == pytest.approx(closed, abs=1e-12) and mix == pytest.approx(closed, abs=1e-9)
    names = list(inspect.signature(sm.mixture_eer).parameters)[:4]
    gnames = [p for p, v in inspect.signature(sm.gaussian_eer).parameters.items()
              if v.kind is inspect.Parameter.KEYWORD_ONLY]
    assert names == gnames == ["mean_neg", "sd_neg", "mean_pos", "sd_pos"]


def test_old_positional_gaussian_eer_call_keeps_its_meaning_with_a_warning():
    mu_neg, mu_pos, sd_neg, sd_pos = 0.3, 2.0, 1.5, 0.7  # the old order
    closed = norm.cdf(-(mu_pos - mu_neg) / (sd_neg + sd_pos))
    with pytest.warns(FutureWarning, match="old order"):
        old = sm.gaussian_eer(mu_neg, mu_pos, sd_neg, sd_pos)
    assert old == pytest.approx(closed, abs=1e-12)
    with pytest.warns(FutureWarning, match="is renamed mean_"):
        kw = sm.gaussian_eer(mu_neg=mu_neg, sd_neg=sd_neg, mu_pos=mu_pos, sd_pos=sd_pos)
    assert kw == old
    with pytest.raises(TypeError, match="keyword"):
        sm.gaussian_eer(0.0, 1.0, 1.0)
    with pytest.raises(TypeError, match="missing"):
        sm.gaussian_eer(mean_neg=0.0, sd_neg=1.0, mean_pos=1.0)


# ------------------------------------------------------------------ hazard 3: one SingleClassError
def test_one_single_class_error_catches_every_single_class_failure():
    s = np.arange(10.0)
    with pytest.raises(sm.SingleClassError):
        sm.eer(s, np.zeros(10))
    with pytest.raises(sm.SingleClassError):
        sm.min_dcf(s, np.ones(10))
    with pytest.raises(sm.SingleClassError):
        sm.nuisance_model(s, np.ones(10, dtype=int))
    df = pd.DataFrame({"score": np.r_[s, s + 0.5] * 0.37, "label": "spoof", "spk": np.repeat(["a", "b"], 10)})
    with pytest.raises(sm.SingleClassError, match="'label'"):
        sm.lmer("score ~ label + (1 | spk)", df, transform="monotone")


def test_single_class_error_is_one_class_in_the_whole_package():
    found = set()
    for mod in pkgutil.walk_packages(sm.__path__, "scoremix."):
        if mod.name.startswith(("scoremix.demo", "scoremix.lme.backends.lme4")):
            continue
        m = importlib.import_module(mod.name)
        for name, obj in vars(m).items():
            if name == "SingleClassError":
                found.add(obj)
    assert found == {sm.SingleClassError}


# ------------------------------------------------------------------ renamed arguments
def test_renamed_kwargs_helper_maps_warns_and_refuses_both():
    @renamed_kwargs(ci="level", random_state="seed")
    def f(x, *, level=0.95, seed=None):
        return level, seed

    with pytest.warns(FutureWarning, match=r"f\(\): the argument ci= is renamed level="):
        assert f(1, ci=0.9) == (0.9, None)
    with pytest.raises(TypeError, match="not both"):
        f(1, ci=0.9, level=0.8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(1, level=0.8, seed=2) == (0.8, 2)


def test_old_interval_and_seed_names_give_the_same_result():
    s, y = _data(120)
    spk = np.repeat(np.arange(24), 10)
    new = sm.eer(s, y, n_boot=40, seed=5, speaker=spk, level=0.9)
    with pytest.warns(FutureWarning, match="ci= is renamed level="):
        old = sm.eer(s, y, n_boot=40, seed=5, speaker=spk, ci=0.9)
    assert (float(old), old.lo, old.hi) == (float(new), new.lo, new.hi)
    with pytest.warns(FutureWarning, match="Estimate.*ci= is renamed level="):
        assert new.ci == 0.9


def test_old_grouping_names_give_the_same_fairness_table():
    r = np.random.default_rng(2)
    n = 240
    df = pd.DataFrame({"score": r.normal(size=n), "label": np.tile([0, 1], n // 2),
                       "speaker": np.repeat(np.arange(24), 10).astype(str),
                       "sex": np.repeat(np.array(["f", "m"] * 12), 10)})
    df.loc[df.label == 1, "score"] += 1.5
    new = sm.subgroup_dcf(df, by=["sex"], n_boot=40, seed=1, level=0.9, progress=False)
    with pytest.warns(FutureWarning) as rec:
        old = sm.subgroup_dcf(df, groups=["sex"], n_boot=40, random_state=1, ci=0.9, progress=False)
    assert {str(w.message).split("the argument ")[1].split("=")[0] for w in rec} == {"groups", "random_state", "ci"}
    pd.testing.assert_frame_equal(old.table, new.table)


def test_every_exported_name_is_in_the_api_reference():
    from pathlib import Path
    import re

    api = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    documented = {p.rsplit(".", 1)[1] for p in re.findall(r"^::: (\S+)", api, re.M)}
    missing = sorted(set(sm.__all__) - documented - {"__version__"})
    assert not missing, f"exported but not in docs/api.md: {missing}"


def test_float_like_results_survive_pickling_and_copies():
    """Study workers send results between processes: the extras must come back."""
    import copy
    import pickle

    s, y = _data(100)
    for v in (sm.eer(s, y, n_boot=40, seed=1), sm.min_dcf(s, y), sm.min_dcf(s, y, n_boot=40, seed=1)):
        for w in (pickle.loads(pickle.dumps(v)), copy.deepcopy(v)):
            assert type(w) is type(v) and float(w) == float(v) and repr(w) == repr(v)


def test_result_subclasses_keep_the_base_summary_signature():
    base = inspect.signature(sm.LmerResult.summary)
    for cls in (sm.TransformLmerResult, sm.DaskLmerResult):
        assert inspect.signature(cls.summary) == base, cls.__name__


def test_transform_summary_refuses_lmertest_df_by_name():
    r = np.random.default_rng(1)
    spk = np.repeat(np.arange(20), 10)
    d = pd.DataFrame({"score": r.normal(size=200) + r.normal(size=20)[spk], "label": np.tile(["a", "b"], 100),
                      "g": spk.astype(str)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.lmer("score ~ label + (1 | g)", d, transform="monotone")
    assert isinstance(m.summary(), str) and m.summary() == m.summary(ddf="lme4")
    with pytest.raises(sm.TransformError, match="Gaussian"):
        m.summary(ddf="Satterthwaite")
