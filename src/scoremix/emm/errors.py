"""Errors of the post-fit layer (:mod:`scoremix.emm`)."""

from __future__ import annotations

__all__ = ["EmmError"]


class EmmError(ValueError):
    """A reference grid, marginal mean or contrast that cannot be formed as asked; the
    message names the variable, level or option at fault."""
