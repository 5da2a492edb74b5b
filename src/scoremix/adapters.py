"""One registry of input adapters: how data that is not an in-memory table enters (layer 1).

The public functions of the lower layers (``sm.lmer``, ``sm.bayes_lmer``, ``sm.eer``,
``sm.min_dcf``, ``sm.subgroup_dcf``) take a pandas DataFrame or arrays.  Other kinds of input —
today Dask collections and parquet paths — are handled by the edge layer
(:mod:`scoremix.distributed`, layer 8), which *registers* an adapter per operation when it is
imported (``import scoremix`` does).  A lower layer asks :func:`adapter_for` whether some
registered adapter claims its input, and hands the call over if so; it never imports the edge
layer, so data and imports flow one way (as :func:`scoremix.lme.api.register_transform` does
for the transformation models).

Operations in use (the handler's signature is the operation's contract):

``"lmer"``
    ``handler(formula, data, *, REML, backend, transform, weights, dispersion, na_action,
    control, contrasts, offset) -> LmerResult``
``"bayes_spec"``
    ``handler(formula, data, *, weights, dispersion, method, likelihood,
    posterior_predictive) -> ModelSpec``
``"metric_candidates"``
    ``handler(scores, labels, kind, params)``: the candidate operating points of an exact
    metric (see :func:`scoremix.metrics.range_candidates`)
``"collect_columns"``
    ``handler(table, columns) -> pandas.DataFrame``: the named columns, collected
``"subgroup_point"``
    ``handler(trials, groups, cost, *, score, label, speaker, positive, with_eer)``: the
    SVEva point measures without collecting the rows
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["register_adapter", "adapter_for", "ADAPTERS"]

#: operation → list of ``(claims, handler)``, the latest registration first.
ADAPTERS: dict[str, list[tuple[Callable[[Any], bool], Callable[..., Any]]]] = {}


def register_adapter(operation: str, claims: Callable[[Any], bool], handler: Callable[..., Any]) -> None:
    """Make ``handler`` serve ``operation`` for every input ``x`` with ``claims(x)`` true."""
    ADAPTERS.setdefault(operation, []).insert(0, (claims, handler))


def adapter_for(operation: str, *inputs: Any) -> Callable[..., Any] | None:
    """The handler of the first adapter of ``operation`` that claims any of ``inputs``, else None
    (the caller then treats them as in-memory data)."""
    for claims, handler in ADAPTERS.get(operation, ()):
        if any(claims(x) for x in inputs):
            return handler
    return None
