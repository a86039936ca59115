"""Classification: pair what a replay observed with what the case recorded.

Pure functions over plain data. Per site: persists / moved / gone / reappeared /
new. Per script: the status and what changed about it. Per case: a verdict and a
severity (error = functional, warn = performance, info = nothing to act on).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import assert_never

from casekit.model import (
    Case,
    FallbackFrame,
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


def functional_failure(status: ScriptStatus) -> bool:
    """Whether a script status is a functional failure (error level): anything but a clean run."""
    match status:
        case ScriptStatus.OK:
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
        ):
            return False
        case _:
            assert_never(status)


def ran_eager(status: ScriptStatus) -> bool:
    """Whether the eager baseline ran (the environment worked and the script itself runs without compile)."""
    match status:
        case ScriptStatus.EAGER_FAILED | ScriptStatus.ENV_FAILED:
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
    used = later.category == "GB0170" or bool(DATA_DEPENDENT_USE.search(f"{later.reason} {later.category}"))
    return first.category in PRODUCERS and used


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
    if _same_place(recorded, observed) and not _same_frame(recorded, observed):
        return 3, tie + abs(len(recorded.stack) - len(observed.stack)) * 0.01
    if _same_place(recorded, observed):
        if recorded.category == observed.category:
            return (0 if recorded.kind == observed.kind else 1), tie
        return 2, tie + (0.5 if recorded.kind != observed.kind else 0.0)
    if _same_anchor(recorded, observed) and (recorded.call_site or observed.call_site):
        return 3, tie + abs(_depth(recorded) - _depth(observed)) * 0.01
    if _same_function(recorded, observed) and _same_subject(recorded, observed):
        distance = abs(recorded.line - observed.line)
        if recorded.category == observed.category:
            return 4, distance + tie * 0.01
        if distance <= MOVE_LINES and _produced_then_used(recorded, observed):
            return 5, distance + tie * 0.01
    return None


def _persist_note(recorded: Site, observed: Site) -> str:
    if recorded.category != observed.category:
        return f"reason changed: {recorded.category} ({recorded.reason[:60]}) -> {observed.category} ({observed.reason[:60]})"
    return "reason reworded" if recorded.reason != observed.reason else ""


def _move_note(recorded: Site, observed: Site) -> str:
    note = f"from {recorded.where()} ({recorded.function}) to {observed.where()} ({observed.function})"
    if _same_place(recorded, observed):
        how = "deeper" if len(observed.stack) > len(recorded.stack) else "less deep"
        note += f", traced {how} on the same script line"
    elif _same_anchor(recorded, observed) and (recorded.call_site or observed.call_site):
        deeper = _depth(observed) - _depth(recorded)
        how = "deeper" if deeper > 0 else "less deep" if deeper < 0 else "elsewhere"
        note += f", traced {how} below the same script line {observed.anchor.where()}"
    elif _same_function(recorded, observed):
        note += f", {abs(recorded.line - observed.line)} line(s) away in the same function"
    if recorded.category != observed.category:
        note += f"; reason {recorded.category} -> {observed.category}"
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


def _fallback_notes(result: ScriptResult, recorded: ScriptObservation | None, observed: ScriptObservation) -> None:
    # a function is known by where it starts: releases name a module's frame differently (Net / forward)
    before = recorded.fallback_frames if recorded else []
    recorded_fallbacks = {(f.file, f.line) for f in before}
    observed_fallbacks = {(f.file, f.line) for f in observed.fallback_frames}
    result.new_fallbacks = [f for f in observed.fallback_frames if (f.file, f.line) not in recorded_fallbacks]
    result.cleared_fallbacks = [f for f in before if (f.file, f.line) not in observed_fallbacks]
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
        result.notes.append(describe_fallback(fallback.function, f"{fallback.file}:{fallback.line}"))


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<function>.+)_at_(?P<line>\d+)$")


def describe_fallback(function: str, where: str, now: bool = True) -> str:
    """A frame that falls back to eager, in precise words: a resume function is only the code after a break."""
    resume = _RESUME.match(function)
    if resume:
        place = f"the code after the break at line {resume['line']} in {resume['function']}"
        if now:
            return f"{place} runs eagerly (its resume function falls back)"
        return f"{place} is compiled again (fallback cleared)"
    if now:
        return (
            f"{function} ({where}) now falls back to eager entirely"
            if where
            else f"{function} now falls back to eager entirely"
        )
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
    invariant = break_invariant(observed)
    if invariant:
        result.notes.append(invariant)
    if which is ScriptRole.PRE and result.count(SiteClass.GONE) and case.post is not None:
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
        if not pre_ran or unchanged or post.not_run.pinned or post.status is ScriptStatus.ENV_FAILED:
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
