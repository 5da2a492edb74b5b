"""Peak and time course of the resident memory of a long ``scoremix study`` that warns.

Issue 24: any warning in a study made the command re-emit warnings inside its own recorder, so
memory grew about 120 MB/s until the kernel killed it.  This benchmark runs a study that warns on
every system (singular fits, ModelFitWarning, missing CJK glyphs in the report figures) with
``--jobs 1`` and ``--jobs 2`` and samples the summed RSS of the command and its workers from
``/proc`` every 0.25 s.  It prints the peak, the RSS at 25/50/75 % of the run (flat memory: the
later quartiles are no higher than the first by more than the workers' start-up) and the number
of warning lines printed.

Run: ``OPENBLAS_NUM_THREADS=1 nice -n 5 python benchmarks/study_peak_rss.py [n_systems]``
(default 12 systems of 1,200 trials, 50 bootstrap replicates each), or on a study file:
``... study_peak_rss.py --study examples/asvspoof2019_la_eval.toml [--set KEY=VALUE ...] [--jobs 1 2]``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from scoremix.study.parallel import child_processes

STUDY = """
[study]
name = "rss"
seed = 1
[data]
file = "t.csv"
label = "y"
system = "sys"
speaker = "spk"
subgroups = ["grp"]
[[models]]
name = "m"
formula = "score ~ y + (1 | spk)"
[analyses.metrics]
by = ["grp"]
[analyses.model_eer]
by = ["grp"]
n_boot = 50
[analyses.fairness]
groups = ["grp"]
n_boot = 50
"""


def _rss_kib(pid: int) -> int:
    total = 0
    for p in [pid, *child_processes(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def _write(folder: Path, n_systems: int) -> Path:
    rng = np.random.default_rng(1)
    frames = []
    for k in range(n_systems):
        spk = np.repeat(np.arange(40), 30)
        n = spk.size
        y = (np.arange(n) % 3 == 0).astype(int)
        frames.append(pd.DataFrame({"spk": [f"s{i}" for i in spk], "grp": np.where(spk % 2 == 0, "男性", "女性"),
                                    "y": y, "score": 2.0 * y + rng.standard_t(2, n), "sys": f"S{k:02d}"}))
    pd.concat(frames).to_csv(folder / "t.csv", index=False)
    (folder / "s.toml").write_text(STUDY, encoding="utf-8")
    return folder / "s.toml"


def run(jobs: int, n_systems: int, study: Path | None = None, sets: list[str] | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        label = f"systems={n_systems}" if study is None else study.name
        study = _write(Path(tmp), n_systems) if study is None else study
        extra = [a for kv in (sets or []) for a in ("--set", kv)]
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "scoremix.cli", "study", str(study), "--out",
                                 str(Path(tmp) / "out"), "--jobs", str(jobs), "--no-progress", *extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        samples: list[int] = []
        import threading

        err: list[str] = []
        reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))
        reader.start()
        while proc.poll() is None:
            samples.append(_rss_kib(proc.pid))
            time.sleep(0.25)
        reader.join()
        wall = time.perf_counter() - t0
    s = np.array(samples or [0]) / 1024
    q = [s[int(f * (len(s) - 1))] for f in (0.25, 0.5, 0.75)]
    n_warn = sum(1 for ln in err[0].splitlines() if ": warning: " in ln)
    print(f"jobs={jobs} {label}: exit {proc.returncode}, {wall:.1f} s, peak RSS {s.max():.0f} MiB "
          f"(command + workers), at 25/50/75 % of the run {q[0]:.0f}/{q[1]:.0f}/{q[2]:.0f} MiB, "
          f"{n_warn} warning line(s)")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("n_systems", nargs="?", type=int, default=12)
    ap.add_argument("--study", type=Path, default=None, help="run this study file instead (e.g. the LA example)")
    ap.add_argument("--set", action="append", default=[], help="study overrides, as for scoremix study")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    a = ap.parse_args()
    for j in a.jobs:
        run(j, a.n_systems, a.study.resolve() if a.study else None, a.set)
