"""What the original's run told the passes: the lines it ran, who called each function, where the
compiled entry point was called and with what, and the kept break's call path.

Read once from the original's probe run (the `trace_lines` and `call_sites` job flags) and sent to the
explorer as plain data; every pass that cuts by what happened reads it from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from casekit.runners.interface import ProbeBatchResult

MAX_SITES = 4  # the compiled entry point's sites called most; a script rarely calls it from more places

Place = tuple[str, int]  # (file, line) in the original's lines


@dataclass(frozen=True)
class Facts:
    """The original's files and its run, as every pass may read them."""

    script: str
    originals: dict[str, str]  # name -> original text (the script and the included Python files)
    order: tuple[str, ...] = ()  # the files, importers first (a use goes before its definition)
    ran: dict[str, frozenset[int]] = field(default_factory=dict)  # lines the eager run ran, per file
    callers: dict[Place, frozenset[Place]] = field(default_factory=dict)  # a function's first line -> its callers
    calls: tuple[RecordedCall, ...] = ()  # the compiled entry point's call sites, called most first
    kept_path: tuple[Place, ...] = ()  # the kept break's frames through the user's files, outermost first
    backend: str = "eager"  # the backend every run forced (the compile call's tidy step reads it)

    @property
    def removable(self) -> tuple[str, ...]:
        """The included files (the script itself always stays)."""
        return tuple(name for name in self.order if name != self.script)

    @property
    def compiled_calls(self) -> frozenset[tuple[int, int | None]]:
        """(line, column) of each call of the compiled entry point in the script."""
        return frozenset((call.line, call.col) for call in self.calls if call.file == self.script)


@dataclass(frozen=True)
class RecordedCall:
    """Where a compiled entry point was called from, and the description of what it was given."""

    file: str
    line: int
    end_line: int | None
    col: int | None
    end_col: int | None
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]

    @property
    def place(self) -> tuple[str, int, int | None, int | None, int | None]:
        return (self.file, self.line, self.end_line, self.col, self.end_col)


def recorded_calls(raw: Mapping[str, Any]) -> list[RecordedCall]:
    """The compiled run's calls that name their site (the probe's `call_sites` job flag), one per site
    (its first call), the sites called most first."""
    runs = raw.get("runs") if isinstance(raw, Mapping) else None
    compiled = runs.get("compiled") if isinstance(runs, Mapping) else None
    calls = compiled.get("calls") if isinstance(compiled, Mapping) else None
    first: dict[tuple[str, int, int | None, int | None, int | None], RecordedCall] = {}
    counts: dict[tuple[str, int, int | None, int | None, int | None], int] = {}
    for call in calls if isinstance(calls, list) else []:
        site = call.get("site") if isinstance(call, Mapping) else None
        if not isinstance(site, Mapping) or not isinstance(site.get("file"), str) or not _int(site.get("line")):
            continue
        args, kwargs = call.get("args"), call.get("kwargs")
        if not isinstance(args, list) or not isinstance(kwargs, Mapping):
            continue
        recorded = RecordedCall(
            file=site["file"],
            line=site["line"],
            end_line=site.get("end_line") if _int(site.get("end_line")) else None,
            col=site.get("col") if _int(site.get("col")) else None,
            end_col=site.get("end_col") if _int(site.get("end_col")) else None,
            args=tuple(args),
            kwargs=tuple((str(k), v) for k, v in kwargs.items()),
        )
        first.setdefault(recorded.place, recorded)
        counts[recorded.place] = counts.get(recorded.place, 0) + 1
    ranked = sorted(first.values(), key=lambda c: -counts[c.place])
    return ranked[:MAX_SITES]


def _int(value: object) -> bool:
    return type(value) is int


def _eager_run(batch: ProbeBatchResult, job_id: str) -> Mapping[str, Any]:
    raw = batch.results.get(job_id) or {}
    runs = raw.get("runs") if isinstance(raw, dict) else None
    eager = runs.get("eager") if isinstance(runs, dict) else None
    return eager if isinstance(eager, dict) else {}


def lines_run(batch: ProbeBatchResult, job_id: str) -> dict[str, set[int]]:
    """The lines the eager run ran, per file of the job (relative paths), when it traced them."""
    traced = _eager_run(batch, job_id).get("lines_run")
    if not isinstance(traced, dict):
        return {}
    return {
        name: {n for n in lines if isinstance(n, int)}
        for name, lines in traced.items()
        if isinstance(name, str) and isinstance(lines, list)
    }


def callers_seen(batch: ProbeBatchResult, job_id: str) -> dict[tuple[str, int], set[tuple[str, int]]]:
    """Who called each function of the job's files in the eager run: (file, the function's first line)
    -> {(file, line)}, the nearest caller in those files (when the run traced its lines)."""
    edges = _eager_run(batch, job_id).get("callers")
    out: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for edge in edges if isinstance(edges, list) else []:
        if isinstance(edge, list) and len(edge) == 4:
            name, first, outer, line = edge
            if isinstance(name, str) and isinstance(outer, str) and isinstance(first, int) and isinstance(line, int):
                out.setdefault((name, first), set()).add((outer, line))
    return out


def library_modules(batch: ProbeBatchResult, job_id: str) -> list[str]:
    """The installed modules a run reported importing (every mode's), for the probe to preload."""
    raw = batch.results.get(job_id) or {}
    runs = raw.get("runs") if isinstance(raw, dict) else None
    names: set[str] = set()
    for run in (runs if isinstance(runs, dict) else {}).values():
        if isinstance(run, dict) and isinstance(run.get("library_modules"), list):
            names.update(n for n in run["library_modules"] if isinstance(n, str))
    return sorted(names)
