"""The pure search, driven by lambdas over generated histories and checked against a brute-force oracle."""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from casekit.bisect.search import UNKNOWN, BisectResult, bisect_candidates
from casekit.errors import BisectError, CasekitError

BAD_OUTCOMES = ["bad", "moved", "gone"]


@st.composite
def histories(
    draw: st.DrawFn, *, monotone: bool, unknowns: bool = True, max_size: int = 300
) -> tuple[list[Hashable], int]:
    """Outcomes for n candidates, good first and bad last; returns (history, true first-bad index if monotone).

    Unknown stretches (unbuildable ranges) are laid over the inside, never over the ends.
    """
    n = draw(st.integers(2, max_size))
    boundary = draw(st.integers(1, n - 1))
    if monotone:
        tail = draw(st.lists(st.sampled_from(BAD_OUTCOMES), min_size=n - boundary, max_size=n - boundary))
        history: list[Hashable] = ["good"] * boundary + list(tail)
    else:
        history = list(draw(st.lists(st.sampled_from(["good", *BAD_OUTCOMES]), min_size=n, max_size=n)))
    history[0], history[-1] = "good", "bad"
    if unknowns and n > 2:
        for start, length in draw(st.lists(st.tuples(st.integers(1, n - 2), st.integers(1, 8)), max_size=4)):
            for i in range(start, min(n - 1, start + length)):
                history[i] = UNKNOWN
    return history, boundary


@st.composite
def stretch_over_change(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(n, boundary, start, end): an unknown stretch [start, end) over the change or the last good before it."""
    n = draw(st.integers(4, 400))
    boundary = draw(st.integers(2, n - 2))
    return n, boundary, draw(st.integers(1, boundary)), draw(st.integers(boundary, n - 1))


def oracle_window(history: list[Hashable], boundary: int) -> tuple[int, int]:
    """Brute force over a monotone history: the nearest testable candidates on either side of the change."""
    last_good = max(i for i in range(boundary) if history[i] is not UNKNOWN)
    first_bad = min(i for i in range(boundary, len(history)) if history[i] is not UNKNOWN)
    return last_good, first_bad


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


@settings(max_examples=300, deadline=None)
@given(histories(monotone=True))
def test_monotone_histories_give_the_oracles_window(case: tuple[list[Hashable], int]) -> None:
    history, boundary = case
    result = bisect_candidates(range(len(history)), lambda i: history[i])
    check_consistent(result, history)
    assert (result.last_good, result.first_bad) == oracle_window(history, boundary)
    assert result.last_good < boundary <= result.first_bad
    if UNKNOWN not in history:
        assert result.first_bad == boundary and result.is_exact


@settings(max_examples=150, deadline=None)
@given(histories(monotone=False))
def test_any_history_gives_a_consistent_answer(case: tuple[list[Hashable], int]) -> None:
    history, _ = case
    result = bisect_candidates(range(len(history)), lambda i: history[i])
    check_consistent(result, history)


@settings(max_examples=150, deadline=None)
@given(histories(monotone=True, unknowns=False, max_size=2000))
def test_without_unknowns_the_search_takes_logarithmic_steps(case: tuple[list[Hashable], int]) -> None:
    history, boundary = case
    n = len(history)
    result = bisect_candidates(range(n), lambda i: history[i])
    assert (result.last_good, result.first_bad, result.ambiguous) == (boundary - 1, boundary, [])
    # O(log n): both ends plus at most bit_length(interior) probes.
    assert len(result.steps) <= 2 + (n - 2).bit_length()


@settings(max_examples=100, deadline=None)
@given(stretch_over_change())
def test_an_unknown_stretch_over_the_change_is_reported_exactly(shape: tuple[int, int, int, int]) -> None:
    n, boundary, start, end = shape
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
