"""Supernodal sparse Cholesky of the rest block ``S = Λ_r'(A_rr − A_r1 D A_r1')Λ_r + I_q``.

The rest block of :mod:`scoremix.lme.factor` (rows ``[Z_2 … Z_K X y]`` after term 1 has been
eliminated) is dense storage, but for two large partially crossed factors (InstEval's
students × lecturers) its Cholesky factor is sparse under a fill-reducing order.  As in
CHOLMOD (Chen, Davis, Hager & Rajamanickam 2008, *ACM TOMS* 35(3)) and MixedModels.jl's
blocked factor, the work is split into

* a **symbolic** phase, once per model (:func:`analyse`): a minimum-degree order of the
  ``Z`` rows (George & Liu 1989, *SIAM Review* 31(1); the ``X``, ``y`` rows stay last so that
  ``log|R_X|²`` and ``r_θ²`` are read from the factor's diagonal as in the dense factor), the
  pattern of ``L`` (recorded while eliminating), the elimination tree, its postorder and
  relaxed supernodes (chains of columns that share one row pattern);
* a **numeric** phase per ``θ`` (:func:`factor_numeric`): a right-looking supernodal
  factorisation on a dense ``m × m`` work array in the permuted order — each supernode is a
  dense Cholesky of its diagonal block, a triangular solve of its panel and a rank-``n_c``
  update ``P P'`` scattered into the later columns (BLAS through numba's ``np.dot``);
* from the factor: ``log`` determinants (its diagonal), triangular solves
  (:func:`solve_lt`) and the **selected inverse** ``Z = S^{-1}`` on the pattern of ``L``
  (:func:`selected_inverse`, Takahashi, Fagan & Chen 1973; Erisman & Tinney 1975):
  processing supernodes last to first,

  .. math::

      Z_{RJ} = -Z_{RR}\\,L_{RJ}L_{JJ}^{-1},\\qquad
      Z_{JJ} = L_{JJ}^{-T}L_{JJ}^{-1} - (L_{RJ}L_{JJ}^{-1})'Z_{RJ},

  where ``R`` is the supernode's row pattern below its columns ``J``; ``R × R`` lies in the
  pattern of ``L`` (the supernodal closure), so only entries on the pattern are ever read.

The kernels are compiled with numba (``@njit(cache=True)``).  Without numba
(:data:`AVAILABLE` is ``False``) :mod:`scoremix.lme.factor` keeps its dense LAPACK path.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

try:  # numba is a dependency, but the package must work without it (dense path)
    from numba import njit as _njit
    AVAILABLE = True
except Exception:  # pragma: no cover - exercised by monkeypatching AVAILABLE in tests
    AVAILABLE = False

    def _njit(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

__all__ = ["AVAILABLE", "RestSymbolic", "SelectedInverse", "analyse", "assemble", "rest_pattern",
           "downdate_lower", "factor_numeric", "solve_lt", "selected_inverse",
           "min_degree_order"]

#: the sparse factor is used only when the analysed flops are at most this share of the
#: dense Cholesky's ``m³/3``
MAX_FLOP_SHARE = 0.6
#: and only for Z blocks of at least this size (below, dense LAPACK wins)
MIN_SIZE = 400
#: and at most this size (the analysis keeps ``m × m`` index maps, as the dense rest block)
MAX_SIZE = 10_000


@dataclass
class RestSymbolic:
    """Symbolic analysis of the rest block (see the module docstring).

    ``perm[i]``: the original row of permuted row ``i`` (``Z`` rows in minimum-degree and
    postorder, then the ``X, y`` rows in their order); ``iperm`` its inverse.  Supernode
    ``J`` has columns ``sn_start[J] … sn_start[J+1]-1`` and rows
    ``sn_rows[sn_ptr[J]:sn_ptr[J+1]]`` (its columns first, then the sorted rows below).
    ``nnz``: entries of the (relaxed) supernodal ``L``; ``flops``: ``Σ_j c_j²`` over its
    column counts ``c_j``.
    """

    m: int
    qz: int
    perm: np.ndarray
    iperm: np.ndarray
    sn_start: np.ndarray
    sn_ptr: np.ndarray
    sn_rows: np.ndarray
    nnz: int
    flops: float
    #: per-model caches (layout of Λ, CSC copies of A_r1) filled by the callers
    extra: dict = field(default_factory=dict, repr=False)

    def __getstate__(self) -> dict:
        # the m × m work arrays (see :func:`workspace`) are scratch, not state
        state = dict(self.__dict__)
        state["extra"] = {k: v for k, v in self.extra.items() if not _scratch(k)}
        return state

    def release_workspaces(self) -> None:
        """Drop the ``m × m`` work arrays of :func:`workspace` and the last factor kept by
        :func:`scoremix.lme.factor.factorize` (made again when needed)."""
        for k in [k for k in self.extra if _scratch(k)]:
            del self.extra[k]

    @property
    def n_supernodes(self) -> int:
        return int(self.sn_start.size - 1)

    def dense_flops(self) -> float:
        return self.m ** 3 / 3.0


def _scratch(key: str) -> bool:
    """Whether ``RestSymbolic.extra[key]`` is scratch (work arrays, the last factor)."""
    return key.startswith("work_") or key == "last_factor"


# --------------------------------------------------------------------------- symbolic phase

@_njit(cache=True)
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@_njit(cache=True)
def _md_kernel(indptr, indices, n):
    """Minimum-degree elimination on a bit-packed elimination graph; returns the order
    and, per eliminated vertex, its neighbours at elimination (the pattern of ``L``)."""
    W = (n + 63) // 64
    B = np.zeros((n, W), dtype=np.uint64)
    one = np.uint64(1)
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j != i:
                B[i, j >> 6] |= one << np.uint64(j & 63)
                B[j, i >> 6] |= one << np.uint64(i & 63)
    deg = np.zeros(n, dtype=np.int64)
    for i in range(n):
        c = 0
        for w in range(W):
            c += _popcount(B[i, w])
        deg[i] = c
    alive = np.ones(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    cap = 4 * n + 16
    rows = np.empty(cap, dtype=np.int64)
    nb = np.empty(n, dtype=np.int64)
    for step in range(n):
        v = -1
        best = n + 1
        for i in range(n):
            if alive[i] and deg[i] < best:
                best = deg[i]
                v = i
        order[step] = v
        alive[v] = False
        k = 0
        for w in range(W):
            x = B[v, w]
            while x != 0:
                t = x & (~x + one)
                b = int(_popcount(t - one))
                nb[k] = (w << 6) + b
                k += 1
                x ^= t
        if ptr[step] + k > cap:
            while ptr[step] + k > cap:
                cap *= 2
            new = np.empty(cap, dtype=np.int64)
            new[:ptr[step]] = rows[:ptr[step]]
            rows = new
        for a in range(k):
            rows[ptr[step] + a] = nb[a]
        ptr[step + 1] = ptr[step] + k
        vw, vb = v >> 6, one << np.uint64(v & 63)
        for a in range(k):
            u = nb[a]
            c = 0
            for w in range(W):
                x = B[u, w] | B[v, w]
                if w == vw:
                    x &= ~vb
                if w == (u >> 6):
                    x &= ~(one << np.uint64(u & 63))
                B[u, w] = x
                c += _popcount(x)
            deg[u] = c
    return order, ptr, rows[:ptr[n]]


def min_degree_order(pattern) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimum-degree order of a symmetric sparsity pattern (scipy sparse, square) and the
    pattern of its Cholesky factor: ``(order, ptr, rows)`` with the original labels of
    column ``j``'s sub-diagonal rows in ``rows[ptr[j]:ptr[j+1]]``."""
    import scipy.sparse as sp
    P = sp.csr_matrix(pattern)
    n = P.shape[0]
    return _md_kernel(P.indptr.astype(np.int64), P.indices.astype(np.int64), n)


@_njit(cache=True)
def _rest_pattern_kernel(Arr, qz, indptr, indices, level0, pos, bsz):
    """The symmetric pattern (CSR, sorted, diagonal included) of the ``qz`` ``Z`` rows of
    the rest block, see :func:`rest_pattern`: ``Arr`` ``(D, m, m)``, the CSC pattern
    ``indptr, indices`` of ``A_r1`` (the union over the dispersion levels), per row its
    level's first row ``level0``, its position in the level ``pos`` and the level size
    ``bsz``."""
    B = np.zeros((qz, qz), dtype=np.bool_)
    D = Arr.shape[0]
    # the non-zeros of W = A_rr − A_r1 D A_r1' (lower triangle), closed through
    # Λ = I ⊗ T_k (T_k lower triangular: row r of a level collects rows r' ≥ r)
    for i in range(qz):
        for j in range(i + 1):
            nz = False
            for d in range(D):
                if Arr[d, i, j] != 0.0:
                    nz = True
                    break
            if nz:
                for da in range(pos[i] + 1):
                    for db in range(pos[j] + 1):
                        B[i - da, j - db] = True
                        B[j - db, i - da] = True
    for s in range(indptr.size - 1):
        for a in range(indptr[s], indptr[s + 1]):
            ia = indices[a]
            if ia >= qz:
                continue
            for b in range(indptr[s], a + 1):
                ib = indices[b]
                if ib >= qz:
                    continue
                for da in range(pos[ia] + 1):
                    for db in range(pos[ib] + 1):
                        B[ia - da, ib - db] = True
                        B[ib - db, ia - da] = True
    # every within-level block
    for i in range(qz):
        for j in range(level0[i], level0[i] + bsz[i]):
            B[i, j] = True
    ptr = np.zeros(qz + 1, dtype=np.int64)
    for i in range(qz):
        c = 0
        for j in range(qz):
            if B[i, j]:
                c += 1
        ptr[i + 1] = ptr[i] + c
    idx = np.empty(ptr[qz], dtype=np.int64)
    k = 0
    for i in range(qz):
        for j in range(qz):
            if B[i, j]:
                idx[k] = j
                k += 1
    return ptr, idx


def rest_pattern(Arr: np.ndarray, A_csc: list, qz: int, term_p, term_nlev):
    """The sparsity pattern (scipy CSR, ``qz × qz``) of the ``Z`` rows of the Schur
    complement ``Λ'(Σ_d A_rr,d − A_r1 D A_r1')Λ + I`` for every ``θ``: the non-zeros of
    ``A_rr`` (any dispersion level ``d``) and the row pairs coupled by a column of
    ``A_r1`` (any ``d``), closed over ``Λ_k = I ⊗ T_k`` (``T_k`` lower triangular: row
    ``a`` of a level collects the rows ``a' ≥ a``), plus every within-level block.

    ``A_csc``: the ``A_r1`` of each dispersion level as scipy sparse (rows: the ``m`` rest
    rows).  One compiled pass over ``A_rr``'s lower triangle and ``A_r1``'s row pairs."""
    import scipy.sparse as sp
    level0 = np.arange(qz, dtype=np.int64)
    pos = np.zeros(qz, dtype=np.int64)
    bsz = np.ones(qz, dtype=np.int64)
    start = 0
    for pk, nk in zip(term_p[1:], term_nlev[1:]):
        idx = start + np.arange(nk * pk)
        level0[idx] = start + (np.arange(nk * pk) // pk) * pk
        pos[idx] = np.arange(nk * pk) % pk
        bsz[idx] = pk
        start += nk * pk
    # the union over the dispersion levels: a column couples rows of different levels too
    A = sp.csc_matrix(A_csc[0]) if len(A_csc) == 1 else sp.csc_matrix(
        sum(abs(sp.csc_matrix(a)) for a in A_csc))
    ptr, idx = _rest_pattern_kernel(np.ascontiguousarray(Arr), qz, A.indptr.astype(np.int64),
                                    A.indices.astype(np.int64), level0, pos, bsz)
    return sp.csr_matrix((np.ones(idx.size, dtype=bool), idx, ptr), shape=(qz, qz))


def _postorder(parent: np.ndarray) -> np.ndarray:
    n = parent.size
    children: list[list[int]] = [[] for _ in range(n)]
    roots = []
    for j in range(n):
        (children[parent[j]] if parent[j] >= 0 else roots).append(j)
    post = np.empty(n, dtype=np.int64)
    k = 0
    stack: list[tuple[int, int]] = [(r, 0) for r in reversed(roots)]
    while stack:
        v, i = stack.pop()
        if i < len(children[v]):
            stack.append((v, i + 1))
            stack.append((children[v][i], 0))
        else:
            post[k] = v
            k += 1
    return post


@_njit(cache=True)
def _analyse_kernel(order, ptr, rows, qz, m, relax):
    """The steps of :func:`analyse` after the minimum-degree elimination (see there)."""
    pos = np.empty(qz, dtype=np.int64)
    for k in range(qz):
        pos[order[k]] = k
    # column j (elimination step j): its rows in elimination labels, sorted
    c1 = np.empty(ptr[qz], dtype=np.int64)
    parent = np.full(qz, -1, dtype=np.int64)
    for j in range(qz):
        for p in range(ptr[j], ptr[j + 1]):
            c1[p] = pos[rows[p]]
        if ptr[j + 1] > ptr[j]:
            c1[ptr[j]:ptr[j + 1]] = np.sort(c1[ptr[j]:ptr[j + 1]])
            parent[j] = c1[ptr[j]]
    # postorder of the elimination tree: children in increasing order, roots likewise
    nch = np.zeros(qz + 1, dtype=np.int64)
    for j in range(qz):
        if parent[j] >= 0:
            nch[parent[j] + 1] += 1
    for j in range(qz):
        nch[j + 1] += nch[j]
    ch = np.empty(max(nch[qz], 1), dtype=np.int64)
    fill = nch[:qz].copy()
    nroot = 0
    for j in range(qz):
        if parent[j] >= 0:
            ch[fill[parent[j]]] = j
            fill[parent[j]] += 1
        else:
            nroot += 1
    roots = np.empty(nroot, dtype=np.int64)
    r = 0
    for j in range(qz):
        if parent[j] < 0:
            roots[r] = j
            r += 1
    post = np.empty(qz, dtype=np.int64)
    sv = np.empty(qz + 1, dtype=np.int64)
    si = np.empty(qz + 1, dtype=np.int64)
    k = 0
    for r in range(nroot):
        top = 0
        sv[0] = roots[r]
        si[0] = 0
        while top >= 0:
            v = sv[top]
            i = si[top]
            if i < nch[v + 1] - nch[v]:
                si[top] = i + 1
                top += 1
                sv[top] = ch[nch[v] + i]
                si[top] = 0
            else:
                post[k] = v
                k += 1
                top -= 1
    rank = np.empty(qz, dtype=np.int64)
    for k in range(qz):
        rank[post[k]] = k
    # columns in postorder, rows relabelled and sorted, then the X, y rows (dense)
    tail = m - qz
    cptr = np.zeros(m + 1, dtype=np.int64)
    for k in range(qz):
        j = post[k]
        cptr[k + 1] = cptr[k] + ptr[j + 1] - ptr[j] + tail
    for j in range(qz, m):
        cptr[j + 1] = cptr[j] + m - 1 - j
    cols = np.empty(cptr[m], dtype=np.int64)
    for k in range(qz):
        j = post[k]
        n0 = ptr[j + 1] - ptr[j]
        q = cptr[k]
        for p in range(n0):
            cols[q + p] = rank[c1[ptr[j] + p]]
        if n0 > 1:
            cols[q:q + n0] = np.sort(cols[q:q + n0])
        for t in range(tail):
            cols[q + n0 + t] = qz + t
    for j in range(qz, m):
        for t in range(m - 1 - j):
            cols[cptr[j] + t] = j + 1 + t
    perm = np.empty(m, dtype=np.int64)
    for k in range(qz):
        perm[k] = order[post[k]]
    for j in range(qz, m):
        perm[j] = j
    cnt = np.empty(m, dtype=np.int64)
    par = np.empty(m, dtype=np.int64)
    for j in range(m):
        cnt[j] = cptr[j + 1] - cptr[j]
        par[j] = cols[cptr[j]] if cnt[j] > 0 else -1
    # relaxed supernodes: extend the current one with column j when j-1's parent is j
    starts = np.empty(m + 1, dtype=np.int64)
    ns = 1
    starts[0] = 0
    ent = cnt[0] + 1      # true entries of the current supernode
    for j in range(1, m):
        c0 = starts[ns - 1]
        nc = j - c0 + 1
        if par[j - 1] == j:
            tot = nc * (nc + 1) // 2 + nc * cnt[j]
            new_ent = ent + cnt[j] + 1
            if tot - new_ent <= relax * tot or (cnt[j - 1] == cnt[j] + 1 and tot == new_ent):
                ent = new_ent
                continue
        starts[ns] = j
        ns += 1
        ent = cnt[j] + 1
    starts[ns] = m
    sn_start = starts[:ns + 1].copy()
    sn_ptr = np.zeros(ns + 1, dtype=np.int64)
    for J in range(ns):
        c0 = sn_start[J]
        c1_ = sn_start[J + 1]
        sn_ptr[J + 1] = sn_ptr[J] + (c1_ - c0) + cnt[c1_ - 1]
    sn_rows = np.empty(sn_ptr[ns], dtype=np.int64)
    flops = 0.0
    nnz = 0
    for J in range(ns):
        c0 = sn_start[J]
        c1_ = sn_start[J + 1]
        q = sn_ptr[J]
        for t in range(c1_ - c0):
            sn_rows[q + t] = c0 + t
        q += c1_ - c0
        last = c1_ - 1
        below = cnt[last]
        for t in range(below):
            sn_rows[q + t] = cols[cptr[last] + t]
        for t in range(c1_ - c0, 0, -1):
            cc = below + t
            flops += float(cc) * float(cc)
            nnz += cc
    return perm, sn_start, sn_ptr, sn_rows, nnz, flops


def analyse(pattern, m: int, relax: float = 0.2) -> RestSymbolic:
    """Symbolic analysis of an ``m × m`` rest block whose first ``qz = pattern.shape[0]``
    rows (the ``Z`` rows) have the symmetric sparsity ``pattern`` and whose last ``m − qz``
    rows (``X``, ``y``) are dense: a minimum-degree order, the pattern of ``L``, the
    elimination tree's postorder and relaxed supernodes (compiled; :func:`_analyse_py` is
    the same in Python).

    ``relax``: a column is merged into the next column's supernode when it is that column's
    only-child chain link and the merged supernode stays at most this share explicit zeros.
    """
    qz = pattern.shape[0]
    order, ptr, rows = min_degree_order(pattern)
    perm, sn_start, sn_ptr, sn_rows, nnz, flops = _analyse_kernel(
        order, ptr, rows, qz, m, float(relax))
    iperm = np.empty(m, dtype=np.int64)
    iperm[perm] = np.arange(m)
    return RestSymbolic(m=m, qz=qz, perm=perm, iperm=iperm, sn_start=sn_start, sn_ptr=sn_ptr,
                        sn_rows=sn_rows, nnz=int(nnz), flops=float(flops))


def _analyse_py(pattern, m: int, relax: float = 0.2) -> RestSymbolic:
    """:func:`analyse` in Python (the reference of its compiled kernel, for tests).

    Symbolic analysis of an ``m × m`` rest block whose first ``qz = pattern.shape[0]``
    rows (the ``Z`` rows) have the symmetric sparsity ``pattern`` and whose last ``m − qz``
    rows (``X``, ``y``) are dense.

    ``relax``: a column is merged into the next column's supernode when it is that column's
    only-child chain link and the merged supernode stays at most this share explicit zeros.
    """
    qz = pattern.shape[0]
    order, ptr, rows = min_degree_order(pattern)
    pos = np.empty(qz, dtype=np.int64)
    pos[order] = np.arange(qz)
    cols = [np.sort(pos[rows[ptr[j]:ptr[j + 1]]]) for j in range(qz)]
    parent = np.array([c[0] if c.size else -1 for c in cols], dtype=np.int64)
    post = _postorder(parent)                 # post[k] = elimination step placed k-th
    rank = np.empty(qz, dtype=np.int64)
    rank[post] = np.arange(qz)
    cols = [np.sort(rank[cols[j]]) for j in post]
    perm = np.concatenate([order[post], np.arange(qz, m)]).astype(np.int64)
    iperm = np.empty(m, dtype=np.int64)
    iperm[perm] = np.arange(m)
    tail = np.arange(qz, m, dtype=np.int64)
    cols = [np.concatenate([c, tail]) for c in cols] + [np.arange(j + 1, m, dtype=np.int64)
                                                        for j in range(qz, m)]
    cnt = np.array([c.size for c in cols], dtype=np.int64)
    par = np.array([c[0] if c.size else -1 for c in cols], dtype=np.int64)
    # relaxed supernodes: extend the current one with column j when j-1's parent is j
    starts = [0]
    ent = cnt[0] + 1      # true entries of the current supernode
    for j in range(1, m):
        c0 = starts[-1]
        nc = j - c0 + 1
        if par[j - 1] == j:
            tot = nc * (nc + 1) // 2 + nc * cnt[j]
            new_ent = ent + cnt[j] + 1
            if tot - new_ent <= relax * tot or cnt[j - 1] == cnt[j] + 1 and tot == new_ent:
                ent = new_ent
                continue
        starts.append(j)
        ent = cnt[j] + 1
    starts.append(m)
    sn_start = np.asarray(starts, dtype=np.int64)
    pieces, ptrs = [], [0]
    flops = 0.0
    nnz = 0
    for J in range(sn_start.size - 1):
        c0, c1 = sn_start[J], sn_start[J + 1]
        r = np.concatenate([np.arange(c0, c1), cols[c1 - 1]])
        pieces.append(r)
        ptrs.append(ptrs[-1] + r.size)
        nc = c1 - c0
        below = cols[c1 - 1].size
        colcounts = below + np.arange(nc, 0, -1)
        flops += float(np.sum(colcounts.astype(float) ** 2))
        nnz += int(colcounts.sum())
    return RestSymbolic(m=m, qz=qz, perm=perm, iperm=iperm, sn_start=sn_start,
                        sn_ptr=np.asarray(ptrs, dtype=np.int64),
                        sn_rows=np.concatenate(pieces).astype(np.int64), nnz=nnz, flops=flops)


# --------------------------------------------------------------------------- numeric phase

@_njit(cache=True)
def _gather_perm(S, perm):
    m = perm.size
    out = np.empty((m, m))
    for i in range(m):
        pi = perm[i]
        for j in range(i + 1):
            out[i, j] = S[pi, perm[j]]
    return out


@_njit(cache=True)
def _tri_inv_lower(L):
    """Inverse of a lower-triangular matrix (column by column forward substitution)."""
    n = L.shape[0]
    X = np.zeros((n, n))
    for j in range(n):
        X[j, j] = 1.0 / L[j, j]
        for i in range(j + 1, n):
            s = 0.0
            for k in range(j, i):
                s += L[i, k] * X[k, j]
            X[i, j] = -s / L[i, i]
    return X


@_njit(cache=True)
def _numeric_kernel(Lp, sn_start, sn_ptr, sn_rows, last):
    """Right-looking supernodal Cholesky, in place on the lower triangle of ``Lp``, for
    supernodes ``0 … last-1``; returns ``-1`` or the first column whose pivot is not
    positive."""
    for J in range(last):
        c0 = sn_start[J]
        c1 = sn_start[J + 1]
        nc = c1 - c0
        p0 = sn_ptr[J]
        nR = sn_ptr[J + 1] - p0 - nc
        D = np.empty((nc, nc))
        for a in range(nc):
            for b in range(a + 1):
                D[a, b] = Lp[c0 + a, c0 + b]
                D[b, a] = D[a, b]
        # dense Cholesky of the diagonal block (small: plain loops, in place in D)
        for j in range(nc):
            s = D[j, j]
            for k in range(j):
                s -= D[j, k] * D[j, k]
            if not s > 0.0:
                return c0 + j
            d = np.sqrt(s)
            D[j, j] = d
            for i in range(j + 1, nc):
                t = D[i, j]
                for k in range(j):
                    t -= D[i, k] * D[j, k]
                D[i, j] = t / d
        for a in range(nc):
            for b in range(a + 1):
                Lp[c0 + a, c0 + b] = D[a, b]
        if nR == 0:
            continue
        F = np.empty((nR, nc))
        for a in range(nR):
            r = sn_rows[p0 + nc + a]
            for b in range(nc):
                F[a, b] = Lp[r, c0 + b]
        # panel: P = F L_JJ^{-T} (forward substitution for thin supernodes, else BLAS with
        # the triangular inverse)
        if nc <= 4:
            for a in range(nR):
                for j in range(nc):
                    t = F[a, j]
                    for k in range(j):
                        t -= F[a, k] * D[j, k]
                    F[a, j] = t / D[j, j]
        else:
            Dl = np.zeros((nc, nc))
            for a in range(nc):
                for b in range(a + 1):
                    Dl[a, b] = D[a, b]
            F = np.dot(F, _tri_inv_lower(Dl).T)
        for a in range(nR):
            r = sn_rows[p0 + nc + a]
            for b in range(nc):
                Lp[r, c0 + b] = F[a, b]
        U = np.dot(F, F.T)
        for a in range(nR):
            ra = sn_rows[p0 + nc + a]
            for b in range(a + 1):
                Lp[ra, sn_rows[p0 + nc + b]] -= U[a, b]
    return -1


@_njit(cache=True)
def _downdate_kernel(W, indptr, indices, data, c):
    """In place on the lower triangle of ``W``: ``W −= A diag(c) A'`` for a CSC ``A`` with
    sorted row indices (``Σ_s nnz_s²/2`` multiply-adds)."""
    for s in range(indptr.size - 1):
        cs = c[s]
        for a in range(indptr[s], indptr[s + 1]):
            i = indices[a]
            v = data[a] * cs
            for b in range(indptr[s], a + 1):
                W[i, indices[b]] -= v * data[b]


def downdate_lower(W: np.ndarray, A_csc, c: np.ndarray) -> None:
    """``W −= A diag(c) A'`` on the lower triangle of the C-ordered ``W`` (in place);
    ``A_csc``: scipy CSC with sorted indices."""
    _downdate_kernel(W, A_csc.indptr, A_csc.indices, A_csc.data, np.asarray(c, float))


@_njit(cache=True)
def _assemble_kernel(W, perm, blk0, bsz, pos, toff, Tflat, qz):
    """``Lp[i, j] = (Λ' W Λ + diag(I_qz, 0))[perm[i], perm[j]]`` for ``i ≥ j``, with ``W``
    read from its lower triangle and ``Λ`` block diagonal (row ``r`` is column ``pos[r]`` of
    a ``bsz[r] × bsz[r]`` lower-triangular block starting at ``blk0[r]``, stored row-major
    at ``Tflat[toff[r]:]``)."""
    m = perm.size
    Lp = np.empty((m, m))
    for i in range(m):
        r = perm[i]
        pr, br, sr, tr = pos[r], blk0[r], bsz[r], toff[r]
        for j in range(i + 1):
            c = perm[j]
            pc, bc, sc, tc = pos[c], blk0[c], bsz[c], toff[c]
            v = 0.0
            for a in range(pr, sr):
                ta = Tflat[tr + a * sr + pr]
                if ta == 0.0:
                    continue
                ra = br + a
                for b in range(pc, sc):
                    tb = Tflat[tc + b * sc + pc]
                    cb = bc + b
                    w = W[ra, cb] if ra >= cb else W[cb, ra]
                    v += ta * w * tb
            if i == j and i < qz:
                v += 1.0
            Lp[i, j] = v
    return Lp


def assemble(W: np.ndarray, sym: RestSymbolic, T: list, term_p, term_nlev) -> np.ndarray:
    """The permuted lower triangle of ``Λ_r' W Λ_r + diag(I_q, 0)`` (``W``: the original
    order rest block, lower triangle read), ready for :func:`factor_numeric`."""
    layout = _layout(sym, term_p, term_nlev)
    Tflat = np.concatenate([[1.0]] + [np.ravel(T[k]) for k in range(1, len(term_p))])
    blk0, bsz, pos, toff = layout
    return _assemble_kernel(W, sym.perm, blk0, bsz, pos, toff, Tflat, sym.qz)


@_njit(cache=True)
def _assemble_pattern_kernel(Lp, sn_start, sn_ptr, sn_rows, ei, ej, eptr, widx, ta, tb, Wv,
                             Tflat, qz):
    """Zero the lower triangle of the ``m × m`` ``Lp`` on the supernodal pattern of ``L``,
    then set the entries of ``Λ'WΛ + diag(I_qz, 0)`` from the contribution lists."""
    for J in range(sn_start.size - 1):
        c0 = sn_start[J]
        c1 = sn_start[J + 1]
        for a in range(sn_ptr[J], sn_ptr[J + 1]):
            r = sn_rows[a]
            hi = min(c1, r + 1)
            for c in range(c0, hi):
                Lp[r, c] = 0.0
    for e in range(ei.size):
        v = 0.0
        for k in range(eptr[e], eptr[e + 1]):
            v += Tflat[ta[k]] * Wv[widx[k]] * Tflat[tb[k]]
        i = ei[e]
        if i == ej[e] and i < qz:
            v += 1.0
        Lp[i, ej[e]] = v
    return Lp


@_njit(cache=True)
def _assembler_build(Arr, indptr, indices, data, iperm, bsz, pos, toff):
    """The index lists of :class:`PatternAssembler` (see there), with one ``m × m`` map."""
    m = Arr.shape[0]
    wmap = np.full((m, m), -1, dtype=np.int32)
    for i in range(m):
        wmap[i, i] = 0
        for j in range(i):
            if Arr[i, j] != 0.0:
                wmap[i, j] = 0
    ncol = indptr.size - 1
    npair = 0
    for s in range(ncol):
        k = indptr[s + 1] - indptr[s]
        npair += k * (k + 1) // 2
        for a in range(indptr[s], indptr[s + 1]):
            ia = indices[a]
            for b in range(indptr[s], a + 1):
                wmap[ia, indices[b]] = 0
    nW = 0
    for i in range(m):
        for j in range(i + 1):
            if wmap[i, j] != -1:
                nW += 1
    wr = np.empty(nW, dtype=np.int64)
    wc = np.empty(nW, dtype=np.int64)
    W0 = np.empty(nW)
    w = 0
    for i in range(m):
        for j in range(i + 1):
            if wmap[i, j] != -1:
                wmap[i, j] = w
                wr[w] = i
                wc[w] = j
                W0[w] = Arr[i, j]
                w += 1
    pptr = np.zeros(ncol + 1, dtype=np.int64)
    pw = np.empty(npair, dtype=np.int32)
    pv = np.empty(npair)
    q = 0
    for s in range(ncol):
        for a in range(indptr[s], indptr[s + 1]):
            ia = indices[a]
            for b in range(indptr[s], a + 1):
                pw[q] = wmap[ia, indices[b]]
                pv[q] = data[a] * data[b]
                q += 1
        pptr[s + 1] = q
    # the contributions (T_k)_{a'a} W_w (T_l)_{b'b} to the entries (i ≥ j, permuted) of
    # Λ'WΛ, in the order w, orientation, a', b' (the summation order of each entry);
    # bucketed by row i (stable), then stably sorted by column j within each row: the
    # entries in row-major order, each with its contributions in that order
    rowptr = np.zeros(m + 1, dtype=np.int64)
    for pass_ in range(2):
        if pass_ == 1:
            for i in range(m):
                rowptr[i + 1] += rowptr[i]
            nK = rowptr[m]
            Kj = np.empty(nK, dtype=np.int64)
            Kw = np.empty(nK, dtype=np.int32)
            Ka = np.empty(nK, dtype=np.int32)
            Kb = np.empty(nK, dtype=np.int32)
            fillr = rowptr[:m].copy()
        for w in range(nW):
            for o in range(2):
                if o == 0:
                    x, y = wr[w], wc[w]
                else:
                    if wr[w] == wc[w]:
                        break
                    x, y = wc[w], wr[w]
                for da in range(pos[x] + 1):
                    r = x - da
                    i = iperm[r]
                    for db in range(pos[y] + 1):
                        c = y - db
                        j = iperm[c]
                        if i >= j:
                            if pass_ == 0:
                                rowptr[i + 1] += 1
                            else:
                                k = fillr[i]
                                Kj[k] = j
                                Kw[k] = w
                                Ka[k] = toff[r] + pos[x] * bsz[r] + pos[r]
                                Kb[k] = toff[c] + pos[y] * bsz[c] + pos[c]
                                fillr[i] = k + 1
    widx = np.empty(nK, dtype=np.int32)
    ta = np.empty(nK, dtype=np.int32)
    tb = np.empty(nK, dtype=np.int32)
    js = np.empty(nK, dtype=np.int64)
    nE = 0
    for i in range(m):
        a0 = rowptr[i]
        a1 = rowptr[i + 1]
        if a1 == a0:
            continue
        o = np.argsort(Kj[a0:a1], kind="mergesort")
        for t in range(a1 - a0):
            k = a0 + o[t]
            widx[a0 + t] = Kw[k]
            ta[a0 + t] = Ka[k]
            tb[a0 + t] = Kb[k]
            js[a0 + t] = Kj[k]
            if t == 0 or js[a0 + t] != js[a0 + t - 1]:
                nE += 1
    ei = np.empty(nE, dtype=np.int32)
    ej = np.empty(nE, dtype=np.int32)
    eptr = np.zeros(nE + 1, dtype=np.int64)
    e = -1
    for i in range(m):
        for k in range(rowptr[i], rowptr[i + 1]):
            if k == rowptr[i] or js[k] != js[k - 1]:
                e += 1
                ei[e] = i
                ej[e] = js[k]
            eptr[e + 1] = k + 1
    return W0, pptr, pw, pv, ei, ej, eptr, widx, ta, tb


@_njit(cache=True)
def _pairs_apply(W0, pptr, pw, pv, c):
    """``W = W0 − P c`` with ``P`` given column by column (pair targets ``pw``, values
    ``pv``)."""
    Wv = W0.copy()
    for s in range(pptr.size - 1):
        cs = c[s]
        for k in range(pptr[s], pptr[s + 1]):
            Wv[pw[k]] -= cs * pv[k]
    return Wv


@_njit(cache=True)
def _pairs_apply2(W0, pptr, pw, pv, c, c2):
    """``(W0 − P c, P c2)`` in one pass over the pairs (which is what costs)."""
    Wv = W0.copy()
    Pc2 = np.zeros(W0.size)
    for s in range(pptr.size - 1):
        cs = c[s]
        c2s = c2[s]
        for k in range(pptr[s], pptr[s + 1]):
            w = pw[k]
            v = pv[k]
            Wv[w] -= cs * v
            Pc2[w] += c2s * v
    return Wv, Pc2


@_njit(cache=True)
def _pairs_dot(Zt, pptr, pw, pv, c):
    """``Zt'(P c)``."""
    tot = 0.0
    for s in range(pptr.size - 1):
        acc = 0.0
        for k in range(pptr[s], pptr[s + 1]):
            acc += pv[k] * Zt[pw[k]]
        tot += c[s] * acc
    return tot


class PatternAssembler:
    """``Λ_r'(A_rr − A diag(c) A')Λ_r + diag(I_q, 0)`` assembled on its sparsity pattern only,
    in the permuted order of a :class:`RestSymbolic` (for a scalar term 1, one dispersion
    level).  Built once per model (compiled, ``O(m²)`` index maps): the lower-triangle
    entries ``w`` of ``W = A_rr − A diag(c) A'`` (the diagonal, the non-zeros of ``A_rr``
    and the row pairs ``(i, j)`` of each column ``s`` of ``A``, whose products
    ``A_is A_js`` form ``P`` with ``W_w = (A_rr)_w − (P c)_w``) and, per entry of the
    result, the list of ``(T_k)_{a'a} W_w (T_l)_{b'b}`` terms that ``Λ_r`` contributes.
    Each evaluation is one pass over the pairs and one over the lists: work proportional
    to the non-zeros instead of ``m²`` (32-bit indices, ``m ≤ MAX_SIZE``: less memory to
    stream per evaluation)."""

    def __init__(self, A_csc, Arr: np.ndarray, sym: RestSymbolic, term_p, term_nlev):
        self.sym = sym
        blk0, bsz, pos, toff = _layout(sym, term_p, term_nlev)
        (self.W0, self.pptr, self.pw, self.pv, self.ei, self.ej, self.eptr, self.widx,
         self.ta, self.tb) = _assembler_build(np.ascontiguousarray(Arr),
                                              A_csc.indptr.astype(np.int64),
                                              A_csc.indices.astype(np.int64),
                                              np.asarray(A_csc.data, float), sym.iperm, bsz,
                                              pos, toff)

    def trace_downdate(self, Z: "SelectedInverse", c: np.ndarray, T: list) -> float:
        """``tr(Z_n Λ_r' A_n diag(c) A_n' Λ_r) = Σ_s c_s a_s'Λ_r Z Λ_r'a_s`` for a selected
        inverse ``Z`` of the leading ``n`` permuted rows (``A_n``: the rows of ``A`` below
        ``n``), by the adjoint of the assembly: ``Σ_w Zt_w (P c)_w``."""
        Tflat = np.concatenate([[1.0]] + [np.ravel(Tk) for Tk in T[1:]])
        Zt = _adjoint_kernel(Z.Zp, self.ei, self.ej, self.eptr, self.widx, self.ta, self.tb,
                             Tflat, self.W0.size, Z.n)
        c = np.asarray(c, float)
        kept = self._pc2
        if kept is not None and np.array_equal(kept[0], c):
            # P c from the assembly's pass over the pairs (:meth:`__call__` with ``c2 = c``)
            return float(np.dot(Zt, kept[1]))
        return float(_pairs_dot(Zt, self.pptr, self.pw, self.pv, c))

    #: ``(c2, P c2)`` of the last :meth:`__call__` given a ``c2``
    _pc2: tuple | None = None

    def __call__(self, c: np.ndarray, T: list, c2: np.ndarray | None = None) -> np.ndarray:
        """The permuted lower triangle of ``Λ_r'(A_rr − A diag(c) A')Λ_r + diag(I_q, 0)``
        (in a :func:`workspace` array).  ``c2``: also form ``P c2`` in the same pass over
        the pairs and keep it for :meth:`trace_downdate` with the same weights (the
        gradient's trace), which then skips its own pass."""
        c = np.asarray(c, float)
        if c2 is None:
            Wv = _pairs_apply(self.W0, self.pptr, self.pw, self.pv, c)
        else:
            c2 = np.array(c2, dtype=float, copy=True)
            Wv, Pc2 = _pairs_apply2(self.W0, self.pptr, self.pw, self.pv, c, c2)
            self._pc2 = (c2, Pc2)
        # the y'y entry (the last W entry) summed exactly: r_θ² = y'y − … cancels
        yy = self._yy_terms()
        if yy is not None:
            cols, vals = yy
            Wv[-1] = math.fsum(np.concatenate([[self.W0[-1]], -c[cols] * vals]))
        Tflat = np.concatenate([[1.0]] + [np.ravel(Tk) for Tk in T[1:]])
        sym = self.sym
        return _assemble_pattern_kernel(workspace(sym, "L"), sym.sn_start, sym.sn_ptr,
                                        sym.sn_rows, self.ei, self.ej, self.eptr, self.widx,
                                        self.ta, self.tb, Wv, Tflat, sym.qz)

    def _yy_terms(self):
        """Columns ``s`` with a ``(y, y)`` pair and its products ``A_ys²`` (cached)."""
        if not hasattr(self, "_yy"):
            last = self.W0.size - 1
            ends = self.pptr[1:] - 1
            has = (np.diff(self.pptr) > 0)
            cols = np.flatnonzero(has & (self.pw[np.maximum(ends, 0)] == last))
            self._yy = (cols, self.pv[ends[cols]]) if cols.size else None
        return self._yy


@_njit(cache=True)
def _adjoint_kernel(Z, ei, ej, eptr, widx, ta, tb, Tflat, nW, n):
    """``Zt_w = Σ_{k: widx_k = w} (2 − δ_e) Z_e (T)_{ta_k} (T)_{tb_k}`` over the entries
    ``e`` with both permuted rows below ``n``: the gradient of ``tr(Z Λ'WΛ)`` in the
    lower-triangle entries ``W_w``."""
    Zt = np.zeros(nW)
    for e in range(ei.size):
        i = ei[e]
        if i >= n:
            continue
        j = ej[e]
        z = Z[i, j] if i == j else 2.0 * Z[i, j]
        for k in range(eptr[e], eptr[e + 1]):
            Zt[widx[k]] += z * Tflat[ta[k]] * Tflat[tb[k]]
    return Zt


def _layout(sym: RestSymbolic, term_p, term_nlev):
    """Per rest row: first row of its level block, block size, position in the block and
    offset of its ``T_k`` in ``Tflat`` (``Tflat[0] = 1`` for the ``X, y`` rows)."""
    layout = sym.extra.get("layout")
    if layout is None:
        m = sym.m
        blk0 = np.arange(m, dtype=np.int64)
        bsz = np.ones(m, dtype=np.int64)
        pos = np.zeros(m, dtype=np.int64)
        toff = np.zeros(m, dtype=np.int64)
        start = 0
        off = 1
        for k in range(1, len(term_p)):
            pk, nk = term_p[k], term_nlev[k]
            idx = start + np.arange(nk * pk)
            blk0[idx] = start + (np.arange(nk * pk) // pk) * pk
            bsz[idx] = pk
            pos[idx] = np.arange(nk * pk) % pk
            toff[idx] = off
            off += pk * pk
            start += nk * pk
        layout = sym.extra["layout"] = (blk0, bsz, pos, toff)
    return layout


def workspace(sym: RestSymbolic, name: str) -> np.ndarray:
    """An ``m × m`` work array of ``sym`` (``name``: ``"L"`` for the factor, ``"Z"`` for the
    selected inverse), reused from an earlier evaluation when nothing else refers to it
    any more (a factor or selected inverse still held by a caller keeps its array; up to
    :data:`WORK_POOL` arrays are kept): a fresh 40 MB array costs its page faults again at
    every evaluation.  Factors and selected inverses share one pool: a gradient
    evaluation's selected inverse takes the array of the factor before the last one (the
    last is kept for the estimates at the optimum), so two or three arrays serve a whole
    fit instead of four."""
    pool = sym.extra.setdefault("work_mm", [])
    for buf in pool:
        # references: the pool, ``buf`` and getrefcount's argument; a caller's view adds one
        if sys.getrefcount(buf) <= 3:
            return buf
    buf = np.empty((sym.m, sym.m))
    if len(pool) < WORK_POOL:
        pool.append(buf)
    return buf


#: work arrays kept by :func:`workspace` (the factor of the last evaluation, kept for the
#: estimates at the optimum, the factor being computed and, for a gradient, its selected
#: inverse)
WORK_POOL = 3

_LAPACK: dict = {}


def _lapack_inplace(name: str, A: np.ndarray, c0: int, n: int) -> int | None:
    """LAPACK ``name`` (``dpotrf`` or ``dpotri``, ``uplo = "U"``) on the block
    ``A[c0:n, c0:n]`` of the C-ordered square ``A`` in place: read in Fortran order with
    leading dimension ``A.shape[0]`` that block is its transpose, so LAPACK's upper
    triangle is ``A``'s lower one.  Through scipy's Cython LAPACK entry points (no copy);
    returns LAPACK's ``info``, or ``None`` where those entry points cannot be reached."""
    fn = _LAPACK.get(name)
    if fn is None:
        try:
            import ctypes
            from scipy.linalg import cython_lapack
            cap = cython_lapack.__pyx_capi__[name]
            get_name = ctypes.pythonapi.PyCapsule_GetName
            get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
            get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
            get_ptr.restype = ctypes.c_void_p
            get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
            ip = ctypes.POINTER(ctypes.c_int)
            proto = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ip, ctypes.c_void_p, ip, ip)
            fn = proto(get_ptr(cap, get_name(cap)))
        except Exception:  # pragma: no cover - scipy without the Cython LAPACK capsules
            fn = False
        _LAPACK[name] = fn
    if fn is False or not (A.flags.c_contiguous and A.dtype == np.float64):
        return None
    import ctypes
    m = A.shape[0]
    k = n - c0
    if k <= 0:
        return 0
    info = ctypes.c_int(0)
    fn(b"U", ctypes.byref(ctypes.c_int(k)), A.ctypes.data + (c0 * m + c0) * 8,
       ctypes.byref(ctypes.c_int(m)), ctypes.byref(info))
    return int(info.value)


def factor_numeric(S: np.ndarray, sym: RestSymbolic, assembled: bool = False) -> np.ndarray:
    """The supernodal Cholesky factor of the symmetric ``m × m`` ``S`` (original order;
    only read) in the permuted order of ``sym``: a C-ordered array whose lower triangle on
    the pattern of ``L`` holds ``L`` (``P S P' = L L'``).  ``assembled=True``: ``S`` is
    already the permuted lower triangle (from :func:`assemble`) and is factored in place.  The last supernode (the dense
    trailing block) is factored by LAPACK ``dpotrf``.

    Raises
    ------
    numpy.linalg.LinAlgError
        when ``S`` is not positive definite.
    """
    Lp = S if assembled else _gather_perm(S, sym.perm)
    m = sym.m
    yy = Lp[m - 1, m - 1]
    ns = sym.n_supernodes
    bad = _numeric_kernel(Lp, sym.sn_start, sym.sn_ptr, sym.sn_rows, ns - 1)
    if bad >= 0:
        raise np.linalg.LinAlgError(f"rest block not positive definite (column {bad})")
    c0 = int(sym.sn_start[ns - 1])
    # the trailing block of the C-ordered Lp is, read in Fortran order with leading
    # dimension m, its transpose: LAPACK's upper triangle is Lp's lower one
    info = _lapack_inplace("dpotrf", Lp, c0, m)
    if info is None:     # no direct LAPACK entry point: through a Fortran-ordered copy
        blk = Lp[c0:, c0:]
        U, info = sla.lapack.dpotrf(np.asfortranarray(blk.T), lower=0, overwrite_a=1, clean=1)
        if info == 0:
            Lp[c0:, c0:] = U.T
    if info != 0:
        raise np.linalg.LinAlgError(f"rest block not positive definite (dpotrf info={info})")
    # r_θ² = (y'y)_Λ − Σ_j L_yj²: one exactly rounded sum instead of the factorisation's
    # running subtraction (the criterion's rounding noise is n·δr²/r²)
    r2 = yy - math.fsum(Lp[m - 1, : m - 1] ** 2)
    if r2 > 0:
        Lp[m - 1, m - 1] = math.sqrt(r2)
    return Lp


@_njit(cache=True)
def _solve_lt_kernel(Lp, sn_start, sn_ptr, sn_rows, x, n):
    """In place: ``x ← L[:n,:n]^{-T} x`` (supernodes last to first)."""
    for J in range(sn_start.size - 2, -1, -1):
        c0 = sn_start[J]
        if c0 >= n:
            continue
        c1 = min(sn_start[J + 1], n)
        nc0 = sn_start[J + 1] - c0
        p0 = sn_ptr[J]
        p1 = sn_ptr[J + 1]
        for j in range(c1 - 1, c0 - 1, -1):
            t = x[j]
            for a in range(p0 + nc0, p1):
                r = sn_rows[a]
                if r >= n:
                    break
                t -= Lp[r, j] * x[r]
            for i in range(j + 1, c1):
                t -= Lp[i, j] * x[i]
            x[j] = t / Lp[j, j]


def solve_lt(Lp: np.ndarray, sym: RestSymbolic, b: np.ndarray, n: int) -> np.ndarray:
    """``x`` with ``L[:n,:n]' x = b`` (permuted order, ``b`` of length ``n``)."""
    x = np.array(b, dtype=float, copy=True)
    _solve_lt_kernel(Lp, sym.sn_start, sym.sn_ptr, sym.sn_rows, x, n)
    return x


@_njit(cache=True)
def _selinv_kernel(Lp, Z, sn_start, sn_ptr, sn_rows, n, first):
    """Takahashi recursion for supernodes ``first-1 … 0`` (those at and after ``first``
    are already in ``Z``), truncated to the leading ``n`` rows; ``Z`` lower triangle."""
    for J in range(first - 1, -1, -1):
        c0 = sn_start[J]
        if c0 >= n:
            continue
        c1 = min(sn_start[J + 1], n)
        nc = c1 - c0
        nc0 = sn_start[J + 1] - c0
        p0 = sn_ptr[J]
        nR = 0
        for a in range(p0 + nc0, sn_ptr[J + 1]):
            if sn_rows[a] < n:
                nR += 1
        D = np.empty((nc, nc))
        for a in range(nc):
            for b in range(nc):
                D[a, b] = Lp[c0 + a, c0 + b] if b <= a else 0.0
        Dinv = _tri_inv_lower(D)
        ZJJ = np.dot(Dinv.T, Dinv)
        if nR > 0:
            R = sn_rows[p0 + nc0: p0 + nc0 + nR]
            P = np.empty((nR, nc))
            for a in range(nR):
                for b in range(nc):
                    P[a, b] = Lp[R[a], c0 + b]
            Y = np.dot(P, Dinv)
            ZRR = np.empty((nR, nR))
            for a in range(nR):
                ra = R[a]
                for b in range(a + 1):
                    v = Z[ra, R[b]]
                    ZRR[a, b] = v
                    ZRR[b, a] = v
            ZRJ = -np.dot(ZRR, Y)
            ZJJ -= np.dot(Y.T, ZRJ)
            for a in range(nR):
                for b in range(nc):
                    Z[R[a], c0 + b] = ZRJ[a, b]
        for a in range(nc):
            for b in range(a + 1):
                Z[c0 + a, c0 + b] = 0.5 * (ZJJ[a, b] + ZJJ[b, a])


@_njit(cache=True)
def _quad_trace_kernel(Z, iperm, indptr, indices, data):
    """``Σ_s k_s' Z k_s`` over the columns ``k_s`` of a CSC matrix (original row labels),
    ``Z`` the permuted lower triangle."""
    tot = 0.0
    for s in range(indptr.size - 1):
        for a in range(indptr[s], indptr[s + 1]):
            pa = iperm[indices[a]]
            va = data[a]
            acc = 0.0
            for b in range(indptr[s], indptr[s + 1]):
                pb = iperm[indices[b]]
                acc += (Z[pa, pb] if pa >= pb else Z[pb, pa]) * data[b]
            tot += va * acc
    return tot


@_njit(cache=True)
def _column_forms_kernel(Z, iperm, indptr, indices, data):
    out = np.zeros(indptr.size - 1)
    for s in range(indptr.size - 1):
        tot = 0.0
        for a in range(indptr[s], indptr[s + 1]):
            pa = iperm[indices[a]]
            acc = 0.0
            for b in range(indptr[s], indptr[s + 1]):
                pb = iperm[indices[b]]
                acc += (Z[pa, pb] if pa >= pb else Z[pb, pa]) * data[b]
            tot += data[a] * acc
        out[s] = tot
    return out


class SelectedInverse:
    """The selected inverse ``Z = (L_n L_n')^{-1}`` of :func:`selected_inverse`, read in
    the **original** order: ``Z[i, j]`` for integer arrays ``i, j`` (symmetric; exact on
    the pattern of ``L + L'``, meaningless elsewhere), :meth:`diagonal` and
    :meth:`quad_trace`."""

    def __init__(self, Zp: np.ndarray, sym: RestSymbolic, n: int):
        self.Zp, self.sym, self.n = Zp, sym, n
        self.shape = (n, n)

    def __getitem__(self, key):
        i, j = key
        pi = self.sym.iperm[np.asarray(i)]
        pj = self.sym.iperm[np.asarray(j)]
        return self.Zp[np.maximum(pi, pj), np.minimum(pi, pj)]

    def diagonal(self) -> np.ndarray:
        """``diag(Z)`` in the original order (length ``n``)."""
        return np.diagonal(self.Zp)[self.sym.iperm[: self.n]].copy()

    def quad_trace(self, K) -> float:
        """``tr(K' Z K) = Σ_s k_s' Z k_s`` for a sparse ``K`` (``n`` rows, original order)
        whose columns couple only rows on the pattern of ``L``."""
        import scipy.sparse as sp
        Kc = sp.csc_matrix(K)
        return float(_quad_trace_kernel(self.Zp, self.sym.iperm, Kc.indptr, Kc.indices,
                                        Kc.data))

    def column_forms(self, K) -> np.ndarray:
        """``k_s' Z k_s`` for every column ``k_s`` of a sparse ``K`` (as :meth:`quad_trace`)."""
        import scipy.sparse as sp
        Kc = sp.csc_matrix(K)
        return _column_forms_kernel(self.Zp, self.sym.iperm, Kc.indptr, Kc.indices, Kc.data)

    def dense(self) -> np.ndarray:
        """Original-order symmetric ``n × n`` copy (zero off the pattern; for tests)."""
        return _scatter_sym(self.Zp, self.sym.iperm, self.n)[: self.n, : self.n]


@_njit(cache=True)
def _scatter_sym(Z, iperm, n):
    """Original-order symmetric copy of the permuted lower triangle, leading ``n`` rows
    of the permuted order mapped back (others zero)."""
    m = iperm.size
    out = np.zeros((m, m))
    for i in range(m):
        pi = iperm[i]
        if pi >= n:
            continue
        for j in range(m):
            pj = iperm[j]
            if pj >= n:
                continue
            out[i, j] = Z[pi, pj] if pi >= pj else Z[pj, pi]
    return out


def selected_inverse(Lp: np.ndarray, sym: RestSymbolic, n: int) -> SelectedInverse:
    """``(L_n L_n')^{-1}`` on the pattern of ``L`` for the leading ``n`` permuted rows
    (``n ≥ sym.qz``: the ``Z`` rows, with or without ``X``), read in the original order
    through a :class:`SelectedInverse`; entries off the pattern of ``L + L'`` are not the
    inverse's values."""
    ns = sym.n_supernodes
    Z = workspace(sym, "Z")
    # the trailing dense supernode (clipped to n rows) by LAPACK dpotri
    last = ns - 1
    while last > 0 and sym.sn_start[last] >= n:
        last -= 1
    c0 = int(sym.sn_start[last])
    if n > c0:
        # only the lower triangle of Z is ever read: LAPACK's upper one in Fortran order
        Z[c0:n, c0:n] = Lp[c0:n, c0:n]
        info = _lapack_inplace("dpotri", Z, c0, n)
        if info is None:
            Zb, info = sla.lapack.dpotri(np.array(Lp[c0:n, c0:n].T, order="F"), lower=0,
                                         overwrite_c=1)
            if info == 0:
                Z[c0:n, c0:n] = Zb.T
        if info != 0:
            raise np.linalg.LinAlgError(f"dpotri failed (info={info})")
    _selinv_kernel(Lp, Z, sym.sn_start, sym.sn_ptr, sym.sn_rows, n, last)
    return SelectedInverse(Z, sym, n)
