"""Classification: pair what a replay observed with what the case recorded.

Pure functions over plain data. Per site: persists / moved / gone / reappeared /
new. Per script: the status and what changed about it. Per case: a verdict and a
severity (error = functional, warn = performance, info = nothing to act on).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import assert_never

from casekit.model import (
    Case,
    FallbackFrame,
    Frame,
    ReplayRecord,
    ScriptObservation,
    ScriptRole,
    ScriptStatus,
    Severity,
    Site,
    SiteClass,
    SiteKind,
    Verdict,
)
from casekit.observe.cause import NotRun, not_run_cause
from casekit.observe.interpret import break_invariant
from casekit.observe.reasons import named_subject
from casekit.pysource import defined_names, normalized_statement, used_names
from casekit.scrub import shorten


def functional_failure(status: ScriptStatus) -> bool:
    """Whether a script status is a functional failure (error level): anything but a clean run."""
    match status:
        case ScriptStatus.OK | ScriptStatus.UNOBSERVED:  # unobserved: the release lacks what the script uses
            return False
        case (
            ScriptStatus.EAGER_FAILED
            | ScriptStatus.COMPILE_ERROR
            | ScriptStatus.MISMATCH
            | ScriptStatus.TIMEOUT
            | ScriptStatus.CRASHED
            | ScriptStatus.ENV_FAILED
        ):
            return True
        case _:
            assert_never(status)


def ran_compiled(status: ScriptStatus) -> bool:
    """Whether a script with this status got to run its compiled code to the end: only then is a missing break gone."""
    match status:
        case ScriptStatus.OK | ScriptStatus.MISMATCH:
            return True
        case (
            ScriptStatus.EAGER_FAILED
            | ScriptStatus.COMPILE_ERROR
            | ScriptStatus.TIMEOUT
            | ScriptStatus.CRASHED
            | ScriptStatus.ENV_FAILED
            | ScriptStatus.UNOBSERVED
        ):
            return False
        case _:
            assert_never(status)


def ran_eager(status: ScriptStatus) -> bool:
    """Whether the eager baseline ran (the environment worked and the script itself runs without compile)."""
    match status:
        case ScriptStatus.EAGER_FAILED | ScriptStatus.ENV_FAILED | ScriptStatus.UNOBSERVED:
            return False
        case (
            ScriptStatus.OK
            | ScriptStatus.COMPILE_ERROR
            | ScriptStatus.MISMATCH
            | ScriptStatus.TIMEOUT
            | ScriptStatus.CRASHED
        ):
            return True
        case _:
            assert_never(status)


@dataclass
class SitePairing:
    """One site's class, with the observed and recorded sides (either may be None)."""

    site_class: SiteClass
    observed: Site | None
    recorded: Site | None
    note: str = ""
    axis: str = ""  # what changed it, when a replay can tell (see attribute_changes): "torch", "library X", ...
    cause: str = ""  # that, in words: "gone with nested_graph_breaks=True; persists with it False on ..."

    @property
    def site(self) -> Site:
        """The side to show: what was observed, else what was recorded (one is always there)."""
        site = self.observed or self.recorded
        assert site is not None
        return site


@dataclass
class ScriptResult:
    """One script (pre or post) of one case on one target."""

    which: ScriptRole
    status: ScriptStatus
    recorded_status: ScriptStatus | None
    observation: ScriptObservation
    sites: list[SitePairing] = field(default_factory=list)
    new_fallbacks: list[FallbackFrame] = field(default_factory=list)
    cleared_fallbacks: list[FallbackFrame] = field(default_factory=list)
    recompiles_before: int = 0
    recompiles_after: int = 0
    notes: list[str] = field(default_factory=list)
    not_run: NotRun | None = None  # set when nothing ran at all (its line is in notes too)
    name: str = ""  # how reasons name the script ("" : its role, "pre" / "post")

    @property
    def label(self) -> str:
        return self.name or self.which.value

    def count(self, site_class: SiteClass) -> int:
        return sum(1 for pairing in self.sites if pairing.site_class is site_class)


@dataclass
class Rollback:
    """A safe way back when a fix stops holding, and whether it was proven."""

    needed: bool
    verified: bool | None = None
    detail: str = ""
    notes: str = ""
    path: str | None = None  # "post-fix with fullgraph=False" | "pre-fix with fullgraph=False"


@dataclass
class CaseResult:
    """One case on one target: scripts, verdict, severity, rollback advice."""

    case_id: str
    target: str
    scripts: dict[ScriptRole, ScriptResult]
    verdict: Verdict
    severity: Severity
    reasons: list[str] = field(default_factory=list)
    rollback: Rollback | None = None


def site_key(site: Site) -> str:
    """Compact identity kept in replay history: place + category."""
    return f"{site.anchor.where()}|{site.category}"


MOVE_LINES = 5  # a break this many lines away in the same function may be the same one, reached later


def _same_place(a: Site, b: Site) -> bool:
    return a.file == b.file and a.line == b.line


def _same_anchor(a: Site, b: Site) -> bool:
    return a.anchor.where() == b.anchor.where()


def _same_function(a: Site, b: Site) -> bool:
    """The same function of the same file (a break one line later in it may be the same break)."""
    return (a.file, a.function) == (b.file, b.function) and a.function not in ("?", "<module>")


def _same_frame(a: Site, b: Site) -> bool:
    """The same function at one place; a lambda defined and called on a line is a frame below it."""
    return a.function == b.function or "?" in (a.function, b.function) or len(a.stack) == len(b.stack)


def _same_subject(a: Site, b: Site) -> bool:
    """Not two different named things (two skipped functions, two builtins): unknown counts as the same."""
    subject_a = named_subject(f"{a.reason}\n{a.explanation}")
    subject_b = named_subject(f"{b.reason}\n{b.explanation}")
    return subject_a is None or subject_b is None or subject_a == subject_b


# Operations whose result a release may let through (and break later, on its use) or break on
PRODUCERS = {"GB0124", "GB0109", "GB0033", "GB0036", "GB0037", "GB0105"}
DATA_DEPENDENT_USE = re.compile(r"data.dependent|generic_jump|guard on", re.IGNORECASE)


def _produced_then_used(a: Site, b: Site) -> bool:
    """The earlier line breaks on producing a data-dependent value, the later one on using it:
    one release lets the operation through and breaks on its use, the other breaks on the operation."""
    first, later = (a, b) if a.line < b.line else (b, a)
    if first.line < later.line and _defines_what_is_used(first, later):
        return True
    used = later.category == "GB0170" or bool(DATA_DEPENDENT_USE.search(f"{later.reason} {later.category}"))
    return first.category in PRODUCERS and used


def _in_library(site: Site) -> bool:
    """A break in a file below the script call site (torch, site-packages, the stdlib, a helper module)."""
    return site.call_site is not None and site.file != site.call_site.file


def _below_call_site(site: Site) -> list[Frame]:
    """The frames from the script call site down to the break, the call site excluded."""
    for index in range(len(site.stack) - 1, -1, -1):
        if site.stack[index] == site.call_site:
            return site.stack[index + 1 :] or [site.anchor]
    return site.stack[-1:] or [site.anchor]


def _subsequence(short: list[tuple[str, str]], long: list[tuple[str, str]]) -> bool:
    frames = iter(long)
    return all(any(frame == wanted for frame in frames) for wanted in short)


def _same_library_frame(a: Site, b: Site) -> bool:
    """The same function of the same library file reached the same way from the same script line.

    A line number inside a library is evidence only (every release renumbers torch's files), and a frame
    Dynamo's printed stack drops or replaces with a polyfill is no other way: the shorter path of
    (file, function) must be a subsequence of the longer, ending in the same function."""
    if not (_in_library(a) and _in_library(b) and _same_anchor(a, b)) or (a.file, a.function) != (b.file, b.function):
        return False
    path_a = [(f.file, f.function) for f in _below_call_site(a)]
    path_b = [(f.file, f.function) for f in _below_call_site(b)]
    short, long = sorted((path_a, path_b), key=len)
    return _subsequence(short, long)


def _statement(source: str) -> str:
    """The text of a statement as the notes quote it: spacing collapsed."""
    return " ".join(source.split())


def _same_statement(a: Site, b: Site) -> bool:
    """One library statement that only renumbered: same frame, the same source text once normalized
    (spacing, quotes, parentheses, a trailing comment do not count)."""
    if not (_same_library_frame(a, b) and _statement(a.source) and _statement(b.source)):
        return False
    return normalized_statement(a.source) == normalized_statement(b.source)


def _rewritten_in_place(a: Site, b: Site) -> bool:
    """A library statement rewritten in place: same frame, same cause (category), other text.
    `if not valid.all():` -> `if not torch._is_all_true(valid):` in Distribution._validate_sample is torch's
    own edit of the statement that breaks, not a change of the user's break: it persists, with a note."""
    return (
        _same_library_frame(a, b)
        and a.category == b.category
        and bool(_statement(a.source))
        and bool(_statement(b.source))
        and normalized_statement(a.source) != normalized_statement(b.source)
    )


def _reached_through(outer: Site, inner: Site) -> list[Frame] | None:
    """The path from a break on a script line to a break its call leads to (a context manager's
    __enter__, a decorator's wrapper, a property, __init__, a generator): None when inner's stack
    does not run through outer's line."""
    if outer.call_site is not None or outer.function in ("?", "<module>"):
        return None
    for index, frame in enumerate(inner.stack[:-1]):
        if (frame.file, frame.line, frame.function) == (outer.file, outer.line, outer.function):
            return inner.stack[index:]
    return None


def _path_text(path: list[Frame]) -> str:
    head, *rest = path
    return " -> ".join([f"{head.function} ({head.where()})", *(f"{f.function} ({f.where()})" for f in rest)])


def _defines_what_is_used(first: Site, later: Site) -> bool:
    """The earlier line binds a name the later line reads (`p = x.data_ptr()`, then `if (p % 16) == 0:`)."""
    return bool(defined_names(first.source) & used_names(later.source))


def _depth(site: Site) -> int:
    """Frames below the script call site (0: the break is on the script line itself)."""
    if site.call_site is None:
        return 0
    if not site.stack:
        return 1
    for index in range(len(site.stack) - 1, -1, -1):
        if site.stack[index] == site.call_site:
            return len(site.stack) - 1 - index
    return 1


WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")


def _words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


def _evidence(a: Site, b: Site) -> float:
    """How much the two reasons say about the same thing (0..1): the category, the wording,
    and the operation the source line names (`x.item()` and "Tensor.item" agree)."""
    score = 1.0 if a.category == b.category else 0.0
    reason_a, reason_b = _words(a.reason + " " + a.category), _words(b.reason + " " + b.category)
    if reason_a and reason_b:
        score += len(reason_a & reason_b) / len(reason_a | reason_b)
    source = _words(a.source) | _words(b.source)
    if source:
        score += 0.5 * (bool(reason_a & source) and bool(reason_b & source))
    return score


def _link(recorded: Site, observed: Site) -> tuple[int, float] | None:
    """The cost of calling two sites one break (tier, then the weaker evidence first), or None.

    0-2: the same place (same id and kind; same id; another id: persists, reason changed);
    3: the same script call site, traced to another depth (any file): moved;
    4: the same id in the same function: moved;
    5: the same function within MOVE_LINES lines, another id: moved, but only between
       sites that are each other's only candidates (checked by the caller).
    Never across functions without a shared script call site.
    """
    tie = -_evidence(recorded, observed)
    if _same_statement(recorded, observed):  # a library line that only renumbered: the same place
        distance = abs(recorded.line - observed.line) * 0.001
        if recorded.category == observed.category:
            return (0 if recorded.kind == observed.kind else 1), tie + distance
        return 2, tie + distance + (0.5 if recorded.kind != observed.kind else 0.0)
    if _rewritten_in_place(recorded, observed):
        return 2, tie + abs(recorded.line - observed.line) * 0.001
    if _same_place(recorded, observed) and not _same_frame(recorded, observed):
        return 3, tie + abs(len(recorded.stack) - len(observed.stack)) * 0.01
    if _same_place(recorded, observed):
        if recorded.category == observed.category:
            return (0 if recorded.kind == observed.kind else 1), tie
        return 2, tie + (0.5 if recorded.kind != observed.kind else 0.0)
    if _same_anchor(recorded, observed) and (recorded.call_site or observed.call_site):
        return 3, tie + abs(_depth(recorded) - _depth(observed)) * 0.01
    path = _reached_through(recorded, observed) or _reached_through(observed, recorded)
    if path:
        return 3, tie + len(path) * 0.01
    if _same_function(recorded, observed) and _same_subject(recorded, observed):
        distance = abs(recorded.line - observed.line)
        if recorded.category == observed.category:
            return 4, distance + tie * 0.01
        if distance <= MOVE_LINES and _produced_then_used(recorded, observed):
            return 5, distance + tie * 0.01
    return None


def _persist_note(recorded: Site, observed: Site) -> str:
    notes = []
    if _rewritten_in_place(recorded, observed):
        notes.append(
            f"statement rewritten in place in {observed.function} ({observed.file}): "
            f"`{_statement(recorded.source)}` -> `{_statement(observed.source)}`"
        )
    elif not _same_place(recorded, observed):
        notes.append(f"library line renumbered: {recorded.where()} -> :{observed.line}, same statement")
    if recorded.category != observed.category:
        # the observed reason stands beside the note: the note names the ids and what the reason was
        was = shorten(recorded.reason, 60)
        notes.append(
            f"reason changed: {_id(recorded.category)} -> {_id(observed.category)}" + (f", was: {was}" if was else "")
        )
    elif recorded.reason != observed.reason:
        notes.append("reason reworded")
    return "; ".join(notes)


def _id(category: str) -> str:
    """A category as a note names it: a GB id whole, a legacy reason key (the old wording) shortened."""
    return shorten(category, 40)


def _move_note(recorded: Site, observed: Site) -> str:
    note = f"from {recorded.where()} ({recorded.function}) to {observed.where()} ({observed.function})"
    into, out_of = _reached_through(recorded, observed), _reached_through(observed, recorded)
    if _same_place(recorded, observed):
        how = "deeper" if len(observed.stack) > len(recorded.stack) else "less deep"
        note += f", traced {how} on the same script line"
    elif into or out_of:
        how = "deeper" if into else "less deep"
        path = into or out_of or []
        note += f", traced {how} through the same script line {path[0].where()}: {_path_text(path)}"
    elif _same_anchor(recorded, observed) and (recorded.call_site or observed.call_site):
        levels = _depth(observed) - _depth(recorded)
        how = "deeper" if levels > 0 else "less deep" if levels < 0 else "elsewhere"
        note += f", traced {how} below the same script line {observed.anchor.where()}"
    elif _same_function(recorded, observed):
        note += f", {abs(recorded.line - observed.line)} line(s) away in the same function"
    if recorded.category != observed.category:
        note += f"; reason {_id(recorded.category)} -> {_id(observed.category)}"
    return note


def _only_candidates(recorded: Site, observed: Site, left_recorded: list[Site], left_observed: list[Site]) -> bool:
    others_r = [r for r in left_recorded if r is not recorded and _same_function(r, observed)]
    others_o = [o for o in left_observed if o is not observed and _same_function(recorded, o)]
    return not others_r and not others_o


def match_sites(recorded: list[Site], observed: list[Site]) -> tuple[list[SitePairing], list[Site], list[Site]]:
    """The one pairing: an assignment over recorded x observed sites, cheapest link first.

    Returns the pairings (persists / moved) and what is left unpaired on each side.
    Used by replay, bisect and import alike (through `pair_sites` / `classify_case`).
    """
    left_recorded, left_observed = list(recorded), list(observed)
    links = []
    for i, r in enumerate(recorded):
        for j, o in enumerate(observed):
            cost = _link(r, o)
            if cost is not None:
                links.append((cost, i, j))
    links.sort()
    pairings: list[SitePairing] = []
    for (tier, _), i, j in links:
        r, o = recorded[i], observed[j]
        if not any(x is r for x in left_recorded) or not any(x is o for x in left_observed):
            continue
        if tier == 5 and not _only_candidates(r, o, left_recorded, left_observed):
            continue
        if tier <= 2:
            pairings.append(SitePairing(SiteClass.PERSISTS, o, r, _persist_note(r, o)))
        else:
            pairings.append(SitePairing(SiteClass.MOVED, o, r, _move_note(r, o)))
        left_recorded = [x for x in left_recorded if x is not r]
        left_observed = [x for x in left_observed if x is not o]
    return pairings, left_recorded, left_observed


def same_break(recorded: Site, observed: Site) -> bool:
    """Whether two sites are one break by place alone (same place, or the same script line traced
    to another depth): what import uses to tell an already-archived break, without a full pairing."""
    link = _link(recorded, observed)
    return link is not None and link[0] <= 3


def pair_sites(
    recorded: list[Site],
    observed: list[Site],
    previously_fixed: set[str],
    fixed_categories: set[str],
    ran: bool = True,
) -> list[SitePairing]:
    """Pair observed with recorded sites.

    previously_fixed: site keys known gone (earlier replays) - they reappear;
    fixed_categories: categories the fix removed (pre-fix breaks absent from the
    post-fix) - seeing one in the post-fix means the fix no longer holds;
    ran: False when the script did not get to run its compiled code to the end
    (it failed first): what was not seen is then unobserved, never gone.
    """
    pairings, left_recorded, left_observed = match_sites(recorded, observed)
    for match in left_recorded:
        if ran:
            pairings.append(SitePairing(SiteClass.GONE, None, match, "no longer observed"))
        else:
            pairings.append(SitePairing(SiteClass.UNOBSERVED, None, match, "not observed: the script did not run"))
    for site in left_observed:
        if site_key(site) in previously_fixed or site.category in fixed_categories:
            pairings.append(SitePairing(SiteClass.REAPPEARED, site, None, "a break that had been fixed is back"))
        else:
            pairings.append(SitePairing(SiteClass.NEW, site, None, ""))
    order = {c: i for i, c in enumerate(SiteClass)}  # declaration order: persists, moved, gone, ...
    pairings.sort(key=lambda p: (order[p.site_class], p.site.anchor.line))
    return pairings


def previously_gone(replays: list[ReplayRecord], which: ScriptRole) -> set[str]:
    """Site keys an earlier replay saw as gone (and did not see again since)."""
    gone: set[str] = set()
    for replay in replays:
        for verdict in replay.sites:
            if verdict.script != which:
                continue
            key = f"{verdict.where}|{verdict.category}"
            if verdict.site_class is SiteClass.GONE:
                gone.add(key)
            else:
                gone.discard(key)
    return gone


def script_ran(observed: ScriptObservation) -> bool:
    """Whether the script got to run its compiled code to the end: only then is a missing break gone."""
    return ran_compiled(observed.status)


def _same_fallback(a: FallbackFrame, b: FallbackFrame) -> bool:
    return (a.file, a.line) == (b.file, b.line) or (a.file, a.function) == (b.file, b.function)


def _whole(fallback: FallbackFrame, observation: ScriptObservation | None) -> bool | None:
    """Whether a fallback is the whole function (it is named where the function starts) or only the code after
    a break in it (a resume function, named at that break's line); None when the start is not known."""
    starts = [
        e.line
        for e in (observation.entries if observation else [])
        if (e.file, e.name) == (fallback.file, fallback.function)
    ]
    return fallback.line in starts if starts else None


def _fallback_notes(result: ScriptResult, recorded: ScriptObservation | None, observed: ScriptObservation) -> None:
    # once per function, so a note can never say both "no longer" and "now": a function is the same by where it
    # starts (releases name a module's frame differently: Net / forward) or by its name in its file (one
    # release knows where it starts, the other only the line its skip-type break is on)
    before = recorded.fallback_frames if recorded else []
    result.new_fallbacks = [f for f in observed.fallback_frames if not any(_same_fallback(f, b) for b in before)]
    result.cleared_fallbacks = [f for f in before if not any(_same_fallback(f, o) for o in observed.fallback_frames)]
    widened: list[tuple[FallbackFrame, FallbackFrame]] = []  # (was, now): only its tail fell back, now all of it
    narrowed: list[tuple[FallbackFrame, FallbackFrame]] = []  # the other way
    for now in observed.fallback_frames:
        if any((now.file, now.line) == (was.file, was.line) for was in before):
            continue
        was = next((was for was in before if _same_fallback(now, was)), None)
        if was is None:
            continue
        whole_now, whole_was = _whole(now, observed), _whole(was, recorded)
        if whole_now is True and whole_was is False:
            widened.append((was, now))
        elif whole_was is True and whole_now is False:
            narrowed.append((was, now))
    result.new_fallbacks += [now for _, now in widened]
    still_skipped = {f.function for f in observed.fallback_frames}
    for pairing in result.sites:
        r, o = pairing.recorded, pairing.observed
        if (
            pairing.site_class is SiteClass.PERSISTS
            and r
            and o
            and r.kind is SiteKind.SKIP
            and o.kind is not SiteKind.SKIP
        ):
            if r.anchor.function not in still_skipped:
                cleared = "the frame no longer falls back to eager entirely (fallback cleared)"
                pairing.note = f"{cleared}; {pairing.note}" if pairing.note else cleared
    for fallback in result.cleared_fallbacks:
        result.notes.append(describe_fallback(fallback.function, "", now=False))
    for fallback in result.new_fallbacks:
        note = describe_fallback(fallback.function, f"{fallback.file}:{fallback.line}")
        tail = next((was for was, now in widened if now is fallback), None)
        if tail is not None:
            note += f" (before, only the code from line {tail.line} on ran eagerly)"
        result.notes.append(note)
    for _, now in narrowed:
        result.notes.append(
            f"{now.function} compiles again up to line {now.line}; only the code from there on runs eagerly "
            f"(before, it fell back entirely)"
        )


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<function>.+)_at_(?P<line>\d+)$")


def describe_fallback(function: str, where: str, now: bool = True, since: bool = True) -> str:
    """A frame that falls back to eager, in precise words: a resume function is only the code after a break.

    `since` False: a run on its own (a capture), compared with nothing, so it does not "now" fall back."""
    resume = _RESUME.match(function)
    if resume:
        place = f"the code after the break at line {resume['line']} in {resume['function']}"
        if now:
            return f"{place} runs eagerly (its resume function falls back)"
        return f"{place} is compiled again (fallback cleared)"
    if now:
        verb = "now falls back" if since else "falls back"
        return f"{function} ({where}) {verb} to eager entirely" if where else f"{function} {verb} to eager entirely"
    return f"{function} no longer falls back to eager entirely (fallback cleared)"


def classify_script(
    case: Case, which: ScriptRole, observed: ScriptObservation, target: str = "", name: str = ""
) -> ScriptResult:
    """One script observed on `target` against what the case recorded for it; `name` is how reasons call it."""
    recorded = case.observations.get(which)
    recorded_sites = recorded.sites if recorded else []
    fixed_categories: set[str] = set()
    recorded_pre = case.observations.get(ScriptRole.PRE)
    if which is ScriptRole.POST and recorded_pre is not None:
        post_categories = {s.category for s in recorded_sites}
        fixed_categories = {s.category for s in recorded_pre.sites} - post_categories
    result = ScriptResult(
        which=which,
        status=observed.status,
        recorded_status=recorded.status if recorded else None,
        observation=observed,
        name=name,
    )
    ran = script_ran(observed)
    history = previously_gone(case.replays, which)
    result.sites = pair_sites(recorded_sites, observed.sites, history, fixed_categories, ran=ran)
    # the eager baseline (or the environment) failed: the compiled code never ran at all
    nothing_ran = not ran_eager(observed.status) and not observed.sites and not observed.graphs
    if nothing_ran:  # no fallback cleared, no recompiles compared: nothing was observed at all
        packages = {**(recorded.packages if recorded else {}), **case.environment.get("packages", {})}
        result.not_run = not_run_cause(observed, packages, target)
        result.notes.append(result.not_run.line)
        return result
    _fallback_notes(result, recorded, observed)
    result.recompiles_before = len(recorded.recompiles) if recorded else 0
    result.recompiles_after = len(observed.recompiles)
    if recorded and functional_failure(recorded.status) and observed.status is ScriptStatus.OK:
        result.notes.append(f"was {recorded.status.value} at capture, now runs: fixed upstream")
    elif recorded and recorded.status is observed.status and functional_failure(observed.status):
        result.notes.append(f"persisting {observed.status.value}: {observed.detail}")
    if not ran and result.count(SiteClass.UNOBSERVED):
        n = result.count(SiteClass.UNOBSERVED)
        result.notes.append(f"{n} recorded break(s) not observed: the run stopped early ({observed.detail})")
    script = case.pre if which is ScriptRole.PRE else case.post
    invariant = break_invariant(observed, script.source if script else "")
    if invariant:
        result.notes.append(invariant)
    # removable only when a break went and nothing took its place: no new break, none back, no new fallback
    worse = result.count(SiteClass.NEW) or result.count(SiteClass.REAPPEARED) or result.new_fallbacks
    if which is ScriptRole.PRE and result.count(SiteClass.GONE) and case.post is not None and not worse:
        result.notes.append("a pre-fix break is gone upstream: the workaround may be removable")
    return result


def post_fix_broken(post: ScriptResult | None, pre: ScriptResult | None = None) -> str | None:
    """Why the post-fix no longer holds, or None."""
    if post is None:
        return None
    if post.not_run is not None:
        # The environment's doing (it failed, or a pinned library refuses this torch) says nothing about the
        # fix; but when the pre-fix ran in the same environment, the fix itself is what fails (an API it used
        # changed: a torch.cond fix that no longer runs even eagerly).
        pre_ran = pre is not None and ran_eager(pre.status)
        unchanged = post.status == post.recorded_status  # it failed so at capture too: nothing new about the fix
        if not pre_ran or unchanged or post.not_run.pinned:
            return None
        if post.status in (ScriptStatus.ENV_FAILED, ScriptStatus.UNOBSERVED):  # the target's doing, not the fix's
            return None
        return f"post-fix {post.status.value}: {post.observation.detail}"
    if (
        functional_failure(post.status)
        and post.status is not ScriptStatus.ENV_FAILED
        and post.status != post.recorded_status
    ):
        return f"post-fix {post.status.value}: {post.observation.detail}"
    # a break the post-fix accepted at capture (recorded there) that merely moved is a warning, not a broken fix
    back = [p for p in post.sites if p.site_class in (SiteClass.NEW, SiteClass.REAPPEARED)]
    if back:
        first = back[0]
        assert first.observed is not None
        return f"post-fix breaks again at {first.observed.where()} ({first.observed.reason})"
    return None


def judge(case: Case, target: str, scripts: dict[ScriptRole, ScriptResult]) -> CaseResult:
    """Verdict and severity from the script results."""
    reasons: list[str] = []
    severity = Severity.INFO
    verdict = Verdict.UNCHANGED

    def raise_to(level: Severity, name: Verdict, why: str) -> None:
        nonlocal severity, verdict
        reasons.append(why)
        if level.rank > severity.rank:
            severity, verdict = level, name
        elif level.rank == severity.rank and verdict in (Verdict.UNCHANGED, Verdict.IMPROVED):
            verdict = name

    for result in scripts.values():
        which = result.label
        if result.status is ScriptStatus.UNOBSERVED:  # the release lacks what the script uses: not a regression
            raise_to(Severity.INFO, Verdict.UNOBSERVED, f"{which}: unobserved: {result.observation.detail}")
            continue
        if result.status is ScriptStatus.ENV_FAILED:
            raise_to(Severity.ERROR, Verdict.ENV_FAILED, f"{which}: environment failed: {result.observation.detail}")
            if result.not_run:
                reasons.append(f"{which}: {result.not_run.line}")
            continue
        if result.not_run and result.status != result.recorded_status:
            # a pinned library refusing the target's torch is the environment's doing, not the script's
            name = Verdict.ENV_FAILED if result.not_run.pinned else Verdict.REGRESSED
            raise_to(Severity.ERROR, name, f"{which}: {result.not_run.line}")
            continue
        if functional_failure(result.status) and result.status != result.recorded_status:
            raise_to(Severity.ERROR, Verdict.REGRESSED, f"{which}: {result.status.value}: {result.observation.detail}")
        recorded = result.recorded_status
        if recorded is not None and functional_failure(recorded) and result.status is ScriptStatus.OK:
            raise_to(Severity.INFO, Verdict.IMPROVED, f"{which}: {recorded.value} fixed upstream")
        for site_class in (SiteClass.NEW, SiteClass.MOVED, SiteClass.REAPPEARED):
            n = result.count(site_class)
            if n:
                raise_to(Severity.WARN, Verdict.CHANGED, f"{which}: {n} {site_class.value}")
        if result.new_fallbacks:
            raise_to(
                Severity.WARN,
                Verdict.CHANGED,
                f"{which}: {len(result.new_fallbacks)} function(s) now fall back to eager",
            )
        if result.recompiles_after > result.recompiles_before:
            raise_to(
                Severity.WARN,
                Verdict.CHANGED,
                f"{which}: recompiles {result.recompiles_before} -> {result.recompiles_after}",
            )
        if result.count(SiteClass.GONE):
            raise_to(Severity.INFO, Verdict.IMPROVED, f"{which}: {result.count(SiteClass.GONE)} gone")
    broken = post_fix_broken(scripts.get(ScriptRole.POST), scripts.get(ScriptRole.PRE))
    rollback = None
    if broken:
        raise_to(Severity.ERROR, Verdict.FIX_BROKEN, broken)
        verdict = Verdict.FIX_BROKEN  # the most useful name for it, whatever else regressed
        rollback = Rollback(needed=True, detail=broken, notes=case.rollback_notes)
    return CaseResult(case.id, target, scripts, verdict, severity, reasons, rollback)


def classify_case(
    case: Case,
    target: str,
    observed: Mapping[ScriptRole, ScriptObservation],
    names: Mapping[ScriptRole, str] | None = None,
) -> CaseResult:
    """Classify every observed script of a case on `target`; `names` says how reasons call a script
    (a commit bisection calls its one script "script"), by default its role."""
    roles = {ScriptRole(which): obs for which, obs in observed.items()}  # a role given as its value is one too
    scripts = {
        which: classify_script(case, which, obs, target, (names or {}).get(which, "")) for which, obs in roles.items()
    }
    return judge(case, target, scripts)


# ------------------------------------------------------------ whose change it was: torch, a library, a setting

CHANGED_CLASSES = (SiteClass.MOVED, SiteClass.GONE, SiteClass.NEW, SiteClass.REAPPEARED)


@dataclass(frozen=True)
class Axes:
    """What a run depends on besides its scripts: the torch release, the libraries the scripts
    imported, and the Dynamo settings that change break shape (name -> (value, default))."""

    torch: str | None
    libraries: Mapping[str, str] = field(default_factory=dict)
    dynamo: Mapping[str, tuple[object, object]] = field(default_factory=dict)


@dataclass(frozen=True)
class Difference:
    """One axis on which two runs differ: its name ("torch", "library X", "setting X") and both values."""

    axis: str
    name: str  # the thing itself: "torch", the distribution, the setting
    before: object
    after: object


def _release(torch: str | None) -> str | None:
    return torch.split("+", 1)[0] if torch else None


def axes_differences(before: Axes, after: Axes) -> list[Difference]:
    """Where `after` differs from `before`. A setting `before` did not record (a bundle captured before
    casekit recorded them) is taken at `after`'s default; a setting `after`'s release does not report is
    no difference at all (see `unknown_settings`); a library one side did not import is not compared."""
    found = []
    if _release(before.torch) and _release(after.torch) and _release(before.torch) != _release(after.torch):
        found.append(Difference("torch", "torch", _release(before.torch), _release(after.torch)))
    for dist in sorted(set(before.libraries) & set(after.libraries)):
        if before.libraries[dist] != after.libraries[dist]:
            found.append(Difference(f"library {dist}", dist, before.libraries[dist], after.libraries[dist]))
    for name in sorted(after.dynamo):  # only a name the release knows can have changed what it did
        value_b, default_b = after.dynamo[name]
        value_a = before.dynamo[name][0] if name in before.dynamo else default_b
        if value_a != value_b:
            found.append(Difference(f"setting {name}", name, value_a, value_b))
    return found


def unknown_settings(recorded: Axes, target: Axes) -> list[Difference]:
    """Settings the recording holds away from their default that the target's release does not report:
    a made-up name, or one the release lacks. They are not causes; a replay says so instead of naming them.
    (`before` is the recorded value, `after` the recorded default.)"""
    return [
        Difference(f"setting {name}", name, value, default)
        for name, (value, default) in sorted(recorded.dynamo.items())
        if name not in target.dynamo and value != default
    ]


def recorded_axes(case: Case) -> Axes:
    """The axes a case was captured on, from its environment record."""
    env = case.environment
    libraries = {d: str(v) for d, v in (env.get("packages") or {}).items() if str(d).lower() != "torch"}
    for observation in case.observations.values():
        libraries.update({d: v for d, v in observation.packages.items() if d.lower() != "torch"})
    return Axes(env.get("torch"), libraries, settings_axes(env.get("dynamo_settings")))


def settings_axes(settings: object) -> dict[str, tuple[object, object]]:
    """The probe's dynamo_settings record as name -> (value, default); {} when there is none."""
    if not isinstance(settings, Mapping):
        return {}
    return {
        str(name): (entry.get("value"), entry.get("default"))
        for name, entry in settings.items()
        if isinstance(entry, Mapping) and "alias_of" not in entry  # an old name: its new name carries it
    }


def _with(difference: Difference, value: object) -> str:
    if difference.axis == "torch":
        return f"on torch {value}"
    return (
        f"with {difference.name}={value}"
        if difference.axis.startswith("setting")
        else f"with {difference.name} {value}"
    )


def _identity(which: ScriptRole, pairing: SitePairing) -> str:
    side = pairing.recorded if pairing.recorded is not None else pairing.observed
    assert side is not None
    return f"{which}|{site_key(side)}"


def _classes(result: CaseResult) -> dict[str, SiteClass]:
    """Each site of a result by identity (the recorded side when there is one) -> its class there."""
    return {_identity(which, p): p.site_class for which, script in result.scripts.items() for p in script.sites}


def attribute_changes(recorded: Axes, runs: list[tuple[str, Axes, CaseResult]]) -> None:
    """Say, for every changed break of one case on each target, which axis changed it.

    `runs`: (target label, its axes, the case's result there), every target of one replay. A target
    that differs from the recording on one axis only names it. Otherwise a target of the same replay
    that differs from this one on one axis only tells: where the break did not change there, that axis
    changed it ("gone on torch 2.13.0; persists on torch 2.12.1 (venv:torch-2.12.1+mylib==2.0)");
    where it changed alike, that axis did not. What stays ambiguous names every axis still in question.
    (A sharded replay sees only its shard's targets: the single-axis answer is the same in any shard.)"""
    classes = {label: _classes(result) for label, _, result in runs}
    for label, axes, result in runs:
        candidates = axes_differences(recorded, axes)
        values = {c.axis: f"{c.before} -> {c.after}" for c in candidates}
        named: Counter[tuple[ScriptRole, str]] = Counter()
        for which, script in result.scripts.items():
            for pairing in script.sites:
                if pairing.site_class not in CHANGED_CLASSES:
                    continue
                axis, cause = _attribute(pairing, which, label, axes, recorded, candidates, runs, classes)
                pairing.axis, pairing.cause = axis, cause
                if axis:
                    named[(which, axis)] += 1
        if any(_script_changed(script) for script in result.scripts.values()):
            release = f"torch {_release(axes.torch)}" if axes.torch else "the target's release"
            result.reasons += [
                f"setting {unknown.name} (recorded {unknown.before}) is unknown to {release}: not a cause"
                for unknown in unknown_settings(recorded, axes)
            ]
        if len(candidates) == 1:  # the one difference: every change of a script coincides with it
            only = candidates[0]
            for script in result.scripts.values():
                if _script_changed(script):
                    result.reasons.append(
                        f"{script.label}: its changes coincide with {only.axis} {values[only.axis]}, "
                        "the only difference from the recording"
                    )
            continue
        for (which, axis), n in sorted(named.items()):
            said = f"{axis} {values[axis]}" if axis in values else axis
            result.reasons.append(f"{result.scripts[which].label}: {n} break change(s) coincide with {said}")


def _script_changed(script: ScriptResult) -> bool:
    """Whether anything a verdict reads changed: a break, the recompiles, a fallback, the status."""
    return (
        any(p.site_class in CHANGED_CLASSES for p in script.sites)
        or script.recompiles_after != script.recompiles_before
        or bool(script.new_fallbacks or script.cleared_fallbacks)
        or (script.recorded_status is not None and script.status is not script.recorded_status)
    )


def _attribute(
    pairing: SitePairing,
    which: ScriptRole,
    label: str,
    axes: Axes,
    recorded: Axes,
    candidates: list[Difference],
    runs: list[tuple[str, Axes, CaseResult]],
    classes: dict[str, dict[str, SiteClass]],
) -> tuple[str, str]:
    what = pairing.site_class.value
    if not candidates:
        return "", f"{what} with nothing differing from the recording (torch, libraries, Dynamo settings)"
    if len(candidates) == 1:  # the one thing that differs from the recording (the same answer in any shard)
        (difference,) = candidates
        recorded_as = _with(difference, difference.before).split(" ", 1)[1]
        return difference.axis, f"{what} {_with(difference, difference.after)}; recorded {recorded_as}"
    identity = _identity(which, pairing)
    left = {c.axis: c for c in candidates}
    contrast = ""
    for other, other_axes, _ in runs:
        if other == label:
            continue
        between = axes_differences(other_axes, axes)
        if len(between) != 1 or between[0].axis not in left:
            continue
        there = classes[other].get(identity)
        if there is pairing.site_class:  # changed alike without it: not this axis
            del left[between[0].axis]
            continue
        difference = left[between[0].axis]
        shown = there.value if there is not None else "not there"
        contrast = f"; {shown} {_with(between[0], between[0].before)} ({other})"
        left = {difference.axis: difference}
        break
    if len(left) == 1:
        difference = next(iter(left.values()))
        told = contrast or f"; recorded {_with(difference, difference.before).split(' ', 1)[1]}"
        return difference.axis, f"{what} {_with(difference, difference.after)}{told}"
    if not left:
        return "", f"{what} on every target of this replay alike: not one of the axes they vary"
    names = " and ".join(sorted(left))
    return "", f"{what}: {names} all differ from the recording; a target that varies one alone tells (--vary-*)"
