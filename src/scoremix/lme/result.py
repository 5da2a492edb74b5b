"""`LmerResult`: the fitted linear mixed model, with R's names everywhere.

Every backend (native, statsmodels, lme4, glmmTMB) produces the same object (the native
engine directly, the others through :meth:`LmerResult.from_dict` with the JSON schema of
``docs/lmer-result-schema.md``), so fits can be compared field by field.

Layout of the random effects
----------------------------
``ranef`` is a dict ``grouping factor → DataFrame`` (index = the factor's levels, columns =
term names), exactly like lme4's ``ranef(m)``; ``ranef_condsd`` has the same layout and holds
the conditional standard deviations (square roots of the diagonals of lme4's
``attr(ranef(m, condVar = TRUE), "postVar")``).  Terms of one factor split by ``||`` are
joined into one data frame, as lme4 does.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.lme.covstruct import ThetaMap, is_structured
from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.engine import NativeFit, fit_native
from scoremix.lme.errors import NewLevelError
from scoremix.lme.relcov import theta_to_T
from scoremix.lme.show import summary_text
from scoremix.lme.spec import ModelSpec

__all__ = ["LmerResult", "SCHEMA", "INFERENCE", "register_inference"]

#: The implementations behind :class:`LmerResult`'s inference methods (``coef_table``,
#: ``normalize_ddf``, ``confint``, ``r2``, ``check``), registered by the modules that compute them
#: (:mod:`~scoremix.lme.ddf`, :mod:`~scoremix.lme.confint`, :mod:`~scoremix.lme.r2`,
#: :mod:`~scoremix.lme.check`) when they are
#: imported (``import scoremix.lme`` imports them).  They build on this class, so this module
#: imports none of them: the dependency runs one way, with no import cycle.
INFERENCE: dict[str, Any] = {}


def register_inference(name: str, fn: Any) -> None:
    """Make :class:`LmerResult`'s inference method ``name`` call ``fn``."""
    INFERENCE[name] = fn


def _inference(name: str) -> Any:
    try:
        return INFERENCE[name]
    except KeyError:  # pragma: no cover - scoremix.lme registers them all
        raise RuntimeError(f"LmerResult.{name}: its implementation is registered by scoremix.lme; "
                           "import scoremix (or scoremix.lme) first") from None

SCHEMA = "scoremix.lmer/1"


#: ``transform["kind"]`` of a result's JSON → ``loader(plain result, dict) -> result`` (registered by
#: :mod:`scoremix.transform`, so that a transformation fit reloaded from JSON keeps its transform)
RESULT_LOADERS: dict[str, Any] = {}


class LmerResult:
    """A fitted linear mixed model ``y = Xβ + Zb + ε`` (see :mod:`scoremix.lme.spec`).

    Attributes
    ----------
    spec : ModelSpec
        the model that was fitted.
    backend : str
        ``"native"``, ``"statsmodels"``, ``"lme4"``, ``"glmmTMB"``.
    REML : bool
        REML (``True``) or ML fit.
    fixef : pandas.Series
        ``β̂`` with R's names.
    vcov : pandas.DataFrame
        ``Var(β̂) = σ̂² (R_X R_X')^{-1}``.
    se, tvalues : pandas.Series
        ``sqrt(diag(vcov))`` and ``β̂ / se``.
    theta : pandas.Series
        lme4's relative covariance parameters (``getME(m, "theta")`` names).
    sigma : float
        residual SD (of the reference level for a dispersion model).
    sigma_by : pandas.Series or None
        residual SD per dispersion level ``σ·sqrt(ρ_d)``.
    varcorr : pandas.DataFrame
        ``as.data.frame(VarCorr(m))``: columns ``grp, var1, var2, vcov, sdcor``.
    loglik : float
        log-likelihood (REML log-likelihood for REML fits, as R's ``logLik``).
    converged, singular : bool
        optimiser convergence (all lme4 checks passed) and ``isSingular(m, tol = 1e-4)``.
    fit_info : dict
        backend details (timings, number of evaluations, messages).
    condvar : list of numpy.ndarray or None
        native fits: conditional covariances ``(n_k, p_k, p_k)`` of the random effects per
        term (lme4's ``postVar``).
    cp : CrossProducts or None
        native fits: the cross-products, re-used by refits (``confint``, ``anova``).
    transform : None or MonotoneTransform
        ``None`` for the Gaussian model; for ``lmer(..., transform="monotone")`` the fitted
        map from scores to the latent scale (see :class:`scoremix.transform.MonotoneTransform`).
    """

    transform = None

    def __init__(self, spec: ModelSpec | None, *, backend: str, REML: bool, fixef: pd.Series,
                 vcov: pd.DataFrame, theta: pd.Series, sigma: float, loglik: float,
                 varcorr: pd.DataFrame, ranef_values: list[np.ndarray],
                 ranef_condsd: list[np.ndarray], converged: bool = True,
                 singular: bool = False, sigma_by: pd.Series | None = None,
                 formula: str | None = None, dispersion: str | None = None,
                 nobs: int | None = None, ngrps: dict[str, int] | None = None,
                 term_info: list[dict] | None = None, fit_info: dict | None = None,
                 aic: float | None = None, bic: float | None = None,
                 condvar: list[np.ndarray] | None = None, cp: CrossProducts | None = None):
        self.spec = spec
        self.backend = backend
        self.REML = bool(REML)
        self.fixef = fixef
        self.vcov = vcov
        self.theta = theta
        self.sigma = float(sigma)
        self.sigma_by = sigma_by
        self.loglik = float(loglik)
        self.varcorr = varcorr
        self._b = ranef_values
        self._condsd = ranef_condsd
        self.converged = bool(converged)
        self.singular = bool(singular)
        self.formula = formula if formula is not None else (spec.formula if spec else "")
        self.dispersion = dispersion if dispersion is not None else (
            spec.dispersion_formula if spec else None)
        self.nobs = int(nobs if nobs is not None else spec.n)
        self.ngrps = dict(ngrps if ngrps is not None else spec.ngrps())
        if term_info is None:
            term_info = [dict(group=t.group, group_factor=t.group_factor,
                              term_names=list(t.term_names), levels=list(t.levels))
                         for t in spec.terms]
        self._terms = term_info
        self.fit_info = dict(fit_info or {})
        self._aic = aic
        self._bic = bic
        self.condvar = condvar
        self.cp = cp

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_native(cls, nf: NativeFit) -> "LmerResult":
        """The result of a native fit (:func:`scoremix.lme.engine.fit_native`)."""
        spec, opt, REML, est = nf.spec, nf.opt, nf.REML, nf.estimates
        names = list(spec.fixef_names)
        fixef = pd.Series(est["beta"], index=names, name="Estimate")
        vcov = pd.DataFrame(est["vcov"], index=names, columns=names)
        theta_names = [nm for t in spec.terms for nm in t.theta_names()]
        theta = pd.Series(opt.theta, index=theta_names, name="theta")
        sigma = est["sigma"]
        sigma_by = None
        if opt.rho is not None:
            levels = list(spec.dispersion_levels or [str(i) for i in range(len(opt.rho))])
            sigma_by = pd.Series(sigma * np.sqrt(opt.rho), index=levels, name="sigma")
        varcorr = _varcorr_frame(spec_terms_info(spec), est["T"], sigma)
        condvar = est.get("condvar")
        condsd = None if condvar is None else _condsd_of(condvar)
        crit = float(opt.criterion)
        res = cls(spec, backend="native", REML=REML, fixef=fixef, vcov=vcov, theta=theta,
                  sigma=sigma, loglik=-crit / 2, varcorr=varcorr, ranef_values=est["b"],
                  ranef_condsd=condsd, converged=opt.converged, singular=opt.singular,
                  sigma_by=sigma_by,
                  fit_info=dict(rho=None if opt.rho is None else opt.rho.tolist(), **nf.info),
                  condvar=condvar, cp=nf.cp)
        if condvar is None:   # computed on first use (lme4: ranef(condVar = TRUE))
            from functools import partial

            from scoremix.lme.conditional import condvar_at
            res._condvar_fn = partial(condvar_at, nf.cp, np.asarray(opt.theta, float).copy(),
                                      REML, opt.rho)
        return res

    # ------------------------------------------------------------------ lazy condvar
    _condvar_fn = None
    _condvar_store = None
    _condsd_store = None

    @property
    def condvar(self) -> list[np.ndarray] | None:
        """Native fits: the conditional covariances ``(n_k, p_k, p_k)`` per term (lme4's
        ``postVar``), computed on first access where the fit left them out."""
        if self._condvar_store is None and self._condvar_fn is not None:
            fn, self._condvar_fn = self._condvar_fn, None
            self._condvar_store = fn()
        return self._condvar_store

    @condvar.setter
    def condvar(self, value: list[np.ndarray] | None) -> None:
        self._condvar_store = value
        self._condvar_fn = None

    @property
    def _condsd(self) -> list[np.ndarray]:
        """Conditional SDs per term (from :attr:`condvar` where those are lazy)."""
        if self._condsd_store is None:
            cv = self.condvar
            if cv is not None:
                self._condsd_store = _condsd_of(cv)
        return self._condsd_store

    @_condsd.setter
    def _condsd(self, value: list[np.ndarray] | None) -> None:
        self._condsd_store = value

    @classmethod
    def from_dict(cls, d: dict[str, Any], spec: ModelSpec | None = None) -> "LmerResult":
        """Build a result from the JSON schema of ``docs/lmer-result-schema.md``.

        Parameters
        ----------
        d:
            the dictionary (e.g. ``json.load`` of an R script's output).
        spec:
            the fitted model's spec; needed for ``fitted``, ``residuals``, ``predict``,
            ``r2`` and refitting (``anova``, profile/bootstrap intervals).
        """
        if d.get("schema", SCHEMA) != SCHEMA:
            raise ValueError(f"unknown result schema {d.get('schema')!r}, expected {SCHEMA!r}")
        names = list(d["fixef"].keys())
        fixef = pd.Series([float(d["fixef"][k]) for k in names], index=names, name="Estimate")
        vcov = pd.DataFrame(np.asarray(d["vcov"], dtype=float).reshape(len(names), len(names)),
                            index=names, columns=names)
        vc = pd.DataFrame(d["varcorr"])
        for col in ("var1", "var2"):
            if col not in vc:
                vc[col] = None
        vc = _normalize_varcorr(vc)
        theta_vals = np.atleast_1d(np.asarray(d.get("theta", []), dtype=float))
        if spec is not None:
            term_info = spec_terms_info(spec)
        else:
            term_info = _terms_from_varcorr(vc, d.get("ranef", {}))
        theta_names = []
        for t in term_info:
            p = len(t["term_names"])
            for j in range(p):
                for i in range(j, p):
                    g = t["group_factor"]  # lme4 names θ by the grouping factor
                    theta_names.append(f"{g}.{t['term_names'][i]}" if i == j else
                                       f"{g}.{t['term_names'][i]}.{t['term_names'][j]}")
        if len(theta_names) != len(theta_vals):
            theta_names = d.get("theta_names") or [f"theta{i + 1}" for i in range(len(theta_vals))]
        theta = pd.Series(theta_vals, index=theta_names, name="theta")
        # random effects: split each grouping factor's columns over its terms, in order
        b, csd = [], []
        used: dict[str, int] = {}
        for t in term_info:
            g = t["group_factor"]
            r = d.get("ranef", {}).get(g)
            p = len(t["term_names"])
            if r is None:
                b.append(np.zeros((len(t["levels"]), p)))
                csd.append(np.full((len(t["levels"]), p), np.nan))
                continue
            vals = np.asarray(r["values"], dtype=float).reshape(len(_as_list(r["levels"])), -1)
            cs = np.asarray(r.get("condsd") or np.full_like(vals, np.nan), dtype=float).reshape(vals.shape)
            lv = [str(v) for v in _as_list(r["levels"])]
            order = _align_levels(lv, t["levels"])
            start = used.get(g, 0)
            b.append(vals[order, start:start + p])
            csd.append(cs[order, start:start + p])
            used[g] = start + p
        sigma_by = d.get("sigma_by")
        if sigma_by is not None:
            sigma_by = pd.Series({str(k): float(v) for k, v in sigma_by.items()}, name="sigma")
        res = cls(spec, backend=d.get("backend", "unknown"), REML=bool(d["REML"]), fixef=fixef,
                   vcov=vcov, theta=theta, sigma=float(d["sigma"]), loglik=float(d["loglik"]),
                   varcorr=vc, ranef_values=b, ranef_condsd=csd,
                   converged=bool(d.get("converged", True)), singular=bool(d.get("singular", False)),
                   sigma_by=sigma_by, formula=d.get("formula"), dispersion=d.get("dispersion"),
                   nobs=int(d["nobs"]), ngrps={k: int(v) for k, v in d.get("ngrps", {}).items()},
                   term_info=term_info, aic=d.get("aic"), bic=d.get("bic"),
                   fit_info=d.get("fit_info"))
        tr = d.get("transform")
        if tr is None or type(res) is not LmerResult:
            return res
        loader = RESULT_LOADERS.get(str(tr.get("kind")))
        if loader is None:
            raise ValueError(f"the result holds a transformation fit (transform kind {tr.get('kind')!r}) but no "
                             "loader is registered for it; import scoremix (scoremix.transform) first")
        return loader(res, d)

    # ------------------------------------------------------------------ simple quantities
    @property
    def se(self) -> pd.Series:
        return pd.Series(np.sqrt(np.diag(self.vcov.to_numpy())), index=self.fixef.index,
                         name="Std. Error")

    @property
    def tvalues(self) -> pd.Series:
        return (self.fixef / self.se).rename("t value")

    @property
    def n_disp_params(self) -> int:
        return 0 if self.sigma_by is None else len(self.sigma_by) - 1

    @property
    def npar(self) -> int:
        """Number of estimated parameters (``β``, ``θ`` (or the SDs and ``ρ`` of lme4 2.0's
        ``cs()``/``ar1()`` terms), ``σ`` and the ``ρ_d``), R's ``attr(logLik(m), "df")``."""
        return len(self.fixef) + self.n_varpar + 1 + self.n_disp_params

    @property
    def n_varpar(self) -> int:
        """Number of random-effect covariance parameters: ``len(θ)``, fewer with
        ``cs()``/``ar1()`` terms (:class:`~scoremix.lme.covstruct.ThetaMap`)."""
        if self.spec is not None and is_structured(self.spec.terms):
            return ThetaMap.of(self.spec.terms).n_phi
        return len(self.theta)

    @property
    def reml_criterion(self) -> float | None:
        """``-2·ℓ_REML`` (REML fits), ``None`` for ML fits."""
        return -2 * self.loglik if self.REML else None

    @property
    def deviance(self) -> float | None:
        """``-2·ℓ`` (ML fits, lme4's ``deviance``), ``None`` for REML fits."""
        return None if self.REML else -2 * self.loglik

    @property
    def aic(self) -> float:
        """``-2ℓ + 2·npar``."""
        return -2 * self.loglik + 2 * self.npar

    @property
    def bic(self) -> float:
        """``-2ℓ + log(n)·npar``."""
        return -2 * self.loglik + math.log(self.nobs) * self.npar

    @property
    def terms_info(self) -> list[dict]:
        return [dict(t) for t in self._terms]

    def cov_re(self) -> list[np.ndarray]:
        """Covariance matrix ``Σ_k = σ² T_k T_k'`` of every random term (lme4 order)."""
        T = theta_to_T(self.theta.to_numpy(), [len(t["term_names"]) for t in self._terms])
        return [self.sigma ** 2 * Tk @ Tk.T for Tk in T]

    # ------------------------------------------------------------------ random effects
    def _group_frames(self, arrays: list[np.ndarray]) -> dict[str, pd.DataFrame]:
        out: dict[str, pd.DataFrame] = {}
        for t, a in zip(self._terms, arrays):
            df = pd.DataFrame(a, index=pd.Index(t["levels"], name=t["group_factor"]),
                              columns=t["term_names"])
            g = t["group_factor"]
            out[g] = df if g not in out else pd.concat([out[g], df], axis=1)
        return out

    @property
    def ranef(self) -> dict[str, pd.DataFrame]:
        """Conditional modes per grouping factor (lme4's ``ranef(m)``)."""
        return self._group_frames(self._b)

    @property
    def ranef_condsd(self) -> dict[str, pd.DataFrame]:
        """Conditional SDs of the random effects, same layout as :attr:`ranef`."""
        return self._group_frames(self._condsd)

    # ------------------------------------------------------------------ fitted values
    def require_spec(self, what: str) -> ModelSpec:
        """The fitted model's spec; a :class:`ValueError` naming ``what`` needs it when the
        result was built without one."""
        if self.spec is None:
            raise ValueError(f"{what} needs the model spec; build the result with from_dict(d, spec)")
        return self.spec

    def _zb(self, design: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        out = None
        for (codes, Xk), bk in zip(design, self._b):
            codes = np.asarray(codes, dtype=np.int64)
            ok = codes >= 0
            contrib = np.zeros(codes.shape[0])
            contrib[ok] = np.einsum("ij,ij->i", np.asarray(Xk, float)[ok], bk[codes[ok]])
            out = contrib if out is None else out + contrib
        return out if out is not None else 0.0

    @property
    def fitted(self) -> pd.Series:
        """``Xβ̂ + Zb̂`` for the rows used in fitting (index of the model frame)."""
        spec = self.require_spec("fitted")
        f = spec.X @ self.fixef.to_numpy() + self._zb([(t.codes, t.X) for t in spec.terms])
        if getattr(spec, "offset", None) is not None:
            f = f + spec.offset
        return pd.Series(f, index=spec.data.index, name="fitted")

    @property
    def residuals(self) -> pd.Series:
        """Response residuals ``y - fitted`` (lme4's ``residuals(m)``)."""
        spec = self.require_spec("residuals")
        y = spec.y if getattr(spec, "offset", None) is None else spec.y + spec.offset
        return pd.Series(y - self.fitted.to_numpy(), index=spec.data.index, name="residuals")

    def predict(self, newdata: pd.DataFrame | None = None, re_form: str | None = None,
                allow_new_levels: bool | None = None, *, se_fit: bool = False,
                interval: str | None = None, level: float = 0.95) -> pd.Series | pd.DataFrame:
        """Predictions ``Xβ̂ + Zb̂`` (``re_form=None``) or ``Xβ̂`` (``re_form="~0"`` or
        ``"NA"``; a formula such as ``"~ (1 | speaker)"`` keeps the random terms it lists)
        for ``newdata``.  Without ``newdata``: the fitted values.

        ``se_fit=True`` or ``interval="confidence" | "prediction"`` return a data frame
        with ``fit``, ``se_fit`` (lme4's ``predict(..., se.fit = TRUE)``) and
        ``lower``/``upper`` (see :mod:`scoremix.lme.prediction`).

        Grouping levels unseen in fitting get random effect 0 (their population mean).
        ``allow_new_levels=False`` makes them an error (lme4's default), ``True`` accepts them
        silently (lme4's ``allow.new.levels = TRUE``), and the default ``None`` accepts them
        with a warning that names the grouping factor and the first unseen levels.
        """
        spec = self.require_spec("predict")
        population = re_form is not None and str(re_form).replace(" ", "") in ("~0", "NA", "~1-1")
        if se_fit or interval is not None or (re_form is not None and not population):
            from scoremix.lme.prediction import prediction_se
            if newdata is not None and allow_new_levels is not True and not population:
                self._check_new_levels(newdata, spec.random_design(newdata), allow_new_levels)
            out = prediction_se(self, newdata, re_form, True, interval, level)
            return out if (se_fit or interval is not None) else out["fit"].rename("predicted")
        if newdata is None:
            X, design, idx = spec.X, [(t.codes, t.X) for t in spec.terms], spec.data.index
        else:
            if spec.fixed_design is None or spec.random_design is None:
                raise ValueError("the spec has no fixed_design/random_design to encode newdata")
            X = np.asarray(spec.fixed_design(newdata), dtype=float)
            design = [] if population else spec.random_design(newdata)
            idx = newdata.index
            if allow_new_levels is not True:
                self._check_new_levels(newdata, design, allow_new_levels)
        out = X @ self.fixef.to_numpy()
        if getattr(spec, "offset", None) is not None:
            out = out + (spec.offset if newdata is None else spec.offset_design(newdata))
        if not population:
            out = out + self._zb(design)
        return pd.Series(out, index=idx, name="predicted")

    def _check_new_levels(self, newdata: pd.DataFrame, design: list[tuple[np.ndarray, np.ndarray]],
                          allow_new_levels: bool | None) -> None:
        """Warn about (``None``) or refuse (``False``) grouping levels unseen in fitting."""
        spec = self.require_spec("predict")
        seen: set[str] = set()
        for term, (codes, _) in zip(spec.terms, design):
            new = np.flatnonzero(np.asarray(codes) < 0)
            if new.size == 0 or term.group_factor in seen:
                continue
            seen.add(term.group_factor)
            cols = [c for c in term.group_factor.split(":") if c in newdata.columns]
            vals = (newdata.iloc[new][cols].astype(str).agg(":".join, axis=1).unique().tolist()
                    if cols else [])
            msg = (f"newdata has {new.size} row(s) with levels of {term.group_factor!r} unseen in "
                   f"fitting (e.g. {vals[:5]}); their random effects are set to 0")
            if allow_new_levels is False:
                raise NewLevelError(msg + "; pass allow_new_levels=True to accept them")
            warnings.warn(msg + " (pass allow_new_levels=True to silence this warning)",
                          UserWarning, stacklevel=3)

    def simulate(self, nsim: int = 1, *, seed: int | np.random.Generator | None = None,
                 re_form: str | None = "~0", newdata: pd.DataFrame | None = None) -> pd.DataFrame:
        """Simulated responses from the fit (lme4's ``simulate``; see
        :mod:`scoremix.lme.simulation`)."""
        from scoremix.lme.simulation import simulate_lmer
        return simulate_lmer(self, nsim, seed=seed, re_form=re_form, newdata=newdata)

    def check(self, **kwargs: Any):
        """Model checks: singularity, convergence, scaled residuals, influential levels
        (see :func:`scoremix.lme.check.check_model`)."""
        return _inference("check")(self, **kwargs)

    # ------------------------------------------------------------------ goodness of fit
    def r2(self) -> dict[str, float]:
        """Nakagawa–Schielzeth marginal and conditional R² (see :func:`scoremix.lme.r2.r2_nakagawa`)."""
        return _inference("r2")(self)

    # ------------------------------------------------------------------ inference
    def confint(self, method: str = "profile", level: float = 0.95, parm: Sequence[str] | None = None,
                n_boot: int = 500, seed: int | None = None, progress: bool = True) -> pd.DataFrame:
        """Confidence intervals (see :func:`scoremix.lme.inference.confint`)."""
        return _inference("confint")(self, method=method, level=level, parm=parm, n_boot=n_boot, seed=seed,
                       progress=progress)

    def refit(self, REML: bool | None = None, y: np.ndarray | None = None, **control: Any) -> "LmerResult":
        """Refit the same model natively (optionally with ML/REML switched or a new response).

        The cross-products of a native fit are re-used when the response is unchanged."""
        spec = self.require_spec("refit")
        cp = self.cp
        if y is not None:
            import dataclasses
            spec = dataclasses.replace(spec, y=np.asarray(y, float))
            cp = None
        nf = fit_native(spec, REML=self.REML if REML is None else REML, control=control or None,
                        cp=cp)
        return LmerResult.from_native(nf)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dictionary of ``docs/lmer-result-schema.md``."""
        def nn(v):
            return None if v is None or (isinstance(v, float) and np.isnan(v)) else v
        ranef = {}
        for g, df in self.ranef.items():
            cs = self.ranef_condsd[g]
            ranef[g] = dict(levels=[str(v) for v in df.index], terms=list(df.columns),
                            values=df.to_numpy().tolist(), condsd=cs.to_numpy().tolist())
        return {
            "schema": SCHEMA,
            "backend": self.backend,
            "formula": self.formula,
            "dispersion": self.dispersion,
            "REML": self.REML,
            "nobs": self.nobs,
            "ngrps": {k: int(v) for k, v in self.ngrps.items()},
            "fixef": {k: float(v) for k, v in self.fixef.items()},
            "se": {k: float(v) for k, v in self.se.items()},
            "vcov": self.vcov.to_numpy().tolist(),
            "theta": [float(v) for v in self.theta],
            "sigma": self.sigma,
            "sigma_by": None if self.sigma_by is None else {str(k): float(v) for k, v in self.sigma_by.items()},
            "varcorr": [dict(grp=r.grp, var1=nn(r.var1), var2=nn(r.var2), vcov=float(r.vcov),
                             sdcor=float(r.sdcor)) for r in self.varcorr.itertuples()],
            "loglik": self.loglik,
            "reml_criterion": self.reml_criterion,
            "deviance": self.deviance,
            "aic": self.aic,
            "bic": self.bic,
            "converged": self.converged,
            "singular": self.singular,
            "ranef": ranef,
        }

    def to_json(self, path: str | Path | None = None, indent: int | None = None) -> str:
        """``to_dict()`` as JSON text, also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            Path(path).write_text(text)
        return text

    # ------------------------------------------------------------------ printing
    def __repr__(self) -> str:
        crit = (f"REML criterion {self.reml_criterion:.4f}" if self.REML
                else f"deviance {self.deviance:.4f}")
        fx = ", ".join(f"{k}={v:.4g}" for k, v in self.fixef.items())
        return (f"<LmerResult {self.formula!r} backend={self.backend} nobs={self.nobs} {crit}; "
                f"fixef: {fx}; sigma={self.sigma:.4g}"
                f"{'; singular' if self.singular else ''}{'' if self.converged else '; NOT converged'}>")

    def coef_table(self, ddf: str = "Satterthwaite") -> pd.DataFrame:
        """lmerTest's coefficient table: ``Estimate``, ``Std. Error``, ``df``, ``t value``,
        ``Pr(>|t|)`` with Satterthwaite's (default) or Kenward–Roger's degrees of freedom;
        ``ddf="lme4"`` gives lme4's three columns (see :mod:`scoremix.lme.ddf`)."""
        return _inference("coef_table")(self, ddf)

    def summary(self, ddf: str | None = None) -> str:
        """lme4-style text summary (``print(summary(m))``); with ``ddf="Satterthwaite"`` or
        ``"Kenward-Roger"`` the fixed-effects table has lmerTest's ``df`` and
        ``Pr(>|t|)`` columns (``summary(m, ddf = …)`` of lmerTest)."""
        if ddf is None or str(ddf).lower() == "lme4":
            return summary_text(self)
        method = _inference("normalize_ddf")(ddf)
        return summary_text(self, _inference("coef_table")(self, method), method)


def _as_list(v: Any) -> list:
    """JSON from R (``auto_unbox``) turns length-1 vectors into scalars; undo that."""
    return list(v) if isinstance(v, (list, tuple, np.ndarray)) else [v]


def spec_terms_info(spec: ModelSpec) -> list[dict]:
    return [dict(group=t.group, group_factor=t.group_factor, term_names=list(t.term_names),
                 levels=[str(v) for v in t.levels]) for t in spec.terms]


def _terms_from_varcorr(vc: pd.DataFrame, ranef: dict[str, Any]) -> list[dict]:
    """Random terms of a result without its spec, in VarCorr's order: one term per ``grp``
    of ``as.data.frame(VarCorr(m))`` (``g``, ``g.1`` for the parts of ``(x || g)``), its
    columns the variance rows; the grouping factor is ``grp`` without lme4's ``.k`` suffix
    when that names a factor of ``ranef``.  Falls back to one term per ``ranef`` factor."""
    terms: list[dict] = []
    for grp in dict.fromkeys(vc["grp"]):
        if grp == "Residual":
            continue
        rows = vc[(vc["grp"] == grp) & vc["var2"].isna()]
        factor = grp
        if factor not in ranef and "." in grp and grp.rsplit(".", 1)[0] in ranef \
                and grp.rsplit(".", 1)[1].isdigit():
            factor = grp.rsplit(".", 1)[0]
        r = ranef.get(factor, {})
        terms.append(dict(group=grp, group_factor=factor, term_names=[str(v) for v in rows["var1"]],
                          levels=[str(v) for v in _as_list(r.get("levels", []))]))
    if sum(len(t["term_names"]) for t in terms) != sum(len(_as_list(r["terms"])) for r in ranef.values()):
        terms = [dict(group=g, group_factor=g, term_names=_as_list(r["terms"]),
                      levels=[str(v) for v in _as_list(r["levels"])]) for g, r in ranef.items()]
    return terms


def _align_levels(have: list[str], want: list[str]) -> np.ndarray:
    if have == want:
        return np.arange(len(want))
    pos = {v: i for i, v in enumerate(have)}
    missing = [v for v in want if v not in pos]
    if missing:
        raise ValueError(f"random-effect levels {missing[:5]} of the spec are missing from the result")
    return np.array([pos[v] for v in want])


def _varcorr_frame(terms: list[dict], T: list[np.ndarray], sigma: float) -> pd.DataFrame:
    """``as.data.frame(VarCorr(m))``: per term the variances, then the covariances (lower
    triangle, column-major: ``var1`` = column name, ``var2`` = row name), then ``Residual``."""
    rows = []
    for t, Tk in zip(terms, T):
        S = sigma ** 2 * Tk @ Tk.T
        sd = np.sqrt(np.diag(S))
        names = t["term_names"]
        p = len(names)
        for i in range(p):
            rows.append((t["group"], names[i], None, S[i, i], sd[i]))
        for j in range(p):
            for i in range(j + 1, p):
                cor = S[i, j] / (sd[i] * sd[j]) if sd[i] > 0 and sd[j] > 0 else np.nan
                rows.append((t["group"], names[j], names[i], S[i, j], cor))
    rows.append(("Residual", None, None, sigma ** 2, sigma))
    grp, var1, var2, vcov, sdcor = zip(*rows)
    return _varcorr_columns(grp, var1, var2, vcov, sdcor)


def _normalize_varcorr(vc: pd.DataFrame) -> pd.DataFrame:
    """Columns ``grp, var1, var2`` as Python objects (``None`` where R has ``NA``), ``vcov``
    and ``sdcor`` as float."""
    return _varcorr_columns(vc["grp"], vc["var1"], vc["var2"], vc["vcov"], vc["sdcor"])


def _varcorr_columns(grp, var1, var2, vcov, sdcor) -> pd.DataFrame:
    """The VarCorr frame of :func:`_normalize_varcorr` from its five columns."""
    def name(v):
        return None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
    return pd.DataFrame({
        "grp": pd.Series([str(v) for v in grp], dtype=object),
        "var1": pd.Series([name(v) for v in var1], dtype=object),
        "var2": pd.Series([name(v) for v in var2], dtype=object),
        "vcov": np.asarray(vcov, dtype=float),
        "sdcor": np.asarray(sdcor, dtype=float),
    })


def _condsd_of(condvar: list[np.ndarray]) -> list[np.ndarray]:
    """Conditional SDs ``(n_k, p_k)`` from the conditional covariances ``(n_k, p_k, p_k)``."""
    return [np.sqrt(np.einsum("lii->li", V)) for V in condvar]
