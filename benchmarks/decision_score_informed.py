"""Score-informed estimators of LA's gender cells on the split-half protocol (issue 20).

Same splits, threshold and metric as ``decision_model_split_half.py`` (every speaker × class ×
attack cell split into a fitted share A and a held-out B; τ* = SVEva's threshold of the full
table; reference = B's counted value; metric = MAE against B, ratio to counting on A, per
system over both seeds' cells, then the median over the 10 systems and systems below 1).
Cells: gender FNR, FPR and SVEva's three ratios.

Estimators (besides counting):

* ``ord_*``: a cumulative-link model of the scores of A binned at ``K`` cuts around τ*
  (τ* one of them; the others at the pooled-A class quantiles whose tail rates are
  ``p*·m``, ``m`` in a geometric window ``[1/W, W]``), per class,

  .. math::  P(s < t_k \\mid i) = F(\\theta_k - \\eta_i),

  ``η`` = a free gender location (positives); gender + attack (``add``), or per-attack
  cuts ``θ_{k,l}`` with one gender shift (``cut``), for the negatives; ``F`` the link's
  cdf.  The gender's rate at τ* is the B-weighted mean of its cells' fitted rates.  The
  location of a gender is estimated from every trial in the window, not only those past τ*;
  the price is the assumption that the genders' score distributions differ by a shift on the
  link scale within the window.  Fitted by maximum likelihood on the aggregated counts.
* ``score``: ``sm.score_model(A, factors=["attack"], covariates=["speaker_gender"])`` and
  the fit's predictive rates of B's trials at τ* (conditional on A's speakers), with
  ``--score-model`` (slow: 30-80 s per system and two seeds on a loaded machine).
* ``clmm_logit_w4``: the cumulative-link *mixed* model, a speaker random intercept added
  (R's ``ordinal::clmm`` through ``benchmarks/r/clmm_gender.R``), rates at the speakers'
  conditional modes, with ``--clmm`` (needs R with ``ordinal`` and ``jsonlite``).
* ``poststrat``: the post-stratified count (speaker × attack cells of A weighted by B's trials).
* ``comp_<model>``: the composite of counting and a model, weight from A alone
  (:func:`composite`).

Usage: ``OPENBLAS_NUM_THREADS=1 nice -n 5 python benchmarks/decision_score_informed.py
[--seeds 1 2] [--systems ...] [--score-model] [--clmm] [--no-fixed] [--out cells.csv]``;
``--sim N`` runs the same estimators on N simulated LA-shaped *score* tables with known truth
instead (``decision_model_floor.simulate`` with logistic scores; the floor is the true rate);
``--decompose N``: the shape-sharing bias of the fixed-effect variants on the full tables and
the SD of them and of counting over N random A shares.  Results: docs/glmm.md, "Score-informed
estimators of the gender cells".
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from decision_model_floor import simulate, split, with_groups
from decision_model_split_half import system_and_threshold

import scoremix as sm

DATA = ROOT.parent / "shared" / "data" / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
PROB = {"rawnet2_transferfiles", "rawnet2_robeval", "air_softmax", "air_amsoftmax", "aasist_junjul"}

LINKS = {
    "logit": (special.expit, stats.logistic.pdf),
    "probit": (special.ndtr, stats.norm.pdf),
    "cloglog": (lambda x: -np.expm1(-np.exp(np.minimum(x, 30))), lambda x: np.exp(x - np.exp(np.minimum(x, 30)))),
    "loglog": (lambda x: np.exp(-np.exp(-np.maximum(x, -30))), lambda x: np.exp(-x - np.exp(-np.maximum(x, -30)))),
}


def cuts_around(s: np.ndarray, err_low: bool, tau: float, window: float, n_side: int) -> np.ndarray:
    """τ* and the class quantiles whose error-tail rates are p*·m, m = window^(±j/n_side)."""
    p_star = np.mean(s < tau) if err_low else np.mean(s >= tau)
    p_star = min(max(p_star, 0.5 / s.size), 0.999)
    ms = window ** (np.arange(-n_side, n_side + 1) / n_side)
    ps = np.clip(p_star * ms, 1.0 / s.size, 0.95)
    qs = np.quantile(s, ps if err_low else 1 - ps)
    c = np.unique(np.concatenate([qs, [tau]]))
    return c


def fit_cumulative(counts: np.ndarray, X: np.ndarray, cut_group: np.ndarray, link: str) -> tuple[np.ndarray, np.ndarray]:
    """ML fit of P(category ≤ k | cell c) = F(θ_{g(c),k} − x_cᵀβ) on counts ``(C, K+1)``.

    ``cut_group`` ``(C,)``: which set of cuts a cell uses (0..G−1).  Returns θ ``(G, K)`` and β."""
    F, f = LINKS[link]
    C, K1 = counts.shape
    K = K1 - 1
    G = int(cut_group.max()) + 1
    p = X.shape[1]
    # start: pooled empirical cumulative proportions per group
    th0 = np.zeros((G, K))
    for g in range(G):
        cum = np.cumsum(counts[cut_group == g].sum(0))[:-1] / max(counts[cut_group == g].sum(), 1)
        cum = np.clip(cum, 1e-4, 1 - 1e-4)
        # invert F numerically on a grid (links without closed-form inverse)
        grid = np.linspace(-30, 30, 6001)
        th0[g] = np.interp(cum, F(grid), grid)
        th0[g] = np.maximum.accumulate(th0[g] + 1e-6 * np.arange(K))

    def unpack(v):
        th = np.empty((G, K))
        a = v[:G * K].reshape(G, K)
        th[:, 0] = a[:, 0]
        th[:, 1:] = a[:, :1] + np.cumsum(np.exp(a[:, 1:]), axis=1)
        return th, v[G * K:]

    def pack(th, b):
        a = np.empty((G, K))
        a[:, 0] = th[:, 0]
        a[:, 1:] = np.log(np.maximum(np.diff(th, axis=1), 1e-8))
        return np.concatenate([a.ravel(), b])

    def nll(v):
        th, b = unpack(v)
        eta = X @ b
        z = th[cut_group] - eta[:, None]                       # (C, K)
        Fz = np.column_stack([np.zeros(C), F(z), np.ones(C)])
        P = np.maximum(np.diff(Fz, axis=1), 1e-300)
        ll = (counts * np.log(P)).sum()
        fz = f(z)
        r = counts / P                                        # (C, K+1)
        # d ll / d z_k = f(z_k) (r_{k-1} − r_k)   (z_k is the upper bound of category k−1)
        dz = fz * (r[:, :-1] - r[:, 1:])                      # (C, K)
        g_th = np.zeros((G, K))
        np.add.at(g_th, cut_group, dz)
        g_b = -X.T @ dz.sum(1)
        # chain rule for the increasing parametrisation
        g_a = np.empty((G, K))
        rev = np.cumsum(g_th[:, ::-1], axis=1)[:, ::-1]       # Σ_{j≥k} g_th_j
        g_a[:, 0] = rev[:, 0]
        g_a[:, 1:] = rev[:, 1:] * np.exp(v[:G * K].reshape(G, K)[:, 1:])
        return -ll, -np.concatenate([g_a.ravel(), g_b])

    v0 = pack(th0, np.zeros(p))
    res = optimize.minimize(nll, v0, jac=True, method="L-BFGS-B", options={"maxiter": 2000})
    return unpack(res.x)


def fit_location_scale(counts: np.ndarray, X: np.ndarray, Z: np.ndarray, link: str, th0: np.ndarray,
                       b0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ML fit of the location-scale cumulative-link model (McCullagh 1980; Cox 1995)
    P(category ≤ k | c) = F((θ_k − x_cᵀβ) / exp(z_cᵀγ)), one set of cuts, started at the
    location fit (θ0, β0).  Returns θ ``(K,)``, β, γ."""
    F, _ = LINKS[link]
    C, K1 = counts.shape
    K, p, q = K1 - 1, X.shape[1], Z.shape[1]

    def unpack(v):
        th = v[0] + np.concatenate([[0.0], np.cumsum(np.exp(v[1:K]))])
        return th, v[K:K + p], v[K + p:]

    def nll(v):
        th, b, g = unpack(v)
        z = (th[None, :] - (X @ b)[:, None]) * np.exp(-(Z @ g))[:, None]
        Fz = np.column_stack([np.zeros(C), F(z), np.ones(C)])
        return -(counts * np.log(np.maximum(np.diff(Fz, axis=1), 1e-300))).sum()

    v0 = np.concatenate([[th0[0]], np.log(np.maximum(np.diff(th0), 1e-8)), b0, np.zeros(q)])
    res = optimize.minimize(nll, v0, method="L-BFGS-B", options={"maxiter": 5000})
    return unpack(res.x)


def ordinal_rates(A: pd.DataFrame, B: pd.DataFrame, tau: float, *, link: str = "logit", window: float = 4.0,
                  n_side: int = 2, neg: str = "add", scale: bool = False) -> dict[str, dict[str, float]]:
    """Gender FNR and FPR at τ* of the cumulative-link model (module docstring), B-weighted;
    also the B-weighted rates of all trials (for the ratios)."""
    F, _ = LINKS[link]
    out: dict[str, dict[str, float]] = {}
    genders = sorted(A["speaker_gender"].unique())
    for pos in (True, False):
        a = A[A.pos == pos]
        b = B[B.pos == pos]
        s = a["score"].to_numpy(float)
        cuts = cuts_around(s, pos, tau, window, n_side)
        k_star = int(np.searchsorted(cuts, tau))               # cuts[k_star] == tau
        cat = np.searchsorted(cuts, s, side="right")          # # cuts ≤ s: s < cuts[k] ⇔ cat ≤ k
        if pos:
            cell = a["speaker_gender"].map({g: i for i, g in enumerate(genders)}).to_numpy()
            cells = pd.DataFrame({"g": genders})
            cg = np.zeros(len(genders), int)
        else:
            atts = sorted(a["attack"].unique())
            cells = pd.DataFrame([(g, l) for g in genders for l in atts], columns=["g", "l"])
            key = {(g, l): i for i, (g, l) in enumerate(zip(cells.g, cells.l))}
            cell = np.array([key[k] for k in zip(a["speaker_gender"], a["attack"])])
            cg = (cells.l.map({l: i for i, l in enumerate(atts)}).to_numpy() if neg == "cut"
                  else np.zeros(len(cells), int))
        counts = np.zeros((len(cells), cuts.size + 1))
        np.add.at(counts, (cell, cat), 1.0)
        # location design: gender (male − female) [+ attack dummies for "add"]
        X = (cells.g == genders[-1]).to_numpy(float)[:, None]
        if not pos and neg == "add":
            X = np.column_stack([X, pd.get_dummies(cells.l, drop_first=True).to_numpy(float)])
        th, beta = fit_cumulative(counts, X, cg, link)
        eta = X @ beta
        below = F(th[cg, k_star] - eta)                        # P(s < τ*)
        if scale:                                              # gender-specific scale as well
            Z = X[:, :1]
            th1, beta, gam = fit_location_scale(counts, X, Z, link, th[0], beta)
            below = F((th1[k_star] - X @ beta) * np.exp(-(Z @ gam)))
        rate = below if pos else 1 - below
        if pos:
            nb = b.groupby("speaker_gender").size().reindex(genders).to_numpy(float)
        else:
            nb = np.array([((b.speaker_gender == g) & (b.attack == l)).sum() for g, l in zip(cells.g, cells.l)], float)
        m = "fnr" if pos else "fpr"
        for g in genders:
            sel = (cells.g == g).to_numpy()
            out.setdefault(g, {})[m] = float((nb[sel] * rate[sel]).sum() / nb[sel].sum())
        out.setdefault("all", {})[m] = float((nb * rate).sum() / nb.sum())
    return out


def score_model_rates(A: pd.DataFrame, B: pd.DataFrame, tau: float, system: str) -> dict[str, dict[str, float]]:
    """``sm.score_model`` on A (attack strata, gender covariate), the rates of B's trials at τ*."""
    from scoremix.predictive.attainable import score_rates
    from scoremix.predictive.layer import predictive

    def tr(x):
        x = np.asarray(x, float)
        if system in PROB:
            p = np.clip(x, 1e-12, 1 - 1e-12)
            return np.log(p) - np.log1p(-p)
        return x
    A2, B2 = A.assign(score=tr(A["score"])), B.assign(score=tr(B["score"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.score_model(A2, score="score", label="label", speaker="speaker", factors=["attack"],
                             covariates=["speaker_gender"], positive="bonafide")
        pred = predictive(fit, B2.reset_index(drop=True), label="label", positive="bonafide")
    genders = sorted(A["speaker_gender"].unique())
    fr = B2.reset_index(drop=True)
    masks = [np.ones(len(fr), bool)] + [(fr["speaker_gender"] == g).to_numpy() for g in genders]
    W = np.vstack([pred.counts(m) for m in masks])
    fnr, fpr = score_rates(pred, W, np.array([float(tr([tau])[0])]))
    out = {"all": {"fnr": float(fnr[0, 0, 0]), "fpr": float(fpr[0, 0, 0])}}
    for i, g in enumerate(genders):
        out[g] = {"fnr": float(fnr[i + 1, 0, 0]), "fpr": float(fpr[i + 1, 0, 0])}
    sel = getattr(fit, "selection", None)
    out["_spec"] = "" if sel is None else f"{sel.chosen.name}; pooling {getattr(sel.speaker_pooling, 'kappa', '')}"
    return out


def clmm_rates(A: pd.DataFrame, B: pd.DataFrame, tau: float, *, window: float = 4.0,
               n_side: int = 2) -> dict[str, dict[str, float]]:
    """The cumulative-link *mixed* model (``benchmarks/r/clmm_gender.R``, R's ``ordinal::clmm``,
    Laplace): per class, P(s < t_k | i) = F(θ_k − β_g − a_l − b_s), b_s ~ N(0, σ²) per speaker,
    attack fixed (negatives); the rate of every B trial at τ* at the speaker's conditional mode,
    averaged over the gender's B trials."""
    import json
    import subprocess
    import tempfile
    F = special.expit
    parts, kstars = [], {}
    for pos in (True, False):
        a = A[A.pos == pos]
        s = a["score"].to_numpy(float)
        cuts = cuts_around(s, pos, tau, window, n_side)
        kstars["pos" if pos else "neg"] = int(np.searchsorted(cuts, tau))
        parts.append(pd.DataFrame({"cls": "pos" if pos else "neg", "cat": np.searchsorted(cuts, s, side="right"),
                                   "gender": a["speaker_gender"].to_numpy(), "speaker": a["speaker"].to_numpy(),
                                   "attack": a["attack"].to_numpy()}))
    with tempfile.TemporaryDirectory() as tmp:
        pd.concat(parts).to_csv(f"{tmp}/in.csv", index=False)
        subprocess.run(["Rscript", str(ROOT / "benchmarks" / "r" / "clmm_gender.R"), f"{tmp}/in.csv",
                        f"{tmp}/out.json"], check=True, capture_output=True)
        with open(f"{tmp}/out.json") as fh:
            fit = json.load(fh)
    out: dict[str, dict[str, float]] = {}
    for pos in (True, False):
        cl = "pos" if pos else "neg"
        f, b = fit[cl], B[B.pos == pos]
        lv = np.asarray(f["levels"])
        i = int(np.searchsorted(lv, kstars[cl], side="right")) - 1          # largest level ≤ k*
        th = -np.inf if i < 0 else (np.inf if i >= len(f["theta"]) else f["theta"][i])
        eta = np.array([f["beta"].get(f"gender{g}", 0.0) for g in b["speaker_gender"]])
        if not pos:
            eta += np.array([f["beta"].get(f"attack{l}", 0.0) for l in b["attack"]])
        eta += np.array([f["speaker"].get(k, 0.0) for k in b["speaker"]])
        below = F(th - eta)
        rate = below if pos else 1 - below
        m = "fnr" if pos else "fpr"
        for g in sorted(A["speaker_gender"].unique()):
            out.setdefault(g, {})[m] = float(rate[(b["speaker_gender"] == g).to_numpy()].mean())
        out.setdefault("all", {})[m] = float(rate.mean())
    return out


def poststratified(A: pd.DataFrame, B: pd.DataFrame) -> dict:
    """Design-based post-stratified count (Holt & Smith 1979): each speaker × attack cell's
    error rate counted on A, weighted by the cell's B trials (unbiased for B's expected rate;
    counting on A weights the cells by A's trials instead)."""
    key = ["speaker", "attack", "pos"]
    pa = A.groupby(key)["err"].mean().rename("pa")
    b = B[key + ["speaker_gender"]].join(pa, on=key)
    out = {"all": {"fnr": b.loc[b.pos, "pa"].mean(), "fpr": b.loc[~b.pos, "pa"].mean()}}
    for g, s in b.groupby("speaker_gender"):
        out[g] = {"fnr": s.loc[s.pos, "pa"].mean(), "fpr": s.loc[~s.pos, "pa"].mean()}
    return out


def ratios(r: dict, g: str) -> dict[str, float]:
    dcf = 0.05 * r[g]["fnr"] + 0.95 * r[g]["fpr"]
    dcf_all = 0.05 * r["all"]["fnr"] + 0.95 * r["all"]["fpr"]
    return {"fnr": r[g]["fnr"], "fpr": r[g]["fpr"], "ratio_overall": dcf / dcf_all,
            "fnr_ratio": r[g]["fnr"] / r["all"]["fnr"], "fpr_ratio": r[g]["fpr"] / r["all"]["fpr"]}


def counted(T: pd.DataFrame, col: str = "err") -> dict:
    out = {"all": {"fnr": T.loc[T.pos, col].mean(), "fpr": T.loc[~T.pos, col].mean()}}
    for g, s in T.groupby("speaker_gender"):
        out[g] = {"fnr": s.loc[s.pos, col].mean(), "fpr": s.loc[~s.pos, col].mean()}
    return out


VARIANTS = {
    # name: ordinal_rates kwargs
    "ord_logit_w1.25": {"link": "logit", "window": 1.25, "n_side": 1},
    "ord_logit_w1.5": {"link": "logit", "window": 1.5, "n_side": 1},
    "ord_logit_w2": {"link": "logit", "window": 2.0, "n_side": 2},
    "ord_logit_w4": {"link": "logit", "window": 4.0, "n_side": 2},
    "ord_logit_w16": {"link": "logit", "window": 16.0, "n_side": 4},
    "ord_probit_w4": {"link": "probit", "window": 4.0, "n_side": 2},
    "ord_cloglog_w4": {"link": "cloglog", "window": 4.0, "n_side": 2},
    "ord_loglog_w4": {"link": "loglog", "window": 4.0, "n_side": 2},
    "ord_logit_w4_cut": {"link": "logit", "window": 4.0, "n_side": 2, "neg": "cut"},
    "ord_logit_w2_scale": {"link": "logit", "window": 2.0, "n_side": 2, "scale": True},
    "ord_logit_w4_scale": {"link": "logit", "window": 4.0, "n_side": 2, "scale": True},
    "ord_logit_w16_scale": {"link": "logit", "window": 16.0, "n_side": 4, "scale": True},
    "ord_logit_w16_cut": {"link": "logit", "window": 16.0, "n_side": 4, "neg": "cut"},
}


NO_FIXED = False
CLMM = {"clmm_logit_w4": {"window": 4.0, "n_side": 2}}
#: composite estimators (counting ⊕ model) built for these model estimators
COMPOSITE = ("ord_logit_w1.25", "ord_logit_w2", "ord_logit_w4", "clmm_logit_w4", "score")


def composite(count: dict, model: dict, n: dict) -> dict:
    """Composite (small-area) estimator of every rate: φ·count + (1−φ)·model with
    φ = b²/(b² + v), v = p̂(1−p̂)/n the binomial variance of the count, b² = max((model −
    count)² − v, 0) the estimated squared bias of the model (Rao & Molina 2015, §3.3)."""
    out: dict = {}
    for g, r in count.items():
        out[g] = {}
        for m, c in r.items():
            v = c * (1 - c) / max(n[g][m], 1)
            b2 = max((model[g][m] - c) ** 2 - v, 0.0)
            phi = 1.0 if b2 + v == 0 else b2 / (b2 + v)
            out[g][m] = phi * c + (1 - phi) * model[g][m]
    return out


def cells_of(A: pd.DataFrame, B: pd.DataFrame, tau: float, system: str, use_score: bool,
             use_clmm: bool = False) -> pd.DataFrame:
    A = A.assign(pos=A["label"] == "bonafide")
    B = B.assign(pos=B["label"] == "bonafide")
    for T in (A, B):
        s = T["score"].to_numpy(float)
        T["err"] = np.where(T.pos, s < tau, s >= tau).astype(float)
    est = {"ref": counted(B), "counting": counted(A)}
    if "p" in B.columns:
        est["floor"] = counted(B, "p")
    est["poststrat"] = poststratified(A, B)
    for name, kw in ({} if NO_FIXED else VARIANTS).items():
        est[name] = ordinal_rates(A, B, tau, **kw)
    if use_clmm:
        for name, kw in CLMM.items():
            est[name] = clmm_rates(A, B, tau, **kw)
    spec = ""
    if use_score:
        sr = score_model_rates(A, B, tau, system)
        spec = sr.pop("_spec")
        est["score"] = sr
    n = {"all": {"fnr": A.pos.sum(), "fpr": (~A.pos).sum()}}
    for g, sa in A.groupby("speaker_gender"):
        n[g] = {"fnr": sa.pos.sum(), "fpr": (~sa.pos).sum()}
    for e in COMPOSITE:
        if e in est:
            est[f"comp_{e}"] = composite(est["counting"], est[e], n)
    rows = []
    for g in sorted(A["speaker_gender"].unique()):
        per = {e: ratios(r, g) for e, r in est.items()}
        for m in ("fnr", "fpr", "ratio_overall", "fnr_ratio", "fpr_ratio"):
            rows.append(dict(kind=f"gender {m}", cell=g, spec=spec, **{e: v[m] for e, v in per.items()}))
    return pd.DataFrame(rows)


def summary(res: pd.DataFrame, unit: str = "system") -> pd.DataFrame:
    ests = [c for c in res.columns if c not in ("kind", "cell", "spec", "ref", "counting", "seed", "system", "rep",
                                                 "floor")]
    if "floor" in res and res["floor"].notna().any():
        ests = ["floor"] + ests
    per = []
    for (u, kind), c in res.groupby([unit, "kind"], sort=False):
        mae_c = (c.counting - c.ref).abs().mean()
        per.append({unit: u, "kind": kind, "mae_counting": mae_c,
                    **{e: (c[e] - c.ref).abs().mean() / mae_c for e in ests}})
    return pd.DataFrame(per), ests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--share", type=float, default=0.2)
    ap.add_argument("--seeds", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--systems", nargs="*", default=None)
    ap.add_argument("--score-model", action="store_true")
    ap.add_argument("--clmm", action="store_true", help="the cumulative-link mixed model (R ordinal::clmm)")
    ap.add_argument("--no-fixed", action="store_true", help="skip the fixed-effect cumulative-link variants")
    ap.add_argument("--sim", type=int, default=0, help="simulated score tables with known truth instead of LA")
    ap.add_argument("--out", default=None)
    ap.add_argument("--decompose", type=int, default=0,
                    help="instead: shape-sharing bias (full table) and split-to-split SD of counting and "
                         "the fixed-effect cumulative-link variants over this many random A shares")
    a = ap.parse_args()
    global NO_FIXED
    NO_FIXED = a.no_fixed
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    allc = []
    if a.decompose:
        d = pd.read_csv(DATA)
        names = ["ord_logit_w1.25", "ord_logit_w2", "ord_logit_w4", "ord_logit_w2_scale", "ord_logit_w4_scale"]
        res = decompose(d, a.systems or sorted(d.system.unique()), a.decompose, a.share, names)
        print(res.to_string(index=False, float_format=lambda v: f"{v:.2e}"))
        for e in names:
            r = (res[f"bias_{e}"] ** 2 + res[f"sd_{e}"] ** 2) / res["sd_counting"] ** 2
            print(f"{e}: RMSE²/Var(counting) per cell, median {np.median(r):.2f}, below 1: {int((r < 1).sum())}/{len(r)}; "
                  f"FNR median {np.median(r[res.rate == 'fnr']):.2f}, FPR median {np.median(r[res.rate == 'fpr']):.2f}")
        if a.out:
            res.to_csv(a.out, index=False)
        return
    if a.sim:
        for rep in range(a.sim):
            t = sim_scores(1000 + rep)
            in_a = split(t, a.share, np.random.default_rng(rep))
            allc.append(cells_of(t[in_a], t[~in_a], 0.0, "sim", a.score_model, a.clmm).assign(rep=rep))
        res = pd.concat(allc, ignore_index=True)
        res["system"] = "sim"
        per, ests = summary(res, "system")
        print(per.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        for e in ["counting"] + ests:
            b = res.groupby("kind").apply(lambda c, e=e: pd.Series({"bias": (c[e] - c.floor).mean(),
                                                                    "rmse": np.sqrt(((c[e] - c.floor) ** 2).mean())}))
            print(e, " ".join(f"{k}: bias {r.bias:.2e} rmse {r.rmse:.2e};" for k, r in b.iterrows()))
    else:
        d = pd.read_csv(DATA)
        systems = a.systems or sorted(d.system.unique())
        for system in systems:
            t, tau = system_and_threshold(d, system)
            t0 = time.time()
            for s in a.seeds:
                rng = np.random.default_rng(s)
                tg = with_groups(t, np.random.default_rng(10_000 + s))
                in_a = split(tg, a.share, rng)
                allc.append(cells_of(tg[in_a], tg[~in_a], tau, system, a.score_model, a.clmm).assign(seed=s, system=system))
            print(f"# {system}: {time.time() - t0:.0f} s", flush=True)
        res = pd.concat(allc, ignore_index=True)
        per, ests = summary(res)
        rows = []
        for kind, o in per.groupby("kind", sort=False):
            rows.append({"kind": kind, "counting MAE": o.mae_counting.mean(),
                         **{e: f"{np.median(o[e]):.2f} ({int((o[e] < 1).sum())}/{len(o)})" for e in ests}})
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        for e in ests:
            print(f"\n{e}: MAE / counting MAE per system")
            print(per.pivot(index="system", columns="kind", values=e).to_string(float_format=lambda v: f"{v:.2f}"))
    if a.out:
        res.to_csv(a.out, index=False)


def decompose(d: pd.DataFrame, systems: list[str], n_splits: int, share: float, names: list[str]) -> pd.DataFrame:
    """Shape-sharing bias against the variance saved, per system × gender × rate: the model fitted
    to the *full* table minus the full table's count (its bias; sampling noise ≈ 0), and the SD over
    ``n_splits`` random A shares of counting and of the model (each against its own mean)."""
    rows = []
    for system in systems:
        t = d[d.system == system].reset_index(drop=True)
        if system == "air_ocsoftmax":
            t["score"] = -t["score"]
        tau = sm.subgroup_dcf(t, ["speaker_gender"], positive="bonafide", n_boot=0, eer=False, progress=False).threshold
        T = t.assign(pos=t["label"] == "bonafide")
        T["err"] = np.where(T.pos, T.score < tau, T.score >= tau).astype(float)
        full_c = counted(T)
        full_m = {e: ordinal_rates(T, T, tau, **VARIANTS[e]) for e in names}
        reps = {e: [] for e in ["counting"] + names}
        for k in range(n_splits):
            in_a = split(T, share, np.random.default_rng(500 + k))
            A = T[in_a]
            reps["counting"].append(counted(A))
            for e in names:
                reps[e].append(ordinal_rates(A, T[~in_a], tau, **VARIANTS[e]))
        for g in sorted(T["speaker_gender"].unique()):
            for m in ("fnr", "fpr"):
                row = {"system": system, "cell": g, "rate": m, "full": full_c[g][m],
                           "sd_counting": np.std([r[g][m] for r in reps["counting"]], ddof=1)}
                for e in names:
                    row[f"bias_{e}"] = full_m[e][g][m] - full_c[g][m]
                    row[f"sd_{e}"] = np.std([r[g][m] for r in reps[e]], ddof=1)
                rows.append(row)
        print(f"# {system}", flush=True)
    return pd.DataFrame(rows)


def sim_scores(seed: int) -> pd.DataFrame:
    """``decision_model_floor.simulate``'s table with a score per trial: s = ±(logistic noise −
    η) so that the error at threshold 0 has the simulated probability p = logit⁻¹(η) (positives
    err when s < 0, negatives when s ≥ 0); heterogeneity between speakers, attacks and
    gender × attack cells makes the genders' score distributions mixtures, not shifts."""
    t = simulate(seed)
    rng = np.random.default_rng(seed + 77)
    eta = special.logit(np.clip(t["p"].to_numpy(float), 1e-15, 1 - 1e-15))
    u = rng.logistic(size=len(t))
    pos = (t["label"] == "bonafide").to_numpy()
    # positives: error ⇔ s < 0 ⇔ u < η   (s = u − η);  negatives: error ⇔ s ≥ 0 ⇔ u ≤ η (s = η − u)
    t["score"] = np.where(pos, u - eta, eta - u)
    return t


if __name__ == "__main__":
    main()
