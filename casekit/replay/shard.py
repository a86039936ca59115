"""Sharding the case x target matrix over machines, and merging the shards' results.

A shard is a stable slice of the matrix: the same inputs give the same slices on
every machine, so N CI jobs that each run `replay --shard K/N` cover the matrix
exactly once. Slices are rectangular (whole targets, or a target's cases split
round-robin) because every target a shard touches costs a torch import, and for
managed targets an environment build.

`merge_reports` combines the `casekit.replay/1` JSON documents of the shards into
one, in a canonical order, so a merged run compares equal to an unsharded one.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.errors import CasekitError
from casekit.model import Severity
from casekit.outcome import ExitCode, FailOn, exit_code
from casekit.replay.document import ReplayDocument, ResultEntry, TargetEntry, read_replay_document

SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# Per-target fields that differ between a sharded and an unsharded run of the same matrix.
VOLATILE_TARGET_FIELDS = ("seconds", "import_s")


class ShardError(CasekitError):
    """A --shard value or a set of shard results that cannot be used."""


def parse_shard(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4): shard K of N, 1-based."""
    match = SHARD.match(text or "")
    if not match:
        raise ShardError(f"--shard takes K/N (e.g. 2/4: the second of four slices), not {text!r}")
    k, n = int(match.group(1)), int(match.group(2))
    if n < 1:
        raise ShardError(f"--shard {text}: N must be at least 1")
    if not 1 <= k <= n:
        raise ShardError(f"--shard {text}: K must be between 1 and {n} (shards are numbered from 1)")
    return k, n


def shard_plan(case_ids: list[str], labels: list[str], n: int) -> list[set[tuple[str, str]]]:
    """All N slices of the matrix (index 0 is shard 1); together they hold each cell once.

    With at least as many targets as shards, whole targets are dealt round-robin.
    With fewer, each target gets a share of the shards (the first targets one more
    when it does not divide) and its cases are dealt round-robin over that share.
    Case ids and labels are sorted first, so the order they arrive in never matters.
    """
    if n < 1:
        raise ShardError("the number of shards must be at least 1")
    cases = sorted(set(case_ids))
    targets = sorted(set(labels))
    plan: list[set[tuple[str, str]]] = [set() for _ in range(n)]
    if not cases or not targets:
        return plan
    if len(targets) >= n:
        for index, label in enumerate(targets):
            plan[index % n].update((case_id, label) for case_id in cases)
        return plan
    base, extra = divmod(n, len(targets))
    first = 0
    for index, label in enumerate(targets):
        share = base + (1 if index < extra else 0)
        for position, case_id in enumerate(cases):
            plan[first + position % share].add((case_id, label))
        first += share
    return plan


def select_shard(case_ids: list[str], labels: list[str], k: int, n: int) -> set[tuple[str, str]]:
    """The (case id, target label) cells shard K of N runs."""
    if not 1 <= k <= n:
        raise ShardError(f"shard {k}/{n}: K must be between 1 and {n}")
    return shard_plan(case_ids, labels, n)[k - 1]


# ---------------------------------------------------------------------- merge


@dataclass
class MergedReport:
    """Shard results combined: the replay document, its worst severity, what looked wrong."""

    data: ReplayDocument
    worst: Severity
    warnings: list[str] = field(default_factory=list)

    def exit_code(self, fail_on: FailOn | str) -> ExitCode:
        """The same rule as replay: a target whose environment failed is a problem (2), whatever the verdicts."""
        return exit_code(self.worst, fail_on, problems=len(self.data.failed_targets()))


def _merge_target(into: TargetEntry, other: TargetEntry) -> None:
    """One target seen by several shards: warnings joined, timings summed (seconds) or the largest (import),
    what one shard did not know taken from another, errors joined."""
    into.warnings = list(dict.fromkeys([*into.warnings, *other.warnings]))
    if other.seconds is not None:
        into.seconds = round((into.seconds or 0) + other.seconds, 2)
    if other.import_s is not None:
        into.import_s = max(into.import_s or 0, other.import_s)
    for name in ("torch", "cuda", "python", "runner", "sandbox"):
        if getattr(into, name) is None:
            setattr(into, name, getattr(other, name))
    if into.error is None:
        into.error = other.error
    elif other.error and other.error != into.error:
        into.error = f"{into.error}; {other.error}"


def canonical(document: ReplayDocument) -> ReplayDocument:
    """A replay document in canonical order: targets by label, results by (target, case); no shard fields."""
    return ReplayDocument(
        targets=sorted(document.targets, key=lambda t: t.label),
        results=sorted(document.results, key=lambda r: (r.target, r.case)),
    )


def _shard_coverage(documents: list[tuple[Path, ReplayDocument]]) -> list[str]:
    """Problems with the set of shards: a K/N never given, or (when the documents say which
    matrix they slice) the same slice twice. A CI matrix runs `--shard K/N` once per target
    job, so without that `matrix` field the same K/N may legitimately repeat."""
    seen: dict[tuple[Any, ...], list[int]] = {}
    for path, data in documents:
        if data.shard is None:
            continue
        try:
            k, n = parse_shard(data.shard)
        except ShardError as error:
            raise ShardError(f"{path}: field 'shard': {error}") from None
        matrix = data.matrix
        key: tuple[Any, ...] = (n,)
        if matrix is not None:
            key = (n, tuple(sorted(matrix.cases)), tuple(sorted(matrix.targets)))
        seen.setdefault(key, []).append(k)
    problems = []
    if len({key[0] for key in seen}) > 1:
        problems.append(
            "shards of different sizes were merged: " + ", ".join(f"/{n}" for n in sorted({key[0] for key in seen}))
        )
    for key, ks in sorted(seen.items(), key=lambda item: str(item[0])):
        n = key[0]
        missing = sorted(set(range(1, n + 1)) - set(ks))
        if missing:
            problems.append(
                f"missing shard(s) {', '.join(f'{k}/{n}' for k in missing)}: their results are not in this merge"
            )
        repeated = sorted({k for k in ks if ks.count(k) > 1})
        if repeated and len(key) > 1:
            problems.append(
                f"shard(s) {', '.join(f'{k}/{n}' for k in repeated)} of the same matrix given more than once"
            )
    return problems


def merge_reports(paths: list[Path], allow_partial: bool = False) -> MergedReport:
    """Combine shard results into one replay document and verdict.

    A missing shard is an error (its cells would silently pass) unless
    allow_partial; the same (case, target) twice is an error, since the
    results could disagree.
    """
    if not paths:
        raise ShardError("merge needs at least one result file")
    documents = [(path, read_replay_document(path)) for path in paths]
    warnings: list[str] = []
    coverage = _shard_coverage(documents)
    if coverage and not allow_partial:
        raise ShardError("; ".join(coverage) + " (use --allow-partial to merge anyway)")
    warnings += coverage
    targets: dict[str, TargetEntry] = {}
    results: dict[tuple[str, str], ResultEntry] = {}
    origin: dict[tuple[str, str], Path] = {}
    for path, data in documents:
        for target in data.targets:
            if target.label in targets:
                _merge_target(targets[target.label], target)
            else:
                targets[target.label] = dataclasses.replace(target, warnings=list(target.warnings))
        for result in data.results:
            key = (result.case, result.target)
            if key in results:
                raise ShardError(f"{path}: case {key[0]!r} on {key[1]} is also in {origin[key]} (overlapping shards?)")
            results[key] = result
            origin[key] = path
    merged = canonical(ReplayDocument(list(targets.values()), list(results.values())))
    merged.shards = [data.shard for _, data in documents if data.shard is not None] or None
    worst = merged.worst_severity()
    if merged.failed_targets() and worst.rank < Severity.ERROR.rank:
        worst = Severity.ERROR  # a target whose environment failed says nothing good about its cases
    return MergedReport(merged, worst, warnings)


def without_volatile(document: ReplayDocument) -> dict[str, Any]:
    """The document as JSON data without timings, for comparing two runs of the same matrix."""
    out = canonical(document).to_json()
    out["targets"] = [{k: v for k, v in t.items() if k not in VOLATILE_TARGET_FIELDS} for t in out["targets"]]
    return out
