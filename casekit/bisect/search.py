"""The pure bisection search over an ordered candidate list.

Modelled on cargo-bisect-rustc's `least_satisfying` (Yes/No/Unknown) and
`git bisect run` (exit 125 = skip): the caller supplies an ordered candidate
list and an `evaluate` callable; this module never builds, runs or prints.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Sequence
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
