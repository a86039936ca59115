"""Candidate lists of torch versions: parse, order, select, and read them from the package index.

Ordering follows PEP 440 for the shapes torch uses ("2.5.1", "2.13.0",
"2.6.0.dev20241001", "2.6.0a0", "2.13.0+cpu"). It is written here rather than
taken from `packaging` so the host tool needs no dependency for it. Local tags
("+cpu", "+cu124") say how a wheel was built, not when, so they are ignored
for ordering.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from casekit.errors import BisectError

_VERSION = re.compile(
    r"""
    ^\s*v?
    (?:(?P<epoch>\d+)!)?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_label>a|alpha|b|beta|rc|c|pre|preview)[-_.]?(?P<pre_number>\d*))?
    (?:[-_.]?(?P<post_label>post|rev|r)[-_.]?(?P<post_number>\d*))?
    (?:[-_.]?(?P<dev_label>dev)[-_.]?(?P<dev_number>\d*))?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$
    """,
    re.VERBOSE | re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "rc": 2, "c": 2, "pre": 2, "preview": 2}

# (epoch, release, pre, post, dev): tuples compare in PEP 440 order.
VersionKey = tuple[int, tuple[int, ...], tuple[float, int], float, float]


@dataclass(frozen=True, order=True)
class TorchVersion:
    """A parsed version; compares by PEP 440 order with the local tag ignored."""

    key: VersionKey = field(repr=False)
    text: str = field(compare=False)
    local: str | None = field(compare=False, default=None)

    @property
    def is_nightly(self) -> bool:
        """Nightlies are dev releases ("2.6.0.dev20241001")."""
        return math.isfinite(self.key[4])


def parse_version(text: str) -> TorchVersion:
    """Parse a version string; BisectError when it is not PEP 440-shaped."""
    match = _VERSION.match(text)
    if match is None:
        raise BisectError(f"{text!r} is not a version (expected something like 2.5.1, 2.6.0.dev20241001 or 2.13.0+cpu)")
    release = [int(part) for part in match["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:  # 2.6 == 2.6.0
        release.pop()
    has_dev = match["dev_label"] is not None
    has_post = match["post_label"] is not None
    if match["pre_label"] is not None:
        pre: tuple[float, int] = (_PRE_RANK[match["pre_label"].lower()], int(match["pre_number"] or 0))
    elif has_dev and not has_post:
        pre = (-math.inf, 0)  # 2.6.0.dev1 comes before 2.6.0a0
    else:
        pre = (math.inf, 0)  # a final release comes after its pre-releases
    post = float(match["post_number"] or 0) if has_post else -math.inf
    dev = float(match["dev_number"] or 0) if has_dev else math.inf
    key: VersionKey = (int(match["epoch"] or 0), tuple(release), pre, post, dev)
    return TorchVersion(key=key, text=text.strip(), local=match["local"])


def sort_versions(versions: Iterable[str]) -> list[str]:
    """Oldest first, one entry per version: "2.13.0" is kept over "2.13.0+cpu" (the index picks the build)."""
    chosen: dict[VersionKey, TorchVersion] = {}
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
        raise BisectError(f"the good version {good!r} must be older than the bad version {bad!r}")
    inner = [text for text in sort_versions(available) if good_version < parse_version(text) < bad_version]
    return [good, *inner, bad]


def parse_pip_index_versions(output: str) -> list[str]:
    """The versions on pip's "Available versions: a, b, c" line, as pip prints them (newest first)."""
    for line in output.splitlines():
        label, _, rest = line.partition(":")
        if label.strip() == "Available versions":
            return [part.strip() for part in rest.split(",") if part.strip()]
    raise BisectError("pip index printed no 'Available versions:' line")


def fetch_available_versions(
    package: str = "torch",
    *,
    python: str = sys.executable,
    pre: bool = False,
    index_url: str | None = None,
    timeout: float = 120,
) -> list[str]:
    """Ask the configured package index which versions exist, oldest first (`pip index versions`).

    Uses the user's pip configuration (index URLs, offline mirrors) as is, so
    the candidates are exactly what that environment could install.
    """
    command = [python, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    if pre:
        command.append("--pre")  # nightlies are pre-releases to pip
    if index_url:
        command += ["--index-url", index_url]
    shown = " ".join([Path(python).name, *command[1:]])
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BisectError(f"could not list {package} versions with '{shown}': {exc}") from exc
    if completed.returncode != 0:
        lines = (completed.stderr or completed.stdout).strip().splitlines()
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-1:] or ["no output"]
        raise BisectError(
            f"could not list {package} versions with '{shown}' (exit {completed.returncode}): {errors[-1]}"
        )
    try:
        return sort_versions(parse_pip_index_versions(completed.stdout))
    except BisectError as exc:
        raise BisectError(f"could not list {package} versions with '{shown}': {exc}") from exc


def read_version_list(spec: str) -> list[str]:
    """An explicit candidate list: a file with one version per line ('#' comments allowed) or "a,b,c".

    Order is taken from the versions themselves, not the input, so a
    hand-written list cannot silently bisect out of order.
    """
    path = Path(spec)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BisectError(f"cannot read version list {path}: {exc}") from exc
        entries = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    else:
        entries = [part.strip() for part in spec.split(",")]
    versions = [entry for entry in entries if entry]
    if not versions:
        raise BisectError(f"no versions in {spec!r}")
    return sort_versions(versions)
