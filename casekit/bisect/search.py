"""The pure bisection search over an ordered candidate list.

Modelled on cargo-bisect-rustc's `least_satisfying` (Yes/No/Unknown) and
`git bisect run` (exit 125 = skip): the caller supplies an ordered candidate
list and an `evaluate` callable; this module never builds, runs or prints.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from casekit.errors import BisectError


class Unknown(enum.Enum):
    """Outcome of a candidate that could not be built or run; the search steps around it."""

    UNKNOWN = "unknown"

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = Unknown.UNKNOWN
"""The single 'could not tell' outcome (cargo-bisect-rustc's Satisfies::Unknown, git's exit 125)."""

Outcome = Hashable
"""Any hashable value: a verdict string, an enum member, or UNKNOWN."""

C = TypeVar("C")

Evaluate = Callable[[C], Outcome]
"""Build/run one candidate and say what happened."""

IsBad = Callable[[Outcome, Outcome], bool]
"""`is_bad(outcome, good_outcome)`: does this (known) outcome count as 'bad'?"""

Progress = Callable[[int, int, C], None]
"""`progress(steps_done, steps_left_estimate, candidate)`, called before each evaluation."""


def differs_from_good(outcome: Outcome, good_outcome: Outcome) -> bool:
    """The default predicate: bad means anything other than what the good end gave."""
    return outcome != good_outcome


@dataclass(frozen=True)
class BisectResult(Generic[C]):
    """Where the outcome changes.

    `first_bad` is the culprit when `ambiguous` is empty; otherwise the change
    happened somewhere in `ambiguous + [first_bad]`, and every candidate in
    `ambiguous` could not be evaluated.
    """

    last_good: C
    first_bad: C
    ambiguous: list[C]
    steps: list[tuple[C, Outcome]]
    good_outcome: Outcome
    bad_outcome: Outcome

    @property
    def is_exact(self) -> bool:
        """True when no unknown candidate hides the exact culprit."""
        return not self.ambiguous


def bisect_candidates(
    candidates: Sequence[C],
    evaluate: Evaluate[C],
    *,
    is_bad: IsBad = differs_from_good,
    progress: Progress[C] | None = None,
) -> BisectResult[C]:
    """Find the first candidate (oldest first) whose outcome counts as bad against the first one's.

    Both ends are evaluated first: an unknown end, or a bad end that does not
    count as bad, raises BisectError. Each candidate is evaluated at most once;
    the probe order depends only on the outcomes seen, so a rerun over the
    same list probes the same candidates (and reuses their cached environments).
    """
    items = list(candidates)
    if len(items) < 2:
        raise BisectError(f"bisection needs at least two candidates (a good and a bad end), got {len(items)}")
    steps: list[tuple[C, Outcome]] = []

    def probe(index: int, steps_left: int) -> Outcome:
        candidate = items[index]
        if progress is not None:
            progress(len(steps), steps_left, candidate)
        outcome = evaluate(candidate)
        steps.append((candidate, outcome))
        return outcome

    # A binary search over s open candidates needs at most s.bit_length() probes.
    interior = len(items) - 2
    good_outcome = probe(0, 2 + interior.bit_length())
    if good_outcome is UNKNOWN:
        raise BisectError(
            f"the good end {items[0]!r} could not be evaluated (unknown); pick a good end that builds and runs"
        )
    if is_bad(good_outcome, good_outcome):
        raise BisectError(f"the good end {items[0]!r} already counts as bad (outcome {good_outcome!r})")
    bad_outcome = probe(len(items) - 1, 1 + interior.bit_length())
    if bad_outcome is UNKNOWN:
        raise BisectError(
            f"the bad end {items[-1]!r} could not be evaluated (unknown); pick a bad end that builds and runs"
        )
    if bad_outcome == good_outcome:
        raise BisectError(
            f"both ends give the same outcome ({good_outcome!r} at {items[0]!r} and at {items[-1]!r}); nothing to bisect"
        )
    if not is_bad(bad_outcome, good_outcome):
        raise BisectError(
            f"the bad end {items[-1]!r} gives {bad_outcome!r}, which does not count as bad against {good_outcome!r}"
        )

    last_good, first_bad = 0, len(items) - 1
    unknown: set[int] = set()
    first_bad_outcome = bad_outcome
    while True:
        open_indices = [i for i in range(last_good + 1, first_bad) if i not in unknown]
        if not open_indices:
            break
        # Median of the still-testable candidates: after an unknown it moves to a
        # neighbour, stepping around the hole the way `git bisect skip` does.
        index = open_indices[len(open_indices) // 2]
        outcome = probe(index, len(open_indices).bit_length())
        if outcome is UNKNOWN:
            unknown.add(index)
        elif is_bad(outcome, good_outcome):
            first_bad, first_bad_outcome = index, outcome
        else:
            last_good = index

    return BisectResult(
        last_good=items[last_good],
        first_bad=items[first_bad],
        ambiguous=items[last_good + 1 : first_bad],
        steps=steps,
        good_outcome=good_outcome,
        bad_outcome=first_bad_outcome,
    )


# ------------------------------------------------------------------ many subjects over one candidate list


class EndsUnknown(enum.Enum):
    """Why a subject's search stopped before the inside was searched."""

    GOOD_UNKNOWN = "good_unknown"
    BAD_UNKNOWN = "bad_unknown"
    SAME = "same"  # both ends agree: nothing to bisect


class CaseSearch:
    """One subject's bisection as a state machine: `wanted()` names the next index, `tell()` feeds its outcome.

    The probe sequence is exactly `search_range` + `bisect_candidates`' (good
    end, bad end, then the median of the still-testable inside), so a shared
    search that only chooses *when* to serve each subject gives every subject
    the answer it would get alone, whatever its outcome history.
    """

    def __init__(self, size: int) -> None:
        if size < 2:
            raise BisectError(f"bisection needs at least two candidates (a good and a bad end), got {size}")
        self.size = size
        self.outcomes: dict[int, Outcome] = {}
        self.order: list[int] = []  # indices in the order this subject used them
        self.stopped: EndsUnknown | None = None
        self.last_good, self.first_bad = 0, size - 1
        self.unknown: set[int] = set()
        self.bad_outcome: Outcome = None

    def copy(self) -> CaseSearch:
        twin = CaseSearch(self.size)
        twin.outcomes, twin.order = dict(self.outcomes), list(self.order)
        twin.stopped, twin.last_good, twin.first_bad = self.stopped, self.last_good, self.first_bad
        twin.unknown, twin.bad_outcome = set(self.unknown), self.bad_outcome
        return twin

    @property
    def good_outcome(self) -> Outcome:
        return self.outcomes.get(0)

    def wanted(self) -> int | None:
        """The next index this subject needs, or None when its search is over."""
        if self.stopped is not None:
            return None
        if 0 not in self.outcomes:
            return 0
        if self.size - 1 not in self.outcomes:
            return self.size - 1
        open_indices = [i for i in range(self.last_good + 1, self.first_bad) if i not in self.unknown]
        return open_indices[len(open_indices) // 2] if open_indices else None

    def steps_left(self) -> int:
        """An estimate, as the single search prints it: a binary search over s open candidates takes s.bit_length()."""
        inside = self.first_bad - self.last_good - 1 - len(self.unknown)
        return 0 if self.wanted() is None else max(1, max(inside, 0).bit_length())

    def tell(self, index: int, outcome: Outcome) -> None:
        """The outcome of the index `wanted()` named."""
        if index != self.wanted():
            raise BisectError(f"outcome for candidate {index} given, but the search wanted {self.wanted()}")
        self.outcomes[index] = outcome
        self.order.append(index)
        if index == 0 and outcome is UNKNOWN:
            self.stopped = EndsUnknown.GOOD_UNKNOWN
        elif index == self.size - 1 and 0 < index and len(self.order) == 2:
            if outcome is UNKNOWN:
                self.stopped = EndsUnknown.BAD_UNKNOWN
            elif outcome == self.good_outcome:
                self.stopped = EndsUnknown.SAME
            self.bad_outcome = outcome
        elif outcome is UNKNOWN:
            self.unknown.add(index)
        elif outcome != self.good_outcome:
            self.first_bad, self.bad_outcome = index, outcome
        else:
            self.last_good = index

    def result(self, candidates: Sequence[C]) -> BisectResult[C] | EndsUnknown:
        """The finished search as `bisect_candidates` returns it, or why it stopped at the ends."""
        if self.wanted() is not None:
            raise BisectError("the search is not finished")
        if self.stopped is not None:
            return self.stopped
        items = list(candidates)
        return BisectResult(
            last_good=items[self.last_good],
            first_bad=items[self.first_bad],
            ambiguous=items[self.last_good + 1 : self.first_bad],
            steps=[(items[i], self.outcomes[i]) for i in self.order],
            good_outcome=self.good_outcome,
            bad_outcome=self.bad_outcome,
        )


K = TypeVar("K", bound=Hashable)

EvaluateMany = Callable[[C, list[K]], "dict[K, Outcome]"]
"""`evaluate_many(candidate, subjects)`: build/run one candidate once for all these subjects."""

Prefetch = Callable[[list[C]], None]
"""`prefetch(candidates)`: the candidates likely needed next, most useful first (to build ahead)."""


def next_candidate(searches: Mapping[K, CaseSearch]) -> int | None:
    """The index to evaluate next for all open subjects: the one most subjects want now.

    Ties go to the index that most subjects could want after it (either way its
    outcome goes), then to the oldest: the value of a build is the number of
    open searches it advances, now and one step ahead.
    """
    wanted = Counter(i for s in searches.values() if (i := s.wanted()) is not None)
    if not wanted:
        return None
    ahead = Counter(i for s in searches.values() for i in likely_next(s))
    return max(wanted, key=lambda i: (wanted[i], ahead[i], -i))


class _Other:
    """An outcome that equals nothing else: 'this candidate turned out bad' for a look ahead."""


def likely_next(search: CaseSearch) -> list[int]:
    """The indices this search wants after its current one, for a good and for a bad outcome there."""
    index = search.wanted()
    if index is None:
        return []
    found: list[int] = []
    for outcome in (search.good_outcome if index != 0 else "good", _Other()):
        twin = search.copy()
        twin.tell(index, outcome)
        after = twin.wanted()
        if after is not None and after not in found:
            found.append(after)
    return found


@dataclass(frozen=True)
class SharedResult(Generic[C, K]):
    """Each subject's finished search, and the candidates evaluated (in order, each once)."""

    searches: dict[K, CaseSearch]
    rounds: list[tuple[C, list[K]]]

    def result(self, key: K, candidates: Sequence[C]) -> BisectResult[C] | EndsUnknown:
        return self.searches[key].result(candidates)


def in_window(search: CaseSearch, index: int) -> bool:
    """Could this open search still want `index`? (an end it has not seen, or an untested index inside its window)"""
    if search.wanted() is None or index in search.outcomes:
        return False
    if index in (0, search.size - 1):
        return True
    return 0 in search.outcomes and search.size - 1 in search.outcomes and search.last_good < index < search.first_bad


def bisect_shared(
    candidates: Sequence[C],
    subjects: Sequence[K],
    evaluate_many: EvaluateMany[C, K],
    *,
    prefetch: Prefetch[C] | None = None,
) -> SharedResult[C, K]:
    """Bisect every subject over one candidate list, evaluating each candidate in one round for all of them.

    Each round evaluates the candidate the most open subjects want now (see
    `next_candidate`), for them and for every other open subject whose window
    still holds it (kept until that subject wants it: one probe batch, not
    two). A subject's probe sequence and answer are those of its own single
    bisection. `prefetch` hears, before each round, the candidates the next
    rounds will likely need.
    """
    items = list(candidates)
    searches = {key: CaseSearch(len(items)) for key in subjects}
    known: dict[K, dict[int, Outcome]] = {key: {} for key in subjects}
    rounds: list[tuple[C, list[K]]] = []
    seen: set[int] = set()

    def serve_known() -> None:
        moved = True
        while moved:
            moved = False
            for key, search in searches.items():
                index = search.wanted()
                if index is not None and index in known[key]:
                    search.tell(index, known[key][index])
                    moved = True

    while (index := next_candidate(searches)) is not None:
        if index in seen:  # cannot happen: every search whose window held it was evaluated with it
            raise BisectError(f"candidate {items[index]!r} would be evaluated in a second round")
        seen.add(index)
        batch = [key for key, search in searches.items() if in_window(search, index)]
        if prefetch is not None:
            now = [key for key in batch if searches[key].wanted() == index]
            after = [i for key in now for i in likely_next(searches[key])]
            prefetch([items[i] for i in dict.fromkeys(after) if i not in seen])
        outcomes = evaluate_many(items[index], batch)
        for key in batch:
            known[key][index] = outcomes[key]
        rounds.append((items[index], batch))
        serve_known()
    return SharedResult(searches, rounds)


def likely_after(size: int, seen: Sequence[tuple[int, Outcome]], current: int) -> list[int]:
    """For a single search that saw `seen` (in order) and now evaluates `current`: the indices it wants next.

    Both halves of the split `current` makes (for building their envs ahead);
    empty when `seen` is not the history of a search over `size` candidates.
    """
    search = CaseSearch(size)
    try:
        for index, outcome in seen:
            search.tell(index, outcome)
    except BisectError:
        return []
    return likely_next(search) if search.wanted() == current else []
