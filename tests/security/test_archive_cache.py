"""The archive's derived files (`.casekit/`: the index, the page cache) as an attacker plants them.

A shared archive is a git repository anyone on the team (or a cloned project) can commit to,
`git add -f cases/.casekit/...` included. Each attack runs for real, through the CLI or the
functions it calls, over a copy of the report fixture archive (nine real cases with history),
and each has a control: the same attack with the guard taken away (monkeypatched, or the read
casekit used to do) does the damage, so the test shows the guard, not a harmless setup.
Every CLI run has a timeout: a hang fails the test instead of hanging the suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from casekit.archive import index as archive_index
from casekit.archive.cache import CACHE_DIR, Seal
from casekit.archive.index import INDEX_FILE, RECORD_FIELDS, ROW_CHECKS, TAG_HEAD, digest_of
from casekit.archive.store import Archive
from casekit.report import page_cache
from casekit.report.formats import get_format
from casekit.report.page_cache import PAGES_DIR, STYLESHEET_MARK, page_key, render_html, renderer_fingerprint
from casekit.report.summary import summarize
from casekit.settings import archive_cache_key_path

from ..conftest import ROOT, run_casekit

pytestmark = pytest.mark.process  # every test here starts processes, git or signals

FIXTURES = ROOT / "tests" / "fixtures" / "report" / "archive"
START_LIMIT_S = 120  # seconds a loaded machine may take to start a child and reach its plain read
QUICK = 30  # seconds: a command over nine bundles takes about one; a hang or an unbounded read takes forever
LIMIT_MIB = 1024  # what an unguarded child may take
# how long an unguarded read is given: a FIFO never ends (3 s shows it); /dev/zero fills LIMIT_MIB, which a
# machine loaded 5x over (two cores, other test runs) took more than 3 s to do
UNBOUNDED_READ_S = {"fifo": 3.0, "symlink-to-dev-zero": 30.0}
FORGED = b"<script>alert('owned')</script><p>FIXED in 2.13, safe to drop</p>"


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


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def victim_folder(tmp_path: Path) -> Path:
    """Another folder of the user's, with an index.json and pages of its own (at the top and in pages/)."""
    victim = tmp_path / "victim"
    (victim / PAGES_DIR).mkdir(parents=True)
    (victim / INDEX_FILE).write_text('{"the user\'s": "own index"}\n')
    for folder in (victim, victim / PAGES_DIR):
        (folder / "notes.v2.html").write_text("<p>the user's own page</p>\n")
        (folder / "item-branch.0123456789abcdef01234567.html").write_text("<p>named like a cached page</p>\n")
    return victim


def link_to_victim(archive: Path, tmp_path: Path, link: str) -> Path:
    """`archive/link` (`.casekit` or `.casekit/pages`) committed as a symlink to the victim folder (or its pages/)."""
    victim = victim_folder(tmp_path)
    (archive / link).parent.mkdir(exist_ok=True)
    (archive / link).symlink_to(victim if link == CACHE_DIR else victim / PAGES_DIR)
    return victim


def expected_html(archive: Path) -> dict[str, str]:
    """The full render of every valid bundle (case pages carry no time stamp)."""
    files = get_format("html").render(summarize(Archive(archive).load_all_tolerant()[0]))
    return {name: text for name, text in files.items() if name.startswith("cases/")}


def case_pages(out: Path) -> dict[str, str]:
    return {f"cases/{p.name}": p.read_text() for p in (out / "cases").glob("*.html")}


def followed_folder(root: Path, *names: str, create: bool) -> Path | None:
    """The guard taken away: `.casekit/...` joined and made as a path, links and all (what casekit did)."""
    folder = root.joinpath(CACHE_DIR, *names)
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return folder


IN_A_CHILD = """
import importlib, os, resource, sys
from pathlib import Path
from casekit.archive.store import Archive

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
    # VmHWM is this process's own peak; ru_maxrss is not: Linux carries the parent's peak into a child
    # that subprocess starts with vfork, and a pytest worker past LIMIT_MIB / 2 made every child "out of memory"
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print("peak-kib", peak.split()[1], file=sys.stderr)
"""


def in_a_child(run: str, unguarded: str = "", timeout: float = 3) -> str:
    """Run the statement `run` in a child given LIMIT_MIB of memory, where the reader `unguarded`
    ("module.name"), if named, is a plain read: how a FIFO or /dev/zero fares without the guard.

    'hung' when it ran past `timeout` ('hung in a plain read' when it was in one); 'out of memory' when
    it raised MemoryError or took over half of what it was given (the index reader catches the
    MemoryError: the memory was taken all the same, and without the limit the OOM killer ends it);
    else 'finished'. With `unguarded`, the `timeout` counts from the moment the child says it starts
    the plain read, so a loaded machine that is slow to start the child cannot pass for a hang."""
    script = IN_A_CHILD.format(limit=LIMIT_MIB << 20, guard=unguarded, run=run)
    child = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    reading = threading.Event()

    def collect() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            lines.append(line)
            if line.startswith("plain read of"):
                reading.set()

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    started = time.monotonic()
    while unguarded and not reading.is_set() and child.poll() is None and time.monotonic() - started < START_LIMIT_S:
        reading.wait(0.05)
    try:
        child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        collector.join(timeout=5)
        return "hung in a plain read" if reading.is_set() else "hung"
    collector.join(timeout=5)
    said = "".join(lines)
    if unguarded:  # else the guard was in the way, and the control controls nothing
        assert "plain read of" in said, said
    assert "Traceback" not in said or "MemoryError" in said, said
    peak_mib = int(said.rsplit("peak-kib ", 1)[1].split()[0]) >> 10
    return "out of memory" if "MemoryError" in said or peak_mib > LIMIT_MIB // 2 else "finished"


# ------------------------------------------------------------------ links in place of casekit's folders


@pytest.mark.parametrize("link", [CACHE_DIR, f"{CACHE_DIR}/{PAGES_DIR}"])
def test_a_committed_cache_link_is_never_followed(archive: Path, tmp_path: Path, link: str) -> None:
    victim = link_to_victim(archive, tmp_path, link)
    before = snapshot(victim)
    listed = casekit("list", archive=archive)
    assert listed.returncode == 0 and "item-branch" in listed.stdout, listed.stderr
    out = tmp_path / "report"
    done = casekit("report", "--out", str(out), archive=archive)
    assert done.returncode == 0, done.stderr
    assert snapshot(victim) == before  # no index.json overwritten, no .gitignore written, no page deleted
    assert case_pages(out) == expected_html(archive)
    for level in (archive / CACHE_DIR, archive / CACHE_DIR / PAGES_DIR):  # replaced by casekit's own folders
        assert level.is_dir() and not level.is_symlink()
    assert len(list((archive / CACHE_DIR / PAGES_DIR).glob("*.html"))) == 9


@pytest.mark.parametrize("link", [CACHE_DIR, f"{CACHE_DIR}/{PAGES_DIR}"])
def test_control_without_the_guard_the_link_is_written_through(
    archive: Path, tmp_path: Path, link: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = link_to_victim(archive, tmp_path, link)
    before = snapshot(victim)
    monkeypatch.setattr(archive_index, "cache_folder", followed_folder)
    monkeypatch.setattr(page_cache, "cache_folder", followed_folder)
    summary = summarize(Archive(archive).summaries(keep_cases=True))
    page_cache.write_html_report(summary, archive, tmp_path / "report")
    after = snapshot(victim)
    assert "pages/notes.v2.html" not in after  # the user's page, deleted as a stale cached page
    assert "notes.v2.html" in after  # (a control of the control: only what the cache folder holds)
    if link == CACHE_DIR:
        assert after[INDEX_FILE] != before[INDEX_FILE] and ".gitignore" in after  # overwritten, planted


def test_a_cache_folder_that_is_a_file_or_a_fifo_is_replaced(archive: Path) -> None:
    (archive / CACHE_DIR).write_text("not a folder\n")
    assert casekit("list", archive=archive).returncode == 0
    assert (archive / CACHE_DIR / INDEX_FILE).is_file()
    (archive / CACHE_DIR / PAGES_DIR).unlink(missing_ok=True)
    os.mkfifo(archive / CACHE_DIR / PAGES_DIR)
    assert casekit("report", "--out", str(archive.parent / "report"), archive=archive).returncode == 0
    assert (archive / CACHE_DIR / PAGES_DIR).is_dir()


# ------------------------------------------------------------------ a page casekit did not write


def public_page_name(archive: Path, case_id: str) -> str:
    """The cache file name of a case page, as anyone can compute it from the committed bundles."""
    cases = Archive(archive).load_all()
    digests = [digest_of(c, hashlib.sha256((archive / f"{c.id}.toml").read_bytes()).hexdigest()) for c in cases]
    summary = next(s for s in summarize(digests).cases if s.case.id == case_id)
    key = page_key(renderer_fingerprint(), summary)
    assert key is not None
    return f"{case_id}.{key}.html"


def plant_page(archive: Path, name: str) -> None:
    body = f"<!doctype html><style>{STYLESHEET_MARK}</style>".encode() + FORGED
    folder = archive / CACHE_DIR / PAGES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    # right length, right name, a tag only the user's key could make right
    (folder / name).write_bytes(b"casekit-page %d %s\n" % (len(body), b"0" * 64) + body)


def test_a_planted_page_is_never_published(archive: Path, tmp_path: Path, own_cache: Path) -> None:
    name = public_page_name(archive, "item-branch")
    plant_page(archive, name)
    assert not archive_cache_key_path(own_cache).exists()  # a fresh clone, a user who never ran casekit
    out = tmp_path / "report"
    assert casekit("report", "--out", str(out), archive=archive).returncode == 0
    assert FORGED.decode() not in (out / "cases" / "item-branch.html").read_text()
    assert case_pages(out) == expected_html(archive)  # the real page is
    assert (archive / CACHE_DIR / PAGES_DIR / name).is_file()  # the same name: casekit's own page now
    # a user whose cache is warm: the planted page over casekit's own is not published either
    plant_page(archive, name)
    again = tmp_path / "again"
    assert casekit("report", "--out", str(again), archive=archive).returncode == 0
    assert case_pages(again) == expected_html(archive)
    key = archive_cache_key_path(own_cache)
    assert key.stat().st_mode & 0o777 == 0o600 and archive not in key.parents


def test_control_without_the_seal_the_planted_page_is_published(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plant_page(archive, public_page_name(archive, "item-branch"))
    monkeypatch.setattr(Seal, "verify", lambda self, purpose, data, tag: True)
    files = render_html(summarize(Archive(archive).summaries()), archive)
    assert FORGED.decode() in files["cases/item-branch.html"]  # the name was right: only the seal stops it


# ------------------------------------------------------------------ an index that is not a file, or not casekit's


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
    assert index.is_file() and not index.is_symlink()  # replaced by casekit's own, sealed index


@pytest.mark.parametrize("kind", ["symlink-to-dev-zero", "fifo"])
def test_control_the_unguarded_index_read_blows_up_or_hangs(archive: Path, kind: str) -> None:
    Archive(archive).summaries()  # a key and a folder, so the unguarded child gets as far as reading the index
    (archive / CACHE_DIR / INDEX_FILE).unlink()
    plant_index(archive, kind)
    run = f"Archive(Path({str(archive)!r})).summaries()"
    outcome = in_a_child(run, unguarded="casekit.archive.index.read_regular_bytes", timeout=UNBOUNDED_READ_S[kind])
    assert outcome == ("hung in a plain read" if kind == "fifo" else "out of memory")


def signed_index(archive: Path, change: object) -> None:
    """Rewrite the index's document with `change(document)`, then seal it with this user's key, as casekit would."""
    index = archive / CACHE_DIR / INDEX_FILE
    document = json.loads(index.read_bytes())
    del document["tag"]
    change(document)  # type: ignore[operator]
    sealed = b'",' + json.dumps(document, separators=(",", ":")).encode()[1:]
    seal = Seal.local()
    assert seal is not None
    index.write_bytes(TAG_HEAD + seal.tag("index", sealed) + sealed)


def forge_header_types(document: dict) -> None:
    for entry in document["entries"].values():
        entry[3][1] = ["a", "title"]  # the title: a list
        entry[3][4] = 7  # the tags: a number
        entry[3][9] = {"pre": "one"}  # the break counts: not numbers


def forge_history_types(document: dict) -> None:
    for entry in document["entries"].values():
        rows = json.loads(entry[4])
        for row in rows:
            row[RECORD_FIELDS.index("at")] = 20991231  # a number, not a time stamp
            row[RECORD_FIELDS.index("reasons")] = 7  # a number, not a list of lines
        entry[4] = json.dumps(rows)


def forge_enum_values(document: dict) -> None:
    """Values no enum has, where the readers turn strings into enum members (verdicts, statuses, roles)."""
    for entry in document["entries"].values():
        entry[3][9] = {"middle": 1}  # the break counts of a script that is neither pre nor post
        rows = json.loads(entry[4])
        for row in rows:
            row[RECORD_FIELDS.index("verdict")] = "worse"
            row[RECORD_FIELDS.index("statuses")] = {"pre": "fine"}
        entry[4] = json.dumps(rows)


def test_a_forged_index_is_rebuilt(archive: Path) -> None:
    """Forged by hand (no seal) or with fields of the wrong types (even under this user's seal): rebuilt."""
    fresh = casekit("list", archive=archive)
    table = fresh.stdout
    index = archive / CACHE_DIR / INDEX_FILE
    document = json.loads(index.read_bytes())
    forge_header_types(document)
    index.write_text(json.dumps(document))  # a teammate's forgery: no valid seal
    listed = casekit("list", archive=archive)
    assert (listed.returncode, listed.stdout) == (0, table), listed.stderr
    expected = casekit("report", "-f", "json", "--out", "-", archive=archive).stdout
    for forge in (forge_header_types, forge_history_types, forge_enum_values):
        signed_index(archive, forge)
        listed = casekit("list", archive=archive)
        assert (listed.returncode, listed.stdout) == (0, table), listed.stderr
        signed_index(archive, forge)
        reported = casekit("report", "-f", "json", "--out", "-", archive=archive)
        assert reported.returncode == 0, reported.stderr
        assert json.loads(reported.stdout)["cases"] == json.loads(expected)["cases"]


@pytest.mark.parametrize("forge", [forge_header_types, forge_history_types])
def test_control_without_the_type_checks_a_forged_index_is_a_traceback(
    archive: Path, monkeypatch: pytest.MonkeyPatch, forge: object
) -> None:
    from casekit.report.text import case_rows

    Archive(archive).summaries()
    signed_index(archive, forge)
    monkeypatch.setattr(archive_index, "_is_header", lambda data: True)
    monkeypatch.setattr(archive_index, "_is_row", lambda row: True)
    with pytest.raises((TypeError, AttributeError)):
        if forge is forge_header_types:
            case_rows(Archive(archive).summaries(history=False))
        else:
            get_format("json").render(summarize(Archive(archive).summaries()))


def test_every_stored_field_is_checked(archive: Path) -> None:
    assert list(ROW_CHECKS) == RECORD_FIELDS
    digest = Archive(archive).summaries()[0]
    assert len(archive_index._header_json(digest)) == archive_index.HEADER_FIELDS


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
    outcome = in_a_child(run, unguarded="casekit.archive.index.read_regular_file", timeout=UNBOUNDED_READ_S[kind])
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
    outcome = in_a_child(
        TAKE_THE_LOCK.format(archive=str(archive)), unguarded="casekit.archive.store.read_regular_bytes"
    )
    assert outcome == "hung in a plain read"
