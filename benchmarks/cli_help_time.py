"""Wall time of ``scoremix --help``: the light console entry point (``scoremix_cli:main``) vs
importing the package (``python -m scoremix.cli --help``, what the entry point did before
issue 24).  Median of 5 runs each, in fresh interpreters.

Run: ``nice -n 5 python benchmarks/cli_help_time.py``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = {
    "scoremix_cli:main --help (entry point)": [sys.executable, "-c",
                                                "import sys, scoremix_cli; sys.exit(scoremix_cli.main(['--help']))"],
    "python -m scoremix.cli --help (package)": [sys.executable, "-m", "scoremix.cli", "--help"],
}


def main() -> None:
    for name, cmd in RUNS.items():
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=True)
            times.append(time.perf_counter() - t0)
        print(f"{name:<45} median {statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f})")


if __name__ == "__main__":
    main()
