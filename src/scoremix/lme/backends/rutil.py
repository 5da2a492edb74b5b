"""Shared helpers for the backends that run R (lme4, glmmTMB).

Two ways to reach R:

* **rpy2** (in-process, ``pip install scoremix[r]``, rpy2 3.5.x for R < 4.5): the model
  frame is handed to R as plain vectors (numeric → ``double``/``integer``, categorical →
  ``factor`` with scoremix's level order), without rpy2's pandas converter, so it works
  with pandas 3.
* **Rscript subprocess**: the model frame is written to a CSV plus a JSON of factor levels,
  and ``r_scripts/fit_lme4.R`` / ``fit_glmmtmb.R`` is run.

Both paths call the same R functions (sourced from ``r_scripts/fit_lme4.R``), so they return
the same JSON (``docs/lmer-result-schema.md``).

The R scripts are looked up in ``$SCOREMIX_R_SCRIPTS`` or in the ``r_scripts/`` folder of
the source checkout.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scoremix.lme.errors import LmeError
from scoremix.lme.spec import ModelSpec

__all__ = [
    "BackendUnavailableError",
    "INSTALL_HINT_R",
    "INSTALL_HINT_RPY2",
    "r_scripts_dir",
    "r_script",
    "find_rscript",
    "r_has_packages",
    "formula_columns",
    "model_frame_columns",
    "run_rscript",
    "write_model_frame",
    "load_rpy2",
    "r_dataframe",
]

INSTALL_HINT_R = ("apt-get install -y --no-install-recommends r-base-core r-cran-lme4 "
                  "r-cran-glmmtmb r-cran-jsonlite")
INSTALL_HINT_RPY2 = "pip install scoremix[r]  (rpy2 3.5.x, e.g. rpy2==3.5.17, for R < 4.5)"


class BackendUnavailableError(LmeError, ImportError):
    """A backend cannot run because software it needs (R, an R package, rpy2) is missing.

    The message names what to install.  Subclasses :class:`ValueError` (through
    :class:`~scoremix.lme.errors.LmeError`) and :class:`ImportError`.
    """


def r_scripts_dir() -> Path:
    """Folder holding ``fit_lme4.R`` and ``fit_glmmtmb.R``.

    ``$SCOREMIX_R_SCRIPTS`` if set, else ``<checkout>/r_scripts``.
    """
    env = os.environ.get("SCOREMIX_R_SCRIPTS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "r_scripts"


def r_script(name: str) -> Path:
    """Path of one R script; :class:`BackendUnavailableError` when it is not there."""
    path = r_scripts_dir() / name
    if not path.is_file():
        raise BackendUnavailableError(
            f"R script {path} not found: the R backends need the scoremix source checkout's "
            "r_scripts/ folder (or set SCOREMIX_R_SCRIPTS to a folder holding fit_lme4.R "
            "and fit_glmmtmb.R)")
    return path


def find_rscript() -> str:
    """Path of ``Rscript``; :class:`BackendUnavailableError` naming the apt packages if absent."""
    path = shutil.which("Rscript")
    if path is None:
        raise BackendUnavailableError(f"R (Rscript) is not installed: {INSTALL_HINT_R}")
    return path


@functools.lru_cache(maxsize=None)
def r_has_packages(packages: tuple[str, ...]) -> bool:
    """Whether ``Rscript`` exists and can load every package in ``packages``."""
    rscript = shutil.which("Rscript")
    if rscript is None:
        return False
    code = "; ".join(f"suppressMessages(library({p}))" for p in packages) + "; cat('ok')"
    try:
        out = subprocess.run([rscript, "-e", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip().endswith("ok")


def require_r_packages(packages: tuple[str, ...]) -> str:
    """``Rscript`` path, after checking that R loads ``packages``; else
    :class:`BackendUnavailableError`."""
    rscript = find_rscript()
    if not r_has_packages(tuple(packages)):
        raise BackendUnavailableError(
            f"R cannot load the package(s) {', '.join(packages)}: {INSTALL_HINT_R}")
    return rscript


_IDENT = re.compile(r"`([^`]+)`|([A-Za-z.][A-Za-z0-9._]*)")


def formula_columns(formula: str, columns: list[str]) -> list[str]:
    """Columns of a data frame that a formula (string) mentions, in data order.

    Identifiers and back-quoted names are matched against ``columns``; function names
    (``dummy``, ``log``) simply do not match a column.
    """
    names = {a or b for a, b in _IDENT.findall(formula)}
    return [c for c in columns if c in names]


def model_frame_columns(spec: ModelSpec) -> list[str]:
    """Columns of ``spec.data`` needed to refit ``spec`` from its formula(s)."""
    text = spec.formula + " " + (spec.dispersion_formula or "")
    cols = formula_columns(text, [str(c) for c in spec.data.columns])
    if not cols:
        raise LmeError(f"no column of the model frame appears in the formula {spec.formula!r}")
    return cols


def _is_categorical(s: pd.Series) -> bool:
    return not (pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s))


def _is_ordered(s: pd.Series) -> bool:
    """Whether ``s`` is an ordered pandas Categorical (R: an ``ordered`` factor)."""
    return isinstance(s.dtype, pd.CategoricalDtype) and bool(s.dtype.ordered)


def _levels(s: pd.Series) -> list[str]:
    """Level order scoremix uses: a pandas Categorical's categories, else sorted labels."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        return [str(c) for c in s.cat.categories]
    return sorted({str(v) for v in s.dropna().unique()})


def write_model_frame(spec: ModelSpec, folder: Path, weights_name: str = ".smx_weights"
                      ) -> tuple[Path, Path, str | None]:
    """Write the model frame for the Rscript path.

    Returns ``(csv_path, levels_json_path, weights_column_or_None)``.  Floats are written
    as Python's shortest round-trip text (repr); categorical columns get their level
    order in the JSON (``{"levels": [...], "ordered": true}`` for an ordered Categorical,
    which ``r_scripts/fit_lme4.R`` makes an R ``ordered`` factor).
    """
    cols = model_frame_columns(spec)
    df = spec.data[cols].copy()
    levels: dict[str, Any] = {}
    for c in cols:
        if _is_categorical(df[c]):
            lv = _levels(df[c])
            levels[c] = dict(levels=lv, ordered=True) if _is_ordered(df[c]) else lv
            df[c] = df[c].astype(str)
        elif pd.api.types.is_bool_dtype(df[c]):
            df[c] = np.where(df[c].to_numpy(), "TRUE", "FALSE")
    wname = None
    if spec.weights is not None:
        wname = weights_name
        df[wname] = np.asarray(spec.weights, dtype=float)
    csv = folder / "model_frame.csv"
    df.to_csv(csv, index=False)  # repr: shortest round-trip text
    lev = folder / "levels.json"
    lev.write_text(json.dumps(levels))
    return csv, lev, wname


def run_rscript(args: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ``Rscript args...``; raise :class:`RuntimeError` with R's stderr on failure."""
    rscript = find_rscript()
    out = subprocess.run([rscript, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"Rscript {' '.join(args[:1])} failed (exit {out.returncode}):\n"
                           f"{out.stderr.strip()[-4000:]}")
    return out


# ---------------------------------------------------------------------------- rpy2 path

_SOURCED: set[str] = set()


def load_rpy2(packages: tuple[str, ...] = ("lme4", "jsonlite")) -> Any:
    """Import ``rpy2.robjects`` lazily and check that R loads ``packages``.

    Returns the ``rpy2.robjects`` module; raises :class:`BackendUnavailableError` naming
    what to install when rpy2, R or an R package is missing.
    """
    # Starting embedded R makes rpy2 prepend R's library folders (incl. the system's
    # /usr/lib/<arch>) to LD_LIBRARY_PATH. R's libraries are already loaded into this
    # process by then; left in the environment, the variable leaks into every child process,
    # where a Python with a RUNPATH (pyenv, venvs) then loads the system's libpython and loses
    # its own site-packages. Restore the caller's value.
    ld_before = os.environ.get("LD_LIBRARY_PATH")
    try:
        import rpy2.robjects as ro  # noqa: PLC0415  (optional dependency)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the lme4 backend needs rpy2 ({exc}): {INSTALL_HINT_RPY2}; and R with lme4: "
            f"{INSTALL_HINT_R}") from exc
    except Exception as exc:  # rpy2 found no usable R (R_HOME, libR.so)
        raise BackendUnavailableError(
            f"rpy2 is installed but could not start R ({type(exc).__name__}: {exc}): "
            f"{INSTALL_HINT_R}") from exc
    finally:
        if ld_before is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = ld_before
    for p in packages:
        ok = ro.r(f"isTRUE(suppressMessages(requireNamespace('{p}', quietly = TRUE)))")[0]
        if not ok:
            raise BackendUnavailableError(f"R cannot load the package {p}: {INSTALL_HINT_R}")
    return ro


def source_r(ro: Any, name: str) -> None:
    """``source()`` an R script of :func:`r_scripts_dir` once per process."""
    path = str(r_script(name))
    if path not in _SOURCED:
        ro.r["source"](path)
        _SOURCED.add(path)


def _r_vector(ro: Any, x: np.ndarray, kind: str) -> Any:
    """An R numeric (``kind="Float"``) or integer (``"Int"``) vector sharing ``x``'s memory
    where rpy2 allows it, else copied."""
    x = np.ascontiguousarray(x, dtype=np.float64 if kind == "Float" else np.int32)
    vector_cls = getattr(ro.vectors, f"{kind}Vector")
    try:
        from rpy2 import rinterface  # noqa: PLC0415
        return vector_cls(getattr(rinterface, f"{kind}SexpVector").from_memoryview(memoryview(x)))
    except (AttributeError, TypeError, ValueError):
        return vector_cls(x.tolist())


def r_dataframe(ro: Any, spec: ModelSpec) -> Any:
    """The model frame of ``spec`` as an R ``data.frame`` (columns used by the formula).

    Numeric columns become ``double`` (integers ``integer``), booleans ``logical``, and
    everything else a ``factor`` whose levels are scoremix's (categories of a pandas
    Categorical, else sorted labels), built from integer codes (fast, exact); an ordered
    pandas Categorical becomes an R ``ordered`` factor, so that lme4 codes it with
    ``contr.poly`` as the native engine does.
    """
    cols = model_frame_columns(spec)
    make_factor = ro.r("function(i, lv) structure(i, levels = lv, class = 'factor')")
    make_ordered = ro.r("function(i, lv) structure(i, levels = lv, class = c('ordered', 'factor'))")
    make_df = ro.r("function(l) { l <- list2DF(l); l }")
    items = []
    for c in cols:
        s = spec.data[c]
        if pd.api.types.is_bool_dtype(s):
            items.append((c, ro.vectors.BoolVector(s.to_numpy().tolist())))
        elif (pd.api.types.is_integer_dtype(s)
              and np.abs(s.to_numpy(dtype=np.int64)).max(initial=0) < 2**31 - 1):
            items.append((c, _r_vector(ro, s.to_numpy(), "Int")))
        elif pd.api.types.is_numeric_dtype(s):
            items.append((c, _r_vector(ro, s.to_numpy(dtype=float), "Float")))
        else:
            lv = _levels(s)
            codes = pd.Categorical(s.astype(str), categories=lv).codes.astype(np.int32) + 1
            make = make_ordered if _is_ordered(s) else make_factor
            items.append((c, make(_r_vector(ro, codes, "Int"), ro.vectors.StrVector(lv))))
    lst = ro.vectors.ListVector.from_length(len(items))
    for k, (_, v) in enumerate(items):
        lst[k] = v
    lst.names = ro.vectors.StrVector([c for c, _ in items])
    return make_df(lst)
