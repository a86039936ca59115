"""What a reduction says when it ends."""

from __future__ import annotations

from casekit.reduce.result import ReduceResult


def site_text(result: ReduceResult) -> str:
    kept = result.kept
    return f"{kept.where()} {kept.gb_id or kept.category} ({kept.reason[:70]})"


def summary_lines(result: ReduceResult) -> list[str]:
    """The summary: lines and breaks before -> after, candidates tried, time, where the result is."""
    lines = []
    cut = 100.0 * (result.lines_before - result.lines_after) / max(result.lines_before, 1)
    files = f", files {result.files_before} -> {result.files_after}" if result.files_before > 1 else ""
    lines.append(
        f"reduced {result.script}: {result.lines_before} -> {result.lines_after} lines (-{cut:.0f}%){files}, "
        f"breaks {result.breaks_before} -> {result.breaks_after}; {result.candidates} candidates run "
        f"({result.per_second:.1f}/s, {result.cached} answered from cache) in {result.seconds:.0f} s on torch {result.torch}"
    )
    now = f", now at {result.kept_now.where()}" if result.kept_now else ""
    lines.append(f"kept: {site_text(result)}{now}")
    if not result.improved:
        lines.append(f"no smaller candidate kept the break: {result.out} holds the original")
    elif result.stopped == "interrupted":
        lines.append(f"stopped by Ctrl-C: the best result so far is in {result.out}")
    elif result.stopped == "time limit":
        lines.append(f"stopped at --max-time: the best result so far is in {result.out}")
    if result.confirmed is not None and not result.confirmed.kept:
        lines.append(f"warning: in a fresh probe the result does not keep the break: {result.confirmed.why}")
    elif result.confirmed is not None:
        lines.append("confirmed in a fresh probe (as replay runs it)")
    lines.extend(f"wrote {path}" for path in result.written)
    if result.case_id:
        lines.append(f"filed case {result.case_id}: {result.case_path}")
    return lines
