"""The archive: a folder of bundles (`cases/` by default), one `<id>.toml` per case."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from casekit.bundle import check_case_id, load_case, save_case
from casekit.errors import BundleError, CaseIdError, CasekitError, CaseNotFound
from casekit.fsutil import exclusive_lock
from casekit.model import Case
from casekit.settings import archive_root

LOCK_NAME = ".casekit.lock"


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
        return sorted(p.stem for p in self.root.glob("*.toml") if not p.name.startswith("."))

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

    def save(self, case: Case) -> Path:
        path = self.path_for(case.id)
        self.root.mkdir(parents=True, exist_ok=True)
        save_case(case, path)
        return path

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize read-modify-write of bundles between concurrent casekit processes."""
        self.root.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.root / LOCK_NAME, what="the archive"):
            yield
