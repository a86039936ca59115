"""A local package index shaped like PyTorch's, served on 127.0.0.1 by a test (no PyTorch index is reachable here).

What it mimics of https://download.pytorch.org/whl:

- one folder per variant (``/whl/cpu/``, ``/whl/cu124/``, ``/whl/nightly/cpu/``), a PEP 503 page per
  package (``/whl/cpu/torch/``) whose links point one level up, at the variant's folder;
- ``%2B`` for the ``+`` of local versions in the links, the plain name as the link text;
- a sha256 fragment on release entries, none on nightly entries;
- PEP 658 metadata beside each wheel (``FILE.metadata``, announced by ``data-dist-info-metadata``
  and ``data-core-metadata``);
- a nightly page that lists only the newest ``listed`` builds (PyTorch shows the newest 60), while the
  older files stay reachable at their URLs;
- dates with no build, and a date with two builds (the day the version number moves on).

The wheels: the real local torch 2.13.0 CPU wheel (served from /opt/wheels, never copied), plus small
generated ones. A generated nightly is a shim: its ``torch`` package runs the real torch of the test's
interpreter under the nightly's name, with ``torch.version.git_version`` set to a commit of a small
git repository the test makes, and its behaviour keyed on its date (from ``fixed_from`` on, Dynamo
captures scalar outputs, so a ``Tensor.item()`` graph break is gone). A generated CUDA build is inert:
it only exists so that choosing it would show in the file names.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import http.server
import importlib.util
import os
import sys
import urllib.parse
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from casekit.runners.docker.job_image import write_wheel
from tests.loopback import serve

PLATFORM_TAG = "cp311-cp311-manylinux_2_28_x86_64"
REAL_CPU_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")


@dataclass(frozen=True)
class Wheel:
    """One file the index serves: its variant folder, its name, where its bytes are, its metadata."""

    folder: str  # "cpu", "cu124", "nightly/cpu"
    path: Path
    metadata: bytes
    hashed: bool = True  # a sha256 fragment on its link (PyTorch's nightly links have none)

    @property
    def name(self) -> str:
        return self.path.name


def build_wheel(
    folder: Path, version: str, files: dict[str, str], requires: tuple[str, ...] = ()
) -> tuple[Path, bytes]:
    """A wheel of a package named torch: `files` (path -> text) plus its dist-info; returns (path, METADATA)."""
    dist_info = f"torch-{version}.dist-info"
    metadata = (
        "\n".join(
            ["Metadata-Version: 2.1", "Name: torch", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
        ).encode()
        + b"\n"
    )
    wheel_text = f"Wheel-Version: 1.0\nGenerator: casekit-tests\nRoot-Is-Purelib: false\nTag: {PLATFORM_TAG}\n".encode()
    contents = {name: text.encode() for name, text in files.items()}
    contents[f"{dist_info}/METADATA"] = metadata
    contents[f"{dist_info}/WHEEL"] = wheel_text
    return write_wheel(folder / f"torch-{version}-{PLATFORM_TAG}.whl", contents, dist_info), metadata


def wheel_metadata(path: Path) -> bytes:
    """The METADATA of a wheel on disk (read from the zip, not unpacked)."""
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        return archive.read(name)


SHIM = '''\
"""A test nightly ({version}, built {date}): the real torch at {real!r}, under this build's name."""
import os as _os
import sys as _sys

_REAL = {real!r}
for _site in {sites!r}:  # the real torch's own dependencies (a venv's and the system's site folders)
    if _site not in _sys.path:
        _sys.path.append(_site)
if {fixed!r}:
    _os.environ["TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS"] = "1"  # the behaviour this date has
__file__ = _os.path.join(_REAL, "__init__.py")
__path__ = [_REAL]
with open(__file__, encoding="utf-8") as _handle:
    exec(compile(_handle.read(), __file__, "exec"))
from torch.torch_version import TorchVersion as _TorchVersion

__version__ = _TorchVersion({version!r})
version.__version__ = __version__
version.git_version = {commit!r}
'''


def dependency_sites() -> list[str]:
    """The site folders the real torch and what it imports come from: its own, and every other site folder of
    the interpreter running the tests (a venv that sees the system's holds torch, the system sympy)."""
    own = real_torch()[1]
    return [own] + sorted({p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)} - {own})


def real_torch() -> tuple[str, str]:
    """(the torch package folder, its site folder) of the interpreter running the tests."""
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None, "the tests need torch installed"
    package = os.path.dirname(spec.origin)
    return package, os.path.dirname(package)


@dataclass(frozen=True)
class Nightly:
    """One generated nightly build."""

    date: dt.date
    base: str  # "2.14.0"
    variant: str = "cpu"
    commit: str = "0" * 40

    @property
    def version(self) -> str:
        return f"{self.base}.dev{self.date:%Y%m%d}+{self.variant}"


@dataclass
class TorchIndex:
    """The wheels of a PyTorch-shaped index, and what the server saw requested."""

    root: Path
    wheels: list[Wheel] = field(default_factory=list)
    listed: int = 60  # newest nightly entries a package page shows
    requests: list[str] = field(default_factory=list)
    url: str = ""  # http://127.0.0.1:PORT/whl once serving

    def add_real_cpu_wheel(self, path: Path = REAL_CPU_WHEEL) -> None:
        self.wheels.append(Wheel("cpu", path, wheel_metadata(path)))

    def add_inert(self, folder: str, version: str) -> Wheel:
        """A tiny torch that only names itself (a CUDA build nobody should pick on a CPU host)."""
        target = self.root / folder
        target.mkdir(parents=True, exist_ok=True)
        path, metadata = build_wheel(target, version, {"torch/__init__.py": f"__version__ = {version!r}\n"})
        wheel = Wheel(folder, path, metadata)
        self.wheels.append(wheel)
        return wheel

    def add_nightly(self, build: Nightly, fixed: bool) -> Wheel:
        folder = f"nightly/{build.variant}"
        target = self.root / folder
        target.mkdir(parents=True, exist_ok=True)
        real, _ = real_torch()
        shim = SHIM.format(
            version=build.version,
            date=build.date,
            real=real,
            sites=dependency_sites(),
            fixed=fixed,
            commit=build.commit,
        )
        files = {
            "torch/__init__.py": shim,
            "torch/version.py": f"__version__ = {build.version!r}\ngit_version = {build.commit!r}\n",
        }
        path, metadata = build_wheel(target, build.version, files)
        wheel = Wheel(folder, path, metadata, hashed=False)
        self.wheels.append(wheel)
        return wheel

    # ------------------------------------------------------------ what the server answers

    def page(self, folder: str, package: str) -> bytes | None:
        """The PEP 503 page of `package` in a variant folder (None: 404)."""
        entries = [w for w in self.wheels if w.folder == folder and w.name.split("-", 1)[0] == package]
        if not entries:
            return None
        if folder.startswith("nightly/"):
            entries = sorted(entries, key=lambda w: w.name)[-self.listed :]  # the newest only, as PyTorch shows
        links = []
        for wheel in sorted(entries, key=lambda w: w.name):
            href = f"/whl/{folder}/{urllib.parse.quote(wheel.name)}"
            if wheel.hashed:
                href += f"#sha256={hashlib.sha256(wheel.path.read_bytes()).hexdigest()}"
            meta = f"sha256={hashlib.sha256(wheel.metadata).hexdigest()}"
            links.append(
                f'<a href="{html.escape(href)}" data-dist-info-metadata="{meta}" data-core-metadata="{meta}">'
                f"{html.escape(wheel.name)}</a><br/>"
            )
        body = "<!DOCTYPE html>\n<html>\n<body>\n<h1>Links for torch</h1>\n" + "\n".join(links) + "\n</body>\n</html>\n"
        return body.encode()

    def file(self, folder: str, name: str) -> tuple[bytes | Path, str] | None:
        for wheel in self.wheels:
            if wheel.folder == folder and wheel.name == name:
                return wheel.path, "application/octet-stream"
            if wheel.folder == folder and f"{wheel.name}.metadata" == name:
                return wheel.metadata, "application/octet-stream"
        return None


class _Handler(http.server.BaseHTTPRequestHandler):
    index: TorchIndex

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass

    def _answer(self, body_wanted: bool) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        self.index.requests.append(f"{self.command} {path}")
        parts = [p for p in path.split("/") if p]
        found: tuple[bytes | Path, str] | None = None
        if len(parts) >= 3 and parts[0] == "whl":
            folder_parts, last = parts[1:-1], parts[-1]
            if path.endswith("/"):  # /whl/<folder>/<package>/
                page = self.index.page("/".join(folder_parts), last)
                found = (page, "text/html") if page is not None else None
            else:
                found = self.index.file("/".join(folder_parts), last)
        if found is None:
            self.send_error(404)
            return
        body, kind = found
        size = body.stat().st_size if isinstance(body, Path) else len(body)
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if not body_wanted:
            return
        if isinstance(body, Path):
            with open(body, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    self.wfile.write(chunk)
        else:
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._answer(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(False)


@contextmanager
def serving(index: TorchIndex) -> Iterator[TorchIndex]:
    """Serve `index` on 127.0.0.1 (a free port) in a thread for the block; `index.url` is its /whl root."""
    with serve(type("Handler", (_Handler,), {"index": index})) as host:
        index.url = f"http://{host}/whl"
        yield index


def downloaded(index: TorchIndex) -> list[str]:
    """The wheel files fetched whole (GET), by name: what the installer really chose."""
    return [r.rsplit("/", 1)[1] for r in index.requests if r.startswith("GET ") and r.endswith(".whl")]
