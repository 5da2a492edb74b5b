"""A small in-process cache of built (and, for nutpie, compiled) PyMC models.

A suffstats model (collapsed or joint) keeps every number that depends on the data in
``pm.Data`` (cross-products, prior scales; :func:`scoremix.bayes.joint.model_data`), so
its graph depends only on :func:`scoremix.bayes.joint.model_signature` (level counts,
term sizes, prior families).  Refits with the same signature — bootstrap replicates,
subgroup refits with equal level counts, simulation studies — reuse the model: for PyMC
the C code is already in PyTensor's compile cache, for nutpie the numba compilation
(20–100 s) is skipped entirely (``CompiledPyMCModel.with_data``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Hashable

__all__ = ["ModelCache", "MODEL_CACHE", "clear_model_cache", "model_cache_info"]


@dataclass
class CacheInfo:
    """Hits, misses and current size of a :class:`ModelCache`."""

    hits: int
    misses: int
    size: int
    maxsize: int


class ModelCache:
    """Least-recently-used mapping ``signature -> object`` with hit/miss counts."""

    def __init__(self, maxsize: int = 8) -> None:
        self.maxsize = int(maxsize)
        self._d: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable | None) -> Any | None:
        if key is None or key not in self._d:
            self.misses += 1
            return None
        self.hits += 1
        self._d.move_to_end(key)
        return self._d[key]

    def put(self, key: Hashable | None, value: Any) -> None:
        if key is None or self.maxsize <= 0:
            return
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.maxsize:
            self._d.popitem(last=False)

    def clear(self) -> None:
        self._d.clear()
        self.hits = self.misses = 0

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, len(self._d), self.maxsize)


MODEL_CACHE = ModelCache()
"""Built PyMC models (key: ``("pymc", signature)``) and compiled nutpie models (key:
``("nutpie", signature)``)."""


def clear_model_cache() -> None:
    """Forget every cached model (e.g. to free memory, or to time a cold fit)."""
    MODEL_CACHE.clear()


def model_cache_info() -> CacheInfo:
    """Hits, misses and size of the model cache."""
    return MODEL_CACHE.info()
