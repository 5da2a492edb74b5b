r"""Weakly informative priors, auto-scaled to the data (rstanarm-style), and their overrides.

Default priors (``s_y`` = SD of the response, ``ȳ`` its mean, ``s_j`` = SD of the fixed
column ``x_j``, ``rms_a`` = root mean square of the random-term column ``a``):

.. math::

    \beta_{(Intercept)} &\sim N(\bar y,\; (2.5\, s_y)^2) \\
    \beta_j &\sim N(0,\; (2.5\, s_y / s_j)^2) \quad (s_j = 0 \Rightarrow 2.5\, s_y) \\
    \sigma,\ \sigma_\ell &\sim \text{half-}t_3(0,\; s_y) \\
    \mathrm{sd}_{g,a} &\sim \text{half-}t_3(0,\; s_y / \mathrm{rms}_a) \\
    R_g &\sim \mathrm{LKJ}(2) \quad (\text{terms with} \ge 2 \text{ columns})

Keys of the ``priors`` override dict are the parameter names used everywhere in the
Bayesian results: fixed-effect names (``"(Intercept)"``, ``"labelspoof"``), ``"sigma"``
(all residual SDs) or ``"sigma_<level>"``, ``"sd_<grp>__<term>"``, ``"cor_<grp>"`` (LKJ
``eta``).  Values are :class:`Prior` objects, ``(family, {params})`` tuples or
``{"family": …, **params}`` dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

__all__ = [
    "Prior",
    "PriorError",
    "PriorSet",
    "data_moments",
    "default_priors",
    "resolve_priors",
    "sd_name",
    "cor_name",
    "re_sd_cor_vars",
    "sigma_names",
]

_FAMILIES = {
    "normal": ("mu", "sigma"),
    "flat": (),
    "studentt": ("nu", "mu", "sigma"),
    "halfnormal": ("sigma",),
    "halfstudentt": ("nu", "sigma"),
    "halfcauchy": ("beta",),
    "exponential": ("lam",),
    "lkj": ("eta",),
}
_SCALE_FAMILIES = {"halfnormal", "halfstudentt", "halfcauchy", "exponential"}
_LOCATION_FAMILIES = {"normal", "flat", "studentt"}


class PriorError(ValueError):
    """A prior specification is malformed or does not fit the parameter it is given to."""


@dataclass(frozen=True)
class Prior:
    """A prior distribution: a family name and its parameters (PyMC's parameter names).

    Families: ``normal(mu, sigma)``, ``flat()``, ``studentt(nu, mu, sigma)`` (location
    parameters); ``halfnormal(sigma)``, ``halfstudentt(nu, sigma)``, ``halfcauchy(beta)``,
    ``exponential(lam)`` (scale parameters); ``lkj(eta)`` (correlation matrices).
    """

    family: str
    params: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fam = self.family.lower()
        if fam not in _FAMILIES:
            raise PriorError(f"unknown prior family {self.family!r}; use one of {sorted(_FAMILIES)}")
        object.__setattr__(self, "family", fam)
        need = set(_FAMILIES[fam])
        got = set(self.params)
        if got != need:
            raise PriorError(f"prior {fam} needs parameters {sorted(need)}, got {sorted(got)}")
        for k, v in self.params.items():
            if not np.isfinite(float(v)):
                raise PriorError(f"prior {fam}: parameter {k}={v!r} is not finite")
        for k in ("sigma", "beta", "lam", "eta", "nu"):
            if k in self.params and float(self.params[k]) <= 0:
                raise PriorError(f"prior {fam}: parameter {k}={self.params[k]!r} must be > 0")

    # convenience constructors
    @classmethod
    def normal(cls, mu: float, sigma: float) -> "Prior":
        return cls("normal", {"mu": float(mu), "sigma": float(sigma)})

    @classmethod
    def flat(cls) -> "Prior":
        return cls("flat", {})

    @classmethod
    def half_t(cls, nu: float, sigma: float) -> "Prior":
        return cls("halfstudentt", {"nu": float(nu), "sigma": float(sigma)})

    @classmethod
    def half_normal(cls, sigma: float) -> "Prior":
        return cls("halfnormal", {"sigma": float(sigma)})

    @classmethod
    def exponential(cls, lam: float) -> "Prior":
        return cls("exponential", {"lam": float(lam)})

    @classmethod
    def lkj(cls, eta: float) -> "Prior":
        return cls("lkj", {"eta": float(eta)})

    @property
    def is_gaussian_or_flat(self) -> bool:
        return self.family in ("normal", "flat")

    def data_items(self, name: str) -> dict[str, float]:
        """``{"<name>__<param>": value}``: the names under which :meth:`pymc` with
        ``as_data=True`` holds this prior's parameters in ``pm.Data``."""
        return {f"{name}__{k}": float(v) for k, v in self.params.items()}

    def pymc(self, name: str, as_data: bool = False, **kwargs: Any):
        """Create the PyMC random variable (inside a model context).

        With ``as_data=True`` the parameters are ``pm.Data`` containers named as in
        :meth:`data_items`, so a compiled model can be refitted with other prior scales
        (``pm.set_data``) without recompiling.
        """
        import pymc as pm

        if as_data:
            p = {k: pm.Data(dn, v) for k, (dn, v) in zip(self.params, self.data_items(name).items())}
        else:
            p = {k: float(v) for k, v in self.params.items()}
        fam = self.family
        if fam == "normal":
            return pm.Normal(name, **p, **kwargs)
        if fam == "flat":
            return pm.Flat(name, **kwargs)
        if fam == "studentt":
            return pm.StudentT(name, **p, **kwargs)
        if fam == "halfnormal":
            return pm.HalfNormal(name, **p, **kwargs)
        if fam == "halfstudentt":
            return pm.HalfStudentT(name, **p, **kwargs)
        if fam == "halfcauchy":
            return pm.HalfCauchy(name, **p, **kwargs)
        if fam == "exponential":
            return pm.Exponential(name, **p, **kwargs)
        raise PriorError(f"prior family {fam!r} cannot be used for scalar parameter {name!r}")

    def __str__(self) -> str:
        args = ", ".join(f"{k}={float(v):.4g}" for k, v in self.params.items())
        return f"{self.family}({args})"


def _as_prior(key: str, value: Any) -> Prior:
    if isinstance(value, Prior):
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return Prior(value[0], dict(value[1]))
    if isinstance(value, Mapping) and "family" in value:
        d = dict(value)
        fam = d.pop("family")
        return Prior(fam, d)
    raise PriorError(
        f"prior for {key!r} must be a Prior, a (family, params) tuple or a dict with 'family'; "
        f"got {value!r}"
    )


def sd_name(group: str, term: str) -> str:
    """``sd_<grp>__<term>``, e.g. ``sd_speaker__(Intercept)``."""
    return f"sd_{group}__{term}"


def cor_name(group: str, t1: str, t2: str) -> str:
    """``cor_<grp>__<t1>.<t2>``."""
    return f"cor_{group}__{t1}.{t2}"


def re_sd_cor_vars(raw: Any, terms: Any) -> dict[str, Any]:
    """The random-effect SDs and correlations of a posterior, named as in the summaries: per term
    ``k`` the sampled ``sd__<k>__<i>`` become ``sd_<grp>__<term>`` and the lower triangle of
    ``corrmat__<k>`` becomes ``cor_<grp>__<t1>.<t2>``, each as ``(("chain", "draw"), array)``."""
    out: dict[str, Any] = {}
    for k, t in enumerate(terms):
        for i, a in enumerate(t.term_names):
            out[sd_name(t.group, a)] = (("chain", "draw"), np.asarray(raw[f"sd__{k}__{i}"].values))
        if t.p > 1:
            R = np.asarray(raw[f"corrmat__{k}"].values)
            for b in range(t.p):
                for a in range(b + 1, t.p):
                    out[cor_name(t.group, t.term_names[b], t.term_names[a])] = (("chain", "draw"), R[..., a, b])
    return out


def sigma_names(spec) -> list[str]:
    """Residual-SD parameter names: ``["sigma"]`` or ``sigma_<level>`` per dispersion level."""
    if spec.dispersion_levels is None:
        return ["sigma"]
    return [f"sigma_{lvl}" for lvl in spec.dispersion_levels]


@dataclass
class PriorSet:
    """Resolved priors of one model, keyed by parameter name (``cor`` keys are ``cor_<grp>``)."""

    fixef: dict[str, Prior]
    sigma: dict[str, Prior]
    sd: dict[str, Prior]
    cor: dict[str, Prior]

    def as_table(self):
        """A ``pandas.DataFrame`` with columns ``parameter``, ``prior``."""
        import pandas as pd

        rows = [(k, str(v)) for d in (self.fixef, self.sigma, self.sd, self.cor) for k, v in d.items()]
        return pd.DataFrame(rows, columns=["parameter", "prior"])


def data_moments(spec) -> dict[str, Any]:
    """What the default priors read from the rows: ``ybar`` (mean of ``y``), ``y_sd``
    (``ddof=1``), ``x_sd`` (SD of every ``X`` column, ``ddof=1``) and ``term_rms`` (per term,
    ``sqrt(mean(x²))`` of every column), from reproducible sums
    (:func:`scoremix.bayes.reprosum.spec_moments`), so that the same rows give the same priors
    however they are split.  A spec without rows (Dask input,
    :class:`scoremix.distributed.spec.DaskModelSpec`) carries them as ``spec.moments``."""
    given = getattr(spec, "moments", None)
    if given:
        return given
    from scoremix.bayes.reprosum import spec_moments

    return spec_moments(spec)


def default_priors(spec) -> PriorSet:
    """The auto-scaled default priors of the module docstring for ``spec``."""
    mom = data_moments(spec)
    sy = float(mom["y_sd"])
    if not np.isfinite(sy) or sy <= 0:
        sy = 1.0
    ybar = float(mom["ybar"])
    fixef: dict[str, Prior] = {}
    for j, name in enumerate(spec.fixef_names):
        if name == "(Intercept)":
            fixef[name] = Prior.normal(ybar, 2.5 * sy)
            continue
        sx = float(mom["x_sd"][j])
        fixef[name] = Prior.normal(0.0, 2.5 * sy / sx if sx > 0 else 2.5 * sy)
    sigma = {nm: Prior.half_t(3.0, sy) for nm in sigma_names(spec)}
    sd: dict[str, Prior] = {}
    cor: dict[str, Prior] = {}
    for k, t in enumerate(spec.terms):
        for a, term in enumerate(t.term_names):
            rms = float(mom["term_rms"][k][a])
            sd[sd_name(t.group, term)] = Prior.half_t(3.0, sy / rms if rms > 0 else sy)
        if t.p >= 2:
            cor[f"cor_{t.group}"] = Prior.lkj(2.0)
    return PriorSet(fixef, sigma, sd, cor)


def resolve_priors(spec, priors: Mapping[str, Any] | None) -> PriorSet:
    """Defaults of :func:`default_priors` with the user's overrides applied.

    Raises
    ------
    PriorError
        for an unknown key (the message lists the valid ones) or a family that does not
        suit the parameter (a location family for an SD, a non-LKJ prior for ``cor_*``).
    """
    ps = default_priors(spec)
    if not priors:
        return ps
    valid = list(ps.fixef) + ["sigma"] + list(ps.sigma) + list(ps.sd) + list(ps.cor)
    for key, value in priors.items():
        pr = _as_prior(key, value)
        if key in ps.fixef:
            if pr.family not in _LOCATION_FAMILIES:
                raise PriorError(f"prior for fixed effect {key!r} must be normal, studentt or flat, "
                                 f"got {pr.family}")
            ps.fixef[key] = pr
        elif key == "sigma" or key in ps.sigma:
            if pr.family not in _SCALE_FAMILIES:
                raise PriorError(f"prior for {key!r} must be a positive (scale) family "
                                 f"{sorted(_SCALE_FAMILIES)}, got {pr.family}")
            targets = list(ps.sigma) if key == "sigma" else [key]
            for t in targets:
                ps.sigma[t] = pr
        elif key in ps.sd:
            if pr.family not in _SCALE_FAMILIES:
                raise PriorError(f"prior for {key!r} must be a positive (scale) family "
                                 f"{sorted(_SCALE_FAMILIES)}, got {pr.family}")
            ps.sd[key] = pr
        elif key in ps.cor:
            if pr.family != "lkj":
                raise PriorError(f"prior for {key!r} must be lkj(eta), got {pr.family}")
            ps.cor[key] = pr
        else:
            raise PriorError(f"unknown prior key {key!r}; valid keys: {valid}")
    return ps
