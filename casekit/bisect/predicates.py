"""What 'the outcome changed' means: predicates over one target's classification, and over one commit's observation.

Pure functions over plain data: a predicate turns a `CaseResult` (a release)
or a `ScriptObservation` (a commit) into a hashable outcome the search
compares, and says which way a change of outcome goes (fix or regression).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from casekit.bisect.search import UNKNOWN, Outcome
from casekit.classify import CaseResult
from casekit.errors import BisectError
from casekit.model import Case, ScriptObservation, ScriptStatus, Site, SiteClass

SCRIPT_LABELS = {"pre": "pre-fix", "post": "post-fix", "script": "script"}
PREDICATE_KINDS = ("verdict", "site", "status", "post-holds")
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


# Verdicts from best to worst, for telling a fix from a regression.
VERDICT_RANK = {"improved": 0, "unchanged": 1, "changed": 2, "regressed": 3, "env_failed": 3, "fix_broken": 4}
# Whether a site's class means the break is there (1) or not (0).
SITE_PRESENT = {
    ABSENT: 0,
    SiteClass.GONE.value: 0,
    SiteClass.PERSISTS.value: 1,
    SiteClass.MOVED.value: 1,
    SiteClass.NEW.value: 1,
    SiteClass.REAPPEARED.value: 1,
}


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


@dataclass(frozen=True)
class Predicate:
    """What 'differs' means for a case: its verdict, one site's class, a script's status, or 'post-fix holds'."""

    kind: str = "verdict"
    argument: str | None = None  # FILE:LINE for "site", "pre"/"post" for "status"

    @classmethod
    def parse(cls, value: Predicate | str | tuple[str, str]) -> Predicate:
        """Accept a Predicate, "verdict", "post-holds", ("site", "FILE:LINE") or ("status", "pre"|"post")."""
        if isinstance(value, Predicate):
            predicate = value
        elif isinstance(value, str):
            predicate = cls(value)
        else:
            predicate = cls(value[0], value[1])
        predicate.validate()
        return predicate

    def validate(self, case: Case | None = None) -> None:
        """BisectError for an unknown kind, a bad argument, or a post-fix predicate on a case without one."""
        if self.kind not in PREDICATE_KINDS:
            raise BisectError(f"unknown predicate {self.kind!r} (choose one of: {', '.join(PREDICATE_KINDS)})")
        if self.kind == "site":
            parse_location(self.argument or "")
        if self.kind == "status" and self.argument not in ("pre", "post"):
            raise BisectError(f"--status takes pre or post, not {self.argument!r}")
        if case is not None and case.post is None and (self.kind == "post-holds" or self.argument == "post"):
            raise BisectError(f"case {case.id!r} has no post-fix script, so there is no post-fix to follow")

    def describe(self) -> str:
        if self.kind == "site":
            return f"class of the break at {self.argument}"
        if self.kind == "status":
            return f"status of the {SCRIPT_LABELS[self.argument or 'pre']} script"
        if self.kind == "post-holds":
            return "whether the post-fix still holds"
        return "the case's replay verdict"

    def hint(self) -> str:
        """What else to follow when this predicate saw no change."""
        if self.kind == "verdict":
            return "compare another aspect with --site FILE:LINE, --status pre|post or --post-holds"
        return ""

    def detail(self, result: CaseResult) -> str:
        """One line on why a target gave its outcome, for the step list."""
        if self.kind in ("status", "post-holds"):
            script = result.scripts.get("post" if self.kind == "post-holds" else self.argument or "pre")
            if script is not None:
                return f"{SCRIPT_LABELS[script.which]} {script.status.value}" + (
                    f": {script.observation.detail}" if script.observation.detail else ""
                )
        return "; ".join(result.reasons[:3]) if self.kind == "verdict" else f"verdict {result.verdict}"

    def outcome(self, result: CaseResult) -> Outcome:
        """The outcome of one (known) target for this predicate."""
        if self.kind == "verdict":
            return result.verdict
        if self.kind == "status":
            script = result.scripts.get(self.argument or "pre")
            return script.status.value if script else ABSENT
        if self.kind == "post-holds":
            post = result.scripts.get("post")
            if post is None:
                return BROKEN
            back = [p for p in post.sites if p.site_class in (SiteClass.NEW, SiteClass.REAPPEARED, SiteClass.MOVED)]
            return HOLDS if post.status is ScriptStatus.OK and not back else BROKEN
        location = parse_location(self.argument or "")
        for which in ("pre", "post"):
            script = result.scripts.get(which)
            for pairing in script.sites if script else []:
                # either side: a recorded break that moved away is still "the break at FILE:LINE"
                if any(site is not None and site_at(site, location) for site in (pairing.observed, pairing.recorded)):
                    return pairing.site_class.value
        return ABSENT

    def direction(self, good: Outcome, bad: Outcome) -> Direction:
        """Fix or regression, from the good end's outcome to the first bad's."""
        if good == bad:
            return Direction.NOTHING
        if self.kind == "verdict":
            return _rank_direction(VERDICT_RANK.get(str(good)), VERDICT_RANK.get(str(bad)))
        if self.kind == "site":
            return _rank_direction(SITE_PRESENT.get(str(good)), SITE_PRESENT.get(str(bad)))
        return _rank_direction(_status_rank(good), _status_rank(bad))


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
        if observation.status in (ScriptStatus.ENV_FAILED, ScriptStatus.EAGER_FAILED):
            return UNKNOWN, f"{observation.status.value}: {observation.detail}"
        if observation.status not in (ScriptStatus.OK, ScriptStatus.MISMATCH):
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
    pre = case.observations.get("pre")
    categories = [site.category for site in (pre.sites if pre else [])]
    if not categories:
        raise BisectError(f"case {case.id!r} recorded no pre-fix graph breaks to look for")
    return categories
