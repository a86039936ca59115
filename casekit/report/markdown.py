"""The Markdown report: for pull requests and `$GITHUB_STEP_SUMMARY`.

GitHub renders HTML inside Markdown, so bundle text is HTML-escaped and table
pipes are escaped too; nothing a bundle says can add markup to the summary.
"""

from __future__ import annotations

import html
from typing import assert_never

from casekit.model import Severity
from casekit.report.interface import ReportFormat
from casekit.report.summary import ArchiveSummary, Cell

MAX_DETAIL_LINES = 8


def icon(severity: Severity) -> str:
    """The mark a severity gets in the summary (GitHub renders the emoji)."""
    match severity:
        case Severity.INFO:
            return "✅"
        case Severity.WARN:
            return "⚠️"
        case Severity.ERROR:
            return "❌"
        case _:
            assert_never(severity)


def md(text: object, limit: int = 200) -> str:
    """One table-safe line: HTML-escaped, pipes and backticks neutralized, newlines folded."""
    value = " ".join(str(text if text is not None else "").split())
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return html.escape(value, quote=False).replace("|", "\\|").replace("`", "'")


def cell_md(cell: Cell | None) -> str:
    if cell is None:
        return "—"
    return f"{icon(cell.severity)} {md(cell.verdict)}<br>{md(cell.class_summary(), 60)}"


def render_markdown(summary: ArchiveSummary) -> str:
    worst = summary.worst()
    counts = summary.severity_counts()
    lines = [f"## {md(summary.title)}", ""]
    lines.append(
        f"**{len(summary.cases)} case(s) × {len(summary.targets)} target(s)** — worst: "
        + (f"{icon(worst)} **{worst.value}**" if worst else "not replayed")
        + "".join(f" · {icon(s)} {counts.get(s, 0)} {s.value}" for s in (Severity.ERROR, Severity.WARN, Severity.INFO))
    )
    lines.append("")
    for warning in summary.warnings:
        lines += [f"> warning: {md(warning, 400)}", ""]
    if summary.targets:
        header = (
            "| case | " + " | ".join(f"{md(t.label, 60)}<br>torch {md(t.torch, 30)}" for t in summary.targets) + " |"
        )
        lines += [header, "|---|" + "---|" * len(summary.targets)]
        for case in summary.cases:
            title = md(case.case.title, 80)
            draft = " *(draft)*" if case.is_draft else ""
            row = (
                f"| **{md(case.case.id, 80)}**{draft}<br>{title} | "
                + " | ".join(cell_md(case.cells.get(t.label)) for t in summary.targets)
                + " |"
            )
            lines.append(row)
        lines.append("")
    else:
        lines += [
            "No replays recorded yet: run `casekit replay --json out/replay.json` and "
            "`casekit report --results out/replay.json`, or replay with `--record`.",
            "",
        ]
    attention = [cell for cell in summary.cells() if cell.severity is not Severity.INFO]
    attention.sort(key=lambda c: (-c.severity.rank, c.case_id, c.target))
    if attention:
        lines += ["### Needs attention", ""]
        for cell in attention:
            lines.append(
                f"- {icon(cell.severity)} **{md(cell.case_id)}** on `{md(cell.target, 80)}` (torch {md(cell.torch, 30)}): {md(cell.verdict)}"
            )
            for detail in cell.details[:MAX_DETAIL_LINES]:
                lines.append(f"  - {md(detail, 300)}")
            if len(cell.details) > MAX_DETAIL_LINES:
                lines.append(f"  - … {len(cell.details) - MAX_DETAIL_LINES} more")
        lines.append("")
    never = [case.case.id for case in summary.cases if not case.cells]
    if never:
        lines += [
            f"<details><summary>{len(never)} case(s) never replayed</summary>",
            "",
            ", ".join(md(i) for i in never),
            "",
            "</details>",
            "",
        ]
    return "\n".join(lines)


class MarkdownReport(ReportFormat):
    name = "md"
    main_file = "report.md"

    def render(self, summary: ArchiveSummary) -> dict[str, str]:
        return {self.main_file: render_markdown(summary)}
