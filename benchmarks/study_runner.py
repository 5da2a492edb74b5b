"""Wall time of ``scoremix study`` / ``scoremix demo`` end to end, serial vs ``--jobs``.

Runs the embedded demo study (simulated, 20,000 trials, 200 bootstrap replicates) with
``jobs=1`` and ``jobs=2`` and, when ../shared/data is present, the ASVspoof 2019 LA eval
example restricted to two systems (71,237 trials each).  Prints one line per run with the
time spent loading, in the tasks and writing the report.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/study_runner.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from scoremix.demo import demo_study
from scoremix.study import load_study, run_study

ROOT = Path(__file__).resolve().parents[1]


def _line(name: str, res) -> str:
    t = res.timings
    return (f"{name:<48} total {t['total']:6.1f} s  (load {t['load']:.1f}, tasks {t['tasks']:.1f}, "
            f"report {t.get('report', 0):.1f})")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in (1, 2):
            res = run_study(demo_study(seed=0, n_trials=20000, n_boot=200), out_dir=Path(tmp) / f"demo{jobs}",
                            jobs=jobs, progress=False)
            print(_line(f"demo study, 20k trials, jobs={jobs}", res))
        shared = Path(os.environ.get("SCOREMIX_SHARED_DATA", ROOT.parent / "shared" / "data"))
        if (shared / "asvspoof2019_la_eval").is_dir():
            os.environ["SCOREMIX_SHARED_DATA"] = str(shared)
            for jobs in (1, 2):
                cfg = load_study(ROOT / "examples" / "asvspoof2019_la_eval.toml",
                                 {"data.filters": {"system": ["lfcc_gmm_highres", "rawgat_st_add"]},
                                  "analyses.fairness.n_boot": 200, "analyses.compare.n_boot": 200})
                res = run_study(cfg, out_dir=Path(tmp) / f"la{jobs}", jobs=jobs, progress=False)
                print(_line(f"LA eval example, 2 systems x 71k, jobs={jobs}", res))
        else:
            print(f"(shared data absent at {shared}: LA eval timing skipped)", file=sys.stderr)


if __name__ == "__main__":
    main()
