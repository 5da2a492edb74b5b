"""Transformation (latent-Gaussian) linear mixed models: ``lmer(..., transform="monotone")``.

Modules: :mod:`~scoremix.transform.cells` (rank step), :mod:`~scoremix.transform.basis`
(monotone cutpoints), :mod:`~scoremix.transform.likelihood` (cell probabilities and
derivatives), :mod:`~scoremix.transform.laplace` (Laplace objective and exact gradient),
:mod:`~scoremix.transform.vcov` (observed information), :mod:`~scoremix.transform.fit`
(the estimator and its result), :mod:`~scoremix.transform.monotone` (the fitted ``h``).
"""

import functools

from scoremix.transform.errors import (
    AllScoresTiedError,
    SingleClassError,
    TooFewDistinctScoresError,
    TransformError,
)
from scoremix.lme.api import register_transform
from scoremix.transform.fit import (
    TransformControl,
    TransformLmerResult,
    fit_transform,
    lmer_transform,
)
from scoremix.transform.monotone import MonotoneTransform
from scoremix.transform.strata import (
    StratifiedTransform,
    UnknownStratumError,
)

register_transform("monotone", lmer_transform)


def _load_result(res, d):
    """A :class:`TransformLmerResult` from a plain result and its JSON dict (``d["transform"]``)."""
    from scoremix.transform.monotone import MonotoneTransform
    from scoremix.transform.strata import StratifiedTransform

    out = TransformLmerResult.__new__(TransformLmerResult)
    out.__dict__.update(res.__dict__)
    tr = d["transform"]
    out.transform = (StratifiedTransform.from_dict(tr) if tr.get("kind") == "monotone-by-class"
                     else MonotoneTransform.from_dict(tr))
    out.strata = None
    return out


from scoremix.lme.result import RESULT_LOADERS as _LOADERS  # noqa: E402

_LOADERS["monotone"] = _load_result
_LOADERS["monotone-by-class"] = _load_result
register_transform("monotone-by-class", functools.partial(lmer_transform,
                                                          transform="monotone-by-class"))

__all__ = ["MonotoneTransform", "TransformLmerResult", "TransformControl", "fit_transform",
           "TransformError", "AllScoresTiedError", "TooFewDistinctScoresError",
           "SingleClassError",
           "StratifiedTransform", "UnknownStratumError"]
