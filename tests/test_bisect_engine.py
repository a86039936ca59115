"""The engine: each candidate evaluated once, through an on-disk cache that survives an interrupt.

A `Subject` of lambdas stands in for a release or a commit (the real ones are
tested in test_bisect_releases_fast.py and test_bisect_commits.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casekit.bisect.engine import (
    BisectEndUnknown,
    CacheSettings,
    Evaluated,
    Evaluator,
    Fresh,
    ResultCache,
    Subject,
    search_range,
    unknown_record,
)
from casekit.bisect.search import UNKNOWN, bisect_candidates
from casekit.errors import BisectError


def history_subject(history: dict[str, str | None], calls: list[str], interrupt_after: int | None = None) -> Subject:
    """Candidates whose outcome is history[c] (None: cannot be run); `calls` logs every fresh run."""

    def run_fresh(candidate: str) -> Fresh:
        if interrupt_after is not None and len(calls) == interrupt_after:
            raise KeyboardInterrupt
        calls.append(candidate)
        outcome = history[candidate]
        return Fresh(unknown_record("cannot build") if outcome is None else {"v": 1, "exit": outcome})

    def interpret(candidate: str, record: dict[str, object]) -> Evaluated | None:
        if "unknown" in record:
            return Evaluated(UNKNOWN, str(record["unknown"]), {})
        return Evaluated(str(record["exit"]), "", {})

    return Subject("subject-a", lambda c: f"key:{c}", run_fresh, interpret)


CANDIDATES = [f"c{i:03d}" for i in range(200)]
HISTORY: dict[str, str | None] = {c: ("good" if i < 137 else "bad") for i, c in enumerate(CANDIDATES)}


def test_second_run_is_served_entirely_from_the_cache(tmp_path: Path) -> None:
    cache = CacheSettings(tmp_path / "c.json")
    calls: list[str] = []
    first = search_range(CANDIDATES, Evaluator(history_subject(HISTORY, calls), cache, lambda m: None))
    assert first is not None and first.first_bad == "c137" and calls
    again: list[str] = []
    evaluate = Evaluator(history_subject(HISTORY, again), cache, lambda m: None)
    second = search_range(CANDIDATES, evaluate)
    assert again == [] and second == first
    assert all(step.cached and not step.seconds for step in evaluate.steps)


def test_an_interrupted_run_resumes_without_repeating_a_step(tmp_path: Path) -> None:
    reference = bisect_candidates(CANDIDATES, lambda c: HISTORY[c])
    cache = CacheSettings(tmp_path / "c.json")
    calls: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        search_range(CANDIDATES, Evaluator(history_subject(HISTORY, calls, interrupt_after=4), cache, lambda m: None))
    assert len(calls) == 4 and len(ResultCache(tmp_path / "c.json")) == 4
    resumed_calls: list[str] = []
    resumed = search_range(CANDIDATES, Evaluator(history_subject(HISTORY, resumed_calls), cache, lambda m: None))
    assert resumed is not None and resumed.first_bad == reference.first_bad
    assert not set(resumed_calls) & set(calls), "a step already in the cache was run again"
    assert len(resumed_calls) == len(reference.steps) - 4


def test_unknowns_are_remembered_unless_retried(tmp_path: Path) -> None:
    history = dict(HISTORY, c100=None)
    calls: list[str] = []
    cache = CacheSettings(tmp_path / "c.json")
    search_range(CANDIDATES, Evaluator(history_subject(history, calls), cache, lambda m: None))
    assert "c100" in calls
    again: list[str] = []
    search_range(CANDIDATES, Evaluator(history_subject(history, again), cache, lambda m: None))
    assert again == []
    retried: list[str] = []
    retry = CacheSettings(tmp_path / "c.json", retry_unknown=True)
    search_range(CANDIDATES, Evaluator(history_subject(history, retried), retry, lambda m: None))
    assert retried == ["c100"]


def test_ends_that_agree_give_no_result_and_an_unknown_end_is_an_error() -> None:
    calls: list[str] = []
    same = {"a": "good", "b": "bad", "c": "good"}
    assert (
        search_range(["a", "b", "c"], Evaluator(history_subject(same, calls), CacheSettings(), lambda m: None)) is None
    )
    assert calls == ["a", "c"], "only the ends are run"
    broken = {"a": "good", "b": "good", "c": None}
    with pytest.raises(BisectEndUnknown, match="the bad end c could not be evaluated: cannot build"):
        search_range(["a", "b", "c"], Evaluator(history_subject(broken, []), CacheSettings(), lambda m: None))


def test_memory_only_cache_writes_nothing(tmp_path: Path) -> None:
    search_range(CANDIDATES, Evaluator(history_subject(HISTORY, []), CacheSettings(None), lambda m: None))
    assert list(tmp_path.iterdir()) == []


# --- the cache file -------------------------------------------------------------


def test_cache_round_trips_values_including_unknown(tmp_path: Path) -> None:
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


def test_corrupt_cache_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("{not json")
    with pytest.raises(BisectError, match="unreadable"):
        ResultCache(path)
    path.write_text(json.dumps({"results": {}}))
    with pytest.raises(BisectError, match="not a casekit.bisect-cache/1 file"):
        ResultCache(path)


def test_uncacheable_value_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BisectError, match="cannot be cached"):
        ResultCache(tmp_path / "c.json").put("case", "2.5.1", ("a", "tuple"))
