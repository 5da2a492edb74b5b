"""Seeded data sets shared by the transformation-model tests and r_scripts/make_transform_refs.py."""

from __future__ import annotations

import numpy as np
import pandas as pd


def binned_data(n: int = 400, n_bins: int = 7, n_speakers: int = 12, seed: int = 7,
                speaker_sd: float = 0.0) -> pd.DataFrame:
    """Latent ``z = 1.2·spoof + b_speaker + ε`` (SD 1 / 1.5 for bona fide / spoof), cut into
    ``n_bins`` ordered bins at pooled quantiles; column ``bin`` is 1..n_bins."""
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, n_speakers, n)
    spoof = rng.random(n) < 0.5
    b = rng.normal(0, speaker_sd, n_speakers) if speaker_sd > 0 else np.zeros(n_speakers)
    z = 1.2 * spoof + b[spk] + rng.normal(0, 1, n) * np.where(spoof, 1.5, 1.0)
    cuts = np.quantile(z, np.linspace(0, 1, n_bins + 1)[1:-1])
    return pd.DataFrame(dict(bin=np.searchsorted(cuts, z) + 1,
                             label=np.where(spoof, "spoof", "bonafide"),
                             speaker=[f"s{i:02d}" for i in spk]))
