"""Sparsity "pair structure" of a downdate ``A D A'`` with a sparse ``A`` and a diagonal ``D``.

For a sparse ``m × q_1`` matrix ``A`` (the cross-products ``[Z_2 … Z_K X y]' W Z_1`` of two
large partially crossed factors, e.g. InstEval's students × lecturers) and ``D = diag(c)``, the
lower triangle of the ``m × m`` downdate is

.. math::

    (A D A')_{ij} = \\sum_s A_{is} A_{js} c_s,\\qquad i \\ge j .

With ``P_{(ij), s} = A_{is} A_{js}`` (one row per structurally non-zero pair ``(i, j)``) all
its entries are the sparse mat-vec ``P c``; ``P`` is built once per cross-products and every
evaluation of the profiled deviance then costs one mat-vec instead of a sparse product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PairStructure", "PAIR_MAX_NNZ"]

#: the pair structure is not built when it would hold more pairs than this
PAIR_MAX_NNZ = 30_000_000


@dataclass
class PairStructure:
    """Pair structure of ``A D A'`` (see the module docstring).

    ``rows``/``cols`` give the pairs (``rows ≥ cols``), ``flat`` their positions ``i·m + j``
    in a C-ordered ``m × m`` array, ``P`` the ``(n_pairs, q_1)`` CSR matrix of products
    ``A_{is} A_{js}``.
    """

    P: object
    rows: np.ndarray
    cols: np.ndarray
    flat: np.ndarray
    m: int

    @classmethod
    def build(cls, A) -> "PairStructure | None":
        """Pair structure of a sparse ``A`` (``None`` when it is empty or has more than
        :data:`PAIR_MAX_NNZ` pairs)."""
        import scipy.sparse as sp
        m, q1 = A.shape
        Ac = sp.csc_matrix(A)
        Ac.sort_indices()
        counts = np.diff(Ac.indptr)
        if int(np.sum(counts * (counts + 1) // 2)) > PAIR_MAX_NNZ:
            return None
        I, J, V, S = [], [], [], []
        for k in np.unique(counts):
            if k == 0:
                continue
            colsk = np.flatnonzero(counts == k)
            pos = Ac.indptr[colsk][:, None] + np.arange(k)[None, :]
            r = Ac.indices[pos]
            v = Ac.data[pos]
            ti, tj = np.tril_indices(k)   # rows sorted ascending: r[:, ti] >= r[:, tj]
            I.append(r[:, ti].ravel())
            J.append(r[:, tj].ravel())
            V.append((v[:, ti] * v[:, tj]).ravel())
            S.append(np.repeat(colsk, ti.size))
        if not I:
            return None
        I = np.concatenate(I).astype(np.int64)
        J = np.concatenate(J).astype(np.int64)
        keys = I * m + J
        flat, inv = np.unique(keys, return_inverse=True)
        P = sp.csr_matrix((np.concatenate(V), (inv.ravel(), np.concatenate(S))),
                          shape=(flat.size, q1))
        return cls(P=P, rows=flat // m, cols=flat % m, flat=flat, m=m)
