"""scoremix: score modeling for binary detectors.

Linear mixed-effects models of detector scores (lme4 formulas, native REML/ML engine,
statsmodels and lme4 backends, a PyMC counterpart), model-based error rates, nuisance
analysis and subgroup fairness with honest uncertainty.
"""

from scoremix._version import __version__

__all__ = ["__version__"]
