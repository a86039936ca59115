"""The HTML report over a large archive: case pages rendered once per (bundle, latest results).

A case page needs the whole case (scripts, observations, history), so rendering
10,000 of them means parsing 10,000 bundles. The page depends only on the bundle's
bytes, the case's latest cells and the renderer's code (it carries no time stamp),
so it is kept in the archive's `.casekit/pages/` keyed by a hash of exactly those.
Like the index, it is derived: a lost or corrupt page is rendered again. The key is
made of public data, so anyone who can write to a shared archive could plant a page
under it: a stored page is used only with this user's seal (`casekit.archive.cache`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from casekit.archive.cache import CACHE_DIR, Seal, cache_folder
from casekit.archive.index import CaseDigest, parallel_workers, parse_bundle_bytes
from casekit.bundle import MAX_BUNDLE_BYTES, load_case
from casekit.fsutil import UnreadableFile, read_regular_bytes, write_atomic
from casekit.model import Case
from casekit.report.output import CasePages, PageWritten, write_files
from casekit.report.summary import ArchiveSummary, CaseSummary

T = TypeVar("T")
R = TypeVar("R")
PAGES_DIR = "pages"
# Stands for the stylesheet every page inlines (a quarter of a page): stored once, not 10,000 times.
STYLESHEET_MARK = "\x00casekit-stylesheet\x00"
STYLESHEET_MARK_BYTES = STYLESHEET_MARK.encode()
SUFFIX = ".html"
# A page embeds its bundle's scripts and history, escaped: a few times the largest bundle at most.
MAX_PAGE_BYTES = 4 * MAX_BUNDLE_BYTES


def renderer_fingerprint() -> str:
    """Changes whenever the code or the stylesheet that renders a case page does."""
    here = Path(__file__).parent
    hasher = hashlib.sha256()
    pages = ("html.py", "pictures.py", "text.py", "summary.py", "assets/report.css")  # a case page's drawing too
    for part in (
        *(here / name for name in pages),
        Path(__file__),
        here.parent / "model.py",
        here.parent / "versions.py",
    ):
        hasher.update(part.read_bytes())
    return hasher.hexdigest()[:16]


def page_key(fingerprint: str, summary: CaseSummary) -> str | None:
    """What a case page is a function of: the bundle's bytes, its latest cells, the renderer."""
    if not isinstance(summary.case, CaseDigest) or not summary.case.sha256:
        return None
    # Cells hold plain values (str, numbers, lists, dicts, string enums). Canonical JSON keys them by
    # value: an enum and its string, or dicts filled in another order, render the same page.
    cells = [vars(cell) for _, cell in sorted(summary.cells.items())]
    canonical = json.dumps([fingerprint, summary.case.sha256, cells], sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


class PageCache:
    """Rendered case pages of one archive, one file per case and key.

    A stored page is a header line (its length and its seal, an HMAC with this user's key
    over the case, the key and the page, so a damaged or planted file is a miss, not a wrong
    page) and the page with the stylesheet's mark in place. Not compressed: decompressing
    10,000 pages costs more than reading them. Without a key (or a real folder) nothing is
    stored or read: every page is rendered.
    """

    def __init__(self, archive_root: Path) -> None:
        from casekit.report.html import stylesheet

        self.archive_root = archive_root
        self.seal = Seal.local()
        self.prefix = os.fspath(archive_root / CACHE_DIR / PAGES_DIR)
        folder = cache_folder(archive_root, PAGES_DIR, create=False)  # None where a link or a file stands
        self.fingerprint = renderer_fingerprint()
        self.stylesheet = stylesheet()
        self.stylesheet_bytes = self.stylesheet.encode("utf-8")
        try:
            names = os.listdir(folder) if folder and self.seal else []
        except OSError:
            names = []
        self.stored: dict[str, set[str]] = {}  # case id -> keys on disk
        for name in names:
            if name.endswith(SUFFIX):
                case_id, _, key = name[: -len(SUFFIX)].rpartition(".")
                self.stored.setdefault(case_id, set()).add(key)

    def _path(self, case_id: str, key: str) -> str:
        return f"{self.prefix}/{case_id}.{key}{SUFFIX}"

    def get(self, case_id: str, key: str) -> str | None:
        """The stored page, or None."""
        body = self.get_bytes(case_id, key)
        try:
            return None if body is None else body.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def get_bytes(self, case_id: str, key: str) -> bytes | None:
        """The stored page as UTF-8 bytes, or None (no decoding, for copying out)."""
        if key not in self.stored.get(case_id, ()) or self.seal is None:
            return None
        try:  # a regular file, bounded, never through a link, never blocking
            header, _, body = read_regular_bytes(Path(self._path(case_id, key)), MAX_PAGE_BYTES).partition(b"\n")
            _, length, tag = header.split(b" ")
        except (OSError, UnreadableFile, ValueError):
            return None
        if length != b"%d" % len(body) or not self.seal.verify(_purpose(case_id, key), body, tag):
            return None  # damaged, or not written by this user's casekit (planted): rendered again
        return body.replace(STYLESHEET_MARK_BYTES, self.stylesheet_bytes, 1)

    def put(self, case_id: str, key: str, page: str) -> None:
        """Store a page (best effort: a cache we cannot write is no cache); drop the case's older pages."""
        if page.count(self.stylesheet) != 1 or STYLESHEET_MARK in page or self.seal is None:
            return
        body = page.replace(self.stylesheet, STYLESHEET_MARK).encode("utf-8")
        tag = self.seal.tag(_purpose(case_id, key), body)
        if cache_folder(self.archive_root, PAGES_DIR, create=True) is None:  # a link in its place is replaced
            return
        try:
            write_atomic(self._path(case_id, key), b"casekit-page %d %s\n" % (len(body), tag) + body, durable=False)
        except OSError:
            return
        for old in self.stored.get(case_id, set()) - {key}:
            Path(self._path(case_id, old)).unlink(missing_ok=True)
        self.stored[case_id] = {key}

    def prune(self, keep: set[str]) -> None:
        """Forget the pages of cases no longer in the archive."""
        for case_id in [c for c in self.stored if c not in keep]:
            for key in self.stored.pop(case_id):
                Path(self._path(case_id, key)).unlink(missing_ok=True)


def _purpose(case_id: str, key: str) -> str:
    """What a page's seal names: its case and key (a sealed page moved to another name is no hit)."""
    return f"page {case_id}.{key}"


def render_html(summary: ArchiveSummary, archive_root: Path) -> dict[str, str]:
    """The HTML report's files (what `HtmlReport().render` gives for the full cases), reusing stored pages.

    `summary.cases` may hold index digests; a case page not in the cache is rendered
    from the full case, read from its bundle in `archive_root`.
    """
    from casekit.report.html import index_page

    cache = PageCache(archive_root)
    files = {"index.html": index_page(summary)}
    missing: list[tuple[CaseSummary, str | None]] = []
    for case_summary in summary.cases:
        key = page_key(cache.fingerprint, case_summary)
        page = cache.get(case_summary.case.id, key) if key else None
        if page is None:
            missing.append((case_summary, key))
        else:
            files[f"cases/{case_summary.case.id}.html"] = page
    rendered = _render_pages(archive_root, [case_summary for case_summary, _ in missing])
    for (case_summary, key), (page, sha256) in zip(missing, rendered, strict=True):
        files[f"cases/{case_summary.case.id}.html"] = page
        _store(cache, case_summary, key, page, sha256)
    cache.prune({c.case.id for c in summary.cases})
    return dict(sorted(files.items()))


def _store(cache: PageCache, case_summary: CaseSummary, key: str | None, page: str, sha256: str | None) -> None:
    # only a page made from the very bytes the key names (not from a bundle rewritten since)
    if key and sha256 == getattr(case_summary.case, "sha256", ""):
        cache.put(case_summary.case.id, key, page)


def write_html_report(summary: ArchiveSummary, archive_root: Path, out: Path) -> int:
    """Write the HTML report into `out` (the files `render_html` gives), using every core; returns the file count.

    A case page already in `out` and unchanged is left as it is (`report.output.CasePages`).
    Stored pages are copied out by forked workers, a slice each, while this process
    renders the index page; the pages not stored are rendered as in `render_html` and
    stored for next time.
    """
    from casekit.report.html import index_page

    cache = PageCache(archive_root)
    pages = CasePages(out)
    keyed = [(case_summary, page_key(cache.fingerprint, case_summary)) for case_summary in summary.cases]
    stale = [(c.case.id, key) for c, key in keyed if not pages.up_to_date(c.case.id, key)]
    stored = [(case_id, key) for case_id, key in stale if key and key in cache.stored.get(case_id, ())]

    def copy_out(items: list[tuple[str, str]]) -> list[PageWritten | str]:
        """Each stored page written out, or the case id where the stored page was lost."""
        done: list[PageWritten | str] = []
        for case_id, key in items:
            page = cache.get_bytes(case_id, key)
            done.append(case_id if page is None else pages.write(case_id, key, page))
        return done

    collect = _start_in_forked_slices(copy_out, stored)
    write_files({"index.html": index_page(summary)}, out)  # meanwhile, here
    copied = set()
    for done in collect():
        if isinstance(done, PageWritten):
            pages.record(done)
            copied.add(done.case_id)
    missing = [(c, key) for c, key in keyed if c.case.id not in copied and c.case.id not in pages.current]
    rendered = _render_pages(archive_root, [c for c, _ in missing])
    for (case_summary, key), (page, sha256) in zip(missing, rendered, strict=True):
        _store(cache, case_summary, key, page, sha256)
        pages.record(pages.write(case_summary.case.id, key, page.encode()))
    ids = {c.case.id for c in summary.cases}
    pages.finish(ids)
    cache.prune(ids)
    return 1 + len(summary.cases)


def _start_in_forked_slices(work: Callable[[list[T]], list[R]], items: list[T]) -> Callable[[], list[R]]:
    """Start `work` over `items`, split among forked children (they inherit everything, nothing is
    pickled but the answers they send back); returns what collects them. With few items
    or one core, the work is done here, when collected."""
    workers = parallel_workers(len(items))
    if workers == 1:
        return lambda: work(items)
    import multiprocessing

    context = multiprocessing.get_context("fork")
    children = []
    for index in range(workers):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_send_result, args=(work, items[index::workers], send), daemon=True)
        child.start()
        send.close()
        children.append((child, receive, items[index::workers]))

    def collect() -> list[R]:
        results: list[R] = []
        for child, receive, share in children:
            try:
                results += receive.recv()
            except EOFError:  # the child died: redo its share here
                results += work(share)
            child.join()
        return results

    return collect


def _send_result(work: Callable[[list[T]], list[R]], items: list[T], send: Any) -> None:
    send.send(work(items))
    send.close()


def _render_pages(archive_root: Path, summaries: list[CaseSummary]) -> list[tuple[str, str | None]]:
    """Case pages and the hash of the bundle each was read from.

    Many pages (a cold cache) are rendered by forked workers, one bundle parse each."""
    jobs = [(archive_root, case_summary) for case_summary in summaries]
    workers = parallel_workers(len(jobs))
    if workers == 1:
        return [_render_page(job) for job in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(_render_page, jobs, chunksize=max(1, len(jobs) // (workers * 8))))


def _render_page(job: tuple[Path, CaseSummary]) -> tuple[str, str | None]:
    from casekit.report.html import case_page

    archive_root, case_summary = job
    full: Case = case_summary.case
    sha256 = None
    if isinstance(full, CaseDigest):
        full, sha256 = (full.parsed, full.sha256) if full.parsed else _load_full(archive_root, full.id)
    return case_page(CaseSummary(full, case_summary.cells)), sha256


def _load_full(archive_root: Path, case_id: str) -> tuple[Case, str]:
    path = archive_root / f"{case_id}.toml"
    try:
        raw = read_regular_bytes(path, MAX_BUNDLE_BYTES)  # as the loader reads it: no link, FIFO or device
    except (OSError, UnreadableFile):
        return load_case(path), ""  # raises the bundle's own error
    return parse_bundle_bytes(raw, path), hashlib.sha256(raw).hexdigest()
