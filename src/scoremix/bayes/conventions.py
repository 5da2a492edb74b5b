"""One argument convention for the Bayesian API: ``seed=``, ``level=``, ``progress=``.

The older names (``random_seed=``, ``hdi_prob=``, ``progressbar=``) keep working for one
release with the :class:`FutureWarning` of :func:`scoremix._deprecate.warn_renamed`; passing
both spellings is an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scoremix._deprecate import warn_renamed

__all__ = ["resolve_seed", "resolve_level", "resolve_progress", "seed_int", "UNSET", "LEVEL", "DEFAULT_LEVEL"]


class _Unset:
    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "<unset>"


#: sentinel of an argument that was not passed
UNSET: Any = _Unset()

#: the default probability of every Bayesian interval (s7bayes-api: 95 %, as every other interval
#: of scoremix; ArviZ's own default is 0.94)
DEFAULT_LEVEL = 0.95


class _DefaultLevel(float):
    """The default ``level=`` of a Bayesian call: a float equal to :data:`DEFAULT_LEVEL` (so
    signatures show ``level=0.95``) that is still recognised as *not passed* (so that passing
    the deprecated ``hdi_prob=`` alone works and passing both is an error)."""

    def __repr__(self) -> str:
        return repr(float(self))


#: the ``level=`` default of every Bayesian call (``== 0.95``; identity marks "not passed")
LEVEL: Any = _DefaultLevel(DEFAULT_LEVEL)


def _passed(value: Any) -> bool:
    return value is not UNSET and not isinstance(value, _DefaultLevel)


def _renamed(new: str, new_value: Any, old: str, old_value: Any, default: Any, where: str) -> Any:
    if old_value is UNSET:
        return new_value if _passed(new_value) else default
    if _passed(new_value):
        raise TypeError(f"{where}: pass {new}= only ({old}= is its deprecated spelling)")
    warn_renamed(where, old, new, stacklevel=5)  # s6bayes-check: the project's one deprecation message
    return old_value


def resolve_seed(seed: Any, random_seed: Any = UNSET, where: str = "bayes_lmer") -> Any:
    """``seed`` (int, ``numpy.random.Generator`` or ``None``) from ``seed=`` / ``random_seed=``."""
    s = _renamed("seed", seed, "random_seed", random_seed, None, where)
    if s is not None and not isinstance(s, (int, np.integer, np.random.Generator)) or isinstance(s, bool):
        raise TypeError(f"{where}: seed must be an int, a numpy Generator or None, got {s!r}")
    return s


def seed_int(seed: Any) -> int | None:
    """An int seed from an int / Generator / None (a Generator is advanced by one draw)."""
    if seed is None:
        return None
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**31 - 1))
    return int(seed)


def resolve_level(level: Any, hdi_prob: Any = UNSET, default: float = DEFAULT_LEVEL, where: str = "") -> float:
    """Interval probability from ``level=`` / ``hdi_prob=`` (``default`` when neither is
    passed, 0.95 unless a fit sets its own); must lie in (0, 1)."""
    v = _renamed("level", level, "hdi_prob", hdi_prob, default, where or "BayesLmerResult")
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{where or 'level'}: level must be a number in (0, 1), got {v!r}") from None
    if not 0.0 < v < 1.0:
        raise ValueError(f"{where or 'level'}: level must lie in (0, 1), got {v!r}")
    return v


def resolve_progress(progress: Any, progressbar: Any = UNSET, default: bool = True,
                     where: str = "bayes_lmer") -> bool:
    """Progress-bar switch from ``progress=`` / ``progressbar=``."""
    return bool(_renamed("progress", progress, "progressbar", progressbar, default, where))
