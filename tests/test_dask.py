"""Dask input (issue 14): fits from per-partition cross-products equal the in-memory fits,
metrics from merged score counts equal the in-memory metrics exactly.

Every reference value is the in-memory computation on the same rows (``ddf.compute()``),
which the rest of the suite checks against lme4 and closed forms.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")

import scoremix as sm  # noqa: E402
from scoremix.distributed import DaskInputError, DaskLmerResult  # noqa: E402
from scoremix.lme.errors import (  # noqa: E402
    MissingValueError,
    RankDeficiencyWarning,
    SingularFitWarning,
    UnknownColumnError,
)
from scoremix.trials import NonFiniteScoreError, SingleClassError  # noqa: E402

CM = 'score ~ label * x + (1|speaker) + (0 + dummy(label, "spoof")|attack)'


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    sim = sm.simulate_trials(n_trials=12_000, n_speakers=150, n_attacks=7, seed=11)
    df = sim.table.reset_index(drop=True)
    rng = np.random.default_rng(5)
    df["w"] = rng.uniform(0.5, 2.0, len(df))
    return df


@pytest.fixture(scope="module")
def ddf(table):
    return dd.from_pandas(table, npartitions=5)


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def _fit_pair(formula, table, ddf, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingularFitWarning)
        m0 = sm.lmer(formula, table, **kw)
        m1 = sm.lmer(formula, ddf, **kw)
    return m0, m1


def _assert_same_fit(m0, m1):
    assert isinstance(m1, DaskLmerResult)
    assert m1.nobs == m0.nobs
    assert m1.ngrps == m0.ngrps
    assert list(m1.fixef.index) == list(m0.fixef.index)
    # criterion to 1e-10 relative, fixed effects to 3e-8 (relative to their scale)
    assert abs(m1.loglik - m0.loglik) <= 1e-10 * abs(m0.loglik)
    scale = np.maximum(np.abs(m0.fixef.to_numpy()), 1.0)
    # (3e-8: the optimiser's stopping rule on a correlated-slope model, both fits at the same criterion)
    np.testing.assert_array_less(np.abs(m1.fixef.to_numpy() - m0.fixef.to_numpy()) / scale, 3e-8)
    np.testing.assert_allclose(m1.sigma, m0.sigma, rtol=1e-6)
    # entries to 1e-5 relative to the largest (a near-zero covariance is not held to 1e-5 of itself)
    v0 = m0.vcov.to_numpy()
    np.testing.assert_allclose(m1.vcov.to_numpy(), v0, rtol=1e-5, atol=1e-5 * np.abs(v0).max())
    for g in m0.ranef:
        assert list(m1.ranef[g].index) == list(m0.ranef[g].index)
        np.testing.assert_allclose(m1.ranef[g].to_numpy(), m0.ranef[g].to_numpy(), atol=1e-5)


@pytest.mark.parametrize("formula,kw", [
    (CM, {}),
    (CM, dict(REML=False)),
    ("score ~ label + (1|speaker) + (1|attack)", dict(dispersion="~ label")),
    ("score ~ label + x + (1 + x|speaker)", {}),
    ("score ~ label + (1|speaker) + (1|attack)", dict(weights="w")),
    ("score ~ label + (1|speaker) + (1|speaker:attack)", {}),
])
def test_lmer_dask_equals_in_memory(table, ddf, formula, kw):
    m0, m1 = _fit_pair(formula, table, ddf, **kw)
    _assert_same_fit(m0, m1)
    if "dispersion" in kw:
        np.testing.assert_allclose(m1.sigma_by.to_numpy(), m0.sigma_by.to_numpy(), rtol=1e-6)
    assert "Number of obs: 12000" in m1.summary()


def test_lmer_parquet_glob(table, tmp_path):
    dd.from_pandas(table, npartitions=4).to_parquet(str(tmp_path), write_index=False)
    m0, m1 = _fit_pair(CM, table, str(tmp_path / "*.parquet"))
    _assert_same_fit(m0, m1)
    assert m1.fit_info["dask"]["npartitions"] == 4


def test_partitions_without_some_levels(table):
    # sorted by attack: most partitions hold one attack and one class only
    srt = table.sort_values(["attack", "label"]).reset_index(drop=True)
    ddf = dd.from_pandas(srt, npartitions=9, sort=False)
    m0, m1 = _fit_pair("score ~ label + (1|speaker) + (1|attack)", srt, ddf, dispersion="~ label")
    _assert_same_fit(m0, m1)


def test_missing_values_and_rank(table):
    t = table.copy()
    t.loc[[3, 500, 9000], "x"] = np.nan
    t["x2"] = 2.0 * t["x"]
    ddf = dd.from_pandas(t, npartitions=4)
    f = "score ~ label + x + x2 + (1|speaker)"
    with pytest.warns(RankDeficiencyWarning, match=r"dropping 1 column"):
        with pytest.warns(UserWarning, match="dropped 3 rows"):
            m1 = sm.lmer(f, ddf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m0 = sm.lmer(f, t)
    _assert_same_fit(m0, m1)
    assert m1.spec.dropped_fixef == ["x2"]
    with pytest.raises(MissingValueError, match="'x'"):
        sm.lmer(f, ddf, na_action="fail")


def test_bad_dask_input(ddf):
    with pytest.raises(UnknownColumnError, match="speakr"):
        sm.lmer("score ~ label + (1|speakr)", ddf)
    with pytest.raises(DaskInputError, match="name a column"):
        sm.lmer("score ~ label + (1|speaker)", ddf, weights=np.ones(10))
    with pytest.raises(DaskInputError, match="no parquet file matches"):
        sm.lmer("score ~ label + (1|speaker)", "/nonexistent/dir/*.parquet")
    with pytest.raises(ValueError, match="native engine only"):
        sm.lmer("score ~ label + (1|speaker)", ddf, backend="statsmodels")


def test_lazy_per_row_quantities(table, ddf):
    m0, m1 = _fit_pair(CM, table, ddf)
    fitted = m1.fitted
    assert hasattr(fitted, "compute")          # lazy, nothing collected until asked
    np.testing.assert_allclose(fitted.compute().to_numpy(), m0.fitted.to_numpy(), atol=1e-7)
    np.testing.assert_allclose(m1.residuals.compute().to_numpy(), m0.residuals.to_numpy(), atol=1e-7)
    pop = m1.predict(re_form="~0").compute().to_numpy()
    np.testing.assert_allclose(pop, m0.predict(re_form="~0").to_numpy(), atol=1e-7)
    new = table.head(50)
    np.testing.assert_allclose(m1.predict(new).to_numpy(), m0.predict(new).to_numpy(), atol=1e-7)
    lazy_new = m1.predict(dd.from_pandas(new, npartitions=2)).compute().to_numpy()
    np.testing.assert_allclose(lazy_new, m0.predict(new).to_numpy(), atol=1e-7)


def test_model_eer_without_collecting(table, ddf):
    m0, m1 = _fit_pair(CM, table, ddf)
    # a Dask fit's model EER is the latent one (no rows, hence no observed thresholds, on the client)
    assert abs(sm.model_eer(m1) - sm.model_eer(m0, thresholds="latent")) < 1e-9
    assert abs(sm.model_eer(m1, conditional=False) - sm.model_eer(m0, conditional=False, thresholds="latent")) < 1e-9
    b0 = sm.model_eer(m0, by="sex", data=table, thresholds="latent")
    b1 = sm.model_eer(m1, by="sex", data=None)
    assert list(b1.index) == list(b0.index)
    np.testing.assert_allclose(b1["eer_model"], b0["eer_model"], atol=1e-9)
    assert (b1["eer_empirical"].to_numpy() == b0["eer_empirical"].to_numpy()).all()
    assert (b1[["n_neg", "n_pos"]].to_numpy() == b0[["n_neg", "n_pos"]].to_numpy()).all()


def test_model_eer_dispersion_and_weights(table, ddf):
    m0, m1 = _fit_pair("score ~ label + (1|speaker) + (1|attack)", table, ddf,
                       dispersion="~ label", weights="w")
    assert abs(sm.model_eer(m1) - sm.model_eer(m0, thresholds="latent")) < 1e-9


@pytest.mark.parametrize("method", sm.metrics.EER_METHODS)
def test_eer_exact(table, ddf, method):
    assert sm.eer(ddf.score, ddf.label, method=method) == sm.eer(table.score, table.label, method=method)
    # ties: scores on a coarse grid
    t = table.assign(score=table.score.round(1))
    d = dd.from_pandas(t, npartitions=6)
    assert sm.eer(d.score, d.y, method=method) == sm.eer(t.score, t.y, method=method)


def test_min_dcf_exact(table, ddf):
    for kw in (dict(), dict(p_target=0.01, c_miss=10, normalize=True)):
        a = sm.min_dcf(ddf.score, ddf.label, **kw)
        b = sm.min_dcf(table.score, table.label, **kw)
        assert a == b


def _tied_table(seed: int, n: int, grid: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(int)
    y[:2] = [0, 1]
    s = rng.normal(0.0, 1.0, n) + 1.2 * y
    return pd.DataFrame({"score": np.round(s / grid) * grid if grid else s, "y": y})


@pytest.mark.parametrize("seed,n,grid,nparts", [
    (1, 400, 0.5, 11),   # few distinct values: many empty ranges, every range one value
    (2, 300, 0.1, 9),    # ties spread over partitions and ranges
    (3, 250, 0.0, 12),   # distinct scores, ranges of a handful
    (4, 60, 1.0, 12),    # more partitions than distinct values
])
def test_range_partitioned_metrics_equal_in_memory(seed, n, grid, nparts):
    """Per-range candidates (hull vertices, DCF minima, crossings) combined on the client
    give the in-memory EER of every definition, its threshold and minDCF exactly (==)."""
    t = _tied_table(seed, n, grid)
    d = dd.from_pandas(t, npartitions=nparts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.metrics.ScoreDirectionWarning)
        for method in sm.metrics.EER_METHODS:
            assert sm.eer(d.score, d.y, method=method) == sm.eer(t.score, t.y, method=method), method
            assert (sm.eer_threshold(d.score, d.y, method=method)
                    == sm.eer_threshold(t.score, t.y, method=method)), method
        assert (sm.eer(d.score, d.y, higher_is_positive=False)
                == sm.eer(t.score, t.y, higher_is_positive=False))
        for kw in (dict(), dict(p_target=0.3, c_miss=2, normalize=True), dict(higher_is_positive=False)):
            assert sm.min_dcf(d.score, d.y, **kw) == sm.min_dcf(t.score, t.y, **kw)


def test_ranges_hold_each_value_once():
    """Ranges are contiguous and disjoint: every copy of a score value is in one range; the
    client holds per-range totals only (a map returns one small result per range)."""
    from scoremix.distributed.ranges import ranged_counts

    t = _tied_table(7, 500, 0.25)
    d = dd.from_pandas(t, npartitions=8)
    rc = ranged_counts(d.score, d.y, n_ranges=5)
    tables = rc.map(lambda c, info: c)
    assert 1 < rc.n_ranges <= 5 and len(tables) == rc.n_ranges
    allv = np.concatenate([c.scores for c in tables])
    assert np.all(np.diff(allv) > 0)                       # ascending, no value in two ranges
    u, counts = np.unique(t.score, return_counts=True)
    np.testing.assert_array_equal(allv, u)
    np.testing.assert_array_equal(np.concatenate([c.n_pos + c.n_neg for c in tables]), counts)
    pos = np.concatenate([c.n_pos for c in tables])
    np.testing.assert_array_equal(pos, t.groupby("score").y.sum().to_numpy())
    before = [info.pos_before for info in rc.infos]
    np.testing.assert_array_equal(before, np.concatenate(([0], np.cumsum([c.n_pos.sum() for c in tables])[:-1])))
    assert (rc.n_pos, rc.n_neg, rc.n_distinct) == (int(t.y.sum()), int((1 - t.y).sum()), u.size)


def test_counts_functions_match_expanded():
    s = np.array([-1.0, 0.5, 2.0, 3.0])
    npos = np.array([0, 2, 1, 3])
    nneg = np.array([4, 1, 1, 0])
    scores = np.repeat(np.concatenate([s, s]), np.concatenate([npos, nneg]))
    labels = np.repeat([1] * 4 + [0] * 4, np.concatenate([npos, nneg]))
    assert sm.metrics.eer_from_counts(s, npos, nneg) == sm.eer(scores, labels)
    assert sm.metrics.min_dcf_from_counts(s, npos, nneg, p_target=0.3) == sm.min_dcf(scores, labels, p_target=0.3)


def test_metric_errors(table):
    t = table.copy()
    t.loc[7, "score"] = np.nan
    d = dd.from_pandas(t, npartitions=3)
    with pytest.raises(NonFiniteScoreError, match="partition 0"):
        sm.eer(d.score, d.label)
    one = dd.from_pandas(table[table.y == 1], npartitions=2)
    with pytest.raises(SingleClassError, match="positive"):
        sm.min_dcf(one.score, one.y)
    with pytest.raises(DaskInputError, match="partitions"):
        sm.eer(dd.from_pandas(table, npartitions=2).score, dd.from_pandas(table, npartitions=3).y)


@pytest.mark.slow
def test_bayes_lmer_dask_same_posterior(table):
    """Reproducible sums make the statistics bit-identical however the rows are split, so
    NUTS with the same seed draws the same chains."""
    t = table.head(3000)
    f = "score ~ label + (1|speaker)"
    kw = dict(draws=60, tune=60, chains=1, cores=1, random_seed=7, progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b0 = sm.bayes_lmer(f, t, **kw)
        b1 = sm.bayes_lmer(f, dd.from_pandas(t, npartitions=4), **kw)
    for v in b0.idata.posterior.data_vars:
        assert np.array_equal(b0.idata.posterior[v].values, b1.idata.posterior[v].values), v
    assert b1.spec.n == 3000 and b1.param_names == b0.param_names


def test_study_reads_parquet_glob(table, tmp_path):
    from scoremix.study import load_study
    from scoremix.study.data import StudyDataError, load_study_data

    dd.from_pandas(table[["score", "label", "speaker", "attack", "x"]], npartitions=3).to_parquet(
        str(tmp_path / "trials"), write_index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "g"\n[data]\nfiles = ["trials/*.parquet"]\n', encoding="utf-8")
    data = load_study_data(load_study(toml).data)
    assert len(data.table) == len(table)
    np.testing.assert_array_equal(np.sort(data.table["score"]), np.sort(table["score"]))
    toml.write_text('[study]\nname = "g"\n[data]\nfiles = ["nothing/*.parquet"]\n', encoding="utf-8")
    with pytest.raises(StudyDataError, match="no data file matches"):
        load_study_data(load_study(toml).data)


def test_study_dask_fits_models_over_partitions(table, tmp_path):
    """``study --dask ADDRESS`` with a parquet glob: each native model is fitted once over the
    partitions (lmer on the Dask frame, per system and with the model's filters), equal to the
    study's in-memory fit; models that need the rows stay ordinary tasks, with a reason."""
    distributed = pytest.importorskip("dask.distributed")
    from scoremix.study import run_study

    t = table[["score", "label", "speaker", "attack", "x", "sex"]].copy()
    t["system"] = np.where(np.arange(len(t)) % 2 == 0, "A", "B")
    dd.from_pandas(t, npartitions=4).to_parquet(str(tmp_path / "trials"), write_index=False)
    toml = tmp_path / "s.toml"
    toml.write_text(
        '[study]\nname = "g"\n[data]\nfiles = ["trials/*.parquet"]\nsystem = "system"\n'
        'negate = { system = ["B"] }\n'
        '[[models]]\nname = "crossed"\nformula = \'score ~ label * x + (1|speaker) + (1|attack)\'\n'
        '[[models]]\nname = "pooled"\nformula = "score ~ label + (1|speaker)"\nper_system = false\n'
        'filters = { sex = ["' + str(t.sex.iloc[0]) + '"] }\n'
        '[[models]]\nname = "warped"\nformula = "score ~ label + (1|speaker)"\ntransform = "monotone"\n'
        'per_system = false\n', encoding="utf-8")
    lines: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mem = run_study(toml, out_dir=tmp_path / "mem", progress=False, report=False)
        with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                      dashboard_address=None) as cluster:
            dsk = run_study(toml, out_dir=tmp_path / "dask", dask=cluster.scheduler_address, progress=False,
                            report=False, log=lines.append)
    assert not dsk.failed and not mem.failed
    fits = {(m["model"], m["system"]): m for m in dsk.models}
    assert {k for k, m in fits.items() if "dask_partitions" in m} == {("crossed", "A"), ("crossed", "B"),
                                                                      ("pooled", "all")}
    assert any("warped" in s and "transform" in s for s in lines)   # the reason it stayed a task
    for m0 in mem.models:
        m1 = fits[(m0["model"], m0["system"])]
        assert m1["nobs"] == m0["nobs"]
        f0, f1 = m0["fixef"].set_index("term"), m1["fixef"].set_index("term")
        assert list(f1.index) == list(f0.index)
        scale = np.maximum(np.abs(f0["estimate"].to_numpy()), 1.0)
        assert np.max(np.abs(f1["estimate"].to_numpy() - f0["estimate"].to_numpy()) / scale) < 1e-8
        l0, l1 = m0["json"]["loglik"], m1["json"]["loglik"]
        assert abs(l1 - l0) <= 1e-10 * abs(l0)


@pytest.mark.slow
def test_real_local_cluster(table):
    """Two worker processes: everything a task returns must travel between processes."""
    distributed = pytest.importorskip("dask.distributed")
    t = table.head(6000)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  memory_limit="1GB", dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        d = dd.from_pandas(t, npartitions=4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SingularFitWarning)
            m1 = sm.lmer(CM, d)
            m0 = sm.lmer(CM, t)
        _assert_same_fit(m0, m1)
        assert sm.eer(d.score, d.label) == sm.eer(t.score, t.label)
        assert sm.min_dcf(d.score, d.label) == sm.min_dcf(t.score, t.label)
        _assert_same_subgroup_dcf(sm.subgroup_dcf(t, ["sex"], progress=False),
                                  sm.subgroup_dcf(d, ["sex"], progress=False))
        assert abs(sm.model_eer(m1) - sm.model_eer(m0, thresholds="latent")) < 1e-9
        np.testing.assert_allclose(m1.fitted.compute().to_numpy(), m0.fitted.to_numpy(), atol=1e-7)


def test_refit_and_profile_from_crossproducts(table, ddf):
    m0, m1 = _fit_pair("score ~ label + (1|speaker) + (1|attack)", table, ddf)
    ml0, ml1 = m0.refit(REML=False), m1.refit(REML=False)
    assert abs(ml1.loglik - ml0.loglik) <= 1e-10 * abs(ml0.loglik)
    ci0 = sm.confint(m0, parm=["labelbonafide"], progress=False)
    ci1 = sm.confint(m1, parm=["labelbonafide"], progress=False)
    np.testing.assert_allclose(ci1.to_numpy(), ci0.to_numpy(), rtol=1e-6)


def test_offset_response_expression_and_contrasts(table, ddf):
    m0, m1 = _fit_pair("score ~ label + (1|speaker) + (1|attack)", table, ddf, offset="x")
    _assert_same_fit(m0, m1)
    np.testing.assert_allclose(m1.fitted.compute().to_numpy(), m0.fitted.to_numpy(), atol=1e-7)
    m0, m1 = _fit_pair("log(score + 20) ~ label + offset(x) + (1|speaker)", table, ddf)
    _assert_same_fit(m0, m1)
    np.testing.assert_allclose(m1.residuals.compute().to_numpy(), m0.residuals.to_numpy(), atol=1e-7)
    m0, m1 = _fit_pair("score ~ label + (1|speaker)", table, ddf, contrasts={"label": "contr.sum"})
    _assert_same_fit(m0, m1)
    with pytest.raises(DaskInputError, match=r"scale\(\)"):
        sm.lmer("score ~ label + scale(x) + (1|speaker)", ddf)


def _assert_same_subgroup_dcf(a, b):
    ta, tb = a.table.reset_index(drop=True), b.table.reset_index(drop=True)
    assert list(ta.columns) == list(tb.columns)
    for col in ta.columns:
        if col == "eer":   # golden section on the hull vertices instead of all candidates
            np.testing.assert_allclose(tb[col].to_numpy(float), ta[col].to_numpy(float), rtol=0, atol=1e-12)
        else:
            pd.testing.assert_series_equal(ta[col], tb[col], check_exact=True)
    assert a.min_dcf == b.min_dcf and a.threshold == b.threshold and a.fairness_index == b.fairness_index
    assert abs(a.overall["eer"] - b.overall["eer"]) <= 1e-12


@pytest.mark.parametrize("grid,nparts", [(0.0, 5), (0.5, 7)])
def test_subgroup_dcf_dask_point_without_collecting(table, grid, nparts, monkeypatch):
    """Point measures from per-partition counts equal the in-memory engine's (exact except
    the EER's golden section, 1e-12); the rows are never collected."""
    import scoremix.distributed.inputs as inputs

    t = table.assign(score=(table.score / grid).round() * grid if grid else table.score,
                     band=np.where(pd.factorize(table.speaker, sort=True)[0] % 4 == 0, "hi", "lo"))
    # a cell with one class only and an empty cell of the level product
    t.loc[(t.sex == t.sex.iloc[0]) & (t.band == "hi"), "y"] = 0
    t["band"] = pd.Categorical(t["band"], categories=["hi", "lo", "zz"])
    d = dd.from_pandas(t, npartitions=nparts)
    monkeypatch.setattr(inputs, "collect_columns", lambda *a, **k: pytest.fail("rows collected"))
    for kw in (dict(), dict(p_target=0.01, c_miss=10, normalize=True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            a = sm.subgroup_dcf(t, ["sex", "band"], label="y", progress=False, **kw)
            b = sm.subgroup_dcf(d, ["sex", "band"], label="y", progress=False, **kw)
        _assert_same_subgroup_dcf(a, b)
    assert b.table["note"].str.len().gt(0).any()   # the one-class / empty cells are flagged


def test_subgroup_dcf_dask_errors(table):
    from scoremix.fairness.subgroups import SubgroupError

    t = table.copy()
    cats = list(t["sex"].cat.categories)
    t.loc[3, "sex"] = cats[1] if t.loc[3, "sex"] == cats[0] else cats[0]   # speaker of row 3 in two subgroups
    with pytest.raises(SubgroupError, match="inconsistent attributes"):
        sm.subgroup_dcf(dd.from_pandas(t, npartitions=3), ["sex"], progress=False)
    t = table.copy()
    t.loc[50, "score"] = np.inf
    with pytest.raises(SubgroupError, match="non-finite value in partition 0"):
        sm.subgroup_dcf(dd.from_pandas(t, npartitions=3), ["sex"], progress=False)
    with pytest.raises(SubgroupError, match="nosuch"):
        sm.subgroup_dcf(dd.from_pandas(table, npartitions=3), ["nosuch"], progress=False)


def test_subgroup_dcf_dask_input(table, ddf):
    a = sm.subgroup_dcf(table, ["sex"], progress=False)
    b = sm.subgroup_dcf(ddf, ["sex"], progress=False)
    pd.testing.assert_frame_equal(a.table.reset_index(drop=True), b.table.reset_index(drop=True))
    assert a.min_dcf == b.min_dcf and a.fairness_index == b.fairness_index
