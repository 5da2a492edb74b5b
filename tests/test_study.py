"""Tests of the study runner: config validation, data loading, outputs, parallel/Dask
determinism, the lme4 re-fit script and recovery of known simulation parameters."""

from __future__ import annotations

import json
import subprocess
import tomllib
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.study import StudyConfigError, load_study, parse_study, run_study
from scoremix.study.config import apply_overrides, expand_vars
from scoremix.study.data import StudyDataError, load_study_data
from scoremix.study.parallel import Task, dask_available, run_tasks, task_seed

SIM_TOML = """
[study]
name = "simtest"
seed = 3

[data]
speaker = "speaker"
subgroups = ["subgroup"]

[data.simulate]
kind = "cm"
n_trials = 2000
params = { n_speakers = 150, sd_attack = 1.0 }
subgroup_shift = { india_f = [0.0, -1.0] }

[[models]]
name = "crossed"
formula = 'score ~ y + x + (1 | speaker) + (0 + dummy(label, "spoof") | attack)'

[analyses.metrics]
by = ["sex", ["sex", "nationality"]]

[analyses.model_eer]
by = ["sex"]
n_boot = 50   # parametric-bootstrap refits of the model interval (and empirical replicates)

[analyses.fairness]
groups = ["sex"]
n_boot = 20
models = ["crossed"]

[analyses.breakdown]
by = ["sex"]
"""


def _raw(text: str = SIM_TOML) -> dict:
    return tomllib.loads(text)


@pytest.fixture(scope="module")
def sim_study(tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("study") / "out"
    cfg = parse_study(_raw())
    res = run_study(cfg, out_dir=out, progress=False)
    return out, res


# ------------------------------------------------------------------------------- config
@pytest.mark.parametrize("patch, key", [
    ({"models[0].backend": "lme5"}, "models[0].backend"),
    ({"models[0].formula": "score + y"}, "models[0].formula"),
    ({"models[0].REML": "yes"}, "models[0].REML"),
    ({"models[0].colour": 1}, "models[0].colour"),
    ({"analyses.fairness.n_boot": -1}, "analyses.fairness.n_boot"),
    ({"analyses.fairness.ci": 1.5}, "analyses.fairness.ci"),
    ({"analyses.fairness.boot_chunk": -5}, "analyses.fairness.boot_chunk"),
    ({"analyses.fairness.models": ["nope"]}, "analyses.fairness.models[0]"),
    ({"analyses.magic": {}}, "analyses.magic"),
    ({"analyses.metrics.eer_method": "best"}, "analyses.metrics.eer_method"),
    ({"analyses.compare.systems": ["a", "b"]}, "analyses.compare.systems"),  # no system column
    ({"data.simulate.kind": "asv"}, "data.simulate.kind"),
    ({"data.files": ["x.csv"]}, "data.simulate"),  # files and simulate together
    ({"study.name": "has space"}, "study.name"),
    ({"models[0].dispersion": "label"}, "models[0].dispersion"),
    ({"data.filters": {"system": []}}, "data.filters.system"),
    ({"analyses.fairness.filters": {"sex": []}}, "analyses.fairness.filters.sex"),
    ({"analyses.model_eer.model_interval": "bayes"}, "analyses.model_eer.model_interval"),
    ({"analyses.model_eer.n_refits": -1}, "analyses.model_eer.n_refits"),
])
def test_config_errors_name_the_key(patch, key):
    raw = apply_overrides(_raw(), patch)
    with pytest.raises(StudyConfigError) as exc:
        parse_study(raw)
    assert exc.value.key == key
    assert str(exc.value).startswith(key + ":")


def test_duplicate_model_and_missing_data():
    raw = _raw()
    raw["models"].append(dict(raw["models"][0]))
    with pytest.raises(StudyConfigError, match=r"models\[1\]\.name: duplicate"):
        parse_study(raw)
    raw = _raw()
    del raw["data"]
    with pytest.raises(StudyConfigError, match="^data: is required"):
        parse_study(raw)


def test_overrides_env_vars_and_paths(tmp_path, monkeypatch):
    assert expand_vars("${A}/x", {"A": "/root"}) == "/root/x"
    assert expand_vars("${A:-../d}/x", {}) == "../d/x"
    with pytest.raises(KeyError):
        expand_vars("${A}/x", {})
    study = tmp_path / "sub" / "s.toml"
    study.parent.mkdir()
    study.write_text('[study]\nname = "p"\n[data]\nfile = "${SCOREMIX_TEST_DIR:-data}/t.csv"\n', encoding="utf-8")
    monkeypatch.delenv("SCOREMIX_TEST_DIR", raising=False)
    assert load_study(study).data.files == [(study.parent / "data" / "t.csv").resolve()]
    monkeypatch.setenv("SCOREMIX_TEST_DIR", str(tmp_path / "elsewhere"))
    assert load_study(study).data.files == [tmp_path / "elsewhere" / "t.csv"]
    cfg = load_study(study, ["study.seed=11", "data.subgroups=['g']", "data.score=s2"])
    assert (cfg.study.seed, cfg.data.subgroups, cfg.data.score) == (11, ["g"], "s2")
    study.write_text('[study]\nname = "p"\n[data]\nfile = "${SCOREMIX_UNSET_VAR}/t.csv"\n', encoding="utf-8")
    with pytest.raises(StudyConfigError, match="data.file: environment variable SCOREMIX_UNSET_VAR"):
        load_study(study)
    with pytest.raises(StudyConfigError, match="no such study file"):
        load_study(tmp_path / "absent.toml")


# ------------------------------------------------------------------------------- data
def _file_study(tmp_path: Path, extra: str = "") -> Path:
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({
        "utt": [f"u{i % 200}" for i in range(n)],
        "spk": [f"s{i % 20}" for i in range(n)],
        "sys": np.repeat(["A", "B"], n // 2),
        "key": np.tile(np.repeat(["bonafide", "spoof"], 100), 2),
        "prob": rng.uniform(0.01, 0.99, n),
    })
    df.to_csv(tmp_path / "t.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "f"\n[data]\nfile = "t.csv"\nscore = "prob"\nlabel = "key"\nsystem = "sys"\n'
                    'speaker = "spk"\n' + extra, encoding="utf-8")
    return toml


def test_data_transforms_by_hand(tmp_path):
    toml = _file_study(tmp_path, 'transform = "logit"\nnegate = { sys = ["B"] }\n'
                                 'indicators = { first = { utt = ["u0", "u1"] } }\n')
    raw = pd.read_csv(tmp_path / "t.csv")
    data = load_study_data(load_study(toml).data)
    p = raw["prob"].to_numpy()
    want = np.log(p / (1 - p)) * np.where(raw["sys"] == "B", -1, 1)
    np.testing.assert_allclose(data.table["score"], want, rtol=1e-12)
    assert data.systems == ["A", "B"]
    assert (data.table["y"] == (raw["key"] == "bonafide")).all()
    assert data.table["first"].sum() == raw["utt"].isin(["u0", "u1"]).sum()
    # standardisation per system: mean 0, SD 1 in each
    data = load_study_data(load_study(_file_study(tmp_path, "standardize = true\n")).data)
    g = data.table.groupby("sys")["score"]
    np.testing.assert_allclose(g.mean(), 0, atol=1e-12)
    np.testing.assert_allclose(g.std(), 1, atol=1e-12)
    # the same rows in both systems after sampling (paired analyses stay aligned)
    data = load_study_data(load_study(_file_study(tmp_path, "sample_per_system = 50\n")).data, seed=1)
    a, b = (data.table[data.table["sys"] == s]["utt"].to_numpy() for s in "AB")
    assert len(a) == 50 and (a == b).all()


@pytest.mark.parametrize("extra, needle", [
    ('filters = { sys = ["C"] }\n', "matches no row"),
    ('filters = { nope = ["C"] }\n', "'nope'"),
    ('subgroups = ["gender"]\n', "'gender'"),
    ('rename = { missing = "x" }\n', "missing"),
])
def test_data_errors_name_file_and_column(tmp_path, extra, needle):
    with pytest.raises(StudyDataError) as exc:
        load_study_data(load_study(_file_study(tmp_path, extra)).data)
    assert "t.csv" in str(exc.value) and needle in str(exc.value)


def test_bad_score_row_named(tmp_path):
    toml = _file_study(tmp_path)
    df = pd.read_csv(tmp_path / "t.csv")
    df.loc[7, "prob"] = np.nan
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(StudyDataError, match=r"t\.csv.*7"):
        load_study_data(load_study(toml).data)


# ------------------------------------------------------------------------------- runner
def test_outputs_and_manifest(sim_study):
    out, res = sim_study
    manifest = json.loads((out / "manifest.json").read_text())
    for name in ("study.json", "data_summary.csv", "metrics.csv", "fixed_effects.csv", "variance_components.csv",
                 "random_effects.csv", "model_eer.csv", "fairness.csv", "fairness_summary.json",
                 "fairness_model.csv", "breakdown.csv", "recovered_vs_true.csv", "trials.csv", "truth.json",
                 "models/crossed__all.json", "refit_lme4.R", "data_for_r.csv.gz", "report.html"):
        assert name in manifest, name
        assert (out / manifest[name]["path"]).is_file()
    model = json.loads((out / "models" / "crossed__all.json").read_text())
    assert model["schema"] == "scoremix.lmer/1" and model["nobs"] == 2000


def test_counts_and_min_dcf_recomputed(sim_study):
    out, _ = sim_study
    trials = pd.read_csv(out / "trials.csv")
    s, y = trials["score"].to_numpy(), (trials["label"] == "bonafide").to_numpy().astype(int)
    metrics = pd.read_csv(out / "metrics.csv")
    overall = metrics[metrics["by"] == "overall"].iloc[0]
    assert (overall["n_pos"], overall["n_neg"]) == (y.sum(), (1 - y).sum())
    # minDCF by brute force over every threshold (accept = score >= t), plus reject-all
    cost = [0.05 * np.mean(s[y == 1] < t) + 0.95 * np.mean(s[y == 0] >= t) for t in np.unique(s)]
    assert overall["min_dcf"] == pytest.approx(min(min(cost), 0.05), abs=1e-12)
    # per-cell counts equal a pandas cross-tabulation
    cells = metrics[metrics["by"] == "sex×nationality"]
    want = trials.groupby(["sex", "nationality"]).size()
    got = cells.set_index(["sex", "nationality"])["n_trials"]
    assert sorted(got.to_dict().items()) == sorted(want[want > 0].to_dict().items())
    summary = pd.read_csv(out / "data_summary.csv")
    spk = summary[summary["attribute"] == "subgroup"].set_index("value")["n_speakers"]
    assert spk.to_dict() == trials.groupby("subgroup")["speaker"].nunique().to_dict()
    fair = pd.read_csv(out / "fairness.csv").set_index("sex")
    for sex, g in trials.groupby("sex"):
        assert fair.loc[sex, "n_pos"] == (g["label"] == "bonafide").sum()
        assert fair.loc[sex, "n_speakers"] == g["speaker"].nunique()
        assert fair.loc[sex, "ratio_overall_lo"] <= fair.loc[sex, "ratio_overall"] <= fair.loc[sex, "ratio_overall_hi"]


def test_recovered_parameters_near_truth(sim_study):
    out, _ = sim_study
    rec = pd.read_csv(out / "recovered_vs_true.csv")
    truth = json.loads((out / "truth.json").read_text())
    row = rec[rec["parameter"].str.startswith("beta_x")].iloc[0]
    # the slope of x is untouched by the subgroup shift: |estimate - truth| < 4 SE
    assert row["true"] == truth["beta_x"] == 0.5
    assert abs(row["estimate"] - 0.5) < 4 * row["se"]
    sig = rec[rec["parameter"].str.startswith("sigma")].iloc[0]
    # residual SD: its sampling SD is about sigma / sqrt(2 n) = 0.016 at n = 2000
    assert abs(sig["estimate"] - 1.0) < 0.08


def test_refit_script_reproduced_by_lme4(sim_study, rscript, tmp_path):
    out, _ = sim_study
    work = tmp_path / "r"
    work.mkdir()
    for name in ("refit_lme4.R", "data_for_r.csv.gz"):
        (work / name).write_bytes((out / name).read_bytes())
    proc = subprocess.run([str(rscript), str(work / "refit_lme4.R"), str(work)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((work / "lme4_refit.json").read_text())["crossed__all"]
    fe = pd.read_csv(out / "fixed_effects.csv").set_index("term")
    for term, val in r["fixef"].items():
        assert fe.loc[term, "estimate"] == pytest.approx(val, rel=1e-4, abs=1e-6)
    vc = pd.read_csv(out / "variance_components.csv")
    for row in r["varcorr"]:
        mine = vc[(vc["grp"] == row["grp"])]["sdcor"].iloc[0]
        assert mine == pytest.approx(row["sdcor"], rel=2e-3)


def test_task_seed_and_run_tasks_order():
    assert task_seed(1, "a") == task_seed(1, "a") != task_seed(1, "b")
    assert task_seed(1, "a") != task_seed(2, "a")
    tasks = [Task(str(i), pow, (i, 2)) for i in range(6)]
    assert run_tasks(tasks, jobs=1, progress=False) == [i * i for i in range(6)]
    assert run_tasks([], jobs=2, progress=False) == []


def _csvs(out: Path) -> dict[str, pd.DataFrame]:
    return {p.name: pd.read_csv(p) for p in sorted(out.glob("*.csv"))}


def _small_cfg():
    return parse_study(apply_overrides(_raw(), {"data.simulate.n_trials": 1500, "analyses.fairness.n_boot": 15}))


def test_jobs_and_dask_give_identical_results(tmp_path):
    """The same study serially, with 2 joblib workers and on a 2-worker Dask LocalCluster: every
    CSV identical (the Dask part skips with a message when dask.distributed is absent)."""
    a = run_study(_small_cfg(), out_dir=tmp_path / "serial", progress=False, report=False)
    b = run_study(_small_cfg(), out_dir=tmp_path / "jobs2", jobs=2, progress=False, report=False)
    ca, cb = _csvs(a.out_dir), _csvs(b.out_dir)
    assert ca.keys() == cb.keys() and "fairness.csv" in ca
    for name in ca:
        pd.testing.assert_frame_equal(ca[name], cb[name], check_exact=True, obj=name)
    if not dask_available():
        pytest.skip('dask.distributed is not installed (pip install "dask[distributed]"): joblib part passed')
    c = run_study(_small_cfg(), out_dir=tmp_path / "dask", jobs=2, dask="local", progress=False, report=False)
    cc = _csvs(c.out_dir)
    assert ca.keys() == cc.keys()
    for name in ca:
        pd.testing.assert_frame_equal(ca[name], cc[name], check_exact=True, obj=name)


def test_failed_fit_does_not_stop_the_study(tmp_path):
    raw = apply_overrides(_raw(), {"data.simulate.n_trials": 800, "analyses.fairness.n_boot": 0})
    raw["models"].append({"name": "broken", "formula": "score ~ y + (1 | trial_id)"})  # one level per row
    res = run_study(parse_study(raw), out_dir=tmp_path / "o", progress=False, report=True)
    assert [f["model"] for f in res.failed] == ["broken"] and "trial_id" in res.failed[0]["error"]
    assert [m["model"] for m in res.models] == ["crossed"]
    assert "Steps that failed" in (tmp_path / "o" / "report.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_bayes_model_netcdf_and_side_by_side(tmp_path):
    raw = apply_overrides(_raw(), {"data.simulate.n_trials": 1000, "data.simulate.params.n_speakers": 60})
    raw["analyses"] = {"model_eer": {"by": ["sex"]}, "fairness": {"groups": ["sex"], "n_boot": 0, "models": ["b"]}}
    raw["models"] = [{"name": "b", "formula": "score ~ y + x + (1 | speaker)", "backend": "bayes", "draws": 100,
                      "tune": 100, "chains": 2}]
    res = run_study(parse_study(raw), out_dir=tmp_path / "o", progress=False)
    import arviz as az

    idata = az.from_netcdf(tmp_path / "o" / "models" / "b__all.nc")
    assert idata.posterior.sizes["draw"] == 100 and idata.posterior.sizes["chain"] == 2
    side = pd.read_csv(tmp_path / "o" / "bayes_vs_freq.csv").set_index("parameter")
    # posterior mean of the slope of x agrees with the REML estimate within 3 posterior SDs
    assert abs(side.loc["x", "mean"] - side.loc["x", "estimate"]) < 3 * side.loc["x", "sd"]
    html = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    assert "Bayesian vs native" in html
    assert res.models[0]["backend"] == "bayes"
    post = pd.read_csv(tmp_path / "o" / "fairness_model.csv")
    assert set(post["source"]) == {"posterior"} and set(post["subgroup"]) == {"f", "m"}
    assert (post["ratio_overall_lo"] <= post["ratio_overall_hi"]).all()
    eer = pd.read_csv(tmp_path / "o" / "model_eer.csv")
    assert {"overall", "sex"} <= set(eer["by"]) and (eer["eer_model"].between(0, 0.5)).all()


@pytest.mark.slow
def test_bayes_model_eer_is_the_exact_mixture_eer(tmp_path):
    """Regression: the study's Bayesian model EER used one moment-matched Gaussian per class,
    which is far off when attack effects spread the spoofs (here ~4 % against a true 0.08 %).

    Truth: bona fide ~ N(6, 1); spoofs of 3 attacks with means -20, -10, 0 (sd 1), equal
    shares.  EER solves Φ(t - 6) = (1/3) Σ_a (1 - Φ(t - m_a)) (root found with brentq).
    """
    from scipy.optimize import brentq
    from scipy.stats import norm

    rng = np.random.default_rng(5)
    n_pos, n_per_attack = 1500, 1500
    means = {"A1": -20.0, "A2": -10.0, "A3": 0.0}
    attack = np.r_[np.repeat("bonafide", n_pos), np.repeat(list(means), n_per_attack)]
    mu = np.r_[np.full(n_pos, 6.0), np.repeat(list(means.values()), n_per_attack)]
    df = pd.DataFrame({"spk": rng.integers(0, 50, mu.size).astype(str), "attack": attack,
                       "label": np.where(attack == "bonafide", "bonafide", "spoof"),
                       "score": mu + rng.normal(0, 1, mu.size)})
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)

    def gap(t):
        return norm.cdf(t - 6) - np.mean([norm.sf(t - m) for m in means.values()])

    true_eer = norm.cdf(brentq(gap, -5, 10) - 6)
    assert true_eer < 0.002
    raw = {"study": {"name": "mix", "seed": 1},
           "data": {"file": str(path), "score": "score", "label": "label", "positive": "bonafide",
                    "speaker": "spk"},
           "models": [{"name": "b", "formula": 'score ~ y + (0 + dummy(label, "spoof") | attack)',
                       "backend": "bayes", "draws": 100, "tune": 200, "chains": 1, "compare_with": "none"}],
           "analyses": {"model_eer": {}}}
    run_study(parse_study(raw), out_dir=tmp_path / "o", progress=False, report=False)
    eer = pd.read_csv(tmp_path / "o" / "model_eer.csv").set_index("by")
    assert abs(eer.loc["overall", "eer_model"] - true_eer) < 0.003
    assert abs(eer.loc["overall", "eer_empirical"] - true_eer) < 0.003


# ------------------------------------------------------------------------------- bootstrap chunks
def test_boot_chunks_and_chunk_seeds():
    from scoremix.study.parallel import boot_chunks, chunk_seeds

    assert boot_chunks(23, 10) == [10, 10, 3] and boot_chunks(20, 10) == [10, 10]
    assert boot_chunks(200, 250) == [200] and boot_chunks(500, 0) == [500] and boot_chunks(0, 10) == []
    assert chunk_seeds(3, "fairness/A", 1) == [task_seed(3, "fairness/A")]  # unsplit = the task's own seed
    s = chunk_seeds(3, "fairness/A", 3)
    want = [int(c.generate_state(1)[0]) for c in np.random.SeedSequence([3, zlib.crc32(b"fairness/A")]).spawn(3)]
    assert s == want and len(set(s)) == 3
    assert chunk_seeds(3, "fairness/B", 3) != s and chunk_seeds(4, "fairness/A", 3) != s
    with pytest.raises(ValueError):
        boot_chunks(10, -1)


def _chunk_study(tmp_path: Path) -> object:
    """Two systems scoring the same 480 trials of 24 speakers in two subgroups; fairness and
    compare bootstraps of 23 replicates in chunks of 10 (3 chunks: 10, 10, 3)."""
    rng = np.random.default_rng(7)
    n = 480
    spk = np.arange(n) % 24
    y = (np.arange(n) // 24) % 2
    a = rng.normal(0, 1, n) + 2.0 * y + rng.normal(0, 0.5, 24)[spk]
    df = pd.DataFrame({"utt": np.tile(np.arange(n), 2), "spk": np.tile(spk, 2), "grp": np.tile(spk % 2, 2),
                       "y": np.tile(y, 2), "sys": np.repeat(["A", "B"], n),
                       "score": np.r_[a, a + rng.normal(0, 0.6, n)]})
    df.to_csv(tmp_path / "t.csv", index=False)
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "chunks"\nseed = 5\n[data]\nfile = "t.csv"\nlabel = "y"\nsystem = "sys"\n'
                    'speaker = "spk"\nsubgroups = ["grp"]\n[analyses.fairness]\nn_boot = 23\nboot_chunk = 10\n'
                    'interval = "percentile"\n'
                    '[analyses.compare]\nsystems = ["A", "B"]\ntrial_id = "utt"\nn_boot = 23\nboot_chunk = 10\n'
                    'measures = ["ratio_overall"]\n', encoding="utf-8")
    return load_study(toml)


def test_chunked_bootstrap_identical_serial_joblib_dask(tmp_path):
    """Bootstrap chunks as independent tasks: serial, 2 joblib workers and a Dask LocalCluster
    write identical CSVs; the intervals are the percentiles of all 23 replicates of the 3 chunk
    seeds (recomputed here with subgroup_dcf / compare_subgroup_dcf per seed and numpy)."""
    from scoremix.fairness import compare_subgroup_dcf, subgroup_dcf
    from scoremix.study.parallel import chunk_seeds

    cfg = _chunk_study(tmp_path)
    a = run_study(cfg, out_dir=tmp_path / "serial", progress=False, report=False)
    b = run_study(cfg, out_dir=tmp_path / "jobs2", jobs=2, progress=False, report=False)
    ca, cb = _csvs(a.out_dir), _csvs(b.out_dir)
    assert {"fairness.csv", "compare.csv"} <= ca.keys() == cb.keys()
    for name in ca:
        pd.testing.assert_frame_equal(ca[name], cb[name], check_exact=True, obj=name)
    summ = json.loads((a.out_dir / "fairness_summary.json").read_text())
    assert summ["A"]["n_boot"] == 23 and summ["A"]["boot_chunks"] == 3
    csum = json.loads((a.out_dir / "compare_summary.json").read_text())
    assert csum["n_boot"] == 23 and csum["boot_chunks"] == 3

    # independent recomputation from the chunk seeds
    raw = pd.read_csv(tmp_path / "t.csv")
    q = (0.025, 0.975)
    for system in ("A", "B"):
        seeds = chunk_seeds(5, f"fairness/{system}", 3)
        d = raw[raw["sys"] == system]
        reps = [subgroup_dcf(d, ["grp"], label="y", speaker="spk", n_boot=m, random_state=s, progress=False)
                .replicates for s, m in zip(seeds, [10, 10, 3])]
        r = np.concatenate([x["ratio_overall"] for x in reps], axis=1)
        assert r.shape == (2, 23)
        r = np.where(np.isinf(r), np.nan, r)
        got = ca["fairness.csv"][ca["fairness.csv"]["system"] == system]
        np.testing.assert_allclose(got["ratio_overall_lo"], np.nanquantile(r, q[0], axis=1), rtol=1e-12)
        np.testing.assert_allclose(got["ratio_overall_hi"], np.nanquantile(r, q[1], axis=1), rtol=1e-12)
        fi = np.concatenate([x["fairness_index"] for x in reps])
        assert (summ[system]["fairness_index_lo"], summ[system]["fairness_index_hi"]) == pytest.approx(
            tuple(np.quantile(fi, q)), rel=1e-12)
        # 20 of the 23 replicates would give another interval: the last chunk is included
        assert summ[system]["fairness_index_lo"] != pytest.approx(np.quantile(fi[:20], q[0]), rel=1e-12) or \
            summ[system]["fairness_index_hi"] != pytest.approx(np.quantile(fi[:20], q[1]), rel=1e-12)
    seeds = chunk_seeds(5, "compare", 3)
    direct = [compare_subgroup_dcf(raw, ["grp"], system="sys", systems=["A", "B"], trial_id="utt", label="y",
                                   speaker="spk", measures=["ratio_overall"], n_boot=m, random_state=s,
                                   progress=False).replicates for s, m in zip(seeds, [10, 10, 3])]
    dd = np.concatenate([x["B"]["ratio_overall"] - x["A"]["ratio_overall"] for x in direct], axis=1)
    # paired differences: the expanded percentile interval (t levels for the 12 speakers of each subgroup)
    from scoremix.resampling.intervals import expanded_percentile_interval

    want_lo, want_hi = expanded_percentile_interval(dd, np.array([12.0, 12.0]), 0.95)
    np.testing.assert_allclose(ca["compare.csv"]["ratio_overall_diff_lo"], want_lo, rtol=1e-12)
    np.testing.assert_allclose(ca["compare.csv"]["ratio_overall_diff_hi"], want_hi, rtol=1e-12)

    if not dask_available():
        pytest.skip('dask.distributed is not installed (pip install "dask[distributed]"): joblib part passed')
    c = run_study(cfg, out_dir=tmp_path / "dask", jobs=2, dask="local", progress=False, report=False)
    cc = _csvs(c.out_dir)
    assert ca.keys() == cc.keys()
    for name in ca:
        pd.testing.assert_frame_equal(ca[name], cc[name], check_exact=True, obj=name)
    assert json.loads((c.out_dir / "fairness_summary.json").read_text()) == summ


# ------------------------------------------------------------------------ row subsets of analyses
def test_model_eer_filters_evaluate_the_subset(tmp_path):
    """``[analyses.model_eer].filters``: the model is fitted to all rows, the model EER is the
    exact EER of the class mixtures of per-trial Gaussians of the kept rows only.  Reference:
    ``lmer`` on all rows, ``trial_moments`` restricted to the kept rows by hand, ``mixture_eer``."""
    from scoremix.lme.api import lmer
    from scoremix.metrics import eer
    from scoremix.model_eer import mixture_eer, trial_moments

    keep = ["bonafide", "A01", "A02", "A03"]
    raw = apply_overrides(_raw(), {"data.simulate.n_trials": 1500})
    raw["analyses"] = {"model_eer": {"by": ["sex"], "filters": {"attack": keep}}}
    cfg = parse_study(raw)
    assert cfg.analyses.model_eer.filters == {"attack": keep}
    res = run_study(cfg, out_dir=tmp_path / "o", progress=False, report=False)
    got = pd.read_csv(tmp_path / "o" / "model_eer.csv").set_index(["by", "cell"])

    df = res.data.table
    fit = lmer(cfg.models[0].formula, df)
    mom = trial_moments(fit, label="y", data=df)
    rows = df["attack"].isin(keep)
    assert rows.sum() < len(df) and (~rows & (df["y"] == 0)).any()
    for (by, cell), sel in [(("overall", "all"), rows), *((("sex", s), rows & (df["sex"] == s)) for s in ("f", "m"))]:
        m = mom[sel.to_numpy()]
        neg, pos = m[m["y"] == 0], m[m["y"] == 1]
        # the model EER at attainable thresholds: rates of the hand-restricted mixtures at every
        # distinct score of the rows the model is evaluated for — a cell's thresholds are every
        # evaluated trial's score (docs/predictive.md), and the filter is a cell of the table of
        # all rows — then the ROCCH EER
        from scipy.special import ndtr

        from scoremix.predictive.attainable import hull_eer
        v = np.unique(df["score"].to_numpy(float))
        fnr = ndtr((v[None, :] - pos["mean"].to_numpy()[:, None]) / pos["sd"].to_numpy()[:, None]).mean(axis=0)
        fpr = ndtr((neg["mean"].to_numpy()[:, None] - v[None, :]) / neg["sd"].to_numpy()[:, None]).mean(axis=0)
        want = hull_eer(fpr, fnr)[0]
        assert got.loc[(by, cell), "eer_model"] == pytest.approx(want, rel=1e-9, abs=1e-12)
        # close to the smooth (latent) crossing of the same mixtures
        assert got.loc[(by, cell), "eer_model"] == pytest.approx(
            mixture_eer(neg["mean"], neg["sd"], pos["mean"], pos["sd"]), abs=2e-3)
        assert got.loc[(by, cell), "n_neg"] == len(neg) and got.loc[(by, cell), "n_pos"] == len(pos)
        assert got.loc[(by, cell), "eer_empirical"] == pytest.approx(
            eer(df.loc[sel, "score"].to_numpy(float), df.loc[sel, "y"].to_numpy()), abs=1e-12)
    # without filters every row counts: a different (larger, more attacks) negative set
    raw["analyses"]["model_eer"].pop("filters")
    run_study(parse_study(raw), out_dir=tmp_path / "p", progress=False, report=False)
    full = pd.read_csv(tmp_path / "p" / "model_eer.csv").set_index(["by", "cell"])
    assert full.loc[("overall", "all"), "n_neg"] == (df["y"] == 0).sum() > got.loc[("overall", "all"), "n_neg"]


def test_metrics_negatives_by_scores_all_positives_against_each_cell(tmp_path):
    """``negatives_by = ["attack"]``: an attack cell is every bona fide trial (of the same value of
    the other ``by`` columns) against that attack's spoofs; the bona fide-only cell disappears."""
    from scoremix.metrics import eer

    raw = apply_overrides(_raw(), {"data.simulate.n_trials": 1500})
    raw["models"] = []
    raw["analyses"] = {"metrics": {"by": ["attack", ["sex", "attack"], "sex"], "negatives_by": ["attack"]}}
    res = run_study(parse_study(raw), out_dir=tmp_path / "o", progress=False, report=False)
    m = pd.read_csv(tmp_path / "o" / "metrics.csv").set_index(["by", "cell"])
    df = res.data.table
    pos, neg = df[df["y"] == 1], df[df["y"] == 0]
    attacks = sorted(neg["attack"].unique())
    assert sorted(m.loc["attack"].index) == attacks  # no "bonafide" cell
    for a in attacks:
        sel = pd.concat([pos, neg[neg["attack"] == a]])
        r = m.loc[("attack", a)]
        assert (r["n_pos"], r["n_neg"]) == (len(pos), (neg["attack"] == a).sum())
        assert r["eer"] == pytest.approx(eer(sel["score"].to_numpy(float), sel["y"].to_numpy()), abs=1e-12)
    for s in ("f", "m"):
        a = attacks[0]
        sel = pd.concat([pos[pos["sex"] == s], neg[(neg["attack"] == a) & (neg["sex"] == s)]])
        r = m.loc[("sex×attack", f"{s}×{a}")]
        assert (r["n_pos"], r["n_neg"]) == ((pos["sex"] == s).sum(), len(sel) - (pos["sex"] == s).sum())
        assert r["eer"] == pytest.approx(eer(sel["score"].to_numpy(float), sel["y"].to_numpy()), abs=1e-12)
        # a by without a negatives_by column keeps its own trials
        assert m.loc[("sex", s), "n_trials"] == (df["sex"] == s).sum()
    with pytest.raises(StudyConfigError, match=r"analyses\.metrics\.negatives_by\[0\]"):
        parse_study(apply_overrides(raw, {"analyses.metrics.negatives_by": ["speaker"]}))
