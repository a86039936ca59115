"""The JSON report (`casekit.report/1`): the matrix for tooling."""

from __future__ import annotations

import json
from typing import Any

from casekit.model import ScriptRole, to_plain
from casekit.report.interface import ReportFormat
from casekit.report.summary import ArchiveSummary, Cell

REPORT_SCHEMA = "casekit.report/1"


def cell_json(cell: Cell) -> dict[str, Any]:
    return {
        "target": cell.target,
        "torch": cell.torch,
        "verdict": cell.verdict,
        "severity": cell.severity.value,
        "statuses": cell.statuses,
        "sites": cell.classes,
        "details": cell.details,
        "at": cell.at or None,
        "source": cell.source,
        **({"perf": [to_plain(timed) for timed in cell.perf]} if cell.perf else {}),  # replay --perf's timings
    }


def report_data(summary: ArchiveSummary) -> dict[str, Any]:
    worst = summary.worst()
    return {
        "schema": REPORT_SCHEMA,
        "generated": summary.generated,
        "worst": worst.value if worst else None,
        "counts": {"severity": dict(summary.severity_counts()), "verdict": dict(summary.verdict_counts())},
        "targets": [{"label": t.label, "torch": t.torch} for t in summary.targets],
        "cases": [
            {
                "id": case.case.id,
                "title": case.case.title,
                "tags": case.case.tags,
                "draft": case.is_draft,
                "severity": case.severity.value if case.severity else None,
                "breaks": {which: case.breaks(which) for which in ScriptRole if case.breaks(which) is not None},
                "latest": {label: cell_json(cell) for label, cell in sorted(case.cells.items())},
            }
            for case in summary.cases
        ],
        "warnings": summary.warnings,
    }


class JsonReport(ReportFormat):
    name = "json"
    main_file = "report.json"

    def render(self, summary: ArchiveSummary) -> dict[str, str]:
        return {self.main_file: json.dumps(report_data(summary), indent=2) + "\n"}
