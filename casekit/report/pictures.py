"""Pictures for the HTML report: inline SVG built from plain data, no scripts, no network.

Three pictures, each a pure function from data to an SVG string:

- `timeline_svg`: one case across releases. Columns are the capture and each
  replay (ordered by torch version, then by date when a release repeats), rows
  are the case's break sites; a mark per cell says persists / moved / gone /
  new / reappeared / unobserved, failed scripts are red, and two small charts
  give the graph count and the first-call (compile) time per column; a case timed
  (replay --perf, capture --perf) gains charts of its compile cold and warm and its
  steady state, each a median with a whisker over the fresh processes measured.
- `heatmap_svg`: the archive as release x case, cells coloured by verdict.
- `bisect_svg`: a bisection's candidates with each step's outcome and the
  place where the outcome changes (`report.html.render_bisect_html` wraps it in a page).

Every string that comes from a bundle or a document goes through `esc`; marks
carry a letter as well as a colour, and every shape has a <title>, so the
pictures read in greyscale, in print and in a screen reader.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

from casekit.model import (
    Case,
    PerfAxis,
    PerfRecord,
    ReplayRecord,
    ScriptRole,
    ScriptStatus,
    Severity,
    SiteClass,
    Spread,
    Verdict,
)
from casekit.progress import fit_label
from casekit.report.summary import spread_text
from casekit.versions import version_order

FONT = 'font-family="-apple-system, Segoe UI, Helvetica, Arial, sans-serif"'


@dataclass(frozen=True)
class MarkStyle:
    """How a timeline mark is drawn; the letter keeps the picture readable without colour."""

    fill: str
    stroke: str
    letter: str
    legend: str
    priority: int  # when one row holds several marks in one column, the lowest is the most telling, drawn first


def class_mark(site_class: SiteClass) -> MarkStyle:
    """The mark of a site class in a replay's column."""
    match site_class:
        case SiteClass.PERSISTS:
            return MarkStyle("#eaeef2", "#57606a", "P", "persists", 4)
        case SiteClass.MOVED:
            return MarkStyle("#fff8c5", "#9a6700", "M", "moved", 2)
        case SiteClass.GONE:
            return MarkStyle("#dafbe1", "#1a7f37", "G", "gone", 3)
        case SiteClass.NEW:
            return MarkStyle("#ffebe9", "#cf222e", "N", "new", 1)
        case SiteClass.REAPPEARED:
            return MarkStyle("#ffebe9", "#82071e", "R", "reappeared", 0)
        case SiteClass.UNOBSERVED:
            return MarkStyle("#ffffff", "#8c959f", "?", "unobserved (the script did not run to the end)", 6)
        case _:
            assert_never(site_class)


RECORDED = "recorded"  # the capture column's mark: a break the case recorded
# The legend's order (a test checks it names every site class).
MARK_LEGEND = (
    SiteClass.PERSISTS,
    SiteClass.MOVED,
    SiteClass.GONE,
    SiteClass.NEW,
    SiteClass.REAPPEARED,
    SiteClass.UNOBSERVED,
)
# mark -> how it is drawn, in legend order: "recorded", then a site class's value
MARKS: dict[str, MarkStyle] = {
    RECORDED: MarkStyle("#ddf4ff", "#0969da", "C", "recorded at capture", 5),
    **{site_class.value: class_mark(site_class) for site_class in MARK_LEGEND},
}


def verdict_fill(verdict: Verdict) -> tuple[str, str]:
    """A verdict's (fill, text colour) in the heatmap and the timeline's column heads."""
    match verdict:
        case Verdict.UNCHANGED:
            return ("#aceebb", "#0f5323")
        case Verdict.IMPROVED:
            return ("#4ac26b", "#ffffff")
        case Verdict.CHANGED:
            return ("#eac54f", "#3b2300")
        case Verdict.REGRESSED:
            return ("#ff8182", "#5d0011")
        case Verdict.FIX_BROKEN:
            return ("#cf222e", "#ffffff")
        case Verdict.ENV_FAILED:
            return ("#82071e", "#ffffff")
        case Verdict.UNOBSERVED:
            return ("#eaeef2", "#57606a")
        case _:
            assert_never(verdict)


def verdict_words(verdict: Verdict) -> str:
    """A verdict as the heatmap's cells and legend write it."""
    match verdict:
        case Verdict.FIX_BROKEN:
            return "fix broken"
        case Verdict.ENV_FAILED:
            return "env failed"
        case Verdict.UNCHANGED | Verdict.IMPROVED | Verdict.CHANGED | Verdict.REGRESSED | Verdict.UNOBSERVED:
            return verdict.value
        case _:
            assert_never(verdict)


def severity_stroke(severity: Severity) -> str:
    """The outline of a timeline column head, by the replay's severity."""
    match severity:
        case Severity.ERROR:
            return "#cf222e"
        case Severity.WARN:
            return "#9a6700"
        case Severity.INFO:
            return "#0969da"
        case _:
            assert_never(severity)


def script_fill(role: ScriptRole) -> str:
    """A script's colour: its row labels and its chart bars."""
    match role:
        case ScriptRole.PRE:
            return "#0969da"
        case ScriptRole.POST:
            return "#8250df"
        case _:
            assert_never(role)


# The heatmap legend's order, best to worst (a test checks it names every verdict).
HEAT_LEGEND = (
    Verdict.UNCHANGED,
    Verdict.IMPROVED,
    Verdict.CHANGED,
    Verdict.REGRESSED,
    Verdict.FIX_BROKEN,
    Verdict.ENV_FAILED,
    Verdict.UNOBSERVED,
)
VERDICT_FILL: dict[Verdict, tuple[str, str]] = {verdict: verdict_fill(verdict) for verdict in HEAT_LEGEND}
NO_RESULT_FILL = ("#f6f8fa", "#8c959f")
STATUS_ERROR = "#cf222e"


def esc(value: object) -> str:
    """Escape a value for SVG/HTML text and attributes."""
    return html.escape("" if value is None else str(value), quote=True)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "\u2026"


# ------------------------------------------------------------------ timeline data


@dataclass
class TimelineRow:
    """One break site of the case: a script line (where the break is anchored in the script)."""

    script: ScriptRole
    where: str  # "repro.py:8", or for a frame that falls back to eager entirely, FALLBACK + "fn (repro.py:7)"
    function: str = ""

    @property
    def key(self) -> str:
        return f"{self.script}|{self.where}"

    @property
    def is_fallback(self) -> bool:
        return self.where.startswith(FALLBACK)

    @property
    def label(self) -> str:
        if self.is_fallback:
            return f"{self.script} falls back to eager: {self.where.removeprefix(FALLBACK)}"
        return f"{self.script} {self.where}" + (f" {self.function}" if self.function else "")


# A row of its own for each frame that falls back to eager entirely: fewer breaks with a new fallback is
# a regression, and the picture must not read as an improvement.
FALLBACK = "fallback:"


@dataclass
class TimelineColumn:
    """The capture or one replay: its marks per row, script statuses and the two charted figures."""

    label: str  # "2.5.1", or "2.5.1 11-30 23:55" when the release repeats
    torch: str
    target: str = ""
    at: str = ""
    verdict: Verdict | None = None  # None for the capture
    severity: Severity | None = None
    statuses: dict[ScriptRole, ScriptStatus] = field(default_factory=dict)
    marks: dict[str, Counter[str]] = field(default_factory=dict)  # row key -> how many of each mark (MARKS)
    graphs: dict[ScriptRole, int] = field(default_factory=dict)
    compile_s: dict[ScriptRole, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    perf: dict[PerfAxis, dict[ScriptRole, Spread]] = field(default_factory=dict)  # timed figures, with spread

    def marks_at(self, key: str) -> list[str]:
        """The marks of one row, most telling first (a line can hold a gone break and a persisting one)."""
        return sorted(self.marks.get(key, {}), key=lambda mark: MARKS[mark].priority)

    def add(self, key: str, mark: str) -> None:
        self.marks.setdefault(key, Counter())[mark] += 1

    def describe(self) -> str:
        when = f" at {self.at}" if self.at else (" (--results, not recorded)" if self.verdict else "")
        head = f"{self.target or 'capture'} on torch {self.torch}{when}"
        states = ", ".join(f"{w} {s}" for w, s in self.statuses.items())
        verdict = f": {self.verdict} ({self.severity})" if self.verdict else ""
        return "; ".join(part for part in (head + verdict, states, *self.reasons[:4]) if part)


@dataclass
class Timeline:
    case_id: str
    title: str
    rows: list[TimelineRow]
    columns: list[TimelineColumn]
    scripts: list[ScriptRole]  # the scripts the case has, in order


def _capture_column(case: Case, functions: dict[str, str]) -> TimelineColumn | None:
    if not case.observations:
        return None
    column = TimelineColumn(label="recorded", torch=str(case.environment.get("torch", "?")), at=case.created)
    for which, observation in case.observations.items():
        column.statuses[which] = observation.status
        column.graphs[which] = observation.graphs
        firsts = [e.first_call_s for e in observation.entries if e.first_call_s is not None]
        if firsts:
            column.compile_s[which] = sum(firsts)
        for site in observation.sites:
            anchor = site.anchor
            key = TimelineRow(which, anchor.where()).key
            functions.setdefault(key, anchor.function)
            column.add(key, RECORDED)
        for frame in observation.fallback_frames:
            column.add(TimelineRow(which, f"{FALLBACK}{frame.function} ({frame.file}:{frame.line})").key, RECORDED)
    column.perf = perf_figures(case.perf)
    return column


def perf_figures(timed: Sequence[PerfRecord]) -> dict[PerfAxis, dict[ScriptRole, Spread]]:
    """The charted figures of a run's timings: per axis, each script's figure over fresh processes."""
    found: dict[PerfAxis, dict[ScriptRole, Spread]] = {}
    for entry in timed:
        figures = entry.figures
        for axis, spread in (
            (PerfAxis.COMPILE_COLD, figures.compile_cold_s),
            (PerfAxis.COMPILE_WARM, figures.compile_warm_s),
            (PerfAxis.STEADY, figures.steady_s),
        ):
            if spread is not None:
                found.setdefault(axis, {})[entry.script] = spread
    return found


def _fallback_marks(column: TimelineColumn, record: ReplayRecord, recorded: dict[ScriptRole, set[str]]) -> None:
    """A replay's fallbacks against the capture's: persists, new (a regression), gone (cleared)."""
    if record.fallbacks is None:
        return  # a history entry from before fallbacks were kept: nothing to say
    for which, frames in record.fallbacks.items():
        before = recorded.get(which, set())
        for frame in frames:
            column.add(
                TimelineRow(which, FALLBACK + frame).key,
                (SiteClass.PERSISTS if frame in before else SiteClass.NEW).value,
            )
        if ran_to_end(record.statuses.get(which)):
            for frame in sorted(before - set(frames)):
                column.add(TimelineRow(which, FALLBACK + frame).key, SiteClass.GONE.value)


def ran_to_end(status: ScriptStatus | None) -> bool:
    """Whether a script ran its compiled code to the end, so that what it did not show is gone."""
    return status in (ScriptStatus.OK, ScriptStatus.MISMATCH)


def _replay_column(record: ReplayRecord, label: str) -> TimelineColumn:
    column = TimelineColumn(
        label=label,
        torch=record.torch,
        target=record.target,
        at=record.at,
        verdict=record.verdict,
        severity=record.severity,
        statuses=dict(record.statuses),
        graphs=dict(record.graphs or {}),
        compile_s=dict(record.compile_s or {}),
        reasons=list(record.reasons),
        perf=perf_figures(record.perf or []),
    )
    for verdict in record.sites:
        key = TimelineRow(verdict.script, verdict.where).key
        column.add(key, verdict.site_class.value)
    return column


def _column_labels(records: Sequence[ReplayRecord]) -> list[str]:
    """The torch release; when it appears more than once, what tells the columns apart: the target (by the
    part of its label the others do not share) where targets differ, else the replay's date."""
    by_torch: dict[str, list[ReplayRecord]] = {}
    for record in records:
        by_torch.setdefault(record.torch, []).append(record)
    labels = []
    for record in records:
        alike = by_torch[record.torch]
        if len(alike) == 1:
            labels.append(record.torch)
            continue
        targets = [other.target for other in alike]
        when = record.at[5:16].replace("T", " ") if record.at else "results"
        if targets.count(record.target) == 1:
            others = sorted({t for t in targets if t != record.target})
            when = fit_label(record.target, _HEAD_CHARS, others).replace(" ", "_")
        labels.append(f"{record.torch} {when}")
    return labels


def _replay_key(record: ReplayRecord) -> tuple[object, ...]:
    """What a replay found, whenever it was recorded: two records with this key are one replay."""
    sites = sorted((v.script, v.site_class, v.where, v.category) for v in record.sites)
    return (
        record.target,
        record.torch,
        record.verdict,
        record.severity,
        sorted(record.statuses.items()),
        sites,
        sorted((record.graphs or {}).items()),
    )


def given_apart(history: Sequence[ReplayRecord], given: Sequence[ReplayRecord]) -> list[ReplayRecord]:
    """The replays given with `report --results` that the history does not already hold: `replay --record
    --json X` then `report --results X` (the README's flow) is one replay, drawn once, from the history,
    which knows when it ran. A result is that replay when it is the latest record of its target."""
    latest: dict[str, ReplayRecord] = {}
    for record in sorted(history, key=lambda r: r.at):
        latest[record.target] = record
    return [
        record
        for record in given
        if record.target not in latest or _replay_key(latest[record.target]) != _replay_key(record)
    ]


def timeline_from_case(case: Case, results: Sequence[ReplayRecord] = ()) -> Timeline:
    """The case's history as rows (break sites, frames falling back) x columns (capture, then replays in
    release order). `results`: replays given with `report --results` (not recorded), drawn beside the
    history and marked as such."""
    functions: dict[str, str] = {}
    columns: list[TimelineColumn] = []
    capture = _capture_column(case, functions)
    if capture is not None:
        columns.append(capture)
    recorded = {
        which: {f"{f.function} ({f.file}:{f.line})" for f in observation.fallback_frames}
        for which, observation in case.observations.items()
    }
    given = given_apart(case.replays, results)
    records = sorted([*case.replays, *given], key=lambda r: (version_order(r.torch), r.at, r.target))
    for record, label in zip(records, _column_labels(records), strict=True):
        column = _replay_column(record, label)
        _fallback_marks(column, record, recorded)
        columns.append(column)
    scripts = [ScriptRole.PRE, ScriptRole.POST] if case.post is not None else [ScriptRole.PRE]
    keys: dict[str, TimelineRow] = {}
    for column in columns:
        for key in column.marks:
            script, where = key.split("|", 1)  # a key TimelineRow made: "<role>|<where>"
            keys.setdefault(key, TimelineRow(ScriptRole(script), where, functions.get(key, "")))
    rows = sorted(keys.values(), key=lambda r: (scripts.index(r.script) if r.script in scripts else 9, _line_key(r)))
    for column in columns:  # a script that did not finish observed nothing: say so rather than leave a blank
        for row in rows:
            if row.key not in column.marks and column.statuses.get(row.script, ScriptStatus.OK) is not ScriptStatus.OK:
                column.add(row.key, SiteClass.UNOBSERVED.value)
    return Timeline(case.id, case.title, rows, columns, scripts)


def _line_key(row: TimelineRow) -> tuple[int, str, int]:
    file, _, line = row.where.rstrip(")").rpartition(":")
    return (int(row.is_fallback), file, int(line) if line.isdigit() else 0)


# ------------------------------------------------------------------ shared drawing


def svg_open(width: int, height: int, title: str, desc: str, css_class: str) -> str:
    ident = css_class.replace(" ", "-")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{esc(css_class)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="{ident}-t {ident}-d" {FONT} font-size="12">'
        f'<title id="{ident}-t">{esc(title)}</title><desc id="{ident}-d">{esc(desc)}</desc>'
    )


def text(
    x: float, y: float, value: str, *, anchor: str = "start", size: int = 12, fill: str = "#1f2328", bold: bool = False
) -> str:
    weight = ' font-weight="600"' if bold else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{fill}"{weight}>{esc(value)}</text>'


def mark_shape(mark: str, cx: float, cy: float, tip: str) -> str:
    style = MARKS[mark]
    fill, stroke, letter = style.fill, style.stroke, style.letter
    dash = ' stroke-dasharray="3 2"' if mark == SiteClass.UNOBSERVED else ""
    return (
        f'<g class="mark mark-{esc(mark)}"><title>{esc(tip)}</title>'
        f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="9" fill="{fill}" stroke="{stroke}" stroke-width="2"{dash}/>'
        f"{text(cx, cy + 4, letter, anchor='middle', size=11, fill=stroke, bold=True)}</g>"
    )


def legend(items: Sequence[tuple[str, str]], x: float, y: float, width: float) -> tuple[str, float]:
    """Swatches (svg of a swatch drawn at 0,0; label) in rows that fit `width`; returns the svg and its height."""
    out, cursor, row = [f'<g class="legend" transform="translate({x:.1f},{y:.1f})">'], 0.0, 0
    for swatch, label in items:
        step = 30 + 6.8 * len(label)
        if cursor and cursor + step > width:
            cursor, row = 0.0, row + 1
        out.append(f'<g transform="translate({cursor:.1f},{row * 20})">{swatch}{text(12, 4, label, size=11)}</g>')
        cursor += step
    out.append("</g>")
    return "".join(out), (row + 1) * 20.0


def finish_svg(
    body: list[str], width: int, bottom: float, swatches: Sequence[tuple[str, str]], head: tuple[str, str, str]
) -> str:
    """Frame a picture: its <title>/<desc>, a white ground, the body, and the legend below `bottom`."""
    title, desc, css_class = head
    legend_svg, legend_h = legend(swatches, 16, bottom + 18, width - 32)
    height = int(bottom + legend_h + 10)
    ground = f'<rect width="{width}" height="{height}" fill="#ffffff"/>'
    return svg_open(width, height, title, desc, css_class) + ground + "".join(body) + legend_svg + "</svg>"


def _width_of(labels: Iterable[str], per_char: float, least: int, most: int) -> int:
    return int(min(most, max([least, *(per_char * len(label) + 16 for label in labels)])))


# ------------------------------------------------------------------ the timeline picture

COL_W = 100
_HEAD_CHARS = 15  # what a column head's line holds at its size
ROW_H = 26
HEAD_H = 58
CHART_H = 54


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _short_seconds(value: float) -> str:
    """A time from microseconds (a steady-state call) to seconds (a cold compile), in three figures."""
    if value < 1e-3:
        return f"{value * 1e6:.3g} µs"
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


# The timed figures the timeline charts (replay --perf, capture --perf), each with its spread.
PERF_CHARTS = {
    PerfAxis.COMPILE_COLD: "compile cold (perf)",
    PerfAxis.COMPILE_WARM: "compile warm (perf)",
    PerfAxis.STEADY: "steady per call (perf)",
}


# The mildest verdict colour a severity may wear: a warning never looks unchanged or improved.
SEVERITY_FLOOR: dict[Severity, Verdict] = {
    Severity.INFO: Verdict.UNCHANGED,
    Severity.WARN: Verdict.CHANGED,
    Severity.ERROR: Verdict.REGRESSED,
}


def head_verdict(verdict: Verdict, severity: Severity | None) -> Verdict:
    """The verdict whose colour a column head wears: its own, or the severity's floor when that is worse."""
    floor = SEVERITY_FLOOR[severity] if severity else verdict
    return max(verdict, floor, key=HEAT_LEGEND.index)  # HEAT_LEGEND runs best to worst


def _header(column: TimelineColumn, x: float) -> str:
    shown = head_verdict(column.verdict, column.severity) if column.verdict else None
    fill, ink = verdict_fill(shown) if shown else ("#ddf4ff", "#0969da")
    stroke = severity_stroke(column.severity) if column.severity else "#d0d7de"
    release, _, when = column.label.partition(" ")  # "2.13.0+cpu 11-30 23:55" when the release repeats
    lines = [(release, 12, True), *([(when, 10, False)] if when else []), (column.verdict or "capture", 11, False)]
    texts = "".join(
        text(x + COL_W / 2, 19 + 14 * i, clip(line, _HEAD_CHARS), anchor="middle", size=size, bold=bold, fill=ink)
        for i, (line, size, bold) in enumerate(lines)
    )
    return (
        f'<g class="column-head"><title>{esc(column.describe())}</title>'
        f'<rect x="{x + 3:.1f}" y="4" width="{COL_W - 6}" height="{HEAD_H - 8}" rx="4" fill="{fill}" stroke="{stroke}"/>'
        f"{texts}</g>"
    )


def _status_cell(column: TimelineColumn, script: ScriptRole, x: float, y: float) -> str:
    status = column.statuses.get(script)
    if status is None:
        return text(x + COL_W / 2, y + 17, "-", anchor="middle", fill="#8c959f")
    if status is ScriptStatus.OK:
        return f'<g class="status-ok"><title>{esc(script)}: ok</title>{text(x + COL_W / 2, y + 17, "ok", anchor="middle", fill="#1a7f37")}</g>'
    return (
        f'<g class="status-error"><title>{esc(script)}: {esc(status)} ({esc(column.describe())})</title>'
        f'<rect x="{x + 4:.1f}" y="{y + 3:.1f}" width="{COL_W - 8}" height="{ROW_H - 6}" rx="3" fill="{STATUS_ERROR}"/>'
        f"{text(x + COL_W / 2, y + 17, clip(status, 14), anchor='middle', size=11, fill='#ffffff', bold=True)}</g>"
    )


def _chart(
    name: str,
    values: Sequence[dict[ScriptRole, float] | dict[ScriptRole, Spread]],
    scripts: list[ScriptRole],
    origin: tuple[float, float],
    fmt: Any,
    css: str = "",
) -> str:
    """Bars per column and script, scaled to the largest figure; 'n/a' where the figure was not recorded. A
    figure over fresh processes (a Spread) is a bar at its median with a whisker from its lowest to its highest."""
    x0, y0 = origin
    top = max([_high(v) for column in values for v in column.values()] or [0.0])
    out = [f'<g class="chart chart-{esc(css or name.split()[0])}">']
    bar_w = (COL_W - 24) / max(1, len(scripts))
    scale = (CHART_H - 20) / top if top else 0.0
    for i, column in enumerate(values):
        x = x0 + i * COL_W + 12
        if not column:
            out.append(
                text(x0 + i * COL_W + COL_W / 2, y0 + CHART_H - 6, "n/a", anchor="middle", size=10, fill="#8c959f")
            )
            continue
        for j, script in enumerate(scripts):
            value = column.get(script)
            if value is None:
                continue
            middle = value.median if isinstance(value, Spread) else value
            height = 2 + middle * scale
            bx, by = x + j * bar_w, y0 + CHART_H - 4 - height
            said = spread_text(value) if isinstance(value, Spread) else fmt(value)
            whisker = ""
            if isinstance(value, Spread) and value.n > 1:
                cx, low, high = (
                    bx + (bar_w - 3) / 2,
                    y0 + CHART_H - 6 - value.low * scale,
                    y0 + CHART_H - 6 - value.high * scale,
                )
                whisker = (
                    f'<path class="spread" d="M{cx:.1f} {low:.1f}V{high:.1f}M{cx - 3:.1f} {low:.1f}h6M{cx - 3:.1f} '
                    f'{high:.1f}h6" stroke="#1f2328" stroke-width="1" fill="none"/>'
                )
                by = min(by, high)
            out.append(
                f"<g><title>{esc(name)}, {esc(script)}: {esc(said)}</title>"
                f'<rect x="{bx:.1f}" y="{y0 + CHART_H - 4 - height:.1f}" width="{bar_w - 3:.1f}" height="{height:.1f}" '
                f'fill="{script_fill(script)}"/>{whisker}'
                f"{text(bx + (bar_w - 3) / 2, by - 2, fmt(middle), anchor='middle', size=9, fill='#57606a')}</g>"
            )
    out.append("</g>")
    return "".join(out)


def _high(value: float | Spread) -> float:
    return value.high if isinstance(value, Spread) else value


def _bisect_line(timeline: Timeline, doc: dict[str, Any], left: float, bottom: float) -> str:
    """A dashed line before the first replayed release at or after the bisection's first bad one."""
    if doc.get("kind") != "versions" or doc.get("subject") != timeline.case_id:
        return ""
    first_bad = version_order(str(doc.get("first_bad", "")))
    replays = [(i, c) for i, c in enumerate(timeline.columns) if c.verdict]
    for position, (index, column) in enumerate(replays):
        if version_order(column.torch) >= first_bad and position > 0:
            x = left + index * COL_W
            last, first = end_words(str(doc.get("result")))
            tip = f"bisect: {last} {doc.get('last_good')} -> {first} {doc.get('first_bad')} ({doc.get('predicate')})"
            note = "bisect: " + clip(str(doc.get("first_bad")), 12)
            ink = sides_of(doc)[1][1][1]
            return (
                f'<g class="bisect-boundary"><title>{esc(tip)}</title>'
                f'<line x1="{x:.1f}" y1="2" x2="{x:.1f}" y2="{bottom:.1f}" stroke="{ink}" stroke-width="2" stroke-dasharray="6 3"/>'
                f"{text(x + 3, HEAD_H + 10, note, size=10, fill=ink)}</g>"
            )
    return ""


def _cell_marks(column: TimelineColumn, row: TimelineRow, x: float, y: float) -> str:
    """Up to two marks side by side (the two most telling); the <title> counts them all."""
    marks = column.marks_at(row.key)[:2]
    counts = column.marks.get(row.key, Counter())
    said = ", ".join(f"{counts[m]} {MARKS[m].legend}" for m in column.marks_at(row.key))
    tip = f"{row.label}: {said} on {column.describe()}"
    offsets = [0.0] if len(marks) == 1 else [-11.0, 11.0]
    return "".join(
        mark_shape(mark, x + COL_W / 2 + dx, y + ROW_H / 2, tip) for mark, dx in zip(marks, offsets, strict=False)
    )


def timeline_svg(timeline: Timeline, bisects: Sequence[dict[str, Any]] = ()) -> str:
    """The case across releases: a mark per break site and column, script statuses, graphs and compile time."""
    labels = [clip(row.label, 56) for row in timeline.rows] or ["no break recorded or observed"]
    left = _width_of(labels + ["compile time (first call)"], 6.6, 170, 400)
    n = len(timeline.columns)
    width = max(460, int(left + max(n, 1) * COL_W + 16))
    rows_h = max(1, len(timeline.rows)) * ROW_H
    status_y = HEAD_H + rows_h + 8
    chart_y = status_y + len(timeline.scripts) * ROW_H + 10
    desc = f"{len(timeline.rows)} break site(s) of case {timeline.case_id} over {n} column(s): " + "; ".join(
        column.describe() for column in timeline.columns
    )
    out = [text(8, 30, "break site", bold=True, fill="#57606a")]
    for i, column in enumerate(timeline.columns):
        out.append(_header(column, left + i * COL_W))
    if not timeline.rows:
        out.append(text(8, HEAD_H + 17, labels[0], fill="#57606a"))
    for r, row in enumerate(timeline.rows):
        y = HEAD_H + r * ROW_H
        if r % 2 == 0:
            out.append(f'<rect x="0" y="{y}" width="{width}" height="{ROW_H}" fill="#f6f8fa"/>')
        out.append(f"<g><title>{esc(row.label)}</title>{text(8, y + 17, labels[r], fill=script_fill(row.script))}</g>")
        out += [_cell_marks(column, row, left + i * COL_W, y) for i, column in enumerate(timeline.columns)]
    for s, script in enumerate(timeline.scripts):
        y = status_y + s * ROW_H
        out.append(text(8, y + 17, f"{script} status", fill="#57606a"))
        out += [_status_cell(column, script, left + i * COL_W, y) for i, column in enumerate(timeline.columns)]
    charts: list[tuple[str, Sequence[dict[ScriptRole, float] | dict[ScriptRole, Spread]], Any, str]] = [
        ("graphs", [{k: float(v) for k, v in c.graphs.items()} for c in timeline.columns], lambda v: f"{v:.0f}", ""),
        ("compile time (first call)", [dict(c.compile_s) for c in timeline.columns], _seconds, ""),
    ]
    if any(column.perf for column in timeline.columns):  # replay --perf / capture --perf: the timed figures
        charts += [
            (name, [dict(c.perf.get(axis, {})) for c in timeline.columns], _short_seconds, f"perf-{axis.value}")
            for axis, name in PERF_CHARTS.items()
        ]
    for k, (name, values, fmt, css) in enumerate(charts):
        y = chart_y + k * (CHART_H + 12)
        out.append(
            f'<line x1="{left}" y1="{y + CHART_H - 4}" x2="{width - 16}" y2="{y + CHART_H - 4}" stroke="#d0d7de"/>'
        )
        out.append(text(8, y + CHART_H / 2 + 4, name, fill="#57606a"))
        out.append(_chart(name, values, timeline.scripts, (left, y), fmt, css))
    out += [_bisect_line(timeline, doc, left, chart_y - 4) for doc in bisects]
    swatches = [
        (mark_shape(m, 0, 0, MARKS[m].legend).replace('r="9"', 'r="7"'), MARKS[m].legend.split(" (")[0]) for m in MARKS
    ]
    swatches += [(f'<rect x="-7" y="-7" width="14" height="14" fill="{STATUS_ERROR}"/>', "status error")]
    swatches += [
        (f'<rect x="-7" y="-7" width="14" height="14" fill="{script_fill(s)}"/>', f"{s} script")
        for s in timeline.scripts
    ]
    if len(charts) > 2:
        swatches.append(
            (
                '<path d="M0 -7V7M-3 -7h6M-3 7h6" stroke="#1f2328" fill="none"/>',
                "lowest to highest over fresh processes",
            )
        )
    head = (f"Timeline of {timeline.case_id}: {timeline.title}", desc, "timeline-svg")
    return finish_svg(out, width, chart_y + len(charts) * (CHART_H + 12), swatches, head)


# ------------------------------------------------------------------ the archive heatmap


@dataclass
class HeatCell:
    verdict: Verdict
    severity: Severity
    detail: str = ""  # the tooltip: what changed


@dataclass
class Heatmap:
    """Cases (rows) x targets (columns, in release order) with the latest verdict per cell."""

    cases: list[str]
    targets: list[tuple[str, str]]  # (label, torch)
    cells: dict[tuple[str, str], HeatCell]  # (case id, target label) -> cell
    links: dict[str, str] = field(default_factory=dict)  # case id -> relative page


def heatmap_svg(heatmap: Heatmap) -> str:
    """Release x case: one coloured, labelled cell per latest result, with a <title> saying why."""
    targets = sorted(heatmap.targets, key=lambda t: (version_order(t[1]), t[0]))
    left = _width_of(heatmap.cases, 7.0, 120, 300)
    cell_w, cell_h, head = 112, 30, 52
    width = max(560, int(left + max(1, len(targets)) * cell_w + 16))
    desc = f"{len(heatmap.cases)} case(s) x {len(targets)} target(s), cells coloured by the latest verdict"
    out = []
    for i, (label, torch) in enumerate(targets):
        x = left + i * cell_w + cell_w / 2
        out.append(
            f"<g><title>{esc(label)} (torch {esc(torch)})</title>{text(x, 20, clip(torch, 16), anchor='middle', bold=True)}"
            f"{text(x, 36, clip(label, 17), anchor='middle', size=10, fill='#57606a')}</g>"
        )
    for r, case_id in enumerate(heatmap.cases):
        y = head + r * cell_h
        name = text(8, y + 19, clip(case_id, 40))
        link = heatmap.links.get(case_id)
        out.append(f'<a href="{esc(link)}">{name}</a>' if link else name)
        for i, (label, _torch) in enumerate(targets):
            out.append(
                _heat_cell(heatmap.cells.get((case_id, label)), case_id, label, left + i * cell_w, y, cell_w, cell_h)
            )
    swatches = [
        (f'<rect x="-7" y="-7" width="14" height="14" fill="{fill}" stroke="#d0d7de"/>', verdict_words(v))
        for v, (fill, _) in VERDICT_FILL.items()
    ]
    swatches.append(
        (f'<rect x="-7" y="-7" width="14" height="14" fill="{NO_RESULT_FILL[0]}" stroke="#d0d7de"/>', "not replayed")
    )
    bottom = head + max(1, len(heatmap.cases)) * cell_h
    return finish_svg(out, width, bottom, swatches, ("Release x case heatmap", desc, "heatmap-svg"))


def _heat_cell(cell: HeatCell | None, case_id: str, target: str, x: float, y: float, w: float, h: float) -> str:
    if cell is None:
        fill, ink = NO_RESULT_FILL
        word, tip, stroke = "-", f"{case_id} on {target}: not replayed", "#d0d7de"
    else:
        fill, ink = verdict_fill(cell.verdict)
        word = verdict_words(cell.verdict)
        tip = f"{case_id} on {target}: {cell.verdict} ({cell.severity})" + (f" - {cell.detail}" if cell.detail else "")
        stroke = "#ffffff"
    return (
        f'<g class="heat-cell" data-verdict="{esc(cell.verdict if cell else "none")}"><title>{esc(tip)}</title>'
        f'<rect x="{x + 1:.1f}" y="{y + 1:.1f}" width="{w - 2:.1f}" height="{h - 2:.1f}" fill="{fill}" stroke="{stroke}"/>'
        f"{text(x + w / 2, y + h / 2 + 4, clip(word, 14), anchor='middle', size=11, fill=ink, bold=True)}</g>"
    )


# ------------------------------------------------------------------ a bisection

_GREEN, _RED = ("#aceebb", "#0f5323"), ("#ff8182", "#5d0011")
_AMBER, _BLUE = ("#ffd8b5", "#762c00"), ("#b6e3ff", "#0a3069")
_UNKNOWN = ("#eaeef2", "#57606a")
# How the two sides of a bisection are named and coloured, by which way the outcome moved (the document's
# "result"): the release that fixed a break is not "bad", and it is not red.
SIDES: dict[str, tuple[tuple[str, tuple[str, str]], tuple[str, tuple[str, str]]]] = {
    "regression": (("good", _GREEN), ("bad", _RED)),
    "fix": (("unfixed", _AMBER), ("fixed", _GREEN)),
    "change": (("unchanged", _UNKNOWN), ("changed", _BLUE)),
}


def sides_of(doc: dict[str, Any]) -> tuple[tuple[str, tuple[str, str]], tuple[str, tuple[str, str]]]:
    """(word, (fill, ink)) of the side the good end is on, then of the side it changed to."""
    return SIDES.get(str(doc.get("result")), SIDES["regression"])


def end_words(result: str) -> tuple[str, str]:
    """'last good' / 'first bad', or for a fix 'last unfixed' / 'first fixed', as every view says it."""
    (before, _), (after, _) = SIDES.get(result, SIDES["regression"])
    return f"last {before}", f"first {after}"


def step_side(doc: dict[str, Any], outcome: str) -> str:
    """The side a step's outcome is on, in the words of the bisection's direction ('fixed', 'bad', ...)."""
    (before, _), (after, _) = sides_of(doc)
    if outcome == doc.get("good_outcome"):
        return before
    if outcome == doc.get("bad_outcome"):
        return after
    return "unknown"


def _side_colours(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    (before, first), (after, second) = sides_of(doc)
    return {before: first, after: second, "unknown": _UNKNOWN}


def bisect_svg(doc: dict[str, Any]) -> str:
    """A `casekit.bisect/1` document: every candidate in order, the tried ones coloured, the change marked."""
    searched = doc.get("searched") or {}
    candidates = [str(c) for c in searched.get("candidates") or []]
    labels = {str(k): str(v) for k, v in (doc.get("labels") or {}).items()}
    steps = {str(s.get("target")): (n, s) for n, s in enumerate(doc.get("steps") or [], start=1)}
    cell_w = 84 if len(candidates) <= 14 else 56
    width = max(460, int(16 + max(1, len(candidates)) * cell_w + 16))
    last, first = end_words(str(doc.get("result")))
    colours = _side_colours(doc)
    ink = sides_of(doc)[1][1][1]  # where it changes, in the colour of what it changed to
    desc = (
        f"bisection of {doc.get('subject')} by {doc.get('predicate')}: {last} {doc.get('last_good')}, "
        f"{first} {doc.get('first_bad')}; {len(steps)} of {len(candidates)} candidate(s) tried"
    )
    out = []
    for i, candidate in enumerate(candidates):
        x = 16 + i * cell_w
        tried = steps.get(candidate)
        if tried is None:
            fill, ink_of_step, word, tip = "#ffffff", "#8c959f", "not tried", f"{candidate}: not tried"
        else:
            number, step = tried
            side = step_side(doc, str(step.get("outcome")))
            fill, ink_of_step = colours[side]
            word = f"#{number} {side}"
            tip = f"step {number}: {labels.get(candidate, candidate)} -> {step.get('outcome')} ({side}); {step.get('detail', '')}"
        out.append(
            f'<g class="bisect-step"><title>{esc(tip)}</title>'
            f'<rect x="{x + 2}" y="40" width="{cell_w - 4}" height="40" rx="4" fill="{fill}" stroke="#d0d7de"/>'
            f"{text(x + cell_w / 2, 64, clip(word, 12), anchor='middle', size=11, fill=ink_of_step, bold=True)}"
            f"{text(x + cell_w / 2, 98, clip(labels.get(candidate, candidate), cell_w // 7), anchor='middle', size=10)}</g>"
        )
        if candidate == doc.get("first_bad") and i > 0:
            out.append(
                f'<g class="bisect-boundary"><title>the outcome changes between {esc(doc.get("last_good"))} and {esc(candidate)}</title>'
                f'<line x1="{x:.1f}" y1="30" x2="{x:.1f}" y2="108" stroke="{ink}" stroke-width="3" stroke-dasharray="6 3"/>'
                f"{text(x, 24, 'changes here', anchor='middle', size=11, fill=ink, bold=True)}</g>"
            )
    swatches = [
        (f'<rect x="-7" y="-7" width="14" height="14" fill="{f}" stroke="#d0d7de"/>', n)
        for n, (f, _) in colours.items()
    ]
    swatches.append(('<rect x="-7" y="-7" width="14" height="14" fill="#ffffff" stroke="#d0d7de"/>', "not tried"))
    return finish_svg(out, width, 108, swatches, (f"Bisection of {doc.get('subject')}", desc, "bisect-svg"))


# ------------------------------------------------------------------ report glue


def heatmap_from_summary(summary: Any) -> Heatmap:
    """The heatmap's plain data from an `ArchiveSummary` (cases, targets, latest cells)."""
    cells = {
        (case.case.id, label): HeatCell(
            cell.verdict, cell.severity, "; ".join(cell.details[:4]) or cell.class_summary()
        )
        for case in summary.cases
        for label, cell in case.cells.items()
    }
    return Heatmap(
        cases=[case.case.id for case in summary.cases],
        targets=[(t.label, t.torch) for t in summary.targets],
        cells=cells,
        links={case.case.id: f"cases/{case.case.id}.html" for case in summary.cases},
    )


def heatmap_section(summary: Any) -> str:
    """The index page's heatmap figure ('' before any replay)."""
    if not summary.targets:
        return ""
    return (
        '<section id="heatmap"><h2>Release &times; case heatmap</h2>'
        f'<figure class="picture">{heatmap_svg(heatmap_from_summary(summary))}'
        "<figcaption>Latest verdict per case and target, releases in version order. "
        "Hover a cell for what changed.</figcaption></figure></section>"
    )


def timeline_section(case: Case, bisects: Sequence[dict[str, Any]] = (), results: Sequence[ReplayRecord] = ()) -> str:
    """The case page's timeline figure, with the replays of `report --results` and the bisections of
    this case when given."""
    timeline = timeline_from_case(case, results)
    if not timeline.columns:
        return ""
    strips = "".join(
        f'<figure class="picture">{bisect_svg(doc)}</figure>' for doc in bisects if doc.get("subject") == case.id
    )
    return (
        '<section id="timeline"><h2>Timeline across releases</h2>'
        f'<figure class="picture">{timeline_svg(timeline, bisects)}'
        "<figcaption>Columns: the capture, then each replay in release order (with its date when a release repeats). "
        "Rows: the case's break sites. Hover a mark for the replay and its reasons.</figcaption></figure>"
        f"{strips}</section>"
    )
