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

import dataclasses
import hashlib
import heapq
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.errors import CasekitError
from casekit.model import Severity
from casekit.outcome import ExitCode, FailOn, exit_code
from casekit.replay.document import Matrix, ReplayDocument, ResultEntry, TargetEntry, read_replay_document

# ASCII digits only: '٣' and '１' match \d (and int() reads them), '²' passes str.isdigit and int() refuses it.
SHARD = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]+)\s*$")
WHOLE_NUMBER = re.compile(r"-?[0-9]{1,30}")  # 30 digits: int() of thousands of digits refuses, or takes long
# Kubernetes' limit on an Indexed Job's completions, above Slurm's default MaxArraySize and GitHub's
# 256 per matrix: a plan is one list per shard, and 10**18 shards were allocated until memory ran out.
MAX_SHARDS = 100_000
# Per-target fields that differ between a sharded and an unsharded run of the same matrix.
VOLATILE_TARGET_FIELDS = ("seconds", "import_s")
DEFAULT_CASE_COST_S = 1.0  # a case that recorded no run times (captured before they were kept)
MIN_CASE_COST_S = 0.01  # a case that recorded 0 s still costs its forks and result files


class ShardError(CasekitError):
    """A --shard value or a set of shard results that cannot be used."""


def whole_number(text: str) -> int | None:
    """The whole number `text` writes in ASCII digits (an optional '-', at most 30 digits); else None."""
    return int(text) if WHOLE_NUMBER.fullmatch(text) else None


def check_shard_count(n: int, what: str) -> None:
    """ShardError naming `what` (the option or variable that gave it) for more than MAX_SHARDS shards."""
    if n > MAX_SHARDS:
        raise ShardError(f"{what} gives {n} shards; casekit cuts at most {MAX_SHARDS}")


def parse_shard(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4): shard K of N, 1-based."""
    match = SHARD.match(text or "")
    k, n = (whole_number(match.group(1)), whole_number(match.group(2))) if match else (None, None)
    if k is None or n is None:
        raise ShardError(f"--shard takes K/N (e.g. 2/4: the second of four slices), not {text!r}")
    check_shard_count(n, f"--shard {text.strip()}")
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
    check_shard_count(n, "the plan")
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
    files_read: int = 0  # result files read: a folder given counts each of its files
    files_kept: int = 0  # of those, the ones merged (an earlier attempt at a shard is read, then left out)

    def files_said(self) -> str:
        """'6 file(s)', or '6 file(s) (2 earlier attempt(s) left out)'."""
        left_out = self.files_read - self.files_kept
        return f"{self.files_read} file(s)" + (f" ({left_out} earlier attempt(s) left out)" if left_out else "")

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
    """A replay document in canonical order: targets by label, results by (target, case); no slice fields."""
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
        k, n = _shard_of(path, data)
        key: tuple[Any, ...] = (n,)
        if data.matrix is not None:
            key = (n, tuple(sorted(data.matrix.cases)), tuple(sorted(data.matrix.targets)))
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
        return parse_shard(str(data.shard))
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
        return self.data.attempt if isinstance(self.data.attempt, int) else 1

    def rank(self) -> tuple[int, str, str]:
        """Later attempts win; then the later write; then the path, so the choice never depends on listing order."""
        return (self.attempt, str(self.data.written or ""), str(self.path))

    def where(self) -> str:
        return f"shard {self.k}/{self.n} (index {self.k - 1}) on {self.label}"


def _slice_of(path: Path, data: ReplayDocument) -> _Slice:
    # the plan's key: the label as asked (the build that ran may name the target otherwise, and a shard
    # whose environment failed knows only the label asked)
    planned = {target.label: target.planned for target in data.targets}
    labels = sorted(set(planned.values()) | {planned.get(r.target, r.target) for r in data.results})
    if len(labels) != 1:
        raise ShardError(
            f"{path}: a per-target result file (it has an 'attempt') must hold one target, not {len(labels)}"
        )
    if data.shard is None or data.layout is None:
        raise ShardError(
            f"{path}: field '{'shard' if data.shard is None else 'layout'}': missing from a per-target result file"
        )
    k, n = _shard_of(path, data)
    matrix = data.matrix or Matrix(cases=[], targets=[])
    plan = (n, tuple(sorted(matrix.cases)), tuple(sorted(matrix.targets)))
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
        layouts = {json.dumps(item.data.layout, sort_keys=True) for item in items}
        if len(layouts) > 1:
            problems.append(
                f"{items[0].path} and {items[-1].path}: results of the same matrix disagree on its shard "
                "layout (the archive's recorded run times changed between shards?)"
            )
            continue
        layout = items[0].data.layout or {}
        expected = {(label, k) for label, ks in layout.items() for k in ks}
        present = {(item.label, item.k) for item in items}
        n = items[0].n
        for label, k in sorted(expected - present, key=lambda cell: (cell[1], cell[0])):
            problems.append(f"missing shard {k}/{n} (index {k - 1}) on {label}: no result file")
        for label, k in sorted(present - expected, key=lambda cell: (cell[1], cell[0])):
            problems.append(f"shard {k}/{n} on {label}: a result file its plan's layout does not expect")
    covered = {label for item in slices for label in (item.data.layout or {})}
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
    plain = [(path, data) for path, data in documents if data.attempt is None]
    slices, retries = _latest_attempts([_slice_of(path, data) for path, data in documents if data.attempt is not None])
    warnings: list[str] = []
    coverage = _shard_coverage(plain) + _layout_coverage(slices, expected_targets or [])
    if coverage and not allow_partial:
        raise ShardError("; ".join(coverage) + " (use --allow-partial to merge anyway)")
    warnings += coverage
    targets: dict[str, TargetEntry] = {}
    results: dict[tuple[str, str], ResultEntry] = {}
    origin: dict[tuple[str, str], Path] = {}
    kept = plain + [(item.path, item.data) for item in sorted(slices, key=lambda item: str(item.path))]
    for path, data in kept:
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
    merged.shards = (
        sorted({data.shard for _, data in kept if data.shard is not None}, key=lambda text: parse_shard(text)[::-1])
        or None
    )
    worst = merged.worst_severity()
    if merged.failed_targets() and worst.rank < Severity.ERROR.rank:
        worst = Severity.ERROR  # a target whose environment failed says nothing good about its cases
    return MergedReport(merged, worst, warnings, retries, files_read=len(documents), files_kept=len(kept))


def without_volatile(document: ReplayDocument) -> dict[str, Any]:
    """The document as JSON data without timings, for comparing two runs of the same matrix."""
    out = canonical(document).to_json()
    out["targets"] = [{k: v for k, v in t.items() if k not in VOLATILE_TARGET_FIELDS} for t in out["targets"]]
    for result in out["results"]:  # a script's first-call time is a timing too
        for script in result["scripts"].values():
            if script is not None:
                script.pop("compile_s", None)
    return out
