"""``glmer(..., backend="lme4")``: the same model frame fitted by ``lme4::glmer`` in R
through rpy2, returned as a :class:`~scoremix.glmm.result.GlmerResult`.

The response is sent as scoremix's numeric response (a proportion with the numbers of
trials as prior weights for ``cbind``, which gives lme4 the same likelihood); lme4 builds
its own ``X`` and ``Z`` from the formula, so the backend also checks scoremix's parser.
``tight=True`` asks lme4 for converged PIRLS (``tolPwrss = 1e-12``) and a tight bobyqa, the
setting of the stored references (lme4's default ``tolPwrss = 1e-7`` stops the conditional
modes early, which moves its Laplace criterion by up to ~1e-3).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from scoremix.glmm.family import Family
from scoremix.glmm.response import prepare_response
from scoremix.glmm.result import GlmerResult
from scoremix.lme.backends.rutil import load_rpy2, r_dataframe
from scoremix.lme.errors import UnsupportedModelError
from scoremix.lme.spec import ModelSpec

__all__ = ["fit_lme4"]

_R_FIT = r"""
function(formula, data, family, link, w, nAGQ, tight) {
  suppressMessages(library(lme4))
  fam <- get(family)(link = link)
  data$.smx_w <- w
  ctrl <- if (tight) glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa",
                                  optCtrl = list(rhoend = 1e-10, maxfun = 1e5)) else glmerControl()
  m <- suppressMessages(suppressWarnings(glmer(as.formula(formula), data = data, family = fam,
                                              weights = .smx_w, nAGQ = nAGQ, control = ctrl)))
  re <- ranef(m, condVar = TRUE)
  pv <- lapply(re, function(r) { a <- attr(r, "postVar"); if (is.list(a)) a else list(a) })
  jsonlite::toJSON(list(fixef = unname(fixef(m)), fixef_names = names(fixef(m)),
       vcov = unname(as.matrix(vcov(m))), theta = unname(getME(m, "theta")),
       criterion = as.numeric(-2 * logLik(m)), deviance = deviance(m), u = unname(getME(m, "u")),
       messages = unlist(m@optinfo$conv$lme4$messages),
       postvar = lapply(pv, function(l) lapply(l, function(a) as.vector(a))),
       postvar_dims = lapply(pv, function(l) lapply(l, dim))),
       digits = NA, auto_unbox = FALSE)
}
"""


def fit_lme4(spec: ModelSpec, family: Family, formula: str, data: pd.DataFrame, *, weights,
             offset, nAGQ: int, lhs: str, tight: bool = False) -> GlmerResult:
    if offset is not None:
        raise UnsupportedModelError("the lme4 backend re-fits the formula in R and does not pass "
                                    "offset=; write offset(column) in the formula, or use "
                                    "backend='native'")
    ro = load_rpy2(("lme4", "jsonlite"))
    df = r_dataframe(ro, spec)
    w = np.ones(spec.n) if spec.weights is None else np.asarray(spec.weights, float)
    out = ro.r(_R_FIT)(spec.formula, df, family.name, family.link.name,
                       ro.vectors.FloatVector(w.tolist()), int(nAGQ), bool(tight))
    r = json.loads(str(out[0]))
    names = [nm for t in spec.terms for nm in t.theta_names()]
    if list(r["fixef_names"]) != list(spec.fixef_names):
        raise UnsupportedModelError(f"lme4 built other fixed effects {r['fixef_names']} than "
                                    f"scoremix {spec.fixef_names}")
    # conditional variances per term in scoremix's order (lme4 groups them by factor)
    condvar = []
    seen: dict[str, int] = {}
    for t in spec.terms:
        k = seen.get(t.group_factor, 0)
        seen[t.group_factor] = k + 1
        vals = np.asarray(r["postvar"][t.group_factor][k], float)
        dims = r["postvar_dims"][t.group_factor][k]
        a = (vals.reshape(dims, order="F").transpose(2, 0, 1) if len(dims) == 3
             else vals.reshape(-1, 1, 1))
        condvar.append(a[:, :t.p, :t.p])
    return GlmerResult(
        spec, family, backend="lme4", nAGQ=nAGQ,
        fixef=pd.Series(r["fixef"], index=spec.fixef_names),
        vcov=pd.DataFrame(np.asarray(r["vcov"], float).reshape(len(spec.fixef_names), -1),
                          index=spec.fixef_names, columns=spec.fixef_names),
        theta=pd.Series(r["theta"], index=names), criterion=float(r["criterion"][0]),
        deviance=float(r["deviance"][0]), u=np.asarray(r["u"], float), condvar=condvar,
        formula=formula, response_text=lhs, data=None, messages=list(r.get("messages") or []),
        fit_info={"backend": "lme4", "tight": tight}, nobs=spec.n)
