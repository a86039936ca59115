"""What every report format renders: the archive as a case x target matrix of latest results.

Pure data built from the bundles (their replay histories give the latest result
per target) and, optionally, from `casekit.replay/1` documents (a CI run's merged
shards), which take precedence for the cells they hold.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from casekit.archive.index import CaseDigest
from casekit.classify import ran_compiled
from casekit.model import (
    DRAFT_TAG,
    SITE_CLASS_ORDER,
    Case,
    PerfAxis,
    PerfAxisResult,
    PerfRecord,
    PerfVerdict,
    ReplayRecord,
    ScriptRole,
    ScriptStatus,
    Severity,
    SiteClass,
    SiteVerdict,
    Spread,
    Verdict,
)
from casekit.outcome import FailOn
from casekit.scrub import without_addresses
from casekit.versions import version_order

if TYPE_CHECKING:
    from casekit.replay.document import ReplayDocument, ResultEntry, RollbackEntry


@dataclass
class Cell:
    """The latest result of one case on one target."""

    case_id: str
    target: str
    torch: str
    verdict: Verdict
    severity: Severity
    statuses: dict[ScriptRole, ScriptStatus] = field(default_factory=dict)
    classes: dict[SiteClass, int] = field(default_factory=dict)  # how many sites of each class
    details: list[str] = field(default_factory=list)  # what changed, one line each
    at: str = ""  # ISO time of the replay ("" for results documents)
    source: str = "history"  # "history" (the bundle) | a results file name
    record: ReplayRecord | None = None  # a results document's result in the history's form (the timeline draws it)
    perf: list[PerfRecord] = field(default_factory=list)  # replay --perf: each script timed, and its verdicts

    def slower(self) -> list[tuple[PerfRecord, PerfAxisResult]]:
        """Each axis timed slower than the run's baseline: a warning (the seeds' performance level)."""
        return [
            (timed, axis)
            for timed in self.perf
            if timed.comparison is not None
            for axis in timed.comparison.axes
            if axis.verdict is PerfVerdict.SLOWER
        ]

    def class_summary(self) -> str:
        """'2 moved, 1 gone' (persisting breaks only when nothing else happened)."""
        moving = [
            f"{self.classes[c]} {c.value}"
            for c in SITE_CLASS_ORDER
            if c is not SiteClass.PERSISTS and self.classes.get(c)
        ]
        if moving:
            return ", ".join(moving)
        persists = self.classes.get(SiteClass.PERSISTS, 0)
        if persists:
            return f"{persists} persist"
        # a script that did not compile to the end shows no break: that is not "no breaks"
        return "no breaks" if all(ran_compiled(status) for status in self.statuses.values()) else "none observed"


@dataclass
class TargetInfo:
    label: str
    torch: str


@dataclass
class CaseSummary:
    """One case with its latest result per target."""

    case: Case
    cells: dict[str, Cell] = field(default_factory=dict)  # target label -> latest

    @property
    def severity(self) -> Severity | None:
        """Worst severity over the latest results; None when never replayed."""
        if not self.cells:
            return None
        return max((c.severity for c in self.cells.values()), key=lambda s: s.rank)

    @property
    def is_draft(self) -> bool:
        return DRAFT_TAG in self.case.tags

    def breaks(self, which: ScriptRole) -> int | None:
        if isinstance(self.case, CaseDigest):  # from the archive index: counts, not sites
            return self.case.break_counts.get(which)
        observation = self.case.observations.get(which)
        return len(observation.sites) if observation else None


@dataclass
class ArchiveSummary:
    cases: list[CaseSummary]
    targets: list[TargetInfo]
    generated: str
    title: str = "casekit archive"
    warnings: list[str] = field(default_factory=list)
    fail_on: FailOn = FailOn.ERROR  # what the JUnit file and the step summary count as failing (`--fail-on`)

    def fails(self, cell: Cell) -> bool:
        """Whether this result counts as a failure at the report's `--fail-on` level."""
        return self.fail_on.reached_by(cell.severity)

    def failing(self) -> list[Cell]:
        return [cell for cell in self.cells() if self.fails(cell)]

    def worst(self) -> Severity | None:
        severities = [c.severity for c in self.cases if c.severity is not None]
        return max(severities, key=lambda s: s.rank) if severities else None

    def cells(self) -> list[Cell]:
        return [cell for case in self.cases for cell in case.cells.values()]

    def severity_counts(self) -> Counter[Severity]:
        return Counter(cell.severity for cell in self.cells())

    def verdict_counts(self) -> Counter[Verdict]:
        return Counter(cell.verdict for cell in self.cells())


def cell_from_record(case_id: str, record: ReplayRecord) -> Cell:
    classes = Counter(v.site_class for v in record.sites)
    details = [
        f"{v.script} {v.site_class.value} {v.where} ({v.category})"
        for v in record.sites
        if v.site_class is not SiteClass.PERSISTS
    ]
    details += [f"{which}: {status}" for which, status in record.statuses.items() if status is not ScriptStatus.OK]
    details += record.reasons  # newer histories keep the verdict's reasons
    perf = list(record.perf or [])
    return Cell(
        case_id=case_id,
        target=record.target,
        torch=record.torch,
        verdict=record.verdict,
        severity=perf_severity(record.severity, perf),
        statuses=dict(record.statuses),
        classes=dict(classes),
        details=[without_addresses(d) for d in details],
        at=record.at,
        perf=perf,
    )


def perf_severity(severity: Severity, perf: Sequence[PerfRecord]) -> Severity:
    """A result's severity with its timing: a slower axis makes it at least a warning, whatever wrote it."""
    slower = any(
        axis.verdict is PerfVerdict.SLOWER for timed in perf if timed.comparison for axis in timed.comparison.axes
    )
    return Severity.WARN if slower and severity.rank < Severity.WARN.rank else severity


def spread_text(spread: Spread | None, unit: str = "s") -> str:
    """'45.1 µs [44–47.2, n=6]': a figure's median and, over several processes, its lowest and highest."""
    if spread is None:
        return "-"
    scale, suffix = (
        (1e6, " µs")
        if unit == "s" and spread.median < 1e-3
        else ((1e3, " ms") if unit == "s" and spread.median < 1 else (1, " s" if unit == "s" else "x"))
    )
    value = f"{spread.median * scale:.3g}{suffix}"
    return value if spread.n < 2 else f"{value} [{spread.low * scale:.3g}–{spread.high * scale:.3g}, n={spread.n}]"


def axis_words(axis: PerfAxis) -> str:
    """How an axis is named in every report: 'compile cold', 'steady', 'speedup'."""
    return axis.value.replace("_", " ")


def axis_verdict(axis: PerfAxisResult) -> str:
    """'slower +12.0%', 'same -0.4%', 'inconclusive': an axis's verdict and its change, short."""
    change = f" {axis.change:+.1%}" if axis.change is not None else ""
    return f"{axis.verdict.value}{change}"


def perf_verdicts(timed: PerfRecord) -> str:
    """'compile cold same +2.0%, compile warm same -1.1%, steady slower +12.0%, speedup slower -10.3%'; what a
    script without a baseline in its run says instead."""
    if timed.skipped:
        return timed.skipped
    if timed.comparison is None:
        return "figures only (the run's baseline, or a run with one target)"
    return ", ".join(f"{axis_words(axis.axis)} {axis_verdict(axis)}" for axis in timed.comparison.axes)


def record_from_result(result: ResultEntry, torch: str) -> ReplayRecord:
    """A results document's result as a history entry would hold it (no time: it was not recorded)."""
    return ReplayRecord(
        at="",
        target=result.target,
        torch=torch,
        runner="",
        verdict=result.verdict,
        severity=result.severity,
        statuses={which: script.status for which, script in result.scripts.items()},
        sites=[
            SiteVerdict(which, site.site_class, site.side.call_site or site.side.where(), site.side.category)
            for which, script in result.scripts.items()
            for site in script.sites
        ],
        reasons=list(result.reasons),
        graphs={which: script.graphs for which, script in result.scripts.items()},
        compile_s={which: script.compile_s for which, script in result.scripts.items() if script.compile_s is not None},
        fallbacks={which: list(script.fallback_frames) for which, script in result.scripts.items()},
        perf=list(result.perf) or None,
    )


def attribution(axis: str, cause: str) -> str:
    """Which axis changed a break, as every report says it ("changed by setting X: gone with X=True; ...")."""
    if not cause:
        return ""
    return f"changed by {axis}: {cause}" if axis else f"cause unknown: {cause}"


def rollback_line(rollback: RollbackEntry, reasons: Sequence[str]) -> str:
    """'rollback (verified): post-fix with fullgraph=False runs and matches eager ...': the way back and its
    proof; why the fix broke is the verdict's reason, said once there (a document keeps it in the detail
    too, from before the check ran)."""
    verified = rollback.verified
    state = "not checked" if verified is None else ("verified" if verified else "NOT verified")
    detail = rollback.detail
    for reason in reasons:
        if detail == reason:
            detail = "the check did not run"
        elif detail.startswith(reason + "; "):
            detail = detail[len(reason) + 2 :]
    return f"rollback ({state}): {detail}"


def cells_from_results(data: ReplayDocument, source: str) -> list[Cell]:
    """Cells from a `casekit.replay/1` document (`replay --json`, `merge --json`)."""
    torch_of = {t.label: t.torch or "?" for t in data.targets}
    cells = []
    for result in data.results:
        classes: Counter[SiteClass] = Counter()
        statuses = {}
        details = list(result.reasons)
        for which, script in result.scripts.items():
            statuses[which] = script.status
            for site in script.sites:
                classes[site.site_class] += 1
                if site.site_class is not SiteClass.PERSISTS and (site.note or site.cause):
                    said = "; ".join(part for part in (site.note, attribution(site.axis, site.cause)) if part)
                    details.append(f"{which} {site.site_class} {site.side.where()}: {said}")
            details += [f"{which}: {note}" for note in script.notes]
        rollback = result.rollback
        if rollback and rollback.needed:
            details.append(rollback_line(rollback, result.reasons))
        cells.append(
            Cell(
                case_id=result.case,
                target=result.target,
                torch=torch_of.get(result.target, "?"),
                verdict=result.verdict,
                severity=perf_severity(result.severity, result.perf),
                statuses=statuses,
                classes=dict(classes),
                details=[without_addresses(d) for d in details],
                source=source,
                record=record_from_result(result, torch_of.get(result.target, "?")),
                perf=list(result.perf),
            )
        )
    return cells


def summarize(
    cases: Sequence[Case],
    results: list[tuple[str, ReplayDocument]] | None = None,
    title: str = "casekit archive",
    now: dt.datetime | None = None,
    fail_on: FailOn = FailOn.ERROR,
) -> ArchiveSummary:
    """The matrix: per case, the newest history record per target, overlaid by results documents."""
    summaries = []
    by_id: dict[str, CaseSummary] = {}
    for case in sorted(cases, key=lambda c: c.id):
        summary = CaseSummary(case)
        for record in sorted(case.replays, key=lambda r: r.at):  # later records win
            summary.cells[record.target] = cell_from_record(case.id, record)
        summaries.append(summary)
        by_id[case.id] = summary
    warnings = []
    for source, data in results or []:
        for cell in cells_from_results(data, source):
            if cell.case_id not in by_id:
                warnings.append(f"{source}: case {cell.case_id!r} is not in the archive; its result is left out")
                continue
            by_id[cell.case_id].cells[cell.target] = cell
    torch_of: dict[str, tuple[str, str]] = {}
    for summary in summaries:
        for cell in summary.cells.values():
            if cell.target not in torch_of or cell.at >= torch_of[cell.target][1]:
                torch_of[cell.target] = (cell.torch, cell.at)
    targets = sorted(
        (TargetInfo(label, torch) for label, (torch, _) in torch_of.items()),
        key=lambda t: (version_order(t.torch), t.label),
    )
    moment = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    return ArchiveSummary(summaries, targets, moment.isoformat(), title, warnings, fail_on)
