"""The documentation builds with ``mkdocs build --strict`` (skipped when mkdocs or
mkdocstrings is not installed) and names every example study."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install mkdocs 'mkdocstrings[python]')")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed (pip install 'mkdocstrings[python]')")
    exe = shutil.which("mkdocs")
    cmd = [exe] if exe else [sys.executable, "-m", "mkdocs"]
    proc = subprocess.run([*cmd, "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "run_study" in api and "subgroup_dcf" in api  # docstrings were rendered


def test_study_format_doc_lists_examples_and_analyses():
    text = (ROOT / "docs" / "study-format.md").read_text(encoding="utf-8")
    from scoremix.study.config import ANALYSES, BACKENDS

    for name in (*ANALYSES, *BACKENDS):
        assert f"`{name}`" in text, name
    for runner_file in ("metrics.csv", "fairness.csv", "refit_lme4.R", "report.html", "manifest.json"):
        assert runner_file in text
