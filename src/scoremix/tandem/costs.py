r"""Cost models of the tandem (ASV + countermeasure) detection cost functions.

Priors :math:`π_\text{tar}, π_\text{non}, π_\text{spoof}` (summing to one) and costs of the
three errors a spoofing-robust speaker verification system can make.

``"asvspoof2019"`` — ASVspoof 2019 evaluation plan (Kinnunen et al. 2018, *t-DCF: a detection
cost function for the tandem assessment of spoofing countermeasures and automatic speaker
verification*, Odyssey): :math:`π_\text{spoof} = 0.05`, :math:`π_\text{tar} = 0.95 \cdot 0.99`,
:math:`π_\text{non} = 0.95 \cdot 0.01`, :math:`C_\text{miss}^\text{asv} = C_\text{miss}^\text{cm}
= 1`, :math:`C_\text{fa}^\text{asv} = C_\text{fa}^\text{cm} = 10`.

``"asvspoof2021"`` — the revised t-DCF of Kinnunen et al. (2020), *Tandem assessment of spoofing
countermeasures and automatic speaker verification: fundamentals*, IEEE/ACM TASLP 28, used by
ASVspoof 2021 and 5: the same priors, tandem costs :math:`C_\text{miss} = 1`,
:math:`C_\text{fa} = 10`, :math:`C_\text{fa,spoof} = 10`.

``"asvspoof5"`` (a-DCF) — Shim et al. (2024), *a-DCF: an architecture agnostic metric with
application to spoofing-robust speaker verification*, Odyssey; the ASVspoof 5 evaluation
package default: :math:`π_\text{tar} = 0.9`, :math:`π_\text{non} = 0.05`,
:math:`π_\text{spoof} = 0.05`, :math:`C_\text{miss} = 1`, :math:`C_\text{fa,non} = 10`,
:math:`C_\text{fa,spoof} = 20`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = ["ADCF_COST_MODELS", "TDCF_COST_MODELS", "TandemCostModel", "resolve_cost_model"]


@dataclass(frozen=True)
class TandemCostModel:
    """Priors and costs of a tandem cost function (``revision``: ``"2019"``, ``"2021"`` or ``"adcf"``)."""

    name: str
    revision: str
    p_tar: float
    p_non: float
    p_spoof: float
    c_miss: float = 1.0       # tandem (2021, a-DCF) or ASV (2019) miss
    c_fa: float = 10.0        # false acceptance of a nontarget (ASV in 2019)
    c_fa_spoof: float = 10.0  # false acceptance of a spoof (CM in 2019)
    c_miss_cm: float = 1.0    # 2019 only: CM rejects a bona fide target

    def __post_init__(self) -> None:
        from scoremix.tandem.errors import TandemInputError as MetricInputError

        for k in ("p_tar", "p_non", "p_spoof", "c_miss", "c_fa", "c_fa_spoof", "c_miss_cm"):
            if getattr(self, k) < 0:
                raise MetricInputError(f"cost model {self.name!r}: {k} must be >= 0, got {getattr(self, k)}")
        if abs(self.p_tar + self.p_non + self.p_spoof - 1.0) > 1e-10:
            raise MetricInputError(f"cost model {self.name!r}: priors must sum to 1, got "
                                   f"{self.p_tar} + {self.p_non} + {self.p_spoof}")
        if self.revision not in ("2019", "2021", "adcf"):
            raise MetricInputError(f"cost model revision must be '2019', '2021' or 'adcf', got {self.revision!r}")


_PS = 0.05
TDCF_COST_MODELS: dict[str, TandemCostModel] = {
    "asvspoof2019": TandemCostModel("asvspoof2019", "2019", (1 - _PS) * 0.99, (1 - _PS) * 0.01, _PS,
                                    c_miss=1.0, c_fa=10.0, c_fa_spoof=10.0, c_miss_cm=1.0),
    "asvspoof2021": TandemCostModel("asvspoof2021", "2021", (1 - _PS) * 0.99, (1 - _PS) * 0.01, _PS,
                                    c_miss=1.0, c_fa=10.0, c_fa_spoof=10.0),
}
ADCF_COST_MODELS: dict[str, TandemCostModel] = {
    "asvspoof5": TandemCostModel("asvspoof5", "adcf", 0.9, 0.05, 0.05, c_miss=1.0, c_fa=10.0, c_fa_spoof=20.0),
}


def resolve_cost_model(cost_model: Any, table: dict[str, TandemCostModel], **overrides: float) -> TandemCostModel:
    """A named cost model of ``table``, or a :class:`TandemCostModel` as given; ``overrides`` replace fields."""
    from scoremix.tandem.errors import TandemInputError as MetricInputError

    if isinstance(cost_model, TandemCostModel):
        cm = cost_model
    elif isinstance(cost_model, str) and cost_model in table:
        cm = table[cost_model]
    else:
        raise MetricInputError(f"cost_model must be one of {sorted(table)} or a TandemCostModel, got {cost_model!r}")
    return replace(cm, **overrides) if overrides else cm
