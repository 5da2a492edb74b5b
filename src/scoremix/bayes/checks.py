"""Identifiability check: a grouping factor nested in a fixed effect.

If a random term has an intercept-like column (all ones) and a fixed-effect column is
constant within every level of its grouping factor, the fixed effect is a between-level
contrast.  When one value of that column is carried by a *single* level (ASVspoof: the
attack level ``bonafide`` is the only level with ``label = bonafide``) the fixed effect
and that level's random intercept are confounded: only their sum is identified, and the
posterior of the fixed effect is the prior's (the trap of eq. 7 of the LME paper).
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["NestedFactorWarning", "nested_factor_problems", "warn_nested_factors", "refuse_structured"]


class NestedFactorWarning(UserWarning):
    """A grouping factor is nested in a fixed-effect factor (confounded parameters)."""


def nested_factor_problems(spec) -> list[str]:
    """Messages, one per (term, fixed column) pair caught by the rule of the module docstring."""
    out = []
    X = np.asarray(spec.X, dtype=np.float64)
    for t in spec.terms:
        Xt = np.asarray(t.X, dtype=np.float64)
        if not any(np.all(Xt[:, a] == 1.0) for a in range(t.p)):
            continue
        codes = np.asarray(t.codes)
        for j, name in enumerate(spec.fixef_names):
            if name == "(Intercept)":
                continue
            col = X[:, j]
            lo = np.full(t.n_levels, np.inf)
            hi = np.full(t.n_levels, -np.inf)
            np.minimum.at(lo, codes, col)
            np.maximum.at(hi, codes, col)
            used = np.isfinite(lo)
            if not np.all(lo[used] == hi[used]):
                continue
            vals, counts = np.unique(lo[used], return_counts=True)
            lone = [float(v) for v, c in zip(vals, counts) if c == 1]
            if len(vals) < 2 or not lone:
                continue
            lv = [t.levels[i] for i in np.flatnonzero(used & np.isin(lo, lone))]
            out.append(
                f"grouping factor '{t.group}' is nested in fixed effect '{name}': level(s) {lv} alone "
                f"carry {name} = {lone}, so '{name}' and those levels' random intercepts are confounded "
                f"(only their sum is identified; the posterior of '{name}' will follow its prior). "
                f"Give the random effect to one class only, e.g. "
                f"`(0 + dummy(label, \"spoof\") | {t.group_factor})` instead of `(1 | {t.group_factor})`."
            )
    return out


def warn_nested_factors(spec) -> list[str]:
    """Emit a :class:`NestedFactorWarning` per problem found; return the messages."""
    probs = nested_factor_problems(spec)
    for p in probs:
        warnings.warn(p, NestedFactorWarning, stacklevel=3)
    return probs


def refuse_structured(spec) -> None:
    """lme4 2.0's ``cs()``/``ar1()`` terms have no Bayesian model here (their priors would be
    on the structure's SDs and ρ, not an LKJ correlation matrix): a named error."""
    from scoremix.lme.covstruct import is_structured
    from scoremix.lme.errors import UnsupportedModelError
    if spec is not None and getattr(spec, "terms", None) and is_structured(spec.terms):
        raise UnsupportedModelError("cs()/ar1() random terms are fitted by lmer/glmer, not by the "
                                    "Bayesian models; use an unstructured (x | g) or diag() term")
