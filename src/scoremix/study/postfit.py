"""After the fit, in a study: the ``[analyses.contrasts]`` table (marginal means and their
contrasts, :func:`scoremix.emmeans` / :func:`scoremix.contrast`) and the model-checks panel
(:func:`scoremix.check_model`) of every frequentist fit (a transformation fit's on its latent
scale) and the posterior checks (:func:`scoremix.bayes.model_check.bayes_check`: sampler
diagnostics, posterior predictive p-values; ``nsim`` replicate draws per chain) of every
Bayesian fit.

TOML::

    [analyses.contrasts]
    specs = ["attack", "speaker_gender | label"]   # one emmeans call each ("A" or "A | B")
    by = []                       # extra by factors for every spec
    method = "pairwise"           # pairwise, revpairwise, trt.vs.ctrl, eff, consec, poly
    adjust = "tukey"              # default: emmeans's default for the method
    lmer_df = "satterthwaite"     # or "kenward-roger", "asymptotic"
    weights = "equal"             # equal, proportional, outer, cells, flat
    level = 0.95
    models = ["m1"]               # default: every frequentist model

    [analyses.checks]             # optional: the panel is on for every fit
    enabled = true
    nsim = 100                    # simulations of the scaled residuals
    influence = false             # influential levels (one refit per level: slow)
    seed = 0

Outputs: ``emmeans.csv`` and ``contrasts.csv`` (model, system, spec, then emmeans's columns),
``model_checks.csv`` (one row per fit and check), and a "Contrasts" and a "Model checks"
section of the report (the ``check_model`` panel per fit, its advice).

Data flow: :func:`parse_contrasts` / :func:`parse_checks` (config) → :func:`postfit_outputs`
(tasks, on the fitted model) → :func:`write_postfit` (runner) → :func:`postfit_sections` (report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["ContrastsConfig", "ChecksConfig", "parse_contrasts", "parse_checks", "postfit_outputs",
           "write_postfit", "postfit_sections", "POSTFIT_FILES"]

POSTFIT_FILES = {
    "emmeans.csv": "estimated marginal means of [analyses.contrasts] (emmeans's columns)",
    "contrasts.csv": "contrasts of the marginal means with adjusted p-values and simultaneous intervals",
    "model_checks.csv": "model checks of every fit: singularity, convergence, scaled-residual tests; "
                        "Bayesian fits: R-hat, ESS, divergences, posterior predictive p-values",
}


@dataclass
class ContrastsConfig:
    """``[analyses.contrasts]`` (see the module docstring)."""

    specs: list[str] = field(default_factory=list)
    by: list[str] = field(default_factory=list)
    method: str = "pairwise"
    adjust: str | None = None
    lmer_df: str = "satterthwaite"
    weights: str = "equal"
    level: float = 0.95
    models: list[str] = field(default_factory=list)


@dataclass
class ChecksConfig:
    """``[analyses.checks]``: the model-checks panel (on by default)."""

    enabled: bool = True
    nsim: int = 100
    influence: bool = False
    seed: int = 0


def parse_contrasts(s: Any, freq: list[str], names: list[str],
                    formulas: dict[str, str] | None = None) -> ContrastsConfig:
    """Read ``[analyses.contrasts]`` from a config reader ``s`` (``study.config._Reader``, passed
    in by the config parser: this module does not import the config module)."""
    from scoremix.emm.adjust import ADJUST
    from scoremix.emm.basis import LMER_DF
    from scoremix.emm.contrast import METHODS
    from scoremix.emm.means import WEIGHTS

    c = ContrastsConfig()
    c.specs = s.strlist("specs")
    if not c.specs:
        raise s.err("specs", "is required: the factor(s) whose marginal means are contrasted, e.g. [\"attack\"]")
    c.by = s.strlist("by")
    c.method = s.str("method", "pairwise", choices=METHODS) or "pairwise"
    c.adjust = s.str("adjust", None, choices=ADJUST)
    c.lmer_df = s.str("lmer_df", "satterthwaite", choices=LMER_DF) or "satterthwaite"
    c.weights = s.str("weights", "equal", choices=WEIGHTS) or "equal"
    c.level = s.float("level", 0.95, 0.0, 1.0, open_lo=True, open_hi=True) or 0.95
    c.models = s.strlist("models", freq)
    for i, n in enumerate(c.models):
        if n not in freq:
            raise s.err(f"models[{i}]", f"no frequentist model named {n!r} (models: {names}; "
                        f"frequentist: {freq})")
    from scoremix.emm.means import parse_specs
    from scoremix.lme.formula import parse_formula
    for n in c.models:
        if formulas is None or n not in formulas:
            continue
        fixed = {col for v in parse_formula(formulas[n]).fixed.variables for col in v.columns}
        for i, spec in enumerate(c.specs):
            sp, by = parse_specs(spec, c.by)
            bad = [v for v in sp + by if v not in fixed]
            if bad:
                raise s.err(f"specs[{i}]", f"{bad} not among the fixed-effect predictors of model {n!r} "
                            f"({sorted(fixed)})")
    s.finish()
    return c


def parse_checks(s: Any) -> ChecksConfig:
    """Read ``[analyses.checks]``."""
    c = ChecksConfig()
    c.enabled = s.bool("enabled", True)
    c.nsim = s.int("nsim", 100, minimum=10) or 100
    c.influence = s.bool("influence", False)
    c.seed = s.int("seed", 0) or 0
    s.finish()
    return c


# ----------------------------------------------------------------------------- tasks
def _checks_table(chk: Any) -> pd.DataFrame:
    rows = []
    sing = chk.singularity
    for term, g in sing.groupby("term", sort=False):
        rows.append({"check": f"singularity ({term})", "statistic": float(g["prop_var"].min()),
                     "p.value": float("nan"), "ok": not bool(g["singular"].iloc[0])})
    conv = chk.convergence
    rows.append({"check": "convergence (scaled gradient)", "statistic": float(conv["scaled_grad"]),
                 "p.value": float("nan"), "ok": bool(conv["ok"])})
    for _, r in chk.tests.iterrows():
        p = float(r["p.value"])
        rows.append({"check": str(r["test"]), "statistic": float(r["statistic"]), "p.value": p,
                     "ok": bool(p >= chk.alpha)})
    if len(chk.influence):
        k = int(chk.influence["influential"].sum())
        rows.append({"check": f"influential levels ({chk.influence['group'].iloc[0]})", "statistic": float(k),
                     "p.value": float("nan"), "ok": k == 0})
    return pd.DataFrame(rows, columns=["check", "statistic", "p.value", "ok"])


def postfit_outputs(fit: Any, model: Any, contrasts: ContrastsConfig | None,
                    checks: ChecksConfig | None) -> dict[str, Any]:
    """``emmeans``/``contrasts`` tables (when ``model`` is among ``contrasts.models``) and the
    ``checks`` table, advice and panel PNG of one frequentist fit.  A failing step records
    its error (``postfit_errors``) instead of failing the model."""
    from scoremix.emm import contrast, emmeans
    from scoremix.report_html import figure_to_png

    out: dict[str, Any] = {}
    errors: list[str] = []
    if contrasts is not None and model.name in contrasts.models:
        em, co = [], []
        for spec in contrasts.specs:
            try:
                e = emmeans(fit, spec, by=contrasts.by or None, weights=contrasts.weights,
                            lmer_df=contrasts.lmer_df, level=contrasts.level)
                c = contrast(e, contrasts.method, adjust=contrasts.adjust)
                s = c.summary()
                ci = c.confint()
                for col in ci.columns:
                    if col.endswith("CL"):
                        s[col] = ci[col].to_numpy()
                es = e.summary()
                es.insert(0, "spec", spec)
                s.insert(0, "spec", spec)
                s.insert(1, "adjust", c.adjust)
                em.append(es)
                co.append(s)
            except Exception as exc:  # noqa: BLE001 - reported in the section, never fails the model
                errors.append(f"contrasts {spec!r}: {type(exc).__name__}: {' '.join(str(exc).split())}")
        if em:
            out["emmeans"] = pd.concat(em, ignore_index=True)
            out["contrasts"] = pd.concat(co, ignore_index=True)
    cc = checks if checks is not None else ChecksConfig()
    if cc.enabled and hasattr(fit, "idata"):  # s5postfit2: a posterior fit's checks panel
        from scoremix.bayes.model_check import bayes_check
        try:
            bchk = bayes_check(fit, n_draws=cc.nsim, seed=cc.seed)
            out["checks"] = bchk.table
            out["checks_advice"] = list(bchk.advice) + list(bchk.notes)
            import matplotlib.pyplot as plt
            fig = bchk.plot()
            out["checks_png"] = figure_to_png(fig)
            plt.close(fig)
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is reported, never fails the model
            errors.append(f"checks: {type(exc).__name__}: {' '.join(str(exc).split())}")
    elif cc.enabled:
        from scoremix.lme.check import check_model
        try:
            chk = check_model(fit, nsim=cc.nsim, seed=cc.seed, influence=cc.influence)
            out["checks"] = _checks_table(chk)
            out["checks_advice"] = list(chk.advice)
            import matplotlib.pyplot as plt
            fig = chk.plot()
            out["checks_png"] = figure_to_png(fig)
            plt.close(fig)
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is reported, never fails the model
            errors.append(f"checks: {type(exc).__name__}: {' '.join(str(exc).split())}")
    if errors:
        out["postfit_errors"] = errors
    return out


# ----------------------------------------------------------------------------- runner
def _ids(m: dict[str, Any], tab: pd.DataFrame) -> pd.DataFrame:
    t = tab.copy()
    t.insert(0, "system", m["system"])
    t.insert(0, "model", m["model"])
    return t


def write_postfit(res: Any, write_csv: Any) -> None:
    """Write ``emmeans.csv``, ``contrasts.csv`` and ``model_checks.csv`` of the fits in
    ``res.models`` with the runner's ``write_csv(res, name, df)``."""
    for key, name in (("emmeans", "emmeans.csv"), ("contrasts", "contrasts.csv"), ("checks", "model_checks.csv")):
        tabs = [_ids(m, m[key]) for m in res.models if m.get(key) is not None]
        if tabs:
            write_csv(res, name, pd.concat(tabs, ignore_index=True))
            res.descriptions.setdefault(name, POSTFIT_FILES[name])


# ----------------------------------------------------------------------------- report
def postfit_sections(res: Any) -> list[Any]:
    """The report's "Contrasts" and "Model checks" sections (empty list when nothing ran)."""
    from scoremix import report_html as rh

    out = []
    def errs(m: dict[str, Any], kind: str) -> list[str]:
        return [e for e in m.get("postfit_errors", []) if e.startswith(kind)]

    con = [m for m in res.models if m.get("contrasts") is not None or errs(m, "contrasts")]
    cfg = getattr(res.config.analyses, "contrasts", None)
    if con and cfg is not None:
        blocks: list[Any] = [rh.Paragraph(
            f"Estimated marginal means (emmeans's reference grid, {cfg.weights} weights, "
            f"{cfg.lmer_df} df) and their {cfg.method} contrasts"
            f"{'' if cfg.adjust is None else f' ({cfg.adjust} adjustment)'}"
            f"{f' by {cfg.by}' if cfg.by else ''}; intervals are simultaneous at {100 * cfg.level:g} % "
            "with the same adjustment. Means of a transformation model are on its latent scale.")]
        for m in con:
            if m.get("contrasts") is not None:
                blocks.append(rh.Table(m["emmeans"], caption=f"{m['model']} / {m['system']}: marginal means"))
                blocks.append(rh.Table(m["contrasts"], caption=f"{m['model']} / {m['system']}: contrasts"))
            for e in errs(m, "contrasts"):
                blocks.append(rh.Paragraph(f"{m['model']} / {m['system']}: not computed — {e}"))
        out.append(rh.Section("Contrasts", blocks))
    chk = [m for m in res.models if m.get("checks") is not None or errs(m, "checks")]
    if chk:
        blocks = [rh.Paragraph(
            "Per fit: singularity of every random term (rePCA), convergence (scaled gradient), "
            "simulation-based scaled residuals (DHARMa-style: uniformity, dispersion and outlier tests; "
            "a transformation fit's on its latent scale) and the check_model panel; for a Bayesian fit "
            "the sampler diagnostics (R-hat, ESS, divergences) and posterior predictive p-values of the "
            "scores' mean, SD, skewness, tail quantiles and extremes, with the predictive-check plot; "
            "'advice' says what to do about each failed check.")]
        for m in chk:
            if m.get("checks") is not None:
                blocks.append(rh.Table(m["checks"], caption=f"{m['model']} / {m['system']}: model checks"))
                adv = m.get("checks_advice") or []
                blocks.append(rh.Paragraph("Advice: " + ("; ".join(adv) if adv else "none (every check passed)")))
            for e in errs(m, "checks"):
                blocks.append(rh.Paragraph(f"{m['model']} / {m['system']}: not computed — {e}"))
            if m.get("checks_png") is not None:
                blocks.append(rh.Figure(m["checks_png"], caption=f"{m['model']} / {m['system']}: check panel",
                                        alt="model check panel"))
        out.append(rh.Section("Model checks", blocks))
    return out
