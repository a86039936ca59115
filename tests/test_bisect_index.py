"""Listing torch versions without pip: the simple API (PEP 691 JSON, PEP 503 HTML) and find-links,
through the pip and uv configuration, over TLS with the configured CA bundle (loopback servers only)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.tags import sys_tags

from casekit.bisect.versions import fetch_available_versions, parse_pip_index_versions, sort_versions
from casekit.errors import BisectError
from casekit.runners.torch_source import index
from tests.loopback import serve

OWN = next(iter(sys_tags()))  # a tag this interpreter installs
WHEEL = f"{OWN.interpreter}-{OWN.abi}-{OWN.platform}"

# What a real index page holds: installable wheels, a yanked file, a wheel for another platform,
# a pre-release, a release that needs a Python from the future, an sdist, another project's file.
FILES = [
    {"filename": f"torch-2.5.1-{WHEEL}.whl"},
    {"filename": f"torch-2.6.0-{WHEEL}.whl"},
    {"filename": f"torch-2.7.0-{WHEEL}.whl", "yanked": "broken metadata"},
    {"filename": "torch-2.8.0-cp27-cp27m-win32.whl"},
    {"filename": f"torch-2.9.0rc1-{WHEEL}.whl"},
    {"filename": f"torch-2.10.0-{WHEEL}.whl", "requires-python": ">=3.99"},
    {"filename": "torch-2.11.0.tar.gz"},
    {"filename": f"torch-2.13.0+cpu-{WHEEL}.whl"},
]


def _html(files: list[dict[str, str]]) -> str:
    anchors = []
    for entry in files:
        attributes = f'href="../../files/{entry["filename"]}#sha256=00"'
        if "yanked" in entry:
            attributes += f' data-yanked="{entry["yanked"]}"'
        if "requires-python" in entry:
            attributes += f' data-requires-python="{entry["requires-python"].replace(">", "&gt;")}"'
        anchors.append(f"<a {attributes}>{entry['filename']}</a><br/>")
    return "<!DOCTYPE html><html><body>" + "".join(anchors) + "</body></html>"


class _Index(http.server.BaseHTTPRequestHandler):
    speaks_json = True
    asked: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        type(self).asked.append((self.path, self.headers.get("Accept", "")))
        if self.path != "/simple/torch/":
            self.send_error(404)
            return
        wants_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
        if self.speaks_json and wants_json:
            body = json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": FILES}).encode()
            content_type = "application/vnd.pypi.simple.v1+json"
        else:
            body = _html(FILES).encode()
            content_type = "text/html; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _HtmlOnly(_Index):
    speaks_json = False
    asked: list[tuple[str, str]] = []


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return key, cert


def _serve(handler: type[http.server.BaseHTTPRequestHandler], tls: tuple[Path, Path] | None) -> Iterator[str]:
    with serve(handler, tls) as host:
        yield f"{'https' if tls else 'http'}://{host}/simple/"


@pytest.fixture
def tls_index(certificate: tuple[Path, Path]) -> Iterator[str]:
    _Index.asked = []
    yield from _serve(_Index, certificate)


@pytest.fixture
def html_index() -> Iterator[str]:
    _HtmlOnly.asked = []
    yield from _serve(_HtmlOnly, None)


def _isolated(tmp_path: Path, **variables: str) -> dict[str, str]:
    """An environment whose pip and uv configuration is only what the test writes."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CONFIG_DIRS": str(tmp_path / "no-xdg"),
        "PIP_CONFIG_FILE": os.devnull,
        "UV_NO_CONFIG": "1",
        **variables,
    }


# Wheels only: casekit installs with --only-binary :all:, so the sdist-only 2.11.0 is no candidate.
EXPECTED = ["2.5.1", "2.6.0", "2.13.0+cpu"]


def test_pep691_json_over_tls_with_the_pip_configured_ca_bundle(
    tmp_path: Path, tls_index: str, certificate: tuple[Path, Path]
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {tls_index}\ncert = {certificate[1]}\n")
    config = index.read_config(_isolated(tmp_path, PIP_CONFIG_FILE=str(conf)))
    assert config.index_url == tls_index and config.cert == str(certificate[1])
    assert sorted(index.list_versions("torch", config=config), key=EXPECTED.index) == EXPECTED
    assert _Index.asked[-1][1].startswith("application/vnd.pypi.simple.v1+json")
    # Pre-releases only when asked (nightlies are pre-releases).
    assert "2.9.0rc1" in index.list_versions("torch", config=config, pre=True)


def test_the_ca_bundle_is_really_checked(tmp_path: Path, tls_index: str) -> None:
    """Control: the same index with the system bundle fails verification, and the error names --versions."""
    config = index.IndexConfig(index_url=tls_index, cert="/etc/ssl/certs/ca-certificates.crt")
    with pytest.raises(index.IndexUnreadable, match="CERTIFICATE_VERIFY_FAILED"):
        index.list_versions("torch", config=config)


def test_pep503_html_through_uv_variables_plus_find_links(tmp_path: Path, html_index: str) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / f"torch-2.14.1-{WHEEL}.whl").write_bytes(b"")
    (wheels / f"numpy-2.0.0-{WHEEL}.whl").write_bytes(b"")
    environ = _isolated(
        tmp_path, UV_DEFAULT_INDEX=html_index, UV_INDEX=f"local=file://{tmp_path}/missing/", UV_FIND_LINKS=str(wheels)
    )
    config = index.read_config(environ)
    assert config.index_url == html_index and config.extra_index_urls == (f"file://{tmp_path}/missing/",)
    # The missing file: index is skipped (another answered), as pip skips it.
    assert set(index.list_versions("torch", config=config)) == {*EXPECTED, "2.14.1"}
    assert _HtmlOnly.asked


def test_uv_toml_and_pip_precedence(tmp_path: Path, html_index: str) -> None:
    uv_toml = tmp_path / "uv.toml"
    uv_toml.write_text(f'[[index]]\nurl = "{html_index}"\ndefault = true\n\n[[index]]\nurl = "https://extra/simple"\n')
    config = index.read_config(_isolated(tmp_path, UV_CONFIG_FILE=str(uv_toml), UV_NO_CONFIG=""))
    assert config.indexes == (html_index, "https://extra/simple")
    # pip's index URL wins as the default (uv's extras still count); --index-url replaces the default only.
    config = index.read_config(_isolated(tmp_path, UV_CONFIG_FILE=str(uv_toml), UV_NO_CONFIG="", PIP_INDEX_URL="x"))
    assert config.indexes == ("x", "https://extra/simple")
    given = index.read_config(_isolated(tmp_path, PIP_EXTRA_INDEX_URL="https://more/simple"), index_url="https://x/s")
    assert given.indexes == ("https://x/s", "https://more/simple")
    assert index.read_config(_isolated(tmp_path, CASEKIT_CA_BUNDLE="/ca.pem", PIP_CERT="/pip.pem")).cert == "/ca.pem"


@pytest.mark.process
def test_nothing_readable_is_one_error_naming_versions(tmp_path: Path) -> None:
    environ = _isolated(tmp_path, PIP_INDEX_URL="http://127.0.0.1:9/simple/")
    saved = os.environ.copy()
    try:
        os.environ.clear()
        os.environ.update(environ)
        with pytest.raises(BisectError) as caught:
            fetch_available_versions("torch", python=_python_without_pip(tmp_path), timeout=10)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    message = str(caught.value)
    assert "127.0.0.1:9" in message and "--versions" in message and "\n" not in message


def _python_without_pip(tmp_path: Path) -> str:
    target = tmp_path / "nopip"
    if not target.exists():
        venv.create(target, with_pip=False)
    return str(target / "bin" / "python")


@pytest.mark.process
def test_an_interpreter_without_pip_lists_what_pip_lists(tmp_path: Path) -> None:
    """The uv-tool case on the machine's real configuration: the same candidates as pip index versions."""
    python = _python_without_pip(tmp_path)
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0
    without_pip = fetch_available_versions("torch", python=python)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "torch"], capture_output=True, text=True, check=True
    )
    assert without_pip == sort_versions(parse_pip_index_versions(pip.stdout))
    assert "2.5.1" in without_pip and "2.13.0" in without_pip
