"""The archive: a folder of bundles (`cases/` by default), one `<id>.toml` per case."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from casekit.bundle import check_case_id, load_case, save_case
from casekit.errors import BundleError, CaseIdError, CasekitError, CaseNotFound
from casekit.model import Case

if TYPE_CHECKING:
    from casekit.archive_index import CaseDigest

DEFAULT_ARCHIVE = "cases"


def archive_dir(explicit: str | Path | None = None) -> Path:
    """--archive, else $CASEKIT_ARCHIVE, else ./cases."""
    return Path(explicit or os.environ.get("CASEKIT_ARCHIVE") or DEFAULT_ARCHIVE)


@dataclass
class Archive:
    """Bundles on disk. Every write is atomic; read-modify-write is under a lock."""

    root: Path

    def path_for(self, case_id: str) -> Path:
        check_case_id(case_id)
        path = (self.root / f"{case_id}.toml").resolve()
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
        if not path.exists():
            known = ", ".join(self.ids()[:8]) or "none"
            raise CaseNotFound(f"no case {case_id!r} in {self.root} (cases: {known})")
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

    def summaries(
        self, selected: list[str] | None = None, keep_cases: bool = False, history: bool = True
    ) -> list[CaseDigest]:
        """What `list`, `report` and shard planning need of all cases (or the selected ids), in id order.

        Read through the derived index in `.casekit/` (see `casekit.archive_index`): only
        bundles that changed since the last call are parsed (with keep_cases, those keep
        their full case in `.parsed`). Without history, `replays` stay empty: what `list`
        shows is in `last_replay`. Errors are those of `load_all`.
        """
        from casekit.archive_index import summaries

        if not self.root.is_dir():
            raise CasekitError(f"archive folder {self.root} does not exist (use --archive or CASEKIT_ARCHIVE)")
        ids = selected or self.ids()
        for case_id in selected or []:
            if not self.path_for(case_id).exists():
                self.load(case_id)  # the same CaseNotFound as load_all
        return summaries(self.root, ids, whole_archive=not selected, keep_cases=keep_cases, history=history)

    def save(self, case: Case) -> Path:
        path = self.path_for(case.id)
        self.root.mkdir(parents=True, exist_ok=True)
        save_case(case, path)
        return path

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize read-modify-write of bundles between concurrent casekit processes."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".casekit.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
