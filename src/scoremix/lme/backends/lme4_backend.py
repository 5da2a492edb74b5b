"""Fit a :class:`~scoremix.lme.spec.ModelSpec` with R's lme4 (or glmmTMB for dispersion
models) and return a :class:`~scoremix.lme.result.LmerResult`.

The model is the linear mixed model of :mod:`scoremix.lme.spec`,

.. math::

    y = X\\beta + Zb + \\varepsilon,\\quad b \\sim N(0, \\sigma^2\\Lambda_\\theta\\Lambda_\\theta^\\top),
    \\quad \\varepsilon \\sim N(0, \\sigma^2 W^{-1}),

fitted by ``lme4::lmer`` on the same model frame and formula (lme4 builds its own
``X`` and ``Z`` from them, which makes this backend an independent check of scoremix's
formula parser as well as of its optimiser).  With a dispersion formula
(``log \\sigma^2_i = x_{d,i}^\\top\\beta_d``, e.g. ``"~ label"``) the fit is done by
``glmmTMB(formula, dispformula = ...)`` instead (``backend = "glmmTMB"`` in the result).

Paths to R (``via``):

* ``"rpy2"`` (default): in-process through rpy2 (``pip install scoremix[r]``; rpy2 3.5.x,
  since rpy2 3.6 needs R >= 4.5).  Data go to R as plain vectors (no pandas converter).
* ``"subprocess"``: ``Rscript r_scripts/fit_lme4.R`` on a CSV of the model frame.

Both run the same R functions (``r_scripts/fit_lme4.R``), so the JSON is identical.
Without rpy2 / R / lme4 a :class:`~scoremix.lme.backends.rutil.BackendUnavailableError`
says what to install.

``control``: ``None`` (lme4's defaults, which are loose: variance components can be
~3e-4 relative off a tightly converged fit), ``"tight"`` (``nloptwrap`` with
``ftol_abs = 1e-12, xtol_abs = 1e-10``, as the stored references) or a dict
``{"optimizer": "bobyqa", "optCtrl": {...}}`` passed to ``lmerControl``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Literal

from scoremix.lme.backends.rutil import (
    BackendUnavailableError,
    load_rpy2,
    r_dataframe,
    r_script,
    require_r_packages,
    run_rscript,
    source_r,
    write_model_frame,
)
from scoremix.lme.spec import ModelSpec

__all__ = ["fit", "fit_json", "BackendUnavailableError"]

Control = None | str | dict[str, Any]


def _control_parts(control: Control) -> tuple[bool, dict[str, Any] | None]:
    """``(tight, control_dict)`` from the user's ``control``."""
    if control is None:
        return False, None
    if isinstance(control, str):
        if control != "tight":
            raise ValueError(f"control must be None, 'tight' or a dict, got {control!r}")
        return True, None
    if isinstance(control, dict):
        unknown = set(control) - {"optimizer", "optCtrl"}
        if unknown:
            raise ValueError(f"control dict keys must be 'optimizer'/'optCtrl', got {sorted(unknown)}")
        return False, dict(control)
    raise TypeError(f"control must be None, 'tight' or a dict, got {type(control).__name__}")


def _fit_json_rpy2(spec: ModelSpec, REML: bool, control: Control) -> str:
    pkgs = ("lme4", "jsonlite", "glmmTMB") if spec.dispersion_formula else ("lme4", "jsonlite")
    ro = load_rpy2(pkgs)
    source_r(ro, "fit_lme4.R")
    df = r_dataframe(ro, spec)
    if spec.dispersion_formula:
        if control is not None:
            raise ValueError("control is not used by glmmTMB (dispersion models): pass control=None")
        if spec.weights is not None:
            raise ValueError("prior weights with a dispersion formula are not supported by this backend")
        source_r(ro, "fit_glmmtmb.R")
        res = ro.r["smx_fit_glmmtmb_json"](df, spec.formula, spec.dispersion_formula, REML)
        return str(res[0])
    tight, ctl = _control_parts(control)
    kwargs: dict[str, Any] = {"REML": bool(REML), "tight": tight}
    if spec.weights is not None:
        kwargs["weights"] = ro.vectors.FloatVector([float(w) for w in spec.weights])
    if ctl is not None:
        lst = {}
        if "optimizer" in ctl:
            lst["optimizer"] = ro.vectors.StrVector([str(ctl["optimizer"])])
        if "optCtrl" in ctl:
            lst["optCtrl"] = ro.vectors.ListVector(
                {k: ro.vectors.FloatVector([float(v)]) if isinstance(v, (int, float))
                 else ro.vectors.StrVector([str(v)]) for k, v in ctl["optCtrl"].items()})
        kwargs["control"] = ro.vectors.ListVector(lst)
    res = ro.r["smx_fit_lme4_json"](df, spec.formula, **kwargs)
    return str(res[0])


def _fit_json_subprocess(spec: ModelSpec, REML: bool, control: Control,
                         timeout: float | None) -> str:
    pkgs = ("lme4", "jsonlite", "glmmTMB") if spec.dispersion_formula else ("lme4", "jsonlite")
    require_r_packages(pkgs)
    with tempfile.TemporaryDirectory(prefix="scoremix_lme4_") as td:
        folder = Path(td)
        csv, levels, wname = write_model_frame(spec, folder)
        out = folder / "out.json"
        if spec.dispersion_formula:
            if control is not None:
                raise ValueError("control is not used by glmmTMB (dispersion models): pass control=None")
            if wname is not None:
                raise ValueError("prior weights with a dispersion formula are not supported by this backend")
            args = [str(r_script("fit_glmmtmb.R")), str(csv), spec.formula, str(out),
                    f"--disp={spec.dispersion_formula}", f"--levels={levels}"]
        else:
            tight, ctl = _control_parts(control)
            args = [str(r_script("fit_lme4.R")), str(csv), spec.formula, str(out),
                    f"--levels={levels}"]
            if tight:
                args.append("--tight")
            if ctl is not None:
                cpath = folder / "control.json"
                cpath.write_text(json.dumps(ctl))
                args.append(f"--control={cpath}")
            if wname is not None:
                args.append(f"--weights={wname}")
        if not REML:
            args.append("--ml")
        run_rscript(args, timeout=timeout)
        return out.read_text().strip()


def fit_json(spec: ModelSpec, REML: bool = True, control: Control = None,
             via: Literal["rpy2", "subprocess"] = "rpy2", timeout: float | None = None
             ) -> dict[str, Any]:
    """Fit with lme4 (glmmTMB for a dispersion model) and return the raw result dict.

    Parameters
    ----------
    spec:
        the model (its ``formula``, ``data``, ``weights``, ``dispersion_formula`` are used).
    REML:
        REML (True) or maximum likelihood (False).
    control:
        ``None`` (lme4 defaults), ``"tight"`` or ``{"optimizer": ..., "optCtrl": {...}}``.
    via:
        ``"rpy2"`` (in-process) or ``"subprocess"`` (``Rscript``).
    timeout:
        seconds, subprocess path only.

    Returns
    -------
    dict
        the schema of ``docs/lmer-result-schema.md`` plus ``timing_s`` (seconds of the
        ``lmer``/``glmmTMB`` call inside R).
    """
    if via == "rpy2":
        text = _fit_json_rpy2(spec, REML, control)
    elif via == "subprocess":
        text = _fit_json_subprocess(spec, REML, control, timeout)
    else:
        raise ValueError(f"via must be 'rpy2' or 'subprocess', got {via!r}")
    return json.loads(text)


def fit(spec: ModelSpec, REML: bool = True, control: Control = None,
        via: Literal["rpy2", "subprocess"] = "rpy2", timeout: float | None = None) -> Any:
    """Fit ``spec`` with lme4 and return a :class:`~scoremix.lme.result.LmerResult`.

    See :func:`fit_json` for the parameters.  Raises
    :class:`~scoremix.lme.backends.rutil.BackendUnavailableError` (naming what to
    install) when rpy2, R or lme4 is missing.
    """
    from scoremix.lme.result import LmerResult  # noqa: PLC0415  (avoid an import cycle)

    d = fit_json(spec, REML=REML, control=control, via=via, timeout=timeout)
    return LmerResult.from_dict(d, spec)
