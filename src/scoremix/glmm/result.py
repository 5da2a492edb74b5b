r"""``GlmerResult``: a fitted GLMM with the interface of :class:`scoremix.LmerResult` where
the quantities mean the same.

Model: :math:`\eta = o + X\beta + Zb`, :math:`b = \Lambda_\theta u`,
:math:`u \sim N(0, I)`, :math:`E(y\mid b) = g^{-1}(\eta)` (binomial or Poisson, scale 1).

* ``loglik`` is :math:`-\tfrac12` the criterion lme4 reports (the Laplace or adaptive
  Gauss–Hermite approximation; ``logLik(m)`` in lme4), ``deviance`` is lme4's
  ``deviance(m)`` for GLMMs: the sum of the deviance residuals
  :math:`\sum_i d_i(y_i, \tilde\mu_i)` at the conditional modes;
* ``AIC = -2ℓ + 2k``, ``BIC = -2ℓ + k log n`` with :math:`k` = ``len(β) + len(θ)``;
* ``vcov``: see :mod:`scoremix.glmm.fit`; z tests :math:`\hat\beta_j / se_j`.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from scoremix.glmm.family import Family
from scoremix.glmm.fit import GlmmFit
from scoremix.glmm.pirls import GlmmData
from scoremix.lme.relcov import theta_to_T
from scoremix.lme.spec import ModelSpec

__all__ = ["GlmerResult"]


class GlmerResult:
    """A fitted generalised linear mixed model (see the module docstring).

    Attributes
    ----------
    fixef, vcov, se, zvalues, pvalues, theta, varcorr, loglik, deviance, aic, bic, npar,
    nobs, converged, singular, messages, family, nAGQ, backend, spec, fit_info.
    """

    REML = False

    def __init__(self, spec: ModelSpec, family: Family, *, backend: str, nAGQ: int,
                 fixef: pd.Series, vcov: pd.DataFrame, theta: pd.Series, criterion: float,
                 deviance: float, u: np.ndarray | None, condvar: list[np.ndarray] | None,
                 formula: str, response_text: str, data: GlmmData | None,
                 messages: list[str], fit_info: dict[str, Any], nobs: int,
                 criterion_offset: float = 0.0):
        self.spec = spec
        self.family = family
        self.backend = backend
        self.nAGQ = nAGQ
        self.fixef = fixef
        self.vcov = vcov
        self.theta = theta
        self.criterion = float(criterion)
        self._deviance = float(deviance)
        self.u = u
        self.condvar = condvar
        self.formula = formula
        self.response_text = response_text
        self.glmm_data = data
        self.messages = list(messages)
        self.fit_info = dict(fit_info)
        self.nobs = int(nobs)
        self.sigma = 1.0
        self.sigma_by = None
        T = theta_to_T(theta.to_numpy(), [t.p for t in spec.terms])
        self.singular = any(np.min(np.abs(np.diag(Tk))) < 1e-4 for Tk in T) if T else False
        self.converged = not any("converge" in m for m in self.messages)

    # -- scalar summaries ---------------------------------------------------------------
    @property
    def loglik(self) -> float:
        return -0.5 * self.criterion

    @property
    def deviance(self) -> float:
        return self._deviance

    @property
    def npar(self) -> int:
        """``len(β)`` plus the variance parameters (fewer than ``len(θ)`` with cs()/ar1())."""
        return len(self.fixef) + int(self.fit_info.get("n_varpar", len(self.theta)))

    @property
    def aic(self) -> float:
        return self.criterion + 2 * self.npar

    @property
    def bic(self) -> float:
        return self.criterion + self.npar * np.log(self.nobs)

    @property
    def se(self) -> pd.Series:
        return pd.Series(np.sqrt(np.diag(self.vcov.to_numpy())), index=self.fixef.index)

    @property
    def zvalues(self) -> pd.Series:
        return self.fixef / self.se

    @property
    def pvalues(self) -> pd.Series:
        return pd.Series(2 * stats.norm.sf(np.abs(self.zvalues.to_numpy())), index=self.fixef.index)

    def coef_table(self) -> pd.DataFrame:
        """lme4's ``coef(summary(m))``: Estimate, Std. Error, z value, Pr(>|z|)."""
        return pd.DataFrame({"Estimate": self.fixef, "Std. Error": self.se,
                             "z value": self.zvalues, "Pr(>|z|)": self.pvalues})

    # -- random effects -----------------------------------------------------------------
    @property
    def cov_re(self) -> list[np.ndarray]:
        T = theta_to_T(self.theta.to_numpy(), [t.p for t in self.spec.terms])
        return [Tk @ Tk.T for Tk in T]

    @property
    def varcorr(self) -> pd.DataFrame:
        """``as.data.frame(VarCorr(m))`` (no residual row: the scale is fixed at 1)."""
        rows = []
        for t, S in zip(self.spec.terms, self.cov_re):
            sd = np.sqrt(np.diag(S))
            for i in range(t.p):
                rows.append((t.group, t.term_names[i], None, S[i, i], sd[i]))
            for j in range(t.p):
                for i in range(j + 1, t.p):
                    cor = S[i, j] / (sd[i] * sd[j]) if sd[i] > 0 and sd[j] > 0 else np.nan
                    rows.append((t.group, t.term_names[j], t.term_names[i], S[i, j], cor))
        return pd.DataFrame(rows, columns=["grp", "var1", "var2", "vcov", "sdcor"])

    def _b(self) -> list[np.ndarray]:
        """Conditional modes ``b = Λu`` per term, ``(n_k, p_k)``."""
        T = theta_to_T(self.theta.to_numpy(), [t.p for t in self.spec.terms])
        out, pos = [], 0
        for t, Tk in zip(self.spec.terms, T):
            uk = self.u[pos:pos + t.p * t.n_levels].reshape(t.n_levels, t.p)
            out.append(uk @ Tk.T)
            pos += t.p * t.n_levels
        return out

    def joint_cov(self) -> np.ndarray:
        """Covariance of ``(u, β)`` from the Laplace approximation at the mode: the inverse
        of the penalised Hessian ``[[Λ'Z'WZΛ + I, Λ'Z'WX], [X'WZΛ, X'WX]]`` (``θ`` fixed)."""
        d = self.glmm_data
        if d is None:
            raise ValueError("joint_cov needs the native fit's data")
        _, _, cross, xcross = d._zl_ops(self.theta.to_numpy())
        eta = self.predict(type="link").to_numpy()
        mu = d.family.valid_mu(d.family.link.linkinv(eta))
        w = d.wt * d.family.link.mu_eta(eta) ** 2 / d.family.variance(mu)
        A = cross(w)
        A[np.diag_indices(d.q)] += 1.0
        B = xcross(w)
        M = np.block([[A, B], [B.T, d.X.T @ (d.X * w[:, None])]])
        C = np.linalg.inv(M)
        return (C + C.T) / 2

    def b_from_u(self, u: np.ndarray) -> list[np.ndarray]:
        """``b = Λ_θ u`` per term as ``(n_k, p_k)`` arrays."""
        T = theta_to_T(self.theta.to_numpy(), [t.p for t in self.spec.terms])
        out, pos = [], 0
        for t, Tk in zip(self.spec.terms, T):
            out.append(u[pos:pos + t.p * t.n_levels].reshape(t.n_levels, t.p) @ Tk.T)
            pos += t.p * t.n_levels
        return out

    def _group_frames(self, arrays: list[np.ndarray]) -> dict[str, pd.DataFrame]:
        out: dict[str, pd.DataFrame] = {}
        for t, a in zip(self.spec.terms, arrays):
            df = pd.DataFrame(a, index=pd.Index(t.levels, name=t.group_factor),
                              columns=t.term_names)
            if t.group_factor in out:
                out[t.group_factor] = out[t.group_factor].join(df)
            else:
                out[t.group_factor] = df
        return out

    @property
    def ranef(self) -> dict[str, pd.DataFrame]:
        """Conditional modes per grouping factor (lme4's ``ranef``)."""
        if self.u is None:
            raise ValueError("this fit has no conditional modes")
        return self._group_frames(self._b())

    @property
    def ranef_condsd(self) -> dict[str, pd.DataFrame]:
        """Conditional standard deviations (square roots of lme4's ``postVar`` diagonal)."""
        if self.condvar is None:
            raise ValueError("this fit has no conditional variances")
        return self._group_frames([np.sqrt(np.diagonal(c, axis1=1, axis2=2)) for c in self.condvar])

    # -- prediction ---------------------------------------------------------------------
    def _zb(self, design: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        n = len(design[0][0]) if design else 0
        out = np.zeros(n)
        for (codes, Xk), b in zip(design, self._b()):
            codes = np.asarray(codes)
            ok = codes >= 0
            out[ok] += np.sum(np.asarray(Xk, float)[ok] * b[codes[ok]], axis=1)
        return out

    def predict(self, newdata: pd.DataFrame | None = None, type: str = "link",
                re_form: str | None = None, allow_new_levels: bool | None = None) -> pd.Series:
        """``η̂ = o + Xβ̂ + Zb̂`` (``type="link"``) or ``g^{-1}(η̂)`` (``"response"``);
        ``re_form="NA"``/``"~0"``: without random effects.  Unseen levels get ``b = 0``;
        ``allow_new_levels=False`` makes them an error, ``None`` warns (as
        :meth:`scoremix.LmerResult.predict`)."""
        if type not in ("link", "response"):
            raise ValueError(f"type must be 'link' or 'response', not {type!r}")
        spec = self.spec
        population = re_form is not None and str(re_form).replace(" ", "") in ("~0", "NA", "~1-1")
        if re_form is not None and not population:
            raise ValueError(f"re_form must be None (all random effects) or '~0', not {re_form!r}")
        if newdata is None:
            X, design, idx = spec.X, [(t.codes, t.X) for t in spec.terms], spec.data.index
            off = spec.offset
        else:
            X = np.asarray(spec.fixed_design(newdata), float)
            design = [] if population else spec.random_design(newdata)
            idx = newdata.index
            off = spec.offset_design(newdata) if spec.offset is not None else None
            if not population and allow_new_levels is not True:
                self._check_new_levels(newdata, design, allow_new_levels)
        eta = X @ self.fixef.to_numpy()
        if off is not None:
            eta = eta + np.asarray(off, float)
        if not population and design:
            eta = eta + self._zb(design)
        out = eta if type == "link" else self.family.link.linkinv(eta)
        return pd.Series(out, index=idx, name="predicted")

    def _check_new_levels(self, newdata, design, allow_new_levels) -> None:
        from scoremix.lme.errors import NewLevelError
        for t, (codes, _) in zip(self.spec.terms, design):
            new = np.asarray(codes) < 0
            if new.any():
                cols = [c for c in t.group_factor.split(":") if c in newdata.columns]
                lv = (newdata.loc[new, cols].astype(str).agg(":".join, axis=1).unique()[:5]
                      if cols else [])
                msg = (f"new levels detected in newdata for grouping factor {t.group_factor!r}: "
                       f"{list(lv)}")
                if allow_new_levels is False:
                    raise NewLevelError(msg + " (pass allow_new_levels=True to predict them "
                                              "with random effect 0)")
                warnings.warn(msg + "; their random effects are set to 0", UserWarning, stacklevel=3)

    def fitted(self) -> pd.Series:
        """Fitted means ``μ̂`` (lme4's ``fitted``)."""
        return self.predict(type="response")

    def simulate(self, nsim: int = 1, *, seed: int | np.random.Generator | None = None,
                 use_u: bool = False) -> pd.DataFrame:
        """Responses simulated from the fitted model (lme4's ``simulate``): new random
        effects ``b ~ N(0, ΛΛ')`` (``use_u=False``) or the conditional modes; binomial
        draws are proportions ``k/m`` with the fitted ``m``, Poisson draws counts."""
        rng = np.random.default_rng(seed)
        d = self.glmm_data
        if d is None:
            raise ValueError("simulate needs the native fit's data")
        eta0 = d.offset + d.X @ self.fixef.to_numpy()
        Lam = d.lambda_matrix(self.theta.to_numpy())
        out = {}
        for s in range(nsim):
            u = self.u if use_u else rng.standard_normal(d.q)
            mu = d.family.link.linkinv(eta0 + d.Z @ (Lam @ u))
            if d.family.name == "binomial":
                m = np.round(d.trials).astype(int)
                y = rng.binomial(np.maximum(m, 0), np.clip(mu, 0, 1)) / np.where(m > 0, m, 1)
            else:
                y = rng.poisson(mu * 1.0).astype(float)
            out[f"sim_{s + 1}"] = y
        return pd.DataFrame(out, index=self.spec.data.index)

    def check(self, *, nsim: int = 250, seed: int | np.random.Generator | None = 0, by=(),
              influence: bool = False, alpha: float = 0.05):
        """Model checks (singularity, convergence, DHARMa scaled residuals, dispersion,
        zero inflation, outliers): :func:`scoremix.glmm.check.check_glmer`."""
        from scoremix.glmm.check import check_glmer  # s5postfit2
        return check_glmer(self, nsim=nsim, seed=seed, by=by, influence=influence, alpha=alpha)

    # -- intervals ----------------------------------------------------------------------
    def confint(self, method: str = "Wald", level: float = 0.95,
                parm: Sequence[str] | None = None) -> pd.DataFrame:
        """Confidence intervals (lme4's ``confint.merMod``).

        ``method="Wald"``: ``β̂ ± z_{(1+level)/2} se`` for the fixed effects (lme4 gives NA
        for the variance parameters; they are left out here).  ``method="profile"``:
        likelihood-profile intervals of ``.sig01 …`` (the SDs and correlations of the
        random effects) and of the fixed effects, see :mod:`scoremix.glmm.profile`
        (native fits with ``nAGQ >= 1``)."""
        lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
        cols = [f"{100 * lo_q:.1f} %", f"{100 * hi_q:.1f} %"]
        if method == "Wald":
            names = list(parm) if parm is not None else list(self.fixef.index)
            z = stats.norm.ppf(hi_q)
            b, se = self.fixef[names], self.se[names]
            return pd.DataFrame({cols[0]: b - z * se, cols[1]: b + z * se}, index=names)
        if method == "profile":
            from scoremix.glmm.errors import GlmmUnsupportedError
            from scoremix.glmm.profile import profile_confint
            data = getattr(self, "work_data", None) or self.glmm_data
            if any(getattr(t, "structure", "us") != "us" for t in self.spec.terms):
                raise GlmmUnsupportedError("profile intervals of models with cs()/ar1() terms "
                                           "are not implemented; use method='Wald'")
            if data is None or self.backend != "native":
                raise GlmmUnsupportedError("profile intervals need a native fit "
                                           "(backend='native')")
            out = profile_confint(data, self.theta.to_numpy(), self.fixef.to_numpy(),
                                  self.nAGQ, list(self.fixef.index), level=level, parm=parm)
            out.columns = cols
            return out
        raise ValueError(f"method must be 'Wald' or 'profile', not {method!r}")

    # -- printing -----------------------------------------------------------------------
    def summary(self) -> str:
        """A summary printed like lme4's ``summary(glmer)``."""
        from scoremix.glmm.printing import summary_text
        return summary_text(self)

    def __repr__(self) -> str:
        return (f"<GlmerResult {self.family} nAGQ={self.nAGQ} backend={self.backend}: "
                f"{self.formula}; logLik {self.loglik:.4f}>")
