"""Print the lme4-parity battery as a Markdown table: native fit vs the stored lme4 tight
optimum (criterion, fixed effects, SEs) and native fit time vs lme4's (ratio).

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python3 r_scripts/battery_report.py [ID ...]

The references are ``tests/data/battery/refs/<id>.json`` (``r_scripts/battery.R fit``);
lme4's time is the median of 3 fits at lme4's default settings, measured when the
references were made (see each JSON's ``timing_env`` for the BLAS).  The native time is
the median of 3 fits here.  Times depend on the machine and its load: read the ratio only
when both were measured on the same machine.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from battery_helpers import MODELS, fit_kwargs, load_dataset, load_ref  # noqa: E402
from scoremix import UnsupportedModelError, lmer  # noqa: E402


def main(ids: list[str]) -> None:
    print("| id | data | formula | REML | criterion rel. diff | max fixef rel. err | max SE rel. err "
          "| native s | lme4 s | ratio | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m in MODELS:
        if ids and m["id"] not in ids:
            continue
        ref = load_ref(m["id"])
        d = load_dataset(m["dataset"])
        times = []
        status = "agrees"
        try:
            for _ in range(3):
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = lmer(m["formula"], d, **fit_kwargs(m))
                times.append(time.perf_counter() - t0)
        except UnsupportedModelError as exc:
            print(f"| {m['id']} | {m['dataset']} | `{m['formula']}` | {m['REML']} | | | | | | | "
                  f"UnsupportedModelError: {exc} |")
            continue
        crit = -2 * res.loglik
        rel = (crit - ref["criterion"]) / abs(ref["criterion"])
        fe = max(abs(res.fixef[k] - v) / max(abs(v), ref["se"][k]) for k, v in ref["fixef"].items())
        se = max(abs(res.se[k] - v) / v for k, v in ref["se"].items())
        if abs(rel) > 1e-8 or fe > 1e-4 or se > 1e-4 or list(res.fixef.index) != list(ref["fixef"]):
            status = "DIFFERS"
        tn = statistics.median(times)
        tl = ref["lme4_time_s"]
        extra = []
        if m["weights"]:
            extra.append(f"weights={m['weights']}")
        if m["offset"]:
            extra.append(f"offset={m['offset']}")
        if m["contrasts"]:
            extra.append("contrasts=" + ",".join(f"{k}:{v}" for k, v in m["contrasts"].items()))
        formula = f"`{m['formula']}`" + (" (" + "; ".join(extra) + ")" if extra else "")
        formula = formula.replace("|", "\\|")  # a Markdown table cell
        print(f"| {m['id']} | {m['dataset']} | {formula} | {'REML' if m['REML'] else 'ML'} | "
              f"{rel:+.1e} | {fe:.1e} | {se:.1e} | {tn:.3f} | {tl:.3f} | {tn / max(tl, 1e-3):.2f} | "
              f"{status} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
