r"""The rank step: distinct score values become ordered cells.

Sort the distinct response values :math:`s_{(1)} < \dots < s_{(K)}`; row ``i`` falls in
cell :math:`k(i)` when :math:`y_i = s_{(k)}`.  The likelihood depends on the scores only
through the cell indices, so any strictly increasing map of the scores (logit →
probability, ranks, ``sinh``) gives the same cells and the same fit.  Ties are rows of the
same cell; saturated scores (``±inf`` logits, probabilities of exactly 0 or 1) are simply the
end cells, whose latent intervals are open to :math:`\mp\infty`.

Each of the :math:`K-1` cell boundaries ("edges") gets a pooled normal score
:math:`u_k=\Phi^{-1}(C_k/n)` with :math:`C_k` the number of rows in cells :math:`1..k`;
the cutpoint sieve (:mod:`scoremix.transform.basis`) is a function of these ranks only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from scoremix.transform.errors import AllScoresTiedError, TooFewDistinctScoresError

__all__ = ["Cells", "make_cells"]


@dataclass
class Cells:
    """Distinct values, per-row cell index and edge normal scores.

    Attributes
    ----------
    values:
        ``(K,)`` sorted distinct scores (may include ``±inf``).
    counts:
        ``(K,)`` number of rows per cell.
    code:
        ``(n,)`` cell index ``0 … K-1`` of every row.
    u_edge:
        ``(K-1,)`` normal score of the upper edge of cells ``1 … K-1``.
    u_row:
        ``(n,)`` mid-rank normal score of every row (starting values only).
    """

    values: np.ndarray
    counts: np.ndarray
    code: np.ndarray
    u_edge: np.ndarray
    u_row: np.ndarray

    @property
    def K(self) -> int:
        return int(self.values.size)


def make_cells(y: np.ndarray, response: str = "response", min_distinct: int = 3) -> Cells:
    """Cells of the response ``y`` (no NaN; the model frame has removed them).

    ``min_distinct``: fewest distinct values accepted (3 for a transformation model; a stratum of a
    stratified model may have 1 — a point mass, its single cell spanning the whole latent line — or 2).

    Raises
    ------
    AllScoresTiedError
        every value of ``response`` is the same.
    TooFewDistinctScoresError
        ``response`` has only two distinct values.
    """
    y = np.asarray(y, dtype=np.float64)
    if np.isnan(y).any():
        raise ValueError(f"{response!r} contains NaN; the model frame should have removed it")
    values, code, counts = np.unique(y, return_inverse=True, return_counts=True)
    K = values.size
    if K == 1 and min_distinct > 1:
        raise AllScoresTiedError(
            f"all {y.size} values of {response!r} are tied ({values[0]!r}); a transformation "
            "model needs at least three distinct scores")
    if K < min_distinct:
        raise TooFewDistinctScoresError(
            f"{response!r} has only {K} distinct values ({values.tolist()}); a transformation "
            "model needs at least three distinct scores (with two, the transform is a relabelling "
            "and the model is a probit regression: fit that instead)")
    n = y.size
    cum = np.cumsum(counts)
    u_edge = ndtri(cum[:-1] / n)
    mid = (cum - counts / 2.0) / n
    u_row = ndtri(mid)[code]
    return Cells(values=values, counts=counts, code=code.astype(np.int64), u_edge=u_edge,
                 u_row=u_row)
