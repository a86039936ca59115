"""Writing a rendered report to disk: each file atomically; an HTML report's case pages only where they changed.

A report is derived (it can always be written again), so nothing here is fsynced.
Every file is still whole or absent: a reader never sees half a page.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

from casekit.bundle import CASE_ID
from casekit.errors import CasekitError
from casekit.fsutil import UnreadableFile, read_regular_bytes, write_atomic

CASES = "cases"
# The case pages a report wrote (so the next one rewrites only what changed, and deletes only its own).
LISTING = ".casekit-report"
LISTING_FORMAT = 1
MAX_LISTING_BYTES = 64 << 20


def write_files(files: dict[str, str], out: Path) -> list[Path]:
    """Write rendered files under `out`, each atomically; paths may not leave it."""
    written = []
    made: set[str] = set()
    for relative, text in sorted(files.items()):
        parts = relative.split("/")
        if relative.startswith("/") or ".." in parts or "" in parts:
            raise CasekitError(f"report file {relative!r} would leave {out}")
        folder = "/".join([os.fspath(out), *parts[:-1]])
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        write_atomic(f"{folder}/{parts[-1]}", text, durable=False)
        written.append(out.joinpath(*parts))
    return written


class CasePages:
    """An HTML report's case pages in `out/cases/`, written only where they changed.

    A case page carries no time stamp, so an unchanged case's page is the same file
    from one report to the next. The folder's `.casekit-report` lists the pages this
    casekit wrote, with their page key, size and mtime: a page whose entry matches
    its key and its file is left alone (one stat, no read, no write). Others are
    replaced, each atomically. Pages of cases gone from the archive are deleted if the
    list names them; any other file in the folder is left alone.
    """

    def __init__(self, out: Path) -> None:
        self.folder = os.fspath(out / CASES)
        os.makedirs(self.folder, exist_ok=True)
        self.listed = _read_listing(f"{self.folder}/{LISTING}")
        self.current: dict[str, list[Any]] = {}  # case id -> [key, size, mtime_ns]

    def path(self, case_id: str) -> str:
        return f"{self.folder}/{case_id}.html"

    def up_to_date(self, case_id: str, key: str | None) -> bool:
        """Whether the page on disk is the one this key renders (and, if so, keep it)."""
        entry = self.listed.get(case_id)
        if key is None or entry is None or entry[0] != key:
            return False
        try:
            stat = os.lstat(self.path(case_id))
        except OSError:
            return False
        if not S_ISREG(stat.st_mode) or [stat.st_size, stat.st_mtime_ns] != entry[1:]:
            return False
        self.current[case_id] = entry
        return True

    def write(self, case_id: str, key: str | None, page: bytes) -> PageWritten:
        """Write a page; what `record` needs (a forked worker sends it back to the parent)."""
        path = self.path(case_id)
        write_atomic(path, page, durable=False)
        stat = os.lstat(path)
        return PageWritten(case_id, key, stat.st_size, stat.st_mtime_ns)

    def record(self, written: PageWritten) -> None:
        if written.key is not None:
            self.current[written.case_id] = [written.key, written.size, written.mtime_ns]

    def finish(self, case_ids: set[str]) -> None:
        """Delete the listed pages of cases no longer reported; write the new list."""
        for case_id in self.listed.keys() - case_ids:
            Path(self.path(case_id)).unlink(missing_ok=True)
        listing = json.dumps({"format": LISTING_FORMAT, "pages": self.current}, separators=(",", ":"))
        write_atomic(f"{self.folder}/{LISTING}", listing, durable=False)


@dataclass(frozen=True)
class PageWritten:
    case_id: str
    key: str | None
    size: int
    mtime_ns: int


def _read_listing(path: str) -> dict[str, list[Any]]:
    """The pages a previous report wrote here; nothing when the list is missing, damaged or foreign."""
    try:  # not through a link, not a FIFO or a device, bounded
        data = json.loads(read_regular_bytes(Path(path), MAX_LISTING_BYTES))
    except (OSError, UnreadableFile, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != LISTING_FORMAT or not isinstance(data.get("pages"), dict):
        return {}
    return {
        case_id: entry
        for case_id, entry in data["pages"].items()
        if CASE_ID.fullmatch(case_id)  # a listed name becomes a file name: a case id only
        and isinstance(entry, list)
        and len(entry) == 3
        and isinstance(entry[0], str)
        and all(isinstance(number, int) for number in entry[1:])
    }
