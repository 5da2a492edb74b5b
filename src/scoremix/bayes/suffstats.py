r"""Blocked sufficient statistics of a linear mixed model for the Bayesian backends.

For a :class:`~scoremix.lme.spec.ModelSpec` with random terms ``1 … K`` write the
design of row ``i`` as

.. math::

    c_i = [\, z_{1,i} \;|\; r_i \,],\qquad r_i = [\, z_{2,i}, …, z_{K,i},\; x_i,\; y_i \,]
    \in \mathbb{R}^m,

where ``z_{1,i}`` are the columns of the first random term (the one with the most levels,
lme4's order) and the "rest" vector ``r_i`` holds the other random-effect columns, the
fixed-effects row and the response (last).  Everything a Gaussian likelihood needs is the
weighted cross-product :math:`\sum_i w_i c_i c_i^\top`, which splits into

* ``D[l, j] = Σ_{i: g1(i)=j, disp(i)=l} w_i x_{1,i} x_{1,i}^⊤`` — ``(L, n_1, p_1, p_1)``:
  the block-diagonal part of ``Z_1^⊤ W Z_1`` (one ``p_1 × p_1`` block per level),
* ``B[l, j] = Σ_{i: g1(i)=j, disp(i)=l} w_i x_{1,i} r_i^⊤`` — ``(L, n_1, p_1, m)``,
* ``A[l] = Σ_{i: disp(i)=l} w_i r_i r_i^⊤`` — ``(L, m, m)``,

one slice per dispersion level ``l`` (``L = 1`` for a homoscedastic model), plus the row
counts ``n_l`` and ``Σ log w_i`` per level.  None of these grows with the number of rows,
so a likelihood evaluated from them costs ``O(n_1 p_1^3 + n_1 p_1 m^2 + m^3)`` whatever
``N`` is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from scoremix.bayes.reprosum import FoldedStats, spec_folded_stats, unfold

__all__ = ["BlockedSuffStats", "blocked_suffstats", "blocked_suffstats_sparse", "suffstats_from_folded",
           "term_design"]


@dataclass
class BlockedSuffStats:
    """Weighted cross-products of ``[Z_1 | Z_2 … Z_K X y]`` in blocked form.

    Attributes
    ----------
    D, B, A:
        see the module docstring; ``D``/``B`` have ``n_1 = 0`` when the model has no
        random term.
    n_by:
        ``(L,)`` number of rows per dispersion level.
    sum_log_w:
        ``Σ_i log w_i`` over all rows (0 without weights).
    n1, p1:
        levels and columns of the first random term (0, 0 without random terms).
    rest_slices:
        for terms ``2 … K``: ``(start, n_levels, p)`` of each term's columns inside
        ``r`` (level-major: column ``start + j*p + a`` is level ``j``, term column ``a``).
    x_start, p:
        position and number of the fixed-effects columns inside ``r``.
    m:
        length of ``r`` (``y`` is its last entry).
    """

    D: np.ndarray
    B: np.ndarray
    A: np.ndarray
    n_by: np.ndarray
    sum_log_w: float
    n1: int
    p1: int
    rest_slices: list[tuple[int, int, int]]
    x_start: int
    p: int
    m: int

    @property
    def n(self) -> int:
        return int(self.n_by.sum())

    @property
    def n_disp(self) -> int:
        return int(self.n_by.shape[0])

    def shift_response(self, offset_beta: np.ndarray) -> "BlockedSuffStats":
        """Statistics of ``y - X m0`` (a Gaussian prior mean ``m0`` on β moved into y).

        ``r̃ = M r`` with ``M`` the identity except ``M[y, x-cols] = -m0``, so
        ``Ã = M A M^⊤`` and ``B̃ = B M^⊤``.
        """
        m0 = np.asarray(offset_beta, dtype=np.float64)
        if not np.any(m0):
            return self
        M = np.eye(self.m)
        M[self.m - 1, self.x_start:self.x_start + self.p] = -m0
        A = np.einsum("ab,lbc,dc->lad", M, self.A, M)
        B = np.einsum("ljkb,cb->ljkc", self.B, M)
        return BlockedSuffStats(self.D, B, A, self.n_by, self.sum_log_w, self.n1, self.p1,
                                self.rest_slices, self.x_start, self.p, self.m)


def term_design(codes: np.ndarray, X: np.ndarray, n_levels: int) -> sp.csr_matrix:
    """Sparse ``Z_k`` (``n × n_levels·p``, level-major columns) of one random term.

    Row ``i`` has ``X[i, a]`` in column ``codes[i]*p + a``.
    """
    n, p = X.shape
    rows = np.repeat(np.arange(n), p)
    cols = (codes[:, None] * p + np.arange(p)[None, :]).ravel()
    return sp.csr_matrix((X.ravel(), (rows, cols)), shape=(n, n_levels * p))


def blocked_suffstats(spec) -> BlockedSuffStats:
    """Compute :class:`BlockedSuffStats` of a :class:`~scoremix.lme.spec.ModelSpec`.

    Uses the spec's prior ``weights`` (all ones when ``None``) and its
    ``dispersion_codes`` (one dispersion level when ``None``).  Every sum is reproducible
    (:mod:`scoremix.bayes.reprosum`): the same rows give bit-identical statistics however
    they are ordered or split, so a fit on Dask partitions samples exactly the in-memory
    posterior for the same seed.  A spec without rows (Dask input,
    :class:`scoremix.distributed.spec.DaskModelSpec`) brings its fold sums, merged over
    partitions, as ``spec.folded``.  A model without random terms uses
    :func:`blocked_suffstats_sparse`.
    """
    if not spec.terms:
        return blocked_suffstats_sparse(spec)
    fs = getattr(spec, "folded", None)
    if fs is None:
        fs = spec_folded_stats(spec)
    return suffstats_from_folded(fs, [t.n_levels for t in spec.terms], [t.p for t in spec.terms],
                                 spec.p, spec.weights is not None or getattr(spec, "has_weights", False))


def suffstats_from_folded(fs: FoldedStats, term_nlev: list[int], term_p: list[int], p: int,
                          weighted: bool) -> BlockedSuffStats:
    """:class:`BlockedSuffStats` from exact fold sums (:class:`~scoremix.bayes.reprosum.FoldedStats`)."""
    rest_slices = []
    start = 0
    for nl, pk in zip(term_nlev[1:], term_p[1:]):
        rest_slices.append((start, nl, pk))
        start += nl * pk
    m = fs.A.shape[1]
    return BlockedSuffStats(unfold(fs.D), unfold(fs.B), unfold(fs.A),
                            np.asarray(fs.n_by, dtype=np.float64),
                            float(unfold(fs.logw)[()]) if weighted else 0.0,
                            term_nlev[0], term_p[0], rest_slices, start, p, m)


def blocked_suffstats_sparse(spec) -> BlockedSuffStats:
    """:class:`BlockedSuffStats` computed here with ``scipy.sparse`` products (also the
    independent cross-check of the engine's cross-products in the tests)."""
    n = spec.n
    y = np.asarray(spec.y, dtype=np.float64)
    X = np.asarray(spec.X, dtype=np.float64)
    w = np.ones(n) if spec.weights is None else np.asarray(spec.weights, dtype=np.float64)
    if np.any(~np.isfinite(w)) or np.any(w <= 0):
        bad = int(np.flatnonzero(~(np.isfinite(w) & (w > 0)))[0])
        raise ValueError(f"weights must be positive and finite; row {bad} has weight {w[bad]!r}")
    if spec.dispersion_codes is None:
        dcodes = np.zeros(n, dtype=np.int64)
        n_disp = 1
    else:
        dcodes = np.asarray(spec.dispersion_codes, dtype=np.int64)
        n_disp = len(spec.dispersion_levels)

    terms = list(spec.terms)
    rest_parts: list[sp.spmatrix] = []
    rest_slices: list[tuple[int, int, int]] = []
    start = 0
    for t in terms[1:]:
        Zk = term_design(np.asarray(t.codes), np.asarray(t.X, dtype=np.float64), t.n_levels)
        rest_parts.append(Zk)
        rest_slices.append((start, t.n_levels, t.p))
        start += t.n_levels * t.p
    x_start = start
    p = X.shape[1]
    rest_parts.append(sp.csr_matrix(np.column_stack([X, y])))
    R = sp.hstack(rest_parts, format="csr")
    m = R.shape[1]

    if terms:
        t1 = terms[0]
        n1, p1 = t1.n_levels, t1.p
        X1 = np.asarray(t1.X, dtype=np.float64)
        c1 = np.asarray(t1.codes, dtype=np.int64)
    else:
        n1, p1 = 0, 0
    D = np.zeros((n_disp, n1, p1, p1))
    B = np.zeros((n_disp, n1, p1, m))
    A = np.zeros((n_disp, m, m))
    n_by = np.zeros(n_disp)
    for lvl in range(n_disp):
        rows = np.flatnonzero(dcodes == lvl)
        n_by[lvl] = rows.size
        wl = w[rows]
        Rl = R[rows]
        A[lvl] = (Rl.T @ Rl.multiply(wl[:, None])).toarray()
        if n1:
            xw = X1[rows] * wl[:, None]
            Z1w = term_design(c1[rows], xw, n1)  # rows of Z1 scaled by w
            # D: per-level sums of w x x'
            c1r, X1r = c1[rows], X1[rows]
            for a in range(p1):
                for b in range(p1):
                    D[lvl, :, a, b] = np.bincount(c1r, weights=X1r[:, a] * xw[:, b], minlength=n1)
            B[lvl] = np.asarray((Z1w.T @ Rl).todense()).reshape(n1, p1, m)
    return BlockedSuffStats(D, B, A, n_by, float(np.log(w).sum()), n1, p1, rest_slices, x_start, p, m)
