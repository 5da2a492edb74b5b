"""Output folders that never lie: a study writes into a fresh staging folder beside ``--out``
and moves it into place only when every file is written.

* :func:`check_output_dir` — before any work: an existing non-empty folder is refused unless
  ``overwrite`` (the message names ``--overwrite``);
* :func:`staging_dir` — a new, empty ``.<name>.partial-<random>`` folder next to the target
  (same file system, so the final move is a ``rename``);
* :func:`publish` — ``rename(staging, out)``; with ``overwrite`` the old folder is first renamed
  aside and deleted only after the new one is in place, so ``out`` holds either the old complete
  run or the new complete run, never a mixture;
* :func:`discard` — delete a staging folder (on failure or interrupt).

A staging folder left by a killed process (SIGKILL gives no chance to clean up) is clearly
named ``.*.partial-*`` and holds no ``manifest.json``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["StudyOutputError", "check_output_dir", "staging_dir", "publish", "discard", "list_files"]


class StudyOutputError(OSError):
    """The output folder cannot be used (exists and is not empty, is a file, …)."""


def _nonempty(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def check_output_dir(out: Path, overwrite: bool = False) -> None:
    """Raise :class:`StudyOutputError` when ``out`` cannot receive a study's outputs."""
    if out.exists() and not out.is_dir():
        raise StudyOutputError(f"{out}: exists and is not a folder")
    if _nonempty(out) and not overwrite:
        raise StudyOutputError(f"{out}: output folder exists and is not empty; choose a new folder or pass "
                               "--overwrite (overwrite=True) to replace it")


def staging_dir(out: Path) -> Path:
    """A new empty folder beside ``out`` to write a run into."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))


def publish(staging: Path, out: Path, overwrite: bool = False) -> None:
    """Move the complete run in ``staging`` to ``out`` (see the module docstring)."""
    check_output_dir(out, overwrite)
    old: Path | None = None
    if out.is_dir():
        if _nonempty(out):
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, old / out.name)
        else:
            out.rmdir()
    try:
        os.rename(staging, out)
    except OSError:
        if old is not None:  # put the old run back
            os.rename(old / out.name, out)
            shutil.rmtree(old, ignore_errors=True)
        raise
    # the new run is in place: a staging folder's mode is 0700 (mkdtemp); give it the usual one
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(out, 0o777 & ~umask)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def discard(staging: Path) -> None:
    """Delete a staging folder and everything in it."""
    shutil.rmtree(staging, ignore_errors=True)


def list_files(folder: Path) -> list[str]:
    """Every file under ``folder`` as a sorted list of ``/``-separated relative paths."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
