"""Torch version candidate lists: real parsing, real ordering, and a real `pip index versions` call."""

from __future__ import annotations

from pathlib import Path

import pytest

from casekit.bisect.versions import (
    fetch_available_versions,
    parse_pip_index_versions,
    parse_version,
    read_version_list,
    sort_versions,
    versions_between,
)
from casekit.errors import BisectError, CasekitError


def test_numeric_not_lexical_order() -> None:
    assert sort_versions(["2.13.0", "2.5.1", "2.14.1", "2.10.0", "2.9.1"]) == [
        "2.5.1",
        "2.9.1",
        "2.10.0",
        "2.13.0",
        "2.14.1",
    ]


def test_pep440_order_of_nightlies_prereleases_and_posts() -> None:
    ordered = [
        "2.5.1",
        "2.6.0.dev20241001",
        "2.6.0.dev20241015",
        "2.6.0a0",
        "2.6.0rc1",
        "2.6.0",
        "2.6.0.post1",
        "2.6.1",
    ]
    assert sort_versions(reversed(ordered)) == ordered
    assert parse_version("2.6.0.dev20241001").is_nightly
    assert not parse_version("2.6.0").is_nightly


def test_local_tags_are_ignored_for_ordering() -> None:
    assert parse_version("2.13.0+cpu") == parse_version("2.13.0")
    assert parse_version("2.13.0+cu124").local == "cu124"
    assert parse_version("2.13.0+cpu") < parse_version("2.13.1+cpu")
    # One candidate per version; the plain one is kept so the index chooses the build.
    assert sort_versions(["2.13.0+cpu", "2.14.0", "2.13.0"]) == ["2.13.0", "2.14.0"]
    assert sort_versions(["2.13.0+cpu", "2.12.0"]) == ["2.12.0", "2.13.0+cpu"]


def test_trailing_zeros_do_not_matter() -> None:
    assert parse_version("2.6") == parse_version("2.6.0")


@pytest.mark.parametrize("text", ["", "latest", "2.x", "2.5.1+", "nightly-2024-10-01"])
def test_non_versions_are_a_clear_error(text: str) -> None:
    with pytest.raises(BisectError, match="is not a version"):
        parse_version(text)


def test_versions_between_is_inclusive_and_keeps_the_ends_as_given() -> None:
    available = ["2.15.0", "2.14.1", "2.14.0", "2.13.0+cpu", "2.13.0", "2.12.0", "2.5.1", "2.4.0"]
    assert versions_between(available, "2.5.1", "2.14.0") == ["2.5.1", "2.12.0", "2.13.0", "2.14.0"]
    assert versions_between(available, "2.12.0", "2.13.0+cpu") == ["2.12.0", "2.13.0+cpu"]


def test_versions_between_includes_nightlies_when_listed() -> None:
    available = ["2.5.1", "2.6.0.dev20241001", "2.6.0.dev20241101", "2.6.0"]
    assert versions_between(available, "2.5.1", "2.6.0") == available


def test_versions_between_wants_good_older_than_bad() -> None:
    with pytest.raises(BisectError, match="must be older than"):
        versions_between(["2.5.1", "2.13.0"], "2.13.0", "2.5.1")


def test_parse_pip_index_output() -> None:
    output = (
        "torch (2.15.0)\n"
        "Available versions: 2.15.0, 2.14.1, 2.13.0+cpu, 2.13.0, 2.5.1\n"
        "  INSTALLED: 2.13.0+cpu\n"
        "  LATEST:    2.15.0\n"
    )
    assert parse_pip_index_versions(output) == ["2.15.0", "2.14.1", "2.13.0+cpu", "2.13.0", "2.5.1"]
    with pytest.raises(BisectError, match="Available versions"):
        parse_pip_index_versions("torch (2.15.0)\n")


@pytest.mark.process
def test_fetch_available_versions_from_the_configured_index() -> None:
    versions = fetch_available_versions("torch")
    assert "2.5.1" in versions and "2.13.0" in versions
    assert versions == sort_versions(versions), "oldest first, deduplicated"
    assert versions_between(versions, "2.5.1", "2.13.0")[:2] == ["2.5.1", "2.6.0"]


@pytest.mark.process
def test_fetch_failure_is_a_clear_casekit_error() -> None:
    with pytest.raises(CasekitError, match="could not list no-such-package-casekit versions"):
        fetch_available_versions("no-such-package-casekit", timeout=120)


@pytest.mark.process
def test_fetch_with_a_missing_python_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CasekitError, match="could not list torch versions"):
        fetch_available_versions("torch", python=str(tmp_path / "no-python"))


def test_read_version_list_from_commas_or_a_file(tmp_path: Path) -> None:
    assert read_version_list("2.13.0, 2.5.1,2.6.0") == ["2.5.1", "2.6.0", "2.13.0"]
    listing = tmp_path / "versions.txt"
    listing.write_text("# candidates\n2.6.0\n\n2.5.1  # known good\n2.6.0.dev20241001\n")
    assert read_version_list(str(listing)) == ["2.5.1", "2.6.0.dev20241001", "2.6.0"]
    with pytest.raises(BisectError, match="no versions"):
        read_version_list(" , ")
