"""The pure search, driven by lambdas over seeded random histories and checked against an oracle."""

from __future__ import annotations

import json
import random
from collections.abc import Hashable

import pytest

from casekit.bisect.search import (
    UNKNOWN,
    BisectResult,
    ResultCache,
    becomes,
    bisect_candidates,
    cached,
)
from casekit.errors import BisectError, CasekitError


def make_history(rng: random.Random, n: int, unknown_rate: float, monotone: bool) -> tuple[list[Hashable], int]:
    """Outcomes for n candidates; returns (history, true first-bad index for a monotone history)."""
    boundary = rng.randint(1, n - 1)
    history: list[Hashable] = []
    for i in range(n):
        if monotone:
            outcome: Hashable = "good" if i < boundary else rng.choice(["bad", "moved", "gone"])
        else:
            outcome = rng.choice(["good", "bad", "moved"])
        history.append(outcome)
    history[0] = "good"
    history[-1] = "bad"
    # Unknown stretches (unbuildable ranges), never at the ends.
    for _ in range(rng.randint(0, 3)):
        if rng.random() < unknown_rate and n > 2:
            start = rng.randint(1, n - 2)
            for i in range(start, min(n - 1, start + rng.randint(1, 6))):
                history[i] = UNKNOWN
    return history, boundary


def check_consistent(result: BisectResult[int], history: list[Hashable]) -> None:
    """What any correct answer must satisfy, whatever the history."""
    lo, hi = result.last_good, result.first_bad
    assert 0 <= lo < hi < len(history)
    assert history[lo] == "good"
    assert history[hi] not in ("good", UNKNOWN)
    assert result.ambiguous == list(range(lo + 1, hi))
    assert all(history[i] is UNKNOWN for i in result.ambiguous)
    assert result.bad_outcome == history[hi]
    evaluated = [candidate for candidate, _ in result.steps]
    assert len(evaluated) == len(set(evaluated)), "a candidate was evaluated twice"
    assert all(history[c] == outcome for c, outcome in result.steps)


@pytest.mark.parametrize("seed", range(300))
def test_random_histories_agree_with_the_oracle(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 300)
    monotone = seed % 3 != 0
    history, boundary = make_history(rng, n, unknown_rate=0.6, monotone=monotone)
    result = bisect_candidates(range(n), lambda i: history[i])
    check_consistent(result, history)
    if monotone:
        # The true change point lies in the reported window.
        assert result.last_good < boundary <= result.first_bad
        if UNKNOWN not in history:
            assert result.first_bad == boundary
            assert result.is_exact


@pytest.mark.parametrize("seed", range(100))
def test_without_unknowns_the_answer_is_the_brute_force_first_change(seed: int) -> None:
    rng = random.Random(1000 + seed)
    n = rng.randint(2, 500)
    history, _ = make_history(rng, n, unknown_rate=0.0, monotone=True)
    brute_force = next(i for i, outcome in enumerate(history) if outcome != "good")
    result = bisect_candidates(range(n), lambda i: history[i])
    assert (result.last_good, result.first_bad, result.ambiguous) == (brute_force - 1, brute_force, [])
    # O(log n): both ends plus at most bit_length(interior) probes.
    assert len(result.steps) <= 2 + (n - 2).bit_length()


@pytest.mark.parametrize("seed", range(100))
def test_unknown_stretch_over_the_change_is_reported_exactly(seed: int) -> None:
    rng = random.Random(5000 + seed)
    n = rng.randint(4, 400)
    boundary = rng.randint(2, n - 2)
    start = rng.randint(1, boundary)  # the stretch covers the boundary (or the last good before it)
    end = rng.randint(boundary, n - 1)  # exclusive
    history: list[Hashable] = ["good" if i < boundary else "bad" for i in range(n)]
    history[start:end] = [UNKNOWN] * (end - start)
    result = bisect_candidates(range(n), lambda i: history[i])
    check_consistent(result, history)
    assert (result.last_good, result.first_bad, result.ambiguous) == (start - 1, end, list(range(start, end)))


def test_evaluations_grow_logarithmically() -> None:
    n = 100_000
    calls: list[int] = []
    result = bisect_candidates(range(n), lambda i: calls.append(i) or ("good" if i < 77_777 else "bad"))
    assert result.first_bad == 77_777
    assert len(calls) <= 2 + 17


def test_unknown_culprit_region_is_reported_as_ambiguous() -> None:
    history = ["good", "good", UNKNOWN, UNKNOWN, "bad", "bad"]
    result = bisect_candidates("abcdef", lambda c: history["abcdef".index(c)])
    assert (result.last_good, result.first_bad, result.ambiguous) == ("b", "e", ["c", "d"])
    assert not result.is_exact


def test_unknowns_off_the_culprit_are_stepped_around() -> None:
    history = ["good", UNKNOWN, UNKNOWN, "good", "bad", UNKNOWN, "bad"]
    result = bisect_candidates(range(7), lambda i: history[i])
    assert (result.last_good, result.first_bad, result.ambiguous) == (3, 4, [])


def test_ends_that_agree_are_an_error() -> None:
    with pytest.raises(BisectError, match="both ends give the same outcome"):
        bisect_candidates(["2.5.1", "2.6.0", "2.13.0"], lambda v: "graph_break")


@pytest.mark.parametrize("history", [[UNKNOWN, "good", "bad"], ["good", "bad", UNKNOWN]])
def test_an_unknown_end_is_an_error(history: list[Hashable]) -> None:
    with pytest.raises(BisectError, match="could not be evaluated"):
        bisect_candidates(range(3), lambda i: history[i])


def test_too_few_candidates_is_an_error() -> None:
    with pytest.raises(CasekitError, match="at least two"):
        bisect_candidates(["2.5.1"], lambda v: "good")


def test_probe_order_is_deterministic() -> None:
    history = ["good"] * 40 + [UNKNOWN] * 5 + ["bad"] * 55
    first = bisect_candidates(range(100), lambda i: history[i])
    second = bisect_candidates(range(100), lambda i: history[i])
    assert first.steps == second.steps
    assert [c for c, _ in first.steps[:2]] == [0, 99]


def test_becomes_finds_a_specific_outcome() -> None:
    history = ["fine", "fine", "moved", "moved", "gone", "gone"]
    result = bisect_candidates(range(6), lambda i: history[i], is_bad=becomes("gone"))
    assert (result.last_good, result.first_bad) == (3, 4)


def test_progress_reports_each_step_and_its_estimate_bounds_the_rest() -> None:
    history = ["good"] * 300 + ["bad"] * 700
    reports: list[tuple[int, int, int]] = []
    evaluated: list[int] = []

    def evaluate(i: int) -> str:
        evaluated.append(i)
        return history[i]

    result = bisect_candidates(range(1000), evaluate, progress=lambda done, left, c: reports.append((done, left, c)))
    total = len(result.steps)
    assert [done for done, _, _ in reports] == list(range(total))
    assert [c for _, _, c in reports] == evaluated
    assert all(left >= total - done >= 1 for done, left, _ in reports)


# --- the result cache -------------------------------------------------------------


def test_cache_round_trips_outcomes_including_unknown(tmp_path) -> None:
    cache = ResultCache(tmp_path / "cache.json")
    cache.put("case1", "2.5.1", "graph_break")
    cache.put("case1", "2.6.0", UNKNOWN)
    cache.put("case2", "2.5.1", 3)
    reloaded = ResultCache(tmp_path / "cache.json")
    assert reloaded.get("case1", "2.5.1") == "graph_break"
    assert reloaded.get("case1", "2.6.0") is UNKNOWN
    assert reloaded.get("case2", "2.5.1") == 3
    assert reloaded.get("case2", "2.6.0") is None
    assert len(reloaded) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["cache.json"], "temporary files left behind"


def test_second_run_is_served_entirely_from_cache(tmp_path) -> None:
    history = ["good"] * 20 + [UNKNOWN] * 3 + ["bad"] * 40
    calls: list[int] = []

    def evaluate(i: int) -> Hashable:
        calls.append(i)
        return history[i]

    first = bisect_candidates(range(63), cached(evaluate, ResultCache(tmp_path / "c.json"), "case"))
    assert calls
    calls.clear()
    second = bisect_candidates(range(63), cached(evaluate, ResultCache(tmp_path / "c.json"), "case"))
    assert calls == []
    assert second == first


def test_cache_is_per_case(tmp_path) -> None:
    cache = ResultCache(tmp_path / "c.json")
    calls: list[str] = []
    evaluate = cached(lambda v: calls.append(v) or "good", cache, "case-a")
    evaluate("2.5.1")
    cached(lambda v: calls.append(v) or "good", cache, "case-b")("2.5.1")
    assert calls == ["2.5.1", "2.5.1"]


def test_interrupted_run_resumes_from_cache(tmp_path) -> None:
    history = ["good"] * 137 + ["bad"] * 400
    reference = bisect_candidates(range(537), lambda i: history[i])

    calls: list[int] = []

    def interrupted(i: int) -> Hashable:
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(i)
        return history[i]

    with pytest.raises(KeyboardInterrupt):
        bisect_candidates(range(537), cached(interrupted, ResultCache(tmp_path / "c.json"), "case"))
    assert len(ResultCache(tmp_path / "c.json")) == 4

    resumed_calls: list[int] = []
    resumed = bisect_candidates(
        range(537), cached(lambda i: resumed_calls.append(i) or history[i], ResultCache(tmp_path / "c.json"), "case")
    )
    assert resumed == reference
    assert not set(resumed_calls) & set(calls), "a step already in the cache was run again"
    assert len(resumed_calls) == len(reference.steps) - 4


def test_unknowns_can_be_retried(tmp_path) -> None:
    cache = ResultCache(tmp_path / "c.json")
    calls: list[str] = []
    evaluate = cached(lambda v: calls.append(v) or UNKNOWN, cache, "case", remember_unknown=False)
    evaluate("2.6.0")
    evaluate("2.6.0")
    assert calls == ["2.6.0", "2.6.0"]


def test_corrupt_cache_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text("{not json")
    with pytest.raises(BisectError, match="unreadable"):
        ResultCache(path)
    path.write_text(json.dumps({"results": {}}))
    with pytest.raises(BisectError, match="not a casekit.bisect-cache/1 file"):
        ResultCache(path)


def test_uncacheable_outcome_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(BisectError, match="cannot be cached"):
        ResultCache(tmp_path / "c.json").put("case", "2.5.1", ("a", "tuple"))
