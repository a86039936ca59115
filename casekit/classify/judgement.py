"""Judgement: per script, its status and what changed about it; per case, a verdict and a severity
(error = functional, warn = performance, info = nothing to act on). Pure functions over plain data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import assert_never

from casekit.classify.pairing import SitePairing, pair_sites, previously_gone
from casekit.model import (
    Case,
    FallbackFrame,
    Frame,
    ScriptObservation,
    ScriptRole,
    ScriptStatus,
    Severity,
    SiteClass,
    SiteKind,
    Verdict,
)
from casekit.observe.cause import NotRun, not_run_cause
from casekit.observe.interpret import CASEKIT_FAILED, break_invariant


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
    gone = [f for f in before if not any(_same_fallback(f, o) for o in observed.fallback_frames)]
    still_eager = {id(f): why for f in gone if (why := _still_eager(f, recorded, observed))}
    result.cleared_fallbacks = [f for f in gone if id(f) not in still_eager]
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
        if _whole(fallback, recorded) is False:  # only the code after a break in it ran eagerly: that is compiled now
            result.notes.append(
                f"the code from line {fallback.line} on in {fallback.function} is compiled again (fallback cleared; "
                "before, only that code ran eagerly)"
            )
        else:
            result.notes.append(describe_fallback(fallback.function, "", now=False))
    result.notes += [why for why in still_eager.values()]
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


def _still_eager(fallback: FallbackFrame, recorded: ScriptObservation | None, observed: ScriptObservation) -> str:
    """Why a function that fell back and is no longer named as falling back still runs eagerly ("" when it
    does not): nothing was compiled at all, or a function that calls it now falls back entirely."""
    if observed.graphs == 0 and observed.fallback_frames:
        return f"{fallback.function} still runs eagerly: nothing was compiled (not a cleared fallback)"
    stacks = [site.stack for site in [*observed.sites, *(recorded.sites if recorded else [])]]
    for caller in observed.fallback_frames:
        if _whole(caller, observed) is False or (caller.file, caller.function) == (fallback.file, fallback.function):
            continue
        if any(_calls(stack, caller, fallback) for stack in stacks):
            return (
                f"{fallback.function} is no longer named as falling back, but its caller {caller.function} now falls "
                f"back to eager entirely (not a cleared fallback)"
            )
    return ""


def _calls(stack: list[Frame], caller: FallbackFrame, callee: FallbackFrame) -> bool:
    """Whether a stack runs through `caller` and, below it, `callee`."""
    places = [(frame.file, frame.function) for frame in stack]
    above = (caller.file, caller.function)
    return above in places and (callee.file, callee.function) in places[places.index(above) + 1 :]


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
        if result.status is ScriptStatus.ENV_FAILED and result.observation.detail.startswith(CASEKIT_FAILED):
            raise_to(Severity.ERROR, Verdict.ENV_FAILED, f"{which}: {result.observation.detail}")  # casekit's, said so
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
        if result.cleared_fallbacks:  # compiled again where it ran eagerly: an improvement, said so
            n = len(result.cleared_fallbacks)
            raise_to(Severity.INFO, Verdict.IMPROVED, f"{which}: {n} function(s) no longer fall back to eager")
        if result.recompiles_after < result.recompiles_before:
            raise_to(
                Severity.INFO,
                Verdict.IMPROVED,
                f"{which}: recompiles {result.recompiles_before} -> {result.recompiles_after}",
            )
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
