"""Exception classes of :mod:`scoremix.glmm` (subclasses of the mixed-model errors, so a
handler for :class:`scoremix.lme.errors.LmeError` catches them too)."""

from __future__ import annotations

from scoremix.lme.errors import LmeError, ResponseError, UnsupportedModelError

__all__ = ["GlmmError", "FamilyError", "GlmmResponseError", "GlmmUnsupportedError",
           "PirlsError"]


class GlmmError(LmeError):
    """Base class of the generalised mixed-model errors."""


class FamilyError(GlmmError):
    """Unknown family or a link the family does not offer."""


class GlmmResponseError(GlmmError, ResponseError):
    """The response does not fit the family (e.g. counts for a binomial without totals,
    negative or non-integer counts for a Poisson, a factor with more than two levels)."""


class GlmmUnsupportedError(GlmmError, UnsupportedModelError):
    """A model that scoremix's GLMM engine refuses (e.g. ``nAGQ > 1`` with more than one
    random term or a vector-valued term, as lme4 also refuses)."""


class PirlsError(GlmmError):
    """Penalised iteratively reweighted least squares did not converge."""
