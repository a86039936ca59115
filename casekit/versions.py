"""Version strings: parse and order them, on `packaging` (PEP 440); the pins a bundle may hand an installer.

The shapes torch uses are "2.5.1", "2.13.0", "2.6.0.dev20241001", "2.6.0a0"
and "2.13.0+cpu". Local tags ("+cpu", "+cu124") say how a wheel was built, not
when, so they are ignored for ordering. What a `--torch` request admits (an exact
version, a prefix, a build label) is `casekit.runners.torch_source.request`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from casekit.errors import CasekitError


class VersionError(CasekitError):
    """A text that should be a version (or a list of them) is not."""


@dataclass(frozen=True, order=True)
class TorchVersion:
    """A parsed version; compares by PEP 440 order with the local tag ignored."""

    key: Version = field(repr=False)  # the public version: "2.13.0+cpu" -> 2.13.0
    text: str = field(compare=False)
    local: str | None = field(compare=False, default=None)

    @property
    def is_nightly(self) -> bool:
        """Nightlies are dev releases ("2.6.0.dev20241001")."""
        return self.key.is_devrelease

    @property
    def release(self) -> tuple[int, ...]:
        return self.key.release


def parse_version(text: str) -> TorchVersion:
    """Parse a version string; VersionError when it is not PEP 440-shaped."""
    try:
        version = Version(text)
    except InvalidVersion:
        raise VersionError(
            f"{text!r} is not a version (expected something like 2.5.1, 2.6.0.dev20241001 or 2.13.0+cpu)"
        ) from None
    return TorchVersion(key=Version(version.public), text=text.strip(), local=version.local)


def sort_versions(versions: Iterable[str]) -> list[str]:
    """Oldest first, one entry per version: "2.13.0" is kept over "2.13.0+cpu" (the index picks the build)."""
    chosen: dict[Version, TorchVersion] = {}
    for text in versions:
        version = parse_version(text)
        previous = chosen.get(version.key)
        if previous is None or (previous.local is not None and version.local is None):
            chosen[version.key] = version
    return [version.text for version in sorted(chosen.values())]


def versions_between(available: Iterable[str], good: str, bad: str) -> list[str]:
    """Candidates for a bisection: good, the available versions strictly between, bad (oldest first).

    The ends are kept exactly as given, even if the index does not list them,
    because they are what the user already ran.
    """
    good_version, bad_version = parse_version(good), parse_version(bad)
    if not good_version < bad_version:
        raise VersionError(f"the good version {good!r} must be older than the bad version {bad!r}")
    inner = [text for text in sort_versions(available) if good_version < parse_version(text) < bad_version]
    return [good, *inner, bad]


def parse_pip_index_versions(output: str) -> list[str]:
    """The versions on pip's "Available versions: a, b, c" line, as pip prints them (newest first)."""
    for line in output.splitlines():
        label, _, rest = line.partition(":")
        if label.strip() == "Available versions":
            return [part.strip() for part in rest.split(",") if part.strip()]
    raise VersionError("pip index printed no 'Available versions:' line")


def without_local(text: str) -> str:
    """'2.13.0+cpu' -> '2.13.0': the release, without the build label; any other text unchanged."""
    return text.split("+", 1)[0]


def version_order(text: str) -> tuple[int, Version | str]:
    """The sort key of versions as reports show them: PEP 440 order, build label ignored
    ('2.5.1+cu124' < '2.10.0.dev20250101' < '2.13.0'); what is not a version sorts last, by its text."""
    try:
        return (0, Version(Version(text).public))
    except InvalidVersion:
        return (1, text)


# A distribution name as PEP 508 allows it, and a version as PEP 440 writes it (local tags too): nothing
# else reaches an installer's command line from a bundle (no URL, no marker, no option, no glob).
_DIST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION_TEXT = re.compile(r"^[A-Za-z0-9.+!_-]{1,64}$")


def package_pin(dist: object, version: object) -> str | None:
    """'name==version' for a pin a bundle recorded, or None when either part is not plainly that.

    A shared bundle is untrusted: its recorded packages become an installer's arguments, so a
    "name" such as `evil @ https://...` or a version such as `1.0 ; python_version>'0'` is refused."""
    if not isinstance(dist, str) or not isinstance(version, str) or len(dist) > 100:
        return None
    if not _DIST_NAME.match(dist) or not _VERSION_TEXT.match(version):
        return None
    try:
        Version(version)
    except InvalidVersion:
        return None
    return f"{dist}=={version}"
