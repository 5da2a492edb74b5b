r"""Sufficient statistics of a binomial or Poisson GLMM: one cell per covariate pattern.

The conditional log-likelihood of a GLMM depends on row :math:`i` only through its linear
predictor :math:`\eta_i = o_i + x_i^\top\beta + \sum_k z_{k,i}^\top b_{k,g_k(i)}`.  Rows with
the same ``(x_i, o_i, g_k(i), z_{k,i})`` — a *cell* :math:`c` — share :math:`\eta_c`, and

* binomial (prior weight :math:`w_i`, proportion :math:`y_i`; for ``cbind`` or 0/1 rows
  :math:`w_i y_i` and :math:`w_i(1-y_i)` are the successes and failures):

  .. math::

      \sum_{i\in c} w_i\{y_i\log\mu_c + (1-y_i)\log(1-\mu_c)\}
      = K_c\log\mu_c + F_c\log(1-\mu_c),\qquad
      K_c = \textstyle\sum_{i\in c} w_iy_i,\ F_c = \sum_{i\in c} w_i(1-y_i);

* Poisson: :math:`\sum_{i\in c} w_i\{y_i\log\mu_c - \mu_c\} = Y_c\log\mu_c - W_c\mu_c`,
  :math:`Y_c = \sum w_iy_i`, :math:`W_c = \sum w_i`;

up to a constant that does not involve the parameters (:math:`\sum_i \log\binom{m_i}{k_i}`,
:math:`-\sum_i w_i\log y_i!`).  The sampler therefore works on the cells (e.g. a 20,000-row
decision table with 100 speakers × 2 classes × 2 subgroups has at most 400 cells) and gets
exactly the posterior of the rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["GlmmCells", "aggregate_cells"]


@dataclass
class GlmmCells:
    """The cells of a GLMM: design of one representative row each and the summed counts.

    ``X`` ``(C, p)``, ``offset`` ``(C,)``, per term ``codes`` ``(C,)`` and ``Z`` ``(C, p_k)``;
    ``k``/``f`` the summed successes / failures (binomial) or ``k`` = :math:`Y_c`,
    ``f`` = :math:`W_c` (Poisson); ``row_cell`` maps every row to its cell.
    """

    X: np.ndarray
    offset: np.ndarray
    codes: list[np.ndarray]
    Z: list[np.ndarray]
    k: np.ndarray
    f: np.ndarray
    row_cell: np.ndarray

    @property
    def n_cells(self) -> int:
        return int(self.X.shape[0])


def aggregate_cells(X: np.ndarray, offset: np.ndarray, codes: list[np.ndarray], Z: list[np.ndarray],
                    y: np.ndarray, w: np.ndarray, family: str) -> GlmmCells:
    """Group the rows by ``(X, offset, codes, Z)`` (hashing, O(n)) and sum the counts of
    the module docstring."""
    cols = [np.asarray(X, float), np.asarray(offset, float)[:, None]]
    for c, z in zip(codes, Z):
        cols.append(np.asarray(c, float)[:, None])
        cols.append(np.asarray(z, float))
    key = pd.DataFrame(np.hstack(cols))
    n = key.shape[0]
    if n == 0:
        raise ValueError("no rows to fit")
    inv = key.groupby(list(key.columns), sort=False).ngroup().to_numpy()
    nc = int(inv.max()) + 1
    first = np.full(nc, -1)
    first[inv[::-1]] = np.arange(n)[::-1]
    wy = w * y
    k = np.bincount(inv, weights=wy, minlength=nc)
    if family == "binomial":
        f = np.bincount(inv, weights=w - wy, minlength=nc)
    else:
        f = np.bincount(inv, weights=w, minlength=nc)
    return GlmmCells(X=np.asarray(X, float)[first], offset=np.asarray(offset, float)[first],
                     codes=[np.asarray(c, np.int64)[first] for c in codes],
                     Z=[np.asarray(z, float)[first] for z in Z], k=k, f=f, row_cell=inv)
