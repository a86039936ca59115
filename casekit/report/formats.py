"""The report-format interface, its registry, and writing a rendered report to disk.

A format is a pure function of an `ArchiveSummary` to files (relative path ->
text); adding one is one new module plus a line in `FORMATS`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from casekit.errors import CasekitError
from casekit.fsutil import write_atomic
from casekit.report.summary import ArchiveSummary


class ReportFormat(abc.ABC):
    """Renders the archive summary as files."""

    name: str
    main_file: str  # what `--out -` prints, and what the CLI names after writing

    @abc.abstractmethod
    def render(self, summary: ArchiveSummary) -> dict[str, str]:
        """Relative POSIX path -> file content."""


def _html() -> ReportFormat:
    from casekit.report.html import HtmlReport

    return HtmlReport()


def _markdown() -> ReportFormat:
    from casekit.report.markdown import MarkdownReport

    return MarkdownReport()


def _junit() -> ReportFormat:
    from casekit.report.junit import JunitReport

    return JunitReport()


def _json() -> ReportFormat:
    from casekit.report.json_report import JsonReport

    return JsonReport()


FORMATS: dict[str, Callable[[], ReportFormat]] = {"html": _html, "md": _markdown, "junit": _junit, "json": _json}


def get_format(name: str) -> ReportFormat:
    factory = FORMATS.get(name)
    if factory is None:
        raise CasekitError(f"unknown report format {name!r} (choose one of: {', '.join(FORMATS)})")
    return factory()


def write_files(files: dict[str, str], out: Path) -> list[Path]:
    """Write rendered files under `out` (atomically each); paths may not leave it."""
    written = []
    for relative, text in sorted(files.items()):
        pure = PurePosixPath(relative)
        if pure.is_absolute() or ".." in pure.parts:
            raise CasekitError(f"report file {relative!r} would leave {out}")
        path = out.joinpath(*pure.parts)
        write_atomic(path, text)
        written.append(path)
    return written
