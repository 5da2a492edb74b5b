"""Generalised linear mixed models (binomial and Poisson), lme4's ``glmer``.

Layer 4 (an engine beside :mod:`scoremix.lme`, whose model frame, random-term structures and
relative covariance factors it reuses).  Entry point: :func:`scoremix.glmer`.
"""

from scoremix.glmm.api import GLMER_BACKENDS, glmer
from scoremix.glmm.errors import (FamilyError, GlmmError, GlmmResponseError,
                                  GlmmUnsupportedError, PirlsError)
from scoremix.glmm.family import Family, make_family
from scoremix.glmm.fit import GlmmControl
from scoremix.glmm.result import GlmerResult

__all__ = ["glmer", "GlmerResult", "GlmmControl", "Family", "make_family", "GLMER_BACKENDS",
           "GlmmError", "FamilyError", "GlmmResponseError", "GlmmUnsupportedError", "PirlsError"]
