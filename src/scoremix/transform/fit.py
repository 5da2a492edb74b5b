r"""Fit a transformation (latent-Gaussian) linear mixed model by maximum likelihood.

.. math::

    h(y_i) = x_i'\beta + z_i'b + \varepsilon_i,\qquad b\sim N(0,\Sigma_\theta),\qquad
    \varepsilon_i\sim N(0,\sigma_{d(i)}^2),\ \sigma_0 = 1,

with :math:`h` strictly increasing and unknown.  The likelihood is that of the ordered
cells of the distinct scores (:mod:`~scoremix.transform.cells`) with probit cell
probabilities; cutpoints are free or a monotone sieve (:mod:`~scoremix.transform.basis`);
random effects are integrated out by the Laplace approximation
(:mod:`~scoremix.transform.laplace`).  The outer problem over
:math:`(\gamma_0,\delta,\beta,\zeta,\theta)` is solved by L-BFGS-B with the exact gradient,
starting from the Gaussian LMM (native engine) fitted by ML to the rank-based normal
scores.  The intercept of the formula is absorbed by the cutpoints during the fit and
reported on a latent scale whose origin is :math:`h(\text{pooled median})=0`.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import ndtri

from scoremix._threads import limits_blas
from scoremix.lme.errors import ConvergenceWarning, SingularFitWarning, SINGULAR_FIT_MESSAGE
from scoremix.lme.result import LmerResult, spec_terms_info
from scoremix.lme.spec import ModelSpec
from scoremix.transform.basis import make_basis
from scoremix.transform.cells import make_cells
from scoremix.transform.errors import SingleLevelError, TransformError
from scoremix.transform.laplace import LaplaceState, TransformProblem, laplace, theta_to_T
from scoremix.transform.monotone import MonotoneTransform
from scoremix.transform.strata import (StackedBasis, StratifiedTransform, fixed_dispersion_levels,
                                       stratum_confounded_columns)
from scoremix.transform.vcov import joint_information

__all__ = ["TransformControl", "TransformLmerResult", "fit_transform", "lmer_transform",
           "check_classes",
           "TRANSFORMS"]

TRANSFORMS = ("monotone", "monotone-by-class")


@dataclasses.dataclass
class TransformControl:
    """Options of the transformation-model fit (``control=dict(...)`` with a transform).

    Attributes
    ----------
    max_free:
        at most this many cell edges (distinct scores − 1) get free cutpoints; more use
        the sieve.
    n_knots:
        maximum number of sieve segments.
    min_edges:
        minimum number of cell edges per sieve segment.
    maxiter, gtol, ftol:
        L-BFGS-B options.
    grad_tol:
        convergence check (lme4's ``check.conv.grad`` idea): largest component of the
        gradient of the deviance ``-2 log L`` scaled by the Cholesky factor of its
        approximate Hessian, over parameters off their bounds.
    max_rounds:
        optimisation rounds (each recomputes the preconditioner at the current point).
    singular_tol:
        ``θ`` diagonal below this counts as a singular fit.
    warn:
        issue convergence / singular-fit warnings.
    vcov:
        compute ``vcov`` and conditional SDs (the joint information; skip for speed).
    strata:
        with ``transform="monotone-by-class"``: the column whose levels get one transform
        each (:mod:`scoremix.transform.strata`).
    """

    max_free: int = 100
    n_knots: int = 200
    min_edges: int = 10
    maxiter: int = 2000
    gtol: float = 1e-6
    ftol: float = 1e-15
    grad_tol: float = 2e-3
    max_rounds: int = 3
    singular_tol: float = 1e-4
    warn: bool = True
    vcov: bool = True
    strata: str = "label"

    @classmethod
    def from_any(cls, control: "TransformControl | dict | None") -> "TransformControl":
        if control is None:
            return cls()
        if isinstance(control, cls):
            return control
        if isinstance(control, dict):
            bad = sorted(set(control) - set(cls.__dataclass_fields__))
            if bad:
                raise ValueError(f"unknown transform control option(s) {bad}; known: "
                                 f"{sorted(cls.__dataclass_fields__)}")
            return cls(**control)
        raise TypeError(f"control must be a dict or TransformControl, not {type(control).__name__}")


class TransformLmerResult(LmerResult):
    r"""An :class:`~scoremix.lme.result.LmerResult` of a transformation mixed model.

    Everything is on the latent scale :math:`h(y)`: ``fixef``, ``vcov``, ``theta``,
    ``sigma`` (= 1, the reference level's latent residual SD), ``sigma_by``, ``varcorr``,
    ``ranef``, ``fitted``, ``predict``.  :attr:`transform` maps scores to that scale
    (:class:`~scoremix.transform.monotone.MonotoneTransform`).  ``loglik`` is the Laplace
    log-likelihood of the cells (the exact one without random effects; ``REML`` is always
    False).  ``residuals`` are generalised residuals
    :math:`E[\varepsilon_i\mid\text{cell},\hat b]` (finite even for saturated scores).
    """

    transform: "MonotoneTransform | StratifiedTransform"
    #: per-row stratum (model-frame index) of a ``transform="monotone-by-class"`` fit, else None
    strata: pd.Series | None = None

    @property
    def npar(self) -> int:
        """Transform parameters (J+1, they absorb the intercept) + ``β`` without the
        intercept + ``θ`` + dispersion ratios."""
        info = self.fit_info.get("transform", {})
        n_t = int(info.get("n_transform_par", 0))
        p = len(self.fixef) - (1 if "(Intercept)" in self.fixef.index else 0)
        return n_t + p + len(self.theta) + self.n_disp_params

    @property
    def residuals(self) -> pd.Series:
        from scoremix.transform.likelihood import row_derivs
        spec = self.require_spec("residuals")
        m = self.fitted.to_numpy()
        sd = np.full(spec.n, self.sigma)
        if self.sigma_by is not None and spec.dispersion_codes is not None:
            sd = self.sigma_by.to_numpy()[np.asarray(spec.dispersion_codes)]
        tr = self.transform
        if self.strata is not None:
            st = self.strata.to_numpy(dtype=object)
            lo, hi = tr.lower(spec.y, st), tr.upper(spec.y, st)
        else:
            lo, hi = tr.lower(spec.y), tr.upper(spec.y)
        d = row_derivs((lo - m) / sd, (hi - m) / sd)
        return pd.Series(sd * (d.pa - d.pb), index=spec.data.index, name="residuals")

    def latent_gaussian_fit(self) -> LmerResult:
        r"""The Gaussian mixed model of the latent responses, the reference of the denominator
        degrees of freedom of :meth:`coef_table` and ``anova``.

        The latent response of a trial is :math:`z_i = \hat\eta_i + E[\varepsilon_i\mid
        \text{cell}_i, \hat b]` (fitted value plus generalised residual), which depends on
        the scores only through their order: a monotone map of the scores (``10·s``,
        ``exp(s)``) leaves the cells, the fit and hence every :math:`z_i` unchanged.  The
        same formula (and dispersion) is fitted to :math:`z` by REML; its Satterthwaite or
        Kenward–Roger df are those of the design (clusters, replication) on the latent scale.
        The estimates and standard errors of the tests remain the transformation fit's own
        (:attr:`fixef`, :attr:`vcov`).  The raw scores' Gaussian cross-products, which the
        df used before, change with any rescaling of the scores (issue 24).
        """
        cached = self.__dict__.get("_latent_gaussian")
        if cached is not None:
            return cached
        from scoremix.lme.api import fit_spec

        spec = self.require_spec("latent_gaussian_fit")
        z = (self.fitted + self.residuals).to_numpy(dtype=float)
        lat = fit_spec(dataclasses.replace(spec, y=z, data=spec.data.assign(**{spec.response: z})), REML=True)
        self.__dict__["_latent_gaussian"] = lat
        return lat

    def refit_scores(self, y: Any) -> "TransformLmerResult":
        """The same model (formula, transform kind, strata) refitted from scratch to new scores
        ``y`` of the same rows (e.g. simulated from this fit for a parametric bootstrap), without
        ``vcov`` and warnings."""
        spec = self.require_spec("refit_scores")
        y = np.asarray(y, dtype=np.float64)
        if y.shape != (spec.n,):
            raise TransformError(f"refit_scores needs one score per fitted row ({spec.n}), got {y.shape}")
        resp = spec.response
        data = spec.data.assign(**{resp: y}) if resp in spec.data.columns else spec.data
        kind = "monotone-by-class" if self.strata is not None else "monotone"
        return fit_transform(dataclasses.replace(spec, y=y, data=data), transform=kind,
                             control=dict(vcov=False, warn=False), strata=self.strata)

    def check(self, **kwargs: Any):
        """Model checks on the latent scale: :func:`scoremix.transform.check.check_transform`."""
        from scoremix.transform.check import check_transform  # s5postfit2
        return check_transform(self, **kwargs)

    def refit(self, *args: Any, **kwargs: Any) -> "LmerResult":
        raise NotImplementedError("refit is not available for transformation models; call "
                                  "scoremix.lmer(..., transform='monotone') again")

    def confint(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("confint is not available for transformation models yet; "
                                  "use fit.vcov (Wald) for fixed effects")

    def r2(self) -> dict[str, float]:
        raise NotImplementedError("R² is not defined for transformation models here")

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["transform"] = self.transform.to_dict()
        return d

    def summary(self, ddf: str | None = None) -> str:
        """lme4-style text summary on the latent scale, headed by the transformation's fit.

        ``ddf``: the base's argument; only ``None`` / ``"lme4"`` (lmerTest's Satterthwaite and
        Kenward–Roger df are derived for the Gaussian REML likelihood, not this one)."""
        if ddf is not None and str(ddf).lower() != "lme4":
            raise TransformError(f"summary(ddf={ddf!r}): lmerTest's denominator df are defined for Gaussian "
                                 "linear mixed models, not transformation models; use summary()")
        info = self.fit_info.get("transform", {})
        head = (f"Transformation (latent-Gaussian) mixed model, h monotone: {info.get('n_cells')} "
                f"cells, {'free cutpoints' if info.get('free') else 'sieve with ' + str(info.get('n_transform_par')) + ' knots'}"
                f"; Laplace log-likelihood {self.loglik:.2f}; latent scale: sigma(reference) = 1, "
                f"h(pooled median) = 0\n")
        return head + super().summary(ddf).replace(
            "Linear mixed model fit by maximum likelihood ", "Latent linear mixed model fit by maximum likelihood ")


def check_classes(formula: str, data: pd.DataFrame, dispersion: str | None) -> None:
    """Raise :class:`SingleClassError` when a factor of the fixed part or of the dispersion
    formula has a single level among the rows with a response."""
    from scoremix.lme.formula import parse_dispersion, parse_formula
    pf = parse_formula(formula)
    cols = [v.column for v in pf.fixed.variables]
    if dispersion:
        cols.append(parse_dispersion(dispersion))
    if pf.response not in data.columns:
        return
    rows = data[data[pf.response].notna()]
    for col in dict.fromkeys(cols):
        if col not in rows.columns:
            continue
        x = rows[col]
        if pd.api.types.is_numeric_dtype(x) and not pd.api.types.is_bool_dtype(x):
            continue
        levels = pd.unique(x.dropna())
        if len(levels) < 2:
            raise SingleLevelError(
                f"column {col!r} has a single level ({list(levels)[:1]}) among the {len(rows)} rows "
                "with a score: a transformation model needs both classes (the transform would "
                "absorb a one-class effect)")


def lmer_transform(formula: str, data: pd.DataFrame, *, weights=None, dispersion: str | None = None,
                   na_action: str = "omit", control: TransformControl | dict | None = None,
                   contrasts: dict[str, str] | None = None, offset=None,
                   transform: str = "monotone") -> TransformLmerResult:
    """``lmer(formula, data, transform="monotone", ...)``: check the classes, build the model
    frame and fit.  Saturated scores (``±inf``, e.g. logits of probabilities 0 and 1) are
    valid here: they are the end cells.  The model frame (which refuses non-finite
    responses for the Gaussian model) is built with them replaced by finite values below /
    above every finite score, and the original scores are put back into the spec."""
    from scoremix.lme.formula import parse_formula
    from scoremix.lme.model_frame import build_model_spec
    check_classes(formula, data, dispersion)
    resp = parse_formula(formula).response
    original = None
    if resp in data.columns and pd.api.types.is_numeric_dtype(data[resp]):
        yv = data[resp].to_numpy(dtype=float)
        inf = np.isinf(yv)
        if inf.any():
            fin = yv[np.isfinite(yv)]
            lo_, hi_ = (fin.min(), fin.max()) if fin.size else (0.0, 0.0)
            span = max(hi_ - lo_, 1.0)
            y2 = np.where(yv == -np.inf, lo_ - span, np.where(yv == np.inf, hi_ + span, yv))
            original = data[resp]
            data = data.assign(**{resp: y2})
    spec = build_model_spec(formula, data, weights=weights, dispersion=dispersion,
                            na_action=na_action, contrasts=contrasts, offset=offset)
    if getattr(spec, "offset", None) is not None:
        raise TransformError("offsets are not supported with transform='monotone' (an offset "
                             "on the latent scale is not a known quantity)")
    if original is not None:
        y = original.loc[spec.data.index].to_numpy(dtype=float)
        spec = dataclasses.replace(spec, y=y, data=spec.data.assign(**{resp: y}))
    strata = None
    if transform == "monotone-by-class":
        col = TransformControl.from_any(control).strata
        if col not in data.columns:
            raise TransformError(f"strata column {col!r} (control=dict(strata=...)) is not a "
                                 f"column of data; columns: {list(data.columns)[:20]}")
        strata = data[col].loc[spec.data.index].rename(col)
    return fit_transform(spec, transform=transform, control=control, strata=strata)


def _edges(code: np.ndarray, K: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Edge index (``offset`` + local) of each row's cell's lower/upper bound (−1: open end)."""
    lo = np.where(code > 0, offset + code - 1, -1)
    hi = np.where(code < K - 1, offset + code, -1)
    return lo, hi


def _problem(spec: ModelSpec, cells, basis, edges=None, keep=None,
             disp_override=None) -> tuple[TransformProblem, int | None]:
    names = list(spec.fixef_names)
    icpt = names.index("(Intercept)") if "(Intercept)" in names else None
    if keep is None:
        keep = [j for j in range(spec.p) if j != icpt]
    X = np.ascontiguousarray(spec.X[:, keep], dtype=float)
    lo, hi = _edges(cells.code, cells.K) if edges is None else edges
    if disp_override is not None:
        disp, n_disp = disp_override
    elif spec.dispersion_codes is not None:
        disp = np.asarray(spec.dispersion_codes, dtype=np.int64)
        n_disp = len(spec.dispersion_levels or []) or int(disp.max()) + 1
    else:
        disp = np.zeros(spec.n, dtype=np.int64)
        n_disp = 1
    cols, term_X, term_p, slices = [], [], [], []
    off, pos = 0, 0
    for t in spec.terms:
        pk = t.p
        c = off + np.asarray(t.codes, np.int64)[:, None] * pk + np.arange(pk)[None, :]
        cols.append(c)
        term_X.append(np.asarray(t.X, float))
        term_p.append(pk)
        slices.append(slice(pos, pos + pk))
        pos += pk
        off += pk * t.n_levels
    cols_a = np.concatenate(cols, axis=1) if cols else np.zeros((spec.n, 0), np.int64)
    P = TransformProblem(basis=basis, lo=lo, hi=hi, X=X, disp=disp, n_disp=n_disp, cols=cols_a,
                         term_X=term_X, term_p=term_p, term_slices=slices, q=off,
                         theta_lower=spec.theta_lower(), weights=None)
    return P, icpt


def _gaussian_start(spec: ModelSpec, y: np.ndarray, disp: np.ndarray,
                    n_disp: int) -> tuple[np.ndarray, float, np.ndarray | None, np.ndarray]:
    """Starting values from a Gaussian model of the normal scores ``y``: the ML LMM (native
    engine) when ``spec`` has random terms, else least squares with the residual SD of every
    dispersion level (``disp``: row codes, ``n_disp`` levels; floored at 1e-3).

    Returns ``β``, the reference level's residual SD ``σ``, the SDs per dispersion level
    (``None`` when the engine fitted one ``σ``) and ``θ`` clipped at 0 (empty without terms).
    """
    if spec.terms:
        from scoremix.lme import native
        s2 = dataclasses.replace(spec, y=y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = native.fit(s2, REML=False, control=dict(warn=False, check_conv=False))
        sd_by = None if g.sigma_by is None else g.sigma_by.to_numpy()
        return (g.fixef.to_numpy(), float(g.sigma), sd_by,
                np.maximum(g.theta.to_numpy(), 0.0))
    beta = np.linalg.lstsq(spec.X, y, rcond=None)[0]
    r = y - spec.X @ beta
    sd_by = np.sqrt(np.bincount(disp, r * r, minlength=n_disp)
                    / np.maximum(np.bincount(disp, minlength=n_disp), 1))
    sd_by = np.maximum(sd_by, 1e-3)
    return beta, float(sd_by[0]), sd_by, np.zeros(0)


def _start(spec: ModelSpec, cells, basis, P: TransformProblem, icpt: int | None) -> np.ndarray:
    """Gaussian LMM (ML, native engine) on the mid-rank normal scores, mapped to the latent
    parametrisation: ``α(u) = (u − β₀)/σ``, ``β/σ``, ``ζ_d = log(σ_d/σ)``, ``θ``."""
    beta, sigma, sd_by, theta = _gaussian_start(spec, np.asarray(cells.u_row, float), P.disp,
                                                P.n_disp)
    b0 = beta[icpt] if icpt is not None else 0.0
    c = (basis.knots - b0) / sigma
    tpar = basis.par_from_c(c)
    keep = [j for j in range(spec.p) if j != icpt]
    br = beta[keep] / sigma
    if P.n_disp > 1 and sd_by is not None:
        zeta = np.log(np.maximum(sd_by[1:], 1e-8) / sd_by[0])
    else:
        zeta = np.zeros(P.n_disp - 1)
    theta = np.where(P.theta_lower == 0.0, np.maximum(theta, 0.05), theta)
    return np.concatenate([tpar, br, zeta, theta])


@dataclasses.dataclass
class _Strata:
    """Set-up of a stratified fit (:mod:`scoremix.transform.strata`)."""

    column: str
    levels: list
    codes: np.ndarray
    cells: list
    basis: StackedBasis
    edges: tuple
    u_row: np.ndarray
    keep: list
    dropped: list
    disp_orig: np.ndarray
    n_disp_orig: int
    fixed: np.ndarray
    newcode: np.ndarray


def _strata_setup(spec: ModelSpec, strata: pd.Series, ctl: TransformControl) -> _Strata:
    """Per-stratum cells and sieves, the fixed-effect columns the strata absorb, and the
    dispersion levels fixed at σ = 1 (the first of each strata–levels component)."""
    col = str(strata.name) if strata.name is not None else ctl.strata
    vals = strata.to_numpy(dtype=object)
    miss = pd.isna(vals)
    if miss.any():
        raise TransformError(f"strata column {col!r} is missing for {int(miss.sum())} row(s) "
                             f"(first at index {list(strata.index[miss])[:3]})")
    cat = pd.Categorical(vals)
    levels = list(cat.categories)
    codes = np.asarray(cat.codes, np.int64)
    if len(levels) < 2:
        raise SingleLevelError(f"strata column {col!r} has a single level ({levels}); "
                               "transform='monotone-by-class' needs at least two strata "
                               "(use transform='monotone')")
    n = spec.n
    lo = np.full(n, -1, np.int64)
    hi = np.full(n, -1, np.int64)
    u_row = np.empty(n)
    cells_l, parts, off = [], [], 0
    for k, lv in enumerate(levels):
        r = codes == k
        try:
            ck = make_cells(spec.y[r], f"{spec.response}[{col} == {lv!r}]", min_distinct=1)
        except TransformError as e:
            raise type(e)(f"stratum {col} == {lv!r}: {e}") from None
        parts.append(make_basis(ck.u_edge, max_free=ctl.max_free, n_knots=ctl.n_knots,
                                min_edges=ctl.min_edges))
        lo[r], hi[r] = _edges(ck.code, ck.K, off)
        u_row[r] = ck.u_row
        off += ck.K - 1
        cells_l.append(ck)
    names = list(spec.fixef_names)
    icpt = names.index("(Intercept)") if "(Intercept)" in names else None
    others = [j for j in range(spec.p) if j != icpt]
    drop = set(stratum_confounded_columns(np.asarray(spec.X, float)[:, others], codes))
    keep = [j for i, j in enumerate(others) if i not in drop]
    dropped = [j for i, j in enumerate(others) if i in drop]
    if spec.dispersion_codes is not None:
        d = np.asarray(spec.dispersion_codes, np.int64)
        nd = len(spec.dispersion_levels or []) or int(d.max()) + 1
    else:
        d, nd = np.zeros(n, np.int64), 1
    fixed = fixed_dispersion_levels(codes, d, nd)
    used = np.bincount(d, minlength=nd) > 0
    free = np.flatnonzero(used & ~fixed)
    newcode = np.zeros(nd, np.int64)
    newcode[free] = np.arange(1, free.size + 1)
    return _Strata(column=col, levels=levels, codes=codes, cells=cells_l,
                   basis=StackedBasis(parts), edges=(lo, hi), u_row=u_row, keep=keep,
                   dropped=dropped, disp_orig=d, n_disp_orig=nd, fixed=fixed, newcode=newcode)


def _start_strata(spec: ModelSpec, S: _Strata, P: TransformProblem) -> np.ndarray:
    """Gaussian LMM (ML) on the within-stratum normal scores; stratum ``k``'s knot values
    ``c_k = (κ_k − μ_k)/σ_k`` with ``μ_k`` the stratum's mean of the absorbed fixed effects
    and ``σ_k`` its reference level's residual SD."""
    beta, sigma, sd_by, theta = _gaussian_start(spec, S.u_row, S.disp_orig, S.n_disp_orig)
    if sd_by is None:
        sd_by = np.full(S.n_disp_orig, sigma)
    absorbed = [j for j in range(spec.p) if j not in S.keep]
    X = np.asarray(spec.X, float)
    cs, sd_k = [], []
    for k, part in enumerate(S.basis.parts):
        r = S.codes == k
        mu = float(np.mean(X[r][:, absorbed] @ beta[absorbed])) if absorbed else 0.0
        lv = np.unique(S.disp_orig[r])
        fx = lv[S.fixed[lv]]
        sk = float(sd_by[fx[0]]) if fx.size else float(np.median(sd_by[lv]))
        sd_k.append(sk)
        cs.append((part.knots - mu) / sk)
    tpar = S.basis.par_from_c(np.concatenate(cs))
    br = beta[S.keep] / sd_k[0]
    zeta = np.zeros(P.n_disp - 1)
    for lvl in np.flatnonzero(S.newcode > 0):
        k = int(np.bincount(S.codes[S.disp_orig == lvl]).argmax())
        zeta[S.newcode[lvl] - 1] = np.log(max(sd_by[lvl], 1e-8) / sd_k[k])
    if P.n_theta:
        theta = np.where(P.theta_lower == 0.0, np.maximum(theta, 0.05), theta)
    return np.concatenate([tpar, br, zeta, theta])


@limits_blas
def fit_transform(spec: ModelSpec, transform: str = "monotone",
                  control: TransformControl | dict | None = None,
                  strata: pd.Series | None = None) -> TransformLmerResult:
    """Fit the transformation mixed model of ``spec`` (see the module docstring); with
    ``transform="monotone-by-class"`` one transform per level of ``strata`` (a Series
    aligned with the model frame's rows; :mod:`scoremix.transform.strata`)."""
    if transform not in TRANSFORMS:
        raise TransformError(f"unknown transform {transform!r}; choose one of {TRANSFORMS} or None")
    if spec.weights is not None:
        raise TransformError("prior weights are not supported with transform='monotone' "
                             "(the latent residual variance is not scaled by them)")
    from scoremix.lme.covstruct import is_structured
    if is_structured(spec.terms):
        raise TransformError("lme4 2.0's cs()/ar1() random terms are not supported with "
                             "transform='monotone'; use an unstructured (x | g) or diag() term, "
                             "or fit the Gaussian model (transform=None)")
    ctl = TransformControl.from_any(control)
    t0 = time.perf_counter()
    S = None
    if transform == "monotone-by-class":
        if strata is None:
            raise TransformError("transform='monotone-by-class' needs the strata (column "
                                 f"{ctl.strata!r})")
        S = _strata_setup(spec, strata, ctl)
        basis = S.basis
        P, icpt = _problem(spec, None, basis, edges=S.edges, keep=S.keep,
                           disp_override=(S.newcode[S.disp_orig], int(S.newcode.max()) + 1))
        x0 = _start_strata(spec, S, P)
    else:
        cells = make_cells(spec.y, spec.response)
        basis = make_basis(cells.u_edge, max_free=ctl.max_free, n_knots=ctl.n_knots,
                           min_edges=ctl.min_edges)
        P, icpt = _problem(spec, cells, basis)
        x0 = _start(spec, cells, basis, P, icpt)
    t1 = time.perf_counter()
    state = LaplaceState(u=np.zeros(P.q))
    nt, p, nz, nth = basis.n_par, P.p, P.n_disp - 1, P.n_theta
    lb = np.concatenate([[-np.inf], np.full(nt - 1, -30.0), np.full(p, -np.inf),
                         np.full(nz, -15.0), P.theta_lower])
    ub = np.concatenate([[np.inf], np.full(nt - 1, 30.0), np.full(p, np.inf), np.full(nz, 15.0),
                         np.full(nth, np.inf)])
    bounds = [(None if not np.isfinite(a) else a, None if not np.isfinite(b) else b)
              for a, b in zip(lb, ub)]

    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        x, res, n_round = x0, None, 0
        for n_round in range(1, ctl.max_rounds + 1):
            f, g = laplace(x, P, state)
            M = _preconditioner(P, x, g, state)
            x, res = _lbfgs(P, state, x, M, lb, ub, ctl)
            f, g = laplace(x, P, state)
            scaled = _scaled_grad(g, M, x, lb, ub)
            if scaled <= ctl.grad_tol / 10:
                break
        if not np.isfinite(f):
            raise TransformError("the transformation-model fit failed (non-finite likelihood)")
    t2 = time.perf_counter()
    max_grad = _scaled_grad(g, M, x, lb, ub)
    messages = []
    if max_grad > ctl.grad_tol:
        messages.append(f"Transformation model failed to converge with max|scaled grad| = "
                        f"{max_grad:.3g} (tol = {ctl.grad_tol:g}); optimizer: {res.message}")
    ex = state.extra
    tpar, beta, zeta, theta = P.split(x)
    c = ex["c"]
    alpha = ex["alpha"]
    names = list(spec.fixef_names)
    fx = np.zeros(spec.p)
    if S is None:
        a0 = basis.weights_at(0.0)
        shift = float(a0 @ c)
        transform_obj = MonotoneTransform(cells.values, alpha - shift)
        keep = [j for j in range(spec.p) if j != icpt]
    else:   # each stratum: no stratum intercept (absorbed columns 0), h_k = the fitted edges
        # The latent mean of a trial is x'β + z'b with the absorbed columns at 0, so h_k must
        # not be moved: a shift of h_k would need a per-stratum intercept in every prediction
        # (there is no such column when the strata are finer than the formula's terms).
        a0 = np.zeros(nt)
        shift, shifts, trs = 0.0, [], []
        # Saturated (no random effects, no fixed effect left, free cutpoints, every σ fixed at 1):
        # the ML transform of each stratum is its empirical CDF on the probit scale, in closed form.
        saturated = bool(nth == 0 and p == 0 and nz == 0 and all(b.free for b in basis.parts))
        info_saturated = saturated
        for k, ck in enumerate(S.cells):
            sh = float(basis.weights_at_stratum(k, 0.0) @ c)    # h_k(median of stratum k)
            e0, e1 = basis.edge_off[k], basis.edge_off[k + 1]
            a_k = alpha[e0:e1]
            if saturated:   # closed-form ML edges: Φ(α_k) = C_k / n_s (the stratum's ECDF)
                a_k = ndtri(np.cumsum(ck.counts)[:-1] / float(ck.counts.sum()))
            trs.append(MonotoneTransform(ck.values, a_k))
            shifts.append(sh)
        transform_obj = StratifiedTransform(S.column, S.levels, trs)
        keep = S.keep
        icpt = None
    # fixed effects and their covariance
    fx[keep] = beta
    if icpt is not None:
        fx[icpt] = -shift
    vc_full = np.full((spec.p, spec.p), np.nan)
    condsd = None
    if ctl.vcov:
        Hj = joint_information(P, alpha, ex["eta"], ex["sig"], ex["Zt"])
        try:
            V = np.linalg.inv(Hj)
        except np.linalg.LinAlgError:
            V = np.linalg.pinv(Hj)
        # map [c, β] → reported fixef: intercept = −a0'c, others = β
        A = np.zeros((spec.p, Hj.shape[0]))
        for r, j in enumerate(keep):
            A[j, nt + r] = 1.0
        if icpt is not None:
            A[icpt, :nt] = -a0
        vc_full = A @ V @ A.T
        if S is not None:   # absorbed columns: fixed at 0 by the identification
            fixed_cols = [j for j in range(spec.p) if j not in keep]
            vc_full[fixed_cols, :] = 0.0
            vc_full[:, fixed_cols] = 0.0
    fixef = pd.Series(fx, index=names, name="Estimate")
    vcov = pd.DataFrame(vc_full, index=names, columns=names)
    # random effects (b = T u) and conditional SDs
    T = theta_to_T(theta, P.term_p)
    u = ex["u"]
    Hinv = ex["Hinv"]
    b_list, csd_list = [], []
    off = 0
    for t, Tk in zip(spec.terms, T):
        pk, nl = t.p, t.n_levels
        ub_ = u[off: off + pk * nl].reshape(nl, pk)
        b_list.append(ub_ @ Tk.T)
        if Hinv is not None:
            idx = off + np.arange(nl)[:, None] * pk + np.arange(pk)[None, :]
            Vb = Hinv[idx[:, :, None], idx[:, None, :]]           # (nl, pk, pk)
            Vl = np.einsum("ij,ljk,mk->lim", Tk, Vb, Tk)
            csd_list.append(np.sqrt(np.maximum(np.einsum("lii->li", Vl), 0.0)))
        else:
            csd_list.append(np.full((nl, pk), np.nan))
        off += pk * nl
    theta_names = [nm for t in spec.terms for nm in t.theta_names()]
    theta_s = pd.Series(theta, index=theta_names, name="theta")
    sigma_by = None
    if spec.dispersion_codes is not None and S is None:
        levels = list(spec.dispersion_levels or [str(i) for i in range(P.n_disp)])
        sigma_by = pd.Series(np.exp(np.concatenate([[0.0], zeta])), index=levels, name="sigma")
    elif spec.dispersion_codes is not None:
        levels = list(spec.dispersion_levels or [str(i) for i in range(S.n_disp_orig)])
        sigma_by = pd.Series(np.exp(np.concatenate([[0.0], zeta]))[S.newcode], index=levels,
                             name="sigma")
    varcorr = _varcorr(spec, T)
    singular = bool(np.any(theta[P.theta_lower == 0.0] < ctl.singular_tol)) if nth else False
    t3 = time.perf_counter()
    info = dict(n_cells=(cells.K if S is None else int(sum(ck.K for ck in S.cells))),
                free=basis.free, n_transform_par=nt,
                knots_u=basis.knots.tolist(), optimizer="L-BFGS-B (analytic gradient)",
                n_eval=state.n_eval, n_inner=state.n_inner, n_iter=int(res.nit), n_rounds=n_round,
                seconds=t3 - t0, seconds_start=t1 - t0, seconds_optimize=t2 - t1,
                seconds_finalize=t3 - t2, converged=not messages, max_grad=max_grad,
                optimizer_message=str(res.message), location_shift=shift,
                laplace=bool(P.q))
    out = TransformLmerResult(
        spec, backend="native-transform", REML=False, fixef=fixef, vcov=vcov, theta=theta_s,
        sigma=1.0, loglik=-f, varcorr=varcorr, ranef_values=b_list, ranef_condsd=csd_list,
        converged=not messages, singular=singular, sigma_by=sigma_by,
        fit_info=dict(transform=info, messages=messages, n_eval=state.n_eval,
                      rho=None if sigma_by is None else (sigma_by.to_numpy() ** 2).tolist()))
    out.transform = transform_obj
    if S is not None:
        info.update(strata=S.column, strata_levels=[str(v) for v in S.levels], closed_form=info_saturated,
                    n_cells_by_stratum=[int(ck.K) for ck in S.cells],
                    median_latent_by_stratum=shifts,
                    absorbed_fixef=[names[j] for j in range(spec.p) if j not in keep],
                    fixed_sigma_levels=[str(lv) for lv, f in zip(
                        sigma_by.index if sigma_by is not None else ["(all)"], S.fixed) if f])
        out.strata = pd.Series(np.asarray(S.levels, dtype=object)[S.codes],
                               index=spec.data.index, name=S.column)
    if ctl.warn:
        for m in messages:
            warnings.warn(m, ConvergenceWarning, stacklevel=3)
        if singular:
            warnings.warn(SINGULAR_FIT_MESSAGE, SingularFitWarning, stacklevel=3)
    return out


def _preconditioner(P: TransformProblem, x: np.ndarray, g: np.ndarray,
                    state: LaplaceState) -> np.ndarray:
    """``M = L^{-T}`` with ``L L' ≈`` Hessian of ``f`` at ``x``: for (transform, β, ζ) the
    Schur complement over ``u`` of the joint information (mapped from knot values to
    ``(γ0, δ)``), for each ``θ_j`` a forward difference of the gradient (diagonal only, so
    that bounds on ``θ`` stay bounds on single coordinates)."""
    ex = state.extra
    nt, p, nz, nth = P.basis.n_par, P.p, P.n_disp - 1, P.n_theta
    k = nt + p + nz
    Hj = joint_information(P, ex["alpha"], ex["eta"], ex["sig"], ex["Zt"])
    A = Hj[:k, :k]
    if P.q:
        B = Hj[:k, k:]
        A = A - B @ np.linalg.solve(Hj[k:, k:], B.T)
    Jc = P.basis.jac_par(x[:nt])
    T = np.eye(k)
    T[:nt, :nt] = Jc
    Hs = T.T @ A @ T
    Hs = (Hs + Hs.T) / 2
    w, V = np.linalg.eigh(Hs)
    # the observed information can be indefinite away from the optimum (log σ directions):
    # precondition with |eigenvalues|, floored (a saddle-free Newton metric)
    w = np.abs(w)
    w = np.maximum(w, max(float(w.max()), 1.0) * 1e-8)
    Ms = V / np.sqrt(w)[None, :]             # Ms Ms' = Hs⁻¹
    M = np.zeros((k + nth, k + nth))
    M[:k, :k] = Ms
    saved_u = state.u.copy()
    for j in range(nth):
        i = k + j
        h = 1e-4 * max(1.0, abs(x[i]))
        xp = x.copy()
        xp[i] += h
        gp = laplace(xp, P, state)[1]
        hjj = (gp[i] - g[i]) / h
        M[i, i] = 1.0 / np.sqrt(hjj) if hjj > 1e-8 else 1.0
        state.u = saved_u.copy()
    return M


def _lbfgs(P: TransformProblem, state: LaplaceState, x0: np.ndarray, M: np.ndarray,
           lb: np.ndarray, ub: np.ndarray, ctl: "TransformControl"):
    """L-BFGS-B in preconditioned coordinates ``x = x0 + M y`` (bounds only on ``θ``,
    whose columns of ``M`` are diagonal)."""
    k = x0.size - P.n_theta
    dM = np.diag(M)
    lby = np.full(x0.size, -np.inf)
    uby = np.full(x0.size, np.inf)
    th = np.arange(k, x0.size)
    lby[th] = (lb[th] - x0[th]) / dM[th]
    uby[th] = (ub[th] - x0[th]) / dM[th]
    bounds = [(None if not np.isfinite(a) else a, None if not np.isfinite(b) else b)
              for a, b in zip(lby, uby)]

    def fg(y):
        x = x0 + M @ y
        try:
            f, g = laplace(x, P, state)
        except (np.linalg.LinAlgError, FloatingPointError):
            return np.inf, np.zeros_like(y)
        if not np.isfinite(f):
            return np.inf, np.zeros_like(y)
        return f, M.T @ g

    res = minimize(fg, np.zeros(x0.size), jac=True, method="L-BFGS-B", bounds=bounds,
                   options=dict(maxiter=ctl.maxiter, gtol=ctl.gtol, ftol=ctl.ftol, maxcor=30))
    x = x0 + M @ res.x
    x[th] = np.clip(x[th], lb[th], ub[th])
    return x, res


def _scaled_grad(g: np.ndarray, M: np.ndarray, x: np.ndarray, lb: np.ndarray,
                 ub: np.ndarray) -> float:
    """``max |√2 M'g|`` (the deviance gradient scaled by the Hessian's Cholesky factor) over
    coordinates not on a bound."""
    sg = np.sqrt(2.0) * (M.T @ g)
    at = (np.isfinite(lb) & (x <= lb + 1e-10)) | (np.isfinite(ub) & (x >= ub - 1e-10))
    sg = np.where(at, 0.0, sg)
    return float(np.max(np.abs(sg))) if sg.size else 0.0


def _varcorr(spec: ModelSpec, T: list[np.ndarray]) -> pd.DataFrame:
    """``as.data.frame(VarCorr(m))`` on the latent scale (residual SD 1)."""
    rows = []
    for t, Tk in zip(spec_terms_info(spec), T):
        S = Tk @ Tk.T
        sd = np.sqrt(np.diag(S))
        names = t["term_names"]
        for i in range(len(names)):
            rows.append((t["group"], names[i], None, S[i, i], sd[i]))
        for j in range(len(names)):
            for i in range(j + 1, len(names)):
                cor = S[i, j] / (sd[i] * sd[j]) if sd[i] > 0 and sd[j] > 0 else np.nan
                rows.append((t["group"], names[j], names[i], S[i, j], cor))
    rows.append(("Residual", None, None, 1.0, 1.0))
    return pd.DataFrame({
        "grp": pd.Series([r[0] for r in rows], dtype=object),
        "var1": pd.Series([r[1] for r in rows], dtype=object),
        "var2": pd.Series([r[2] for r in rows], dtype=object),
        "vcov": np.array([r[3] for r in rows], float),
        "sdcor": np.array([r[4] for r in rows], float)})
