"""The Markdown report: for pull requests and `$GITHUB_STEP_SUMMARY`.

Bundle text is other people's text, and GitHub renders a pull-request comment for everyone who
opens it: a title like `![x](http://tracker/pixel)` would load a tracking image, `[ok](http://…)`
a link, `<img>` markup, `@team` a notification. So every piece of bundle text is inert (`md`):
each character with a meaning inline (emphasis, links and images, autolinks, HTML, entities,
table pipes, math) is backslash-escaped, which CommonMark defines to stand for itself; `www.`
loses its autolink the same way; and after `@` and `#` an empty HTML comment splits the text, since
GFM's e-mail autolinks and GitHub's mentions and issue references read the rendered text, where
escapes are gone. Code spans are the other safe form: their text is shown literally (no escape,
no link, no mention), fenced with enough backticks; none stands in a table.
"""

from __future__ import annotations

import re
from typing import assert_never

from casekit.model import PerfVerdict, Severity
from casekit.outcome import FailOn
from casekit.report.interface import ReportFormat
from casekit.report.summary import ArchiveSummary, Cell, perf_verdicts, spread_text

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


# Inline syntax of GitHub's Markdown (CommonMark, tables, strikethrough, autolinks, math): escaped, each
# stands for itself. The rest stays as written, so names and versions read as they are: '.', '-', '+',
# a ':' but the one of "http://" (GFM's autolinks), a '_' inside a word (never emphasis there).
_INLINE_SYNTAX = re.compile(r"[\\`*~\[\]!<>&|@#$]|:(?=//)|_+")
_WWW = re.compile(r"(?<![0-9A-Za-z])(www)\.", re.IGNORECASE)  # GFM links "www.x" without a scheme
# Where bundle text starts a line's content (a list item's detail), a list marker or a thematic break
# would start a block: "- x", "+ x", "1. x", "---" (the rest of that syntax is escaped above).
_BLOCK_START = re.compile(r"^(?:([-+=])|(\d{1,9})([.)]))")
# Read from the rendered text (e-mail autolinks, @mentions, #issue and owner/repo@sha references):
# an empty comment after the sign splits that text, and GitHub shows nothing for it.
_READ_AFTER_RENDERING = re.compile(r"\\([@#])")


def _one_line(text: object, limit: int) -> str:
    value = " ".join(str(text if text is not None else "").split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _escaped(match: re.Match[str]) -> str:
    found, text = match[0], match.string
    if (
        found[0] == "_"
        and text[match.start() - 1 : match.start()].isalnum()
        and text[match.end() : match.end() + 1].isalnum()
    ):
        return found  # snake_case: an underscore run between two letters or digits opens and closes nothing
    return "".join(f"\\{char}" for char in found)


def md(text: object, limit: int = 200) -> str:
    """Bundle text as inert Markdown on one line (safe in a table cell): shown as written, never markup."""
    escaped = _WWW.sub(r"\1\\.", _INLINE_SYNTAX.sub(_escaped, _one_line(text, limit)))
    escaped = _BLOCK_START.sub(lambda m: f"\\{m[1]}" if m[1] else f"{m[2]}\\{m[3]}", escaped)
    return _READ_AFTER_RENDERING.sub(r"\\\1<!-- -->", escaped)


def code(text: object, limit: int = 200) -> str:
    """One inline code span of `text`, shown literally: inside a code span Markdown decodes no entity
    and GitHub renders no HTML, so nothing is HTML-escaped there (`&lt;batch&gt;` would show as is);
    the fence is one backtick longer than any run of backticks inside (CommonMark's rule)."""
    value = _one_line(text, limit)
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or not value.strip() else ""
    return f"{fence}{pad}{value}{pad}{fence}"


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
    if summary.cells():
        failing = summary.failing()
        level = summary.fail_on.value
        lines.append("")
        if failing:
            verdict = f"**FAIL** at `--fail-on {level}`: {len(failing)} result(s) at {level} or above"
        elif summary.fail_on is FailOn.NEVER:
            verdict = "**PASS** at `--fail-on never`: no result fails"
        else:
            verdict = f"**PASS** at `--fail-on {level}`: no result reaches {level}"
        lines.append(verdict)
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
                f"- {icon(cell.severity)} **{md(cell.case_id)}** on {code(cell.target, 80)} (torch {md(cell.torch, 30)}): {md(cell.verdict)}"
                + (" — **fails**" if summary.fails(cell) else "")
            )
            for detail in cell.details[:MAX_DETAIL_LINES]:
                lines.append(f"  - {md(detail, 300) or '—'}")  # an empty item would make the line above a heading
            if len(cell.details) > MAX_DETAIL_LINES:
                lines.append(f"  - … {len(cell.details) - MAX_DETAIL_LINES} more")
        lines.append("")
    lines += perf_section(summary)
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


def perf_section(summary: ArchiveSummary) -> list[str]:
    """replay --perf's timings: per case, target and script, each figure with its spread and each axis's
    verdict against the run's baseline ('figures only' for the baseline itself). Every value is inert."""
    rows = []
    for case in summary.cases:
        for label, cell in sorted(case.cells.items()):
            for timed in cell.perf:
                figures = timed.figures
                slower = timed.comparison is not None and any(
                    axis.verdict is PerfVerdict.SLOWER for axis in timed.comparison.axes
                )
                rows.append(
                    f"| {md(case.case.id, 80)} | {md(label, 80)} | {timed.script.value} | "  # no code span in a table
                    + " | ".join(
                        md(spread_text(value, unit), 60)
                        for value, unit in (
                            (figures.compile_cold_s, "s"),
                            (figures.compile_warm_s, "s"),
                            (figures.steady_s, "s"),
                            (figures.speedup, "x"),
                        )
                    )
                    + f" | {icon(Severity.WARN) + ' ' if slower else ''}{md(perf_verdicts(timed), 300)} |"
                )
    if not rows:
        return []
    return [
        "### Performance",
        "",
        "Median over fresh processes [lowest–highest, n]; each axis judged against the baseline measured in the "
        "same run (a slower axis is a warning).",
        "",
        "| case | target | script | compile cold | compile warm | steady (per call) | speed-up | verdicts |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


class MarkdownReport(ReportFormat):
    name = "md"
    main_file = "report.md"

    def render(self, summary: ArchiveSummary) -> dict[str, str]:
        return {self.main_file: render_markdown(summary)}
