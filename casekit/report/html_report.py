"""The HTML report as a format: a static site (`report.html` renders its pages), written through the
page cache so an unchanged case's page is neither rendered nor written again (`report.page_cache`)."""

from __future__ import annotations

from pathlib import Path

from casekit.report.html import case_page, index_page
from casekit.report.interface import ReportFormat
from casekit.report.page_cache import write_html_report
from casekit.report.summary import ArchiveSummary


class HtmlReport(ReportFormat):
    name = "html"
    main_file = "index.html"
    folder = True
    full_cases = True  # its case pages show scripts, logs and inputs: more than the index holds

    def render(self, summary: ArchiveSummary) -> dict[str, str]:
        files = {"index.html": index_page(summary)}
        for case in summary.cases:
            files[f"cases/{case.case.id}.html"] = case_page(case)
        return files

    def write(self, summary: ArchiveSummary, out: Path, archive_root: Path) -> int:
        return write_html_report(summary, archive_root, out)
