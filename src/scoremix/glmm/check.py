r"""``GlmerResult.check()``: the model checks of a binomial or Poisson GLMM.

* **singularity** per random term (lme4's ``rePCA``, :func:`scoremix.lme.singularity.re_pca`);
* **convergence**: central-difference gradient :math:`g` and Hessian :math:`H` of the
  fitted criterion (Laplace or AGQ deviance) over :math:`(\theta, \beta)` — the parameters
  lme4 checks for ``glmer`` — with lme4's scaled gradient :math:`\max|H^{-1}g|` (> 2e-3
  warns) and the smallest eigenvalue of :math:`H` (parameters held at a bound excluded);
* **scaled residuals** (DHARMa): the randomised PIT of every response among
  :math:`S` responses simulated from the fit with new random effects (DHARMa's default
  unconditional simulation, ``re.form = NA``), uniformity (KS) and outlier tests
  calibrated by exchangeability (:mod:`scoremix.lme.pit`);
* **dispersion** (DHARMa's ``testDispersion`` on conditional simulations): the Pearson
  statistic :math:`\sum_i (y_i-\hat\mu_i)^2 w_i / V(\hat\mu_i)` with :math:`\hat\mu` the
  conditional means (:math:`\hat b` included) against the same statistic of responses
  simulated given :math:`\hat b`; reported as the ratio observed / mean simulated and a
  two-sided p-value.  Fitting :math:`\hat b` to the data makes the observed statistic a
  little small, so the test is conservative for overdispersion;
* **zero inflation** (Poisson; DHARMa's ``testZeroInflation``): observed zeros against the
  zeros of the unconditional simulations (ratio, two-sided p);
* per ``by`` column: location (missing term) and spread tests of the residuals.

Influential levels (leave-one-level-out refits) are not computed for GLMMs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scoremix.lme.check import ModelCheck
from scoremix.lme.pit import by_tests, exchangeable_tests, two_sided_sim_p
from scoremix.lme.scaled_residuals import ScaledResiduals
from scoremix.lme.singularity import re_pca

__all__ = ["check_glmer", "glmer_convergence", "glmer_scaled_residuals"]


def glmer_convergence(m, h: float = 1e-4) -> dict:
    """Gradient and Hessian of the criterion at :math:`(\\hat\\theta, \\hat\\beta)` (module
    docstring): ``max_grad``, ``scaled_grad``, ``min_hess_eigen``, ``ok``, ``messages``."""
    from scoremix.glmm.fit import GlmmControl, _criterion, _hessian
    d = m.glmm_data
    if d is None:
        raise ValueError("the convergence check needs the native fit's data (backend='native')")
    tol = GlmmControl().pirls_tol
    th = m.theta.to_numpy(float)
    nt = th.size
    x = np.concatenate([th, m.fixef.to_numpy(float)])
    lower = np.concatenate([np.asarray(t.theta_lower, float) for t in m.spec.terms]) if nt else np.zeros(0)
    inner = np.concatenate([np.flatnonzero(~((lower == 0) & (th < 1e-6))), nt + np.arange(x.size - nt)])

    def f(z: np.ndarray) -> float:
        full = x.copy()
        full[inner] = z
        return _criterion(d, full[:nt], full[nt:], m.nAGQ, tol)[0]

    try:
        H, g = _hessian(f, x[inner], h)
    finally:
        d.pirls(th, x[nt:], u0=m.u, tol=tol)    # restore the warm start
    msgs = list(m.messages)
    ev = np.linalg.eigvalsh((H + H.T) / 2)
    try:
        sg = float(np.max(np.abs(np.linalg.solve(H, g))))
    except np.linalg.LinAlgError:
        sg = np.inf
    min_ev = float(ev.min())
    ok = sg < 2e-3 and min_ev > 0 and m.converged
    if sg >= 2e-3:
        msgs.append(f"scaled gradient max|H^-1 g| = {sg:.2g} > 2e-3 (lme4's check.conv.grad)")
    if min_ev <= 0:
        msgs.append(f"Hessian has a non-positive eigenvalue ({min_ev:.2g})")
    return dict(max_grad=float(np.max(np.abs(g))), scaled_grad=sg, min_hess_eigen=min_ev,
                ok=bool(ok), messages=msgs)


def glmer_scaled_residuals(m, nsim: int = 250, *, seed=0, by=()) -> ScaledResiduals:
    """DHARMa's scaled residuals of a GLMM and their tests (module docstring)."""
    d = m.glmm_data
    if d is None:
        raise ValueError("scaled residuals need the native fit's data (backend='native')")
    rng = np.random.default_rng(seed)
    y = np.asarray(d.y, float)
    sims = m.simulate(nsim, seed=rng).to_numpy()
    r, rows = exchangeable_tests(y, sims, rng)
    # dispersion: Pearson statistic against simulations conditional on b̂
    mu = d.family.valid_mu(m.predict(type="response").to_numpy())
    var = d.family.variance(mu) / np.where(d.wt > 0, d.wt, 1.0)
    csims = m.simulate(nsim, seed=rng, use_u=True).to_numpy()
    obs = float(np.sum((y - mu) ** 2 / var))
    sim = np.sum((csims - mu[:, None]) ** 2 / var[:, None], axis=0)
    rows.insert(1, ("dispersion (Pearson, simulated)", obs / float(np.mean(sim)), two_sided_sim_p(obs, sim)))
    if d.family.name == "poisson":
        z0 = float(np.sum(y == 0))
        zs = np.sum(sims == 0, axis=0)
        mz = float(np.mean(zs))
        rows.append(("zero-inflation (simulated)", z0 / mz if mz > 0 else np.inf, two_sided_sim_p(z0, zs)))
    rows += by_tests(r, m.spec.data, by)
    tests = pd.DataFrame(rows, columns=["test", "statistic", "p.value"])
    idx = m.spec.data.index
    return ScaledResiduals(pd.Series(r, index=idx, name="scaled_residual"),
                           pd.Series(mu, index=idx, name="fitted"), tests, nsim, False,
                           ["unconditional simulations (new random effects); tests calibrated by "
                            "exchangeability with the simulations"])


def check_glmer(m, *, nsim: int = 250, seed=0, by=(), influence: bool = False,
                alpha: float = 0.05, **_: object) -> ModelCheck:
    """Every check of the module docstring on a native :class:`~scoremix.glmm.GlmerResult`,
    with advice.  ``influence=True`` is refused (not implemented for GLMMs)."""
    if influence:
        from scoremix.glmm.errors import GlmmUnsupportedError
        raise GlmmUnsupportedError("influential levels (leave-one-level-out refits) are not "
                                   "implemented for GLMMs; use influence=False")
    sing = re_pca(m)
    conv = glmer_convergence(m)
    res = glmer_scaled_residuals(m, nsim, seed=seed, by=by)
    advice = []
    for term, g in sing.groupby("term", sort=False):
        if g["singular"].iloc[0]:
            advice.append(f"term ({term}) is singular: its covariance has rank < {len(g)}; "
                          "drop a random slope or use || (uncorrelated) terms")
    if not conv["ok"]:
        advice.append("convergence checks failed: refit with control={'optimizer': 'cobyqa'} or "
                      "nAGQ=1, rescale covariates")
    for t in res.tests.itertuples():
        test, stat, p = t.test, t.statistic, t._3
        if p >= alpha:
            continue
        if test.startswith("uniformity"):
            advice.append("scaled residuals are not uniform: the response distribution or the "
                          "linear predictor is misspecified")
        elif test.startswith("dispersion"):
            advice.append("overdispersion: add an observation-level random effect (1 | obs) or a missing "
                          "term" if stat > 1 else "underdispersion: fewer differences than the "
                          "family implies (check for duplicated or constrained responses)")
        elif test.startswith("zero"):
            advice.append(f"{'more' if stat > 1 else 'fewer'} zeros than the model predicts: a "
                          "zero-inflated or hurdle model, or a missing term")
        elif test.startswith("outliers"):
            advice.append("more observations outside the simulation envelope than expected")
        elif test.startswith("location"):
            advice.append(f"residuals shift with {test.split()[2]}: a term is missing")
        elif test.startswith("spread"):
            advice.append(f"residual spread differs by {test.split()[2]}: add "
                          f"(1 | {test.split()[2]}) or an observation-level random effect")
    out = ModelCheck(sing, conv, res, pd.DataFrame(), advice, alpha)
    if m.u is not None and m.spec.terms:
        out._ranef = np.asarray(m._b()[0])[:, 0]
    return out
