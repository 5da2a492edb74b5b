"""Every command in README.md, run as written from the root of a fresh-clone layout.

The README's ```bash and ```python blocks are parsed; each command runs in its own copy of
the repository's tracked files (``git ls-files``), placed at ``<tmp>/repo`` with
``<tmp>/shared/data`` linked to the real score tables, so that the README's
``export SCOREMIX_SHARED_DATA=../shared/data`` means what it means on a fresh clone.  Earlier
``export`` lines and commands that create the files a later command reads
(``scoremix simulate``) run first, in the same shell.

``scoremix`` on ``PATH`` is a shim running ``python -m scoremix.cli`` on the copy's ``src``;
``pip install -e .`` is a shim too (installing the copy would repoint this environment's
scoremix install): the test environment already has what it installs.  Two lines are not
run: ``bash .ci/run`` and the pytest command, which are this test suite itself.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO_ROOT, shared_data_dir

README = REPO_ROOT / "README.md"
#: Lines that are this very test suite (running them here would recurse).
SELF = ("bash .ci/run", "python3 -m pytest")


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(bash|python)\n(.*?)```", text, re.S)]


def readme_commands() -> list[tuple[str, str, list[str]]]:
    """``(id, command, setup lines)`` of every README command (bash lines; a python block is
    one command)."""
    out = []
    for k, (lang, body) in enumerate(_blocks(README.read_text(encoding="utf-8"))):
        if lang == "python":
            out.append((f"python-block-{k}", body, []))
            continue
        setup: list[str] = []
        for line in body.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            cmd = line.split("  #")[0].strip()
            if cmd.startswith("export "):
                setup.append(line)
                continue
            out.append((cmd[:80], line, list(setup)))
            if cmd.startswith("scoremix simulate"):
                setup.append(line)
    return out


COMMANDS = readme_commands()


def test_readme_has_the_commands_we_expect():
    """The parser finds the README's commands (a README without code blocks would pass vacuously)."""
    cmds = [c for _, c, _ in COMMANDS]
    assert any("scoremix demo" in c for c in cmds)
    assert any(c.startswith("scoremix study") for c in cmds)
    assert any("sm.lmer(" in c for c in cmds)
    assert len(COMMANDS) >= 10


def _fresh_clone(root: Path) -> Path:
    """Tracked files of the checkout copied to ``root/repo``; ``root/shared/data`` → the real data."""
    repo = root / "repo"
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True,
                               timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot tell which files a fresh clone has")
    for f in filter(None, files):
        src = REPO_ROOT / f
        if src.is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / f)
    data = shared_data_dir()
    if data.is_dir():
        (root / "shared").mkdir()
        (root / "shared" / "data").symlink_to(data.resolve())
    return repo


def _shims(root: Path, repo: Path) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    shims = {
        "scoremix": f'#!/bin/sh\nexec "{sys.executable}" -m scoremix.cli "$@"\n',
        # the test environment has scoremix's dependencies; installing the copy would repoint it
        "pip": '#!/bin/sh\ncase "$*" in\n  "install -e ."*) echo "(test: pip install -e . skipped; '
               'PYTHONPATH is the checkout\'s src)"; exit 0;;\nesac\necho "unexpected pip $*" >&2; exit 1\n',
    }
    for name, text in shims.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def _needs(command: str) -> str | None:
    """Why ``command`` cannot run here (None: it can)."""
    if command.strip().startswith(SELF):
        return "is the CI entry point / the test command: this suite itself"
    if "examples/asvspoof" in command and not shared_data_dir().is_dir():
        return f"needs the real score tables in {shared_data_dir()} (absent; set SCOREMIX_SHARED_DATA)"
    if "--dask" in command:
        try:
            import dask.distributed  # noqa: F401 - availability check
        except ImportError:
            return 'needs dask.distributed (pip install -e ".[dask]")'
    return None


def _run(tmp_path: Path, lang: str, command: str, setup: list[str]) -> tuple[Path, subprocess.CompletedProcess]:
    repo = _fresh_clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "SCOREMIX_SHARED_DATA"}
    env.update(PATH=f"{_shims(tmp_path, repo)}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(repo / "src"),
               OPENBLAS_NUM_THREADS="1", MPLBACKEND="Agg")
    if lang == "python":
        (repo / "readme_block.py").write_text(command, encoding="utf-8")
        argv = [sys.executable, "readme_block.py"]
    else:
        argv = ["bash", "-e", "-c", "\n".join([*setup, command])]
    proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"README command failed ({proc.returncode}): {command}\n{proc.stderr[-3000:]}"
    return repo, proc


def _params() -> list:
    out = []
    for cid, command, setup in COMMANDS:
        slow = command.lstrip().startswith(("pip install", "scoremix study")) or "scoremix demo" in command
        marks = [pytest.mark.slow] if slow else []
        out.append(pytest.param(command, setup, id=cid, marks=marks))
    return out


@pytest.mark.parametrize("command, setup", _params())
def test_readme_command(tmp_path, command, setup):
    why = _needs(command)
    if why:
        pytest.skip(f"README command {command.split('  #')[0].strip()!r} {why}")
    lang = "python" if "import scoremix" in command else "bash"
    repo, proc = _run(tmp_path, lang, command, setup)
    cmd = command.split("  #")[0].strip()
    if "scoremix demo" in cmd or cmd.startswith("scoremix study"):
        out = repo / re.search(r"--out (\S+)", cmd).group(1)
        import json

        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        listed = {v["path"] for v in manifest.values()}
        on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
        assert listed == on_disk  # the manifest lists every file
        assert "report.html" in listed
        if "scoremix demo" in cmd:
            assert "metrics.json" in listed  # written by the demo after the study, still in the manifest
    elif cmd.startswith("scoremix fit"):
        assert (repo / "fit.json").is_file() and "Random effects" in proc.stdout
    elif cmd.startswith("scoremix eer"):
        from scoremix.metrics import eer

        t = pd.read_csv(repo / "scores.csv")
        expected = 100 * eer(t["score"].to_numpy(float), (t["label"] == "bonafide").to_numpy(int))
        assert f"EER (rocch): {expected:.4f} %" in proc.stdout
    elif cmd.startswith("scoremix fairness"):
        assert "Fairness Index" in proc.stdout
