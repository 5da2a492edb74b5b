"""Linear mixed-effects models with lme4 formulas (see :func:`scoremix.lmer`)."""
