"""Where a torch build comes from: its channel (release, PyPI, nightly, test), its variant (cpu, cuXXX) and the index.

PyTorch publishes each channel per variant, one index each
(``https://download.pytorch.org/whl/cpu``, ``…/whl/cu126``,
``…/whl/nightly/cpu``, ``…/whl/test/cu126``); PyPI serves one build per
release (a CUDA build on Linux). ``$CASEKIT_TORCH_INDEX`` names a mirror of that
layout; ``--index-url`` or ``--find-links`` replace the mapping altogether.

A ``--torch`` request names the channel before a colon: ``2.13`` (a release,
the newest 2.13.x), ``pypi:2.13`` (PyPI's build), ``nightly`` (the newest),
``nightly:2026-01-05`` (that day's), ``test:2.14`` (a release candidate).
Without ``--cuda``, a release or nightly is a CPU build unless this host has a
GPU: graph breaks are traced with ``backend="eager"``, which needs none, and a
CPU wheel is a tenth of the size.

Everything here is pure (text in, choices out) but `host_has_gpu`; the
listings themselves are read by `casekit.runners.wheel_index`.
"""

from __future__ import annotations

import datetime as dt
import enum
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from casekit import settings
from casekit.errors import CasekitError


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
    """A --torch or --cuda text that names no channel, date or variant casekit knows."""


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
    parsed = _version_or_none(version)
    dev = parsed.dev if parsed is not None else None
    if dev is None or not 19000101 <= dev <= 99991231:
        return None
    try:
        return dt.date(dev // 10000, dev // 100 % 100, dev % 100)
    except ValueError:
        return None


def parse_torch_request(text: str) -> tuple[Channel, str | None]:
    """`--torch` as (channel, what is asked in it): '2.13' -> (RELEASE, '2.13'), 'nightly' -> (NIGHTLY, None),
    'nightly:2026-01-05' -> (NIGHTLY, '2026-01-05'), 'pypi:2.13', 'test:2.14', 'latest' -> (RELEASE, None)."""
    text = text.strip()
    name, colon, rest = text.partition(":")
    if not colon:
        try:
            channel = Channel(name)
        except ValueError:
            return Channel.RELEASE, None if text in ("", "latest") else text
        return channel, None
    try:
        channel = Channel(name)
    except ValueError:
        known = ", ".join(c.value for c in Channel)
        raise ChannelError(f"--torch {text!r}: unknown channel {name!r} (one of: {known})") from None
    asked = rest.strip() or None
    if asked == "latest":
        asked = None
    if channel is Channel.NIGHTLY and asked is not None and not is_date(asked):
        version = _version_or_none(asked)
        if version is None or not version.is_devrelease:
            raise ChannelError(f"--torch {text!r}: a nightly is a date (nightly:2026-01-05) or a dev version")
    if channel is Channel.NIGHTLY and asked is not None and is_date(asked):
        parse_date(asked)
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


def check_variant(cuda: str | None) -> str | None:
    """--cuda as given: None (casekit decides), 'cpu', 'cu126', 'rocm6.2', 'xpu'; ChannelError otherwise."""
    if cuda is None or _VARIANT.fullmatch(cuda):
        return cuda
    raise ChannelError(f"--cuda {cuda!r}: expected cpu or a CUDA tag such as cu126 (cu124, cu128, ...)")


def host_has_gpu() -> bool:
    """An NVIDIA driver's control node is here (what CUDA wheels need to be worth their size)."""
    return os.path.exists("/dev/nvidiactl")


@dataclass(frozen=True)
class TorchSource:
    """Where one target's torch comes from: its channel, the variant decided, the index (None: the default)."""

    channel: Channel
    variant: str | None  # "cpu", "cu126"; None: PyPI's build (or whatever the user's own index serves)
    index_url: str | None  # a PyTorch-shaped index of this channel and variant; None: the installer's default
    listed: bool  # casekit reads this index's listing itself (a PyTorch-shaped index), rather than the installer
    note: str | None = None  # one line for the user: why this variant


def pytorch_index(channel: Channel, variant: str, base: str | None = None) -> str:
    """PyTorch's index (or the mirror in $CASEKIT_TORCH_INDEX) for a channel and a variant."""
    root = (base or settings.torch_index_base()).rstrip("/")
    middle = {Channel.RELEASE: "", Channel.NIGHTLY: "nightly/", Channel.TEST: "test/"}[channel]
    return f"{root}/{middle}{variant}"


def choose_source(
    channel: Channel,
    cuda: str | None,
    *,
    index_url: str | None = None,
    find_links: str | None = None,
    gpu_here: bool | None = None,
) -> TorchSource:
    """The index and variant a target's torch comes from, and the note that says why.

    `--index-url` or `--find-links` replace the mapping (mirrors, air-gapped sites): the installer reads
    them as given. Otherwise a channel with variants goes to PyTorch's index for the variant; with no
    --cuda, the variant is cpu unless this host has a GPU, where a release is PyPI's (CUDA) build.
    """
    variant = check_variant(cuda)
    if channel is Channel.PYPI:
        if variant is not None:
            raise ChannelError(
                f"pypi:… serves one build per release; drop --cuda {variant} or use {variant} without pypi:"
            )
        return TorchSource(channel, None, index_url, listed=False)
    if index_url or find_links:
        if channel is Channel.RELEASE:
            return TorchSource(channel, variant, index_url, listed=False)
        # a nightly or test mirror: its listing says which builds exist (a folder of wheels is read as one)
        return TorchSource(channel, variant, index_url or find_links, listed=True)
    if variant is not None:
        return TorchSource(channel, variant, pytorch_index(channel, variant), listed=True)
    gpu = host_has_gpu() if gpu_here is None else gpu_here
    if gpu and channel is Channel.RELEASE:
        note = "PyPI's build (CUDA), as a GPU is here; --cuda cpu asks for a CPU build"
        return TorchSource(channel, None, None, listed=False, note=note)
    why = "breaks trace on CPU" if gpu else "no GPU here, and breaks trace on CPU"
    note = f"a CPU build (no --cuda; {why}); --cuda cu126 asks for a CUDA build"
    return TorchSource(channel, "cpu", pytorch_index(channel, "cpu"), listed=True, note=note)


# ------------------------------------------------------------------ the builds an index lists


@dataclass(frozen=True, order=True)
class Build:
    """One torch wheel an index lists (or would, were it not hidden): its version, tags and where it is."""

    version: Version
    filename: str = field(compare=False)
    url: str = field(compare=False)
    tags: frozenset[Tag] = field(compare=False, repr=False, default=frozenset())
    listed: bool = field(compare=False, default=True)  # False: found by its URL below the listing's horizon

    @property
    def public(self) -> str:
        """The version without its build label: '2.14.0.dev20260105'."""
        return self.version.public

    @property
    def date(self) -> dt.date | None:
        """The date of a nightly ('2.14.0.dev20260105' -> 2026-01-05); None for a release."""
        return nightly_date(str(self.version))


def _version_or_none(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def build_from_filename(filename: str, url: str, listed: bool = True) -> Build | None:
    """A torch wheel's file name as a Build; None for anything else (sdists, other packages, odd names)."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    if name != "torch":
        return None
    return Build(version, filename, url, frozenset(tags), listed)


def target_tags(python_version: str) -> frozenset[Tag]:
    """The wheel tags an interpreter of that version installs on this machine ('3.11')."""
    major, minor = (int(part) for part in python_version.split(".")[:2])
    platforms = list(platform_tags())
    found = set(cpython_tags((major, minor), platforms=platforms))
    found |= set(compatible_tags((major, minor), f"cp{major}{minor}", platforms))
    return frozenset(found)


def installable(builds: Iterable[Build], python_version: str) -> list[Build]:
    """The builds an interpreter of that version can install here, oldest first."""
    wanted = target_tags(python_version)
    return sorted(build for build in builds if build.tags & wanted)


def newest_release(builds: Sequence[Build], requested: str | None) -> Build | None:
    """The newest final release under the prefix `requested` ('2.13' -> newest 2.13.x; None: the newest);
    an exact version ('2.13.0', '2.14.0.dev20260105', '2.13.0+cpu') matches itself only."""
    if requested is not None and _is_exact(requested):
        asked = Version(requested)
        matches = [b for b in builds if b.version == asked or (asked.local is None and b.public == asked.public)]
        return max(matches) if matches else None
    prefix = tuple(int(part) for part in requested.split(".")) if requested else ()
    releases = [b for b in builds if not b.version.is_prerelease and b.version.release[: len(prefix)] == prefix]
    return max(releases) if releases else None


def _is_exact(requested: str) -> bool:
    version = _version_or_none(requested)
    return version is not None and (len(version.release) >= 3 or version.pre is not None or version.dev is not None)


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
