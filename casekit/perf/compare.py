"""From the processes measured to what a person reads: each target's figures (median and spread over fresh
processes), and each target against the baseline, axis by axis, with the structure that explains it.
Pure: samples in, figures and comparisons out."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence

from casekit.model import (
    PerfAxis,
    PerfAxisResult,
    PerfComparison,
    PerfFigures,
    PerfStructure,
    PerfVerdict,
    ScriptRole,
    Spread,
)
from casekit.perf.judge import Sample, could_settle, judge, noise_floor
from casekit.perf.samples import ProcessSample
from casekit.perf.settings import PerfSettings

Value = Callable[[ProcessSample], float | None]

AXIS_VALUES: dict[PerfAxis, tuple[str | None, Value, Callable[[ProcessSample], list[float]] | None]] = {
    # axis: (the processes it takes: cold, warm or every one), the value per process, its blocks; the steady
    # axis's values are compiled/eager ratios, a target's times eager's change measured in turns (sides)
    PerfAxis.COMPILE_COLD: ("cold", lambda s: s.compile_s, None),
    PerfAxis.COMPILE_WARM: ("warm", lambda s: s.compile_s, None),
    PerfAxis.STEADY: (None, lambda s: s.steady_ratio(), lambda s: [b.ratio for b in s.blocks]),
    PerfAxis.SPEEDUP: (None, lambda s: s.speedup(), lambda s: [b.speedup for b in s.blocks]),
}


# Why the steady axis is judged this way. On a shared host the speed of the whole machine comes and goes in
# episodes of a quarter second and more (measured here: a plain matmul loop at 0.26 ms a call, 0.35 ms for
# seconds at a time, in any process). A process's compiled time then says as much about when it ran as about
# the build. Two things cancel the episode. Within a block, eager and compiled run side by side, so their
# ratio does (the speed-up's A/A floor here: 0.1-2 %): a process's steady value is its compiled/eager ratio.
# Between the sides, the blocks of one round's processes take turns (casekit.perf.measure), so a target's
# block and the baseline's blocks around it share their window: the target's eager time over the baseline's,
# block by block, is eager's own change, and the steady value of a target is its ratio times that change.
# (Before the turns, each side's fastest eager block stood in for it: when a side's five processes all fell
# in slow episodes, the reference moved with them, and identical builds differed by up to 26 %.)
def paired_eager_ratio(target: Sequence[ProcessSample], baseline: Sequence[ProcessSample]) -> float | None:
    """The target's eager time per call over the baseline's, from the blocks their processes timed in turns:
    per round, the median over its blocks of the target's eager time against the geometric mean of the
    baseline's in the same cycle; then the median over rounds. None without a round both sides timed."""
    per_round = []
    for number in sorted({s.round for s in target if s.round is not None}):
        mine = [s for s in target if s.ok and s.round == number and s.blocks]
        theirs = [s for s in baseline if s.ok and s.round == number and s.blocks and s not in mine]
        if not mine or not theirs:
            continue
        cycles = min(len(s.blocks) for s in mine + theirs)
        logs = [
            _mean_log(s.blocks[k].eager for s in mine) - _mean_log(s.blocks[k].eager for s in theirs)
            for k in range(cycles)
            if all(s.blocks[k].eager > 0 for s in mine + theirs)
        ]
        if logs:
            per_round.append(statistics.median(logs))
    return math.exp(statistics.median(per_round)) if per_round else None


def _mean_log(values: Iterable[float]) -> float:
    logs = [math.log(v) for v in values]
    return sum(logs) / len(logs)


def spread(values: Sequence[float]) -> Spread | None:
    return Spread(statistics.median(values), min(values), max(values), len(values)) if values else None


def _values(samples: Sequence[ProcessSample], cache: str | None, value: Value) -> list[float]:
    found = [value(s) for s in samples if s.ok and (cache is None or s.cache == cache)]
    return [v for v in found if v is not None and v > 0]


def figures(target: str, role: ScriptRole, samples: Sequence[ProcessSample], load: str = "") -> PerfFigures:
    """One target's figures for one script: every axis over the processes that measured it."""
    ok = [s for s in samples if s.ok]
    found = PerfFigures(target=target, script=role, load=load)
    found.processes = {cache: sum(1 for s in samples if s.cache == cache) for cache in ("cold", "warm")}
    found.compile_cold_s = spread(_values(samples, "cold", lambda s: s.compile_s))
    found.compile_warm_s = spread(_values(samples, "warm", lambda s: s.compile_s))
    found.steady_s = spread(_values(samples, None, lambda s: s.steady()))
    found.eager_s = spread(_values(samples, None, lambda s: s.eager()))
    found.speedup = spread(_values(samples, None, lambda s: s.speedup()))
    cold = [s for s in ok if s.cache == "cold"]
    phases = {name for s in cold for name in s.phases}
    found.phases = {
        name: statistics.median(s.phases[name] for s in cold if name in s.phases) for name in sorted(phases)
    }
    found.caches = caches_said(ok)
    counted = [s.instructions for s in ok if s.instructions is not None]
    if counted:
        found.instructions = f"{min(counted)} instructions in Dynamo's compile (min of {len(counted)})"
    elif ok:
        found.instructions = f"unavailable: {ok[0].instructions_unavailable}"
    found.structure = ok[0].structure if ok else PerfStructure()
    unavailable = {s.steady_unavailable for s in ok if s.steady_unavailable and not s.blocks}
    found.steady_unavailable = "; ".join(sorted(unavailable))
    found.threads = ok[0].threads if ok else 1
    if not ok and samples:
        found.steady_unavailable = f"no process ran the script: {samples[0].detail}"
    return found


def caches_said(samples: Sequence[ProcessSample]) -> str:
    """Whether torch's own cache counters show what cold and warm mean: a cold process missed, a warm hit."""
    cold = [s for s in samples if s.cache == "cold"]
    warm = [s for s in samples if s.cache == "warm"]
    if not any(s.cache_hits or s.cache_misses for s in samples):
        return "no compile cache used (the backend keeps none: a warm process compiles again)"
    parts = []
    if cold:
        missed = all(s.cache_misses and not s.cache_hits for s in cold)
        parts.append("cold missed" if missed else f"a cold process hit the cache ({cold[0].cache_hits} hit(s))")
    if warm:
        hit = all(s.cache_hits and not s.cache_misses for s in warm)
        parts.append("warm hit" if hit else f"a warm process missed ({max(s.cache_misses for s in warm)} miss(es))")
    return ", ".join(parts)


def compare(
    target_samples: Sequence[ProcessSample],
    baseline_samples: Sequence[ProcessSample],
    halves: tuple[Sequence[ProcessSample], Sequence[ProcessSample]],
    settings: PerfSettings,
    baseline: str,
) -> PerfComparison:
    """The target against the baseline, axis by axis (casekit.perf.judge), the eager arm's own change, and
    the structural difference that explains a verdict."""
    found = PerfComparison(baseline=baseline)
    for axis in AXIS_VALUES:
        (a, a_blocks), (b, b_blocks), floor = sides(axis, target_samples, baseline_samples, halves)
        if not a or not b:
            why = _missing(axis, baseline_samples, target_samples)
            found.axes.append(PerfAxisResult(axis, PerfVerdict.INCONCLUSIVE, why=why))
            continue
        found.axes.append(
            judge(
                axis, Sample(tuple(a), tuple(a_blocks)), Sample(tuple(b), tuple(b_blocks)), settings.rule(axis), floor
            )
        )
    eager = paired_eager_ratio(target_samples, baseline_samples)  # eager's own change, in the same windows
    found.eager_change = eager - 1 if eager is not None else None
    ok_a = [s for s in baseline_samples if s.ok]
    ok_b = [s for s in target_samples if s.ok]
    if ok_a and ok_b:
        found.explanation = structural_diff(ok_a[0].structure, ok_b[0].structure)
    return found


Side = tuple[list[float], list[float]]


def sides(
    axis: PerfAxis,
    target: Sequence[ProcessSample],
    baseline: Sequence[ProcessSample],
    halves: tuple[Sequence[ProcessSample], Sequence[ProcessSample]],
) -> tuple[Side, Side, float | None]:
    """The baseline's and the target's values on `axis` (one per process, and every block), and the noise
    floor: the baseline's second half against its first, taken the same way."""
    first, second = halves
    if axis is not PerfAxis.STEADY:
        floor = noise_floor(_axis_values(axis, first)[0], _axis_values(axis, second)[0])
        return _axis_values(axis, baseline), _axis_values(axis, target), floor
    eager = paired_eager_ratio(target, baseline)
    if eager is None:
        return ([], []), ([], []), None
    half_eager = paired_eager_ratio(second, first)
    floor = None
    if half_eager is not None:
        floor = noise_floor(_axis_values(axis, first)[0], _axis_values(axis, second, half_eager)[0])
    return _axis_values(axis, baseline), _axis_values(axis, target, eager), floor


def _axis_values(axis: PerfAxis, samples: Sequence[ProcessSample], scale: float = 1.0) -> Side:
    """(one value per process, every block) of one side on `axis`. The steady axis takes the processes that
    timed their blocks in turns, their compiled/eager ratios times `scale` (eager's change against the
    baseline: 1 on the baseline's side)."""
    cache, value, blocks = AXIS_VALUES[axis]
    if axis is PerfAxis.STEADY:
        samples = [s for s in samples if s.round is not None]
    values = _values(samples, cache, value)
    taken = [s for s in samples if s.ok and (cache is None or s.cache == cache)]
    block_values = [v for s in taken for v in blocks(s)] if blocks else []
    return [v * scale for v in values], [v * scale for v in block_values if v > 0]


def _missing(axis: PerfAxis, baseline: Sequence[ProcessSample], target: Sequence[ProcessSample]) -> str:
    """Why `axis` has no values on a side."""
    if axis in (PerfAxis.STEADY, PerfAxis.SPEEDUP):
        timed = [any(s.ok and s.blocks for s in side) for side in (baseline, target)]
        if all(timed):
            return "no round whose blocks both sides timed in turns (the steady axis compares blocks side by side)"
        return f"no steady state on {'the baseline' if not timed[0] else 'this target'}: its entry points could not be called again"
    side = "the baseline" if not _axis_values(axis, baseline)[0] else "this target"
    return f"no {axis.value.replace('_', ' ')} figure on {side} (no such process ran the script)"


def structural_diff(before: PerfStructure, after: PerfStructure) -> str:
    """'graphs 2 → 1; GB0124 at repro.py:6 gone; operators per graph [12, 9] → [21]' (empty: no change)."""
    parts = []
    if before.graphs != after.graphs:
        parts.append(f"graphs {before.graphs} → {after.graphs}")
    gone = sorted(set(before.breaks) - set(after.breaks))
    new = sorted(set(after.breaks) - set(before.breaks))
    parts += [f"{b} gone" for b in gone] + [f"{b} new" for b in new]
    if before.ops_per_graph != after.ops_per_graph:
        parts.append(f"operators per graph {before.ops_per_graph} → {after.ops_per_graph}")
    if before.recompiles != after.recompiles:
        parts.append(f"recompiles {before.recompiles} → {after.recompiles}")
    for frame in sorted(set(after.eager_frames) - set(before.eager_frames)):
        parts.append(f"{frame} now runs eagerly")
    for frame in sorted(set(before.eager_frames) - set(after.eager_frames)):
        parts.append(f"{frame} no longer runs eagerly")
    if before.guards is not None and after.guards is not None and before.guards != after.guards:
        parts.append(f"guards {before.guards} → {after.guards}")
    return "; ".join(parts)


def wants_more(
    measured_samples: dict[str, list[ProcessSample]],
    halves: tuple[Sequence[ProcessSample], Sequence[ProcessSample]],
    settings: PerfSettings,
    baseline: str,
) -> bool:
    """Whether another warm round may settle a verdict: some warm axis is inconclusive, and the rounds still
    allowed (up to `max_warm`) could settle it (judge.could_settle: not when its interval would still
    straddle the threshold with every round run) and bring its noise floor under the threshold. A floor is
    one A/A pair of halves, itself noisy (five processes a half by default): narrowed as 1/sqrt(n) with the
    rounds left it may fall under the threshold, and then the rounds are worth running. An axis with nothing
    to measure, or a floor that would stay past the threshold, is not helped by more of the same."""
    base = measured_samples[baseline]
    for label, samples in measured_samples.items():
        if label == baseline:
            continue
        warm = sum(1 for s in samples if s.cache == "warm")
        growth = max(settings.max_warm, warm) / warm if warm else 1.0  # the processes a side it may reach
        for result in compare(samples, base, halves, settings, baseline).axes:
            open_ = result.verdict is PerfVerdict.INCONCLUSIVE and result.axis is not PerfAxis.COMPILE_COLD
            threshold = settings.rule(result.axis).threshold
            floored = result.floor is not None and result.floor / math.sqrt(growth) >= threshold
            if not open_ or result.p is None or floored:
                continue
            (a, _), (b, _), _ = sides(result.axis, samples, base, halves)
            if could_settle(Sample(tuple(a)), Sample(tuple(b)), settings.rule(result.axis), growth):
                return True
    return False
