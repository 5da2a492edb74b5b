"""Bayesian transformation fits of one LA system (71,237 trials): speed, mixing and the
posterior EER beside the empirical EER.

1. ``--one``: the one-transform model ``score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)``,
   dispersion ``~ label``, ``transform="monotone"`` — the ML fit (``lmer``) for ``h``, then
   ``bayes_lmer`` on the latent points with the collapsed sampler (2 chains × 1000 draws).
2. ``--stratified``: the location-scale transformation model with a transform per class × attack
   stratum (``LocScaleSpec(strata=("attack",))``, speaker location and log-SD per class, speaker ×
   attack location in the spoof class) — ``fit_locscale`` for the ML transforms, then
   ``bayes_locscale`` (2 chains × 1000 draws).
3. ``--sensitivity B``: what fixing the transforms hides: B parametric-bootstrap replicates of the
   stratified model (latent values from the ML fit, mapped back to scores by the fitted
   transforms), the ML transforms re-estimated on each, and the Bayesian fit repeated with each
   replicate's transforms fixed; the EER draws pooled over replicates (the transform's sampling
   error added, as in multiple imputation) against the fixed-transform interval.

Writes ``docs/data/bayes_la_transform.json``.  Times are wall seconds on the shared
machine with the load average printed beside them.

    nice -n 5 python3 benchmarks/bayes_la_transform.py --system rawgat_st_mul --one --stratified
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
OUT = HERE.parent / "docs" / "data" / "bayes_la_transform.json"
FORMULA = 'score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'


def load(system: str) -> pd.DataFrame:
    d = pd.read_csv(DATA)
    d = d[d["system"] == system].reset_index(drop=True)
    if system == "air_ocsoftmax":
        d["score"] = -d["score"]
    return d[["speaker", "attack", "label", "score", "speaker_gender"]]


def load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def record(key: str, value: dict) -> None:
    OUT.parent.mkdir(exist_ok=True)
    res = json.loads(OUT.read_text()) if OUT.exists() else {}
    res[key] = value
    OUT.write_text(json.dumps(res, indent=1, default=float))
    print(key, json.dumps(value, indent=1, default=float), flush=True)


def one_transform(d: pd.DataFrame, system: str, draws: int, chains: int) -> None:
    import scoremix as sm
    from scoremix.metrics import eer

    la0 = load_avg()
    t0 = time.perf_counter()
    ml = sm.lmer(FORMULA, d, dispersion="~ label", transform="monotone")
    t_ml = time.perf_counter() - t0
    t0 = time.perf_counter()
    c0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sm.bayes_lmer(FORMULA, d, dispersion="~ label", transform=ml, draws=draws, tune=draws, chains=chains,
                            cores=1, seed=1, progress=False)
    t_b = time.perf_counter() - t0
    cpu_b = time.process_time() - c0
    diag = res.diagnostics
    pe = sm.model_eer(res, progress=False, n_boot=0, level=0.95, max_draws=200)
    lo, hi = pe.interval_columns
    s = pe.summary.loc["all"]
    emp = 100 * eer(d["score"].to_numpy(), (d["label"] == "bonafide").to_numpy())
    record(f"one_transform:{system}", dict(
        rows=len(d), seconds_ml=t_ml, seconds_bayes_total=t_b, cpu_seconds_bayes=cpu_b, seconds_sampling=res.wall_time,
        draws=draws,
        chains=chains, min_ess_bulk=float(diag.table["ess_bulk"].min()), max_rhat=float(diag.table["r_hat"].max()),
        n_divergent=diag.n_divergent,
        eer_empirical=emp, eer_model=100 * float(s["eer"]) if "eer" in s.index else str(s.to_dict()), eer_lo=100 * float(s[lo]), eer_hi=100 * float(s[hi]),
        load_before=la0, load_after=load_avg(),
        table=diag.table.round(4).reset_index().to_dict(orient="records")))


def stratified(d: pd.DataFrame, system: str, draws: int, chains: int, sampler: str) -> None:
    from scoremix.bayes.locscale import bayes_locscale
    from scoremix.locscale import LocScaleSpec, fit_locscale

    la0 = load_avg()
    spec = LocScaleSpec(strata=("attack",), positive="bonafide", speaker_by_stratum=("negative",))
    t0 = time.perf_counter()
    fit = fit_locscale(d, spec)
    t_ml = time.perf_counter() - t0
    t0 = time.perf_counter()
    c0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_locscale(fit, draws=draws, tune=draws, chains=chains, cores=1, seed=1, sampler=sampler)
    t_b = time.perf_counter() - t0
    cpu_b = time.process_time() - c0
    tab = res.posterior_eer(by="speaker_gender", max_draws=200)
    import scoremix as sm

    est = sm.model_eer(fit, progress=False, n_boot=0)
    ml_eer = float(getattr(est, "value", getattr(est, "estimate", np.nan)))
    record(f"stratified:{system}:{sampler}", dict(
        rows=len(d), cells=int(res.cells.unit.size), units=res.cells.n_units, strata=res.cells.n_strata,
        seconds_ml=t_ml, seconds_bayes_total=t_b, cpu_seconds_bayes=cpu_b, seconds_sampling=res.wall_time,
        draws=draws, chains=chains, centred=res.centred, min_ess_bulk=res.min_ess, max_rhat=res.max_rhat, ml_model_eer=ml_eer,
        posterior_eer=tab.reset_index().to_dict(orient="records"), load_before=la0, load_after=load_avg(),
        summary=res.summary()[["mean", "sd", "ess_bulk", "r_hat"]].round(4).reset_index().to_dict(orient="records")))



def sampled(d: pd.DataFrame, system: str, draws: int, chains: int, order: int) -> None:
    """The stratified model with every stratum transform sampled (Bernstein deformation of the
    ML transform, ``bayes_locscale(..., transform="sampled")``)."""
    from scoremix.bayes.locscale import bayes_locscale
    from scoremix.locscale import LocScaleSpec, fit_locscale

    la0 = load_avg()
    spec = LocScaleSpec(strata=("attack",), positive="bonafide", speaker_by_stratum=("negative",))
    fit = fit_locscale(d, spec)
    t0 = time.perf_counter()
    c0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_locscale(fit, draws=draws, tune=draws, chains=chains, cores=1, seed=1, transform="sampled",
                             order=order)
    t_b = time.perf_counter() - t0
    cpu_b = time.process_time() - c0
    tab = res.posterior_eer(by="speaker_gender", max_draws=200)
    record(f"sampled:{system}:order{order}", dict(
        rows=len(d), cells=int(res.cells.unit.size), strata=res.cells.n_strata, order=order,
        seconds_bayes_total=t_b, cpu_seconds_bayes=cpu_b, seconds_sampling=res.wall_time, draws=draws, chains=chains,
        min_ess_bulk=res.min_ess, max_rhat=res.max_rhat,
        divergences=int(res.idata.sample_stats.diverging.sum()),
        posterior_eer=tab.reset_index().to_dict(orient="records"), load_before=la0, load_after=load_avg(),
        summary=res.summary()[["mean", "sd", "ess_bulk", "r_hat"]].round(4).reset_index().to_dict(orient="records")))

def sensitivity(d: pd.DataFrame, system: str, B: int, draws: int, sampler: str) -> None:
    """Parametric bootstrap of the transforms (module docstring)."""
    from scoremix.bayes.locscale import bayes_locscale
    from scoremix.locscale import LocScaleSpec, fit_locscale

    spec = LocScaleSpec(strata=("attack",), positive="bonafide", speaker_by_stratum=("negative",))
    fit = fit_locscale(d, spec)
    la0 = load_avg()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = bayes_locscale(fit, draws=draws, tune=draws, chains=1, cores=1, seed=1, sampler=sampler)
    e0 = base.posterior_eer(max_draws=200).loc["all"]
    rng = np.random.default_rng(7 if B <= 4 else 1000 + B)
    tr = fit.transform
    strata = fit.strata.to_numpy(dtype=object)
    pooled, per = [], []
    for b in range(B):
        z = fit.trial_mean + fit.trial_sd * rng.standard_normal(len(d))
        score = np.empty(len(d))
        for lv in np.unique(strata):
            m = strata == lv
            score[m] = tr.stratum(lv).inverse(z[m])
        db = d.assign(score=score)
        fb = fit_locscale(db, spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rb = bayes_locscale(fb, draws=draws, tune=draws, chains=1, cores=1, seed=100 + b, sampler=sampler)
        pred, W, _ = rb.predictive(max_draws=200)
        from scoremix.predictive.attainable import attainable_eer

        e = 100 * attainable_eer(pred, W[:1], max_thresholds=2000)[0][0]
        pooled.append(e)
        per.append(dict(rep=b, mean=float(e.mean()), lo=float(np.quantile(e, 0.025)), hi=float(np.quantile(e, 0.975))))
        print(per[-1], flush=True)
    allv = np.concatenate(pooled)
    record(f"sensitivity:{system}" + ("" if B <= 4 else f":B{B}"), dict(
        B=B, fixed=dict(mean=float(e0["mean"]), lo=float(e0["lo"]), hi=float(e0["hi"]), empirical=float(e0["empirical"])),
        bootstrap_replicates=per, pooled=dict(mean=float(allv.mean()), lo=float(np.quantile(allv, 0.025)),
                                              hi=float(np.quantile(allv, 0.975))),
        note="replicate EERs are of bootstrap data (centred on the ML model's EER, not the empirical one); "
             "the width ratio pooled/fixed measures the transform's added uncertainty",
        load_before=la0, load_after=load_avg()))


def truth(d: pd.DataFrame, system: str) -> None:
    """The EER of the bootstrap's generating model: the ML stratified fit's conditional model EER
    (attainable thresholds), the value every replicate's interval should cover."""
    import scoremix as sm
    from scoremix.locscale import LocScaleSpec, fit_locscale

    spec = LocScaleSpec(strata=("attack",), positive="bonafide", speaker_by_stratum=("negative",))
    fit = fit_locscale(d, spec)
    record(f"sensitivity_truth:{system}", dict(ml_model_eer=100 * float(sm.model_eer(fit, progress=False, n_boot=0))))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", default="rawgat_st_mul")
    ap.add_argument("--one", action="store_true")
    ap.add_argument("--stratified", action="store_true")
    ap.add_argument("--sensitivity", type=int, default=0)
    ap.add_argument("--truth", action="store_true")
    ap.add_argument("--sampled", type=int, default=0, help="Bernstein order of the sampled transforms (0: skip)")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--sampler", default="pymc")
    a = ap.parse_args()
    data = load(a.system)
    if a.one:
        one_transform(data, a.system, a.draws, a.chains)
    if a.stratified:
        stratified(data, a.system, a.draws, a.chains, a.sampler)
    if a.truth:
        truth(data, a.system)
    if a.sampled:
        sampled(data, a.system, a.draws, a.chains, a.sampled)
    if a.sensitivity:
        sensitivity(data, a.system, a.sensitivity, a.draws, a.sampler)
