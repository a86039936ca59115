"""Which versions of a package the configured index holds, read without pip.

A `uv tool install` or `pipx` environment has no pip, so `pip index versions`
is not there to ask. This module reads the same configuration pip and uv read
(their config files and environment variables: index URL, extra index URLs,
find-links, the TLS CA bundle, a proxy) and asks each index itself, through
the simple repository API: PEP 691 JSON where the index speaks it, PEP 503
HTML otherwise, a local folder for find-links. Like pip, it keeps only files
this interpreter could install (wheel tags, Requires-Python) and skips yanked
files and, unless asked, pre-releases.
"""

from __future__ import annotations

import configparser
import os
import re
import ssl
import sys
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import sys_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from casekit.errors import CasekitError
from casekit.fsutil import UnreadableFile, loads_bounded, read_regular_bytes
from casekit.runners.index_fetch import fetch
from casekit.settings import CA_BUNDLE_ENV

PYPI_SIMPLE = "https://pypi.org/simple/"
DEADLINE_S = 300.0  # a whole page, however slowly it drips
MAX_PAGE_BYTES = 64 << 20  # PyPI's largest project pages are a few MB
MAX_CONFIG_BYTES = 1 << 20  # pip.conf, uv.toml
MAX_JSON_DEPTH = 16  # PEP 691 pages nest 4 levels
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


class IndexUnreadable(CasekitError):
    """No configured index could be read."""


@dataclass(frozen=True)
class IndexConfig:
    """Where to look and how to connect, as pip (then uv) is configured."""

    index_url: str = PYPI_SIMPLE
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    cert: str | None = None  # a CA bundle (pip's `cert`, uv's SSL_CERT_FILE)
    proxy: str | None = None  # pip's `proxy`; the usual *_proxy variables apply otherwise
    sources: tuple[str, ...] = field(default=(), compare=False)  # the files and variables read, for messages

    @property
    def indexes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.index_url, *self.extra_index_urls)))


def _words(value: str) -> list[str]:
    return [word for word in re.split(r"\s+", value.strip()) if word]


def _pip_config_files(environ: os._Environ[str] | dict[str, str]) -> list[Path]:
    """pip's configuration files, lowest priority first (global, user, site, then PIP_CONFIG_FILE)."""
    explicit = environ.get("PIP_CONFIG_FILE")
    if explicit == os.devnull:
        return []
    xdg_dirs = environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(folder) / "pip" / "pip.conf" for folder in reversed(xdg_dirs) if folder]
    files.append(Path("/etc/pip.conf"))
    home = Path(environ.get("HOME", str(Path.home())))
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(environ.get("XDG_CONFIG_HOME", str(home / ".config"))) / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")
    if explicit:
        files.append(Path(explicit))
    return files


def _uv_config_files(environ: os._Environ[str] | dict[str, str]) -> list[Path]:
    """uv's uv.toml files, lowest priority first (system, then user)."""
    if environ.get("UV_NO_CONFIG"):
        return []
    if environ.get("UV_CONFIG_FILE"):
        return [Path(environ["UV_CONFIG_FILE"])]
    xdg_dirs = environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(folder) / "uv" / "uv.toml" for folder in reversed(xdg_dirs) if folder]
    files.append(Path("/etc/uv/uv.toml"))
    home = Path(environ.get("HOME", str(Path.home())))
    files.append(Path(environ.get("XDG_CONFIG_HOME", str(home / ".config"))) / "uv" / "uv.toml")
    return files


def _config_text(path: Path) -> str:
    """A configuration file's text: a regular file (a FIFO named PIP_CONFIG_FILE would hang a read),
    through a link as the user's own files may be, at most MAX_CONFIG_BYTES."""
    return read_regular_bytes(path, MAX_CONFIG_BYTES, follow_symlinks=True).decode("utf-8")


def _pip_settings(env: os._Environ[str] | dict[str, str], sources: list[str]) -> dict[str, str]:
    """pip's index settings from its files then its variables; each file or variable read joins `sources`."""
    pip: dict[str, str] = {}
    for path in _pip_config_files(env):
        parser = configparser.RawConfigParser()
        try:
            parser.read_string(_config_text(path), str(path))
        except (configparser.Error, UnicodeDecodeError, OSError, UnreadableFile):
            continue  # absent; or pip refuses such a file itself, and listing versions is not the place to say so
        sources.append(str(path))
        for section in ("global", "index", "install"):
            if parser.has_section(section):
                pip.update({key: value for key, value in parser.items(section)})
    for key in ("index-url", "extra-index-url", "find-links", "cert", "proxy"):
        variable = "PIP_" + key.upper().replace("-", "_")
        if env.get(variable):
            pip[key] = env[variable]
            sources.append(variable)
    return pip


def read_config(
    environ: os._Environ[str] | dict[str, str] | None = None, *, index_url: str | None = None
) -> IndexConfig:
    """The index configuration pip would use, with uv's filling what pip leaves unset.

    The CA bundle is casekit's own ($CASEKIT_CA_BUNDLE, as for docker builds), else pip's
    `cert`, else SSL_CERT_FILE / REQUESTS_CA_BUNDLE; `index_url` (bisect --index-url)
    replaces the default index only, as pip's --index-url does.

    pip's settings win where both name a default index (casekit's venv runner
    installs with uv when it can, which reads both the same way here); extra
    indexes and find-links of both are all asked, as each installer would.
    """
    env = os.environ if environ is None else environ
    sources: list[str] = []
    pip = _pip_settings(env, sources)

    uv: dict[str, Any] = {}  # uv.toml, as parsed
    for path in _uv_config_files(env):
        try:
            uv.update(tomllib.loads(_config_text(path)))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, UnreadableFile, RecursionError):
            continue
        sources.append(str(path))
    uv_default: str | None = None
    uv_extra: list[str] = []
    for entry in uv.get("index", []) if isinstance(uv.get("index"), list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            if entry.get("default"):
                uv_default = entry["url"]
            else:
                uv_extra.append(entry["url"])
    if isinstance(uv.get("index-url"), str):
        uv_default = str(uv["index-url"])
    if isinstance(uv.get("extra-index-url"), list):
        uv_extra += [str(url) for url in uv["extra-index-url"]]
    uv_links = [str(link) for link in uv.get("find-links", [])] if isinstance(uv.get("find-links"), list) else []
    for variable in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        if env.get(variable):
            uv_default = env[variable]
            sources.append(variable)
    for variable in ("UV_INDEX", "UV_EXTRA_INDEX_URL"):
        if env.get(variable):
            # UV_INDEX entries may be named: "name=https://..."
            uv_extra += [re.sub(r"^[\w.-]+=(?=\w+:)", "", word) for word in _words(env[variable])]
            sources.append(variable)
    if env.get("UV_FIND_LINKS"):
        uv_links += [link for link in re.split(r"[\s,]+", env["UV_FIND_LINKS"]) if link]
        sources.append("UV_FIND_LINKS")

    default = index_url or pip.get("index-url", "").strip() or uv_default or PYPI_SIMPLE
    extras = [*_words(pip.get("extra-index-url", "")), *uv_extra]  # --index-url keeps them, as pip's does
    links = [*_words(pip.get("find-links", "")), *uv_links]
    cert = (
        env.get(CA_BUNDLE_ENV)
        or pip.get("cert", "").strip()
        or env.get("SSL_CERT_FILE")
        or env.get("REQUESTS_CA_BUNDLE")
    ) or None
    return IndexConfig(
        index_url=default.strip(),
        extra_index_urls=tuple(dict.fromkeys(url.strip() for url in extras if url.strip() != default.strip())),
        find_links=tuple(dict.fromkeys(links)),
        cert=cert,
        proxy=pip.get("proxy", "").strip() or None,
        sources=tuple(sources),
    )


class _Links(HTMLParser):
    """The anchors of a PEP 503 page (or a find-links page): (file name, yanked)."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, bool, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "a":
            return
        values = dict(attrs)
        href = values.get("href") or ""
        name = urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1])
        if name:
            self.files.append((name, "data-yanked" in values, values.get("data-requires-python")))


def _read(url: str, config: IndexConfig, timeout: float, deadline: float) -> tuple[str, str]:
    """(content type, text) of an index page, all of it within `deadline` seconds and MAX_PAGE_BYTES;
    a file: URL to a folder reads its index.html."""
    context = ssl.create_default_context(cafile=config.cert) if config.cert else ssl.create_default_context()
    answer = fetch(
        url,
        deadline_s=deadline,
        limit=MAX_PAGE_BYTES,
        timeout_s=timeout,
        headers={"Accept": _ACCEPT},
        context=context,
        proxy=config.proxy,
    )
    try:
        return answer.content_type, answer.body.decode(answer.charset or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return answer.content_type, answer.body.decode("utf-8", "replace")


def _project_files(
    index: str, package: str, config: IndexConfig, timeout: float, deadline: float
) -> list[tuple[str, bool, str | None]]:
    url = index.rstrip("/") + "/" + canonicalize_name(package) + "/"
    content_type, text = _read(url, config, timeout, deadline)
    if content_type == "application/vnd.pypi.simple.v1+json":
        document = loads_bounded(text, MAX_JSON_DEPTH)
        files = document.get("files") if isinstance(document, dict) else None
        if not isinstance(files, list):
            raise ValueError(f"{url}: a PEP 691 page without a list of files")
        return [
            (str(entry.get("filename", "")), bool(entry.get("yanked")), _text(entry.get("requires-python")))
            for entry in files
            if isinstance(entry, dict)
        ]
    parser = _Links()
    parser.feed(text)
    return parser.files


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _link_files(link: str, config: IndexConfig, timeout: float, deadline: float) -> list[tuple[str, bool, str | None]]:
    """A find-links entry: a local folder (or file: URL to one), or an HTML page of links."""
    path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(link).path)) if link.startswith("file:") else None
    if path is None and "://" not in link:
        path = Path(link)
    if path is not None:
        if path.is_dir():
            return [(entry.name, False, None) for entry in path.iterdir()]
        raise OSError(f"{path} is not a folder")
    _, text = _read(link, config, timeout, deadline)
    parser = _Links()
    parser.feed(text)
    return parser.files


def installable_versions(files: Iterable[tuple[str, bool, str | None]], package: str, *, pre: bool = False) -> set[str]:
    """The versions among file names that this interpreter could install (pip's view of `index versions`)."""
    tags = set(sys_tags())
    python = Version(".".join(str(part) for part in sys.version_info[:3]))
    wanted = canonicalize_name(package)
    found: set[str] = set()
    for name, yanked, requires_python in files:
        if yanked:
            continue
        try:
            if name.endswith(".whl"):
                project, version, _, file_tags = parse_wheel_filename(name)
                if tags.isdisjoint(file_tags):
                    continue
            elif name.endswith((".tar.gz", ".zip")):
                project, version = parse_sdist_filename(name)
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
        if project != wanted or (version.is_prerelease and not pre):
            continue
        try:
            if requires_python and python not in SpecifierSet(requires_python):
                continue
        except InvalidSpecifier:
            pass  # pip ignores a malformed Requires-Python too
        found.add(str(version))
    return found


def list_versions(
    package: str,
    *,
    pre: bool = False,
    index_url: str | None = None,
    timeout: float = 120,
    config: IndexConfig | None = None,
    deadline: float = DEADLINE_S,
) -> list[str]:
    """Every installable version the configured indexes and find-links hold (unordered strings).

    `timeout` bounds each wait, `deadline` each whole page. An index that cannot be read is skipped
    when another answered; when none did, IndexUnreadable says which were asked and why each failed.
    """
    config = config or read_config(index_url=index_url)
    found: set[str] = set()
    failures: list[str] = []
    answered = 0
    for source, reader in [
        *(
            (index, lambda where=index: _project_files(where, package, config, timeout, deadline))
            for index in config.indexes
        ),
        *((link, lambda where=link: _link_files(where, config, timeout, deadline)) for link in config.find_links),
    ]:
        try:
            files = reader()
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "reason", None) or exc
            failures.append(f"{source}: {reason}")
            continue
        answered += 1
        found |= installable_versions(files, package, pre=pre)
    if not answered:
        raise IndexUnreadable("; ".join(failures) or "no index configured")
    if not found:
        asked = ", ".join([*config.indexes, *config.find_links])
        raise IndexUnreadable(f"no installable {package} release on {asked}")
    return sorted(found)
