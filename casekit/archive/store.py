"""The archive: a folder of bundles (`cases/` by default), one `<id>.toml` per case."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from casekit.archive.cache import CACHE_DIR
from casekit.bundle import check_case_id, load_case, save_case
from casekit.errors import BundleError, BundleWriteError, CaseIdError, CasekitError, CaseNotFound
from casekit.fsutil import UnreadableFile, exclusive_lock, read_regular_bytes, write_atomic
from casekit.model import Case
from casekit.settings import archive_root

if TYPE_CHECKING:
    from casekit.archive.index import CaseDigest

LOCK_NAME = ".casekit.lock"
SCRATCH = (LOCK_NAME, f"{CACHE_DIR}/")  # what casekit writes into an archive that is not a bundle
MAX_GITIGNORE_BYTES = 1 << 20


def archive_dir(explicit: str | Path | None = None) -> Path:
    """--archive, else $CASEKIT_ARCHIVE, else ./cases."""
    return archive_root(explicit)


@dataclass
class Archive:
    """Bundles on disk. Every write is atomic; read-modify-write is under a lock."""

    root: Path

    def path_for(self, case_id: str) -> Path:
        check_case_id(case_id)
        path = self.root.resolve() / f"{case_id}.toml"  # the file itself is never resolved: no symlink chooses it
        if path.parent != self.root.resolve():  # belt and braces: a slug cannot escape, check anyway
            raise CaseIdError(f"case id {case_id!r} would leave the archive folder")
        return path

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        names = os.listdir(self.root)  # not glob: on 10,000 bundles it costs a tenth of a second more
        return sorted(name[:-5] for name in names if name.endswith(".toml") and not name.startswith("."))

    def exists(self, case_id: str) -> bool:
        return self.path_for(case_id).exists()

    def load(self, case_id: str) -> Case:
        path = self.path_for(case_id)
        if not os.path.lexists(path):  # a dangling link is there: an invalid bundle, not a missing one
            raise CaseNotFound(not_found(case_id, self.root, self.ids()))
        case = load_case(path)
        if case.id != case_id:
            raise BundleError(path, "id", f"{case.id!r} does not match the file name {case_id!r}")
        return case

    def load_all(self, selected: list[str] | None = None) -> list[Case]:
        """All cases (or the selected ids), in id order. A bad bundle is an error naming it."""
        if not self.root.is_dir():
            raise CasekitError(f"archive folder {self.root} does not exist (use --archive or CASEKIT_ARCHIVE)")
        ids = selected or self.ids()
        return [self.load(case_id) for case_id in ids]

    def load_all_tolerant(self, selected: list[str] | None = None) -> tuple[list[Case], list[BundleError]]:
        """The valid cases (or the selected ids) in id order, and one error per invalid bundle.

        One bad bundle in a shared archive must not hide the others: callers go on
        with the valid cases and report the invalid ones. An unknown selected id is
        still an error (a typo, not a bad bundle).
        """
        if not self.root.is_dir():
            raise CasekitError(f"archive folder {self.root} does not exist (use --archive or CASEKIT_ARCHIVE)")
        cases: list[Case] = []
        invalid: list[BundleError] = []
        for case_id in selected or self.ids():
            try:
                cases.append(self.load(case_id))
            except BundleError as error:
                invalid.append(error)
            except CaseIdError as error:
                if selected:
                    raise  # the user typed it: a usage error
                invalid.append(BundleError(self.root / f"{case_id}.toml", None, f"file name: {error}"))
        return cases, invalid

    def summaries(
        self, selected: list[str] | None = None, keep_cases: bool = False, history: bool = True
    ) -> list[CaseDigest]:
        """summaries_tolerant, strict: the first invalid bundle raises its error (like load_all)."""
        digests, invalid = self.summaries_tolerant(selected, keep_cases, history)
        if invalid:
            raise invalid[0]
        return digests

    def summaries_tolerant(
        self, selected: list[str] | None = None, keep_cases: bool = False, history: bool = True
    ) -> tuple[list[CaseDigest], list[BundleError]]:
        """What `list`, `report` and shard planning need of all cases (or the selected ids), in id order.

        Read through the derived index in `.casekit/` (see `casekit.archive.index`): only
        bundles that changed since the last call are parsed (with keep_cases, those keep
        their full case in `.parsed`). Without history, `replays` stay empty: what `list`
        shows is in `last_replay`. Like load_all_tolerant, an invalid bundle is returned as its
        error beside the valid digests; an unknown selected id is still an error (a typo).
        """
        from casekit.archive.index import summaries

        if not self.root.is_dir():
            raise CasekitError(f"archive folder {self.root} does not exist (use --archive or CASEKIT_ARCHIVE)")
        ids = selected or self.ids()
        for case_id in selected or []:
            if not self.path_for(case_id).exists():
                self.load(case_id)  # the same CaseNotFound as load_all
        return summaries(self.root, ids, whole_archive=not selected, keep_cases=keep_cases, history=history)

    def save(self, case: Case) -> Path:
        """Write one bundle atomically; BundleWriteError (the bundle as it was) when the disk refuses."""
        path = self.path_for(case.id)
        self._make_root()
        save_case(case, path)
        return path

    def _make_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise BundleWriteError(f"cannot create the archive folder {self.root}: {error.strerror or error}") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize read-modify-write of bundles between concurrent casekit processes.

        The lock file stays beside the bundles (a lock must live on the archive's own
        file system to serialize writers that share it); the archive's `.gitignore`
        keeps it, and casekit's other scratch files, out of the user's commits.
        """
        self._make_root()
        ignore_scratch(self.root)
        with exclusive_lock(self.root / LOCK_NAME, what="the archive"):
            yield


def ignore_scratch(root: Path) -> None:
    """Add casekit's scratch names to `root/.gitignore` (created if absent), keeping what is there."""
    path = root / ".gitignore"
    try:
        text = read_regular_bytes(path, MAX_GITIGNORE_BYTES).decode("utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnreadableFile, UnicodeDecodeError):
        # a link, FIFO, folder, huge or unreadable file is the user's, not ours to follow or rewrite:
        # the lock works without it
        return
    missing = [name for name in SCRATCH if name not in text.splitlines()]
    if not missing:
        return
    head = "" if not text or text.endswith("\n") else "\n"
    comment = "" if text else "# written by casekit: its lock and scratch files are not case bundles\n"
    try:
        write_atomic(path, text + head + comment + "".join(f"{name}\n" for name in missing))
    except OSError:
        pass  # a full or read-only disk: the lock works without it, and the write that matters says why


def suggestions(wanted: str, known: list[str], limit: int = 3) -> list[str]:
    """The ids a person who typed `wanted` may have meant, best first: near typos (difflib), then ids it
    begins (`item` -> `item-branch`), then ids holding it or every word of it (`branch`, `step-item`)."""
    import difflib

    query = wanted.lower()
    words = [w for w in re.split(r"[^a-z0-9]+", query) if w]
    found = difflib.get_close_matches(wanted, known, n=limit, cutoff=0.6)
    ranked = [
        [k for k in known if k.lower().startswith(query)],
        [k for k in known if query in k.lower() or (len(query) > 3 and k.lower() in query)],
        [k for k in known if words and all(w in re.split(r"[^a-z0-9]+", k.lower()) for w in words)],
    ]
    for group in ranked:
        found += sorted(k for k in group if k not in found)
    return found[:limit]


def not_found(case_id: str, root: Path, known: list[str], where: str = "") -> str:
    """'no case X in ROOT; did you mean Y?' from the archive's ids (all of them when few); `where` says
    what else was looked at (' and none in its git history')."""
    close = suggestions(case_id, known)
    if close:
        return f"no case {case_id!r} in {root}{where}; did you mean {' or '.join(repr(c) for c in close)}?"
    listed = ", ".join(known[:8]) + (f" and {len(known) - 8} more" if len(known) > 8 else "")
    return f"no case {case_id!r} in {root}{where} (cases: {listed or 'none'})"
