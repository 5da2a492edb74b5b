"""The error class of the tandem metrics."""

from __future__ import annotations

from scoremix.metrics import MetricInputError

__all__ = ["TandemInputError"]


class TandemInputError(MetricInputError):
    """Scores, keys or options that a tandem metric cannot use (names the argument and the first bad row)."""
