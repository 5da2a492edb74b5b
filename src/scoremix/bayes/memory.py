r"""A memory budget for the per-trial × per-draw arrays of a posterior.

A posterior of ``S`` draws stores its parameters once (``idata.posterior``: ``S`` × (fixed
effects + random effects + variances)).  Everything *per trial and per draw* — replicated
scores, pointwise log-likelihoods, per-trial predictive means — is ``n × S`` numbers, i.e.
``8·n·S`` bytes: 71,237 trials × 4,000 draws = 2.3 GB for a single array.  scoremix therefore

* never keeps such an array unless asked (``posterior_predictive=True``,
  :meth:`~scoremix.bayes.result.BayesLmerResult.log_likelihood`, :meth:`ppc`);
* computes reductions of them (class moments, LOO, grouped log-likelihood sums) in chunks
  whose working set is at most the budget and 256 MiB (:func:`chunk_size`);
* estimates the bytes of any array it is asked to keep *before* allocating it and raises
  :class:`MemoryBudgetError` — naming the setting to change — when it exceeds the budget.

The budget is, in order: the ``max_memory=`` argument of the call, the environment variable
``SCOREMIX_MAX_MEMORY``, or :data:`DEFAULT_MAX_MEMORY` (2 GiB).  Values are bytes (int) or
strings such as ``"500MB"``, ``"4GB"``, ``"1.5GiB"`` (decimal ``KB/MB/GB``, binary ``KiB/MiB/GiB``).
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["MemoryBudgetError", "DEFAULT_MAX_MEMORY", "CHUNK_BYTES", "ENV_VAR", "parse_bytes", "memory_budget",
           "check_budget", "chunk_size", "format_bytes"]

#: default budget of one kept array / one chunk's working set (bytes)
DEFAULT_MAX_MEMORY = 2 * 1024**3
#: working set of one chunk of a reduction (bytes): larger chunks are no faster
CHUNK_BYTES = 256 * 1024**2
#: environment variable overriding the default budget
ENV_VAR = "SCOREMIX_MAX_MEMORY"

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30}


class MemoryBudgetError(MemoryError):
    """An array would exceed the memory budget; the message names what to change
    (``max_memory=`` or the environment variable ``SCOREMIX_MAX_MEMORY``) and how to shrink
    the array instead."""


def parse_bytes(value: Any, what: str = "max_memory") -> int:
    """Bytes from an int/float or a string like ``"4GB"``; positive."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number of bytes or a string like '4GB', got {value!r}")
    if isinstance(value, (int, float)):
        n = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{what} must be a number of bytes or a string like '500MB', '4GB', '1.5GiB'; "
                             f"got {value!r}")
        n = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not n > 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return int(n)


def memory_budget(max_memory: Any = None) -> int:
    """The budget in bytes: ``max_memory`` if given, else ``$SCOREMIX_MAX_MEMORY``, else 2 GiB."""
    if max_memory is not None:
        return parse_bytes(max_memory, "max_memory")
    env = os.environ.get(ENV_VAR)
    if env:
        return parse_bytes(env, f"environment variable {ENV_VAR}")
    return DEFAULT_MAX_MEMORY


def format_bytes(n: float) -> str:
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= f:
            return f"{n / f:.3g} {unit}"
    return f"{int(n)} B"


def check_budget(nbytes: float, what: str, max_memory: Any = None, shrink: str = "") -> None:
    """Raise :class:`MemoryBudgetError` if ``nbytes`` (estimated before allocating) exceeds the budget."""
    budget = memory_budget(max_memory)
    if nbytes > budget:
        hint = f" or {shrink}" if shrink else ""
        raise MemoryBudgetError(
            f"{what} needs about {format_bytes(nbytes)}, over the memory budget of {format_bytes(budget)}: "
            f"raise it with max_memory= (e.g. max_memory='{_suggest(nbytes)}') or the environment variable "
            f"{ENV_VAR}{hint}")


def _suggest(nbytes: float) -> str:
    gb = max(1, int(-(-nbytes * 1.25 // 1e9)))
    return f"{gb}GB"


def chunk_size(bytes_per_unit: float, n_units: int, max_memory: Any = None, floor: int = 1) -> int:
    """How many units (draws or trials) fit one chunk's working set: within the budget, and
    at most :data:`CHUNK_BYTES` (256 MiB) since larger chunks are no faster."""
    budget = min(memory_budget(max_memory), CHUNK_BYTES)
    k = int(budget // max(float(bytes_per_unit), 1.0))
    return int(min(max(k, floor), max(n_units, 1)))
