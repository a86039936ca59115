"""Three-state verdicts on timings: `slower` / `faster` only when the change is significant, at least its
threshold and above the noise floor measured in the same run; `same` when it is clearly within the
threshold; `inconclusive` otherwise (more processes would tell). Pure: values in, verdict out.

The test is Chromium Pinpoint's, p = min(Mann-Whitney U, Kolmogorov-Smirnov), from scipy.stats. Timings
taken in blocks inside one process are not independent samples (a process has its own speed), so an axis
measured in blocks is tested twice, on the blocks and on one value per process, and a change is called
only when both agree. "Clearly alike" is an equivalence rule: the bootstrap interval of the change (over
processes) lies inside the threshold, and the noise floor is below it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from casekit.model import PerfAxis, PerfAxisResult, PerfVerdict

BOOTSTRAP_ROUNDS = 2000
BOOTSTRAP_LEVEL = 0.90  # the interval "same" asks to lie inside the threshold


@dataclass(frozen=True)
class AxisRule:
    """How one axis is judged: the relative threshold a change must reach, the p-value it must be under,
    the smallest absolute change in seconds worth calling (tens of milliseconds of compile are noise), and
    whether a larger value is the better one (the speed-up)."""

    threshold: float
    alpha: float = 0.01
    floor_abs: float = 0.0
    higher_is_better: bool = False


@dataclass(frozen=True)
class Sample:
    """One side of an axis: one value per fresh process, and (for an axis timed in blocks) every block."""

    processes: tuple[float, ...]
    blocks: tuple[float, ...] = ()


def relative_change(baseline: Sequence[float], target: Sequence[float]) -> float:
    """The target's median against the baseline's, as a ratio - 1 (+0.10: the target's value is 10 % more)."""
    return statistics.median(target) / statistics.median(baseline) - 1


def p_value(a: Sequence[float], b: Sequence[float]) -> float:
    """p = min(Mann-Whitney U, Kolmogorov-Smirnov), two-sided (1.0 when the values cannot tell)."""
    if len(a) < 2 or len(b) < 2 or len(set(a) | set(b)) < 2:
        return 1.0
    from scipy import stats  # imported on use: only a perf verdict pays for scipy

    mwu = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    ks = stats.ks_2samp(a, b).pvalue
    found = min(float(mwu), float(ks))
    return 1.0 if math.isnan(found) else found


def noise_floor(first: Sequence[float], second: Sequence[float]) -> float | None:
    """The A/A change: the baseline's two halves measured in the same run (the same target twice, its
    processes before and after each of the other's); None with fewer than 2 values a half."""
    if len(first) < 2 or len(second) < 2:
        return None
    return abs(relative_change(first, second))


def bootstrap_interval(a: Sequence[float], b: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """The BOOTSTRAP_LEVEL interval of the relative change, resampling each side's processes (seeded)."""
    rng = random.Random(seed)
    changes = []
    for _ in range(BOOTSTRAP_ROUNDS):
        resampled_a = [rng.choice(a) for _ in a]
        resampled_b = [rng.choice(b) for _ in b]
        changes.append(relative_change(resampled_a, resampled_b))
    changes.sort()
    tail = (1 - BOOTSTRAP_LEVEL) / 2
    return changes[int(tail * len(changes))], changes[min(len(changes) - 1, int((1 - tail) * len(changes)))]


def judge(axis: PerfAxis, baseline: Sample, target: Sample, rule: AxisRule, floor: float | None) -> PerfAxisResult:
    """The verdict on one axis of a target against the baseline (see the module's docstring)."""
    a, b = baseline.processes, target.processes
    if len(a) < 2 or len(b) < 2:
        change = relative_change(a, b) if a and b else None
        return PerfAxisResult(axis, PerfVerdict.INCONCLUSIVE, change, None, floor, _too_few(axis, len(a), len(b)))
    change = relative_change(a, b)
    p = p_value(a, b)
    if baseline.blocks and target.blocks:
        p = max(p, p_value(baseline.blocks, target.blocks))  # both levels must agree: the weaker one counts
    shown = f"{change:+.1%} (p={p:.3g})"
    if floor is not None and floor > rule.threshold:
        why = f"noise floor {floor:.1%} > {rule.threshold:.0%}: this machine cannot tell a change this small (measured {shown})"
        return PerfAxisResult(axis, PerfVerdict.INCONCLUSIVE, change, p, floor, why)
    absolute = abs(statistics.median(b) - statistics.median(a))
    large = abs(change) >= rule.threshold and (floor is None or abs(change) > floor) and absolute >= rule.floor_abs
    if p <= rule.alpha and large:
        worse = change < 0 if rule.higher_is_better else change > 0
        verdict = PerfVerdict.SLOWER if worse else PerfVerdict.FASTER
        return PerfAxisResult(axis, verdict, change, p, floor, f"{shown}, past {rule.threshold:.0%}")
    low, high = bootstrap_interval(a, b)
    if -rule.threshold < low and high < rule.threshold:
        why = f"{shown}; within ±{rule.threshold:.0%} ({low:+.1%} … {high:+.1%})"
        return PerfAxisResult(axis, PerfVerdict.SAME, change, p, floor, why)
    if p <= rule.alpha:
        why = f"{shown}: a real change, but under the {rule.threshold:.0%} threshold or the noise floor"
    else:
        why = f"{shown}: neither a change nor clearly alike ({low:+.1%} … {high:+.1%}); more processes would tell"
    return PerfAxisResult(axis, PerfVerdict.INCONCLUSIVE, change, p, floor, why)


def could_settle(baseline: Sample, target: Sample, rule: AxisRule, growth: float, p: float | None = None) -> bool:
    """Whether an axis left inconclusive could be settled once each side has `growth` times the processes it
    has now (the rounds still allowed): the bootstrap interval, narrowed as 1/sqrt(n) around the measured
    change, would then lie inside the threshold (`same`), or the change is past the threshold and either the
    interval would leave zero out or its p-value `p`, carried to that many processes, would pass the rule's
    alpha (`slower`/`faster`). Where none can happen, more of the same processes are time spent for the same
    `inconclusive`, and the protocol stops. (The p path: the bootstrap interval of a median of five is
    coarse, one slow round stretches it past zero, while the rank test saw the change: +11.6 %, p = 0.019,
    interval -7.5 % … +14.4 % in a +10 % bench comparison.)"""
    a, b = baseline.processes, target.processes
    if len(a) < 2 or len(b) < 2 or growth <= 1:
        return growth > 1
    change = relative_change(a, b)
    low, high = bootstrap_interval(a, b)
    shrink = 1 / math.sqrt(growth)
    low, high = change - (change - low) * shrink, change + (high - change) * shrink
    alike = -rule.threshold < low and high < rule.threshold
    significant = low > 0 or high < 0 or (p is not None and projected_p(p, growth) <= rule.alpha)
    changed = abs(change) >= rule.threshold and significant
    return alike or changed


def projected_p(p: float, growth: float) -> float:
    """The two-sided p-value a change of the same size would have with `growth` times the values: its z-score
    grows as sqrt(n) (the normal approximation of a rank test)."""
    if p >= 1.0:
        return 1.0
    normal = statistics.NormalDist()
    z = normal.inv_cdf(1 - max(p, 1e-300) / 2) * math.sqrt(max(1.0, growth))
    return 2 * (1 - normal.cdf(z))


def _too_few(axis: PerfAxis, baseline: int, target: int) -> str:
    repeats = "cold" if axis is PerfAxis.COMPILE_COLD else "warm"
    return (
        f"{baseline} and {target} process(es) a side: too few to judge "
        f"(--perf-repeats {repeats}=5 measures five a side)"
    )
