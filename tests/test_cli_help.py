"""``scoremix --help`` without the modelling stack (issue 24, item 10): the console entry point
(``scoremix_cli:main``) answers help and version requests from the argument parser alone, so
neither pandas, SciPy nor PyMC is imported (``import scoremix`` takes seconds)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEAVY = ("numpy", "pandas", "scipy", "statsmodels", "pymc", "matplotlib", "scoremix.metrics", "scoremix.lme")

CODE = textwrap.dedent("""
    import sys, json
    import scoremix_cli
    try:
        rc = scoremix_cli.main(sys.argv[1:])
    except SystemExit as e:
        rc = e.code
    print("MODULES", json.dumps([m for m in {heavy!r} if m in sys.modules]), "RC", rc)
""").format(heavy=HEAVY)


@pytest.mark.parametrize("args,needle", [(["--help"], "usage: scoremix"), (["study", "--help"], "STUDY.toml"),
                                         (["fit", "-h"], "--formula"), (["--version"], "scoremix "),
                                         ([], "usage: scoremix")])
def test_help_imports_nothing_heavy(args: list[str], needle: str) -> None:
    out = subprocess.run([sys.executable, "-c", CODE, *args], capture_output=True, text=True, timeout=120)
    tail = out.stdout.strip().splitlines()[-1]
    assert tail.startswith("MODULES []"), tail
    assert needle in out.stdout + out.stderr
    assert tail.endswith("RC 0") or (not args and tail.endswith("RC 2"))


def test_other_commands_run_the_real_cli(tmp_path: Path) -> None:
    import scoremix_cli

    assert scoremix_cli.main(["simulate", "--out", str(tmp_path / "t.csv"), "--n-trials", "300"]) == 0
    assert (tmp_path / "t.csv").stat().st_size > 0


def test_entry_point_is_the_light_launcher() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    scripts = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["scoremix"] == "scoremix_cli:main"
