"""One deprecation helper for every renamed argument of the public API (layer 1).

The API convention of scoremix: ``level=`` for every interval, ``seed=`` (int or
:class:`numpy.random.Generator`) for every random result, ``by=`` for grouping and
``positive=`` for the class convention.  Older names (``ci``, ``hdi_prob``,
``random_state``, ``random_seed``, ``groups``, ``split``, ``split_by``, ``bys``) keep working
for one release: :func:`renamed_kwargs` maps them to the new name and raises a
:class:`FutureWarning` naming the function, the old and the new argument.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, TypeVar

__all__ = ["renamed_kwargs", "warn_renamed"]

F = TypeVar("F", bound=Callable[..., Any])


def warn_renamed(func: str, old: str, new: str, stacklevel: int = 3) -> None:
    """Raise the :class:`FutureWarning` of a renamed argument ``old`` → ``new`` of ``func``."""
    warnings.warn(f"{func}(): the argument {old}= is renamed {new}= and the old name will be removed "
                  f"in the next release; pass {new}= instead", FutureWarning, stacklevel=stacklevel)


def renamed_kwargs(**old_to_new: str) -> Callable[[F], F]:
    """Decorator: accept each ``old`` keyword as its ``new`` name, with a :class:`FutureWarning`.

    Passing both names is a :class:`TypeError` (which one would win is not obvious).

    >>> @renamed_kwargs(ci="level")
    ... def f(x, *, level=0.95):
    ...     return level
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", FutureWarning)
    ...     f(1, ci=0.9)
    0.9
    """
    def deco(fn: F) -> F:
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{name}(): pass {new}= only ({old}= is its old name), not both")
                    warn_renamed(name, old, new, stacklevel=3)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed_kwargs__ = dict(old_to_new)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return deco
