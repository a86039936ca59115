"""Bundles and the archive lock as files an attacker controls: symlinks, FIFOs, devices, folders.

Every one is one clear line (validate, show, list, replay), never a hang, an unbounded read, or a
write through a link.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from casekit.archive.store import Archive
from casekit.bundle import load_case
from casekit.errors import CasekitError

from ..conftest import ROOT, run_casekit

STARTER = ROOT / "cases" / "item-branch.toml"


def plant(archive: Path, kind: str) -> Path:
    """cases/evil.toml as `kind`; returns it."""
    target = archive / "evil.toml"
    if kind == "symlink-to-dev-zero":
        target.symlink_to("/dev/zero")
    elif kind == "symlink-to-a-valid-bundle-outside":
        outside = archive.parent / "outside.toml"
        outside.write_text(STARTER.read_text().replace('id = "item-branch"', 'id = "evil"'))
        target.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        os.mknod(target, 0o600 | 0o020000, os.makedev(1, 3)) if os.geteuid() == 0 else target.symlink_to("/dev/null")
    elif kind == "folder":
        target.mkdir()
    elif kind == "huge":
        with open(target, "wb") as handle:
            handle.truncate(40 * 1024 * 1024)
    return target


KINDS = ["symlink-to-dev-zero", "symlink-to-a-valid-bundle-outside", "fifo", "device", "folder", "huge"]


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    folder = tmp_path / "cases"
    folder.mkdir()
    shutil.copy(STARTER, folder / STARTER.name)
    return folder


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_bundle_is_one_clear_error_in_process(archive: Path, kind: str) -> None:
    path = plant(archive, kind)
    with pytest.raises(CasekitError) as caught:
        load_case(path)
    assert str(caught.value).startswith(str(path))
    assert "\n" not in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_bundle_through_the_cli(archive: Path, kind: str) -> None:
    plant(archive, kind)
    for args in (["validate"], ["show", "evil", "--json", "-"]):
        done = run_casekit(*args, "--archive", str(archive), timeout=60)  # a FIFO would hang: the timeout fails it
        assert done.returncode in (1, 2), (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        assert "evil.toml" in done.stdout + done.stderr
    assert (archive / STARTER.name).read_text() == STARTER.read_text()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
def test_the_lock_file_is_never_followed_or_waited_on(tmp_path: Path, kind: str) -> None:
    archive_dir = tmp_path / "cases"
    archive_dir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    lock = archive_dir / ".casekit.lock"
    if kind == "symlink":
        lock.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    with pytest.raises(CasekitError, match=r"^cannot lock the archive: .*\.casekit\.lock"):
        with Archive(archive_dir).locked():
            pass
    assert victim.read_text() == "untouched\n"


def test_a_symlinked_bundle_is_never_written_through(archive: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.toml"
    outside.write_text("keep me\n")
    (archive / "evil.toml").symlink_to(outside)
    store = Archive(archive)
    case = store.load("item-branch")
    case.id = "evil"
    store.save(case)  # replaces the link itself, atomically
    assert outside.read_text() == "keep me\n"
    assert not (archive / "evil.toml").is_symlink()
