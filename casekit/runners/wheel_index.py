"""Reading a torch index: its PEP 503 page of torch wheels, a folder of wheels, and files below its horizon.

casekit reads PyTorch-shaped indexes itself (not through an installer) to know
which nightlies exist and on which date, which release a prefix means there,
and whether a build the listing no longer shows is still at its URL. HTTP(S)
with the host's CA bundle (networks that intercept TLS), ``file://`` URLs and
plain folders of wheels (``--find-links``) are read alike.
"""

from __future__ import annotations

import datetime as dt
import functools
import html.parser
import os
import ssl
import urllib.error
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from casekit import settings
from casekit.errors import EnvironmentFailed
from casekit.runners.channels import (
    Build,
    DatedBuild,
    build_from_filename,
    by_date,
    hidden_candidate,
    installable,
    pick_of_day,
)
from casekit.runners.index_fetch import Answer, AnswerTooLarge, fetch

TIMEOUT_S = 30.0  # each wait for the index
DEADLINE_S = 300.0  # a whole read: PyTorch's page is a few MB; a byte every few seconds is no index
MAX_PAGE_BYTES = 64 << 20  # PyTorch's torch page is a few MB; more is not an index page
HIDDEN_LOOKBACK_DAYS = 7  # how far `nightly:DATE` steps back below the horizon to find a build


class IndexUnreachable(EnvironmentFailed):
    """The index cannot be read at all (no route, no name, refused, timed out): another source may do."""


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def parse_page(text: str, page_url: str) -> list[Build]:
    """The torch wheels a PEP 503 page links to, their URLs absolute (fragments dropped, `%2B` kept)."""
    parser = _Links()
    parser.feed(text)
    builds = []
    for href, link_text in parser.links:
        url = urllib.parse.urljoin(page_url, href).split("#", 1)[0]
        name = urllib.parse.unquote(url.rsplit("/", 1)[-1]) or link_text
        build = build_from_filename(name, url)
        if build is not None:
            builds.append(build)
    return builds


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    bundle = settings.host_ca_bundle()
    return ssl.create_default_context(cafile=str(bundle) if bundle else None)


def _fetch(url: str, method: str, timeout: float, deadline: float, limit: int = MAX_PAGE_BYTES) -> Answer:
    context = _ssl_context() if url.startswith("https:") else None
    return fetch(url, deadline_s=deadline, limit=limit, timeout_s=timeout, method=method, context=context)


def _local_folder(location: str) -> Path | None:
    if location.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(location).path))
    if "://" not in location:
        return Path(location)
    return None


@dataclass
class Listing:
    """The torch builds one index (or folder) lists, and where it was read."""

    location: str
    builds: list[Build] = field(default_factory=list)

    def installable(self, python_version: str) -> list[Build]:
        return installable(self.builds, python_version)


def read_listing(location: str, timeout: float = TIMEOUT_S, deadline: float = DEADLINE_S) -> Listing:
    """The torch builds at `location`: an index's ``/torch/`` page, or a folder of wheels.

    IndexUnreachable when nothing answers there, or not all of it within `deadline` seconds;
    EnvironmentFailed for an answer that is not a listing."""
    folder = _local_folder(location)
    if folder is not None:
        try:
            names = sorted(os.listdir(folder))
        except OSError as error:
            raise IndexUnreachable(f"cannot read the wheel folder {folder}: {error.strerror or error}") from None
        builds = [build_from_filename(name, (folder / name).as_uri()) for name in names if name.endswith(".whl")]
        return Listing(location, [b for b in builds if b is not None])
    page = location.rstrip("/") + "/torch/"
    try:
        body = _fetch(page, "GET", timeout, deadline).body
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return Listing(location, [])  # the index has no torch at all
        raise EnvironmentFailed(f"cannot read {page}: HTTP {error.code} {error.reason}") from None
    except AnswerTooLarge:
        raise EnvironmentFailed(f"{page} is larger than {MAX_PAGE_BYTES >> 20} MB: not an index page") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise IndexUnreachable(f"cannot reach {page}: {reason}") from None
    return Listing(location, parse_page(body.decode("utf-8", "replace"), page))


def exists(url: str, timeout: float = TIMEOUT_S, deadline: float = TIMEOUT_S) -> bool:
    """Whether a file is at `url` (HEAD, answered within `deadline` seconds; a local path: stat)."""
    folder = _local_folder(url)
    if folder is not None:
        return folder.is_file()
    try:
        return 200 <= _fetch(url, "HEAD", timeout, deadline, limit=0).status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


Exists = Callable[[str], bool]


def _horizon_template(builds: Sequence[Build]) -> Build | None:
    """The oldest listed nightly: the pattern of the names below the listing's horizon."""
    dated = [b for b in builds if b.date is not None]
    return min(dated, key=lambda b: (b.date, b.version)) if dated else None


def nightly_on(
    builds: Sequence[Build], asked: dt.date | None, *, exists: Exists = exists, lookback: int = HIDDEN_LOOKBACK_DAYS
) -> DatedBuild:
    """The nightly a date stands for (None: the newest): that day's build, else the newest before it.

    A date below the listing's horizon is looked for by its URL, stepping back a day at a time
    (`lookback` days at most). EnvironmentFailed, in one line, when none is found."""
    days = by_date(builds)
    if not days:
        raise EnvironmentFailed("the index lists no nightly torch build this interpreter can install")
    if asked is None:
        newest = max(days)
        chosen, notes = pick_of_day(days[newest], newest)
        return DatedBuild(chosen, newest, notes)
    if asked in days:
        chosen, notes = pick_of_day(days[asked], asked)
        return DatedBuild(chosen, asked, notes)
    horizon = min(days)
    if asked > horizon:
        before = max(day for day in days if day < asked) if any(day < asked for day in days) else horizon
        chosen, notes = pick_of_day(days[before], before)
        return DatedBuild(chosen, asked, (f"no nightly on {asked}: taking {before}'s, the newest before it", *notes))
    template = _horizon_template(builds)
    assert template is not None
    for back in range(lookback + 1):
        day = asked - dt.timedelta(days=back)
        candidate = hidden_candidate(template, day)
        if exists(candidate.url):
            notes = (f"{day}'s nightly is below the index listing's horizon ({horizon}): fetched by its URL",)
            if back:
                notes = (f"no nightly on {asked}: taking {day}'s, the newest before it", *notes)
            return DatedBuild(candidate, asked, notes)
    raise EnvironmentFailed(
        f"no nightly found on or up to {lookback} days before {asked}: the listing starts at {horizon}, "
        f"and {hidden_candidate(template, asked).filename} is not at its URL either"
    )


def nightly_range(
    builds: Sequence[Build], good: dt.date, bad: dt.date, *, exists: Exists = exists
) -> tuple[list[Build], list[str]]:
    """The nightlies from `good` to `bad` (oldest first, one per date) for a bisection, and what was done.

    An end with no build rolls inward to the nearest build inside the range, and says so. Dates below
    the listing's horizon are looked for by their URLs (one HEAD each)."""
    if not good < bad:
        raise EnvironmentFailed(f"the good date {good} must be before the bad date {bad}")
    days = by_date(builds)
    if not days:
        raise EnvironmentFailed("the index lists no nightly torch build this interpreter can install")
    notes: list[str] = []
    horizon = min(days)
    template = _horizon_template(builds)
    assert template is not None
    hidden_found = []
    day = good
    while day < horizon and day <= bad:
        candidate = hidden_candidate(template, day)
        if exists(candidate.url):
            days[day] = [candidate]
            hidden_found.append(day)
        day += dt.timedelta(days=1)
    if hidden_found:
        notes.append(
            f"{len(hidden_found)} nightly(ies) below the index listing's horizon ({horizon}) found by their URLs: "
            f"{hidden_found[0]} … {hidden_found[-1]}"
        )
    inside = sorted(day for day in days if good <= day <= bad)
    if len(inside) < 2:
        raise EnvironmentFailed(f"fewer than two nightlies between {good} and {bad}: nothing to bisect")
    if inside[0] != good:
        notes.append(f"no nightly on {good} (good end): starting from {inside[0]}, the first after it")
    if inside[-1] != bad:
        notes.append(f"no nightly on {bad} (bad end): ending at {inside[-1]}, the last before it")
    chosen = []
    for day in inside:
        build, day_notes = pick_of_day(days[day], day)
        chosen.append(build)
        notes += day_notes
    return chosen, notes
