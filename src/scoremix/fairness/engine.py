"""Vectorised evaluation of all empirical SVEva measures for a batch of cluster weights.

Shared by :func:`scoremix.fairness.subgroup_dcf` (point estimate: all weights 1;
bootstrap: multiplicities) and the paired two-system comparison.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scoremix.metrics import CostSpec
from scoremix.resampling.intervals import quiet_runtime_warnings  # noqa: F401  (re-exported; it lives in resampling)
from scoremix.resampling.bootstrap import Population, TwoWayDesign, rocch_eer_from_rates, weighted_rates_at
from scoremix.resampling.linearize import (LOG_SE_MEASURES, CrossedVariance, StratifiedVariance, cluster_counts_at,
                                         ratio_influence)
from scoremix.fairness.subgroups import SubgroupError, Subgroups

__all__ = ["CostSpec", "Engine", "assemble_measures", "cluster_codes", "MEASURES"]

#: per-subgroup measures that get bootstrap intervals
MEASURES = ("dcf_at_overall", "min_dcf", "threshold_own", "ratio_overall", "ratio_own",
            "fpr", "fnr", "fpr_ratio", "fnr_ratio", "eer")


def cluster_codes(trials: pd.DataFrame, cluster: str, sg: Subgroups, role_code: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer cluster codes per trial, cluster labels and the stratum of each cluster.

    The stratum of a cluster is the subgroup cell of that speaker (``role_code``); a
    speaker with two different cells is an error.
    """
    if cluster not in trials.columns:
        raise SubgroupError(f"cluster/speaker column {cluster!r} not in the trial table")
    col = trials[cluster]
    if col.isna().any():
        i = int(np.flatnonzero(col.isna().to_numpy())[0])
        raise SubgroupError(f"cluster column {cluster!r} is missing in row {i}")
    codes, labels = pd.factorize(col, sort=True)
    C = len(labels)
    df = pd.DataFrame({"c": codes, "g": role_code}).drop_duplicates()
    dup = df["c"].duplicated(keep=False)
    if dup.any():
        c0 = int(df.loc[dup, "c"].iloc[0])
        cells = sorted(df.loc[df["c"] == c0, "g"].tolist())
        names = [sg.cells["subgroup"].iloc[g] if g >= 0 else "<missing>" for g in cells]
        raise SubgroupError(f"speaker {labels[c0]!r} (column {cluster!r}) has inconsistent attributes: "
                            f"it falls into subgroups {names}")
    strata = np.full(C, -1, dtype=np.int64)
    strata[df["c"].to_numpy()] = df["g"].to_numpy()
    return codes.astype(np.int64), np.asarray(labels), strata


class Engine:
    """All SVEva measures of every subgroup for a batch of cluster weights.

    Parameters
    ----------
    scores, y:
        ``(n,)`` scores and 0/1 labels of all trials (the overall population).
    clusters:
        ``(n,)`` cluster code of each trial; ``n_clusters`` clusters.
    sg:
        subgroup membership.
    cost:
        detection-cost parameters.
    strata:
        ``(C,)`` stratum (resampling subgroup) of every cluster; when given, :meth:`measures`
        also returns every measure in :data:`~scoremix.resampling.linearize.LOG_SE_MEASURES`
        evaluated at the data's thresholds (keys ``fix_<measure>``) and the speaker-cluster
        standard error of its log there (``se_log_<measure>``), the inputs of the studentised
        interval.
    two_way:
        crossed enrolment × test-speaker resampling: ``clusters`` are then the pair codes of
        :class:`~scoremix.resampling.bootstrap.TwoWayDesign` (``n_clusters`` = its ``n_pairs``),
        the weights given to :meth:`measures` are *unit* weights ``(R + T, B)`` (enrolment, then
        test speakers) turned into pair weights by ``two_way.pair_weights``, ``strata`` are the
        units' strata and the standard errors are two-way
        (:class:`~scoremix.resampling.linearize.CrossedVariance`).
    """

    def __init__(self, scores: np.ndarray, y: np.ndarray, clusters: np.ndarray, n_clusters: int,
                 sg: Subgroups, cost: CostSpec, with_eer: bool = True, strata: np.ndarray | None = None,
                 two_way: TwoWayDesign | None = None) -> None:
        self.cost = cost
        self._y = np.asarray(y)
        self._cl = np.asarray(clusters, dtype=np.int64)
        self.two_way = two_way
        self._var: StratifiedVariance | CrossedVariance | None
        if two_way is None:
            self._var = StratifiedVariance(strata) if strata is not None else None
        else:
            if int(n_clusters) != two_way.n_pairs:
                raise ValueError(f"a two-way engine needs n_clusters = {two_way.n_pairs} pairs, got {n_clusters}")
            st = None if strata is None else np.asarray(strata)
            self._var = None if st is None else CrossedVariance(two_way, st[:two_way.n_enrol], st[two_way.n_enrol:])
        self._thr0: tuple[int, list[int | None]] | None = None
        self._eer0: list[tuple[float, int] | None] | None = None
        self.sg = sg
        self.G = sg.n_groups
        self.C = int(n_clusters)
        self.with_eer = with_eer
        self.overall = Population(scores, y, clusters, n_clusters)
        self.pops: list[Population | None] = []
        for g in range(self.G):
            idx = sg.members(g)
            self.pops.append(Population(scores[idx], y[idx], clusters[idx], n_clusters) if idx.size else None)
        self._m_rank = self.overall.rank[sg.mem_trial]
        self._m_y = np.asarray(y)[sg.mem_trial]
        self._m_cl = np.asarray(clusters)[sg.mem_trial]
        self._m_g = sg.mem_group
        self._m_idx = [np.flatnonzero(self._m_g == g) for g in range(self.G)]

    @property
    def has_se(self) -> bool:
        """Whether :meth:`measures` returns the ``se_log_<measure>`` standard errors."""
        return self._var is not None

    @property
    def n_candidates(self) -> int:
        """Rows of the per-replicate count matrices (sizes the bootstrap's chunks); a two-way
        engine adds its dense pair weights."""
        n = self.overall.n_candidates + sum(p.n_candidates for p in self.pops if p is not None)
        return n if self.two_way is None else n + self.two_way.n_pairs

    def _point_thresholds(self) -> tuple[int, list[int | None]]:
        """Value indices of the point estimates' ``τ*`` and of every subgroup's own minimiser."""
        if self._thr0 is None:
            one = np.ones((self.C, 1))
            own = [int(self._min_cost(p, one)["thr_rank"][0]) if p is not None else None for p in self.pops]
            self._thr0 = (int(self._min_cost(self.overall, one)["thr_rank"][0]), own)
        return self._thr0

    def _eer_saddles(self) -> list[tuple[float, int] | None]:
        """Per subgroup, the point estimate's ROCCH saddle: ``(α̂, value index of τ̂)`` with
        ``EER = min_τ α̂·P_miss(τ) + (1−α̂)·P_fa(τ)`` attained at ``τ̂`` (None: no trials)."""
        if self._eer0 is None:
            one = np.ones((self.C, 1))
            out: list[tuple[float, int] | None] = []
            for p in self.pops:
                if p is None:
                    out.append(None)
                    continue
                pm, pf = p.counts(one).rates()
                _, alpha = rocch_eer_from_rates(pm, pf, return_alpha=True)
                al = float(alpha[0])
                if not np.isfinite(al):
                    out.append(None)
                    continue
                k = int(np.argmin(al * pm[:, 0] + (1.0 - al) * pf[:, 0]))
                out.append((al, int(p.cand[k])))
            self._eer0 = out
        return self._eer0

    def _at_fixed_thresholds(self, M: np.ndarray, U: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """For (pair) weights ``M`` and, two-way, unit weights ``U``, every measure of
        :data:`~scoremix.resampling.linearize.LOG_SE_MEASURES` evaluated at the *point estimate's* thresholds (``τ*`` of the data, and each subgroup's own
        minimiser for ``min_dcf``) as ``fix_<measure>``, and the standard error of its log as
        ``se_log_<measure>`` (see :mod:`scoremix.resampling.linearize`); arrays ``(G, B)``."""
        assert self._var is not None
        var = self._var
        if isinstance(var, CrossedVariance):
            assert U is not None
            pw = var.pair_weights(U)

            def variance(Z: np.ndarray) -> np.ndarray:
                return var(Z, U, pw)
        else:
            def variance(Z: np.ndarray) -> np.ndarray:
                return var(Z, M)

        a, b = self.cost.weights
        G, B, C = self.G, M.shape[1], self.C
        thr0, own0 = self._point_thresholds()
        tau = np.full(B, thr0)
        out = {f"{k}_{m}": np.full((G, B), np.nan) for m in LOG_SE_MEASURES for k in ("fix", "se_log")}
        fn, fp, pos, neg = cluster_counts_at(self.overall.rank, self._y, self._cl, C, tau)
        fnr_a, Jfn = ratio_influence(fn, pos, M)
        fpr_a, Jfp = ratio_influence(fp, neg, M)
        with np.errstate(invalid="ignore", divide="ignore"):
            dcf_a = a * fnr_a + b * fpr_a
            J = {"fnr": Jfn / fnr_a, "fpr": Jfp / fpr_a, "dcf": (a * Jfn + b * Jfp) / dcf_a}

        def logs(fn_g: np.ndarray, fp_g: np.ndarray, pos_g: np.ndarray, neg_g: np.ndarray) -> dict[str, np.ndarray]:
            fnr, Afn = ratio_influence(fn_g, pos_g, M)
            fpr, Afp = ratio_influence(fp_g, neg_g, M)
            with np.errstate(invalid="ignore", divide="ignore"):
                dcf = a * fnr + b * fpr
                return {"fnr": fnr, "fpr": fpr, "dcf": dcf, "A_fnr": Afn / fnr, "A_fpr": Afp / fpr,
                        "A_dcf": (a * Afn + b * Afp) / dcf, "I_fnr": Afn, "I_fpr": Afp}

        with np.errstate(invalid="ignore", divide="ignore"):
            for g in range(G):
                idx = self._m_idx[g]
                if idx.size == 0:
                    continue
                L = L_tau = logs(*cluster_counts_at(self._m_rank[idx], self._m_y[idx], self._m_cl[idx], C, tau))
                for m, v, Z in (("dcf_at_overall", L["dcf"], L["A_dcf"]), ("fpr", L["fpr"], L["A_fpr"]),
                                ("fnr", L["fnr"], L["A_fnr"]),
                                ("ratio_overall", L["dcf"] / dcf_a, L["A_dcf"] - J["dcf"]),
                                ("fpr_ratio", L["fpr"] / fpr_a, L["A_fpr"] - J["fpr"]),
                                ("fnr_ratio", L["fnr"] / fnr_a, L["A_fnr"] - J["fnr"])):
                    out[f"fix_{m}"][g] = v
                    out[f"se_log_{m}"][g] = np.sqrt(variance(Z))
                pop = self.pops[g]
                if pop is not None and own0[g] is not None:
                    L = logs(*cluster_counts_at(pop.rank, self._m_y[idx], self._m_cl[idx], C, np.full(B, own0[g])))
                    out["fix_min_dcf"][g] = L["dcf"]
                    out["se_log_min_dcf"][g] = np.sqrt(variance(L["A_dcf"]))
                    # ratio_own = minDCF_g / C_g(τ*): both read at the data's thresholds
                    out["fix_ratio_own"][g] = L["dcf"] / L_tau["dcf"]
                    out["se_log_ratio_own"][g] = np.sqrt(variance(L["A_dcf"] - L_tau["A_dcf"]))
                saddle = self._eer_saddles()[g] if self.with_eer and pop is not None else None
                if saddle is not None:
                    # EER = min_τ α̂·fnr + (1−α̂)·fpr at the data's saddle (envelope theorem in α and τ)
                    al, thr_e = saddle
                    L = logs(*cluster_counts_at(pop.rank, self._m_y[idx], self._m_cl[idx], C, np.full(B, thr_e)))
                    h = al * L["fnr"] + (1.0 - al) * L["fpr"]
                    out["fix_eer"][g] = h
                    out["se_log_eer"][g] = np.sqrt(variance((al * L["I_fnr"] + (1.0 - al) * L["I_fpr"]) / h))
        return out

    def _min_cost(self, pop: Population, M: np.ndarray):
        a, b = self.cost.weights
        cnt = pop.counts(M)
        pm, pf = cnt.rates()
        dcf = a * pm + b * pf
        bad = np.isnan(dcf).all(axis=0)
        j = np.argmin(np.where(np.isnan(dcf), np.inf, dcf), axis=0)
        cols = np.arange(dcf.shape[1])
        val = np.where(bad, np.nan, dcf[j, cols])
        out = {"min_dcf": val, "j": j, "thr": np.where(bad, np.nan, pop.thresholds[j]),
               "thr_rank": pop.cand[j], "fnr": np.where(bad, np.nan, pm[j, cols]),
               "fpr": np.where(bad, np.nan, pf[j, cols]), "n_pos": cnt.n_pos, "n_neg": cnt.n_neg}
        if self.with_eer:
            out["eer"] = rocch_eer_from_rates(pm, pf)
        return out

    def measures(self, M: np.ndarray) -> dict[str, np.ndarray]:
        """Evaluate for weights ``M`` ``(C, B)`` (two-way: unit weights ``(R + T, B)``).

        Returns a dict with overall ``(B,)`` arrays ``all_min_dcf, all_threshold, all_fpr,
        all_fnr, all_eer, fairness_index`` and per-subgroup ``(G, B)`` arrays of
        :data:`MEASURES` plus ``n_pos, n_neg, n_errors``.
        """
        U = None
        if self.two_way is not None:
            U, M = M, self.two_way.pair_weights(M)
        B = M.shape[1]
        ov = self._min_cost(self.overall, M)
        fn, fp = weighted_rates_at(self._m_rank, self._m_y, self._m_cl, self._m_g, self.G, ov["thr_rank"], M)
        res: dict[str, np.ndarray] = {
            "all_min_dcf": ov["min_dcf"], "all_threshold": ov["thr"], "all_fpr": ov["fpr"],
            "all_fnr": ov["fnr"], "all_eer": ov.get("eer", np.full(B, np.nan)),
        }
        G = self.G
        own = {k: np.full((G, B), np.nan) for k in ("min_dcf", "threshold_own", "eer", "n_pos", "n_neg")}
        own["n_pos"][:] = 0.0
        own["n_neg"][:] = 0.0
        for g, pop in enumerate(self.pops):
            if pop is None:
                continue
            o = self._min_cost(pop, M)
            own["min_dcf"][g] = o["min_dcf"]
            own["threshold_own"][g] = o["thr"]
            if self.with_eer:
                own["eer"][g] = o["eer"]
            own["n_pos"][g] = o["n_pos"]
            own["n_neg"][g] = o["n_neg"]
        res = assemble_measures(res, own, fn, fp, ov, self.cost)
        if self._var is not None:
            res.update(self._at_fixed_thresholds(M, U))
        return res


def assemble_measures(res: dict[str, np.ndarray], own: dict[str, np.ndarray], fn: np.ndarray, fp: np.ndarray,
                      ov: dict[str, np.ndarray], cost: CostSpec) -> dict[str, np.ndarray]:
    r"""The SVEva measures of every subgroup from its own minimum cost and its errors at the
    overall threshold :math:`τ^*`.

    ``own``: ``(G, B)`` ``min_dcf, threshold_own, eer, n_pos, n_neg`` of each subgroup;
    ``fn``/``fp``: ``(G, B)`` misses / false alarms at :math:`τ^*`; ``ov``: the overall
    ``min_dcf``, ``fpr``, ``fnr`` ``(B,)``; ``res``: the overall entries, completed in place
    with ``dcf_at_overall = a·fnr + b·fpr``, the ratios and the Fairness Index
    :math:`\sum_g r_g 1\{r_g > 1\}`, :math:`r_g` = ``dcf_at_overall / all_min_dcf``.
    """
    a, b = cost.weights
    with np.errstate(invalid="ignore", divide="ignore"):
        fnr = fn / own["n_pos"]
        fpr = fp / own["n_neg"]
        dcf_at = a * fnr + b * fpr
        res.update({
            "n_pos": own["n_pos"], "n_neg": own["n_neg"], "n_errors": fn + fp,
            "dcf_at_overall": dcf_at, "min_dcf": own["min_dcf"], "threshold_own": own["threshold_own"],
            "ratio_overall": dcf_at / ov["min_dcf"][None, :],
            "ratio_own": own["min_dcf"] / dcf_at,
            "fpr": fpr, "fnr": fnr,
            "fpr_ratio": fpr / ov["fpr"][None, :], "fnr_ratio": fnr / ov["fnr"][None, :],
            "eer": own["eer"],
        })
    r = res["ratio_overall"]
    res["fairness_index"] = np.where(r > 1, r, 0.0).sum(axis=0)
    return res
