"""The three-state timing verdicts, pure: samples in, verdict out (casekit.perf.judge, casekit.perf.settings)."""

from __future__ import annotations

import random

import pytest

from casekit.errors import CasekitError
from casekit.model import PerfAxis, PerfVerdict, ScriptRole, ScriptStatus
from casekit.perf.compare import compare, floor_stays_past, wants_more
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
    # past the threshold, the interval still across zero, but the rank test saw it: its p carried to the
    # processes max allows passes alpha (0.0193 at 5 a side: 0.0031 at 8, 0.0009 at 10; a comparison's axis
    # is tested at 0.0025)
    axis_rule = AxisRule(threshold=0.05, alpha=0.0025)
    wide = (1.0, 1.02, 0.97, 1.01, 0.99, 1.0, 0.98, 1.03, 1.01, 0.99)
    past = (1.12, 1.10, 1.14, 0.93, 1.11)  # +11 %, one process in a slow round
    assert p_value(wide, past) == pytest.approx(0.0193, abs=0.0001)
    assert not could_settle(Sample(wide), Sample(past), axis_rule, growth=10 / 5)
    assert could_settle(Sample(wide), Sample(past), axis_rule, growth=10 / 5, p=0.0193)
    assert not could_settle(Sample(wide), Sample(past), axis_rule, growth=8 / 5, p=0.0193)
    assert not could_settle(Sample(base), Sample(near_the_threshold), axis_rule, growth=10 / 5, p=0.0193)


def test_p_value_is_one_when_the_values_cannot_tell() -> None:
    assert p_value((1.0,), (2.0,)) == 1.0 and p_value((1.0, 1.0), (1.0, 1.0)) == 1.0
    assert p_value(around(1, 0.01, 8, 1), around(2, 0.01, 8, 2)) < 0.01


def test_the_flags_parse_into_settings_and_bad_ones_are_one_line() -> None:
    settings = settings_from_flags("cold=3,warm=6", "steady=3%,compile=20%", "both", "inductor")
    assert (settings.cold, settings.warm, settings.max_warm) == (3, 6, 10)
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

    # the floor: one pair of halves of five processes, itself one draw of the noise. Past the threshold, rounds
    # are run while its own interval, narrowed with the rounds max allows, reaches under the threshold: a
    # floor of 5.7 % from halves that spread ±6 % may be one slow process; 5.5 % or 20 % from halves that
    # agree within ±0.2 % is a difference between them that more of the same rounds would keep
    for second_half, spread, wanted in ((1.10, 0.06, True), (1.055, 0.002, False), (1.20, 0.002, False)):
        noisy = _warm_processes(around(1.0, spread, 5, 21) + around(second_half, spread, 5, 22))
        slower = {"a": noisy, "b": _warm_processes(around(1.3, 0.002, 5, 23))}
        halves = (noisy[:5], noisy[5:])
        speedup = compare(slower["b"], noisy, halves, settings, "a").axes[3]
        assert speedup.verdict is PerfVerdict.INCONCLUSIVE and speedup.floor is not None and speedup.floor > 0.05
        assert wants_more(slower, halves, settings, "a") is wanted, second_half
        assert floor_stays_past(PerfAxis.SPEEDUP, halves, 0.05, growth=8 / 5) is not wanted


# ------------------------------------------------------------------ the steady axis on a machine whose speed comes and goes


def _rounds(
    rounds: int, compiled: tuple[float, float], eager: tuple[float, float], rng: random.Random
) -> tuple[list[ProcessSample], list[ProcessSample], tuple[list[ProcessSample], list[ProcessSample]]]:
    """`rounds` warm rounds timed in turns on a host like this one: (the baseline's processes, the target's,
    the baseline's halves); `compiled` and `eager` are (baseline, target) times per call. The host's speed
    comes and goes in windows that fall on every process of a round alike (a round starts slow two times in
    five and stays so for long stretches: 20-45 % slower, often for a process's whole life); each process
    has its own small offset per arm, and each block a little jitter."""
    baseline: list[ProcessSample] = []
    target: list[ProcessSample] = []
    halves: tuple[list[ProcessSample], list[ProcessSample]] = ([], [])
    for number in range(rounds):
        slow, factor, windows = rng.random() < 0.4, 1 + rng.uniform(0.20, 0.45), []
        for _ in range(10):
            windows.append(factor if slow else 1.0)
            slow = slow if rng.random() > 0.1 else not slow
        for side, places in ((0, (0, 1)), (1, (None,))):
            for half in places:
                own_eager, own_compiled = rng.gauss(1, 0.01), rng.gauss(1, 0.01)
                blocks = [
                    Block(
                        eager=eager[side] * window * own_eager * (1 + rng.uniform(0, 0.02)),
                        compiled=compiled[side] * window * own_compiled * (1 + rng.uniform(0, 0.02)),
                    )
                    for window in windows
                ]
                sample = ProcessSample("warm", ScriptStatus.OK, compile_s=1.0, blocks=blocks, round=number)
                (target if side else baseline).append(sample)
                if half is not None:
                    halves[half].append(sample)
    return baseline, target, halves


def _compare(case):  # type: ignore[no-untyped-def]
    from casekit.perf.compare import compare

    baseline, target, halves = case
    return compare(target, baseline, halves, PerfSettings(), "base")


def _steady(case):  # type: ignore[no-untyped-def]
    return next(axis for axis in _compare(case).axes if axis.axis is PerfAxis.STEADY)


def test_a_10_percent_slower_compiled_path_is_told_through_slow_windows() -> None:
    called = 0
    for seed in range(20):
        case = _rounds(5, (1.0, 1.1), (1.2, 1.32), random.Random(seed))  # eager 10 % heavier too
        called += _steady(case).verdict is PerfVerdict.SLOWER
    assert called == 20


def test_identical_builds_and_an_eager_change_alone_are_never_called() -> None:
    """Two identical builds, and one whose eager call alone is 10 % heavier (its compiled/eager ratio is 9 %
    lower: only eager's change measured beside the baseline's blocks sets it back), window after window."""
    for seed in range(40):
        alike = _rounds(5, (1.0, 1.0), (1.2, 1.2), random.Random(200 + seed))
        assert _steady(alike).verdict not in (PerfVerdict.SLOWER, PerfVerdict.FASTER), seed
        eager_only = _rounds(5, (1.0, 1.0), (1.2, 1.32), random.Random(400 + seed))
        assert _steady(eager_only).verdict not in (PerfVerdict.SLOWER, PerfVerdict.FASTER), seed


def test_eager_alone_is_measured_block_beside_block() -> None:
    """`eager alone` is the target's eager time against the baseline's blocks next to it in turns, so the
    windows fall on both alike: within 2 % of the 10 % the target's eager call was made heavier, every time."""
    for seed in range(20):
        change = _compare(_rounds(5, (1.0, 1.1), (1.2, 1.32), random.Random(300 + seed))).eager_change
        assert change is not None and abs(change - 0.10) < 0.02, (seed, change)


def test_the_steady_axis_takes_only_processes_that_timed_their_blocks_in_turns() -> None:
    baseline, target, halves = _rounds(5, (1.0, 1.1), (1.2, 1.32), random.Random(7))
    for sample in target:
        sample.round = None  # timed alone: nothing of the baseline's beside its blocks
    steady = _steady((baseline, target, halves))
    assert steady.verdict is PerfVerdict.INCONCLUSIVE
    assert "in turns" in steady.why


def test_a_steady_floor_past_the_threshold_asks_for_rounds_unless_the_rounds_agree_on_it() -> None:
    """The steady floor's interval is taken over rounds (a round's halves are paired in turns). A second half
    whose eager arm ran +3, -13, +6, -10, -10 % against the first, round by round (a +10 % comparison of the
    bench, whose floor stopped it at 7.9 %), gives a floor past 5 % that another draw of rounds could put
    under it: the rounds left are run. A second half 8 % apart in every round is a difference the rounds
    agree on, and more of them would keep it."""
    for seed in range(10):
        for offsets, stays in (((1.03, 0.87, 1.06, 0.90, 0.90), False), ((0.92,) * 5, True)):
            baseline, target, halves = _rounds(5, (1.0, 1.1), (1.2, 1.32), random.Random(500 + seed))
            for sample, offset in zip(halves[1], offsets, strict=True):
                sample.blocks = [Block(eager=b.eager * offset, compiled=b.compiled * offset) for b in sample.blocks]
            floor = _steady((baseline, target, halves)).floor
            assert floor is not None and floor > 0.05, (seed, offsets)
            assert floor_stays_past(PerfAxis.STEADY, halves, 0.05, growth=8 / 5) is stays, (seed, offsets)
