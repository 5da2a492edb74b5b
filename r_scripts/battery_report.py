"""Print the lme4-parity battery as a Markdown table: native fit vs the stored lme4 tight
optimum (criterion, fixed effects, SEs) and native fit time vs lme4's (ratio).

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python3 r_scripts/battery_report.py [ID ...]
        [--times rows.json]

The references are ``tests/data/battery/refs/<id>.json`` (``r_scripts/battery.R fit``);
lme4's time is the median of 3 fits at lme4's default settings, measured when the
references were made (see each JSON's ``timing_env`` for the BLAS).  The native time is
the median of 3 fits here.  Times depend on the machine and its load: read the ratio only
when both were measured on the same machine.  ``--times rows.json`` takes both times from
a ``benchmarks/lme_battery_speed.py --json rows.json`` run instead (lme4 in-process,
interleaved with scoremix, so that both see the same load).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from battery_helpers import MODELS, fit_kwargs, load_dataset, load_ref  # noqa: E402
from scoremix import UnsupportedModelError, lmer  # noqa: E402


def main(ids: list[str], times_json: Path | None = None) -> None:
    bench = {}
    if times_json is not None:
        bench = {r["name"]: r for r in json.loads(Path(times_json).read_text())}
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
        if m["id"] in bench:
            tn, tl = bench[m["id"]]["scoremix_s"], bench[m["id"]]["lme4_s"]
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
    args = sys.argv[1:]
    tj = None
    if "--times" in args:
        i = args.index("--times")
        tj = Path(args[i + 1])
        del args[i: i + 2]
    main(args, tj)
