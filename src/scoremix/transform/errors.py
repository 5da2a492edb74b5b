"""Named errors of transformation (latent-Gaussian) mixed models."""

from __future__ import annotations

from scoremix.lme.errors import LmeError
from scoremix.trials import SingleClassError

__all__ = ["TransformError", "AllScoresTiedError", "TooFewDistinctScoresError",
           "SingleClassError", "SingleLevelError"]


class TransformError(LmeError):
    """Invalid input to ``lmer(..., transform="monotone")``."""


class TooFewDistinctScoresError(TransformError):
    """The response has fewer than three distinct values: a monotone transform of two
    values is a relabelling, and the cutpoints cannot be told apart from the location."""


class AllScoresTiedError(TooFewDistinctScoresError):
    """Every score is identical: the model has no information about any effect."""


class SingleLevelError(TransformError, SingleClassError):
    """A factor of the fixed part (the class ``label``, say) or of the dispersion model has
    only one level in the data.  Also the one :class:`scoremix.SingleClassError`
    (:class:`scoremix.trials.SingleClassError`), so ``except sm.SingleClassError`` catches it."""
