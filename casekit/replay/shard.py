"""Sharding the case x target matrix over machines, and merging the shards' results.

A shard is a stable slice of the matrix: the same inputs give the same slices on
every machine, so N CI jobs that each run `replay --shard K/N` cover the matrix
exactly once. Slices are rectangular (whole targets, or a target's cases split
over its share of the shards, balanced by the run times the bundles recorded)
because every target a shard touches costs a torch import, and for managed
targets an environment build. `result_file` names where a shard puts each
target's results (`replay --results-dir`).

`merge_reports` combines the `casekit.replay/1` JSON documents of the shards into
one, in a canonical order, so a merged run compares equal to an unsharded one;
of several attempts at one shard's per-target file it keeps the latest.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from casekit.errors import CasekitError
from casekit.model import Severity
from casekit.outcome import ExitCode, FailOn, exit_code
from casekit.replay.document import (
    REPLAY_SCHEMA,
    ReplayDocument,
    TargetEntry,
    failed_targets,
    read_replay_document,
    worst_severity,
)

SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# Per-target fields that differ between a sharded and an unsharded run of the same matrix.
VOLATILE_TARGET_FIELDS = ("seconds", "import_s")
# What a shard's document says about the slice it ran, not about the results: none survives a merge.
SLICE_FIELDS = ("shard", "shards", "matrix", "layout", "attempt", "written", "shard_source")
DEFAULT_CASE_COST_S = 1.0  # a case that recorded no run times (captured before they were kept)
MIN_CASE_COST_S = 0.01  # a case that recorded 0 s still costs its forks and result files


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


def shard_plan(
    case_ids: list[str], labels: list[str], n: int, costs: Mapping[str, float] | None = None
) -> list[set[tuple[str, str]]]:
    """All N slices of the matrix (index 0 is shard 1); together they hold each cell once.

    With at least as many targets as shards, whole targets are dealt round-robin.
    With fewer, each target gets a share of the shards (the first targets one more
    when it does not divide) and its cases are dealt over that share by cost, the
    dearest first, each to the cheapest shard so far (ties: the lower shard), so a
    shard's cost stays near the mean. Without `costs` (or for a case it lacks)
    every case costs the same, which deals them round-robin. Case ids and labels
    are sorted first, so the order they arrive in never matters.
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
    shares: dict[int, list[list[str]]] = {}
    for index, label in enumerate(targets):
        share = base + (1 if index < extra else 0)
        if share not in shares:  # every target deals the same cases over the same share the same way
            shares[share] = _deal_by_cost(cases, costs or {}, share)
        dealt = shares[share]
        for offset, group in enumerate(dealt):
            plan[first + offset].update((case_id, label) for case_id in group)
        first += share
    return plan


def _deal_by_cost(cases: list[str], costs: Mapping[str, float], share: int) -> list[list[str]]:
    """`cases` over `share` groups, longest first onto the lightest group (LPT): deterministic and pure."""
    order = sorted(cases, key=lambda case_id: (-case_cost(costs, case_id), case_id))
    heap = [(0.0, index) for index in range(share)]
    groups: list[list[str]] = [[] for _ in range(share)]
    for case_id in order:
        load, index = heapq.heappop(heap)
        groups[index].append(case_id)
        heapq.heappush(heap, (load + case_cost(costs, case_id), index))
    return groups


def case_cost(costs: Mapping[str, float], case_id: str) -> float:
    """A case's cost in seconds: what it recorded, or DEFAULT_CASE_COST_S when it recorded nothing usable."""
    value = costs.get(case_id)
    if value is None or not math.isfinite(value) or value < 0:
        return DEFAULT_CASE_COST_S
    return max(value, MIN_CASE_COST_S)


def select_shard(
    case_ids: list[str], labels: list[str], k: int, n: int, costs: Mapping[str, float] | None = None
) -> set[tuple[str, str]]:
    """The (case id, target label) cells shard K of N runs."""
    if not 1 <= k <= n:
        raise ShardError(f"shard {k}/{n}: K must be between 1 and {n}")
    return shard_plan(case_ids, labels, n, costs)[k - 1]


def shard_layout(plan: list[set[tuple[str, str]]]) -> dict[str, list[int]]:
    """Target label -> the shards (1-based) that hold some of its cells: the result files a merge expects."""
    layout: dict[str, list[int]] = {}
    for number, cells in enumerate(plan, start=1):
        for label in sorted({label for _, label in cells}):
            layout.setdefault(label, []).append(number)
    return dict(sorted(layout.items()))


def result_file(folder: Path, label: str, k: int, n: int) -> Path:
    """Where shard K/N puts its results for one target: FOLDER/<target>/shard-K-of-N.json.

    The folder name is the label made safe for a file system, plus a short hash of the label
    itself, so two labels that read alike once made safe never share a folder."""
    safe = re.sub(r"[^A-Za-z0-9_.+-]+", "-", label).strip("-.")[:80] or "target"
    digest = hashlib.sha256(label.encode("utf-8")).hexdigest()[:8]
    return folder / f"{safe}-{digest}" / f"shard-{k}-of-{n}.json"


# ---------------------------------------------------------------------- merge


@dataclass
class MergedReport:
    """Shard results combined: the replay JSON, its worst severity, what looked wrong, what was retried."""

    data: ReplayDocument
    worst: Severity
    warnings: list[str] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)  # one line per shard whose kept result is a later attempt

    def exit_code(self, fail_on: FailOn | str) -> ExitCode:
        """The same rule as replay: a target whose environment failed is a problem (2), whatever the verdicts."""
        return exit_code(self.worst, fail_on, problems=len(failed_targets(self.data)))


def _merge_target(into: dict[str, Any], other: TargetEntry) -> None:
    for key, value in other.items():
        if key == "warnings":
            into["warnings"] = list(dict.fromkeys([*(into.get("warnings") or []), *(other.get("warnings") or [])]))
        elif key in VOLATILE_TARGET_FIELDS:
            if isinstance(value, (int, float)):
                into[key] = (
                    round((into.get(key) or 0) + value, 2) if key == "seconds" else max(into.get(key) or 0, value)
                )
        elif into.get(key) is None:
            into[key] = value
        elif key == "error" and value and value != into[key]:
            into[key] = f"{into[key]}; {value}"


def canonical(data: ReplayDocument | dict[str, Any]) -> ReplayDocument:
    """A replay document in canonical order: targets by label, results by (target, case)."""
    out: dict[str, Any] = {
        key: value for key, value in data.items() if key not in ("targets", "results", *SLICE_FIELDS)
    }
    out["schema"] = REPLAY_SCHEMA
    out["targets"] = sorted(data.get("targets", []), key=lambda t: str(t.get("label")))
    out["results"] = sorted(data.get("results", []), key=lambda r: (r["target"], r["case"]))
    return cast(ReplayDocument, out)


def _shard_coverage(documents: list[tuple[Path, ReplayDocument]]) -> list[str]:
    """Problems with the set of shards: a K/N never given, or (when the documents say which
    matrix they slice) the same slice twice. A CI matrix runs `--shard K/N` once per target
    job, so without that `matrix` field the same K/N may legitimately repeat."""
    seen: dict[tuple[Any, ...], list[int]] = {}
    for path, data in documents:
        if "shard" not in data:
            continue
        k, n = _shard_of(path, data)
        matrix = data.get("matrix")
        key: tuple[Any, ...] = (n,)
        if isinstance(matrix, dict):
            key = (n, tuple(sorted(matrix.get("cases") or [])), tuple(sorted(matrix.get("targets") or [])))
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


def _shard_of(path: Path, data: ReplayDocument) -> tuple[int, int]:
    try:
        return parse_shard(str(data["shard"]))
    except ShardError as error:
        raise ShardError(f"{path}: field 'shard': {error}") from None


# A per-target result file (replay --results-dir): which plan, which target, which shard.
SliceKey = tuple[tuple[Any, ...], str, int]


@dataclass
class _Slice:
    path: Path
    data: ReplayDocument
    plan: tuple[Any, ...]  # (N, the matrix's cases, its targets): results of one `replay --shard-from-env` run
    label: str
    k: int
    n: int

    @property
    def attempt(self) -> int:
        value = self.data.get("attempt")
        return value if isinstance(value, int) else 1

    def rank(self) -> tuple[int, str, str]:
        """Later attempts win; then the later write; then the path, so the choice never depends on listing order."""
        return (self.attempt, str(self.data.get("written") or ""), str(self.path))

    def where(self) -> str:
        return f"shard {self.k}/{self.n} (index {self.k - 1}) on {self.label}"


def _slice_of(path: Path, data: ReplayDocument) -> _Slice:
    labels = sorted({str(target.get("label")) for target in data["targets"]} | {r["target"] for r in data["results"]})
    if len(labels) != 1:
        raise ShardError(
            f"{path}: a per-target result file (it has an 'attempt') must hold one target, not {len(labels)}"
        )
    if "shard" not in data or "layout" not in data:
        raise ShardError(
            f"{path}: field '{'shard' if 'shard' not in data else 'layout'}': missing from a per-target result file"
        )
    k, n = _shard_of(path, data)
    matrix = data.get("matrix") or {"cases": [], "targets": []}
    plan = (n, tuple(sorted(matrix.get("cases") or [])), tuple(sorted(matrix.get("targets") or [])))
    return _Slice(path, data, plan, labels[0], k, n)


def _latest_attempts(slices: list[_Slice]) -> tuple[list[_Slice], list[str]]:
    """One result per (plan, target, shard): the latest attempt; and a line for each retried shard."""
    chosen: dict[SliceKey, _Slice] = {}
    superseded: dict[SliceKey, list[_Slice]] = {}
    for item in slices:
        key = (item.plan, item.label, item.k)
        if key in chosen and chosen[key].rank() >= item.rank():
            superseded.setdefault(key, []).append(item)
            continue
        if key in chosen:
            superseded.setdefault(key, []).append(chosen[key])
        chosen[key] = item
    retries = []
    for key, item in sorted(chosen.items(), key=lambda pair: (pair[1].k, pair[1].label, str(pair[0][0][0]))):
        older = superseded.get(key, [])
        if item.attempt > 1 or older:
            earlier = f"; earlier: {', '.join(f'attempt {o.attempt} in {o.path}' for o in older)}" if older else ""
            retries.append(f"{item.where()}: kept attempt {item.attempt} ({item.path}){earlier}")
    return list(chosen.values()), retries


def _layout_coverage(slices: list[_Slice], expected_targets: list[str]) -> list[str]:
    """Problems with the per-target result files of each plan: a (target, shard) the plan's layout
    expects with no file, a file the layout does not expect, an expected target with no file at all."""
    problems = []
    by_plan: dict[tuple[Any, ...], list[_Slice]] = {}
    for item in slices:
        by_plan.setdefault(item.plan, []).append(item)
    for items in by_plan.values():
        layouts = {json.dumps(item.data.get("layout"), sort_keys=True) for item in items}
        if len(layouts) > 1:
            problems.append(
                f"{items[0].path} and {items[-1].path}: results of the same matrix disagree on its shard "
                "layout (the archive's recorded run times changed between shards?)"
            )
            continue
        layout = items[0].data.get("layout") or {}
        expected = {(label, k) for label, ks in layout.items() for k in ks}
        present = {(item.label, item.k) for item in items}
        n = items[0].n
        for label, k in sorted(expected - present, key=lambda cell: (cell[1], cell[0])):
            problems.append(f"missing shard {k}/{n} (index {k - 1}) on {label}: no result file")
        for label, k in sorted(present - expected, key=lambda cell: (cell[1], cell[0])):
            problems.append(f"shard {k}/{n} on {label}: a result file its plan's layout does not expect")
    covered = {label for item in slices for label in (item.data.get("layout") or {})}
    for label in expected_targets:
        if label not in covered:
            problems.append(f"missing target {label}: no result file of any of its shards")
    return problems


def result_files(paths: list[Path]) -> list[Path]:
    """The files to merge: each file as given, and for a folder every shard-K-of-N.json under it (sorted)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("shard-*-of-*.json") if p.is_file() and not p.name.startswith("."))
            if not found:
                raise ShardError(f"{path}: no shard result files (shard-K-of-N.json) in this folder")
            files += found
        else:
            files.append(path)
    return files


def merge_reports(
    paths: list[Path], allow_partial: bool = False, expected_targets: list[str] | None = None
) -> MergedReport:
    """Combine shard results into one replay document and verdict.

    A path may be a folder of per-target result files (`replay --results-dir`): of
    several attempts at one shard the latest is kept, and each retry is reported.
    A missing shard is an error (its cells would silently pass) unless
    allow_partial, and so is an expected target with no result at all; the same
    (case, target) twice is an error, since the results could disagree.
    """
    if not paths:
        raise ShardError("merge needs at least one result file")
    documents = [(path, read_replay_document(path)) for path in result_files(paths)]
    # per-target result files (replay --results-dir) carry an attempt; --json documents do not
    plain = [(path, data) for path, data in documents if "attempt" not in data]
    slices, retries = _latest_attempts([_slice_of(path, data) for path, data in documents if "attempt" in data])
    warnings: list[str] = []
    coverage = _shard_coverage(plain) + _layout_coverage(slices, expected_targets or [])
    if coverage and not allow_partial:
        raise ShardError("; ".join(coverage) + " (use --allow-partial to merge anyway)")
    warnings += coverage
    targets: dict[str, dict[str, Any]] = {}
    results: dict[tuple[str, str], Any] = {}
    origin: dict[tuple[str, str], Path] = {}
    kept = plain + [(item.path, item.data) for item in sorted(slices, key=lambda item: str(item.path))]
    for path, data in kept:
        for target in data["targets"]:
            label = str(target.get("label"))
            if label in targets:
                _merge_target(targets[label], target)
            else:
                targets[label] = dict(target)
        for result in data["results"]:
            key = (result["case"], result["target"])
            if key in results:
                raise ShardError(f"{path}: case {key[0]!r} on {key[1]} is also in {origin[key]} (overlapping shards?)")
            results[key] = result
            origin[key] = path
    merged = canonical({"targets": list(targets.values()), "results": list(results.values())})
    merged["shards"] = sorted(
        {str(data["shard"]) for _, data in kept if "shard" in data}, key=lambda text: parse_shard(text)[::-1]
    )
    if not merged["shards"]:
        del merged["shards"]
    worst = worst_severity(merged)
    if failed_targets(merged) and worst.rank < Severity.ERROR.rank:
        worst = Severity.ERROR  # a target whose environment failed says nothing good about its cases
    return MergedReport(merged, worst, warnings, retries)


def without_volatile(data: ReplayDocument | dict[str, Any]) -> dict[str, Any]:
    """The document without timings, for comparing two runs of the same matrix."""
    out: dict[str, Any] = dict(canonical(data))
    out["targets"] = [{k: v for k, v in t.items() if k not in VOLATILE_TARGET_FIELDS} for t in out["targets"]]
    return out
