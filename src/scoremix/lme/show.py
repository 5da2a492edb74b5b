"""Printing of fitted linear mixed models, apart from the results (as MixedModels.jl's
``mimeshow.jl``): :func:`summary_text` is lme4's ``print(summary(m))`` (lmerTest's with a
``df`` column) of any result with :class:`~scoremix.lme.result.LmerResult`'s attributes.
It reads the result and computes nothing."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.lme.covstruct import STRUCTURE_LABEL

__all__ = ["summary_text", "random_effect_rows"]


def _fmt_table(rows: list[list[str]], header: list[str], align_left: Sequence[int] = (0,)) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = []
    for r in [header] + rows:
        cells = [str(c).ljust(w) if i in align_left else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        lines.append(" " + " ".join(cells).rstrip())
    return "\n".join(lines)


def summary_text(m: Any, coefs: pd.DataFrame | None = None,
                  ddf: str | None = None) -> str:
    out = []
    kind = "REML" if m.REML else "maximum likelihood "
    if coefs is None:
        out.append(f"Linear mixed model fit by {kind} ['lmerMod', backend {m.backend}]")
    else:
        out.append(f"Linear mixed model fit by {kind}. t-tests use {ddf}'s method "
                   f"['lmerModLmerTest', backend {m.backend}]")
    out.append(f"Formula: {m.formula}")
    if m.dispersion:
        out.append(f"Dispersion: {m.dispersion}")
    out.append("")
    if m.REML and m.converged:
        out.append(f"REML criterion at convergence: {m.reml_criterion:.1f}")
    elif m.REML:
        out.append(f"REML criterion (optimizer did NOT converge): {m.reml_criterion:.1f}")
    else:
        df_resid = m.nobs - m.npar
        out.append(_fmt_table([[f"{m.aic:.1f}", f"{m.bic:.1f}", f"{m.loglik:.1f}",
                                 f"{m.deviance:.1f}", str(df_resid)]],
                                ["AIC", "BIC", "logLik", "deviance", "df.resid"], align_left=()))
    out.append("")
    if m.spec is not None:
        w = np.ones(m.nobs) if m.spec.weights is None else np.asarray(m.spec.weights, float)
        scale = np.full(m.nobs, m.sigma)
        if m.sigma_by is not None and m.spec.dispersion_codes is not None:
            scale = m.sigma_by.to_numpy()[np.asarray(m.spec.dispersion_codes)]
        sr = m.residuals.to_numpy() * np.sqrt(w) / scale
        q = np.quantile(sr, [0, 0.25, 0.5, 0.75, 1])
        out.append("Scaled residuals: ")
        out.append(_fmt_table([[f"{v:.4f}" for v in q]], ["Min", "1Q", "Median", "3Q", "Max"],
                              align_left=()))
        out.append("")
    out.append("Random effects:")
    rows = []
    structures = ([getattr(t, "structure", "us") for t in m.spec.terms] if m.spec is not None
                  else ["us"] * len(m.terms_info))
    for t, S, st in zip(m.terms_info, m.cov_re(), structures):
        rows += random_effect_rows(t["group"], list(t["term_names"]), S, st)
    # lme4 prints one correlation column per column of the widest term; rows of narrower
    # terms (and of one-column terms beside multi-column ones) are padded with blanks
    ncor = max((len(r) - 4 for r in rows), default=0)
    rows = [r + [""] * (4 + ncor - len(r)) for r in rows]
    resid_name = "Residual"
    if m.sigma_by is not None:
        for lev, s in m.sigma_by.items():
            rows.append([resid_name, str(lev), f"{s ** 2:.4g}", f"{s:.4g}"] + [""] * ncor)
            resid_name = ""
    else:
        rows.append(["Residual", "", f"{m.sigma ** 2:.4g}", f"{m.sigma:.4g}"] + [""] * ncor)
    header = ["Groups", "Name", "Variance", "Std.Dev."] + (["Corr"] + [""] * (ncor - 1) if ncor else [])
    out.append(_fmt_table(rows, header, align_left=(0, 1)))
    grp = ", ".join(f"{g}, {n}" for g, n in m.ngrps.items())
    out.append(f"Number of obs: {m.nobs}, groups:  {grp}")
    out.append("")
    out.append("Fixed effects:")
    if coefs is None:
        fe = [[k, f"{b:.4g}", f"{s:.4g}", f"{t:.3f}"]
              for (k, b), s, t in zip(m.fixef.items(), m.se, m.tvalues)]
        out.append(_fmt_table(fe, ["", "Estimate", "Std. Error", "t value"]))
    else:
        out.extend(_coef_lines(coefs))
    out.extend(fixef_correlation_lines(m))
    if m.singular:
        out.append("optimizer: boundary (singular) fit: see help('isSingular')")
    msgs = m.fit_info.get("messages") or []
    for msg in msgs:
        out.append(f"convergence: {msg}")
    if not m.converged and not msgs:
        out.append("convergence: the optimizer did NOT converge")
    return "\n".join(out)


def random_effect_rows(group: str, names: list[str], S: np.ndarray,
                       structure: str = "us") -> list[list[str]]:
    """Rows ``[Groups, Name, Variance, Std.Dev., Corr…]`` of one random term.

    Unstructured terms: lme4's lower triangle of correlations.  lme4 2.0's ``cs()``/``ar1()``
    terms are printed as lme4 2.0 and glmmTMB print them (``reformulas::formatVC``): one
    correlation, tagged with the structure (``0.53 (ar1)``, ``(cs)``, ``(homcs)``,
    ``(hetar1)``), and one row only when the variances are homogeneous."""
    sd = np.sqrt(np.diag(S))
    p = len(names)
    if structure != "us" and p > 1:
        c = S[1, 0] / (sd[1] * sd[0]) if sd[0] > 0 and sd[1] > 0 else float("nan")
        if structure.startswith("cs") and sd.min() > 0:
            c = float(np.mean((S / np.outer(sd, sd))[np.tril_indices(p, -1)]))
        tag = f"{c:.2f} ({STRUCTURE_LABEL.get(structure, structure)})"
        n_rows = 1 if structure in ("cs_hom", "ar1") else p
        return [[group if i == 0 else "", names[i], f"{S[i, i]:.4g}", f"{sd[i]:.4g}"]
                + ([tag] if i == 0 else []) for i in range(n_rows)]
    rows = []
    for i, nm in enumerate(names):
        cors = []
        for j in range(i):
            c = S[i, j] / (sd[i] * sd[j]) if sd[i] > 0 and sd[j] > 0 else float("nan")
            cors.append(f"{c:.2f}")
        rows.append([group if i == 0 else "", nm, f"{S[i, i]:.4g}", f"{sd[i]:.4g}"] + cors)
    return rows


def _format_p(p: float) -> str:
    """R's ``format.pval`` as ``printCoefmat`` uses it: ``< 2e-16`` below machine
    precision, 3 significant digits otherwise."""
    if not np.isfinite(p):
        return "NA"
    if p < 2.2e-16:
        return "< 2e-16"
    return f"{p:.3g}" if p >= 1e-4 else f"{p:.2e}"


def _signif_stars(p: float) -> str:
    if not np.isfinite(p):
        return ""
    for cut, star in ((0.001, "***"), (0.01, "**"), (0.05, "*"), (0.1, ".")):
        if p < cut:
            return star
    return ""


def _coef_lines(coefs: pd.DataFrame) -> list[str]:
    """lmerTest's fixed-effects table (``printCoefmat`` with significance stars)."""
    rows = [[k, f"{r['Estimate']:.4g}", f"{r['Std. Error']:.4g}", f"{r['df']:.4g}",
             f"{r['t value']:.3f}", _format_p(r["Pr(>|t|)"]), _signif_stars(r["Pr(>|t|)"])]
            for k, r in coefs.iterrows()]
    lines = [_fmt_table(rows, ["", "Estimate", "Std. Error", "df", "t value", "Pr(>|t|)", ""],
                        align_left=(0, 6))]
    lines.append("---")
    lines.append("Signif. codes:  0 '***' 0.001 '**' 0.01 '*' 0.05 '.' 0.1 ' ' 1")
    return lines


def fixef_correlation_lines(m: Any) -> list[str]:
    """lme4's "Correlation of Fixed Effects" block (lower triangle, abbreviated column names) of a
    fit with ``fixef`` and ``vcov``; no lines for a single fixed effect."""
    if len(m.fixef) <= 1:
        return []
    V = m.vcov.to_numpy()
    sd = np.sqrt(np.diag(V))
    C = V / np.outer(sd, sd)
    short = [_abbrev(k) for k in m.fixef.index]
    rows = [[m.fixef.index[i]] + [f"{C[i, j]:.3f}" for j in range(i)] + [""] * (len(short) - 1 - i)
            for i in range(1, len(short))]
    return ["", "Correlation of Fixed Effects:", _fmt_table(rows, [""] + short[:-1])]


def _abbrev(name: str) -> str:
    """R's ``abbreviate(name, 6)``-like short label for the correlation table."""
    if len(name) <= 6:
        return name
    core = name.replace("(", "").replace(")", "")
    keep = core[0] + "".join(c for c in core[1:] if c.lower() not in "aeiou")
    return ("(" + keep[:4] + ")") if name.startswith("(") else keep[:6]
