"""What a `--torch` / `--cuda` request names: a channel, a variant, and a version that is exact or a prefix.

A request names the channel before a colon: ``2.13`` (a release, the newest 2.13.x), ``pypi:2.13``
(PyPI's build), ``nightly`` (the newest), ``nightly:2026-01-05`` (that day's), ``test:2.14`` (a
release candidate). The version part follows one rule, `VersionAsk`, wherever casekit picks or checks
a build: three numbers, or a pre-, dev- or post-release, name one version (``2.5.1``,
``2.6.0.dev20241001``, ``2.6rc1``); fewer numbers are a prefix whose newest final release is meant
(``2.13``, ``2``: a prefix of numbers, so 2.10 is not 2.1.x); a build label narrows either to that
build (``2.13+cpu``: the newest 2.13.x CPU build; ``2.13.0+cpu``: that one).

Everything here is pure: text in, choices out.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from packaging.version import InvalidVersion, Version

from casekit.errors import CasekitError

_T = TypeVar("_T")


class Channel(enum.Enum):
    """Which stream of torch builds a target takes."""

    RELEASE = "release"  # PyTorch's release index of the variant (CPU by default)
    PYPI = "pypi"  # PyPI's one build per release (CUDA on Linux), as pip gives it
    NIGHTLY = "nightly"  # one build a day: 2.14.0.dev20260105
    TEST = "test"  # release candidates, under the final version number

    @property
    def has_variants(self) -> bool:
        return self is not Channel.PYPI


class ChannelError(CasekitError):
    """A --torch or --cuda text that names no channel, version, date or variant casekit knows."""


VERSION_EXAMPLES = "2.5.1, 2.13, 2.13+cpu or nightly:2026-01-05"


# ------------------------------------------------------------------ the version part: one rule


@dataclass(frozen=True)
class VersionAsk:
    """A version as a request names it: one version (`exact`), or the newest final release under a prefix
    of numbers; `local`, when given, admits only builds with that label ('cpu', 'cu126')."""

    text: str
    release: tuple[int, ...]  # the numbers asked: (2, 13) for '2.13'
    exact: Version | None  # the public version for an exact ask ('2.13.0' for '2.13.0+cpu'); None: a prefix
    local: str | None

    def admits(self, version: Version) -> bool:
        """Whether a build of `version` is what was asked (its label ignored unless one was asked)."""
        if self.local is not None and version.local != self.local:
            return False
        if self.exact is not None:
            return Version(version.public) == self.exact
        final = not (version.is_prerelease or version.is_postrelease)
        return final and version.release[: len(self.release)] == self.release

    def newest(self, items: Iterable[_T], version_of: Callable[[_T], Version | None]) -> _T | None:
        """The newest of `items` this ask admits (`version_of` gives each one's version, None to skip it)."""
        best: tuple[Version, _T] | None = None
        for item in items:
            version = version_of(item)
            if version is not None and self.admits(version) and (best is None or version > best[0]):
                best = (version, item)
        return best[1] if best is not None else None


def read_ask(text: str) -> VersionAsk:
    """The version part of a request ('2.13', '2.5.1', '2.13+cpu', '2.6.0.dev20241001'); ChannelError otherwise."""
    stripped = text.strip()
    try:
        version = Version(stripped)
    except InvalidVersion:
        raise ChannelError(f"--torch {text!r}: not a torch version (expected {VERSION_EXAMPLES})") from None
    if version.epoch:
        raise ChannelError(f"--torch {text!r}: torch versions have no epoch (expected {VERSION_EXAMPLES})")
    one = len(version.release) >= 3 or any(p is not None for p in (version.pre, version.dev, version.post))
    return VersionAsk(stripped, version.release, Version(version.public) if one else None, version.local)


NEWEST = VersionAsk("latest", (), None, None)  # no version asked: the newest final release


def ask_for(requested: str | None) -> VersionAsk:
    """`read_ask` of a request's version part, or NEWEST when it names none."""
    return read_ask(requested) if requested else NEWEST


def version_or_none(text: str) -> Version | None:
    """`text` as a version, or None when it is none (an index lists what it lists)."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def is_exact(requested: str) -> bool:
    """'2.5.1', '2.6.0.dev20241112', '2.6rc1', '2.13.0+cpu' name one version; '2.13', '2.13+cpu', '2' a prefix."""
    try:
        return read_ask(requested).exact is not None
    except ChannelError:
        return False


def pick_newest(available: Iterable[str], requested: str | None) -> str | None:
    """The newest of `available` a request admits ('2.13' -> the newest final 2.13.x; None: the newest
    final release). The build label is dropped unless the request names one: `torch==2.13.0` matches the
    local build too. Unparseable entries are skipped."""
    ask = ask_for(requested)
    found = ask.newest(available, lambda text: version_or_none(text.strip()))
    if found is None:
        return None
    return found.strip() if ask.local else found.strip().split("+", 1)[0]


def matches_request(installed: str, requested: str) -> bool:
    """Whether an interpreter's torch is the one asked: '2.13.0+cpu' satisfies '2.13', '2.13.0', '2.13+cpu'
    and '2.13.0+cpu'; not '2.1', '2.13.1' nor '2.13.0+cu124'. A request that is no version matches nothing."""
    version = version_or_none(installed)
    try:
        return version is not None and read_ask(requested).admits(version)
    except ChannelError:
        return False


# ------------------------------------------------------------------ channels, dates, variants

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_VARIANT = re.compile(r"cpu|cu\d{3}|rocm\d+(\.\d+)*|xpu")


def parse_date(text: str) -> dt.date:
    """'2026-01-05' as a date; ChannelError otherwise."""
    if not _DATE.fullmatch(text):
        raise ChannelError(f"not a date: {text!r} (expected YYYY-MM-DD, e.g. 2026-01-05)")
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ChannelError(f"not a date: {text!r} (expected YYYY-MM-DD, e.g. 2026-01-05)") from None


def is_date(text: str) -> bool:
    return bool(_DATE.fullmatch(text))


def nightly_date(version: str) -> dt.date | None:
    """The date of a nightly version ('2.14.0.dev20260105', '+cpu' or not); None for anything else."""
    parsed = version_or_none(version)
    dev = parsed.dev if parsed is not None else None
    if dev is None or not 19000101 <= dev <= 99991231:
        return None
    try:
        return dt.date(dev // 10000, dev // 100 % 100, dev % 100)
    except ValueError:
        return None


def parse_torch_request(text: str) -> tuple[Channel, str | None]:
    """`--torch` as (channel, what is asked in it): '2.13' -> (RELEASE, '2.13'), 'nightly' -> (NIGHTLY, None),
    'nightly:2026-01-05' -> (NIGHTLY, '2026-01-05'), 'pypi:2.13', 'test:2.14', 'latest' -> (RELEASE, None).
    A version part that is no version is refused here, in one line, before anything runs."""
    text = text.strip()
    name, colon, rest = text.partition(":")
    if not colon:
        try:
            channel = Channel(name)
        except ValueError:
            asked = None if text in ("", "latest") else text
            if asked is not None:
                read_ask(asked)
            return Channel.RELEASE, asked
        return channel, None
    try:
        channel = Channel(name)
    except ValueError:
        known = ", ".join(c.value for c in Channel)
        raise ChannelError(f"--torch {text!r}: unknown channel {name!r} (one of: {known})") from None
    asked = rest.strip() or None
    if asked == "latest":
        asked = None
    if asked is None:
        return channel, None
    if channel is Channel.NIGHTLY and is_date(asked):
        parse_date(asked)
    elif channel is Channel.NIGHTLY:
        version = version_or_none(asked)
        if version is None or not version.is_devrelease:
            raise ChannelError(f"--torch {text!r}: a nightly is a date (nightly:2026-01-05) or a dev version")
    else:
        read_ask(asked)
    return channel, asked


def format_torch_request(channel: Channel, torch: str | None) -> str:
    """The `--torch` text that asks for this again (the inverse of `parse_torch_request`)."""
    if channel is Channel.RELEASE:
        return torch or "latest"
    return f"{channel.value}:{torch}" if torch else channel.value


def describe(channel: Channel, torch: str | None) -> str:
    """The request as a label part: '2.13.0', 'latest', 'nightly-2026-01-05', 'nightly-latest', 'test-2.14'."""
    if channel is Channel.RELEASE:
        return torch or "latest"
    return f"{channel.value}-{torch or 'latest'}"


def variant_named(ask: VersionAsk, cuda: str | None) -> str | None:
    """The variant a request's build label names ('2.13+cpu' -> 'cpu'), checked against --cuda: the two
    must agree. None when the label is no variant (a custom build's '+git1a2b') or there is none."""
    label = ask.local if ask.local and _VARIANT.fullmatch(ask.local) else None
    if label and cuda and label != cuda:
        raise ChannelError(f"--torch {ask.text} names the {label} build, --cuda {cuda} another: give one of them")
    return label


def variant_asked(channel: Channel, torch: str | None, cuda: str | None) -> str | None:
    """--cuda, or the variant the version's build label names: '2.13+cpu' asks what '2.13 --cuda cpu' does
    (a nightly asked by its date names none). The two, both given, must agree (ChannelError otherwise)."""
    if torch is None or (channel is Channel.NIGHTLY and is_date(torch)):
        return cuda
    return variant_named(read_ask(torch), cuda) or cuda


def check_variant(cuda: str | None) -> str | None:
    """--cuda as given: None (casekit decides), 'cpu', 'cu126', 'rocm6.2', 'xpu'; ChannelError otherwise."""
    if cuda is None or _VARIANT.fullmatch(cuda):
        return cuda
    raise ChannelError(f"--cuda {cuda!r}: expected cpu or a CUDA tag such as cu126 (cu124, cu128, ...)")
