"""BLAS threads of scoremix's own hot paths (layer 1).

The mixed-model engines factor and multiply many small dense blocks per optimiser step
(``q×q`` and ``p×p`` Cholesky factors, ``n×p`` cross-products with small ``p``).  A
multi-threaded BLAS spends more time handing such blocks between threads than computing
them, and much more when other processes compete for the cores: with OpenBLAS at its
default (one thread per core) the same fit was 2–3× slower on a loaded 2-core machine
(``benchmarks/threads_under_load.py``, ``docs/performance.md``).  So the hot paths
(:func:`scoremix.lme.native.fit`, :func:`scoremix.transform.fit.fit_transform`) run with
:func:`get_threads` BLAS threads — 1 unless overridden — set with ``threadpoolctl`` for the
duration of the call and restored afterwards.  The result does not depend on the setting a
user's environment happens to have (``OPENBLAS_NUM_THREADS`` or none).

Override, in this order:

* ``scoremix.set_threads(n)`` (``n >= 1``; ``None``: leave the BLAS as it is configured);
* the environment variable ``SCOREMIX_BLAS_THREADS`` (a positive integer, or ``off``);
* default: 1.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Callable, Iterator, TypeVar

__all__ = ["set_threads", "get_threads", "blas_threads", "limits_blas", "ENV_VAR"]

ENV_VAR = "SCOREMIX_BLAS_THREADS"
DEFAULT = 1
_UNSET = object()
_STATE: dict[str, Any] = {"n": _UNSET, "controller": None}

F = TypeVar("F", bound=Callable[..., Any])


def _check(n: Any, where: str) -> int | None:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{where}: BLAS threads must be a positive integer or None, got {n!r}")
    return n


def set_threads(n: int | None) -> None:
    """Use ``n`` BLAS threads in scoremix's hot paths (``None``: do not touch the BLAS)."""
    _STATE["n"] = _check(n, "set_threads")


def get_threads() -> int | None:
    """The BLAS threads the hot paths use: :func:`set_threads`, else ``$SCOREMIX_BLAS_THREADS``,
    else 1; ``None`` means the BLAS is left as configured."""
    if _STATE["n"] is not _UNSET:
        return _STATE["n"]
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if not raw:
        return DEFAULT
    if raw in ("off", "none", "0"):
        return None
    try:
        return _check(int(raw), ENV_VAR)
    except ValueError:
        raise ValueError(f"{ENV_VAR} must be a positive integer or 'off', got {raw!r}") from None


def _controller() -> Any:
    """A fresh view of the BLAS libraries loaded now (about 1 ms): one cached at first use would
    miss libraries loaded later (R's BLAS through rpy2, a second OpenBLAS of scipy or PyTensor),
    which would then keep their own threads inside the hot paths."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextlib.contextmanager
def blas_threads(n: int | None | object = _UNSET) -> Iterator[None]:
    """Run the block with ``n`` BLAS threads (default :func:`get_threads`), restoring the previous
    setting afterwards; nested uses are fine.  ``None``: leave the BLAS alone."""
    n = get_threads() if n is _UNSET else _check(n, "blas_threads")
    if n is None:
        yield
        return
    ctl = _controller()
    blas = [c for c in ctl.lib_controllers if c.user_api == "blas"]
    if all(c.num_threads == n for c in blas):  # already there: skip the set/restore round trip
        yield
        return
    with ctl.limit(limits=n, user_api="blas"):
        yield


def limits_blas(fn: F) -> F:
    """Decorator: run ``fn`` inside :func:`blas_threads` (the hot paths' BLAS threads)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with blas_threads():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
