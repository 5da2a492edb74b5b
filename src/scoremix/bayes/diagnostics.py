"""Convergence diagnostics of a posterior sample and the warning gate run after sampling.

Thresholds (Vehtari et al. 2021, Stan's defaults): R-hat ≤ 1.01, bulk and tail ESS ≥ 400,
no divergent transitions, the maximum tree depth never reached.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["BayesConvergenceWarning", "Diagnostics", "diagnose", "RHAT_MAX", "ESS_MIN"]

RHAT_MAX = 1.01
ESS_MIN = 400.0


class BayesConvergenceWarning(UserWarning):
    """The sampler's output fails a convergence check (R-hat, ESS, divergences, tree depth)."""


@dataclass
class Diagnostics:
    """Per-parameter R-hat/ESS table and sampler-level counts.

    Attributes
    ----------
    table:
        ``DataFrame`` indexed by parameter with ``r_hat``, ``ess_bulk``, ``ess_tail``.
    n_divergent:
        divergent transitions after warm-up (all chains).
    n_max_treedepth:
        transitions that hit the maximum tree depth.
    n_draws:
        total post-warm-up draws.
    problems:
        human-readable list of failed checks with advice (empty when all pass).
    """

    table: pd.DataFrame
    n_divergent: int
    n_max_treedepth: int
    n_draws: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def max_rhat(self) -> float:
        return float(np.nanmax(self.table["r_hat"])) if len(self.table) else float("nan")

    @property
    def min_ess_bulk(self) -> float:
        return float(np.nanmin(self.table["ess_bulk"])) if len(self.table) else float("nan")

    @property
    def min_ess_tail(self) -> float:
        return float(np.nanmin(self.table["ess_tail"])) if len(self.table) else float("nan")

    def __repr__(self) -> str:
        status = "OK" if self.ok else "PROBLEMS: " + " | ".join(self.problems)
        return (f"Diagnostics(max R-hat={self.max_rhat:.4f}, min bulk ESS={self.min_ess_bulk:.0f}, "
                f"min tail ESS={self.min_ess_tail:.0f}, divergences={self.n_divergent}, "
                f"max-treedepth hits={self.n_max_treedepth}; {status})")


def _stat(ss, *names):
    for n in names:
        if ss is not None and n in ss:
            return np.asarray(ss[n].values)
    return None


def diagnose(idata, var_names: list[str], max_treedepth: int = 10) -> Diagnostics:
    """Compute :class:`Diagnostics` for the scalar parameters ``var_names``."""
    import arviz as az

    post = idata.posterior
    rows = []
    for v in var_names:
        da = np.asarray(post[v].values, dtype=np.float64)
        rows.append((v, float(az.rhat(da)), float(az.ess(da, method="bulk")),
                     float(az.ess(da, method="tail"))))
    table = pd.DataFrame(rows, columns=["parameter", "r_hat", "ess_bulk", "ess_tail"]).set_index("parameter")
    ss = getattr(idata, "sample_stats", None)
    div = _stat(ss, "diverging", "divergences")
    n_div = int(np.sum(div)) if div is not None else 0
    hit = _stat(ss, "reached_max_treedepth", "maxdepth_reached")
    if hit is None:
        depth = _stat(ss, "tree_depth", "depth")
        hit = (depth >= max_treedepth) if depth is not None else np.zeros(1, bool)
    n_hit = int(np.sum(hit))
    n_draws = int(post.sizes["chain"] * post.sizes["draw"])
    probs = []
    if post.sizes["chain"] < 2:
        probs.append("only one chain: R-hat cannot detect non-convergence; run chains >= 4")
    bad = table.index[table["r_hat"] > RHAT_MAX].tolist()
    if bad:
        probs.append(f"R-hat > {RHAT_MAX} for {bad} (max {table['r_hat'].max():.3f}): chains disagree; "
                     f"increase tune/draws, check priors and identifiability")
    low_b = table.index[table["ess_bulk"] < ESS_MIN].tolist()
    if low_b:
        probs.append(f"bulk ESS < {ESS_MIN:.0f} for {low_b} (min {table['ess_bulk'].min():.0f}): "
                     f"increase draws (or chains); posterior means are imprecise")
    low_t = table.index[table["ess_tail"] < ESS_MIN].tolist()
    if low_t:
        probs.append(f"tail ESS < {ESS_MIN:.0f} for {low_t} (min {table['ess_tail'].min():.0f}): "
                     f"increase draws; interval end points are imprecise")
    if n_div:
        probs.append(f"{n_div} divergent transitions: raise target_accept (e.g. 0.95), use the "
                     f"collapsed method, or reparameterise (centred/non-centred)")
    if n_hit:
        probs.append(f"{n_hit} transitions hit the maximum tree depth {max_treedepth}: the posterior is "
                     f"badly scaled or correlated; rescale predictors or raise max_treedepth")
    return Diagnostics(table, n_div, n_hit, n_draws, probs)


def gate(diag: Diagnostics) -> None:
    """Emit one :class:`BayesConvergenceWarning` per failed check."""
    for p in diag.problems:
        warnings.warn(p, BayesConvergenceWarning, stacklevel=3)
