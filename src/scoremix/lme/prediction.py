r"""Standard errors of predictions and prediction intervals of a linear mixed model.

As lme4 (≥ 1.1-35) defines ``predict(m, se.fit = TRUE)``: with the relative covariance
factor :math:`\Lambda` (:math:`\mathrm{Var}(b) = \sigma^2\Lambda\Lambda'`), the
spherical system

.. math::

    A = \begin{pmatrix} \Lambda'Z'WZ\Lambda + I & \Lambda'Z'WX \\ X'WZ\Lambda & X'WX\end{pmatrix},

and :math:`D = \mathrm{diag}(\Lambda, I)`, the joint covariance of the prediction errors of
:math:`(b, \beta)` is Henderson's :math:`C = \sigma^2 D A^{-1} D'` (lme4's ``vcov_full``:
``σ² (M⁻¹)'M⁻¹`` with ``M`` the sparse Cholesky factor), and the standard error of the
prediction :math:`x_0'\hat\beta + z_0'\hat b` is

.. math::

    \mathrm{se}(x_0, z_0) = \sqrt{(z_0, x_0)\,C\,(z_0, x_0)'}.

Levels unseen in fitting have :math:`z_0 = 0` (lme4 pads ``C`` with zeros), ``re_form="~0"``
sets :math:`z_0 = 0` (then :math:`\mathrm{se} = \sqrt{x_0'\mathrm{Var}(\hat\beta)x_0}`), and
a ``re_form`` listing some random terms keeps only those columns of :math:`z_0`.

``interval="prediction"`` adds the residual variance of a new observation,
:math:`\sqrt{\mathrm{se}^2 + \sigma^2_{d}}`, and the variance of every random effect of a
level unseen in fitting (or left out by ``re_form``), so it covers a new observation; the
intervals use the normal quantile (lme4 gives no df).  Dense in ``q`` (random effects):
limited to :data:`MAX_Q`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from scoremix.lme.errors import NewLevelError
from scoremix.lme.formula import parse_formula
from scoremix.lme.relcov import theta_to_T

__all__ = ["vcov_full", "prediction_se", "select_terms", "MAX_Q"]

MAX_Q = 20000


def _lambda_blocks(m) -> list[np.ndarray]:
    spec = m.spec
    T = theta_to_T(m.theta.to_numpy(), [t.p for t in spec.terms])
    return [np.kron(np.eye(t.n_levels), Tk) for t, Tk in zip(spec.terms, T)]


def _z_dense(spec, design: list[tuple[np.ndarray, np.ndarray]], keep: list[bool]) -> np.ndarray:
    """``(n, q)`` Z in lme4's b order (per term, level-major: level 1's columns, …)."""
    n = len(design[0][0]) if design else 0
    blocks = []
    for t, (codes, Xk), k in zip(spec.terms, design, keep):
        Zk = np.zeros((n, t.n_levels * t.p))
        if k:
            codes = np.asarray(codes)
            ok = codes >= 0
            Xk = np.asarray(Xk, float)
            for a in range(t.p):
                Zk[np.flatnonzero(ok), codes[ok] * t.p + a] = Xk[ok, a]
        blocks.append(Zk)
    return np.hstack(blocks) if blocks else np.zeros((n, 0))


def vcov_full(m) -> np.ndarray:
    """Henderson's ``C = σ² D A⁻¹ D'`` (lme4's ``vcov_full``): covariance of the
    prediction errors of ``(b, β)``, random effects first (lme4's order)."""
    spec = m.require_spec("vcov_full")
    q = spec.q
    if q > MAX_Q:
        raise ValueError(f"prediction standard errors are computed densely; the model has q = {q} "
                         f"random effects (limit {MAX_Q})")
    Z = _z_dense(spec, [(t.codes, t.X) for t in spec.terms], [True] * len(spec.terms))
    X = np.asarray(spec.X, float)
    w = np.ones(spec.n) if spec.weights is None else np.asarray(spec.weights, float)
    if m.sigma_by is not None and spec.dispersion_codes is not None:
        rho = (m.sigma_by.to_numpy() / m.sigma) ** 2
        w = w / rho[np.asarray(spec.dispersion_codes)]
    Lam = np.zeros((q, q))
    off = 0
    for B in _lambda_blocks(m):
        Lam[off:off + B.shape[0], off:off + B.shape[0]] = B
        off += B.shape[0]
    ZL = Z @ Lam
    p = X.shape[1]
    A = np.empty((q + p, q + p))
    A[:q, :q] = ZL.T @ (w[:, None] * ZL) + np.eye(q)
    A[:q, q:] = ZL.T @ (w[:, None] * X)
    A[q:, :q] = A[:q, q:].T
    A[q:, q:] = X.T @ (w[:, None] * X)
    D = np.zeros((q + p, q + p))
    D[:q, :q] = Lam
    D[q:, q:] = np.eye(p)
    Ainv = np.linalg.inv(A)
    return m.sigma ** 2 * D @ Ainv @ D.T


def select_terms(m, re_form) -> list[bool]:
    """Which random terms ``re_form`` keeps: all (``None``), none (``"~0"``/``"NA"``) or
    those listed in a formula such as ``"~ (1 | speaker)"``."""
    spec = m.spec
    if re_form is None:
        return [True] * len(spec.terms)
    s = str(re_form).replace(" ", "")
    if s in ("~0", "NA", "~1-1", "0"):
        return [False] * len(spec.terms)
    rhs = s[1:] if s.startswith("~") else s
    parsed = parse_formula("y__ ~ 1 + " + rhs)
    want = set()
    for rp in parsed.random:
        for lab in rp.lhs.term_labels() or []:
            want.add((rp.group, lab))
        if rp.lhs.intercept:
            want.add((rp.group, "(Intercept)"))
    keep = []
    for t in spec.terms:
        keep.append(any((t.group_factor, nm) in want for nm in t.term_names))
    if not any(keep) and parsed.random:
        raise ValueError(f"re_form {re_form!r} names no random term of the model "
                         f"({[t.group for t in spec.terms]})")
    return keep


def prediction_se(m, newdata: pd.DataFrame | None = None, re_form=None,
                  allow_new_levels: bool | None = None, interval: str | None = None,
                  level: float = 0.95) -> pd.DataFrame:
    """``fit``, ``se_fit`` and, with ``interval``, ``lower``/``upper`` (see the module
    docstring)."""
    spec = m.require_spec("predict")
    keep = select_terms(m, re_form)
    if newdata is None:
        X = np.asarray(spec.X, float)
        design = [(t.codes, t.X) for t in spec.terms]
        idx = spec.data.index
        disp = spec.dispersion_codes
    else:
        X = np.asarray(spec.fixed_design(newdata), float)
        design = spec.random_design(newdata)
        idx = newdata.index
        new = [np.asarray(c) < 0 for c, _ in design]
        if allow_new_levels is False and any(k and nw.any() for k, nw in zip(keep, new)):
            t = [t.group_factor for t, k, nw in zip(spec.terms, keep, new) if k and nw.any()][0]
            raise NewLevelError(f"newdata has levels of {t!r} unseen in fitting; pass "
                                "allow_new_levels=True to predict them at the population level")
        disp = None
        if spec.dispersion_codes is not None and m.sigma_by is not None:
            from scoremix.lme.formula import parse_dispersion
            col = parse_dispersion(spec.dispersion_formula)
            lv = [str(v) for v in m.sigma_by.index]
            disp = np.array([lv.index(str(v)) if str(v) in lv else -1 for v in newdata[col]])
    fit = X @ m.fixef.to_numpy()
    if getattr(spec, "offset", None) is not None:
        fit = fit + (spec.offset if newdata is None else spec.offset_design(newdata))
    Z = _z_dense(spec, design, keep)
    b = np.concatenate([np.asarray(bk, float).reshape(-1) for bk in m._b]) if m._b else np.zeros(0)
    fit = fit + Z @ b
    C = vcov_full(m)
    ZX = np.hstack([Z, X])
    se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", ZX, C, ZX), 0))
    out = pd.DataFrame({"fit": fit, "se_fit": se}, index=idx)
    if interval is None:
        return out
    if interval not in ("confidence", "prediction"):
        raise ValueError(f"interval must be 'confidence' or 'prediction', got {interval!r}")
    var = se ** 2
    if interval == "prediction":
        s2 = np.full(len(fit), m.sigma ** 2)
        if disp is not None and m.sigma_by is not None:
            sb = m.sigma_by.to_numpy()
            s2 = np.where(np.asarray(disp) >= 0, sb[np.maximum(np.asarray(disp), 0)] ** 2, s2)
        w = np.ones(len(fit)) if newdata is not None or spec.weights is None else np.asarray(spec.weights)
        var = var + s2 / w
        for t, (codes, Xk), k, S in zip(spec.terms, design, keep, m.cov_re()):
            unseen = (np.asarray(codes) < 0) | (not k)
            if unseen.any():
                Xk = np.asarray(Xk, float)
                var = var + np.where(unseen, np.einsum("ij,jk,ik->i", Xk, S, Xk), 0.0)
    z = stats.norm.ppf(0.5 + level / 2)
    out["lower"] = fit - z * np.sqrt(var)
    out["upper"] = fit + z * np.sqrt(var)
    return out
