"""The shard plan: the case x target matrix cut into jobs, with each job's estimated cost.

`schedule` is pure: case ids with their recorded run seconds, target labels, and a
shard count (or a limit and a target length per job) in; the same cut
`replay --shard K/N` makes (`casekit.replay.shard.shard_plan`) out, with what each
shard is estimated to cost. `plan_archive` reads an archive for it, through the
index, with replay's own policy on drafts and invalid bundles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from casekit.archive.store import Archive
from casekit.errors import BundleError, CasekitError
from casekit.replay.plan import DRAFT_TAG, TargetChoice, recorded_costs
from casekit.replay.shard import case_cost, check_shard_count, shard_plan
from casekit.runners import registry
from casekit.runners.interface import TargetSpec

PLAN_SCHEMA = "casekit.plan/1"
DEFAULT_MAX_JOBS = 256  # GitHub Actions' cap on one matrix; Slurm's MaxArraySize and k8s allow more
DEFAULT_SHARD_SECONDS = 3600.0  # the length a job is cut to when no shard count is given
DEFAULT_IMPORT_SECONDS = 10.0  # a torch import and Dynamo warm-up, paid once per target a shard touches


@dataclass(frozen=True)
class PlannedShard:
    """One job: shard `number` of the plan (1-based; its scheduler index is number - 1)."""

    number: int
    targets: tuple[str, ...]
    cells: int
    cost_s: float  # the recorded run seconds of its cells, plus one import per target


@dataclass(frozen=True)
class Schedule:
    """The plan for one archive and target matrix, as `casekit plan` prints and emits it."""

    case_ids: tuple[str, ...]
    specs: tuple[TargetSpec, ...]
    shards: tuple[PlannedShard, ...]
    import_s: float
    max_jobs: int
    unrecorded: tuple[str, ...] = ()  # cases with no recorded run times (each assumed DEFAULT_CASE_COST_S)
    skipped_drafts: tuple[str, ...] = ()
    invalid: tuple[BundleError, ...] = field(default=(), compare=False)
    chosen_by: str = ""  # why this many shards, in a phrase

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(registry.label(spec) for spec in self.specs)

    @property
    def count(self) -> int:
        return len(self.shards)

    @property
    def cells(self) -> int:
        return len(self.case_ids) * len(self.specs)

    @property
    def busy(self) -> list[PlannedShard]:
        """The shards with something to run (more shards than cells leaves some empty)."""
        return [shard for shard in self.shards if shard.cells]

    @property
    def total_s(self) -> float:
        return sum(shard.cost_s for shard in self.shards)

    @property
    def max_s(self) -> float:
        return max((shard.cost_s for shard in self.shards), default=0.0)

    @property
    def mean_s(self) -> float:
        return self.total_s / len(self.shards) if self.shards else 0.0

    @property
    def balance(self) -> float:
        """max / mean shard cost: 1.0 is perfectly even; the wall time of the whole array is the max."""
        return self.max_s / self.mean_s if self.mean_s else 1.0

    def shards_of(self, label: str) -> list[int]:
        """The shards (1-based) that run some of this target's cells."""
        return [shard.number for shard in self.shards if label in shard.targets]

    def layout(self) -> dict[str, list[int]]:
        return {label: self.shards_of(label) for label in sorted(self.labels)}


def choose_shard_count(
    total_s: float, targets: int, cells: int, max_jobs: int, shard_seconds: float
) -> tuple[int, str]:
    """How many shards: enough for each to take about `shard_seconds`, cut so every target gets the
    same share (a multiple of the number of targets, or a divisor of it when there are fewer shards
    than targets: whole targets dealt evenly), never more than `max_jobs` nor than there are cells.
    Returns the count and why, in a phrase."""
    if targets < 1 or cells < 1:
        return 1, "nothing to run"
    divisors = [d for d in range(1, targets + 1) if targets % d == 0]
    wanted = max(1, math.ceil(min(total_s / shard_seconds, cells)))  # never more than the cells: no inf, no 10**300
    why = f"about {shard_seconds:g} s of recorded runs per shard"
    if wanted <= targets:
        wanted = min(d for d in divisors if d >= wanted)
        why += f", whole targets dealt evenly ({targets} targets)"
    else:
        wanted = math.ceil(wanted / targets) * targets
        why += f", the same share for each of the {targets} targets"
    limit = max_jobs // targets * targets if max_jobs >= targets else max(d for d in divisors if d <= max_jobs)
    if wanted > limit:
        wanted, why = (
            limit,
            f"capped at --max-jobs {max_jobs}"
            + (f", the same share for each of the {targets} targets" if limit != max_jobs else ""),
        )
    if wanted > cells:
        wanted, why = cells, f"one cell per shard ({cells} cells)"
    return max(1, wanted), why


def schedule(
    case_ids: Sequence[str],
    costs: Mapping[str, float],
    specs: Sequence[TargetSpec],
    shards: int | None = None,
    max_jobs: int = DEFAULT_MAX_JOBS,
    shard_seconds: float = DEFAULT_SHARD_SECONDS,
    import_s: float = DEFAULT_IMPORT_SECONDS,
) -> Schedule:
    """The plan (pure): the cut replay makes for `shards` (or a count chosen from the costs), and each shard's cost."""
    if max_jobs < 1:
        raise CasekitError(f"--max-jobs must be at least 1, not {max_jobs}")
    if shard_seconds <= 0 or not math.isfinite(shard_seconds):
        raise CasekitError(f"--shard-seconds must be a number of seconds above 0, not {shard_seconds}")
    if import_s < 0 or not math.isfinite(import_s):
        raise CasekitError(f"--import-seconds must be 0 or more, not {import_s}")
    ids = sorted(set(case_ids))
    labels = sorted({registry.label(spec) for spec in specs})
    if len(labels) != len(specs):
        raise CasekitError("two targets have the same label; give each target once")
    cells_cost = sum(case_cost(costs, case_id) for case_id in ids) * len(labels)
    if shards is not None:
        if shards < 1:
            raise CasekitError(f"--shards must be at least 1, not {shards}")
        if shards > max_jobs:
            raise CasekitError(f"--shards {shards} is more jobs than --max-jobs {max_jobs} allows")
        check_shard_count(shards, f"--shards {shards}")
        count, why = shards, "--shards"
    else:
        count, why = choose_shard_count(cells_cost, len(labels), len(ids) * len(labels), max_jobs, shard_seconds)
    plan = shard_plan(ids, labels, count, costs)
    planned = []
    for number, cells in enumerate(plan, start=1):
        targets = tuple(sorted({label for _, label in cells}))
        cost = sum(case_cost(costs, case_id) for case_id, _ in cells) + import_s * len(targets)
        planned.append(PlannedShard(number, targets, len(cells), round(cost, 3)))
    by_label = {registry.label(spec): spec for spec in specs}
    return Schedule(
        case_ids=tuple(ids),
        specs=tuple(by_label[label] for label in labels),
        shards=tuple(planned),
        import_s=import_s,
        max_jobs=max_jobs,
        unrecorded=tuple(case_id for case_id in ids if case_id not in costs),
        chosen_by=why,
    )


@dataclass(frozen=True)
class PlanRequest:
    """What `casekit plan` was asked: the target options replay takes, and how to cut the matrix."""

    targets: TargetChoice = field(default_factory=TargetChoice)
    case_ids: tuple[str, ...] = ()
    shards: int | None = None
    max_jobs: int = DEFAULT_MAX_JOBS
    shard_seconds: float = DEFAULT_SHARD_SECONDS
    import_s: float = DEFAULT_IMPORT_SECONDS


def plan_archive(request: PlanRequest, archive: Archive) -> Schedule:
    """The plan for an archive, read through its index with replay's policy: drafts are skipped, invalid
    bundles named (and left out, as replay leaves them out)."""
    cases, invalid = archive.summaries_tolerant(list(request.case_ids) or None, history=False)
    drafts = tuple(case.id for case in cases if DRAFT_TAG in case.tags)
    runnable = [case for case in cases if case.id not in drafts]
    if not runnable:
        raise CasekitError(f"the archive {archive.root} holds no cases to replay")
    plan = schedule(
        [case.id for case in runnable],
        recorded_costs(runnable),
        request.targets.specs(),
        shards=request.shards,
        max_jobs=request.max_jobs,
        shard_seconds=request.shard_seconds,
        import_s=request.import_s,
    )
    return replace(plan, skipped_drafts=drafts, invalid=tuple(invalid))


def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.2f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def plan_text(plan: Schedule, rows: int = 24) -> str:
    """The plan as `casekit plan` prints it: the matrix, the cut, the balance, the shards (all of them
    when there are at most `rows`, else the dearest and the cheapest)."""
    lines = [
        f"matrix: {len(plan.case_ids)} case(s) x {len(plan.specs)} target(s) = {plan.cells} cell(s); "
        f"recorded runs {_seconds(plan.total_s - plan.import_s * sum(len(s.targets) for s in plan.shards))}"
        f" + {plan.import_s:g} s per target a shard imports",
        f"shards: {plan.count} ({plan.chosen_by}); limit {plan.max_jobs} jobs: "
        + ("fits" if plan.count <= plan.max_jobs else "does not fit"),
        f"cost per shard: max {_seconds(plan.max_s)}, mean {_seconds(plan.mean_s)}, max/mean {plan.balance:.3f}",
    ]
    for spec in plan.specs:
        numbers = plan.shards_of(registry.label(spec))
        span = f"{numbers[0]}-{numbers[-1]}" if len(numbers) > 1 else (str(numbers[0]) if numbers else "-")
        lines.append(f"  {registry.label(spec)}: {len(numbers)} shard(s) ({span})")
    if plan.unrecorded:
        lines.append(
            f"{len(plan.unrecorded)} case(s) recorded no run times; each counted as "
            f"{case_cost({}, plan.unrecorded[0]):g} s: {', '.join(plan.unrecorded[:5])}"
            + (" ..." if len(plan.unrecorded) > 5 else "")
        )
    if plan.skipped_drafts:
        lines.append(f"skipping {len(plan.skipped_drafts)} draft case(s) without a repro")
    shown = list(plan.shards)
    if len(shown) > rows:
        dearest = sorted(shown, key=lambda s: (-s.cost_s, s.number))[: rows // 2]
        cheapest = sorted(shown, key=lambda s: (s.cost_s, s.number))[: rows // 2]
        shown = sorted({s.number: s for s in dearest + cheapest}.values(), key=lambda s: s.number)
        lines.append(f"the {len(dearest)} dearest and {len(cheapest)} cheapest of {plan.count} shards:")
    lines.append(f"  {'shard':>5}  {'index':>5}  {'cells':>6}  {'cost':>9}  target(s)")
    for shard in shown:
        lines.append(
            f"  {shard.number:>5}  {shard.number - 1:>5}  {shard.cells:>6}  {_seconds(shard.cost_s):>9}  "
            + (", ".join(shard.targets) or "(empty)")
        )
    return "\n".join(lines)


def plan_document(plan: Schedule) -> dict[str, Any]:
    """The plan as JSON (`casekit plan --json`): the figures and every shard."""
    return {
        "schema": PLAN_SCHEMA,
        "cases": len(plan.case_ids),
        "targets": list(plan.labels),
        "cells": plan.cells,
        "shards": plan.count,
        "max_jobs": plan.max_jobs,
        "chosen_by": plan.chosen_by,
        "import_s": plan.import_s,
        "cost_s": {"total": round(plan.total_s, 3), "max": plan.max_s, "mean": round(plan.mean_s, 3)},
        "balance": round(plan.balance, 4),
        "unrecorded": list(plan.unrecorded),
        "layout": plan.layout(),
        "plan": [
            {"shard": s.number, "index": s.number - 1, "targets": list(s.targets), "cells": s.cells, "cost_s": s.cost_s}
            for s in plan.shards
        ],
    }
