"""Exception and warning classes of the :mod:`scoremix.lme` package.

Every error raised while turning a formula and a data frame into a
:class:`~scoremix.lme.spec.ModelSpec` (and while fitting it) is one of these classes, so
callers can catch the specific problem.  The errors subclass :class:`ValueError`, the
warnings :class:`UserWarning`, so generic handlers keep working.
"""

from __future__ import annotations

__all__ = [
    "LmeError",
    "DdfError",
    "FormulaError",
    "UnknownColumnError",
    "GroupingError",
    "MissingValueError",
    "ResponseError",
    "NewLevelError",
    "UnsupportedModelError",
    "RankDeficiencyWarning",
    "ScaleWarning",
    "SCALE_MESSAGE",
    "SingularFitWarning",
    "ConvergenceWarning",
    "RANK_DEFICIENT_MESSAGE",
    "SINGULAR_FIT_MESSAGE",
    "rank_deficient_message",
]


class LmeError(ValueError):
    """Base class of every error of the mixed-model package."""


class FormulaError(LmeError):
    """The formula is malformed or uses syntax that scoremix does not support."""


class UnknownColumnError(FormulaError, KeyError):
    """The formula names a column that is not in the data.

    Attributes
    ----------
    column:
        the missing column name.
    available:
        the columns of the data.
    """

    def __init__(self, message: str, column: str = "", available: list[str] | None = None):
        super().__init__(message)
        self.column = column
        self.available = list(available or [])

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class GroupingError(LmeError):
    """A grouping factor cannot identify its random effects (lme4's ``checkNlevels``
    and ``check.nobs.vs.nRE`` rules)."""


class MissingValueError(LmeError):
    """Missing values in a used column with ``na_action="fail"``."""


class ResponseError(LmeError):
    """The response is not finite numeric (NaN/inf/non-numeric)."""


class NewLevelError(LmeError):
    """New data has a factor level in a fixed-effect term that was not seen in fitting."""


class UnsupportedModelError(LmeError):
    """A backend cannot express the model (for example a repeated term or crossed
    correlated slopes with the statsmodels backend); the message names the term."""


class RankDeficiencyWarning(UserWarning):
    """Fixed-effect columns were dropped because ``X`` is rank deficient."""


class ScaleWarning(UserWarning):
    """Continuous fixed-effect columns are on very different scales (lme4's ``checkScaleX``)."""


class SingularFitWarning(UserWarning):
    """The fit is singular (a variance estimate on the boundary, lme4's ``isSingular``)."""


class ConvergenceWarning(UserWarning):
    """The optimizer did not converge (or a convergence check failed)."""


#: lme4's wording (``checkRankX``): format with the number of dropped columns.
RANK_DEFICIENT_MESSAGE = (
    "fixed-effect model matrix is rank deficient so dropping {n} column{s} / coefficient{s}"
)

#: lme4's wording (``checkScaleX``) for badly scaled predictors.
SCALE_MESSAGE = "Some predictor variables are on very different scales: consider rescaling"

#: lme4's wording for a singular fit.
SINGULAR_FIT_MESSAGE = "boundary (singular) fit: see help('isSingular')"


def rank_deficient_message(n: int, names: list[str] | None = None) -> str:
    """lme4's rank-deficiency message for ``n`` dropped columns (optionally naming them)."""
    s = "" if n == 1 else "s"
    msg = RANK_DEFICIENT_MESSAGE.format(n=n, s=s)
    if names:
        msg += " (" + ", ".join(names) + ")"
    return msg


class DdfError(LmeError):
    """Denominator degrees of freedom (Satterthwaite, Kenward–Roger) cannot be computed for
    this fit; the message says why (e.g. Kenward–Roger on an ML fit)."""
