"""Simulated data for the location-scale tests (shared with r_scripts/locscale_glmmtmb.R's input)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def simulate_ls(n_speakers: int = 40, n_per_cell: int = 30, strata_neg: int = 3, tau_b=(0.6, 0.5),
                tau_g=(0.3, 0.4), omega: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """Gaussian location-scale trials: class c, speaker i, stratum s:
    ``score = mu_s + b_ic + u_is + sd_s * exp(g_ic) * eps`` (positive class: one stratum)."""
    rng = np.random.default_rng(seed)
    rows = []
    mu = {"bonafide": 3.0, **{f"A{k}": -1.0 - 0.5 * k for k in range(strata_neg)}}
    sd = {"bonafide": 1.0, **{f"A{k}": 0.8 + 0.2 * k for k in range(strata_neg)}}
    for i in range(n_speakers):
        for c, lab, strata in ((1, "bonafide", ["bonafide"]), (0, "spoof", [f"A{k}" for k in range(strata_neg)])):
            b = rng.normal(0, tau_b[c])
            g = rng.normal(0, tau_g[c])
            for s in strata:
                u = rng.normal(0, omega) if c == 0 else 0.0
                n = n_per_cell
                z = mu[s] + b + u + sd[s] * np.exp(g) * rng.standard_normal(n)
                rows.append(pd.DataFrame({"speaker": f"s{i:02d}", "label": lab, "attack": s, "score": z}))
    return pd.concat(rows, ignore_index=True)
