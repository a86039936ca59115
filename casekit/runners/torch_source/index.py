"""The one reader of package indexes: which wheels an index, a find-links folder or page lists.

casekit reads indexes itself in two places: a PyTorch-shaped index of a channel and variant (which
build a prefix, a date or "latest" means there, and whether a build the listing no longer shows is
still at its URL), and the configured indexes when a bisection lists the releases between its ends
(a `uv tool` or `pipx` install has no pip to ask). Both go through here, with one configuration,
read as pip and uv read theirs (index URL, extra index URLs, find-links, the TLS CA bundle, a proxy):
the simple repository API, PEP 691 JSON where the index speaks it, PEP 503 HTML otherwise, a local
folder for find-links. Every read is bounded as a whole (`casekit.runners.index_fetch`: a deadline and
a size cap; `file:` URLs and config files are regular files only).
"""

from __future__ import annotations

import configparser
import os
import re
import ssl
import sys
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from casekit import settings
from casekit.errors import EnvironmentFailed
from casekit.fsutil import UnreadableFile, loads_bounded, read_regular_bytes
from casekit.runners.index_fetch import Answer, AnswerTooLarge, fetch
from casekit.runners.torch_source.builds import Build, build_from_filename, installable

PYPI_SIMPLE = "https://pypi.org/simple/"
TIMEOUT_S = 30.0  # each wait for the index
DEADLINE_S = 300.0  # a whole page, however slowly it drips: PyTorch's torch page is a few MB
MAX_PAGE_BYTES = 64 << 20  # PyPI's and PyTorch's largest project pages are a few MB
MAX_CONFIG_BYTES = 1 << 20  # pip.conf, uv.toml
MAX_JSON_DEPTH = 16  # PEP 691 pages nest 4 levels
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


class IndexUnreadable(EnvironmentFailed):
    """An index answered, but not with a listing (an error status, too large, malformed); or, from
    `list_versions`, no configured index could be read."""


class IndexUnreachable(IndexUnreadable):
    """Nothing answered (no route, no name, refused) or not all of it in time: another source may do."""


# ------------------------------------------------------------------ the configuration pip and uv read


@dataclass(frozen=True)
class IndexConfig:
    """Where to look and how to connect, as pip (then uv) is configured."""

    index_url: str = PYPI_SIMPLE
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    cert: str | None = None  # a CA bundle ($CASEKIT_CA_BUNDLE, pip's `cert`, SSL_CERT_FILE, REQUESTS_CA_BUNDLE)
    proxy: str | None = None  # pip's `proxy`; the usual *_proxy variables apply otherwise
    sources: tuple[str, ...] = field(default=(), compare=False)  # the files and variables read, for messages

    @property
    def indexes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.index_url, *self.extra_index_urls)))

    def tls(self) -> ssl.SSLContext:
        """The TLS context of every read: the configured CA bundle, else the one this host trusts."""
        bundle = self.cert or settings.host_ca_bundle()
        return ssl.create_default_context(cafile=str(bundle) if bundle else None)


Environ = os._Environ[str] | dict[str, str]


def _words(value: str) -> list[str]:
    return [word for word in re.split(r"\s+", value.strip()) if word]


def _pip_config_files(environ: Environ) -> list[Path]:
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


def _uv_config_files(environ: Environ) -> list[Path]:
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


def _pip_settings(env: Environ, sources: list[str]) -> dict[str, str]:
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


def _uv_settings(env: Environ, sources: list[str]) -> tuple[str | None, list[str], list[str]]:
    """uv's default index, extra indexes and find-links, from its files then its variables."""
    uv: dict[str, Any] = {}  # uv.toml, as parsed
    for path in _uv_config_files(env):
        try:
            uv.update(tomllib.loads(_config_text(path)))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, UnreadableFile, RecursionError):
            continue
        sources.append(str(path))
    default: str | None = None
    extra: list[str] = []
    for entry in uv.get("index", []) if isinstance(uv.get("index"), list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            if entry.get("default"):
                default = entry["url"]
            else:
                extra.append(entry["url"])
    if isinstance(uv.get("index-url"), str):
        default = str(uv["index-url"])
    if isinstance(uv.get("extra-index-url"), list):
        extra += [str(url) for url in uv["extra-index-url"]]
    links = [str(link) for link in uv.get("find-links", [])] if isinstance(uv.get("find-links"), list) else []
    for variable in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        if env.get(variable):
            default = env[variable]
            sources.append(variable)
    for variable in ("UV_INDEX", "UV_EXTRA_INDEX_URL"):
        if env.get(variable):
            # UV_INDEX entries may be named: "name=https://..."
            extra += [re.sub(r"^[\w.-]+=(?=\w+:)", "", word) for word in _words(env[variable])]
            sources.append(variable)
    if env.get("UV_FIND_LINKS"):
        links += [link for link in re.split(r"[\s,]+", env["UV_FIND_LINKS"]) if link]
        sources.append("UV_FIND_LINKS")
    return default, extra, links


def read_config(environ: Environ | None = None, *, index_url: str | None = None) -> IndexConfig:
    """The index configuration pip would use, with uv's filling what pip leaves unset.

    The CA bundle is casekit's own ($CASEKIT_CA_BUNDLE, as for docker builds), else pip's
    `cert`, else SSL_CERT_FILE / REQUESTS_CA_BUNDLE; `index_url` (bisect --index-url)
    replaces the default index only, as pip's --index-url does.

    pip's settings win where both name a default index; extra indexes and find-links of both are all
    asked, as each installer would.
    """
    env = os.environ if environ is None else environ
    sources: list[str] = []
    pip = _pip_settings(env, sources)
    uv_default, uv_extra, uv_links = _uv_settings(env, sources)
    default = index_url or pip.get("index-url", "").strip() or uv_default or PYPI_SIMPLE
    extras = [*_words(pip.get("extra-index-url", "")), *uv_extra]  # --index-url keeps them, as pip's does
    links = [*_words(pip.get("find-links", "")), *uv_links]
    cert = (
        env.get(settings.CA_BUNDLE_ENV)
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


# ------------------------------------------------------------------ pages


class _Links(HTMLParser):
    """The anchors of a PEP 503 page or a find-links page: (absolute URL, link text, yanked, Requires-Python)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, bool, str | None]] = []
        self._open: tuple[str, bool, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            values = dict(attrs)
            self._open = (values.get("href") or "", "data-yanked" in values, values.get("data-requires-python"))
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            href, yanked, requires = self._open
            self.links.append((href, "".join(self._text).strip(), yanked, requires))
            self._open = None

    def close(self) -> None:
        super().close()
        self.handle_endtag("a")  # an anchor the page never closed still names a file


def parse_page(text: str, page_url: str, package: str = "torch") -> list[Build]:
    """The wheels of `package` a PEP 503 page (or a page of links) links to, their URLs absolute
    (fragments dropped, `%2B` kept)."""
    parser = _Links()
    parser.feed(text)
    parser.close()
    builds = []
    for href, link_text, yanked, requires in parser.links:
        url = urllib.parse.urljoin(page_url, href).split("#", 1)[0]
        name = urllib.parse.unquote(url.rsplit("/", 1)[-1]) or link_text
        build = build_from_filename(name, url, package=package, yanked=yanked, requires_python=requires)
        if build is not None:
            builds.append(build)
    return builds


def _parse_json_page(text: str, page_url: str, package: str) -> list[Build]:
    document = loads_bounded(text, MAX_JSON_DEPTH)
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, list):
        raise IndexUnreadable(f"{page_url}: a PEP 691 page without a list of files")
    builds = []
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
            continue
        url = entry.get("url") if isinstance(entry.get("url"), str) else entry["filename"]
        requires = entry.get("requires-python")
        build = build_from_filename(
            entry["filename"],
            urllib.parse.urljoin(page_url, url).split("#", 1)[0],
            package=package,
            yanked=bool(entry.get("yanked")),
            requires_python=requires if isinstance(requires, str) else None,
        )
        if build is not None:
            builds.append(build)
    return builds


def _fetch(
    url: str, config: IndexConfig, *, method: str = "GET", timeout: float, deadline: float, limit: int
) -> Answer:
    """One bounded read; IndexUnreachable when nothing (or not all of it) came, IndexUnreadable for an
    answer that is no listing, urllib's HTTPError for an error status (the caller decides about 404)."""
    context = config.tls() if url.startswith("https:") else None
    try:
        return fetch(
            url,
            deadline_s=deadline,
            limit=limit,
            timeout_s=timeout,
            method=method,
            headers={"Accept": _ACCEPT},
            context=context,
            proxy=config.proxy,
        )
    except urllib.error.HTTPError:
        raise
    except AnswerTooLarge:
        raise IndexUnreadable(f"{url}: the answer is larger than {limit} bytes: not an index page") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        raise IndexUnreachable(f"cannot reach {url}: {reason}") from None


def _text_of(answer: Answer) -> str:
    try:
        return answer.body.decode(answer.charset or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return answer.body.decode("utf-8", "replace")


def _local_folder(location: str) -> Path | None:
    if location.startswith("file:"):
        return Path(urllib.request.url2pathname(urllib.parse.urlsplit(location).path))
    if "://" not in location:
        return Path(location)
    return None


def project_builds(
    index: str, package: str, config: IndexConfig, *, timeout: float = TIMEOUT_S, deadline: float = DEADLINE_S
) -> list[Build]:
    """The wheels of `package` on an index's project page (`<index>/<package>/`); none when it has no such page."""
    page = index.rstrip("/") + "/" + canonicalize_name(package) + "/"
    try:
        answer = _fetch(page, config, timeout=timeout, deadline=deadline, limit=MAX_PAGE_BYTES)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return []  # the index has no such project at all
        raise IndexUnreadable(f"cannot read {page}: HTTP {error.code} {error.reason}") from None
    if answer.content_type == "application/vnd.pypi.simple.v1+json":
        try:
            return _parse_json_page(_text_of(answer), page, package)
        except ValueError as error:  # malformed or too deeply nested JSON
            raise IndexUnreadable(f"{page}: {error}") from None
    return parse_page(_text_of(answer), page, package)


def link_builds(
    link: str, package: str, config: IndexConfig, *, timeout: float = TIMEOUT_S, deadline: float = DEADLINE_S
) -> list[Build]:
    """The wheels of `package` at a find-links location: a local folder (or file: URL to one), or a page of links."""
    folder = _local_folder(link)
    if folder is not None:
        try:
            names = sorted(os.listdir(folder))
        except OSError as error:
            raise IndexUnreachable(f"cannot read the wheel folder {folder}: {error.strerror or error}") from None
        found = (build_from_filename(name, (folder / name).as_uri(), package=package) for name in names)
        return [build for build in found if build is not None]
    try:
        answer = _fetch(link, config, timeout=timeout, deadline=deadline, limit=MAX_PAGE_BYTES)
    except urllib.error.HTTPError as error:
        raise IndexUnreadable(f"cannot read {link}: HTTP {error.code} {error.reason}") from None
    return parse_page(_text_of(answer), link, package)


@dataclass
class Listing:
    """The builds one index (or find-links location) lists, and where it was read."""

    location: str
    builds: list[Build] = field(default_factory=list)

    def installable(self, python_version: str) -> list[Build]:
        return installable(self.builds, python_version)


def read_listing(
    location: str,
    *,
    links: bool = False,
    package: str = "torch",
    config: IndexConfig | None = None,
    timeout: float = TIMEOUT_S,
    deadline: float = DEADLINE_S,
) -> Listing:
    """The builds of `package` at `location`: an index's project page, or (`links`, or a local folder) a
    find-links location. IndexUnreachable when nothing answers there in time, IndexUnreadable for an
    answer that is no listing."""
    config = config or read_config()
    if links or _local_folder(location) is not None:
        return Listing(location, link_builds(location, package, config, timeout=timeout, deadline=deadline))
    return Listing(location, project_builds(location, package, config, timeout=timeout, deadline=deadline))


def exists(url: str, timeout: float = TIMEOUT_S, deadline: float = TIMEOUT_S) -> bool:
    """Whether a file is at `url` (HEAD, answered within `deadline` seconds; a local path: stat)."""
    folder = _local_folder(url)
    if folder is not None:
        return folder.is_file()
    try:
        return (
            200 <= _fetch(url, read_config(), method="HEAD", timeout=timeout, deadline=deadline, limit=0).status < 300
        )
    except (urllib.error.HTTPError, IndexUnreadable):
        return False


def list_versions(
    package: str,
    *,
    python_version: str | None = None,
    pre: bool = False,
    index_url: str | None = None,
    timeout: float = 120,
    config: IndexConfig | None = None,
    deadline: float = DEADLINE_S,
) -> list[str]:
    """Every version of `package` the configured indexes and find-links hold that an interpreter of
    `python_version` (default: this one) could install (unordered strings).

    `timeout` bounds each wait, `deadline` each whole page. An index that cannot be read is skipped
    when another answered; when none did, IndexUnreadable says which were asked and why each failed.
    """
    config = config or read_config(index_url=index_url)
    python = python_version or ".".join(str(part) for part in sys.version_info[:3])
    found: set[str] = set()
    failures: list[str] = []
    answered = 0
    sources = [(index, False) for index in config.indexes] + [(link, True) for link in config.find_links]
    for source, is_link in sources:
        reader = link_builds if is_link else project_builds
        try:
            builds = reader(source, package, config, timeout=timeout, deadline=deadline)
        except IndexUnreadable as error:
            failures.append(str(error) if source in str(error) else f"{source}: {error}")
            continue
        answered += 1
        found |= {str(b.version) for b in installable(builds, python) if pre or not b.version.is_prerelease}
    if not answered:
        raise IndexUnreadable("; ".join(failures) or "no index configured")
    if not found:
        asked = ", ".join([*config.indexes, *config.find_links])
        raise IndexUnreadable(f"no installable {package} release on {asked}")
    return sorted(found)
