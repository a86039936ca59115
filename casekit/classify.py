"""Classification: pair what a replay observed with what the case recorded.

Pure functions over plain data. Per site: persists / moved / gone / reappeared /
new. Per script: the status and what changed about it. Per case: a verdict and a
severity (error = functional, warn = performance, info = nothing to act on).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from casekit.model import (
    Case,
    FallbackFrame,
    ReplayRecord,
    ScriptObservation,
    ScriptStatus,
    Severity,
    Site,
    SiteClass,
)

FUNCTIONAL_FAILURES = {
    ScriptStatus.EAGER_FAILED,
    ScriptStatus.COMPILE_ERROR,
    ScriptStatus.MISMATCH,
    ScriptStatus.TIMEOUT,
    ScriptStatus.CRASHED,
    ScriptStatus.ENV_FAILED,
}


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

    which: str
    status: ScriptStatus
    recorded_status: ScriptStatus | None
    observation: ScriptObservation
    sites: list[SitePairing] = field(default_factory=list)
    new_fallbacks: list[FallbackFrame] = field(default_factory=list)
    cleared_fallbacks: list[FallbackFrame] = field(default_factory=list)
    recompiles_before: int = 0
    recompiles_after: int = 0
    notes: list[str] = field(default_factory=list)

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
    scripts: dict[str, ScriptResult]
    verdict: str
    severity: Severity
    reasons: list[str] = field(default_factory=list)
    rollback: Rollback | None = None


def site_key(site: Site) -> str:
    """Compact identity kept in replay history: place + category."""
    return f"{site.anchor.where()}|{site.category}"


def _same_place(a: Site, b: Site) -> bool:
    return a.file == b.file and a.line == b.line


def _comparable_category(a: Site, b: Site) -> bool:
    """Same category, or the same place where one side could not be normalized (legacy text)."""
    if a.category == b.category:
        return True
    return _same_place(a, b) and (a.category.startswith("legacy:") or b.category.startswith("legacy:"))


def _moved_below_same_line(a: Site, b: Site) -> bool:
    """The script line is unchanged, the break went into (or out of) a library frame below it.

    Releases disagree on how deep they trace before breaking (2.5 stops at
    `copy.deepcopy(state)`, 2.13 inside copy.py), and the reason follows the frame.
    """
    if a.anchor.where() != b.anchor.where():
        return False
    return a.file != a.anchor.file or b.file != b.anchor.file


def _move_distance(a: Site, b: Site) -> tuple[int, int]:
    """Prefer moves that keep the script call site, then the nearest line."""
    same_anchor = a.anchor.where() == b.anchor.where()
    return (0 if same_anchor else 1, abs(a.anchor.line - b.anchor.line))


def _pair_move(
    site: Site, left_recorded: list[Site], left_observed: list[Site], pairings: list[SitePairing], same_kind_only: bool
) -> None:
    if same_kind_only:
        candidates = [r for r in left_recorded if r.category == site.category]
    else:
        candidates = [r for r in left_recorded if _moved_below_same_line(r, site)]
    if not candidates:
        return
    match = min(candidates, key=lambda r: _move_distance(r, site))
    note = f"from {match.where()} ({match.function}) to {site.where()} ({site.function})"
    if match.anchor.where() == site.anchor.where():
        note += f", below the same script line {site.anchor.where()}"
    pairings.append(SitePairing(SiteClass.MOVED, site, match, note))
    left_recorded.remove(match)
    left_observed.remove(site)


def pair_sites(
    recorded: list[Site], observed: list[Site], previously_fixed: set[str], fixed_categories: set[str]
) -> list[SitePairing]:
    """Pair observed with recorded sites.

    previously_fixed: site keys known gone (earlier replays) - they reappear;
    fixed_categories: categories the fix removed (pre-fix breaks absent from the
    post-fix) - seeing one in the post-fix means the fix no longer holds.
    """
    pairings: list[SitePairing] = []
    left_recorded = list(recorded)
    left_observed = list(observed)
    # 1. same place, same (or normalizable) category: persists
    for site in list(left_observed):
        match = next((r for r in left_recorded if _same_place(r, site) and _comparable_category(r, site)), None)
        if match:
            note = "reason reworded" if match.reason != site.reason else ""
            if match.kind == "skip" and site.kind != "skip":
                note = "the frame no longer falls back to eager entirely (fallback cleared)"
            pairings.append(SitePairing(SiteClass.PERSISTS, site, match, note))
            left_recorded.remove(match)
            left_observed.remove(site)
    # 2. moved: first the same category elsewhere (nearest first, same script call site preferred),
    #    then a break that went into or out of a library frame below the same script line
    for same_kind_only in (True, False):
        for site in sorted(left_observed, key=lambda s: (s.anchor.line, s.line)):
            _pair_move(site, left_recorded, left_observed, pairings, same_kind_only)
    # 3. what is left
    for match in left_recorded:
        pairings.append(SitePairing(SiteClass.GONE, None, match, "no longer observed"))
    for site in left_observed:
        if site_key(site) in previously_fixed or site.category in fixed_categories:
            pairings.append(SitePairing(SiteClass.REAPPEARED, site, None, "a break that had been fixed is back"))
        else:
            pairings.append(SitePairing(SiteClass.NEW, site, None, ""))
    order = {c: i for i, c in enumerate(SiteClass)}
    pairings.sort(key=lambda p: (order[p.site_class], p.site.anchor.line))
    return pairings


def previously_gone(replays: list[ReplayRecord], which: str) -> set[str]:
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


def classify_script(case: Case, which: str, observed: ScriptObservation) -> ScriptResult:
    recorded = case.observations.get(which)
    recorded_sites = recorded.sites if recorded else []
    fixed_categories: set[str] = set()
    if which == "post" and "pre" in case.observations:
        post_categories = {s.category for s in recorded_sites}
        fixed_categories = {s.category for s in case.observations["pre"].sites} - post_categories
    result = ScriptResult(
        which=which,
        status=observed.status,
        recorded_status=recorded.status if recorded else None,
        observation=observed,
    )
    if observed.status is ScriptStatus.ENV_FAILED:
        return result
    result.sites = pair_sites(recorded_sites, observed.sites, previously_gone(case.replays, which), fixed_categories)
    # a function is known by where it starts: releases name a module's frame differently (Net / forward)
    recorded_fallbacks = {(f.file, f.line) for f in (recorded.fallback_frames if recorded else [])}
    observed_fallbacks = {(f.file, f.line) for f in observed.fallback_frames}
    result.new_fallbacks = [f for f in observed.fallback_frames if (f.file, f.line) not in recorded_fallbacks]
    result.cleared_fallbacks = [
        f for f in (recorded.fallback_frames if recorded else []) if (f.file, f.line) not in observed_fallbacks
    ]
    result.recompiles_before = len(recorded.recompiles) if recorded else 0
    result.recompiles_after = len(observed.recompiles)
    if recorded and recorded.status in FUNCTIONAL_FAILURES and observed.status is ScriptStatus.OK:
        result.notes.append(f"was {recorded.status.value} at capture, now runs: fixed upstream")
    elif recorded and recorded.status is observed.status and observed.status in FUNCTIONAL_FAILURES:
        result.notes.append(f"persisting {observed.status.value}: {observed.detail}")
    for fallback in result.cleared_fallbacks:
        result.notes.append(f"{fallback.function} no longer falls back to eager entirely (fallback cleared)")
    for fallback in result.new_fallbacks:
        result.notes.append(f"{fallback.function} ({fallback.file}:{fallback.line}) now falls back to eager entirely")
    if which == "pre" and result.count(SiteClass.GONE) and case.post is not None:
        result.notes.append("a pre-fix break is gone upstream: the workaround may be removable")
    return result


def post_fix_broken(post: ScriptResult | None) -> str | None:
    """Why the post-fix no longer holds, or None."""
    if post is None:
        return None
    if (
        post.status in FUNCTIONAL_FAILURES
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


def judge(case: Case, target: str, scripts: dict[str, ScriptResult]) -> CaseResult:
    """Verdict and severity from the script results."""
    reasons: list[str] = []
    severity = Severity.INFO
    verdict = "unchanged"

    def raise_to(level: Severity, name: str, why: str) -> None:
        nonlocal severity, verdict
        reasons.append(why)
        if level.rank > severity.rank:
            severity, verdict = level, name
        elif level.rank == severity.rank and verdict in ("unchanged", "improved"):
            verdict = name

    for which, result in scripts.items():
        if result.status is ScriptStatus.ENV_FAILED:
            raise_to(Severity.ERROR, "env_failed", f"{which}: environment failed: {result.observation.detail}")
            continue
        if result.status in FUNCTIONAL_FAILURES and result.status != result.recorded_status:
            raise_to(Severity.ERROR, "regressed", f"{which}: {result.status.value}: {result.observation.detail}")
        if result.recorded_status in FUNCTIONAL_FAILURES and result.status is ScriptStatus.OK:
            raise_to(Severity.INFO, "improved", f"{which}: {result.recorded_status.value} fixed upstream")  # type: ignore[union-attr]
        for site_class in (SiteClass.NEW, SiteClass.MOVED, SiteClass.REAPPEARED):
            n = result.count(site_class)
            if n:
                raise_to(Severity.WARN, "changed", f"{which}: {n} {site_class.value}")
        if result.new_fallbacks:
            raise_to(
                Severity.WARN, "changed", f"{which}: {len(result.new_fallbacks)} function(s) now fall back to eager"
            )
        if result.recompiles_after > result.recompiles_before:
            raise_to(
                Severity.WARN, "changed", f"{which}: recompiles {result.recompiles_before} -> {result.recompiles_after}"
            )
        if result.count(SiteClass.GONE):
            raise_to(Severity.INFO, "improved", f"{which}: {result.count(SiteClass.GONE)} gone")
    broken = post_fix_broken(scripts.get("post"))
    rollback = None
    if broken:
        raise_to(Severity.ERROR, "fix_broken", broken)
        verdict = "fix_broken"  # the most useful name for it, whatever else regressed
        rollback = Rollback(needed=True, detail=broken, notes=case.rollback_notes)
    return CaseResult(case.id, target, scripts, verdict, severity, reasons, rollback)


def classify_case(case: Case, target: str, observed: dict[str, ScriptObservation]) -> CaseResult:
    scripts = {which: classify_script(case, which, obs) for which, obs in observed.items()}
    return judge(case, target, scripts)
