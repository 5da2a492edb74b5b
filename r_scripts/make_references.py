"""Regenerate the stored lme4 / glmmTMB reference fits under ``tests/data/reference/``.

Usage (from the repository root, R with lme4, glmmTMB and jsonlite installed)::

    OPENBLAS_NUM_THREADS=1 python r_scripts/make_references.py [--only NAME ...]

What it does

1. ``Rscript r_scripts/export_datasets.R tests/data/reference small`` writes
   ``sleepstudy.csv``, ``Penicillin.csv``, ``Pastes.csv`` (committed) and exports
   ``InstEval.csv`` into a temporary folder (73k rows, not committed).
2. Writes ``sim_detector.csv``: simulated detector scores (fixed seed, see
   :func:`simulate_detector`), committed (about 300 kB).
3. Reads the real ASVspoof 2019 LA eval scores from the shared data folder
   (``$SCOREMIX_SHARED_DATA`` or ``../shared/data``) into a temporary CSV (not committed).
4. Fits every entry of :data:`REFERENCES` with ``r_scripts/fit_lme4.R --tight`` (or
   ``fit_glmmtmb.R``) and writes ``<name>.json`` plus ``manifest.json`` listing, per
   reference: data set, formula, REML, dispersion and JSON file.

All references use tight optimiser settings (lme4's defaults are loose: see
``../shared/docs/install-notes.md``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "tests" / "data" / "reference"
R_DIR = ROOT / "r_scripts"

SIM_FORMULA = 'score ~ label * x + (1|speaker) + (0 + dummy(label, "spoof")|attack)'
ASV_FORMULA = 'score_logit ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'

#: name -> (data set, formula, REML, engine, dispersion)
REFERENCES: dict[str, tuple[str, str, bool, str, str | None]] = {
    "sleepstudy_corr_reml": ("sleepstudy", "Reaction ~ Days + (Days|Subject)", True, "lme4", None),
    "sleepstudy_corr_ml": ("sleepstudy", "Reaction ~ Days + (Days|Subject)", False, "lme4", None),
    "sleepstudy_uncorr_reml": ("sleepstudy", "Reaction ~ Days + (Days||Subject)", True, "lme4", None),
    "sleepstudy_uncorr_ml": ("sleepstudy", "Reaction ~ Days + (Days||Subject)", False, "lme4", None),
    "penicillin_reml": ("Penicillin", "diameter ~ 1 + (1|plate) + (1|sample)", True, "lme4", None),
    "penicillin_ml": ("Penicillin", "diameter ~ 1 + (1|plate) + (1|sample)", False, "lme4", None),
    "pastes_reml": ("Pastes", "strength ~ 1 + (1|batch/cask)", True, "lme4", None),
    "pastes_ml": ("Pastes", "strength ~ 1 + (1|batch/cask)", False, "lme4", None),
    "insteval_reml": ("InstEval", "y ~ service + (1|s) + (1|d) + (1|dept)", True, "lme4", None),
    "sim_detector_reml": ("sim_detector", SIM_FORMULA, True, "lme4", None),
    "sim_detector_ml": ("sim_detector", SIM_FORMULA, False, "lme4", None),
    "asvspoof2019_la_eval_reml": ("asvspoof2019_la_eval", ASV_FORMULA, True, "lme4", None),
    "sim_detector_disp_reml": ("sim_detector", SIM_FORMULA, True, "glmmTMB", "~ label"),
    "sim_detector_disp_ml": ("sim_detector", SIM_FORMULA, False, "glmmTMB", "~ label"),
}

#: where each data set lives: committed CSV, exported at run time, or shared data
DATASETS: dict[str, str] = {
    "sleepstudy": "committed:sleepstudy.csv",
    "Penicillin": "committed:Penicillin.csv",
    "Pastes": "committed:Pastes.csv",
    "sim_detector": "committed:sim_detector.csv",
    "InstEval": "r-export:InstEval",
    "asvspoof2019_la_eval": "shared:asvspoof2019_la_eval/asvspoof2019_la_eval.csv.gz",
}


def simulate_detector(n: int = 5000, n_speakers: int = 50, n_attacks: int = 6,
                      seed: int = 20240601) -> pd.DataFrame:
    r"""Simulated detector scores with crossed speaker and attack effects.

    For trial :math:`i` with speaker :math:`s`, attack :math:`a` (spoof only) and
    covariate :math:`x_i \sim N(0, 1)`:

    .. math::

        \text{score}_i = \mu + d\,y_i + \beta_{n} x_i (1-y_i) + \beta_{p} x_i y_i
                          + b_s + c_a (1 - y_i) + \varepsilon_i,

    :math:`b_s \sim N(0, 0.5^2)`, :math:`c_a \sim N(0, 1.5^2)`,
    :math:`\varepsilon_i \sim N(0, \sigma_{y_i}^2)` with :math:`\sigma_1 = 1.2`
    (bonafide), :math:`\sigma_0 = 0.8` (spoof); :math:`\mu = -2`, :math:`d = 4`,
    :math:`\beta_n = 0.3`, :math:`\beta_p = -0.2`; 30 % bonafide trials.  Bona fide trials
    have attack ``"bonafide"``.
    """
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    spk = rng.integers(0, n_speakers, n)
    att = rng.integers(0, n_attacks, n)
    x = rng.normal(size=n)
    b = rng.normal(0.0, 0.5, n_speakers)
    c = rng.normal(0.0, 1.5, n_attacks)
    sd = np.where(y == 1, 1.2, 0.8)
    score = (-2.0 + 4.0 * y + 0.3 * x * (1 - y) - 0.2 * x * y + b[spk] + c[att] * (1 - y)
             + rng.normal(size=n) * sd)
    return pd.DataFrame({
        "speaker": [f"S{k:03d}" for k in spk],
        "attack": np.where(y == 1, "bonafide", [f"A{k + 1:02d}" for k in att]),
        "label": np.where(y == 1, "bonafide", "spoof"),
        "y": y,
        "x": np.round(x, 6),
        "score": np.round(score, 6),
    })


def shared_data_dir() -> Path:
    env = os.environ.get("SCOREMIX_SHARED_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def run_r(args: list[str]) -> None:
    rscript = shutil.which("Rscript")
    if rscript is None:
        sys.exit("Rscript not found: apt-get install -y --no-install-recommends r-base-core "
                 "r-cran-lme4 r-cran-glmmtmb r-cran-jsonlite")
    subprocess.run([rscript, *args], check=True)


def dataset_csv(name: str, tmp: Path) -> Path:
    where = DATASETS[name]
    kind, _, rest = where.partition(":")
    if kind == "committed":
        return REF / rest
    if kind == "r-export":
        path = tmp / f"{rest}.csv"
        if not path.exists():
            run_r([str(R_DIR / "export_datasets.R"), str(tmp), "insteval"])
        return path
    src = shared_data_dir() / rest
    path = tmp / f"{name}.csv"
    if not path.exists():
        with gzip.open(src, "rt") as fh:
            pd.read_csv(fh).to_csv(path, index=False)
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="reference names to refit (default: all)")
    a = ap.parse_args(argv)
    REF.mkdir(parents=True, exist_ok=True)
    run_r([str(R_DIR / "export_datasets.R"), str(REF), "small"])
    simulate_detector().to_csv(REF / "sim_detector.csv", index=False)
    manifest = {}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for name, (ds, formula, reml, engine, disp) in REFERENCES.items():
            manifest[name] = {"dataset": ds, "source": DATASETS[ds], "formula": formula,
                              "REML": reml, "engine": engine, "dispersion": disp,
                              "json": f"{name}.json"}
            if a.only and name not in a.only:
                continue
            csv = dataset_csv(ds, tmp)
            out = REF / f"{name}.json"
            if engine == "lme4":
                args = [str(R_DIR / "fit_lme4.R"), str(csv), formula, str(out), "--tight"]
            else:
                args = [str(R_DIR / "fit_glmmtmb.R"), str(csv), formula, str(out), f"--disp={disp}"]
            if not reml:
                args.append("--ml")
            print(f"[{name}] {engine}: {formula} REML={reml}", flush=True)
            run_r(args)
    (REF / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
