"""The wheels an index lists, and which of them an interpreter can install here.

One filter serves every listing casekit reads (PyTorch's pages, PyPI, find-links): a wheel whose
tags the target interpreter's version installs on this machine, whose Requires-Python admits it, and
that is not yanked. Only wheels: casekit installs with `--only-binary :all:` (building an sdist runs
its code on the host), so a version with no wheel is no candidate either.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from casekit.runners.torch_source.request import nightly_date, version_or_none


@dataclass(frozen=True, order=True)
class Build:
    """One wheel an index lists (or would, were it not hidden): its version, tags and where it is."""

    version: Version
    filename: str = field(compare=False)
    url: str = field(compare=False)
    tags: frozenset[Tag] = field(compare=False, repr=False, default=frozenset())
    listed: bool = field(compare=False, default=True)  # False: found by its URL below the listing's horizon
    yanked: bool = field(compare=False, default=False)
    requires_python: str | None = field(compare=False, default=None)

    @property
    def public(self) -> str:
        """The version without its build label: '2.14.0.dev20260105'."""
        return self.version.public

    @property
    def date(self) -> dt.date | None:
        """The date of a nightly ('2.14.0.dev20260105' -> 2026-01-05); None for a release."""
        return nightly_date(str(self.version))


def build_from_filename(
    filename: str,
    url: str,
    listed: bool = True,
    *,
    package: str = "torch",
    yanked: bool = False,
    requires_python: str | None = None,
) -> Build | None:
    """A wheel of `package` as a Build; None for anything else (sdists, other packages, odd names)."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    if name != canonicalize_name(package):
        return None
    return Build(version, filename, url, frozenset(tags), listed, yanked, requires_python)


@functools.cache
def target_tags(python_version: str) -> frozenset[Tag]:
    """The wheel tags an interpreter of that version installs on this machine ('3.11')."""
    major, minor = (int(part) for part in python_version.split(".")[:2])
    platforms = list(platform_tags())
    found = set(cpython_tags((major, minor), platforms=platforms))
    found |= set(compatible_tags((major, minor), f"cp{major}{minor}", platforms))
    return frozenset(found)


def _python_admitted(requires_python: str | None, python_version: str) -> bool:
    python = version_or_none(python_version)
    if not requires_python or python is None:
        return True
    try:
        return SpecifierSet(requires_python).contains(python, prereleases=True)
    except InvalidSpecifier:
        return True  # pip ignores a malformed Requires-Python too


def installable(builds: Iterable[Build], python_version: str) -> list[Build]:
    """The builds an interpreter of that version ('3.11', '3.11.7') can install here, oldest first."""
    wanted = target_tags(python_version)
    return sorted(
        build
        for build in builds
        if build.tags & wanted and not build.yanked and _python_admitted(build.requires_python, python_version)
    )


# ------------------------------------------------------------------ nightlies by date


@dataclass(frozen=True)
class DatedBuild:
    """The build a date stands for, and what was done to find it (one line each, for the user)."""

    build: Build
    asked: dt.date
    notes: tuple[str, ...] = ()

    @property
    def date(self) -> dt.date:
        date = self.build.date
        assert date is not None
        return date


def by_date(builds: Iterable[Build]) -> dict[dt.date, list[Build]]:
    """Nightlies grouped by their date, each group oldest version first."""
    grouped: dict[dt.date, list[Build]] = {}
    for build in sorted(builds):
        if build.date is not None:
            grouped.setdefault(build.date, []).append(build)
    return grouped


def pick_of_day(day: list[Build], date: dt.date) -> tuple[Build, tuple[str, ...]]:
    """The build of one date: the highest version when the version moved on that day, and say so."""
    chosen = max(day)
    if len({b.public for b in day}) > 1:
        others = ", ".join(sorted({b.public for b in day} - {chosen.public}))
        return chosen, (f"{date}: two nightlies that day; taking {chosen.public} (not {others})",)
    return chosen, ()


def hidden_candidate(template: Build, date: dt.date) -> Build:
    """The build a date would have under the listing's horizon: the oldest listed build's name, that date.

    PyTorch's index lists only the newest 60 files of a package; older ones stay at their URLs, under
    names that follow the same pattern (base version, build label, tags)."""
    version = template.version
    local = f"+{version.local}" if version.local else ""
    text = f"{'.'.join(str(p) for p in version.release)}.dev{date:%Y%m%d}{local}"
    name, _old, rest = template.filename.split("-", 2)
    filename = f"{name}-{text}-{rest}"
    folder = template.url.rsplit("/", 1)[0]
    return Build(Version(text), filename, f"{folder}/{filename.replace('+', '%2B')}", template.tags, listed=False)
