"""The specification of a location-scale score model: a plain, serialisable data object.

It names the columns and which random components are present; the same object can be
handed to another engine (e.g. a Bayesian one) through :meth:`LocScaleSpec.to_dict` and
:meth:`LocScaleSpec.formulas`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["LocScaleSpec"]


@dataclass(frozen=True)
class LocScaleSpec:
    """What a location-scale transformation mixed model contains.

    Attributes
    ----------
    score, label, speaker:
        columns of the trial table.
    positive:
        the positive class value (``None``: a known vocabulary, see
        :func:`scoremix.trials.label_to_binary`).
    strata:
        factors whose levels (within each class) get their own transform :math:`h_s`
        (e.g. ``("attack",)``); the class always stratifies.
    speaker_location:
        per-speaker location effect per class, ``(0 + label | speaker)``.
    speaker_scale:
        classes (``"positive"``, ``"negative"``) with a per-speaker log-SD effect
        (``dispersion = ~ (0 + label | speaker)``).
    correlated:
        classes whose speaker location and log-SD effects are correlated.
    speaker_by_stratum:
        classes with a speaker × stratum location effect ``(1 | speaker:stratum)``.
    heavy_tailed_scale:
        classes whose speaker log-SD effects follow a scaled Student t (degrees of freedom
        estimated) instead of a Gaussian (not with ``correlated``).
    failure_quantile:
        ``None`` (default) or :math:`q` of a per-speaker failure mixture
        (:mod:`scoremix.locscale.failure`): trials beyond the other class's pooled
        q-quantile (and the own class's (1−q)-tail) are failures with a speaker × stratum
        share (pooled stratum share × a zero-inflated gamma speaker multiplier) and a pooled
        failure distribution per class (or per stratum: ``failure_min_count``).
    failure_min_count:
        ``None`` (default): one failure distribution per class; ``m``: a core stratum with at
        least ``m`` fitted failures gets a failure distribution of its own
        (:func:`scoremix.locscale.failure.own_failure_keys`; s6failure).
    failure_share:
        how a speaker's failure multiplier :math:`r_{ic}` is summarised: its posterior
        ``"mean"`` or ``"median"`` (:func:`scoremix.locscale.failure.multiplier_quantile`;
        s8speaker).
    covariates:
        columns entering the latent location per class, :math:`x_t^\\top\\beta_c` (``label ×
        covariate``; :mod:`scoremix.locscale.covariates`).
    transform:
        ``True``: one estimated transform per stratum (the latent scale); ``False``: the
        Gaussian location-scale mixed model on the scores themselves (one pass, no transform).
    """

    score: str = "score"
    label: str = "label"
    speaker: str = "speaker"
    positive: Any = None
    strata: tuple[str, ...] = ()
    speaker_location: bool = True
    speaker_scale: tuple[str, ...] = ("positive", "negative")
    correlated: tuple[str, ...] = ()
    speaker_by_stratum: tuple[str, ...] = ()
    heavy_tailed_scale: tuple[str, ...] = ()
    failure_quantile: float | None = None
    failure_min_count: int | None = None   # s6failure: per-stratum failure distributions
    failure_share: str = "mean"            # s8speaker: speaker multiplier's posterior "mean" or "median"
    transform: bool = True
    covariates: tuple[str, ...] = ()  # s5trust-auto: per-class location terms
    name: str = field(default="", compare=False)

    def with_(self, **kw: Any) -> "LocScaleSpec":
        """A copy with some fields replaced."""
        return replace(self, **kw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["strata"] = list(self.strata)
        for k in ("speaker_scale", "correlated", "speaker_by_stratum", "heavy_tailed_scale", "covariates"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LocScaleSpec":
        d = dict(d)
        for k in ("strata", "speaker_scale", "correlated", "speaker_by_stratum", "heavy_tailed_scale", "covariates"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)

    def formulas(self) -> dict[str, str]:
        """lme4/glmmTMB-style formulas of the model on the latent scale ``h_s(score)``."""
        strat = " × ".join([self.label, *self.strata])
        lhs = f"h_s({self.score})" if self.transform else self.score
        loc = [f"{lhs} ~ 0 + stratum[{strat}]"]
        if self.covariates:
            loc.append(f"{self.label}:({' + '.join(self.covariates)})")
        if self.speaker_location:
            loc.append(f"(0 + {self.label} | {self.speaker})")
        if self.speaker_by_stratum:
            loc.append(f"(1 | {self.speaker}:stratum) [{', '.join(self.speaker_by_stratum)}]")
        disp = ["~ 0 + stratum"]
        if self.speaker_scale:
            corr = f" correlated with location [{', '.join(self.correlated)}]" if self.correlated else ""
            tail = f", Student-t [{', '.join(self.heavy_tailed_scale)}]" if self.heavy_tailed_scale else ""
            disp.append(f"(0 + {self.label} | {self.speaker}) [{', '.join(self.speaker_scale)}]{corr}{tail}")
        out = {"formula": " + ".join(loc), "dispersion": " + ".join(disp)}
        if self.failure_quantile is not None:
            out["formula"] = (f"(1 - pi[{self.speaker}:stratum]) * [{out['formula']}] + pi * G_" + ("class" if self.failure_min_count is None else
                                                                     f"stratum[>= {self.failure_min_count} failures]") + " "
                              f"[failures beyond the other class's {self.failure_quantile:g} quantile]")
        return out

    def describe(self) -> str:
        f = self.formulas()
        return f"{f['formula']};  dispersion {f['dispersion']}"
