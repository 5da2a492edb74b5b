r"""R's contrast matrices for factors in a model matrix.

For a factor with levels :math:`1, \dots, K` a contrast is a :math:`K \times (K-1)` matrix
:math:`C`; the model-matrix columns of the factor are the rows :math:`C_{g(i)}` (R's
``model.matrix`` with ``contrasts.arg``).  Implemented as in R's ``stats`` package:

* ``contr.treatment``: :math:`C = I_K` without its first column (columns named by levels
  2…K) — R's default for unordered factors;
* ``contr.SAS``: :math:`I_K` without its last column (named by levels 1…K-1);
* ``contr.sum``: :math:`C = [I_{K-1}; -\mathbb{1}']` (columns ``1…K-1``);
* ``contr.helmert``: column :math:`j` has :math:`-1` in rows :math:`1…j`, :math:`j` in row
  :math:`j+1` and 0 below (columns ``1…K-1``);
* ``contr.poly``: orthonormal polynomials of degree :math:`1…K-1` in the scores
  :math:`1…K` (columns ``.L .Q .C ^4 …``) — R's default for ordered factors.  Column
  :math:`d` is the part of :math:`(s - \bar s)^d` orthogonal to the lower powers
  (Gram–Schmidt, as R's ``make.poly`` does with ``qr``), scaled to unit length.
"""

from __future__ import annotations

import numpy as np

from scoremix.lme.errors import FormulaError

__all__ = ["CONTRASTS", "contrast_matrix", "normalize_contrast", "gram_schmidt_powers"]

#: the contrast functions understood by ``contrasts=``
CONTRASTS = ("contr.treatment", "contr.sum", "contr.helmert", "contr.poly", "contr.SAS")


def normalize_contrast(name: str, where: str) -> str:
    """``"sum"`` or ``"contr.sum"`` → ``"contr.sum"``; anything else raises
    :class:`FormulaError` naming ``where`` (the factor)."""
    if not isinstance(name, str):
        raise FormulaError(f"contrasts for {where}: expected one of {', '.join(CONTRASTS)} as a "
                           f"string, got {type(name).__name__}")
    full = name if name.startswith("contr.") else "contr." + name
    if full not in CONTRASTS:
        raise FormulaError(f"contrasts for {where}: {name!r} is not supported; choose one of "
                           f"{', '.join(CONTRASTS)}")
    return full


def gram_schmidt_powers(x: np.ndarray, degree: int) -> np.ndarray:
    """Columns :math:`0…degree`: the part of :math:`x^d` orthogonal to
    :math:`x^0…x^{d-1}` (R's ``qr.qy(QR, diag(diag(R)))``: sign-free, since
    :math:`Q_d R_{dd}` is that residual whatever Householder signs are used)."""
    X = np.vander(x, degree + 1, increasing=True)
    Q, R = np.linalg.qr(X)
    return Q * np.diag(R)[None, :]


def _poly_names(k: int) -> list[str]:
    base = [".L", ".Q", ".C"]
    return [base[i] if i < 3 else f"^{i + 1}" for i in range(k)]


def contrast_matrix(name: str, levels: list[str]) -> tuple[np.ndarray, list[str]]:
    """The ``K × (K-1)`` contrast matrix of ``name`` for ``levels`` and the column
    suffixes R appends to the variable's label."""
    k = len(levels)
    if name == "contr.treatment":
        return np.eye(k)[:, 1:], list(levels[1:])
    if name == "contr.SAS":
        return np.eye(k)[:, :-1], list(levels[:-1])
    if name == "contr.sum":
        C = np.vstack([np.eye(k - 1), -np.ones((1, k - 1))])
        return C, [str(j + 1) for j in range(k - 1)]
    if name == "contr.helmert":
        C = np.zeros((k, k - 1))
        for j in range(k - 1):
            C[: j + 1, j] = -1.0
            C[j + 1, j] = j + 1.0
        return C, [str(j + 1) for j in range(k - 1)]
    if name == "contr.poly":
        if k > 95:
            raise FormulaError(f"contr.poly: orthogonal polynomials are only defined for up to 95 "
                               f"levels, the factor has {k}")
        s = np.arange(1, k + 1, dtype=float)
        raw = gram_schmidt_powers(s - s.mean(), k - 1)
        Z = raw / np.sqrt((raw ** 2).sum(axis=0))[None, :]
        return Z[:, 1:], _poly_names(k - 1)
    raise FormulaError(f"unknown contrast {name!r}; choose one of {', '.join(CONTRASTS)}")
