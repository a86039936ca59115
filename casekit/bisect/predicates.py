"""What 'the outcome changed' means: predicates over one target's classification, and over one commit's observation.

Pure functions over plain data: a predicate turns a `CaseResult` (a release)
or a `ScriptObservation` (a commit) into a hashable outcome the search
compares, and says which way a change of outcome goes (fix or regression).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from casekit.bisect.search import UNKNOWN, Outcome
from casekit.classify import CaseResult, ran_compiled, ran_eager
from casekit.errors import BisectError
from casekit.model import Case, ScriptObservation, ScriptRole, ScriptStatus, Site, SiteClass, Verdict

COMMIT_SCRIPT = "script"  # what a commit bisection calls its one script (it plays the repro's part)
HOLDS, BROKEN = "holds", "broken"
BREAK, NO_BREAK = "break", "no-break"
ABSENT = "absent"
GOOD, BAD = "good", "bad"  # git bisect run's exit-code outcomes


class Direction(enum.StrEnum):
    """Which way the outcome moved from the good end to the first bad target."""

    REGRESSION = "regression"
    FIX = "fix"
    CHANGE = "change"  # neither better nor worse can be told (e.g. persists -> moved)
    NOTHING = "nothing_changed"  # the two ends agree


class PredicateKind(enum.StrEnum):
    """What a release bisection follows (`bisect --site / --status / --post-holds`, the verdict by default)."""

    VERDICT = "verdict"
    SITE = "site"  # the class of the break at FILE:LINE
    STATUS = "status"  # a script's status
    POST_HOLDS = "post-holds"  # whether the post-fix still holds


def verdict_rank(verdict: Verdict) -> int:
    """Verdicts from best (0) to worst, for telling a fix from a regression."""
    match verdict:
        case Verdict.IMPROVED:
            return 0
        case Verdict.UNCHANGED:
            return 1
        case Verdict.CHANGED:
            return 2
        case Verdict.REGRESSED | Verdict.ENV_FAILED:
            return 3
        case Verdict.FIX_BROKEN:
            return 4
        case _:
            assert_never(verdict)


def site_present(site_class: SiteClass) -> int | None:
    """Whether a site's class means the break is there (1) or not (0); None when it cannot be told."""
    match site_class:
        case SiteClass.GONE:
            return 0
        case SiteClass.PERSISTS | SiteClass.MOVED | SiteClass.NEW | SiteClass.REAPPEARED:
            return 1
        case SiteClass.UNOBSERVED:
            return None
        case _:
            assert_never(site_class)


def _member_rank(outcome: Outcome, kind: type[enum.StrEnum], rank: Callable[[Any], int | None]) -> int | None:
    """The rank of an outcome that is an enum's value (a verdict, a site class), None for any other."""
    try:
        member = kind(str(outcome))
    except ValueError:
        return None
    return rank(member)


def by_role(observations: Mapping[str, ScriptObservation]) -> dict[ScriptRole, ScriptObservation]:
    """A target's cached observations ("pre", "post") by script role; a commit bisection's one script
    ("script") plays the repro's part. ValueError for any other name."""
    return {ScriptRole.PRE if name == COMMIT_SCRIPT else ScriptRole(name): obs for name, obs in observations.items()}


def parse_location(spec: str) -> tuple[str, int]:
    """'model.py:12' -> ('model.py', 12); BisectError when it is not FILE:LINE."""
    file, sep, line = spec.strip().rpartition(":")
    if not sep or not file or not line.isdigit():
        raise BisectError(f"{spec!r} is not a site: expected FILE:LINE, e.g. model.py:12")
    return file, int(line)


def _same_file(wanted: str, file: str) -> bool:
    """Files are stored by script name or package-relative path: match either way round by path suffix."""
    wanted, file = wanted.replace("\\", "/").lstrip("./"), file.replace("\\", "/")
    return wanted == file or wanted.endswith("/" + file) or file.endswith("/" + wanted)


def site_at(site: Site, location: tuple[str, int]) -> bool:
    """Does this break happen at FILE:LINE, itself or through the script line that led to it?"""
    file, line = location
    places = [(site.file, site.line), (site.anchor.file, site.anchor.line)]
    return any(_same_file(file, f) and line == n for f, n in places)


def _rank_direction(good: int | None, bad: int | None) -> Direction:
    """Lower rank is better: a higher rank at the first bad is a regression, a lower one a fix."""
    if good is None or bad is None or good == bad:
        return Direction.CHANGE
    return Direction.REGRESSION if bad > good else Direction.FIX


def _status_rank(outcome: Outcome) -> int | None:
    if outcome == ABSENT:
        return None
    return 0 if outcome in (ScriptStatus.OK.value, HOLDS) else 1


def _site_rank(outcome: Outcome) -> int | None:
    if outcome == ABSENT:
        return 0  # no break at that place
    return _member_rank(outcome, SiteClass, site_present)


@dataclass(frozen=True)
class Predicate:
    """What 'differs' means for a case: its verdict, one site's class, a script's status, or 'post-fix holds'.

    Outcomes are plain strings (a verdict's, a status's or a class's value, "holds", "absent"): the
    bisection cache stores them and the report compares and prints them as they are."""

    kind: PredicateKind = PredicateKind.VERDICT
    argument: str | None = None  # FILE:LINE for SITE, "pre"/"post" for STATUS

    @classmethod
    def parse(cls, value: Predicate | str | tuple[str, str]) -> Predicate:
        """Accept a Predicate, "verdict", "post-holds", ("site", "FILE:LINE") or ("status", "pre"|"post")."""
        if isinstance(value, Predicate):
            predicate = value
        else:
            name, argument = (value, None) if isinstance(value, str) else value
            try:
                kind = PredicateKind(name)
            except ValueError:
                choices = ", ".join(kind.value for kind in PredicateKind)
                raise BisectError(f"unknown predicate {name!r} (choose one of: {choices})") from None
            predicate = cls(kind, argument)
        predicate.validate()
        return predicate

    @property
    def script(self) -> ScriptRole:
        """The script a STATUS or POST_HOLDS predicate follows (the pre-fix for the others)."""
        if self.kind is PredicateKind.POST_HOLDS:
            return ScriptRole.POST
        if self.kind is PredicateKind.STATUS and self.argument is not None:
            return ScriptRole(self.argument)
        return ScriptRole.PRE

    def validate(self, case: Case | None = None) -> None:
        """BisectError for a bad argument, or a post-fix predicate on a case without one."""
        if self.kind is PredicateKind.SITE:
            parse_location(self.argument or "")
        if self.kind is PredicateKind.STATUS and self.argument not in tuple(ScriptRole):
            raise BisectError(f"--status takes pre or post, not {self.argument!r}")
        follows_post = self.kind in (PredicateKind.POST_HOLDS, PredicateKind.STATUS) and self.script is ScriptRole.POST
        if case is not None and case.post is None and follows_post:
            raise BisectError(f"case {case.id!r} has no post-fix script, so there is no post-fix to follow")

    def describe(self) -> str:
        match self.kind:
            case PredicateKind.SITE:
                return f"class of the break at {self.argument}"
            case PredicateKind.STATUS:
                return f"status of the {self.script.label} script"
            case PredicateKind.POST_HOLDS:
                return "whether the post-fix still holds"
            case PredicateKind.VERDICT:
                return "the case's replay verdict"
            case _:
                assert_never(self.kind)

    def hint(self) -> str:
        """What else to follow when this predicate saw no change."""
        if self.kind is PredicateKind.VERDICT:
            return "compare another aspect with --site FILE:LINE, --status pre|post or --post-holds"
        return ""

    def detail(self, result: CaseResult) -> str:
        """One line on why a target gave its outcome, for the step list."""
        match self.kind:
            case PredicateKind.STATUS | PredicateKind.POST_HOLDS:
                script = result.scripts.get(self.script)
                if script is None:
                    return f"verdict {result.verdict}"
                return f"{script.which.label} {script.status.value}" + (
                    f": {script.observation.detail}" if script.observation.detail else ""
                )
            case PredicateKind.VERDICT:
                return "; ".join(result.reasons[:3])
            case PredicateKind.SITE:
                return f"verdict {result.verdict}"
            case _:
                assert_never(self.kind)

    def outcome(self, result: CaseResult) -> Outcome:
        """The outcome of one (known) target for this predicate."""
        match self.kind:
            case PredicateKind.VERDICT:
                return result.verdict.value
            case PredicateKind.STATUS:
                script = result.scripts.get(self.script)
                return script.status.value if script else ABSENT
            case PredicateKind.POST_HOLDS:
                post = result.scripts.get(ScriptRole.POST)
                if post is None:
                    return BROKEN
                moved = (SiteClass.NEW, SiteClass.REAPPEARED, SiteClass.MOVED)
                back = [p for p in post.sites if p.site_class in moved]
                return HOLDS if post.status is ScriptStatus.OK and not back else BROKEN
            case PredicateKind.SITE:
                location = parse_location(self.argument or "")
                for which in ScriptRole:
                    script = result.scripts.get(which)
                    for pairing in script.sites if script else []:
                        # either side: a recorded break that moved away is still "the break at FILE:LINE"
                        sides = (pairing.observed, pairing.recorded)
                        if any(site is not None and site_at(site, location) for site in sides):
                            return pairing.site_class.value
                return ABSENT
            case _:
                assert_never(self.kind)

    def direction(self, good: Outcome, bad: Outcome) -> Direction:
        """Fix or regression, from the good end's outcome to the first bad's."""
        if good == bad:
            return Direction.NOTHING
        match self.kind:
            case PredicateKind.VERDICT:
                return _rank_direction(
                    _member_rank(good, Verdict, verdict_rank), _member_rank(bad, Verdict, verdict_rank)
                )
            case PredicateKind.SITE:
                return _rank_direction(_site_rank(good), _site_rank(bad))
            case PredicateKind.STATUS | PredicateKind.POST_HOLDS:
                return _rank_direction(_status_rank(good), _status_rank(bad))
            case _:
                assert_never(self.kind)


@dataclass(frozen=True)
class CommitPredicate:
    """How one commit's observed script is judged: a break at a site, a case's breaks, the break count, or exit code."""

    site: str | None = None
    case: Case | None = None
    exit_code: bool = False

    def __post_init__(self) -> None:
        if self.site is not None and self.case is not None:
            raise BisectError("give --site or --case, not both")
        if self.exit_code and (self.site is not None or self.case is not None):
            raise BisectError("--exit-code judges commits by the command's exit status; it takes no --site or --case")
        if self.site is not None:
            parse_location(self.site)

    def describe(self) -> str:
        if self.exit_code:
            return "the command's exit status"
        if self.site is not None:
            return f"a break at {self.site}"
        if self.case is not None:
            return f"the breaks case {self.case.id} recorded"
        return "the number of graph breaks"

    def hint(self) -> str:
        plain = not self.exit_code and self.site is None and self.case is None
        return "look for one break with --site FILE:LINE" if plain else ""

    def outcome(self, observation: ScriptObservation) -> tuple[Outcome, str]:
        """One commit's outcome from the observed script, and a one-line detail.

        With `site`: "break"/"no-break" at that place; with `case`: how many of
        the case's recorded pre-fix breaks (by category) are observed; otherwise
        the number of graph breaks. A script that cannot even run eagerly (or an
        environment that fails) is unknown: that commit cannot be tested, as with
        exit 125. A crash or timeout under compile is an outcome of its own.
        """
        sites = observation.sites
        detail = f"{len(sites)} break(s), {observation.graphs} graph(s)" + (
            ": " + ", ".join(s.where() for s in sites[:4]) if sites else ""
        )
        if not ran_eager(observation.status):
            return UNKNOWN, f"{observation.status.value}: {observation.detail}"
        if not ran_compiled(observation.status):
            return observation.status.value, observation.detail
        if self.site is not None:
            location = parse_location(self.site)
            return (BREAK if any(site_at(s, location) for s in sites) else NO_BREAK), detail
        if self.case is not None:
            wanted = recorded_categories(self.case)
            seen = [s.category for s in sites]
            found = 0
            for category in wanted:
                if category in seen:
                    seen.remove(category)
                    found += 1
            return f"{found}/{len(wanted)} recorded break(s)", detail
        return f"{len(sites)} graph break(s)", detail

    def direction(self, good: Outcome, bad: Outcome) -> Direction:
        """Fewer breaks (or exit 0) at the first bad is a fix; more is a regression; a crash is a regression."""
        if good == bad:
            return Direction.NOTHING
        return _rank_direction(_commit_rank(good), _commit_rank(bad))


def _commit_rank(outcome: Outcome) -> int | None:
    """Lower is better: no break / exit 0 / fewer breaks; a crash or timeout under compile ranks worst."""
    text = str(outcome)
    if text in (NO_BREAK, GOOD):
        return 0
    if text in (BREAK, BAD):
        return 1
    number = re.match(r"(\d+)(/\d+ recorded break| graph break)", text)
    if number:
        return int(number.group(1))
    return 1_000_000  # a status such as compile_error: worse than any number of breaks


def recorded_categories(case: Case) -> list[str]:
    """The categories of the case's recorded pre-fix breaks; BisectError when there are none."""
    pre = case.observations.get(ScriptRole.PRE)
    categories = [site.category for site in (pre.sites if pre else [])]
    if not categories:
        raise BisectError(f"case {case.id!r} recorded no pre-fix graph breaks to look for")
    return categories
