"""The HTML report in a real headless browser (Debian's chromium): screenshots and the rendered DOM.

Skips only when no chromium binary exists (CI installs the `chromium` package).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from casekit.archive import Archive
from casekit.report.formats import get_format, write_files
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
