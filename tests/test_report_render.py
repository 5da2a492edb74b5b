"""The HTML report: escaping and embedding (unit tests) and rendering in headless Chromium (all
images decoded; the check itself is shown to fail on a broken image).

The whole demo study report is rendered with :func:`rendered_image_count` by
``tests/test_cli.py::test_demo_runs_the_study_prints_outputs_and_renders``, which reuses its one
demo run (a demo run is the slowest step of these tests)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from scoremix import report_html as rh

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# A script injected into a copy of the page: once loaded, it writes how many <img> decoded
# (complete with a positive natural width) into the DOM, which --dump-dom then prints.
CHECK_SCRIPT = ("<script>window.addEventListener('load',function(){var im=document.images,ok=0;"
                "for(var i=0;i<im.length;i++){if(im[i].complete&&im[i].naturalWidth>0)ok++;}"
                "var d=document.createElement('div');d.id='img-check';d.textContent='IMAGES '+ok+'/'+im.length;"
                "document.body.appendChild(d);});</script>")

# 1×1 PNG (a valid file, written out byte by byte)
TINY_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    pytest.skip("headless Chromium is absent (apt-get install -y --no-install-recommends chromium)")
    raise AssertionError  # unreachable


def rendered_image_count(html_path: Path, tmp_path: Path) -> tuple[int, int, str]:
    """Open a copy of ``html_path`` in headless Chromium; return (decoded images, images, DOM)."""
    browser = _chromium()
    page = tmp_path / "check.html"
    page.write_text(html_path.read_text(encoding="utf-8").replace("</body>", CHECK_SCRIPT + "</body>"),
                    encoding="utf-8")
    proc = subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
         "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    m = re.search(r"IMAGES (\d+)/(\d+)", proc.stdout)
    assert m, f"Chromium printed no image count (rc {proc.returncode}): {proc.stderr[-800:]}"
    return int(m.group(1)), int(m.group(2)), proc.stdout


def test_escaping_tables_and_embedded_png():
    df = pd.DataFrame({"name": ["<b>x</b>", "a&b"], "value": [0.123456789, float("nan")]})
    html = rh.render_html("T <1>", [rh.Section("S & s", [rh.Paragraph("x < y"), rh.Table(df, caption="c"),
                                                         rh.Figure(TINY_PNG, caption="tiny", alt="a\"b")])])
    assert "<title>T &lt;1&gt;</title>" in html and "S &amp; s" in html and "x &lt; y" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "0.1235" in html and "–" in html  # .4g float format and the NaN marker
    uri = re.search(r'src="data:image/png;base64,([^"]+)"', html).group(1)
    assert base64.b64decode(uri) == TINY_PNG
    assert 'alt="a&quot;b"' in html
    with pytest.raises(ValueError, match="PNG"):
        rh.png_data_uri(b"GIF89a")
    with pytest.raises(TypeError, match="Paragraph, Table or Figure"):
        rh.render_html("t", [rh.Section("s", ["plain string"])])  # type: ignore[list-item]


def test_minimal_page_renders_in_chromium(tmp_path):
    path = rh.write_html(tmp_path / "r.html", "t", [rh.Section("s", [rh.Figure(TINY_PNG), rh.Figure(TINY_PNG)])])
    ok, total, _ = rendered_image_count(path, tmp_path)
    assert (ok, total) == (2, 2)
    # a broken image is detected (the check can fail)
    bad = tmp_path / "bad.html"
    bad.write_text(path.read_text().replace("iVBORw0KGgo", "AAAAAAAAAAA", 1), encoding="utf-8")
    ok, total, _ = rendered_image_count(bad, tmp_path)
    assert (ok, total) == (1, 2)
