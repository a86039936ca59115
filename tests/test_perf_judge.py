"""The three-state timing verdicts, pure: samples in, verdict out (casekit.perf.judge, casekit.perf.settings)."""

from __future__ import annotations

import random
import statistics

import pytest

from casekit.errors import CasekitError
from casekit.model import PerfAxis, PerfVerdict, ScriptRole, ScriptStatus
from casekit.perf.compare import wants_more
from casekit.perf.judge import AxisRule, Sample, could_settle, judge, noise_floor, p_value
from casekit.perf.samples import Block, ProcessSample
from casekit.perf.settings import PerfSettings, parse_repeats, parse_scripts, parse_thresholds, settings_from_flags

STEADY = AxisRule(threshold=0.05)
SPEEDUP = AxisRule(threshold=0.05, higher_is_better=True)
COMPILE = AxisRule(threshold=0.15, floor_abs=0.05)


def around(center: float, spread: float, n: int, seed: int) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(center * (1 + rng.uniform(-spread, spread)) for _ in range(n))


def test_a_clear_slowdown_past_the_threshold_is_slower_and_the_same_gain_is_faster() -> None:
    base, slow = around(1.0, 0.01, 10, 1), around(1.2, 0.01, 5, 2)
    result = judge(PerfAxis.STEADY, Sample(base), Sample(slow), STEADY, floor=0.01)
    assert result.verdict is PerfVerdict.SLOWER and result.change == pytest.approx(0.2, abs=0.02)
    assert judge(PerfAxis.STEADY, Sample(slow), Sample(base), STEADY, floor=0.01).verdict is PerfVerdict.FASTER


def test_for_the_speedup_a_lower_value_is_the_slower_one() -> None:
    base, lower = around(2.0, 0.01, 10, 3), around(1.6, 0.01, 5, 4)
    assert judge(PerfAxis.SPEEDUP, Sample(base), Sample(lower), SPEEDUP, floor=0.01).verdict is PerfVerdict.SLOWER


def test_tight_alike_samples_are_same() -> None:
    result = judge(PerfAxis.STEADY, Sample(around(1.0, 0.005, 10, 5)), Sample(around(1.0, 0.005, 5, 6)), STEADY, 0.004)
    assert result.verdict is PerfVerdict.SAME and "within ±5%" in result.why


def test_a_noise_floor_past_the_threshold_is_inconclusive_never_slower() -> None:
    base, slow = around(1.0, 0.01, 10, 7), around(1.5, 0.01, 5, 8)
    result = judge(PerfAxis.STEADY, Sample(base), Sample(slow), STEADY, floor=0.09)
    assert result.verdict is PerfVerdict.INCONCLUSIVE and result.why.startswith("noise floor 9.0% > 5%")


def test_too_few_processes_are_inconclusive_and_say_how_to_get_more() -> None:
    result = judge(PerfAxis.COMPILE_COLD, Sample((20.0,)), Sample((30.0,)), COMPILE, None)
    assert result.verdict is PerfVerdict.INCONCLUSIVE and "--perf-repeats cold=5" in result.why
    assert result.change == pytest.approx(0.5)


def test_a_significant_change_below_the_threshold_is_not_called() -> None:
    base, a_bit = around(1.0, 0.002, 12, 9), around(1.02, 0.002, 6, 10)
    result = judge(PerfAxis.STEADY, Sample(base), Sample(a_bit), STEADY, floor=0.002)
    assert result.verdict in (PerfVerdict.SAME, PerfVerdict.INCONCLUSIVE) and result.p is not None and result.p < 0.01


def test_blocks_that_disagree_with_the_processes_keep_a_change_from_being_called() -> None:
    base, slow = around(1.0, 0.01, 10, 11), around(1.2, 0.01, 5, 12)
    # the blocks of each side overlap completely: one level says "different", the other does not
    blocks = around(1.1, 0.3, 30, 13)
    result = judge(PerfAxis.STEADY, Sample(base, blocks), Sample(slow, blocks), STEADY, floor=0.01)
    assert result.verdict is not PerfVerdict.SLOWER


def test_a_compile_change_of_a_few_milliseconds_is_not_called_whatever_its_ratio() -> None:
    base, slow = around(0.060, 0.01, 10, 14), around(0.080, 0.01, 5, 15)  # +33 %, 20 ms
    assert judge(PerfAxis.COMPILE_WARM, Sample(base), Sample(slow), COMPILE, 0.01).verdict is not PerfVerdict.SLOWER


def test_a_a_comparisons_rarely_call_a_change() -> None:
    """Both sides from one distribution (10 % spread): at most one in 100 may be called."""
    called = 0
    for seed in range(100):
        a, b = around(1.0, 0.10, 10, 1000 + seed), around(1.0, 0.10, 5, 5000 + seed)
        halves = noise_floor(a[::2], a[1::2])
        if judge(PerfAxis.STEADY, Sample(a), Sample(b), STEADY, halves).verdict in (
            PerfVerdict.SLOWER,
            PerfVerdict.FASTER,
        ):
            called += 1
    assert called <= 1


def test_a_comparison_of_identical_builds_calls_any_of_its_axes_at_most_alpha_of_the_time() -> None:
    """A replay reads four axes a comparison: tested at alpha each, identical builds (10 v 5 processes, the
    defaults) had one of them significant in 3-4 % of 1,000 comparisons; shared out (alpha / 4 an axis),
    about alpha. A bisection reads one axis, which keeps the whole alpha."""
    replay, bisect = PerfSettings(), PerfSettings(axes_read=1)
    assert bisect.rule(PerfAxis.STEADY).alpha == replay.alpha == 4 * replay.rule(PerfAxis.STEADY).alpha

    def called(settings: PerfSettings) -> int:
        found = 0
        for seed in range(1000):
            for index, axis in enumerate(PerfAxis):  # the four axes of one comparison, each its own draw
                a, b = around(1.0, 0.1, 10, 8 * seed + index), around(1.0, 0.1, 5, 10**6 + 8 * seed + index)
                if p_value(a, b) <= settings.rule(axis).alpha:
                    found += 1
                    break
        return found

    assert called(replay) <= 12  # alpha 1 %, and a little for the draw
    assert called(bisect) >= 25  # the same comparisons, each axis at the whole alpha


def test_more_processes_are_asked_for_only_where_the_rounds_left_could_settle_the_axis() -> None:
    base = around(1.0, 0.04, 5, 11)
    near_the_threshold = around(1.048, 0.04, 5, 12)  # the interval straddles +5 % and stays so
    assert judge(PerfAxis.STEADY, Sample(base), Sample(near_the_threshold), STEADY, None).verdict is (
        PerfVerdict.INCONCLUSIVE
    )
    assert not could_settle(Sample(base), Sample(near_the_threshold), STEADY, growth=8 / 5)
    assert could_settle(Sample(base), Sample(near_the_threshold), STEADY, growth=400)  # enough would
    alike = around(1.0, 0.1, 5, 18)  # -3.4 % (-6.5 % … +0.2 %): inside ±5 % once it narrows enough
    assert judge(PerfAxis.STEADY, Sample(base), Sample(alike), STEADY, None).verdict is PerfVerdict.INCONCLUSIVE
    assert could_settle(Sample(base), Sample(alike), STEADY, growth=4)
    assert not could_settle(Sample(base), Sample(alike), STEADY, growth=8 / 5)
    assert not could_settle(Sample(base), Sample(alike), STEADY, growth=1)  # no round left
    far = around(1.3, 0.3, 5, 14)  # past the threshold, noisy: narrowing leaves zero out
    assert could_settle(Sample(base), Sample(far), STEADY, growth=8 / 5)


def test_p_value_is_one_when_the_values_cannot_tell() -> None:
    assert p_value((1.0,), (2.0,)) == 1.0 and p_value((1.0, 1.0), (1.0, 1.0)) == 1.0
    assert p_value(around(1, 0.01, 8, 1), around(2, 0.01, 8, 2)) < 0.01


def test_the_flags_parse_into_settings_and_bad_ones_are_one_line() -> None:
    settings = settings_from_flags("cold=3,warm=6", "steady=3%,compile=20%", "both", "inductor")
    assert (settings.cold, settings.warm, settings.max_warm) == (3, 6, 8)
    assert parse_repeats("warm=2,max=2", PerfSettings()).max_warm == 2
    assert settings.thresholds == {"steady": 0.03, "compile": 0.20} and settings.backend == "inductor"
    assert settings.scripts == (ScriptRole.PRE, ScriptRole.POST)
    assert settings.rule(PerfAxis.SPEEDUP).higher_is_better and settings.rule(PerfAxis.COMPILE_COLD).threshold == 0.20
    for bad, parse in (
        ("cold=x", lambda t: parse_repeats(t, PerfSettings())),
        ("warm=0", lambda t: parse_repeats(t, PerfSettings())),
        ("hot=1", lambda t: parse_repeats(t, PerfSettings())),
        ("steady=5", lambda t: parse_thresholds(t, PerfSettings())),
        ("steady=150%", lambda t: parse_thresholds(t, PerfSettings())),
        ("all", parse_scripts),
        ("x" * 300, lambda t: parse_repeats(t, PerfSettings())),
        ("warm=5,max=3", lambda t: parse_repeats(t, PerfSettings())),
    ):
        with pytest.raises(CasekitError):
            parse(bad)


def _warm_processes(values: tuple[float, ...], eager: float = 1.5) -> list[ProcessSample]:
    """Warm processes whose steady time is `values` (one block each, beside an undisturbed eager arm) and
    whose compile agrees."""
    return [
        ProcessSample("warm", ScriptStatus.OK, compile_s=1.0, blocks=[Block(eager=eager, compiled=v)]) for v in values
    ]


def test_the_protocol_adds_rounds_only_while_the_rounds_left_could_settle_an_axis() -> None:
    base = _warm_processes(around(1.0, 0.04, 10, 11))
    halves = (base[:5], base[5:])
    straddling = {"a": base, "b": _warm_processes(around(1.048, 0.04, 5, 12))}
    settings = PerfSettings(warm=5, max_warm=8)
    assert not wants_more(straddling, halves, settings, "a")  # 8 rounds would still straddle +5 %
    assert wants_more(straddling, halves, PerfSettings(warm=5, max_warm=2000), "a")
    alike_soon = {"a": base, "b": _warm_processes(around(1.0, 0.1, 5, 18))}
    assert wants_more(alike_soon, halves, PerfSettings(warm=5, max_warm=40), "a")
    assert not wants_more(alike_soon, halves, settings, "a")

    # the floor: one pair of halves of five processes, noisy itself; rounds are run while, narrowed as 1/sqrt(n)
    # to the processes max allows, it could fall under the threshold (5.5 % / sqrt(8/5) < 5 %), not past that
    for second_half, wanted in ((1.055, True), (1.20, False)):
        noisy = _warm_processes(around(1.0, 0.002, 5, 21) + around(second_half, 0.002, 5, 22))
        slower = {"a": noisy, "b": _warm_processes(around(1.3, 0.002, 5, 23))}
        assert wants_more(slower, (noisy[:5], noisy[5:]), settings, "a") is wanted, second_half


# ------------------------------------------------------------------ the steady axis on a machine whose speed comes and goes


def _episodic(compiled: float, eager: float, n: int, rng: random.Random) -> list[ProcessSample]:
    """`n` processes of one build on a host like this one: a process runs in a slow episode (both arms 20-45 %
    slower for its whole life) two times in five, and every block has a little jitter of its own."""
    processes = []
    for _ in range(n):
        episode = 1 + rng.uniform(0.20, 0.45) if rng.random() < 0.4 else 1.0
        blocks = [
            Block(
                eager=eager * episode * (1 + rng.uniform(0, 0.02)),
                compiled=compiled * episode * (1 + rng.uniform(0, 0.02)),
            )
            for _ in range(10)
        ]
        processes.append(ProcessSample("warm", ScriptStatus.OK, compile_s=1.0, blocks=blocks))
    return processes


def _steady(baseline: list[ProcessSample], target: list[ProcessSample]):  # type: ignore[no-untyped-def]
    from casekit.perf.compare import compare

    comparison = compare(target, baseline, (baseline[0::2], baseline[1::2]), PerfSettings(), "base")
    return next(axis for axis in comparison.axes if axis.axis is PerfAxis.STEADY)


def _raw_steady(baseline: list[ProcessSample], target: list[ProcessSample]):  # type: ignore[no-untyped-def]
    """The control: each process's fastest compiled block judged as it is (the rule before the eager reference)."""
    raw = lambda samples: tuple(s.steady() for s in samples)  # noqa: E731
    floor = noise_floor(raw(baseline[0::2]), raw(baseline[1::2]))
    return judge(PerfAxis.STEADY, Sample(raw(baseline)), Sample(raw(target)), STEADY, floor)


def test_a_10_percent_slower_compiled_path_is_told_through_slow_episodes_and_raw_times_could_not() -> None:
    called, control = 0, 0
    for seed in range(20):
        rng = random.Random(seed)
        baseline, target = _episodic(1.0, 1.2, 16, rng), _episodic(1.1, 1.32, 8, rng)  # eager +10 % too
        called += _steady(baseline, target).verdict is PerfVerdict.SLOWER
        control += _raw_steady(baseline, target).verdict is PerfVerdict.SLOWER
    assert called == 20
    assert control <= 14, control  # what the episodes did to the raw times: many left inconclusive


def test_an_eager_change_alone_is_not_a_steady_change_and_a_a_is_not_called() -> None:
    for seed in range(20):
        rng = random.Random(100 + seed)
        baseline = _episodic(1.0, 1.2, 16, rng)
        assert _steady(baseline, _episodic(1.0, 1.32, 8, rng)).verdict is not PerfVerdict.SLOWER  # eager +10 % only
        assert _steady(baseline, _episodic(1.0, 1.2, 8, rng)).verdict not in (PerfVerdict.SLOWER, PerfVerdict.FASTER)


def test_eager_alone_is_the_change_of_the_eager_reference_not_of_the_median_process() -> None:
    """A build whose eager call is 10 % heavier, on a host where two processes in five run whole in a slow
    episode: `eager alone` is each side's fastest eager time against the other's, so where the slow processes
    fall does not move it; the median process's eager time (the control, the figure before) moved with them."""
    from casekit.perf.compare import compare

    ours, medians = [], []
    for seed in range(20):
        rng = random.Random(300 + seed)
        baseline, target = _episodic(1.0, 1.2, 10, rng), _episodic(1.1, 1.32, 5, rng)
        ours.append(compare(target, baseline, (baseline[0::2], baseline[1::2]), PerfSettings(), "base").eager_change)
        medians.append(
            statistics.median(s.eager() for s in target) / statistics.median(s.eager() for s in baseline) - 1
        )
    # a half whose five processes all ran slow still moves the reference (1 % of halves here): not every one
    near = lambda changes: sum(1 for change in changes if change is not None and abs(change - 0.10) < 0.03)  # noqa: E731
    assert near(ours) >= 18, ours
    assert near(medians) <= 14, medians
