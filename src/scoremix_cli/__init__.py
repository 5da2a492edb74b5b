"""Console entry point of the ``scoremix`` command (``scoremix = scoremix_cli:main``).

``scoremix --help``, ``scoremix <command> --help`` and ``--version`` are answered from the
argument parser alone: :mod:`scoremix.cli` is loaded as a submodule of a bare ``scoremix``
package object, so the package's ``__init__`` — which imports pandas, SciPy, statsmodels and
the model code (seconds) — does not run.  Every other invocation imports the package as usual
and runs :func:`scoremix.cli.main`.  It lives outside the ``scoremix`` package because importing
anything inside it runs that ``__init__`` first.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Sequence

__all__ = ["main", "wants_help_only"]

_HELP_FLAGS = frozenset({"-h", "--help", "--version"})


def wants_help_only(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (without the program name) only asks for help or the version."""
    return not argv or any(a in _HELP_FLAGS for a in argv)


def _parser_without_package():
    """``scoremix.cli.build_parser`` imported under a bare ``scoremix`` package (its ``__init__``
    not executed); the stub is removed again afterwards."""
    spec = importlib.util.find_spec("scoremix")
    if spec is None or spec.submodule_search_locations is None:  # pragma: no cover - broken install
        raise ImportError("the scoremix package is not installed")
    saved = {k: sys.modules[k] for k in ("scoremix", "scoremix.cli", "scoremix._version") if k in sys.modules}
    if "scoremix" in saved:  # already imported for real: nothing to save
        from scoremix.cli import build_parser
        return build_parser
    stub = types.ModuleType("scoremix")
    stub.__path__ = list(spec.submodule_search_locations)
    stub.__spec__ = spec
    stub.__file__ = spec.origin
    sys.modules["scoremix"] = stub
    try:
        from scoremix.cli import build_parser
        return build_parser
    finally:
        for k in ("scoremix", "scoremix.cli", "scoremix._version"):
            sys.modules.pop(k, None)
        sys.modules.update(saved)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if wants_help_only(args):
        parser = _parser_without_package()()
        if not args:
            parser.print_help()
            return 2
        parser.parse_args(args)  # prints the help or version and raises SystemExit(0)
    from scoremix.cli import main as run

    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
