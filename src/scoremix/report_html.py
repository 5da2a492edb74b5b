"""A minimal self-contained HTML report writer.

A report is a title plus a list of :class:`Section` objects, each holding blocks:
:class:`Paragraph` (escaped text), :class:`Table` (a DataFrame) and :class:`Figure` (a
matplotlib figure or PNG bytes, embedded as ``data:image/png;base64`` so the file needs
nothing beside it).  No templates, no external assets.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import pandas as pd

__all__ = ["Paragraph", "Table", "Figure", "Section", "figure_to_png", "png_data_uri",
           "render_html", "write_html", "is_interval_end", "format_interval_end"]


@dataclass
class Paragraph:
    """A paragraph of plain text (HTML-escaped); ``preformatted=True`` keeps line breaks."""

    text: str
    preformatted: bool = False


@dataclass
class Table:
    """A table from a DataFrame; floats formatted with ``float_format`` (a format spec)."""

    data: pd.DataFrame
    caption: str | None = None
    float_format: str = ".4g"
    index: bool = False


@dataclass
class Figure:
    """An image: a matplotlib ``Figure`` (rendered to PNG at ``dpi``) or PNG bytes."""

    image: Any
    caption: str | None = None
    dpi: int = 100
    alt: str = "figure"


Block = Union[Paragraph, Table, Figure]


@dataclass
class Section:
    """A titled group of blocks (``<h2>`` + content)."""

    title: str
    blocks: list[Block] = field(default_factory=list)


def figure_to_png(fig: Any, dpi: int = 100) -> bytes:
    """Render a matplotlib figure to PNG bytes (``bbox_inches="tight"``)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def png_data_uri(png: bytes) -> str:
    """``data:image/png;base64,…`` URI of PNG bytes."""
    if not png.startswith(b"\x89PNG"):
        raise ValueError("png_data_uri expects PNG bytes (signature \\x89PNG missing)")
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def is_interval_end(column: Any) -> bool:
    """Whether a column holds an interval end (``<measure>_lo/_hi`` or a report's ``… lo/hi``)."""
    name = str(column)
    return name.endswith(("_lo", "_hi", " lo", " hi"))


def format_interval_end(v: Any, fmt: str = ".4g") -> str:
    """An interval end as text: an infinite end (the data cannot bound the measure on that
    side) reads ``unbounded``, never ``inf``; NaN (no interval) reads ``–``."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    if x != x:
        return "–"
    if x in (float("inf"), float("-inf")):
        return "unbounded"
    return format(x, fmt)


def _table_html(block: Table) -> str:
    fmt = block.float_format
    ends = {c: (lambda v, f=fmt: format_interval_end(v, f)) for c in block.data.columns if is_interval_end(c)}
    out = block.data.to_html(
        index=block.index, escape=True, border=0, classes="data",
        float_format=lambda v: format(v, fmt), na_rep="–", formatters=ends or None,
    )
    # a wide table scrolls inside its own box instead of widening the page (the empirical columns of a
    # model-vs-empirical table stay reachable at 1400 px); long cell text wraps (see _CSS)
    out = f'<div class="table-wrap">{out}</div>'
    if block.caption:
        out = f'<p class="caption">{html.escape(block.caption)}</p>\n' + out
    return out


def _figure_html(block: Figure) -> str:
    png = block.image if isinstance(block.image, (bytes, bytearray)) else figure_to_png(block.image, block.dpi)
    uri = png_data_uri(bytes(png))
    cap = f"<figcaption>{html.escape(block.caption)}</figcaption>" if block.caption else ""
    return f'<figure><img src="{uri}" alt="{html.escape(block.alt)}"/>{cap}</figure>'


def _block_html(block: Block) -> str:
    if isinstance(block, Paragraph):
        text = html.escape(block.text)
        return f"<pre>{text}</pre>" if block.preformatted else f"<p>{text}</p>"
    if isinstance(block, Table):
        return _table_html(block)
    if isinstance(block, Figure):
        return _figure_html(block)
    raise TypeError(f"unknown report block type {type(block).__name__}; use Paragraph, Table or Figure")


_CSS = """
body { font-family: sans-serif; max-width: 1000px; margin: 2em auto; color: #222; }
h1 { border-bottom: 2px solid #444; }
h2 { margin-top: 2em; border-bottom: 1px solid #bbb; }
.table-wrap { max-width: 100%; overflow-x: auto; margin: 0.5em 0 1em 0; }
table.data { border-collapse: collapse; font-size: 0.9em; }
table.data th, table.data td { padding: 0.2em 0.6em; border-bottom: 1px solid #ddd; text-align: right;
  max-width: 18em; overflow-wrap: anywhere; }
table.data th { background: #f2f2f2; position: sticky; top: 0; }
nav.toc { background: #f7f7f7; padding: 0.5em 1em; margin: 1em 0; }
nav.toc ol { margin: 0.3em 0; columns: 2; }
nav.toc h2 { margin: 0; border: none; font-size: 1.1em; }
figure { margin: 1em 0; } figure img { max-width: 100%; }
figcaption, .caption { font-size: 0.9em; color: #555; }
pre { background: #f7f7f7; padding: 0.5em; overflow-x: auto; }
"""


def render_html(title: str, sections: list[Section], subtitle: str | None = None) -> str:
    """The whole report as one HTML string (UTF-8, inline CSS, embedded images)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"/>',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if subtitle:
        parts.append(f'<p class="caption">{html.escape(subtitle)}</p>')
    if len(sections) > 1:  # a table of contents: reports run to tens of thousands of pixels
        items = "".join(f'<li><a href="#sec-{i}">{html.escape(sec.title)}</a></li>' for i, sec in enumerate(sections, 1))
        parts.append(f'<nav class="toc"><h2>Contents</h2><ol>{items}</ol></nav>')
    for i, sec in enumerate(sections, 1):
        parts.append(f'<section id="sec-{i}"><h2>{html.escape(sec.title)}</h2>')
        parts.extend(_block_html(b) for b in sec.blocks)
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(path: str | Path, title: str, sections: list[Section], subtitle: str | None = None) -> Path:
    """Write :func:`render_html` output to ``path`` (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from scoremix.atomic import write_text

    write_text(path, render_html(title, sections, subtitle))  # atomic: complete or the old file
    return path
