r"""Refit a linear mixed model with several optimisers (lme4's ``allFit``).

The profiled criterion :math:`d(\theta)` (:mod:`scoremix.lme.deviance`) is minimised over
:math:`\theta \ge` its lower bounds from the fit's starting values by each optimiser, and
the estimates at each optimum are tabulated as ``summary(allFit(m))`` does: which fits
succeeded, their messages, fixed effects, log-likelihoods, random-effect SDs and
correlations (``sdcor``), ``θ``, times and criterion evaluations.  Agreement of the
criteria and estimates across optimisers means a convergence warning is a false alarm.

Optimisers: ``"native"`` (the engine's L-BFGS-B with the analytic gradient and Newton
polish), ``"L-BFGS-B"`` (scipy, finite-difference gradient), ``"Nelder-Mead"``,
``"Powell"``, ``"COBYQA"`` (a derivative-free trust-region method with quadratic models,
the closest scipy has to lme4's default BOBYQA), ``"TNC"``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize

__all__ = ["AllFit", "all_fit", "OPTIMIZERS"]

OPTIMIZERS = ("native", "L-BFGS-B", "Nelder-Mead", "Powell", "COBYQA", "TNC")


@dataclass
class AllFit:
    """``fits`` (optimiser → LmerResult or the exception) and the summary tables."""

    fits: dict
    which_ok: pd.Series
    msgs: pd.Series
    fixef: pd.DataFrame
    llik: pd.Series
    sdcor: pd.DataFrame
    theta: pd.DataFrame
    times: pd.Series
    feval: pd.Series

    def summary(self) -> pd.DataFrame:
        """One row per optimiser: ``ok``, ``loglik``, ``Δ loglik`` to the best, the largest
        relative difference of the fixed effects to the best fit, time, evaluations,
        messages."""
        best = self.llik.idxmax()
        rel = (self.fixef - self.fixef.loc[best]).abs().div(self.fixef.loc[best].abs().clip(lower=1e-8))
        return pd.DataFrame({"ok": self.which_ok, "loglik": self.llik,
                             "dloglik": self.llik - self.llik.max(), "max_rel_fixef_diff": rel.max(axis=1),
                             "time_s": self.times, "feval": self.feval, "messages": self.msgs})


def _result_at(m, theta: np.ndarray, messages: list[str], n_eval: int):
    from scoremix.lme.conditional import estimates_at
    from scoremix.lme.ddf import model_crossproducts
    from scoremix.lme.engine import NativeFit
    from scoremix.lme.optimizer import OptimResult
    from scoremix.lme.result import LmerResult
    cp = model_crossproducts(m)
    est = estimates_at(cp, theta, m.REML, None)
    lower = m.spec.theta_lower()
    sing = bool(np.any((lower == 0) & (theta < 1e-4)))
    opt = OptimResult(theta=theta, rho=None, criterion=float(est["criterion"]), converged=not messages,
                      singular=sing, n_eval=n_eval, messages=messages)
    nf = NativeFit(spec=m.spec, cp=cp, REML=m.REML, opt=opt, estimates=est, info=dict(n_eval=n_eval))
    return LmerResult.from_native(nf)


def all_fit(m, optimizers=OPTIMIZERS, maxfev: int = 20000) -> AllFit:
    """Refit ``m`` with every optimiser of ``optimizers`` (see the module docstring)."""
    from scoremix.lme.ddf import model_crossproducts
    from scoremix.lme.deviance import profiled_deviance
    spec = m.require_spec("all_fit")
    if m.sigma_by is not None:
        raise ValueError("all_fit supports models without a dispersion formula")
    bad = [o for o in optimizers if o not in OPTIMIZERS]
    if bad:
        raise ValueError(f"unknown optimiser(s) {bad}; choose from {OPTIMIZERS}")
    from scoremix.lme.covstruct import ThetaMap, is_structured
    cp = model_crossproducts(m)
    lower = spec.theta_lower()
    start = spec.theta_init()
    to_theta = lambda x: x  # noqa: E731
    if is_structured(spec.terms):
        # lme4 2.0's cs()/ar1(): the optimisers search their parameters φ (θ = θ(φ))
        tmap = ThetaMap.of(spec.terms)
        lower, start, to_theta = tmap.lower(lower), tmap.init(start), tmap.theta
    bounds = [(lo if np.isfinite(lo) else None, None) for lo in lower]
    fits, ok, msgs, times, fevals = {}, {}, {}, {}, {}
    for name in optimizers:
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as rec:
                warnings.simplefilter("always")
                if name == "native":
                    f = m.refit()
                    nfev = int(f.fit_info.get("n_eval", 0) or 0)
                    mm = list(f.fit_info.get("messages") or [])
                else:
                    count = [0]

                    def obj(x):
                        count[0] += 1
                        xx = np.maximum(x, lower) if name == "Nelder-Mead" else x
                        return profiled_deviance(to_theta(xx), cp, m.REML)
                    opts = {"maxfev": maxfev} if name in ("Nelder-Mead", "Powell") else \
                        ({"maxfev": maxfev} if name == "COBYQA" else {"maxfun": maxfev} if name == "TNC"
                         else {"maxfun": maxfev})
                    if name == "Nelder-Mead":
                        opts.update(xatol=1e-10, fatol=1e-12)
                    if name == "Powell":
                        opts.update(xtol=1e-10, ftol=1e-14)
                    r = optimize.minimize(obj, start, method=name, bounds=bounds, options=opts)
                    th = to_theta(np.maximum(np.asarray(r.x, float), lower))
                    mm = [] if r.success else [str(r.message)]
                    nfev = count[0]
                    f = _result_at(m, th, mm, nfev)
                    from scoremix.lme.singularity import convergence
                    conv = convergence(f)
                    if conv["scaled_grad"] >= 2e-3:   # lme4's checkConv on every refit
                        mm = mm + [f"Model failed to converge with max|grad| = {conv['max_grad']:.3g} "
                                   f"(scaled {conv['scaled_grad']:.3g}, tol = 0.002)"]
                        f = _result_at(m, th, mm, nfev)
                mm = mm + [str(w.message) for w in rec]
            fits[name] = f
            ok[name] = True
            msgs[name] = "; ".join(dict.fromkeys(mm)) or "[OK]"
        except Exception as exc:  # noqa: BLE001 - allFit records failures
            fits[name] = exc
            ok[name] = False
            msgs[name] = f"{type(exc).__name__}: {exc}"
            nfev = 0
        times[name] = time.perf_counter() - t0
        fevals[name] = nfev
    good = [k for k in optimizers if ok[k]]
    fixef = pd.DataFrame({k: fits[k].fixef for k in good}).T
    llik = pd.Series({k: fits[k].loglik for k in good}, name="llik")
    sdcor = pd.DataFrame({k: _sdcor(fits[k]) for k in good}).T
    theta = pd.DataFrame({k: fits[k].theta for k in good}).T
    return AllFit(fits, pd.Series(ok, name="which.OK"), pd.Series(msgs, name="msgs"), fixef, llik,
                  sdcor, theta, pd.Series(times, name="times"), pd.Series(fevals, name="feval"))


def _sdcor(f) -> pd.Series:
    """lme4's ``sdcor`` names: ``grp.(Intercept)``, ``grp.x.(Intercept)`` (correlation),
    ``sigma``."""
    out = {}
    for r in f.varcorr.itertuples():
        if r.grp == "Residual":
            out["sigma"] = r.sdcor
        elif r.var2 is None:
            out[f"{r.grp}.{r.var1}"] = r.sdcor
        else:
            out[f"{r.grp}.{r.var2}.{r.var1}"] = r.sdcor
    return pd.Series(out)
