"""Plain-text renderings for the terminal: the triage summary and the replay tables."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from casekit.archive.index import CaseDigest
from casekit.classify import describe_fallback, ran_compiled, ran_eager
from casekit.model import (
    SITE_CLASS_ORDER,
    Case,
    Recompile,
    ScriptObservation,
    ScriptRole,
    Severity,
    Site,
    SiteClass,
    Verdict,
)
from casekit.observe.logs import guard_reasons, source_name
from casekit.observe.reasons import describe_category
from casekit.report.summary import attribution, axis_words, rollback_line, spread_text
from casekit.scrub import shorten, without_addresses
from casekit.terminal import one_line

if TYPE_CHECKING:
    from casekit.replay.document import PerfEntry, ReplayDocument, ResultEntry, SiteEntry, TargetEntry


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
        reasons = "; ".join(guard_failures(recompile, observation))
        lines.append(f"  recompile: {recompile.function} ({recompile.file}:{recompile.line}): {reasons}")
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
            lines.append(f"  fullgraph=True: {fullgraph_kind(observation)}")
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
    if case.perf:
        lines += ["", *capture_perf_lines(case)]
    if case.replays:
        lines.append("")
        lines.append(
            "replays: " + "; ".join(f"{r.at[:10]} {r.target} {r.verdict}/{r.severity.value}" for r in case.replays[-5:])
        )
    return "\n".join(lines)


def capture_perf_lines(case: Case) -> list[str]:
    """capture --perf's figures, with when and under what load they were measured: context for a reader,
    never a baseline (a timing from another host or day is not comparable; replay --perf measures both sides)."""
    loads = sorted({timed.figures.load for timed in case.perf if timed.figures.load})
    when = case.created[:16].replace("T", " ") or "an unknown date"
    head = f"timed at capture on {when} UTC" + (f" ({'; '.join(loads)})" if loads else "")
    lines = [f"{head}: figures only, context for a reader, never a baseline"]
    return lines + [perf_text(case.id, timed) for timed in case.perf]


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


# What a fullgraph=True trace keeps in its one graph where the default run breaks: Dynamo lets a one-graph
# trace hold a data-dependent value and a data-dependent shape (torch/_dynamo/output_graph.py:
# allow_scalar_outputs=one_graph or capture_scalar_outputs, and the same for dynamic output shapes), as
# those two settings would; seen on torch 2.13.0 for .item(), .tolist(), nonzero, unique and boolean masks.
FULLGRAPH_KEEPS = {
    "GB0124": ("the value `.item()` returns", "capture_scalar_outputs"),
    "GB0033": ("a data-dependent value (`.tolist()`, a tensor's number)", "capture_scalar_outputs"),
    "GB0036": ("a data-dependent shape (`nonzero`, `unique`, a boolean mask)", "capture_dynamic_output_shape_ops"),
}


def _why_one_graph(sites: Sequence[Site]) -> str:
    """Why fullgraph=True compiled one graph although the default run broke (nothing when it did not)."""
    if not sites:
        return ""
    kept: dict[str, list[str]] = {}
    for site in sites:
        if site.category in FULLGRAPH_KEEPS:
            kept.setdefault(site.category, []).append(site.where())
    kinds = [
        f"{FULLGRAPH_KEEPS[category][0]} at {', '.join(wheres)} (as {FULLGRAPH_KEEPS[category][1]}=True would)"
        for category, wheres in kept.items()
    ]
    others = [site.where() for site in sites if site.category not in FULLGRAPH_KEEPS]
    parts = [f"fullgraph=True keeps in its graph what the default fullgraph=False breaks on: {', '.join(kinds)}"]
    parts = (parts if kinds else []) + (
        [f"the break(s) at {', '.join(others)} did not stop fullgraph=True on this release"] if others else []
    )
    return f", though the default run breaks {len(sites)} time(s): " + "; ".join(parts)


_COMPILE_ID = re.compile(r"^(?P<frame>\d+)/(?P<compile>\d+): (?P<guard>.*)$", re.S)
_FLOAT_GUARD = re.compile(
    r"^(?P<name>\S+) == (?P<value>[-+]?(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?\d+[eE][-+]?\d+)$"
)
_STACK_VALUE = re.compile(r"^___stack\d+$")


def guard_failures(recompile: Recompile, observation: ScriptObservation) -> list[str]:
    """Each failed guard of a recompile, as a person reads it (`guard_failure`); a bundle recorded before
    the guard was kept apart from torch's source comment and user stack is read the same way."""
    return [guard_failure(reason, recompile, observation) for reason in guard_reasons(recompile.reasons)]


def guard_failure(reason: str, recompile: Recompile, observation: ScriptObservation) -> str:
    """One failed guard as a person reads it: torch's "1/0: G" is the guard G of compile [1/0] (frame 1, its
    first compile), not a fraction; a guard on a float's value says which value changed."""
    match = _COMPILE_ID.match(reason)
    guard = match["guard"] if match else reason
    said = f"guard of compile [{match['frame']}/{match['compile']}] failed: {guard}" if match else reason
    why = _float_guard_why(guard, recompile, observation)
    return f"{said} ({why})" if why else said


def _float_guard_why(guard: str, recompile: Recompile, observation: ScriptObservation) -> str:
    found = _FLOAT_GUARD.match(guard.strip())
    if found is None:
        return ""
    how = "Dynamo guards a Python float by its value, so another value compiles again"
    name = found["name"]
    if not _STACK_VALUE.match(name):
        named = source_name(name)
        bound = re.compile(rf"^\s*{re.escape(named)}\s*=[^=]")  # the variable a `.item()` line assigned
        item = next(
            (
                site
                for site in observation.sites
                if site.category == "GB0124" and site.function == recompile.function and bound.match(site.source)
            ),
            None,
        )
        said = f", the value `.item()` returned at {item.where()}," if item is not None else ""
        return f"recompiled because the float `{named}`{said} changed: {how}"
    # a value left on the stack at a break: the resume function restarts on the break's line, and the call
    # that broke there returned it
    here = f"{recompile.file}:{recompile.line}"
    broke = next((site for site in observation.sites if site.where() == here), None)
    if broke is not None and broke.category == "GB0124":
        return f"recompiled because the value `.item()` returned at {here} changed: {how}"
    if broke is not None:
        line = f" (`{shorten(broke.source, 48)}`)" if broke.source else ""
        return f"recompiled because the value returned on the break's line {here}{line} changed: {how}"
    return f"recompiled because a float the code before {here} returned changed: {how}"


_NOW_FALLS_BACK = re.compile(r"^(?P<function>\S+) \((?P<where>[^()]*)\) now falls back to eager entirely$")
_NO_LONGER = re.compile(r"^(?P<function>\S+) no longer falls back to eager entirely \(fallback cleared\)$")


# What fullgraph=True raises for a graph break (Unsupported, and UserError for data-dependent control flow);
# anything else it raises is a compile error, not a break.
_BREAK_ERRORS = ("Unsupported", "UserError")


def fullgraph_kind(observation: ScriptObservation) -> str:
    """'first break as an error' when fullgraph=True stopped at a graph break, else 'compile error';
    'compiles as one graph', and why when the default run broke all the same."""
    error = observation.fullgraph
    if error is None:
        return "compiles as one graph" + _why_one_graph(observation.sites)
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
        lines.append("  " + rollback_line(rollback, reasons))
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
        timed = [(result.case, entry) for result in results for entry in result.perf]
        if timed:
            lines += ["", f"performance on {target.label}:"] + [perf_text(case, entry) for case, entry in timed]
        blocks.append("\n".join(lines))
    if document.perf is not None:
        summary = document.perf
        took = f"perf: {summary.seconds:.0f} s of timing, compiles one at a time, steady blocks in turns"
        blocks.append("\n".join([f"{took} ({summary.load})" if summary.load else took, *summary.notes]))
    return "\n\n".join(blocks)


def perf_text(case: str, entry: PerfEntry) -> str:
    """One script's timing on one target: its figures, and each axis against the baseline with why."""
    figures = entry.figures
    head = f"  {case} {entry.script.value}-fix"
    if entry.skipped:
        return f"{head}: {entry.skipped}"
    lines = [
        f"{head}: compile cold {spread_text(figures.compile_cold_s)}, warm {spread_text(figures.compile_warm_s)}; "
        f"steady {spread_text(figures.steady_s)} per call (eager {spread_text(figures.eager_s)}); "
        f"speed-up over eager {spread_text(figures.speedup, 'x')}"
    ]
    if figures.steady_unavailable:
        lines.append(f"    steady state not measured: {figures.steady_unavailable}")
    if figures.phases:
        # torch's own cumulative timers: each phase includes the ones it calls (dynamo ⊃ aot_autograd ⊃ inductor
        # ⊃ codegen), so they are read one against the other, never summed
        lines.append(
            "    cold compile phases (nested, not to be summed): "
            + ", ".join(f"{k} {v:.2f} s" for k, v in figures.phases.items())
        )
    extras = [part for part in (figures.caches, figures.instructions) if part]
    if extras:
        lines.append("    " + "; ".join(extras))
    comparison = entry.comparison
    if comparison is not None:
        for axis in comparison.axes:
            floor = (
                f" [A/A noise floor {axis.floor:.1%}]"
                if axis.floor is not None and "noise floor" not in axis.why
                else ""
            )
            lines.append(f"    {axis_words(axis.axis)}: {axis.verdict.value} — {axis.why}{floor}")
        if comparison.eager_change is not None:
            lines.append(f"    eager alone: {comparison.eager_change:+.1%} (not the compiler's: reported apart)")
        lines.append(f"    against {comparison.baseline}: {comparison.cause}")
        lines.append(f"    structure: {comparison.explanation or 'the same'}")
    return "\n".join(lines)
