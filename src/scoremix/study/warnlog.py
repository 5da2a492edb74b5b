"""The study's one warnings mechanism: record, name the source, print once.

Every warning raised while a study runs, in this process or in a worker (``--jobs N``, Dask), is
recorded as a :class:`StudyWarning` naming where it came from (``model m on system A``,
``fairness on system B``, ``report``), returned with the task's result, and emitted once per
(source, category, text) after the recorder has closed.  Re-emitting inside an active recorder
appends to the list being read and never ends (the study hang of issue 24), so recording and
emitting are kept apart: :func:`recording` only collects, :func:`emit` runs outside it.

Matplotlib's missing-glyph warnings (one per character and figure) are folded into a single
warning naming every missing character.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["StudyWarning", "recording", "summarise", "emit", "where_of_task"]

_GLYPH = re.compile(r"Glyph \d+ \(\\N\{[^}]*\}\) missing from font\(s\) (?P<font>.+?)\.?$")
_GLYPH_CHAR = re.compile(r"Glyph (?P<code>\d+) ")


@dataclass(frozen=True)
class StudyWarning:
    """One recorded warning: its source, category and text (whitespace collapsed)."""

    where: str
    category: type[Warning]
    message: str

    def line(self) -> str:
        """``"<where>: <Category>: <text>"`` (one line)."""
        return f"{self.where}: {self.category.__name__}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"where": self.where, "category": self.category.__name__, "message": self.message}


@contextmanager
def recording(where: str, into: list[StudyWarning]) -> Iterator[None]:
    """Record the warnings raised inside (under the current filters) into ``into`` as
    :class:`StudyWarning` with source ``where``; nothing is printed or re-emitted here."""
    with warnings.catch_warnings(record=True) as caught:
        try:
            yield
        finally:
            into.extend(StudyWarning(where, w.category, " ".join(str(w.message).split())) for w in caught)


def summarise(recorded: Iterable[StudyWarning]) -> list[StudyWarning]:
    """Distinct warnings in first-seen order; missing-glyph warnings folded into one."""
    out: list[StudyWarning] = []
    seen: set[tuple[str, str, str]] = set()
    glyphs: dict[str, str] = {}
    fonts: list[str] = []
    for w in recorded:
        m = _GLYPH.match(w.message)
        if m is not None:
            code = _GLYPH_CHAR.match(w.message)
            if code is not None:
                glyphs.setdefault(chr(int(code.group("code"))), "")
            if m.group("font") not in fonts:
                fonts.append(m.group("font"))
            continue
        key = (w.where, w.category.__name__, w.message)
        if key not in seen:
            seen.add(key)
            out.append(w)
    if glyphs:
        chars = "".join(sorted(glyphs))
        out.append(StudyWarning(
            "report figures", UserWarning,
            f"{len(glyphs)} character(s) of the level names are missing from the figure font(s) "
            f"{', '.join(fonts)}: {' '.join(chars)} (drawn as empty boxes; the tables show them); install a font "
            "that has them (e.g. Debian's fonts-noto-cjk) for readable figure labels"))
    return out


def emit(recorded: Iterable[StudyWarning]) -> list[StudyWarning]:
    """Emit each distinct warning once (``warnings.warn_explicit``, message ``"<where>: <text>"``,
    same category), outside any recorder of the caller's; returns what was emitted."""
    out = summarise(recorded)
    for w in out:
        warnings.warn_explicit(f"{w.where}: {w.message}", w.category, "scoremix-study", 0, registry=None)
    return out


def where_of_task(key: str) -> str:
    """A readable source for a task key: ``model/m/A`` → ``model m on system A``,
    ``fairness/A`` → ``fairness on system A``, ``boot:fairness/A/2`` → ``fairness on system A``."""
    from scoremix.study.data import ALL_SYSTEMS  # the system of a study without a system column

    key = key.removeprefix("boot:")
    parts = key.split("/")
    if parts[0] == "model" and len(parts) >= 3:
        system = parts[2]
        return f"model {parts[1]}" + ("" if system == ALL_SYSTEMS else f" on system {system}")
    if len(parts) >= 2:
        return parts[0] + ("" if parts[1] == ALL_SYSTEMS else f" on system {parts[1]}")
    return parts[0]
