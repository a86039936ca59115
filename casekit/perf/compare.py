"""From the processes measured to what a person reads: each target's figures (median and spread over fresh
processes), and each target against the baseline, axis by axis, with the structure that explains it.
Pure: samples in, figures and comparisons out."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

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
    # axis's values are compiled/eager ratios, set to its side's eager reference (_axis_values)
    PerfAxis.COMPILE_COLD: ("cold", lambda s: s.compile_s, None),
    PerfAxis.COMPILE_WARM: ("warm", lambda s: s.compile_s, None),
    PerfAxis.STEADY: (None, lambda s: s.steady_ratio(), lambda s: [b.ratio for b in s.blocks]),
    PerfAxis.SPEEDUP: (None, lambda s: s.speedup(), lambda s: [b.speedup for b in s.blocks]),
}


# Why the steady axis is judged this way. On a shared host the speed of the whole machine comes and goes in
# episodes of a quarter second and more (measured here: a plain matmul loop at 0.26 ms a call, 0.35 ms for
# seconds at a time, in any process). A process's compiled time then says as much about when it ran as about
# the build, and fresh processes of one build differed by 10-40 %. Within a block, eager and compiled run
# side by side, so their ratio cancels the episode (the speed-up's A/A floor here: 0.1-2 %). A process's
# steady value is therefore its compiled/eager ratio times its side's eager reference: the fastest eager time
# of any of its processes (other work only ever adds time), taken over as many processes on both sides (the
# baseline's from each of its halves, then their geometric mean: a minimum over more processes is lower).
def eager_reference(samples: Sequence[ProcessSample]) -> float | None:
    """The side's undisturbed eager time per call: the fastest eager block of any of its processes."""
    found = _values(samples, None, lambda s: s.eager())
    return min(found) if found else None


def baseline_reference(
    samples: Sequence[ProcessSample], halves: tuple[Sequence[ProcessSample], Sequence[ProcessSample]]
) -> float | None:
    """The baseline's eager reference over as many processes as a target has: the geometric mean of its two
    halves' (each as many processes as the target), or over all of them where a half has none."""
    first, second = (eager_reference(half) for half in halves)
    if first is None or second is None:
        return eager_reference(samples)
    return (first * second) ** 0.5


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
        (a, a_blocks), (b, b_blocks) = (
            _axis_values(axis, baseline_samples, halves),
            _axis_values(axis, target_samples),
        )
        if not a or not b:
            found.axes.append(PerfAxisResult(axis, PerfVerdict.INCONCLUSIVE, why=_missing(axis, a, b)))
            continue
        first, second = (_axis_values(axis, half)[0] for half in halves)
        floor = noise_floor(first, second)
        found.axes.append(
            judge(
                axis, Sample(tuple(a), tuple(a_blocks)), Sample(tuple(b), tuple(b_blocks)), settings.rule(axis), floor
            )
        )
    # eager's own change, as the steady axis sees it: its reference on each side (the median process's eager
    # time moved with how many of a side's processes ran in a slow episode: 30-50 % of them on a noisy day)
    eager_a, eager_b = baseline_reference(baseline_samples, halves), eager_reference(target_samples)
    found.eager_change = eager_b / eager_a - 1 if eager_a and eager_b else None
    ok_a = [s for s in baseline_samples if s.ok]
    ok_b = [s for s in target_samples if s.ok]
    if ok_a and ok_b:
        found.explanation = structural_diff(ok_a[0].structure, ok_b[0].structure)
    return found


def _axis_values(
    axis: PerfAxis,
    samples: Sequence[ProcessSample],
    halves: tuple[Sequence[ProcessSample], Sequence[ProcessSample]] | None = None,
) -> tuple[list[float], list[float]]:
    """(one value per process, every block) of one side on `axis`; `halves`: the side is the baseline, whose
    steady reference is taken over as many processes as a target's (baseline_reference)."""
    cache, value, blocks = AXIS_VALUES[axis]
    values = _values(samples, cache, value)
    taken = [s for s in samples if s.ok and (cache is None or s.cache == cache)]
    block_values = [v for s in taken for v in blocks(s)] if blocks else []
    if axis is PerfAxis.STEADY:  # compiled/eager ratios, set to the side's eager reference
        reference = baseline_reference(samples, halves) if halves else eager_reference(samples)
        if reference is None:
            return [], []
        return [v * reference for v in values], [v * reference for v in block_values if v > 0]
    return values, block_values


def _missing(axis: PerfAxis, a: list[float], b: list[float]) -> str:
    side = "the baseline" if not a else "this target"
    if axis in (PerfAxis.STEADY, PerfAxis.SPEEDUP):
        return f"no steady state on {side}: its entry points could not be called again"
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
            a, b = _axis_values(result.axis, base, halves)[0], _axis_values(result.axis, samples)[0]
            if could_settle(Sample(tuple(a)), Sample(tuple(b)), settings.rule(result.axis), growth):
                return True
    return False
