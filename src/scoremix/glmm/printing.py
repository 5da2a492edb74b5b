"""``GlmerResult.summary()``: the text of lme4's ``summary(glmer(...))``."""

from __future__ import annotations

import numpy as np

from scoremix.lme.show import (_fmt_table, _format_p, _signif_stars, fixef_correlation_lines,
                               random_effect_rows)

__all__ = ["summary_text"]


def _coef_lines(coefs) -> list[str]:
    """``printCoefmat`` of the z tests with significance stars."""
    rows = [[k, f"{r['Estimate']:.4g}", f"{r['Std. Error']:.4g}", f"{r['z value']:.3f}",
             _format_p(r["Pr(>|z|)"]), _signif_stars(r["Pr(>|z|)"])] for k, r in coefs.iterrows()]
    return [_fmt_table(rows, ["", "Estimate", "Std. Error", "z value", "Pr(>|z|)", ""],
                       align_left=(0, 5)),
            "---", "Signif. codes:  0 '***' 0.001 '**' 0.01 '*' 0.05 '.' 0.1 ' ' 1"]


def _pearson_residuals(m) -> np.ndarray:
    d = m.glmm_data
    mu = m.fitted().to_numpy()
    return (d.y - mu) * np.sqrt(d.wt / d.family.variance(mu))


def summary_text(m) -> str:
    out = []
    approx = ("Laplace Approximation" if m.nAGQ == 1 else
              f"Adaptive Gauss-Hermite Quadrature (nAGQ = {m.nAGQ})" if m.nAGQ > 1 else
              "Laplace Approximation (nAGQ = 0: fixed effects from PIRLS)")
    out.append(f"Generalized linear mixed model fit by maximum likelihood ({approx}) "
               f"['glmerMod', backend {m.backend}]")
    out.append(f" Family: {m.family.name}  ( {m.family.link.name} )")
    out.append(f"Formula: {m.formula}")
    out.append("")
    out.append(_fmt_table([[f"{m.aic:.1f}", f"{m.bic:.1f}", f"{m.loglik:.1f}",
                             f"{m.deviance:.1f}", str(m.nobs - m.npar)]],
                          ["AIC", "BIC", "logLik", "deviance", "df.resid"], align_left=()))
    out.append("")
    if m.glmm_data is not None:
        q = np.quantile(_pearson_residuals(m), [0, 0.25, 0.5, 0.75, 1])
        out.append("Scaled residuals: ")
        out.append(_fmt_table([[f"{v:.4f}" for v in q]], ["Min", "1Q", "Median", "3Q", "Max"],
                              align_left=()))
        out.append("")
    out.append("Random effects:")
    rows = []
    for t, S in zip(m.spec.terms, m.cov_re):
        rows += random_effect_rows(t.group, list(t.term_names), S, getattr(t, "structure", "us"))
    ncor = max((len(r) - 4 for r in rows), default=0)
    rows = [r + [""] * (4 + ncor - len(r)) for r in rows]
    header = ["Groups", "Name", "Variance", "Std.Dev."] + (["Corr"] + [""] * (ncor - 1) if ncor else [])
    out.append(_fmt_table(rows, header, align_left=(0, 1)))
    grp = ", ".join(f"{g}, {n}" for g, n in m.spec.ngrps().items())
    out.append(f"Number of obs: {m.nobs}, groups:  {grp}")
    out.append("")
    out.append("Fixed effects:")
    out.extend(_coef_lines(m.coef_table()))
    out.extend(fixef_correlation_lines(m))
    if m.singular:
        out.append("optimizer: boundary (singular) fit: see help('isSingular')")
    for msg in m.messages:
        out.append(f"convergence: {msg}")
    return "\n".join(out)
