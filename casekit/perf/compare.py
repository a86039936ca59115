"""From the processes measured to what a person reads: each target's figures (median and spread over fresh
processes), and each target against the baseline, axis by axis, with the structure that explains it.
Pure: samples in, figures and comparisons out."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

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
from casekit.perf.judge import BOOTSTRAP_LEVEL, Sample, could_settle, judge, noise_floor, relative_change
from casekit.perf.samples import ProcessSample
from casekit.perf.settings import PerfSettings

Value = Callable[[ProcessSample], float | None]

AXIS_VALUES: dict[PerfAxis, tuple[str | None, Value, Callable[[ProcessSample], list[float]] | None]] = {
    # axis: (the processes it takes: cold, warm or every one), the value per process, its blocks; the steady
    # axis is not here: its values are compiled blocks against the baseline's beside them in turns (in_turns)
    PerfAxis.COMPILE_COLD: ("cold", lambda s: s.compile_s, None),
    PerfAxis.COMPILE_WARM: ("warm", lambda s: s.compile_s, None),
    PerfAxis.SPEEDUP: (None, lambda s: s.speedup(), lambda s: [b.speedup for b in s.blocks]),
}


# Why the steady axis is judged this way. On a shared host the speed of the whole machine comes and goes in
# episodes of a quarter second and more (measured here: a plain matmul loop at 0.26 ms a call, 0.35 ms for
# seconds at a time, in any process). A process's compiled time then says as much about when it ran as about
# the build. The blocks of one round's processes take turns (casekit.perf.measure), so a target's block and
# the baseline's blocks just before and after it share their window: the target's compiled time over theirs,
# block by block, is the steady change (in_turns), and eager's own change is taken the same way (below).
# (Before the turns, each side's fastest eager block stood in for the window: when a side's five processes
# all fell in slow episodes, the reference moved with them, and identical builds differed by up to 26 %.
# Then, for a while, a target's steady value was its compiled/eager ratio times eager's change in turns: two
# noisy figures multiplied, whose A/A floor passed 5 % in 4 of 20 bench comparisons, against 0 of 20 for the
# compiled blocks taken directly, re-judged on the same blocks.)
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
    for axis in PerfAxis:
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
    floor = noise_floor(*_half_values(axis, *halves))
    if axis is not PerfAxis.STEADY:
        return _axis_values(axis, baseline), _axis_values(axis, target), floor
    mine, theirs = in_turns(baseline, baseline), in_turns(target, baseline)
    if not mine[0] or not theirs[0]:
        return ([], []), ([], []), None
    return mine, theirs, floor


def _half_values(axis: PerfAxis, first: Sequence[ProcessSample], second: Sequence[ProcessSample]) -> Side:
    """The baseline's halves on `axis`, one value per process, taken as a baseline and a target are: the second
    half is the 'target' (on the steady axis, its compiled blocks against the first half's beside them)."""
    if axis is not PerfAxis.STEADY:
        return _axis_values(axis, first)[0], _axis_values(axis, second)[0]
    return in_turns(first, first)[0], in_turns(second, first)[0]


def in_turns(side: Sequence[ProcessSample], reference: Sequence[ProcessSample]) -> Side:
    """The steady values of `side`'s processes that timed their blocks in turns: each block's compiled time
    against the geometric mean of the `reference` processes' compiled blocks of the same round and cycle
    (timed just before and after it, in the same window of the host's speed); a process's value is its
    median block's. The baseline against itself: its two processes a round sit either side of 1."""
    values: list[float] = []
    blocks: list[float] = []
    for sample in side:
        if not sample.ok or sample.round is None or not sample.blocks:
            continue
        around = [s for s in reference if s.ok and s.round == sample.round and s.blocks]
        if not around:
            continue
        cycles = min(len(s.blocks) for s in [sample, *around])
        logs = [
            math.log(sample.blocks[k].compiled) - _mean_log(s.blocks[k].compiled for s in around)
            for k in range(cycles)
            if all(s.blocks[k].compiled > 0 for s in [sample, *around])
        ]
        if logs:
            values.append(math.exp(statistics.median(logs)))
            blocks.extend(math.exp(v) for v in logs)
    return values, blocks


FLOOR_RESAMPLES = 400


def floor_interval(
    axis: PerfAxis, halves: tuple[Sequence[ProcessSample], Sequence[ProcessSample]], seed: int = 0
) -> tuple[float, float] | None:
    """The BOOTSTRAP_LEVEL interval of the A/A change itself (signed: the second half against the first): the
    floor is one draw of the machine's noise, and this says how far another draw could land. Resampled by
    round on the steady axis (a round's two halves were timed in turns, their blocks paired cycle by
    cycle), else by process within each half. None with fewer than 2 rounds or processes a half."""
    first, second = halves
    rng = random.Random(seed)
    changes: list[float] = []
    if axis is PerfAxis.STEADY:
        rounds = sorted({s.round for s in first if s.round is not None} & {s.round for s in second})
        if len(rounds) < 2:
            return None
        for _ in range(FLOOR_RESAMPLES):
            picked = [rng.choice(rounds) for _ in rounds]  # a round drawn twice counts twice: renumbered
            drawn_first = [replace(s, round=k) for k, r in enumerate(picked) for s in first if s.round == r]
            drawn_second = [replace(s, round=k) for k, r in enumerate(picked) for s in second if s.round == r]
            values = _half_values(axis, drawn_first, drawn_second)
            if len(values[0]) and len(values[1]):
                changes.append(relative_change(*values))
    else:
        a, b = _half_values(axis, first, second)
        if len(a) < 2 or len(b) < 2:
            return None
        for _ in range(FLOOR_RESAMPLES):
            changes.append(relative_change([rng.choice(a) for _ in a], [rng.choice(b) for _ in b]))
    if not changes:
        return None
    changes.sort()
    tail = (1 - BOOTSTRAP_LEVEL) / 2
    return changes[int(tail * len(changes))], changes[min(len(changes) - 1, int((1 - tail) * len(changes)))]


def floor_stays_past(
    axis: PerfAxis,
    halves: tuple[Sequence[ProcessSample], Sequence[ProcessSample]],
    threshold: float,
    growth: float,
) -> bool:
    """Whether a noise floor past the threshold would stay past it with the rounds still allowed: its interval
    (floor_interval), narrowed as 1/sqrt(growth) around the floor measured, lies wholly past the threshold
    (a difference between the halves that the rounds' own noise does not explain). A floor that one unlucky
    round pushed past the threshold is not: more rounds are worth running there."""
    measured = _half_values(axis, *halves)
    interval = floor_interval(axis, halves)
    if not measured[0] or not measured[1] or interval is None:
        return True  # nothing to narrow: as measured
    change = relative_change(*measured)
    shrink = 1 / math.sqrt(max(1.0, growth))
    low, high = change - (change - interval[0]) * shrink, change + (interval[1] - change) * shrink
    nearest = 0.0 if low < 0 < high else min(abs(low), abs(high))
    return nearest >= threshold


def _axis_values(axis: PerfAxis, samples: Sequence[ProcessSample]) -> Side:
    """(one value per process, every block) of one side on `axis` (not the steady axis: in_turns)."""
    cache, value, blocks = AXIS_VALUES[axis]
    values = _values(samples, cache, value)
    taken = [s for s in samples if s.ok and (cache is None or s.cache == cache)]
    block_values = [v for s in taken for v in blocks(s)] if blocks else []
    return values, [v for v in block_values if v > 0]


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
    one A/A pair of halves, itself noisy (five processes a half by default): past the threshold, rounds are
    run unless its own interval, narrowed with the rounds left, stays past it (floor_stays_past). Judged on
    the floor measured alone, as the single value it is, one slow process in a round of five stopped 3 of 10
    +10 % comparisons at a floor of 6.5-13 %. An axis with nothing to measure, or a floor that would stay
    past the threshold, is not helped by more of the same."""
    base = measured_samples[baseline]
    for label, samples in measured_samples.items():
        if label == baseline:
            continue
        warm = sum(1 for s in samples if s.cache == "warm")
        growth = max(settings.max_warm, warm) / warm if warm else 1.0  # the processes a side it may reach
        for result in compare(samples, base, halves, settings, baseline).axes:
            open_ = result.verdict is PerfVerdict.INCONCLUSIVE and result.axis is not PerfAxis.COMPILE_COLD
            threshold = settings.rule(result.axis).threshold
            floored = result.floor is not None and result.floor > threshold
            floored = floored and floor_stays_past(result.axis, halves, threshold, growth)
            if not open_ or result.p is None or floored:
                continue
            (a, _), (b, _), _ = sides(result.axis, samples, base, halves)
            if could_settle(Sample(tuple(a)), Sample(tuple(b)), settings.rule(result.axis), growth, result.p):
                return True
    return False
