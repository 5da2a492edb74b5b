"""Simulation-based calibration (Talts et al. 2018) of ``bayes_glmer`` on the decision model.

Procedure (one replicate ``r``, seed ``r``):

1. draw the truth from the *same* priors the fit uses:
   ``β_cell ~ N(-1.5, 0.6²)`` for the 4 cells (neg|A, neg|B, pos|A, pos|B),
   ``sd_neg, sd_pos ~ half-N(0.6)``, speaker correlation ``r`` with ``(r+1)/2 ~ Beta(2, 2)``
   (the LKJ(2) marginal for a 2×2 matrix);
2. simulate 20 speakers (10 per subgroup A/B), each with 10 positive and 10 negative trials
   (400 0/1 rows, 40 cells): ``(b_neg, b_pos) ~ N(0, Σ)``,
   ``err ~ Bernoulli(logit⁻¹(β_cell + b_cls))``;
3. fit ``bayes_glmer("err ~ 0 + cell + (0 + cls | spk)", priors=…)`` (1 chain × 300 draws
   after 300 warm-up, PyMC NUTS, target_accept 0.9: the machine is 2 shared cores);
4. rank of the truth among L = 99 evenly spaced (thinned) posterior draws, for the 7 model
   parameters and the derived subgroup measures (new-speaker FNR/FPR per subgroup and the
   ratios FNR_A/FNR_all, FPR_A/FPR_all, DCF_A/DCF_all — those of B are functions of A's here);
5. the 95 % equal-tailed interval (all 300 draws) of every subgroup ratio covers the truth?

Uniformity: per quantity, Pearson χ² test of the ranks (0…99) in 10 equal bins (9 df);
pass when p ≥ 0.01.  Coverage: pass when 90–98 %.

Run: ``nice -n 5 python3 benchmarks/sbc_bayes_glmer.py [n_reps] [out.json] [first_rep]``; a
partial results file is rewritten every 5 replicates; ``SBC_REPS=3,7,11`` runs exactly those
replicates.  Workers over disjoint replicate ranges
are merged by ``python3 benchmarks/sbc_bayes_glmer.py merge out.json part1.json part2.json …``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

import numpy as np
import pandas as pd
from scipy import stats

warnings.simplefilter("ignore")

import scoremix as sm  # noqa: E402
from scoremix.bayes.decision import new_speaker_rates  # noqa: E402
from scoremix.bayes.glmer import bayes_glmer  # noqa: E402

CELLS = ["neg|A", "neg|B", "pos|A", "pos|B"]
N_SPK, N_TRIALS = 20, 10
MU0, SD0, SDSD, ETA = -1.5, 0.6, 0.6, 2.0
L = 99
DRAWS, TUNE, CHAINS = 300, 300, 1
A_COST, B_COST = 0.05, 0.95


def priors() -> dict:
    P = sm.Prior
    out = {f"cell{c}": P.normal(MU0, SD0) for c in CELLS}
    out["sd_spk__clsneg"] = P.half_normal(SDSD)
    out["sd_spk__clspos"] = P.half_normal(SDSD)
    out["cor_spk"] = P.lkj(ETA)
    return out


def design() -> pd.DataFrame:
    rows = []
    for s in range(N_SPK):
        g = "A" if s < N_SPK // 2 else "B"
        for cls in ("neg", "pos"):
            for _ in range(N_TRIALS):
                rows.append((f"s{s:02d}", g, cls))
    d = pd.DataFrame(rows, columns=["spk", "grp", "cls"])
    d["cls"] = pd.Categorical(d["cls"], categories=["neg", "pos"])
    d["cell"] = pd.Categorical(d["cls"].astype(str) + "|" + d["grp"], categories=CELLS)
    return d


def rates(beta: np.ndarray, sd_neg: np.ndarray, sd_pos: np.ndarray) -> dict:
    """Measures (G=2, S) from beta (S, 4) in CELLS order."""
    is_pos = np.array([False, False, True, True])
    gidx = np.array([0, 1, 0, 1])
    n = np.full(4, float(N_TRIALS * N_SPK // 2))
    sd = np.where(is_pos[:, None], sd_pos[None, :], sd_neg[None, :])
    return new_speaker_rates(beta.T, sd, n, is_pos, gidx, 2, A_COST, B_COST)


def quantities(beta, sd_neg, sd_pos, cor) -> dict:
    r = rates(beta, sd_neg, sd_pos)
    q = {f"cell{c}": beta[:, j] for j, c in enumerate(CELLS)}
    q.update({"sd_neg": sd_neg, "sd_pos": sd_pos, "cor": cor,
              "fnr_A": r["fnr"][0], "fnr_B": r["fnr"][1], "fpr_A": r["fpr"][0], "fpr_B": r["fpr"][1],
              "fnr_ratio_A": r["fnr_ratio"][0], "fpr_ratio_A": r["fpr_ratio"][0],
              "dcf_ratio_A": r["ratio_overall"][0]})
    ratios = {f"{m}_{g}": r[m][k] for m in ("fnr_ratio", "fpr_ratio", "ratio_overall") for k, g in enumerate("AB")}
    return q, ratios


def one(rep: int, d: pd.DataFrame) -> dict:
    rng = np.random.default_rng(10_000 + rep)
    beta = rng.normal(MU0, SD0, 4)
    sds = np.abs(rng.normal(0, SDSD, 2))
    cor = 2 * rng.beta(ETA, ETA) - 1
    Lc = np.linalg.cholesky(np.array([[1, cor], [cor, 1]]))
    b = (rng.standard_normal((N_SPK, 2)) @ Lc.T) * sds
    spk = d["spk"].str[1:].astype(int).to_numpy()
    cls = (d["cls"] == "pos").to_numpy().astype(int)
    eta = beta[d["cell"].cat.codes.to_numpy()] + b[spk, cls]
    df = d.copy()
    df["err"] = (rng.random(len(d)) < 1 / (1 + np.exp(-eta))).astype(int)
    fit = bayes_glmer("err ~ 0 + cell + (0 + cls | spk)", df, priors=priors(), draws=DRAWS, tune=TUNE, chains=CHAINS,
                      cores=1, seed=rep, progress=False, check=False, target_accept=0.9)
    pb = np.stack([fit._flat(f"cell{c}") for c in CELLS], axis=1)
    psn, psp = fit._flat("sd_spk__clsneg"), fit._flat("sd_spk__clspos")
    pc = fit._flat("cor_spk__clsneg.clspos")
    tq, tr = quantities(beta[None, :], sds[:1], sds[1:], np.array([cor]))
    pq, pr = quantities(pb, psn, psp, pc)
    S = pb.shape[0]
    thin = np.linspace(0, S - 1, L).round().astype(int)
    ranks = {k: int(np.sum(pq[k][thin] < tq[k][0])) for k in tq}
    cover = {k: bool(np.quantile(pr[k], 0.025) <= tr[k][0] <= np.quantile(pr[k], 0.975)) for k in tr}
    div = int(np.sum(fit.idata.sample_stats["diverging"].values))
    return {"rep": rep, "ranks": ranks, "cover": cover, "divergences": div,
            "min_ess_bulk": float(fit.diagnostics.table["ess_bulk"].min()),
            "max_rhat": float(fit.diagnostics.table["r_hat"].max()), "wall": fit.wall_time}


def summarise(results: list[dict]) -> dict:
    names = list(results[0]["ranks"])
    out = {"n_reps": len(results), "L": L, "bins": 10, "uniformity": {}, "coverage": {}}
    for k in names:
        r = np.array([x["ranks"][k] for x in results])
        counts = np.bincount(np.minimum(r * 10 // (L + 1), 9), minlength=10)
        p = float(stats.chisquare(counts).pvalue)
        out["uniformity"][k] = {"p": p, "counts": counts.tolist(), "pass": p >= 0.01}
    for k in results[0]["cover"]:
        c = np.mean([x["cover"][k] for x in results])
        out["coverage"][k] = {"coverage_95": float(c), "pass": bool(0.90 <= c <= 0.98)}
    out["divergent_reps"] = int(sum(x["divergences"] > 0 for x in results))
    out["median_min_ess_bulk"] = float(np.median([x["min_ess_bulk"] for x in results]))
    out["median_fit_seconds"] = float(np.median([x["wall"] for x in results]))
    out["sampler"] = {"draws": DRAWS, "tune": TUNE, "chains": CHAINS}
    return out


def report(summ: dict) -> None:
    for k, v in summ["uniformity"].items():
        print(f"{k:16s} p = {v['p']:.3f} {'ok' if v['pass'] else 'FAIL'}")
    for k, v in summ["coverage"].items():
        print(f"{k:16s} 95% coverage = {v['coverage_95']:.3f} {'ok' if v['pass'] else 'FAIL'}")


def merge(out_path: str, parts: list[str]) -> None:
    results = []
    for p in parts:
        with open(p) as fh:
            results += json.load(fh)["replicates"]
    results = list({x["rep"]: x for x in results}.values())     # a replicate run twice counts once
    results.sort(key=lambda x: x["rep"])
    summ = summarise(results)
    summ.update(procedure=__doc__, parts=parts)
    with open(out_path, "w") as fh:
        json.dump({"summary": summ, "replicates": results}, fh, indent=1)
    report(summ)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "merge":
        merge(sys.argv[2], sys.argv[3:])
        return
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    n_reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "results",
                                                                   "sbc_bayes_glmer.json")
    d = design()
    results = []
    t0 = time.time()
    todo = ([int(r) for r in os.environ["SBC_REPS"].split(",")] if os.environ.get("SBC_REPS")
            else list(range(first, first + n_reps)))
    n_reps = len(todo)
    for i, rep in enumerate(todo):
        results.append(one(rep, d))
        if (i + 1) % 5 == 0 or i + 1 == n_reps:
            summ = summarise(results)
            summ.update(elapsed_s=time.time() - t0, load=os.getloadavg(), procedure=__doc__)
            with open(out_path + ".tmp", "w") as fh:
                json.dump({"summary": summ, "replicates": results}, fh, indent=1)
            os.replace(out_path + ".tmp", out_path)
            print(f"{i + 1} reps, {time.time() - t0:.0f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    report(summarise(results))


if __name__ == "__main__":
    main()
