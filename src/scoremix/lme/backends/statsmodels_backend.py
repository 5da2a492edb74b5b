"""Fit a :class:`~scoremix.lme.spec.ModelSpec` with statsmodels' ``MixedLM`` (a cross-check
backend for small models).

Model (see :mod:`scoremix.lme.spec`):

.. math::

    y = X\\beta + Zb + \\varepsilon,\\quad b = \\Lambda_\\theta u,\\;
    u \\sim N(0, \\sigma^2 I),\\quad \\varepsilon \\sim N(0, \\sigma^2 I).

How lme4 terms are mapped to ``statsmodels.regression.mixed_linear_model.MixedLM``:

* one grouping factor ``g`` (``(x | g)``, ``(1 | g)``, ``(x || g)``): ``groups = g``; the
  (single) term with a correlated ``p × p`` covariance becomes ``exog_re`` (unstructured
  ``cov_re``); further scalar terms of the same factor (the parts of ``(x || g)``) become
  independent variance components within the group.
* nested factors (``(1 | g1/g2)`` → ``(1 | g2:g1) + (1 | g1)``): ``groups`` = the outer
  factor (every other factor's levels lie inside one of its levels), the inner terms
  variance components within each group.
* crossed factors (``(1 | plate) + (1 | sample)``): one all-data group, every term a
  variance component (``exog_vc``).

From statsmodels' estimates of ``β``, ``σ² = scale``, ``cov_re`` and ``vcomp`` the backend
forms lme4's ``θ`` (lower triangle of ``chol(Σ_k/σ²)``) and computes, with lme4's
formulas on the spec's sparse ``Z``,

.. math::

    \\operatorname{vcov}(\\hat\\beta) = \\sigma^2\\big[X^\\top X - X^\\top Z\\Lambda
        (\\Lambda^\\top Z^\\top Z\\Lambda + I)^{-1}\\Lambda^\\top Z^\\top X\\big]^{-1},\\quad
    \\hat b = \\Lambda(\\Lambda^\\top Z^\\top Z\\Lambda + I)^{-1}\\Lambda^\\top Z^\\top(y - X\\hat\\beta),

with conditional variances ``σ² Λ (Λ'Z'ZΛ + I)^{-1} Λ'`` (lme4's ``postVar``).  The
log-likelihood is statsmodels' ``llf`` (same constants as lme4: the REML one uses
``(n - p) log 2π``); AIC/BIC count ``p + n_θ + 1`` parameters, as lme4 does.

Limits (honestly):

* **slow** for crossed factors: they become one all-data group (its variance-component
  matrices are passed as sparse CSR when large).  Measured (``benchmarks/lme_speed.py``):
  20k simulated trials, 1000 speakers × 13 attacks, took ~100 s against ~0.04 s for the
  native engine (with dense matrices install-notes reports no finish in 6 minutes).  Use it
  to cross-check small models.
* no correlated slopes in crossed or nested (non-outer) terms: variance components are
  scalar, so such a term raises :class:`UnsupportedModelError`; at most one correlated
  (``p > 1``) term, and only on the outer grouping factor.
* no prior weights and no dispersion formula (``MixedLM`` has neither): both raise.
* a grouping factor repeated in terms whose columns overlap (``(1 | plate) + (1 | plate)``)
  has unidentifiable variance components: ``MixedLM`` cannot factor them, so such a model
  raises :class:`UnsupportedModelError` naming the term (as does any linear-algebra failure
  inside ``MixedLM``, instead of a raw ``LinAlgError``).
* non-convergence is not hidden: every warning of statsmodels' optimiser ("Retrying …",
  "Gradient optimization failed", "did not converge", a non-positive-definite Hessian) is
  re-issued as :class:`~scoremix.lme.errors.ConvergenceWarning`, the result has
  ``converged=False`` and the messages in ``fit_info["messages"]``, and ``summary()`` then
  does not print "REML criterion at convergence".  On models with correlated slopes
  (Orthodont ``distance ~ age * Sex + (age | Subject)``, BodyWeight) statsmodels stops
  0.6–7.5 % above lme4's optimum; use the native backend for them.
* the optimiser is looser than lme4 at tight settings: expect agreement of about 1e-4
  relative in variance components and 1e-6 in the criterion on small, well-posed models;
  boundary (singular) fits are less accurate.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from scoremix.lme.errors import ConvergenceWarning, UnsupportedModelError
from scoremix.lme.spec import ModelSpec, RandomTerm

__all__ = ["fit", "fit_dict", "UnsupportedModelError", "sparse_z"]


# ------------------------------------------------------------------ model structure

def sparse_z(spec: ModelSpec) -> sp.csc_matrix:
    """lme4's random-effects model matrix ``Z`` (``n × q``, level-major within a term)."""
    n = spec.n
    rows, cols, vals = [], [], []
    off = 0
    for t in spec.terms:
        p = t.p
        codes = np.asarray(t.codes, dtype=np.int64)
        for j in range(p):
            rows.append(np.arange(n))
            cols.append(off + codes * p + j)
            vals.append(np.asarray(t.X[:, j], dtype=float))
        off += p * t.n_levels
    return sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(n, off))


def _lambda(spec: ModelSpec, theta: np.ndarray) -> sp.csc_matrix:
    """``Λ_θ``: block diagonal, ``I_{n_k} ⊗ T_k`` per term."""
    blocks = []
    pos = 0
    for t in spec.terms:
        T = np.zeros((t.p, t.p))
        k = 0
        for j in range(t.p):
            for i in range(j, t.p):
                T[i, j] = theta[pos + k]
                k += 1
        pos += t.n_theta
        blocks.append(sp.kron(sp.identity(t.n_levels, format="csc"), sp.csc_matrix(T)))
    return sp.block_diag(blocks, format="csc")


def _nested_in(inner: np.ndarray, outer: np.ndarray) -> bool:
    """Every level of ``inner`` occurs with exactly one level of ``outer``."""
    df = pd.DataFrame({"i": inner, "o": outer})
    return bool((df.groupby("i")["o"].nunique() <= 1).all())


def _layout(spec: ModelSpec) -> tuple[str | None, RandomTerm | None, list[RandomTerm]]:
    """``(outer factor or None, exog_re term or None, variance-component terms)``."""
    if spec.weights is not None:
        raise UnsupportedModelError("the statsmodels backend has no prior weights "
                                    "(MixedLM does not support them): use backend='native'")
    if spec.dispersion_formula is not None:
        raise UnsupportedModelError(
            f"the statsmodels backend cannot fit a dispersion model ({spec.dispersion_formula!r}): "
            "MixedLM has one residual variance; use backend='native' (or 'lme4', which uses glmmTMB)")
    if not spec.terms:
        raise UnsupportedModelError("the model has no random-effects term: use an ordinary "
                                    "least-squares fit instead")
    factors: list[str] = []
    for t in spec.terms:
        if t.group_factor not in factors:
            factors.append(t.group_factor)
    _check_repeated_terms(spec)
    codes = {t.group_factor: np.asarray(t.codes) for t in spec.terms}
    # the outer factor: every other factor is nested in it; prefer one with a p > 1 term
    candidates = [f for f in factors
                  if all(_nested_in(codes[g], codes[f]) for g in factors if g != f)]
    candidates.sort(key=lambda f: -max(t.p for t in spec.terms if t.group_factor == f))
    outer = candidates[0] if candidates else None
    re_term: RandomTerm | None = None
    vc_terms: list[RandomTerm] = []
    if outer is not None:
        own = [t for t in spec.terms if t.group_factor == outer]
        multi = [t for t in own if t.p > 1]
        if len(multi) > 1:
            raise UnsupportedModelError(
                f"grouping factor {outer!r} has {len(multi)} correlated terms; statsmodels "
                "MixedLM allows one unstructured covariance per group")
        re_term = multi[0] if multi else own[0]
    for t in spec.terms:
        if t is re_term:
            continue
        if t.p > 1:
            where = "crossed" if outer is None else f"nested in {outer!r}"
            raise UnsupportedModelError(
                f"term {_term_label(t)} has correlated slopes and its factor "
                f"is {where}: statsmodels variance components are scalar (use backend='native')")
        vc_terms.append(t)
    return outer, re_term, vc_terms


def _term_label(t: RandomTerm) -> str:
    lhs = " + ".join(t.term_names).replace("(Intercept)", "1")
    if "(Intercept)" not in t.term_names:
        lhs = "0 + " + lhs
    return f"({lhs} | {t.group_factor})"


def _check_repeated_terms(spec: ModelSpec) -> None:
    """Refuse two terms of one grouping factor whose model-matrix columns overlap
    (``(1 | g) + (1 | g)``): their variances are not separately identifiable and
    ``MixedLM``'s covariance factorisation fails."""
    seen: dict[str, list[RandomTerm]] = {}
    for t in spec.terms:
        for prev in seen.get(t.group_factor, []):
            both = np.column_stack([prev.X, t.X])
            rank = np.linalg.matrix_rank(both)
            if rank < both.shape[1]:
                raise UnsupportedModelError(
                    f"term {_term_label(t)} repeats the columns of {_term_label(prev)} on the "
                    f"same grouping factor {t.group_factor!r}: their variance components are "
                    "not identifiable and statsmodels MixedLM cannot fit them (the native "
                    "backend fits the model as lme4 does)")
        seen.setdefault(t.group_factor, []).append(t)


#: substrings of statsmodels warnings meaning that the final optimum is not reliable: all
#: optimisers failed ("MixedLM optimization failed, …") or the gradient at the returned
#: point is not small ("Gradient optimization failed, |grad| = …").  A failure of the first
#: optimiser followed by a successful retry is not a failure.
_NONCONVERGENCE = ("mixedlm optimization failed", "gradient optimization failed")


#: lme4's ``check.conv.grad`` tolerance (see :func:`convergence_check`)
GRAD_TOL = 2e-3


def profiled_criterion(spec: ModelSpec, theta: np.ndarray, REML: bool) -> float:
    r"""lme4's profiled criterion at ``θ`` from the spec's sparse ``Z`` (β and σ² profiled
    out; no prior weights):

    .. math::

        -2\ell = \log|M_\theta| + [\log|R_X|^2] + \nu\,(1 + \log(2\pi r^2/\nu)),\quad
        M_\theta = \Lambda^\top Z^\top Z \Lambda + I,

    with :math:`R_X^\top R_X = X^\top X - X^\top Z\Lambda M^{-1}\Lambda^\top Z^\top X`,
    :math:`r^2` the penalised residual sum of squares, :math:`\nu = n - p` (REML, with the
    :math:`\log|R_X|^2` term) or :math:`n` (ML)."""
    X = np.asarray(spec.X, dtype=float)
    y = np.asarray(spec.y, dtype=float)
    ZL = (sparse_z(spec) @ _lambda(spec, theta)).tocsc()
    M = (ZL.T @ ZL + sp.identity(ZL.shape[1], format="csc")).tocsc()
    try:
        lu = spla.splu(M)
    except RuntimeError:
        return float("inf")
    logdet_m = float(np.sum(np.log(np.abs(lu.U.diagonal()))))
    ZLX = ZL.T @ X
    ZLX = ZLX.toarray() if sp.issparse(ZLX) else np.asarray(ZLX)
    ZLy = np.asarray(ZL.T @ y).ravel()
    A = X.T @ X - ZLX.T @ lu.solve(ZLX)
    c = X.T @ y - ZLX.T @ lu.solve(ZLy)
    try:
        beta = np.linalg.solve(A, c)
    except np.linalg.LinAlgError:
        return float("inf")
    u = lu.solve(ZLy - ZLX @ beta)
    r = y - X @ beta - ZL @ u
    r2 = float(r @ r + u @ u)
    n, p = X.shape
    nu = n - p if REML else n
    out = logdet_m + nu * (1.0 + np.log(2.0 * np.pi * r2 / nu))
    if REML:
        sign, logdet_a = np.linalg.slogdet(A)
        out += float(logdet_a) if sign > 0 else float("inf")
    return float(out)


def convergence_check(spec: ModelSpec, theta: np.ndarray, REML: bool) -> tuple[float, int]:
    """lme4's ``check.conv.grad`` at ``θ``: finite-difference gradient ``g`` and Hessian
    ``H`` of :func:`profiled_criterion` over the parameters not at their bound 0, the
    scaled gradient ``s = R^{-T} g`` with ``H = R^T R`` (so ``s^T s = g^T H^{-1} g``, twice
    the improvement a Newton step predicts), and the statistic
    ``max_i min(|s_i|, |g_i|)``; returns (statistic, component index).  lme4 warns when it
    exceeds ``2e-3``."""
    lower = spec.theta_lower()
    free = np.flatnonzero(~((lower == 0.0) & (theta <= 1e-6)))
    if free.size == 0:
        return 0.0, 0
    h = 1e-4 * np.maximum(1.0, np.abs(theta[free]))

    def f(steps: dict[int, float]) -> float:
        t = theta.copy()
        for i, v in steps.items():
            t[free[i]] += v
        return profiled_criterion(spec, t, REML)

    k = free.size
    f0 = f({})
    g = np.zeros(k)
    H = np.zeros((k, k))
    fp = np.array([f({i: h[i]}) for i in range(k)])
    fm = np.array([f({i: -h[i]}) for i in range(k)])
    g = (fp - fm) / (2 * h)
    for i in range(k):
        H[i, i] = (fp[i] - 2 * f0 + fm[i]) / h[i] ** 2
        for j in range(i):
            H[i, j] = H[j, i] = (f({i: h[i], j: h[j]}) - f({i: h[i], j: -h[j]})
                                 - f({i: -h[i], j: h[j]}) + f({i: -h[i], j: -h[j]})) / (4 * h[i] * h[j])
    try:
        R = np.linalg.cholesky(H).T
        sc = np.linalg.solve(R.T, g)
        stat = np.minimum(np.abs(sc), np.abs(g))
    except np.linalg.LinAlgError:  # not a local minimum: the gradient alone decides
        stat = np.abs(g)
    i = int(np.argmax(stat))
    return float(stat[i]), int(free[i])


def _vc_matrices(term: RandomTerm, group_codes: np.ndarray, n_groups: int,
                 dense_limit: int = 2_000_000) -> dict[int, Any]:
    """Per group: the ``n_g × L_g`` matrix of the term's levels inside the group (rows in
    data order; sparse CSR when it would have more than ``dense_limit`` entries)."""
    out: dict[int, Any] = {}
    order = np.argsort(group_codes, kind="stable")
    bounds = np.searchsorted(group_codes[order], np.arange(n_groups + 1))
    x = np.asarray(term.X[:, 0], dtype=float)
    tc = np.asarray(term.codes)
    for g in range(n_groups):
        rows = order[bounds[g]:bounds[g + 1]]  # rows of group g, in data order
        rows = np.sort(rows)
        lev, col = np.unique(tc[rows], return_inverse=True)
        shape = (rows.size, lev.size)
        if shape[0] * shape[1] <= dense_limit:
            m = np.zeros(shape)
            m[np.arange(rows.size), col] = x[rows]
        else:
            m = sp.csr_matrix((x[rows], (np.arange(rows.size), col)), shape=shape)
        out[g] = m
    return out


# ----------------------------------------------------------------------------- fit

def _chol_lower(S: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        w, V = np.linalg.eigh(S)
        S2 = (V * np.clip(w, 0.0, None)) @ V.T + np.eye(len(S)) * 1e-300
        try:
            return np.linalg.cholesky(S2)
        except np.linalg.LinAlgError:
            return np.diag(np.sqrt(np.clip(np.diag(S), 0.0, None)))


def fit_dict(spec: ModelSpec, REML: bool = True, method: str | list[str] | None = None,
             maxiter: int = 2000) -> dict[str, Any]:
    """Fit with statsmodels ``MixedLM`` and return the result in the schema of
    ``docs/lmer-result-schema.md`` (``backend = "statsmodels"``).

    Parameters
    ----------
    spec:
        the model; see the module docstring for what can be mapped.
    REML:
        REML (True) or maximum likelihood (False).
    method:
        optimiser(s) for ``MixedLM.fit`` (default statsmodels' ``["bfgs", "lbfgs", "cg"]``).
    maxiter:
        iteration limit passed to the optimiser.
    """
    from statsmodels.regression.mixed_linear_model import MixedLM, VCSpec  # noqa: PLC0415

    outer, re_term, vc_terms = _layout(spec)
    n = spec.n
    if outer is None:
        gcodes = np.zeros(n, dtype=np.int64)
        n_groups = 1
    else:
        ot = next(t for t in spec.terms if t.group_factor == outer)
        gcodes = np.asarray(ot.codes, dtype=np.int64)
        n_groups = ot.n_levels
    exog_re = None if re_term is None else np.asarray(re_term.X, dtype=float)
    exog_vc = None
    if vc_terms:
        mats = [_vc_matrices(t, gcodes, n_groups) for t in vc_terms]
        exog_vc = VCSpec([t.group for t in vc_terms],
                         [[[str(j) for j in range(m[g].shape[1])] for g in range(n_groups)]
                          for m in mats],
                         [[m[g] for g in range(n_groups)] for m in mats])
    model = MixedLM(np.asarray(spec.y, dtype=float), np.asarray(spec.X, dtype=float),
                    groups=gcodes, exog_re=exog_re, exog_vc=exog_vc)
    kw: dict[str, Any] = {"reml": bool(REML), "maxiter": maxiter}
    if method is not None:
        kw["method"] = method
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = model.fit(**kw)
        except np.linalg.LinAlgError as exc:
            raise UnsupportedModelError(
                f"statsmodels MixedLM failed on {spec.formula!r} (LinAlgError: {exc}); the "
                f"terms {', '.join(_term_label(t) for t in spec.terms)} cannot be fitted by "
                "this backend: use backend='native'") from exc
    messages = [str(w.message) for w in caught if "boundary" not in str(w.message).lower()]
    failed = (not bool(res.converged)) or any(
        k in msg.lower() for msg in messages for k in _NONCONVERGENCE)
    conv_warn: list[str] = []
    theta_sm = _theta_from(spec, res)
    if not failed and spec.weights is None:
        # statsmodels can stop short of the optimum without a word (nlme::IGF, Earthquake:
        # 2e-3 and 3e-4 relative above lme4's criterion): apply lme4's gradient check
        stat, comp = convergence_check(spec, theta_sm, REML)
        if stat > GRAD_TOL:
            failed = True
            messages.append(f"Model failed to converge with max|grad| = {stat:.3g} "
                            f"(tol = {GRAD_TOL}, component {comp + 1}) of the profiled "
                            "criterion in theta (lme4's check.conv.grad)")
    if failed:
        conv_warn = list(dict.fromkeys(messages)) or ["statsmodels MixedLM reports converged = False"]
        warnings.warn(f"statsmodels backend did not converge on {spec.formula!r}: "
                      + "; ".join(conv_warn) + " (the estimates are not an optimum: use "
                      "backend='native')", ConvergenceWarning, stacklevel=3)
    sigma2 = float(res.scale)
    sigma = float(np.sqrt(sigma2))
    covs = _term_covariances(spec, res)
    theta = theta_sm
    # lme4's formulas for vcov(beta), conditional modes and conditional variances
    X = np.asarray(spec.X, dtype=float)
    y = np.asarray(spec.y, dtype=float)
    beta = np.asarray(res.fe_params, dtype=float)
    Z = sparse_z(spec)
    ZL = (Z @ _lambda(spec, theta)).tocsc()
    M = (ZL.T @ ZL + sp.identity(ZL.shape[1], format="csc")).tocsc()
    lu = spla.splu(M)
    ZLX = (ZL.T @ X)
    ZLX = ZLX.toarray() if sp.issparse(ZLX) else np.asarray(ZLX)
    A = X.T @ X - ZLX.T @ lu.solve(ZLX)
    vcov = sigma2 * np.linalg.inv(A)
    r = y - X @ beta
    u = lu.solve(np.asarray(ZL.T @ r).ravel())
    Lam = _lambda(spec, theta)
    b = Lam @ u
    q = ZL.shape[1]
    condvar = None
    if q <= 6000:
        Minv = lu.solve(np.eye(q))
        LamD = Lam.toarray()
        condvar = sigma2 * np.einsum("ij,jk,ik->i", LamD, Minv, LamD)
    ranef = _ranef(spec, b, condvar)
    ll = float(res.llf)
    k = spec.p + spec.n_theta + 1
    fixef = dict(zip(spec.fixef_names, beta.tolist()))
    se = dict(zip(spec.fixef_names, np.sqrt(np.diag(vcov)).tolist()))
    lower = spec.theta_lower()
    singular = bool(np.any((lower == 0.0) & (theta < 1e-4)))
    return {
        "schema": "scoremix.lmer/1",
        "backend": "statsmodels",
        "formula": spec.formula,
        "dispersion": None,
        "REML": bool(REML),
        "nobs": n,
        "ngrps": spec.ngrps(),
        "fixef": fixef,
        "se": se,
        "vcov": vcov.tolist(),
        "theta": theta.tolist(),
        "sigma": sigma,
        "sigma_by": None,
        "varcorr": _varcorr(spec, covs, sigma),
        "loglik": ll,
        "reml_criterion": -2.0 * ll if REML else None,
        "deviance": None if REML else -2.0 * ll,
        "aic": -2.0 * ll + 2.0 * k,
        "bic": -2.0 * ll + np.log(n) * k,
        "converged": not failed,
        "fit_info": {"messages": list(dict.fromkeys(conv_warn))},
        "singular": singular,
        "ranef": ranef,
    }


def _term_covariances(spec: ModelSpec, res: Any) -> list[np.ndarray]:
    """Covariance matrix of each random term (spec order) from statsmodels' estimates."""
    outer, re_term, _ = _layout(spec)
    vc_names = list(getattr(getattr(res.model, "exog_vc", None), "names", None) or [])
    vcomp = dict(zip(vc_names, np.asarray(res.vcomp, dtype=float)))
    covs: list[np.ndarray] = []
    for t in spec.terms:
        if t is re_term:
            covs.append(np.atleast_2d(np.asarray(res.cov_re, dtype=float)))
        else:
            covs.append(np.array([[max(vcomp[t.group], 0.0)]]))
    return covs


def _theta_from(spec: ModelSpec, res: Any) -> np.ndarray:
    """lme4's θ: per term the lower triangle (column-major) of chol(Σ_k / σ²)."""
    sigma2 = float(res.scale)
    parts = []
    for t, S in zip(spec.terms, _term_covariances(spec, res)):
        L = _chol_lower(S / sigma2)
        parts.append(np.concatenate([L[j:, j] for j in range(t.p)]))
    return np.concatenate(parts)


def _varcorr(spec: ModelSpec, covs: list[np.ndarray], sigma: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for t, S in zip(spec.terms, covs):
        sd = np.sqrt(np.clip(np.diag(S), 0.0, None))
        for j in range(t.p):
            rows.append({"grp": t.group, "var1": t.term_names[j], "var2": None,
                         "vcov": float(S[j, j]), "sdcor": float(sd[j])})
        for j in range(t.p):
            for i in range(j + 1, t.p):
                den = sd[i] * sd[j]
                rows.append({"grp": t.group, "var1": t.term_names[j], "var2": t.term_names[i],
                             "vcov": float(S[i, j]),
                             "sdcor": float(S[i, j] / den) if den > 0 else float("nan")})
    rows.append({"grp": "Residual", "var1": None, "var2": None,
                 "vcov": sigma ** 2, "sdcor": sigma})
    return rows


def _ranef(spec: ModelSpec, b: np.ndarray, condvar: np.ndarray | None) -> dict[str, Any]:
    """Conditional modes per grouping factor (terms of one factor side by side, as lme4)."""
    out: dict[str, Any] = {}
    off = 0
    for t in spec.terms:
        size = t.p * t.n_levels
        vals = b[off:off + size].reshape(t.n_levels, t.p)
        sds = (np.sqrt(np.clip(condvar[off:off + size], 0.0, None)).reshape(t.n_levels, t.p)
               if condvar is not None else None)
        off += size
        e = out.setdefault(t.group_factor, {"levels": list(t.levels), "terms": [],
                                            "values": None, "condsd": None})
        e["terms"] = e["terms"] + list(t.term_names)
        e["values"] = vals if e["values"] is None else np.hstack([e["values"], vals])
        if sds is not None:
            e["condsd"] = sds if e["condsd"] is None else np.hstack([e["condsd"], sds])
    for e in out.values():
        e["values"] = e["values"].tolist()
        e["condsd"] = None if e["condsd"] is None else e["condsd"].tolist()
    return out


def fit(spec: ModelSpec, REML: bool = True, method: str | list[str] | None = None,
        maxiter: int = 2000) -> Any:
    """Fit ``spec`` with statsmodels ``MixedLM``; returns a
    :class:`~scoremix.lme.result.LmerResult` (see :func:`fit_dict`)."""
    from scoremix.lme.result import LmerResult  # noqa: PLC0415  (avoid an import cycle)

    return LmerResult.from_dict(fit_dict(spec, REML=REML, method=method, maxiter=maxiter), spec)
