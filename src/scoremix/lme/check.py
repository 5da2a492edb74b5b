"""``fit.check()``: the model checks a user can act on, in one object.

* singularity per random term (:func:`scoremix.lme.singularity.re_pca`): a singular term
  can be simplified;
* convergence (:func:`scoremix.lme.singularity.convergence`): gradient and Hessian of the
  profiled criterion; if it fails, compare optimisers with :func:`scoremix.all_fit`;
* simulation-based scaled residuals with uniformity, dispersion and outlier tests, and per
  ``by`` column location (missing term) and spread (variance) tests
  (:mod:`scoremix.lme.scaled_residuals`);
* influential levels (:func:`scoremix.lme.influence.influential_levels`);
* :meth:`ModelCheck.plot`: a ``check_model``-style panel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from scoremix._threads import limits_blas
from scoremix.lme.influence import influential_levels
from scoremix.lme.result import register_inference
from scoremix.lme.scaled_residuals import ScaledResiduals, scaled_residuals
from scoremix.lme.singularity import convergence, re_pca, singularity_advice

__all__ = ["ModelCheck", "check_model"]


@dataclass
class ModelCheck:
    """Result of :func:`check_model`; ``advice`` lists what to do about each failed check."""

    singularity: pd.DataFrame
    convergence: dict
    residuals: ScaledResiduals
    influence: pd.DataFrame
    advice: list[str] = field(default_factory=list)
    alpha: float = 0.05

    @property
    def tests(self) -> pd.DataFrame:
        return self.residuals.tests

    def __repr__(self) -> str:
        lines = ["ModelCheck:"]
        sing = self.singularity.groupby("term")["singular"].first()
        lines.append("  singular terms: " + (", ".join(sing[sing].index) or "none"))
        lines.append(f"  convergence ok: {self.convergence['ok']} (scaled gradient "
                     f"{self.convergence['scaled_grad']:.2g})")
        for r in self.tests.itertuples():
            lines.append(f"  {r.test}: statistic {r.statistic:.4g}, p = {r._3:.3g}")
        if len(self.influence):
            k = int(self.influence["influential"].sum())
            lines.append(f"  influential levels of {self.influence['group'].iloc[0]}: {k}")
        lines += [f"  advice: {a}" for a in self.advice]
        return "\n".join(lines)

    def plot(self, fig=None):
        """A 2 × 3 panel: QQ plot of the scaled residuals against U(0,1), scaled residuals
        against the (rank of the) fitted values, their histogram, normal QQ plot of the
        first term's conditional modes, Cook's distances of the levels, and the random
        terms' principal-component variances."""
        import matplotlib.pyplot as plt
        from scipy import stats
        if fig is None:
            fig = plt.figure(figsize=(13, 7.5))
        ax = fig.subplots(2, 3).ravel()
        r = np.sort(self.residuals.residuals.to_numpy())
        n = r.size
        ax[0].plot((np.arange(1, n + 1) - 0.5) / n, r, ".", ms=3)
        ax[0].plot([0, 1], [0, 1], "r-", lw=1)
        ax[0].set(title="Scaled residuals: QQ vs uniform", xlabel="expected", ylabel="observed")
        fv = self.residuals.fitted.rank(pct=True).to_numpy()
        ax[1].plot(fv, self.residuals.residuals.to_numpy(), ".", ms=3, alpha=0.5)
        for q in (0.25, 0.5, 0.75):
            ax[1].axhline(q, color="r", lw=0.8, ls="--")
        ax[1].set(title="Residual vs predicted (rank)", xlabel="fitted (rank)", ylabel="scaled residual")
        ax[2].hist(self.residuals.residuals.to_numpy(), bins=20, range=(0, 1), color="0.6")
        ax[2].set(title="Scaled residuals (uniform if the model fits)")
        b = getattr(self, "_ranef", None)
        if b is not None and len(b):
            osm, osr = stats.probplot(b, dist="norm", fit=False)
            ax[3].plot(osm, osr, ".", ms=4)
            ax[3].set(title="Conditional modes: normal QQ", xlabel="normal quantile")
        else:
            ax[3].set_axis_off()
        if len(self.influence):
            inf = self.influence.sort_values("level")
            ax[4].bar(range(len(inf)), inf["cooks_d"], color=np.where(inf["influential"], "C3", "C0"))
            ax[4].axhline(4 / len(inf), color="r", lw=0.8, ls="--")
            ax[4].set(title=f"Cook's distance by {inf['group'].iloc[0]}", xlabel="level")
        else:
            ax[4].set_axis_off()
        sp = self.singularity
        if len(sp):
            labels = [f"{t}:{c}" for t, c in zip(sp["term"], sp["component"])]
            ax[5].bar(range(len(sp)), sp["prop_var"], color=np.where(sp["singular"], "C3", "C0"))
            ax[5].set_xticks(range(len(sp)), labels, rotation=45, ha="right", fontsize=7)
            ax[5].set(title="Random-effect PCA (variance share)")
        else:
            ax[5].set_axis_off()
        fig.tight_layout()
        return fig


@limits_blas  # the hot paths' BLAS threads: the same numbers in a worker and in the main process
def check_model(m, *, nsim: int = 250, seed: int | np.random.Generator | None = 0,
                by=(), influence: bool = True,
                max_levels: int = 60, alpha: float = 0.05) -> ModelCheck:
    """Run every check on ``m`` (see the module docstring).

    A GLMM (:class:`scoremix.GlmerResult`) is checked by its own :meth:`check`
    (:mod:`scoremix.glmm.check`: randomised-PIT residuals, dispersion, zero inflation), a
    transformation fit (``transform="monotone"``) on its latent scale
    (:mod:`scoremix.transform.check`)."""
    if hasattr(m, "glmm_data") or getattr(m, "transform", None) is not None:
        return type(m).check(m, nsim=nsim, seed=seed, by=by, influence=influence, alpha=alpha)
    sing = re_pca(m)
    conv = convergence(m)
    res = scaled_residuals(m, nsim, seed=seed, by=by)
    inf = influential_levels(m, max_levels=max_levels) if influence else pd.DataFrame()
    advice = singularity_advice(sing)
    if not conv["ok"]:
        advice.append("convergence checks failed: compare optimisers with scoremix.all_fit(fit); "
                      "rescale covariates")
    for r in res.tests.itertuples():
        if r._3 < alpha:
            if r.test.startswith("uniformity"):
                advice.append("scaled residuals are not uniform: the response distribution or the "
                              "variance model is misspecified (try dispersion= or transform=)")
            elif r.test.startswith("dispersion"):
                advice.append("residual dispersion differs from the model's: check the variance model")
            elif r.test.startswith("outliers"):
                advice.append("more observations outside the simulation envelope than expected")
            elif r.test.startswith("location"):
                advice.append(f"residuals shift with {r.test.split()[2]}: a term is missing")
            elif r.test.startswith("spread"):
                advice.append(f"residual spread differs by {r.test.split()[2]}: add "
                              f"dispersion='~ {r.test.split()[2]}'")
    if len(inf) and inf["influential"].any():
        lv = inf.loc[inf["influential"], "level"].tolist()
        advice.append(f"influential levels of {inf['group'].iloc[0]}: {lv[:5]}; refit without them to "
                      "see whether conclusions change")
    out = ModelCheck(sing, conv, res, inf, advice, alpha)
    if m._b:
        out._ranef = np.asarray(m._b[0])[:, 0]
    return out


register_inference("check", check_model)
