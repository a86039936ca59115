"""The report-format interface and its registry (writing a report: `report.output`).

A format is a pure function of an `ArchiveSummary` to files (relative path ->
text); adding one is one new module plus a line in `FORMATS`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from casekit.errors import CasekitError
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
