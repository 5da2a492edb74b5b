"""Shared pytest fixtures: locations of ../shared/data and of R."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_DATA = REPO_ROOT / "tests" / "data"


def shared_data_dir() -> Path:
    """``$SCOREMIX_SHARED_DATA`` or ``../shared/data`` next to the checkout."""
    env = os.environ.get("SCOREMIX_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real score tables; skips the test with a message when absent."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (set SCOREMIX_SHARED_DATA to use another)")
    return path


def _r_has_lme4() -> bool:
    rscript = shutil.which("Rscript")
    if rscript is None:
        return False
    try:
        out = subprocess.run(
            [rscript, "-e", "suppressMessages(library(lme4)); library(jsonlite); cat('ok')"],
            capture_output=True, text=True, timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip().endswith("ok")


_R_OK: bool | None = None


@pytest.fixture(scope="session")
def rscript() -> str:
    """Path of Rscript with lme4 and jsonlite; skips the test with a message when absent."""
    global _R_OK
    if _R_OK is None:
        _R_OK = _r_has_lme4()
    if not _R_OK:
        pytest.skip("R with lme4 and jsonlite is not installed "
                    "(apt-get install -y --no-install-recommends r-base-core r-cran-lme4 r-cran-jsonlite)")
    return shutil.which("Rscript")  # type: ignore[return-value]
