"""Bundles and the archive's derived files (`.casekit/`) as an attacker plants them: links, FIFOs, devices.

A shared archive is a git repository anyone on the team (or a cloned project) can commit to,
`git add -f cases/.casekit/...` included. Each attack runs for real, through the CLI or the
functions it calls, over a copy of the report fixture archive (nine real cases with history),
and each has a control: the same attack with the guard taken away (the read casekit used to do)
does the damage, so the test shows the guard, not a harmless setup. Every CLI run has a
timeout: a hang fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from casekit.archive import Archive
from casekit.archive_index import INDEX_DIR as CACHE_DIR
from casekit.archive_index import INDEX_FILE
from casekit.report.formats import get_format
from casekit.report.summary import summarize

from ..conftest import ROOT, run_casekit

FIXTURES = ROOT / "tests" / "fixtures" / "report" / "archive"
QUICK = 30  # seconds: a command over nine bundles takes about one; a hang or an unbounded read takes forever
LIMIT_MIB = 1024  # what an unguarded child may take


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This user's casekit cache (where the key lives), fresh for each test, for this process and the CLI."""
    cache = tmp_path / "user-cache"
    monkeypatch.setenv("CASEKIT_CACHE", str(cache))
    return cache


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    root = tmp_path / "cases"
    root.mkdir()
    for bundle in FIXTURES.glob("*.toml"):
        (root / bundle.name).write_bytes(bundle.read_bytes())
    return root


def casekit(*args: str, archive: Path) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    done = run_casekit(*args, "--archive", str(archive), timeout=QUICK)
    assert time.monotonic() - started < QUICK
    assert "Traceback" not in done.stderr, done.stderr
    return done


def expected_html(archive: Path) -> dict[str, str]:
    """The full render of every valid bundle (case pages carry no time stamp)."""
    files = get_format("html").render(summarize(Archive(archive).load_all_tolerant()[0]))
    return {name: text for name, text in files.items() if name.startswith("cases/")}


def case_pages(out: Path) -> dict[str, str]:
    return {f"cases/{p.name}": p.read_text() for p in (out / "cases").glob("*.html")}


IN_A_CHILD = """
import importlib, os, resource, sys
from pathlib import Path
from casekit.archive import Archive

resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))


def plain_read(path, *limits):  # the read casekit used to do: follows links, blocks on a FIFO, reads to the end
    print("plain read of", path, file=sys.stderr, flush=True)
    with open(path, "rb") as handle:
        return handle.read(), os.fstat(handle.fileno())


if {guard!r}:
    module, name = {guard!r}.rsplit(".", 1)
    plain = plain_read if name.endswith("_file") else lambda *args: plain_read(*args)[0]
    setattr(importlib.import_module(module), name, plain)
try:
    {run}
finally:
    print("peak-kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def in_a_child(run: str, unguarded: str = "", timeout: float = 3) -> str:
    """Run the statement `run` in a child given LIMIT_MIB of memory, where the reader `unguarded`
    ("module.name"), if named, is a plain read: how a FIFO or /dev/zero fares without the guard.

    'hung' when it ran past `timeout` ('hung in a plain read' when it was in one); 'out of memory' when
    it raised MemoryError or took over half of what it was given (the index reader catches the
    MemoryError: the memory was taken all the same, and without the limit the OOM killer ends it);
    else 'finished'."""
    script = IN_A_CHILD.format(limit=LIMIT_MIB << 20, guard=unguarded, run=run)
    try:
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as late:
        said = late.stderr.decode() if isinstance(late.stderr, bytes) else late.stderr or ""
        return "hung in a plain read" if "plain read of" in said else "hung"
    if unguarded:  # else the guard was in the way, and the control controls nothing
        assert "plain read of" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr or "MemoryError" in done.stderr, done.stderr
    peak_mib = int(done.stderr.rsplit("peak-kib ", 1)[1].split()[0]) >> 10
    return "out of memory" if "MemoryError" in done.stderr or peak_mib > LIMIT_MIB // 2 else "finished"


# ------------------------------------------------------------------ an index that is not a file


def plant_index(archive: Path, kind: str) -> Path:
    index = archive / CACHE_DIR / INDEX_FILE
    index.parent.mkdir(exist_ok=True)
    if kind == "symlink-to-dev-zero":
        index.symlink_to("/dev/zero")
    else:
        os.mkfifo(index)
    return index


@pytest.mark.parametrize("kind", ["symlink-to-dev-zero", "fifo"])
def test_an_index_that_is_not_a_file_is_rebuilt_quickly(archive: Path, kind: str) -> None:
    index = plant_index(archive, kind)
    listed = casekit("list", archive=archive)
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 2 + 9
    assert index.is_file() and not index.is_symlink()  # replaced by casekit's own index


@pytest.mark.parametrize("kind", ["symlink-to-dev-zero", "fifo"])
def test_control_the_unguarded_index_read_blows_up_or_hangs(archive: Path, kind: str) -> None:
    Archive(archive).summaries()  # a key and a folder, so the unguarded child gets as far as reading the index
    (archive / CACHE_DIR / INDEX_FILE).unlink()
    plant_index(archive, kind)
    run = f"Archive(Path({str(archive)!r})).summaries()"
    outcome = in_a_child(run, unguarded="casekit.archive_index.read_regular_bytes")
    assert outcome == ("hung in a plain read" if kind == "fifo" else "out of memory")


# ------------------------------------------------------------------ bundles that are not files


def plant_bundle(archive: Path, kind: str) -> Path:
    bundle = archive / "evil.toml"
    if kind == "symlink-to-dev-zero":
        bundle.symlink_to("/dev/zero")
    else:
        os.mkfifo(bundle)
    return bundle


@pytest.mark.parametrize("kind", ["symlink-to-dev-zero", "fifo"])
def test_a_bundle_that_is_not_a_file_is_one_invalid_line(archive: Path, tmp_path: Path, kind: str) -> None:
    bundle = plant_bundle(archive, kind)
    line = f"casekit: invalid bundle: {bundle}: "
    listed = casekit("list", archive=archive)
    assert listed.returncode == 2 and "item-branch" in listed.stdout
    assert [text for text in listed.stderr.splitlines() if text.startswith(line)] != [], listed.stderr
    out = tmp_path / "report"
    reported = casekit("report", "--out", str(out), archive=archive)
    assert reported.returncode == 2 and line in reported.stderr, reported.stderr
    assert case_pages(out) == expected_html(archive)
    alone = tmp_path / "alone"
    alone.mkdir()
    bundle.rename(alone / bundle.name)
    replayed = casekit("replay", archive=alone)  # nothing valid to run: it stops before any target starts
    assert replayed.returncode == 2, replayed.stderr
    assert f"invalid bundle: {alone / bundle.name}: " in replayed.stderr


@pytest.mark.parametrize("kind", ["symlink-to-dev-zero", "fifo"])
def test_control_the_unguarded_bundle_read_blows_up_or_hangs(archive: Path, kind: str) -> None:
    plant_bundle(archive, kind)
    run = f"Archive(Path({str(archive)!r})).summaries_tolerant()"
    outcome = in_a_child(run, unguarded="casekit.archive_index.read_regular_file")
    assert outcome == ("hung in a plain read" if kind == "fifo" else "out of memory")


# ------------------------------------------------------------------ the archive's .gitignore


TAKE_THE_LOCK = "with Archive(Path({archive!r})).locked(): pass"


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_the_archive_gitignore_is_never_followed_or_waited_on(archive: Path, tmp_path: Path, kind: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    ignore = archive / ".gitignore"
    if kind == "symlink":
        ignore.symlink_to(victim)
    else:
        os.mkfifo(ignore)
    assert in_a_child(TAKE_THE_LOCK.format(archive=str(archive)), timeout=QUICK) == "finished"
    assert victim.read_text() == "the user's file\n"
    assert ignore.is_symlink() if kind == "symlink" else not ignore.is_file()


def test_control_an_unguarded_gitignore_read_hangs(archive: Path) -> None:
    os.mkfifo(archive / ".gitignore")
    outcome = in_a_child(TAKE_THE_LOCK.format(archive=str(archive)), unguarded="casekit.archive.read_regular_bytes")
    assert outcome == "hung in a plain read"
