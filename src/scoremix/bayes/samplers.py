"""The NUTS samplers ``bayes_lmer``, ``bayes_glmer`` and ``bayes_locscale`` can use, and the
check that the chosen one is installed (:class:`SamplerUnavailableError` names the package)."""

from __future__ import annotations

import importlib.util

__all__ = ["SAMPLERS", "SamplerUnavailableError", "check_sampler"]

SAMPLERS = ("pymc", "nutpie", "numpyro")


class SamplerUnavailableError(ImportError):
    """The requested NUTS sampler's package is not installed."""


def check_sampler(sampler: str) -> None:
    """Raise ``ValueError`` for an unknown sampler and :class:`SamplerUnavailableError` when
    its package (``nutpie``; ``numpyro`` and ``jax``) is not installed."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    need = {"nutpie": ["nutpie"], "numpyro": ["numpyro", "jax"]}.get(sampler, [])
    missing = [p for p in need if importlib.util.find_spec(p) is None]
    if missing:
        raise SamplerUnavailableError(
            f"sampler={sampler!r} needs the package(s) {missing}: pip install {' '.join(missing)} "
            f"(or use sampler='pymc')"
        )
