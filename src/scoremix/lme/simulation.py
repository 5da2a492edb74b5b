r"""Simulation of responses from a fitted linear mixed model (lme4's ``simulate``).

Each simulated response vector is

.. math::

    y^* = X\hat\beta + \sum_k Z_k b_k^* + \varepsilon^*,\qquad
    b^*_{kj} \sim N(0, \hat\Sigma_k)\ \text{i.i.d. over levels } j,\qquad
    \varepsilon^*_i \sim N(0, \hat\sigma^2_{d(i)}/w_i),

(``re_form="~0"``, lme4's default ``re.form = NA``: new random effects every simulation),
or with :math:`b_k^* = \hat b_k` (conditional modes) for the terms kept by ``re_form``
(``None``: all, lme4's ``use.u = TRUE``).  On ``newdata`` levels unseen in fitting get
fresh draws when their term is simulated and 0 when it is conditioned on.  A model with
a monotone transformation is simulated on its latent scale.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scoremix.lme.prediction import select_terms

__all__ = ["simulate_lmer"]


def _group_keys(term, newdata: pd.DataFrame) -> np.ndarray:
    cols = [c.strip("() ") for c in term.group_factor.split(":")]
    missing = [c for c in cols if c not in newdata.columns]
    if missing:
        raise ValueError(f"newdata lacks the grouping column(s) {missing} of term {term.group!r}")
    return newdata[cols].astype(str).agg(":".join, axis=1).to_numpy()


def simulate_lmer(m, nsim: int = 1, *, seed: int | np.random.Generator | None = None,
                  re_form: str | None = "~0", newdata: pd.DataFrame | None = None,
                  weights: np.ndarray | None = None) -> pd.DataFrame:
    """``nsim`` simulated responses (columns ``sim_1``…) for the fitted rows or
    ``newdata`` (see the module docstring)."""
    if int(nsim) < 1:
        raise ValueError(f"nsim must be a positive integer, got {nsim!r}")
    nsim = int(nsim)
    spec = m.require_spec("simulate")
    rng = np.random.default_rng(seed)
    keep = select_terms(m, re_form)
    if newdata is None:
        X = np.asarray(spec.X, float)
        design = [(t.codes, t.X) for t in spec.terms]
        keys = [np.asarray(t.codes) for t in spec.terms]
        idx = spec.data.index
        w = np.ones(spec.n) if spec.weights is None else np.asarray(spec.weights, float)
        disp = spec.dispersion_codes
        off = spec.offset
    else:
        X = np.asarray(spec.fixed_design(newdata), float)
        design = spec.random_design(newdata)
        keys = [_group_keys(t, newdata) for t in spec.terms]
        idx = newdata.index
        w = np.ones(len(newdata)) if weights is None else np.asarray(weights, float)
        disp = None
        if spec.dispersion_codes is not None and m.sigma_by is not None:
            from scoremix.lme.formula import parse_dispersion
            col = parse_dispersion(spec.dispersion_formula)
            lv = [str(v) for v in m.sigma_by.index]
            bad = [v for v in newdata[col].astype(str).unique() if v not in lv]
            if bad:
                raise ValueError(f"newdata column {col!r} has dispersion level(s) {bad} unseen in fitting")
            disp = np.array([lv.index(str(v)) for v in newdata[col]])
        off = None if getattr(spec, "offset", None) is None else spec.offset_design(newdata)
    n = X.shape[0]
    mu = X @ m.fixef.to_numpy()
    if off is not None:
        mu = mu + off
    Y = np.repeat(mu[:, None], nsim, axis=1)
    for t, (codes, Xk), kp, key, S, bk in zip(spec.terms, design, keep, keys, m.cov_re(), m._b):
        Xk = np.asarray(Xk, float)
        codes = np.asarray(codes)
        if kp:
            ok = codes >= 0
            contrib = np.zeros(n)
            contrib[ok] = np.einsum("ij,ij->i", Xk[ok], np.asarray(bk)[codes[ok]])
            Y += contrib[:, None]
            continue
        uniq, inv = np.unique(key, return_inverse=True)
        ev, V = np.linalg.eigh(S)
        Lh = V * np.sqrt(np.maximum(ev, 0))
        draws = rng.standard_normal((len(uniq), nsim, t.p)) @ Lh.T   # (levels, nsim, p)
        Y += np.einsum("ip,isp->is", Xk, draws[inv])
    sig = np.full(n, m.sigma)
    if disp is not None and m.sigma_by is not None:
        sig = m.sigma_by.to_numpy()[np.asarray(disp)]
    Y += rng.standard_normal((n, nsim)) * (sig / np.sqrt(w))[:, None]
    return pd.DataFrame(Y, index=idx, columns=[f"sim_{j + 1}" for j in range(nsim)])
