"""Plain-text renderings for the terminal: the triage summary and the replay tables."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from casekit.model import SITE_CLASS_ORDER, Case, ScriptObservation, Site, SiteClass
from casekit.observe.reasons import describe_category

if TYPE_CHECKING:
    from casekit.classify import CaseResult
    from casekit.replay_document import ResultEntry


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A fixed-width table; cells are cut at 60 characters to keep a terminal readable."""
    cells = [[(c if len(c) <= 60 else c[:57] + "...") for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in out)


def case_rows(cases: Iterable[Case]) -> list[list[str]]:
    """`casekit list`: id, title, tags, breaks in the repro, the last replay."""
    rows = []
    for case in cases:
        pre = case.observations.get("pre")
        last = case.replays[-1] if case.replays else None
        rows.append(
            [
                case.id,
                case.title,
                ",".join(case.tags),
                str(len(pre.sites)) if pre else "-",
                f"{last.target} {last.verdict.value}" if last else "-",
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
        site.reason if site.reason else describe_category(site.category),
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
        lines.append(
            f"  falls back to eager entirely: {fallback.function} ({fallback.file}:{fallback.line}) {fallback.reason}"
        )
    for recompile in observation.recompiles:
        lines.append(
            f"  recompile: {recompile.function} ({recompile.file}:{recompile.line}): {'; '.join(recompile.reasons)}"
        )
    if observation.error:
        where = f" at {observation.error.location.where()}" if observation.error.location else ""
        lines.append(
            f"  error{where}: {observation.error.type}: {observation.error.message.splitlines()[0] if observation.error.message else ''}"
        )
    if observation.fullgraph_status:
        if observation.fullgraph:
            where = f" at {observation.fullgraph.location.where()}" if observation.fullgraph.location else ""
            first = observation.fullgraph.message.splitlines()[0] if observation.fullgraph.message else ""
            lines.append(f"  fullgraph=True: first break as error{where}: {observation.fullgraph.type}: {first}")
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
    for entry in observation.entries:
        lines.append(
            f"  {entry.name} ({entry.file}:{entry.line}): {entry.calls} call(s); first call {_seconds(entry.first_call_s)} "
            f"(compile), steady {_seconds(entry.steady_s)}; eager first {_seconds(entry.eager_first_s)}, steady {_seconds(entry.eager_steady_s)}"
        )
    inputs = sorted({", ".join(call.inputs) for call in observation.calls})
    if inputs:
        lines.append("  inputs: " + " | ".join(f"({i})" for i in inputs[:6]))
    return "\n".join(lines)


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
    for which in ("pre", "post"):
        observation = case.observations.get(which)
        script = case.script(which)
        if observation and script:
            lines.append("")
            lines.append(observation_summary(f"{which}-fix {script.name}", observation))
    pre, post = case.observations.get("pre"), case.observations.get("post")
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


def class_counts(classes: Iterable[str]) -> str:
    """'1 new, 2 persists': site classes counted, in the canonical order (attention first)."""
    counts = Counter(classes)
    return ", ".join(f"{counts[c]} {c.value}" for c in SITE_CLASS_ORDER if counts.get(c)) or "no breaks"


def replay_table(results: Iterable[ResultEntry], marks: dict[str, str] | None = None) -> str:
    """The one replay table (replay and merge): a row per case on one target, from the replay document.

    `marks` (case id -> case_mark) flags sentinels and cases kept with waived gates."""
    rows = []
    for result in results:
        scripts = [(which, script) for which, script in result["scripts"].items() if script]
        statuses = "/".join(f"{which}:{script['status']}" for which, script in scripts)
        classes = class_counts(site["class"] for _, script in scripts for site in script.get("sites") or [])
        mark = (marks or {}).get(result["case"])
        rows.append(
            [result["case"] + (f" [{mark}]" if mark else ""), result["verdict"], result["severity"], statuses, classes]
        )
    return table(["case", "verdict", "severity", "status", "sites"], rows)


def result_details(result: CaseResult) -> str:
    """Break-by-break lines for a case that changed."""
    lines = [f"{result.case_id} on {result.target}: {result.verdict} ({result.severity.value})"]
    for which, script in result.scripts.items():
        for pairing in script.sites:
            if pairing.site_class is SiteClass.PERSISTS and not pairing.note:
                continue
            site = pairing.observed or pairing.recorded
            assert site is not None
            lines.append(
                f"  {which} {pairing.site_class.value:10} {site.where():24} {site.reason[:60]}"
                + (f"  [{pairing.note}]" if pairing.note else "")
            )
        for note in script.notes:
            lines.append(f"  {which} note: {note}")
    if result.rollback:
        rb = result.rollback
        state = "verified" if rb.verified else ("NOT verified" if rb.verified is False else "not checked")
        lines.append(f"  rollback ({state}): {rb.detail}")
        if rb.notes:
            lines.append("  rollback notes: " + rb.notes.strip().replace("\n", "\n    "))
    return "\n".join(lines)
