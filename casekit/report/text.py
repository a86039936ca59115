"""Plain-text renderings for the terminal: the triage summary and the replay tables."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from casekit.archive.index import CaseDigest
from casekit.classify import describe_fallback, ran_compiled, ran_eager
from casekit.model import SITE_CLASS_ORDER, Case, ScriptObservation, ScriptRole, Severity, Site, SiteClass, Verdict
from casekit.observe.reasons import describe_category
from casekit.report.summary import attribution
from casekit.scrub import shorten, without_addresses
from casekit.terminal import one_line

if TYPE_CHECKING:
    from casekit.replay.document import ReplayDocument, ResultEntry, SiteEntry, TargetEntry


def table(headers: list[str], rows: list[list[str]], width: int | None = None, squeeze: int | None = None) -> str:
    """A fixed-width table; each cell one line of text (no control sequence, no newline), cut at
    60 characters to keep a terminal readable.

    With `width` (a terminal's columns), the `squeeze` column (by index) is cut further,
    with an ellipsis, so that each line fits; without it the output is stable for logs.
    """
    cells = [[(c if len(c) <= 60 else c[:57] + "...") for c in map(one_line, row)] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    if width is not None and squeeze is not None and sum(widths) + 2 * (len(widths) - 1) > width:
        room = max(len(headers[squeeze]), 8, width - (sum(widths) - widths[squeeze]) - 2 * (len(widths) - 1))
        for row in cells:
            if len(row[squeeze]) > room:
                row[squeeze] = row[squeeze][: room - 1] + "\u2026"
        widths[squeeze] = min(widths[squeeze], room)
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in out)


def case_rows(cases: Iterable[CaseDigest]) -> list[list[str]]:
    """`casekit list`: id, title, tags, breaks in the repro, the last replay (from the archive index's digests)."""
    rows = []
    for case in cases:
        pre = case.break_counts.get(ScriptRole.PRE)
        last = case.last_replay
        rows.append(
            [
                case.id,
                case.title,
                ",".join(case.tags),
                "-" if pre is None else str(pre),
                " ".join(last) if last else "-",
            ]
        )
    return rows


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def site_row(site: Site) -> list[str]:
    where = site.where()
    if site.call_site and site.call_site.where() != where:
        where += f" (from {site.call_site.where()})"
    return [
        where,
        site.function,
        site.gb_id or "-",
        shorten(site.reason, 60) if site.reason else describe_category(site.category),  # not cut inside brackets
        site.source,
    ]


def observation_summary(label: str, observation: ScriptObservation) -> str:
    lines = [f"{label}: {observation.status.value}" + (f" - {observation.detail}" if observation.detail else "")]
    lines.append(
        f"  graphs {observation.graphs}, graph breaks {len(observation.sites)}, recompiles {len(observation.recompiles)}, "
        f"frames falling back to eager {len(observation.fallback_frames)}"
    )
    if observation.sites:
        lines.append(
            _indent(table(["where", "function", "gb id", "why", "source"], [site_row(s) for s in observation.sites]))
        )
    for fallback in observation.fallback_frames:
        where = f"{fallback.file}:{fallback.line}"
        # at capture nothing is compared: the frame falls back, it does not "now" fall back
        lines.append(
            f"  {describe_fallback(fallback.function, where, since=False)}: {without_addresses(fallback.reason)}"
        )
    for recompile in observation.recompiles:
        lines.append(
            f"  recompile: {recompile.function} ({recompile.file}:{recompile.line}): {'; '.join(recompile.reasons)}"
        )
    if observation.error:
        where = f" at {observation.error.location.where()}" if observation.error.location else ""
        lines.append(
            f"  error{where}: {observation.error.type}: {without_addresses(_first_line(observation.error.message))}"
        )
    if observation.fullgraph_status:
        if observation.fullgraph:
            where = f" at {observation.fullgraph.location.where()}" if observation.fullgraph.location else ""
            first = without_addresses(_first_line(observation.fullgraph.message))
            lines.append(
                f"  fullgraph=True: {fullgraph_kind(observation)}{where}: {observation.fullgraph.type}: {first}"
            )
        else:
            lines.append("  fullgraph=True: compiles as one graph")
    check = observation.check
    if check.compared:
        verdict = "match" if check.allclose else "DIFFER"
        lines.append(
            f"  eager vs compiled: {verdict} over {check.compared} call(s) (max abs {check.max_abs:.3g}, max rel {check.max_rel:.3g})"
            if check.max_abs is not None and check.max_rel is not None
            else f"  eager vs compiled: {verdict}"
        )
    if observation.entries and observation.timing_load:
        lines.append(f"  timings under parallel load ({observation.timing_load}): compare with --serial-timings")
    for entry in observation.entries:
        lines.append(
            f"  {entry.name} ({entry.file}:{entry.line}): {entry.calls} call(s); first call {_seconds(entry.first_call_s)} "
            f"(compile), steady {_seconds(entry.steady_s)}; eager first {_seconds(entry.eager_first_s)}, steady {_seconds(entry.eager_steady_s)}"
        )
    inputs = sorted({", ".join(call.inputs) for call in observation.calls})
    if inputs:
        lines.append("  inputs: " + " | ".join(f"({i})" for i in inputs[:6]))
    return without_addresses("\n".join(lines))  # bundles captured before addresses were dropped


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def case_mark(case: Case) -> str:
    """'sentinel' / 'waived: eager, fix': how a case was kept, shown wherever the case is listed."""
    return case.capture.mark() if case.capture else ""


def case_summary(case: Case) -> str:
    """The triage summary the seeds ask for: sites, graphs, recompiles, inputs, checks, timings, pre vs post."""
    env = case.environment
    lines = [
        f"case {case.id}: {case.title}",
        f"  torch {env.get('torch', '?')} ({env.get('torch_git', '')[:12] if env.get('torch_git') else 'no commit'}), "
        f"python {env.get('python', '?')}, backend {case.backend}, runner {env.get('runner', '?')}",
    ]
    if env.get("packages"):
        lines.append("  packages: " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()))
    if case.tags:
        lines.append("  tags: " + ", ".join(case.tags))
    if case_mark(case):
        lines.append(f"  kept as: {case_mark(case)}")
    if case.provenance and case.provenance.path:
        p = case.provenance
        lines.append(f"  from {p.path} at {(p.commit or 'no commit')[:12]}{' (dirty)' if p.dirty else ''}")
    for which in ScriptRole:
        observation = case.observations.get(which)
        script = case.script(which)
        if observation and script:
            lines.append("")
            lines.append(observation_summary(f"{which.label} {script.name}", observation))
    pre, post = case.observations.get(ScriptRole.PRE), case.observations.get(ScriptRole.POST)
    if pre and post:
        lines.append("")
        lines.append(
            f"pre vs post: breaks {len(pre.sites)} -> {len(post.sites)}, graphs {pre.graphs} -> {post.graphs}, "
            f"recompiles {len(pre.recompiles)} -> {len(post.recompiles)}"
        )
    for label, text in (("notes", case.notes), ("fix", case.fix_summary), ("rollback", case.rollback_notes)):
        if text:
            lines.append(f"{label}: {text.strip()}")
    if case.replays:
        lines.append("")
        lines.append(
            "replays: " + "; ".join(f"{r.at[:10]} {r.target} {r.verdict}/{r.severity.value}" for r in case.replays[-5:])
        )
    return "\n".join(lines)


def class_counts(classes: Iterable[SiteClass]) -> str:
    """'1 new, 2 persists': site classes counted, in the canonical order (attention first)."""
    counts = Counter(classes)
    return ", ".join(f"{counts[c]} {c.value}" for c in SITE_CLASS_ORDER if counts.get(c)) or "no breaks"


def replay_table(results: Iterable[ResultEntry], marks: dict[str, str] | None = None) -> str:
    """The one replay table (replay and merge): a row per case on one target, from the replay document.

    `marks` (case id -> case_mark) flags sentinels and cases kept with waived gates."""
    rows = []
    for result in results:
        statuses = "/".join(f"{which}:{script.status}" for which, script in result.scripts.items())
        classes = class_counts(site.site_class for script in result.scripts.values() for site in script.sites)
        mark = (marks or {}).get(result.case)
        rows.append([result.case + (f" [{mark}]" if mark else ""), result.verdict, result.severity, statuses, classes])
    return table(["case", "verdict", "severity", "status", "sites"], rows)


_NOW_FALLS_BACK = re.compile(r"^(?P<function>\S+) \((?P<where>[^()]*)\) now falls back to eager entirely$")
_NO_LONGER = re.compile(r"^(?P<function>\S+) no longer falls back to eager entirely \(fallback cleared\)$")


# What fullgraph=True raises for a graph break (Unsupported, and UserError for data-dependent control flow);
# anything else it raises is a compile error, not a break.
_BREAK_ERRORS = ("Unsupported", "UserError")


def fullgraph_kind(observation: ScriptObservation) -> str:
    """'first break as an error' when fullgraph=True stopped at a graph break, else 'compile error'."""
    error = observation.fullgraph
    if error is None:
        return "compiles as one graph"
    text = f"{error.type} {error.message}".lower()
    if error.type.rsplit(".", 1)[-1] in _BREAK_ERRORS or "graph break" in text:
        return "first break as an error"
    return "compile error"


def _reworded(note: str) -> str:
    """Classification notes in the precise words (resume functions are not whole functions)."""
    if match := _NOW_FALLS_BACK.match(note):
        return describe_fallback(match["function"], match["where"])
    if match := _NO_LONGER.match(note):
        return describe_fallback(match["function"], "", now=False)
    return note


def _site_line(which: ScriptRole, site: SiteEntry) -> str:
    side = site.side
    note = f"  [{site.note}]" if site.note else ""
    cause = f"\n         {attribution(site.axis, site.cause)}" if site.cause else ""
    return f"  {which:4} {site.site_class:10} {side.where():24} {shorten(side.reason, 60)}{note}{cause}"


def result_text(result: ResultEntry) -> str:
    """One case on one target: the verdict, why (every reason), the breaks that changed, the way back."""
    lines = [f"{result.case} on {result.target}: {result.verdict} ({result.severity})"]
    reasons = list(result.reasons)
    lines += [f"  why: {without_addresses(reason)}" for reason in reasons]
    for which, script in result.scripts.items():  # the changes the reasons do not already name
        said = [reason for reason in reasons if reason.startswith(f"{which}: ")]
        if script.recorded_status and script.recorded_status != script.status:
            lines.append(f"  status: {which} {script.recorded_status} -> {script.status}")
        if script.recompiles != script.recompiles_recorded and not any("recompiles" in r for r in said):
            lines.append(f"  recompiles: {which} {script.recompiles_recorded} -> {script.recompiles}")
    for which, script in result.scripts.items():
        counts = class_counts(site.site_class for site in script.sites)
        if not script.sites and not ran_eager(script.status):  # not even the eager run: nothing ran at all
            counts = f"no break observed ({script.status}: nothing ran)"
        elif not script.sites and not ran_compiled(script.status):  # a script that did not compile shows no break
            counts = f"no break observed ({script.status}: its compiled run did not finish)"
        lines.append(f"  {which}: {counts}")
        lines += [
            _site_line(which, site) for site in script.sites if site.site_class is not SiteClass.PERSISTS or site.note
        ]
        lines += [f"  {which} note: {without_addresses(_reworded(note))}" for note in script.notes]
    rollback = result.rollback
    if rollback:
        verified = rollback.verified
        state = "verified" if verified else ("NOT verified" if verified is False else "not checked")
        lines.append(f"  rollback ({state}): {rollback.detail}")
        if rollback.notes:
            lines.append("  rollback notes: " + rollback.notes.strip().replace("\n", "\n    "))
    return "\n".join(lines)


def _target_header(target: TargetEntry, cases: int) -> str:
    torch = target.torch or "?"
    cuda = f", cuda {target.cuda}" if target.cuda else ""
    took = f" in {target.seconds:.1f} s" if target.seconds is not None else ""
    changed = [f"{name}={entry.get('value')}" for name, entry in (target.dynamo or {}).items() if entry.get("set")]
    dynamo = f", Dynamo {' '.join(changed)} (defaults otherwise)" if changed else ""
    return f"target {target.display or target.label}: torch {torch}{cuda}, python {target.python or '?'}{dynamo}, {cases} case(s){took}"


def replay_document_text(document: ReplayDocument, verbose: bool = False, marks: dict[str, str] | None = None) -> str:
    """The replay as a person reads it (replay and merge): per target its build, then the table
    and every changed result with its reasons; a failed target says why once, with no table.
    `marks` (case id -> mark) flags sentinels and waived cases in the table."""
    blocks = []
    for target in document.targets:
        results = [r for r in document.results if r.target == target.label]
        if target.error:  # its results are all env_failed: the one line says it all
            lines = [f"target {target.label}: environment failed, no case ran: {target.error}"]
            lines += [f"warning: {warning}" for warning in target.warnings]
            blocks.append("\n".join(lines))
            continue
        lines = [_target_header(target, len(results))]
        lines += [f"warning: {warning}" for warning in target.warnings]
        lines.append(replay_table(results, marks))
        for result in results:
            if verbose or result.severity is not Severity.INFO or result.verdict is not Verdict.UNCHANGED:
                lines += ["", result_text(result)]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
