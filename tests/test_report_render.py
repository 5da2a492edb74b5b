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


# ------------------------------------------------------------------ layout at 1400 px (issue 24)
# measured in the page once it has loaded: the page's own horizontal overflow, the body width, and
# for every table box its width, its scroll width and the widest cell
LAYOUT_SCRIPT = ("<script>window.addEventListener('load',function(){var b=document.body,r={page:"
                 "document.documentElement.scrollWidth,view:window.innerWidth,body:b.getBoundingClientRect().width,"
                 "toc:document.querySelectorAll('nav.toc a').length,sections:document.querySelectorAll('section').length,"
                 "wraps:[]};var w=document.querySelectorAll('.table-wrap');for(var i=0;i<w.length;i++){var c=0,"
                 "td=w[i].querySelectorAll('td,th');for(var j=0;j<td.length;j++){c=Math.max(c,td[j]."
                 "getBoundingClientRect().width);}r.wraps.push({w:w[i].getBoundingClientRect().width,"
                 "sw:w[i].scrollWidth,ox:getComputedStyle(w[i]).overflowX,cell:c});}var d=document.createElement('pre');"
                 "d.id='layout';d.textContent='LAYOUT '+JSON.stringify(r);b.appendChild(d);});</script>")


def layout_at(html_path: Path, tmp_path: Path, width: int = 1400) -> dict:
    """Load ``html_path`` in headless Chromium at ``width`` px; return the measurements of
    :data:`LAYOUT_SCRIPT` and save a screenshot beside the page copy (a test artefact; also copied
    to ``$SCOREMIX_TEST_ARTIFACTS`` when set)."""
    import json
    import os

    browser = _chromium()
    page = tmp_path / "layout.html"
    page.write_text(html_path.read_text(encoding="utf-8").replace("</body>", LAYOUT_SCRIPT + "</body>"),
                    encoding="utf-8")
    common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},1000",
              "--virtual-time-budget=10000"]
    proc = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    m = re.search(r"LAYOUT (\{.*\})", proc.stdout)
    assert m, f"Chromium printed no layout (rc {proc.returncode}): {proc.stderr[-800:]}"
    shot = tmp_path / f"{html_path.stem}-{width}px.png"
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=180)
    art = os.environ.get("SCOREMIX_TEST_ARTIFACTS")
    if art and shot.exists():
        Path(art).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(art) / shot.name)
    return json.loads(m.group(1))


def _check_layout(lay: dict) -> None:
    assert lay["page"] <= lay["view"], lay  # nothing widens the page: no page-level horizontal scrolling
    assert lay["body"] <= 1000.5, lay
    for w in lay["wraps"]:
        assert w["w"] <= lay["body"] + 0.5, w  # every table box fits the body; wider tables scroll inside it
        assert w["ox"] == "auto", w
        assert w["cell"] <= 400, w  # a 300-character level name wraps instead of widening its column


def test_wide_tables_scroll_within_themselves_at_1400px(tmp_path):
    wide = pd.DataFrame({f"column number {i} with a long name": [1.23456789 * i, 2.5] for i in range(40)})
    long_name = pd.DataFrame({"subgroup": ["x" * 300, "short"], "EER % (rocch)": [1.0, 2.0]})
    path = rh.write_html(tmp_path / "wide.html", "t", [rh.Section("Wide", [rh.Table(wide)]),
                                                       rh.Section("Long names", [rh.Table(long_name)])])
    lay = layout_at(path, tmp_path)
    _check_layout(lay)
    assert lay["toc"] == lay["sections"] == 2
    assert lay["wraps"][0]["sw"] > lay["wraps"][0]["w"]  # the wide one scrolls inside its box
    assert (tmp_path / "wide-1400px.png").stat().st_size > 1000


STUDY_REPORT = """
[study]
name = "layout"
seed = 2
[data]
file = "t.csv"
label = "label"
positive = "bonafide"
speaker = "spk"
subgroups = ["grp"]
[[models]]
name = "disp"
formula = "score ~ label + (1 | spk)"
dispersion = "~ label"
[[models]]
name = "tr"
formula = "score ~ label + (1 | spk)"
transform = "monotone"
[analyses.metrics]
eer_method = "asvspoof"
[analyses.model_eer]
by = ["grp"]
n_boot = 40
[analyses.fairness]
groups = ["grp"]
n_boot = 40
"""


@pytest.fixture(scope="module")
def study_report(tmp_path_factory):
    import numpy as np

    from scoremix.study import load_study, run_study

    d = tmp_path_factory.mktemp("layout")
    rng = np.random.default_rng(5)
    spk = np.repeat(np.arange(40), 20)
    y = np.arange(spk.size) % 2
    grp = np.where(spk % 2 == 0, "a" * 300, "short")
    s = np.where(y == 1, 2.0 + 1.5 * rng.normal(size=spk.size), rng.normal(size=spk.size)) + rng.normal(0, .5, 40)[spk]
    pd.DataFrame({"score": s, "label": np.where(y == 1, "bonafide", "spoof"), "spk": spk.astype(str),
                  "grp": grp}).to_csv(d / "t.csv", index=False)
    (d / "s.toml").write_text(STUDY_REPORT, encoding="utf-8")
    res = run_study(load_study(d / "s.toml"), out_dir=d / "out", progress=False)
    return res, d / "out" / "report.html"


def test_study_report_layout_at_1400px(study_report, tmp_path):
    _, path = study_report
    lay = layout_at(path, tmp_path)
    _check_layout(lay)
    assert lay["toc"] == lay["sections"] >= 5


def test_study_report_contents(study_report):
    import html as html_mod

    res, path = study_report
    text = path.read_text(encoding="utf-8")
    assert '<nav class="toc">' in text
    # every residual SD of the dispersion model
    vc = res.models[[m["model"] for m in res.models].index("disp")]["varcorr"]
    assert {"Residual (label = bonafide)", "Residual (label = spoof)"} <= set(vc["grp"])
    assert "Residual (label = bonafide)" in text and "Residual (label = spoof)" in text
    # estimation method: the transformation model is not REML
    sec = text.split("<h2>Model tr</h2>")[1].split("</section>")[0]
    assert "REML" not in sec.replace("REML does not apply", "") and "maximum likelihood (Laplace" in sec
    # headline numbers with intervals by default; every EER header names its definition
    assert "EER % (asvspoof) lo" in text and "minDCF" in text
    headers = [html_mod.unescape(h) for h in re.findall(r"<th>([^<]*)</th>", text)]
    eer_headers = [h for h in headers if "EER" in h]
    assert eer_headers and all(re.search(r"EER % \((rocch|asvspoof|model)\)", h) for h in eer_headers), eer_headers
