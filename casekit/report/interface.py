"""The report-format interface: what every format renders, and how it is written.

A format is a pure function of an `ArchiveSummary` to files (relative path ->
text) and owns its writing: most write what they render, a folder format (the
HTML site) may write its own way. Adding one is one new module plus a line in
`casekit.report.formats.FORMATS`.
"""

from __future__ import annotations

import abc
from pathlib import Path

from casekit.report.output import write_files
from casekit.report.summary import ArchiveSummary


class ReportFormat(abc.ABC):
    """Renders the archive summary as files, and writes them."""

    name: str
    main_file: str  # what `--out -` prints, and what is named after writing
    folder = False  # a tree of files (a site): written into a folder, never printed alone
    full_cases = False  # renders from the whole cases, not only the archive index's digests

    @abc.abstractmethod
    def render(self, summary: ArchiveSummary) -> dict[str, str]:
        """Relative POSIX path -> file content."""

    def write(self, summary: ArchiveSummary, out: Path, archive_root: Path) -> int:
        """Write the report into the folder `out`, each file atomically; how many files it holds."""
        return len(write_files(self.render(summary), out))
