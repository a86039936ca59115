"""Candidate lists of torch versions for a bisection: read them from the package index or a list.

Parsing and ordering are `casekit.versions` (PEP 440, on `packaging`); here a
malformed version is a BisectError, because it stops a bisection.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from casekit import versions
from casekit.errors import BisectError
from casekit.runners.torch_source import index
from casekit.versions import TorchVersion

__all__ = [
    "TorchVersion",
    "fetch_available_versions",
    "parse_pip_index_versions",
    "parse_version",
    "read_version_list",
    "sort_versions",
    "versions_between",
]

_T = TypeVar("_T")


def _as_bisect_error(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except versions.VersionError as error:
        raise BisectError(str(error)) from None


def parse_version(text: str) -> TorchVersion:
    """Parse a version string; BisectError when it is not PEP 440-shaped."""
    return _as_bisect_error(lambda: versions.parse_version(text))


def sort_versions(texts: Iterable[str]) -> list[str]:
    """Oldest first, one entry per version ("2.13.0" kept over "2.13.0+cpu")."""
    return _as_bisect_error(lambda: versions.sort_versions(texts))


def versions_between(available: Iterable[str], good: str, bad: str) -> list[str]:
    """good, the available versions strictly between, bad (oldest first); the ends kept as given."""
    return _as_bisect_error(lambda: versions.versions_between(available, good, bad))


def parse_pip_index_versions(output: str) -> list[str]:
    """The versions on pip's "Available versions:" line, newest first."""
    return _as_bisect_error(lambda: versions.parse_pip_index_versions(output))


VERSIONS_HINT = "name the candidates instead: --versions 2.5.1,2.6.0,... (or a file with one version per line)"


def fetch_available_versions(
    package: str = "torch",
    *,
    python: str = sys.executable,
    pre: bool = False,
    index_url: str | None = None,
    timeout: float = 120,
) -> list[str]:
    """Ask the configured package index which versions exist, oldest first.

    With pip in `python`, `pip index versions` answers, with the user's pip
    configuration as is. Without pip (a `uv tool install`, pipx), casekit
    reads the same configuration and the index's simple API itself
    (`casekit.runners.torch_source.index`). Either way a failure names `--versions`.
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
        raise BisectError(f"could not list {package} versions with '{shown}': {exc}; {VERSIONS_HINT}") from exc
    if completed.returncode != 0 and "No module named pip" in completed.stderr:
        return _from_index(package, pre=pre, index_url=index_url, timeout=timeout)
    if completed.returncode != 0:
        lines = (completed.stderr or completed.stdout).strip().splitlines()
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-1:] or ["no output"]
        raise BisectError(
            f"could not list {package} versions with '{shown}' (exit {completed.returncode}): {errors[-1]}; "
            + VERSIONS_HINT
        )
    try:
        return sort_versions(parse_pip_index_versions(completed.stdout))
    except BisectError as exc:
        raise BisectError(f"could not list {package} versions with '{shown}': {exc}; {VERSIONS_HINT}") from exc


def _from_index(package: str, *, pre: bool, index_url: str | None, timeout: float) -> list[str]:
    """The simple-API reading of the configured indexes, for an interpreter without pip."""
    try:
        return sort_versions(index.list_versions(package, pre=pre, index_url=index_url, timeout=timeout))
    except index.IndexUnreadable as exc:
        raise BisectError(f"could not list {package} versions from the package index: {exc}; {VERSIONS_HINT}") from exc


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
