"""The archive index and the page cache: derived, never the source of truth.

Over real bundles (the report fixture archive: the nine starter cases, captured and
replayed on torch 2.13.0 and 2.5.1) copied into a temporary folder and then changed,
added to, deleted from and corrupted, every answer read through the index must be
the answer of parsing every bundle.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import multiprocessing
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from casekit.archive import index as archive_index
from casekit.archive.cache import CACHE_DIR
from casekit.archive.index import INDEX_FILE, CaseDigest, digest_of
from casekit.archive.store import Archive
from casekit.bundle import save_case
from casekit.errors import BundleError, CaseNotFound
from casekit.replay.document import read_replay_document as load_report
from casekit.replay.shard import select_shard
from casekit.report.formats import get_format
from casekit.report.page_cache import PAGES_DIR, render_html, write_html_report
from casekit.report.summary import summarize
from tests.cases import FIXTURES, NOW, mutate, replayed
from tests.conftest import run_casekit


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    root = tmp_path / "cases"
    shutil.copytree(FIXTURES / "archive", root, ignore=shutil.ignore_patterns(CACHE_DIR))
    return Archive(root)


def plain(digests: list[CaseDigest]) -> list[dict[str, object]]:
    """What a digest says, without the transient full case."""
    return [{**dataclasses.asdict(d), "parsed": None} for d in digests]


def full_parse_digests(store: Archive) -> list[CaseDigest]:
    """The digests made by parsing every bundle, as if there were no index."""
    import hashlib

    return [
        digest_of(case, hashlib.sha256(store.path_for(case.id).read_bytes()).hexdigest()) for case in store.load_all()
    ]


def assert_index_agrees(store: Archive) -> None:
    # repr, not ==: a string enum equals its string, but a digest must hold the enum the loader gives
    assert repr(plain(store.summaries())) == repr(plain(full_parse_digests(store)))


def index_path(store: Archive) -> Path:
    return store.root / CACHE_DIR / INDEX_FILE


def age(path: Path, seconds: float = 3600) -> None:
    """Date a bundle back, so that its index entry is trusted on size and mtime alone (not racy)."""
    past = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(past, past))


# ------------------------------------------------------------------ freshness


def test_a_missing_index_is_built_and_says_what_the_bundles_say(archive: Archive) -> None:
    assert not index_path(archive).exists()
    assert_index_agrees(archive)
    assert index_path(archive).exists()
    assert (archive.root / CACHE_DIR / ".gitignore").read_text().splitlines()[-1] == "*"
    assert_index_agrees(archive)  # and read back from the index


def test_an_unchanged_archive_is_not_parsed_again(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in archive.root.glob("*.toml"):
        age(path)
    archive.summaries()
    parsed: list[Path] = []
    real = archive_index.parse_bundle_bytes
    monkeypatch.setattr(archive_index, "parse_bundle_bytes", lambda raw, path: parsed.append(path) or real(raw, path))
    assert plain(archive.summaries()) == plain(full_parse_digests(archive))
    assert parsed == []


def test_changed_added_and_deleted_bundles_are_picked_up(archive: Archive) -> None:
    archive.summaries()
    case = archive.load("item-branch")
    case.title = "a new title, a longer one than before"
    case.tags.append("draft")
    archive.save(case)
    replayed(archive, "tensor-if", "regressed", "2099-01-01T00:00:00+00:00")
    added = copy.deepcopy(archive.load("numpy-tolist"))
    added.id = "numpy-tolist-again"
    archive.save(added)
    archive.path_for("module-break").unlink()
    digests = {d.id: d for d in archive.summaries()}
    assert digests["item-branch"].title == "a new title, a longer one than before"
    assert "draft" in digests["item-branch"].tags
    assert digests["tensor-if"].replays[-1].verdict == "regressed"
    assert "numpy-tolist-again" in digests and "module-break" not in digests
    assert "module-break" not in json.loads(index_path(archive).read_text())["entries"]
    assert_index_agrees(archive)


def test_a_same_size_rewrite_in_the_same_tick_is_caught(archive: Archive) -> None:
    """Racy entries: size and mtime equal, bytes not (a rewrite within the file system's clock tick)."""
    path = archive.path_for("item-branch")
    os.utime(path)  # written just now, indexed at once
    archive.summaries()
    stat = path.stat()
    text = path.read_text()
    assert "A data-dependent" in text
    path.write_text(text.replace("A data-dependent", "A data_dependent", 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert archive.summaries()[0].title.startswith("A data_dependent")
    assert_index_agrees(archive)


def test_without_history_only_the_last_replay_is_kept(archive: Archive) -> None:
    replayed(archive, "tensor-if", "regressed", "1999-01-01T00:00:00+00:00")  # appended last, oldest in time
    for _ in range(2):  # parsed, then from the index
        light = {d.id: d for d in archive.summaries(history=False)}
        assert light["tensor-if"].replays == []
        assert light["tensor-if"].last_replay == ("venv:torch-2.9.0", "regressed")
    full = {c.id: c for c in archive.load_all()}
    for case_id, digest in light.items():
        last = full[case_id].replays[-1] if full[case_id].replays else None
        assert digest.last_replay == ((last.target, last.verdict) if last else None)
    assert_index_agrees(archive)


def test_a_touched_but_unchanged_bundle_keeps_its_digest(archive: Archive) -> None:
    before = plain(archive.summaries())
    for path in archive.root.glob("*.toml"):
        os.utime(path)  # a git checkout or a copy: new mtimes, same bytes
    assert plain(archive.summaries()) == before


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"\x00\xff garbage",
        b'{"format": 1, "entries": {',
        b"[]",
        b'{"format": "x", "entries": {}}',
        "shape",
        "history",
    ],
)
def test_a_corrupt_index_is_silently_rebuilt(archive: Archive, damage: bytes | str) -> None:
    archive.summaries()
    if isinstance(damage, str):
        document = json.loads(index_path(archive).read_text())
        for entry in document["entries"].values():
            if damage == "shape":
                entry[0] = "big"
            else:  # a stored history that no longer decodes: found only when the history is read
                entry[4] = '[["not", "a record"' if entry[4] == "[]" else entry[4][:-9]
        damage = json.dumps(document).encode()
    assert isinstance(damage, bytes)
    index_path(archive).write_bytes(damage)
    assert_index_agrees(archive)
    assert json.loads(index_path(archive).read_text())["format"] == archive_index.code_fingerprint()
    assert_index_agrees(archive)


def test_an_index_from_other_code_or_other_hands_is_rebuilt(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    archive.summaries()
    document = json.loads(index_path(archive).read_text())
    for entry in document["entries"].values():
        entry[3][1] = "written by another casekit"  # the title
    index_path(archive).write_text(json.dumps(document))
    assert_index_agrees(
        archive
    )  # not sealed with this user's key: not casekit's (tests/security/test_archive_cache.py)
    monkeypatch.setattr(archive_index, "FORMAT", archive_index.FORMAT + 1)  # the reading code changed
    assert_index_agrees(archive)


def test_a_bad_bundle_fails_like_a_full_parse_and_the_rest_is_kept(archive: Archive) -> None:
    archive.path_for("numpy-tolist").write_text('schema_version = 1\nid = "numpy-tolist"\n')
    with pytest.raises(BundleError) as from_load:
        archive.load_all()
    with pytest.raises(BundleError) as from_index:
        archive.summaries()
    assert str(from_index.value) == str(from_load.value)
    assert "numpy-tolist.toml" in str(from_index.value)
    assert "item-branch" in json.loads(index_path(archive).read_text())["entries"]
    with pytest.raises(CaseNotFound):
        archive.summaries(["no-such-case"])


def test_a_file_whose_id_differs_from_its_name_is_an_error(archive: Archive) -> None:
    shutil.copy(archive.path_for("item-branch"), archive.root / "copy-of-item.toml")
    with pytest.raises(BundleError, match="does not match the file name"):
        archive.summaries()


def big_archive(root: Path) -> Archive:
    """More bundles than the index parses alone: the fixture cases copied under new ids."""
    root.mkdir()
    templates = Archive(FIXTURES / "archive").load_all()
    for number in range(archive_index.PARALLEL_FROM + 12):
        case = copy.deepcopy(templates[number % len(templates)])
        case.id = f"{case.id}-{number:03d}"
        save_case(case, root / f"{case.id}.toml")
    return Archive(root)


@pytest.mark.process
def test_many_stale_bundles_are_parsed_by_workers_with_the_same_result(tmp_path: Path) -> None:
    store = big_archive(tmp_path / "big")
    started = time.perf_counter()
    digests = store.summaries()
    assert time.perf_counter() - started < 60  # a loose bound: about 60 parses
    assert plain(digests) == plain(full_parse_digests(store))


@pytest.mark.process
def test_the_index_stays_out_of_the_users_repository(archive: Archive) -> None:
    subprocess.run(["git", "init", "-q", str(archive.root)], check=True)
    archive.summaries()
    render_html(summarize(archive.summaries(keep_cases=True), now=NOW), archive.root)
    assert (archive.root / CACHE_DIR / PAGES_DIR).is_dir()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=archive.root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert sorted(line.split()[-1] for line in status if line) == sorted(p.name for p in archive.root.glob("*.toml"))


# ------------------------------------------------------------------ concurrency


def _hammer(root: str, which: str, rounds: int) -> None:
    store = Archive(Path(root))
    for number in range(rounds):
        case = store.load(which)
        case.title = f"{which} rewritten {number} " + "x" * (number % 7)
        store.save(case)
        store.summaries()


@pytest.mark.process
def test_concurrent_writers_never_corrupt_the_index(archive: Archive) -> None:
    archive.summaries()
    ids = archive.ids()[:4]
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_hammer, args=(str(archive.root), case_id, 15)) for case_id in ids]
    for worker in workers:
        worker.start()
    for _ in range(30):  # a reader in the middle of it all
        assert len(archive.summaries()) == len(archive.ids())
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    json.loads(index_path(archive).read_text())  # whole: the last writer's
    assert not list((archive.root / CACHE_DIR).glob("*.tmp"))
    digests = {d.id: d for d in archive.summaries()}
    for case_id in ids:
        assert digests[case_id].title.startswith(f"{case_id} rewritten 14")
    assert_index_agrees(archive)


# ------------------------------------------------------------------ the views


@pytest.mark.parametrize("mutated", [False, True])
def test_reports_from_the_index_equal_reports_from_full_parses(archive: Archive, mutated: bool) -> None:
    archive.summaries()
    render_html(summarize(archive.summaries(), now=NOW), archive.root)  # fill the page cache
    if mutated:
        mutate(archive)
    documents = [("replay.json", load_report(FIXTURES / "replay-torch-2.5.1.json"))]
    for results in ([], documents):
        full = summarize(archive.load_all(), results, now=NOW)
        for keep in (False, True):
            indexed = summarize(archive.summaries(keep_cases=keep), results, now=NOW)
            for name in ("md", "json", "junit"):
                fmt = get_format(name)
                assert fmt.render(indexed) == fmt.render(full), name
            expected = get_format("html").render(full)
            assert render_html(indexed, archive.root) == expected  # cached pages where unchanged
            assert render_html(indexed, archive.root) == expected  # all from the cache
    pages = list((archive.root / CACHE_DIR / PAGES_DIR).iterdir())
    assert len(pages) <= 2 * len(archive.ids())  # older pages of a case are dropped
    assert {p.name.split(".")[0] for p in pages} <= set(archive.ids())


@pytest.mark.parametrize("damage", ["cut short", "one byte changed", "garbage"])
def test_a_corrupt_cached_page_is_rendered_again(archive: Archive, damage: str) -> None:
    summary = summarize(archive.summaries(), now=NOW)
    expected = render_html(summary, archive.root)
    for page in (archive.root / CACHE_DIR / PAGES_DIR).iterdir():
        stored = page.read_bytes()
        middle = len(stored) // 2
        page.write_bytes(
            {
                "cut short": stored[:-40],
                "one byte changed": stored[:middle] + bytes([stored[middle] ^ 1]) + stored[middle + 1 :],
                "garbage": b"\x00\xffnot a page",
            }[damage]
        )
    assert render_html(summary, archive.root) == expected
    assert render_html(summary, archive.root) == expected  # stored again, whole


def test_shard_planning_from_the_index_equals_planning_from_the_bundles(archive: Archive) -> None:
    mutate(archive)
    labels = ["venv:torch-2.5.1", "python:2.13.0", "venv:torch-2.9.0"]
    from_bundles = [c.id for c in archive.load_all() if "draft" not in c.tags]
    from_index = [c.id for c in archive.summaries() if "draft" not in c.tags]
    assert from_index == from_bundles
    for k in (1, 2, 3, 4, 5):
        assert select_shard(from_index, labels, k, 5) == select_shard(from_bundles, labels, k, 5)


@pytest.mark.process
@pytest.mark.parametrize("mutated", [False, True])
def test_the_list_and_report_commands_say_what_the_bundles_say(archive: Archive, tmp_path: Path, mutated: bool) -> None:
    if mutated:
        archive.summaries()
        mutate(archive)
    from casekit.report.text import table

    rows = []
    for case in archive.load_all():
        pre = case.observations.get("pre")
        last = case.replays[-1] if case.replays else None
        row = [case.id, case.title, ",".join(case.tags), str(len(pre.sites)) if pre else "-"]
        rows.append([*row, f"{last.target} {last.verdict}" if last else "-"])
    for _ in range(2):  # cold, then warm
        listed = run_casekit("list", "--archive", str(archive.root))
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout == table(["id", "title", "tags", "breaks", "last replay"], rows) + "\n"
    expected = get_format("html").render(summarize(archive.load_all(), now=NOW))
    stored_pages = []
    for run in range(2):
        out = tmp_path / f"report-{run}"
        done = run_casekit("report", "--archive", str(archive.root), "--out", str(out))
        assert done.returncode == 0, done.stderr
        written = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*.html")}
        stamp = written["index.html"].split("generated by casekit on ")[1].split(" &middot;")[0]
        assert written == {k: v.replace(NOW.isoformat(), stamp) for k, v in expected.items()}
        pages = archive.root / CACHE_DIR / PAGES_DIR
        stored_pages.append({p.name: p.stat().st_ino for p in pages.iterdir()})
    # the second report rendered nothing: every stored page is the very file the first one wrote
    assert stored_pages[0] == stored_pages[1] and len(stored_pages[0]) == len(archive.ids())


@pytest.mark.process
def test_a_warm_index_of_hundreds_of_bundles_is_quick(tmp_path: Path) -> None:
    """A loose upper bound (the bench measures): no bundle is parsed when nothing changed."""
    root = tmp_path / "big"
    root.mkdir()
    template = Archive(FIXTURES / "archive").load("item-branch")
    text = (FIXTURES / "archive" / "item-branch.toml").read_text()
    for number in range(400):
        (root / f"item-branch-{number:04d}.toml").write_text(
            text.replace('id = "item-branch"', f'id = "item-branch-{number:04d}"', 1)
        )
        age(root / f"item-branch-{number:04d}.toml")
    assert template.id == "item-branch"
    store = Archive(root)
    store.summaries()
    started = time.perf_counter()
    assert len(store.summaries()) == 400
    assert time.perf_counter() - started < 2.0  # about 0.05 s on an idle machine


@pytest.mark.process
def test_a_big_report_written_by_workers_equals_the_full_render(tmp_path: Path) -> None:
    store = big_archive(tmp_path / "big")
    expected = get_format("html").render(summarize(store.load_all(), now=NOW))
    for run in ("cold", "warm"):
        out = tmp_path / run
        count = write_html_report(summarize(store.summaries(keep_cases=True), now=NOW), store.root, out)
        written = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*.html")}
        assert count == len(written) and written == expected, run
