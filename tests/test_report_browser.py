"""The HTML report in a real headless browser (Debian's chromium): screenshots and the rendered DOM.

Skips only when no chromium binary exists (CI installs the `chromium` package).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.report.formats import get_format
from casekit.report.output import write_files
from casekit.report.summary import summarize

ARCHIVE = Path(__file__).parent / "fixtures" / "report" / "archive"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((path for name in BROWSERS if (path := shutil.which(name))), None)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH (apt-get install chromium)"),
]


def headless(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    command = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",  # a private profile: parallel runs never share a lock
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    write_files(get_format("html").render(summarize(Archive(ARCHIVE).load_all())), out)
    return out


@pytest.mark.parametrize("page", ["index.html", "cases/logging-in-forward.html"])
def test_screenshot(site: Path, tmp_path: Path, page: str) -> None:
    shot = tmp_path / "shot.png"
    done = headless(tmp_path, f"--screenshot={shot}", "--window-size=1280,900", (site / page).as_uri())
    assert shot.exists(), done.stderr[-2000:]
    assert png_size(shot) == (1280, 900)
    assert shot.stat().st_size > 30_000  # a blank or error page compresses to a few KB


def test_index_dom_has_the_coloured_matrix(site: Path, tmp_path: Path) -> None:
    dom = headless(tmp_path, "--dump-dom", (site / "index.html").as_uri()).stdout
    assert '<table class="matrix">' in dom
    assert dom.count('<td class="cell ') == 18  # 9 cases x 2 targets
    assert 'data-verdict="improved"' in dom and 'data-verdict="changed"' in dom and 'data-verdict="unchanged"' in dom
    assert 'href="cases/tensor-if.html"' in dom


def test_case_dom_marks_the_break_lines(site: Path, tmp_path: Path) -> None:
    dom = headless(tmp_path, "--dump-dom", (site / "cases" / "item-branch.html").as_uri()).stdout
    assert '<span class="line break-line" id="pre-L8" title="graph break GB0124">' in dom
    assert "peak = y.abs().max().item()" in dom
    assert 'href="https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html"' in dom
    assert '<ol class="timeline">' in dom and "venv:torch-2.5.1" in dom


# ------------------------------------------------------------------ the pictures, seen by a browser

PICTURES = Path(__file__).parent / "fixtures" / "pictures" / "archive"  # replayed on torch 2.5.1, 2.8.0, 2.13.0
SAVE_TO = os.environ.get("CASEKIT_SAVE_SCREENSHOTS")  # e.g. docs/screenshots: keep the shots for people to look at
SVG_NS = "{http://www.w3.org/2000/svg}"


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what chromium writes) with the standard library: rows of RGB."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    step = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * step
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                best = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
                line[i] = (line[i] + best[2]) & 0xFF
        rows.append(bytes(b for i, b in enumerate(line) if i % step < 3))
        previous = line
    return width, height, rows


def pixel(rows: list[bytes], x: int, y: int) -> str:
    r, g, b = rows[y][3 * x : 3 * x + 3]
    return f"#{r:02x}{g:02x}{b:02x}"


def colour_count(rows: list[bytes], colour: str) -> int:
    wanted = bytes.fromhex(colour[1:])
    return sum(row[i : i + 3] == wanted for row in rows for i in range(0, len(row), 3))


@pytest.fixture(scope="module")
def pictures_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pictures")
    write_files(
        get_format("html").render(summarize(Archive(PICTURES).load_all(), title="casekit starter archive")), out
    )
    return out


def screenshot(tmp_path: Path, url: str, name: str, size: str) -> Path:
    shot = tmp_path / name
    done = headless(
        tmp_path,
        "--disable-quic",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--force-device-scale-factor=1",
        f"--screenshot={shot}",
        f"--window-size={size}",
        url,
    )
    assert shot.exists(), done.stderr[-2000:]
    if SAVE_TO:
        Path(SAVE_TO).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(SAVE_TO) / name)
    return shot


def test_heatmap_colours_land_where_the_svg_puts_them(pictures_site: Path, tmp_path: Path) -> None:
    """The heatmap alone on a page at (0, 0): each cell's corner in the screenshot has that cell's fill."""
    from casekit.report.pictures import heatmap_from_summary, heatmap_svg

    svg = heatmap_svg(heatmap_from_summary(summarize(Archive(PICTURES).load_all())))
    page = tmp_path / "heatmap.html"
    page.write_text(f'<!DOCTYPE html><html><body style="margin:0">{svg}</body></html>', encoding="utf-8")
    root = ET.fromstring(svg)
    width, height = int(root.get("width") or 0), int(root.get("height") or 0)
    _, _, rows = png_pixels(screenshot(tmp_path, page.as_uri(), "heatmap.png", f"{width},{height}"))
    cells = [g for g in root.iter(f"{SVG_NS}g") if g.get("class") == "heat-cell"]
    assert len(cells) == 27
    for cell in cells:
        rect = cell.find(f"{SVG_NS}rect")
        assert rect is not None
        x, y = int(float(rect.get("x") or 0)) + 4, int(float(rect.get("y") or 0)) + 4
        assert pixel(rows, x, y) == rect.get("fill"), (cell.get("data-verdict"), x, y)


@pytest.mark.parametrize(
    ("page", "name", "size", "colours"),
    [
        ("index.html", "index.png", "1280,1000", ("#aceebb", "#4ac26b", "#eac54f")),  # unchanged, improved, changed
        ("cases/metrics-disable.html", "case-metrics-disable.png", "1280,760", ("#0969da", "#8250df", "#eac54f")),
    ],
)
def test_picture_pages_render_with_their_colours(
    pictures_site: Path, tmp_path: Path, page: str, name: str, size: str, colours: tuple[str, ...]
) -> None:
    width, height, rows = png_pixels(screenshot(tmp_path, (pictures_site / page).as_uri(), name, size))
    assert f"{width},{height}" == size
    for colour in colours:  # heatmap cells / the timeline's bars and its changed column
        assert colour_count(rows, colour) > 400, colour


def test_case_dom_has_the_timeline(pictures_site: Path, tmp_path: Path) -> None:
    dom = headless(tmp_path, "--dump-dom", (pictures_site / "cases" / "logging-in-forward.html").as_uri()).stdout
    assert 'class="timeline-svg"' in dom and "Timeline of logging-in-forward" in dom
    assert dom.count('class="mark mark-gone"') >= 1 and 'class="chart chart-graphs"' in dom


def test_a_case_page_prints_with_its_timeline(pictures_site: Path, tmp_path: Path) -> None:
    """Chromium prints a case page (print stylesheet applied) to a PDF of real size, not an error page."""
    pdf = tmp_path / "case.pdf"
    done = headless(
        tmp_path, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", (pictures_site / "cases/item-branch.html").as_uri()
    )
    assert pdf.exists(), done.stderr[-2000:]
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and len(data) > 20_000


def test_bisect_page_renders_its_steps(tmp_path: Path) -> None:
    import json

    from casekit.report.html import render_bisect_html

    doc = json.loads((PICTURES.parent / "bisect-logging-in-forward.json").read_text(encoding="utf-8"))
    page = tmp_path / "bisect.html"
    page.write_text(render_bisect_html(doc), encoding="utf-8")
    _, _, rows = png_pixels(screenshot(tmp_path, page.as_uri(), "bisect-logging-in-forward.png", "1280,640"))
    assert colour_count(rows, "#aceebb") > 400 and colour_count(rows, "#ff8182") > 400  # good and bad steps
    from casekit.report.pictures import sides_of

    # the dashed line where the outcome changes, in the bad side's ink (its steps' words use it too: the same
    # page without a first bad release is the control)
    changed_to = sides_of(doc)[1][1][1]
    unmarked = tmp_path / "unmarked.html"
    unmarked.write_text(render_bisect_html({**doc, "first_bad": None}), encoding="utf-8")
    _, _, plain = png_pixels(screenshot(tmp_path, unmarked.as_uri(), "unmarked.png", "1280,640"))
    assert colour_count(rows, changed_to) - colour_count(plain, changed_to) > 50
