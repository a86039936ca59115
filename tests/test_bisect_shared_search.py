"""The shared search over many subjects: each subject's answer equals its own single bisection's.

Driven by lambdas over generated histories (arbitrary, non-monotone, with
unknowns and unknown or equal ends), against `search_range`'s contract
reproduced with `bisect_candidates`.
"""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from casekit.bisect.search import (
    UNKNOWN,
    BisectResult,
    CaseSearch,
    EndsUnknown,
    bisect_candidates,
    bisect_shared,
    next_candidate,
)
from casekit.errors import BisectError

OUTCOMES: list[Hashable] = ["good", "bad", "moved", UNKNOWN]


def single(history: list[Hashable]) -> BisectResult[int] | EndsUnknown:
    """What one subject alone gets: the ends checked first (as engine.search_range does), then the search."""
    if history[0] is UNKNOWN:
        return EndsUnknown.GOOD_UNKNOWN
    if history[-1] is UNKNOWN:
        return EndsUnknown.BAD_UNKNOWN
    if history[0] == history[-1]:
        return EndsUnknown.SAME
    return bisect_candidates(list(range(len(history))), lambda i: history[i])


def same_answer(shared: BisectResult[int] | EndsUnknown, alone: BisectResult[int] | EndsUnknown) -> bool:
    if isinstance(alone, EndsUnknown) or isinstance(shared, EndsUnknown):
        return shared == alone
    return (shared.last_good, shared.first_bad, shared.ambiguous, shared.steps) == (
        alone.last_good,
        alone.first_bad,
        alone.ambiguous,
        alone.steps,
    )


@st.composite
def subject_histories(draw: st.DrawFn) -> list[list[Hashable]]:
    n = draw(st.integers(2, 40))
    count = draw(st.integers(1, 6))
    shared_boundary = draw(st.integers(1, n - 1))
    histories = []
    for _ in range(count):
        if draw(st.booleans()):  # a monotone history, often at the same boundary as the others
            boundary = shared_boundary if draw(st.booleans()) else draw(st.integers(1, n - 1))
            history: list[Hashable] = ["good"] * boundary + ["bad"] * (n - boundary)
        else:
            history = list(draw(st.lists(st.sampled_from(OUTCOMES), min_size=n, max_size=n)))
        histories.append(history)
    return histories


@settings(max_examples=400, deadline=None)
@given(subject_histories())
def test_each_subject_gets_its_single_bisection_answer(histories: list[list[Hashable]]) -> None:
    n = len(histories[0])
    calls: list[tuple[int, list[int]]] = []

    def evaluate_many(candidate: int, keys: list[int]) -> dict[int, Hashable]:
        calls.append((candidate, list(keys)))
        return {key: histories[key][candidate] for key in keys}

    shared = bisect_shared(list(range(n)), list(range(len(histories))), evaluate_many)
    for key, history in enumerate(histories):
        assert same_answer(shared.result(key, list(range(n))), single(history)), (key, history)
    evaluated = [candidate for candidate, _ in calls]
    assert len(evaluated) == len(set(evaluated)), "a candidate was evaluated in two rounds"
    for _candidate, keys in calls:
        assert len(keys) == len(set(keys))
    # never more rounds than the subjects' single bisections put together, nor fewer than the longest one
    alone = [len(CaseSearchRun(h).order) for h in histories]
    assert max(alone) <= len(calls) <= sum(alone)


def CaseSearchRun(history: list[Hashable]) -> CaseSearch:  # noqa: N802 - reads as a constructor
    search = CaseSearch(len(history))
    while (index := search.wanted()) is not None:
        search.tell(index, history[index])
    return search


def test_identical_subjects_share_every_round() -> None:
    history: list[Hashable] = ["good"] * 6 + ["bad"] * 4
    rounds: list[int] = []

    def evaluate_many(candidate: int, keys: list[str]) -> dict[str, Hashable]:
        rounds.append(candidate)
        return {key: history[candidate] for key in keys}

    shared = bisect_shared(list(range(10)), ["a", "b", "c", "d"], evaluate_many)
    assert rounds == [0, 9, 5, 7, 6]  # one subject's probes: 4 subjects cost one bisection
    assert all(shared.result(k, list(range(10))).first_bad == 6 for k in "abcd")  # type: ignore[union-attr]


def test_a_subject_is_served_from_a_round_it_was_batched_into() -> None:
    histories = {"early": ["good"] * 2 + ["bad"] * 14, "late": ["good"] * 13 + ["bad"] * 3}
    rounds: list[tuple[int, list[str]]] = []

    def evaluate_many(candidate: int, keys: list[str]) -> dict[str, Hashable]:
        rounds.append((candidate, list(keys)))
        return {key: histories[key][candidate] for key in keys}

    shared = bisect_shared(list(range(16)), list(histories), evaluate_many)
    assert shared.result("early", list(range(16))).first_bad == 2  # type: ignore[union-attr]
    assert shared.result("late", list(range(16))).first_bad == 13  # type: ignore[union-attr]
    assert rounds[2] == (8, ["early", "late"])  # both wanted 8 once the ends were in
    assert len({c for c, _ in rounds}) == len(rounds)


def test_next_candidate_prefers_what_most_subjects_want() -> None:
    a, b, c = CaseSearch(10), CaseSearch(10), CaseSearch(10)
    for search in (a, b):
        search.tell(0, "good")
    assert next_candidate({"a": a, "b": b, "c": c}) == 9  # two want the bad end, one the good end
    assert next_candidate({"c": c}) == 0
    assert next_candidate({}) is None


def test_prefetch_hears_both_halves_of_the_next_split() -> None:
    heard: list[list[int]] = []
    history: list[Hashable] = ["good"] * 5 + ["bad"] * 12
    bisect_shared(
        list(range(17)),
        ["x"],
        lambda candidate, keys: {key: history[candidate] for key in keys},
        prefetch=heard.append,
    )
    assert heard[0] == [16]  # after the good end: the bad end, whatever the good end gives
    assert heard[2] == [12, 4]  # at the median 8: the next median of each half


def test_outcome_for_the_wrong_index_is_refused() -> None:
    search = CaseSearch(4)
    with pytest.raises(BisectError):
        search.tell(2, "good")
