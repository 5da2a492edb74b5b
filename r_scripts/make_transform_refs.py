"""Write tests/data/transform/{clm,clmm}_{data.csv,ref.json} with r_scripts/fit_clm.R.

Usage: PYTHONPATH=src:tests python3 r_scripts/make_transform_refs.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from transform_helpers import binned_data  # noqa: E402

OUT = ROOT / "tests" / "data" / "transform"
CASES = {"clm": dict(n=400, n_bins=7, seed=7), "clmm": dict(n=300, n_bins=6, seed=11, speaker_sd=0.8)}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for kind, kw in CASES.items():
        d = binned_data(**kw)
        csv = OUT / f"{kind}_data.csv"
        d.to_csv(csv, index=False)
        subprocess.run(["Rscript", str(ROOT / "r_scripts" / "fit_clm.R"), str(csv),
                        str(OUT / f"{kind}_ref.json"), kind], check=True)
        print(kind, (OUT / f"{kind}_ref.json").read_text()[:200])


if __name__ == "__main__":
    main()
