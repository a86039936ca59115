"""Attribution: whose change it was (torch, a library, a Dynamo setting). Pure: it returns values.

A replay compares each target with the recording on three axes: the torch release, the libraries the
scripts imported, and the Dynamo settings that change break shape. A setting at its own release's
default belongs to that release: when the default itself changed between the releases (2.5.1's
specialize_float=True, 2.13's False), the change is torch's, and the torch axis names the default that
moved with it. Only a setting someone set (value away from its release's default) is an axis of its own.
Where a change still has several candidate axes, a twin target of the same replay that differs from
this one on one axis only settles it: the change did not happen there (that axis made it) or happened
alike (that axis did not).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from casekit.classify.judgement import CaseResult, ScriptResult
from casekit.classify.pairing import SitePairing, site_key
from casekit.model import Case, ScriptRole, SiteClass

CHANGED_CLASSES = (SiteClass.MOVED, SiteClass.GONE, SiteClass.NEW, SiteClass.REAPPEARED)
AMBIGUOUS = "cause unknown"  # how a change with several candidate axes and no twin to settle it is said


@dataclass(frozen=True)
class Axes:
    """What a run depends on besides its scripts: the torch release, the libraries the scripts
    imported, and the Dynamo settings that change break shape (name -> (value, default))."""

    torch: str | None
    libraries: Mapping[str, str] = field(default_factory=dict)
    dynamo: Mapping[str, tuple[object, object]] = field(default_factory=dict)


@dataclass(frozen=True)
class Difference:
    """One axis on which two runs differ: its name ("torch", "library X", "setting X") and both values.
    `defaults`: for torch, the settings both runs hold at their release's default where that default changed."""

    axis: str
    name: str  # the thing itself: "torch", the distribution, the setting
    before: object
    after: object
    defaults: tuple[Difference, ...] = ()


@dataclass(frozen=True)
class SiteCause:
    """Which axis changed one break ("" when no single one did) and that, in words."""

    axis: str
    cause: str


@dataclass(frozen=True)
class Attribution:
    """Whose change it was, for one case on one target: each changed site's cause, by (script, index of its
    pairing in the script's sites), and the lines the case's reasons gain."""

    sites: Mapping[tuple[ScriptRole, int], SiteCause] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()


def _release(torch: str | None) -> str | None:
    return torch.split("+", 1)[0] if torch else None


def _user_set(entry: tuple[object, object]) -> bool:
    value, default = entry
    return value != default


def changed_defaults(before: Axes, after: Axes) -> list[Difference]:
    """Settings both runs hold at their own release's default, where the default itself changed: part of
    the release's change, never an axis of their own (`before`/`after`: the two defaults)."""
    return [
        Difference(f"default {name}", name, before.dynamo[name][1], after.dynamo[name][1])
        for name in sorted(set(before.dynamo) & set(after.dynamo))
        if not _user_set(before.dynamo[name])
        and not _user_set(after.dynamo[name])
        and before.dynamo[name][1] != after.dynamo[name][1]
    ]


def axes_differences(before: Axes, after: Axes) -> list[Difference]:
    """Where `after` differs from `before`. A setting is an axis only where someone set it (on either side,
    its value away from its release's default); one both hold at their release's default goes with torch
    (see `changed_defaults`). A setting `before` did not record (a bundle captured before casekit recorded
    them) is taken at its default; one `after`'s release does not report is no difference at all (see
    `unknown_settings`); a library one side did not import is not compared."""
    found = []
    defaults = changed_defaults(before, after)
    release_before, release_after = _release(before.torch), _release(after.torch)
    if release_before and release_after and release_before != release_after:
        found.append(Difference("torch", "torch", release_before, release_after, tuple(defaults)))
    else:  # no release to carry them (one side's is unknown): a moved default is its own axis
        found += [dataclasses.replace(d, axis=f"setting {d.name}") for d in defaults]
    for dist in sorted(set(before.libraries) & set(after.libraries)):
        if before.libraries[dist] != after.libraries[dist]:
            found.append(Difference(f"library {dist}", dist, before.libraries[dist], after.libraries[dist]))
    for name in sorted(after.dynamo):  # only a name the release knows can have changed what it did
        value_b, default_b = after.dynamo[name]
        recorded = before.dynamo.get(name)
        value_a = recorded[0] if recorded is not None else default_b
        someone_set = _user_set(after.dynamo[name]) or (recorded is not None and _user_set(recorded))
        if value_a != value_b and someone_set:
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
    torch = env.get("torch")
    return Axes(torch if isinstance(torch, str) else None, libraries, settings_axes(env.get("dynamo_settings")))


def settings_axes(settings: object) -> dict[str, tuple[object, object]]:
    """A dynamo_settings record as name -> (value, default); {} when there is none."""
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


def _moved_defaults(difference: Difference) -> str:
    """' (its default X also changed A -> B)' for a torch difference that carries changed defaults."""
    if not difference.defaults:
        return ""
    moved = ", ".join(f"{d.name} {d.before} -> {d.after}" for d in difference.defaults)
    return f" (its default{'s' if len(difference.defaults) > 1 else ''} {moved} also changed)"


def _identity(which: ScriptRole, pairing: SitePairing) -> str:
    side = pairing.recorded if pairing.recorded is not None else pairing.observed
    assert side is not None
    return f"{which}|{site_key(side)}"


Run = tuple[str, Axes, CaseResult]  # a target's label, its axes, the case's result there


def attribute_changes(recorded: Axes, runs: list[Run]) -> dict[str, Attribution]:
    """For one case, on each target of one replay (`runs`), which axis changed each changed break and each
    script-level change (recompiles, fallbacks, the status): target label -> its attribution.

    A target that differs from the recording on one axis only names it. Otherwise a target of the same
    replay that differs from this one on one axis only tells: where the change did not happen there, that
    axis made it ("gone on torch 2.13.0; persists on torch 2.12.1 (venv:torch-2.12.1+mylib==2.0)"); where it
    happened alike, that axis did not. What stays ambiguous names every axis still in question.
    (A sharded replay sees only its shard's targets: the single-axis answer is the same in any shard.)"""
    return {label: _attribution(recorded, label, axes, result, runs) for label, axes, result in runs}


def attributed(result: CaseResult, attribution: Attribution) -> CaseResult:
    """`result` with each changed site's axis and cause and the attribution's reasons (a new result; the
    given one is unchanged)."""
    scripts = {}
    for which, script in result.scripts.items():
        sites = [
            dataclasses.replace(pairing, axis=cause.axis, cause=cause.cause)
            if (cause := attribution.sites.get((which, index))) is not None
            else pairing
            for index, pairing in enumerate(script.sites)
        ]
        scripts[which] = dataclasses.replace(script, sites=sites)
    return dataclasses.replace(result, scripts=scripts, reasons=[*result.reasons, *attribution.reasons])


def _attribution(recorded: Axes, label: str, axes: Axes, result: CaseResult, runs: list[Run]) -> Attribution:
    candidates = axes_differences(recorded, axes)
    values = {c.axis: f"{c.before} -> {c.after}{_moved_defaults(c)}" for c in candidates}
    sites: dict[tuple[ScriptRole, int], SiteCause] = {}
    named: Counter[tuple[ScriptRole, str]] = Counter()
    for which, script in result.scripts.items():
        for index, pairing in enumerate(script.sites):
            if pairing.site_class not in CHANGED_CLASSES:
                continue
            cause = _site_cause(pairing, which, label, axes, recorded, candidates, runs)
            sites[(which, index)] = cause
            if cause.axis:
                named[(which, cause.axis)] += 1
    reasons: list[str] = []
    if any(_script_changes(script) for script in result.scripts.values()):
        release = f"torch {_release(axes.torch)}" if axes.torch else "the target's release"
        reasons += [
            f"setting {unknown.name} (recorded {unknown.before}) is unknown to {release}: not a cause"
            for unknown in unknown_settings(recorded, axes)
        ]
    if len(candidates) == 1:  # the one difference: every change of a script coincides with it
        only = candidates[0]
        for script in result.scripts.values():
            changes = _script_changes(script)
            if changes:
                reasons.append(
                    f"{script.label}: its changes ({', '.join(changes)}) coincide with {only.axis} "
                    f"{values[only.axis]}, the only difference from the recording"
                )
        return Attribution(sites, tuple(reasons))
    for (which, axis), n in sorted(named.items()):
        said = f"{axis} {values[axis]}" if axis in values else axis
        reasons.append(f"{result.scripts[which].label}: {n} break change(s) coincide with {said}")
    for which, script in result.scripts.items():
        reasons += _script_level(which, script, label, axes, candidates, runs)
    return Attribution(sites, tuple(reasons))


def _script_changes(script: ScriptResult) -> list[str]:
    """What changed about a script that a verdict reads, in words: its breaks, recompiles, fallbacks, status."""
    changes = [f"{n} {c.value}" for c in CHANGED_CLASSES if (n := script.count(c))]
    if script.recompiles_after != script.recompiles_before:
        changes.append(f"recompiles {script.recompiles_before} -> {script.recompiles_after}")
    if script.new_fallbacks:
        changes.append(f"{len(script.new_fallbacks)} new fallback(s)")
    if script.cleared_fallbacks:
        changes.append(f"{len(script.cleared_fallbacks)} fallback(s) cleared")
    if script.recorded_status is not None and script.status is not script.recorded_status:
        changes.append(f"status {script.recorded_status.value} -> {script.status.value}")
    return changes


def _settled(
    label: str, axes: Axes, candidates: list[Difference], runs: list[Run], state_there: Callable[[CaseResult], object]
) -> tuple[dict[str, Difference], str]:
    """The candidate axes left once the twins of this replay have spoken, and the contrast a settling twin
    gives ("; persists on torch 2.12.1 (its label)"). A twin differs from this target on one axis only:
    where `state_there` (what the change is, read from a result) is the same there, that axis did not make
    the change; where it differs, that axis did."""
    left = {c.axis: c for c in candidates}
    here = next(state_there(result) for other, _, result in runs if other == label)
    for other, other_axes, result in runs:
        between = axes_differences(other_axes, axes)
        if other == label or len(between) != 1 or between[0].axis not in left:
            continue
        there = state_there(result)
        if there == here:  # changed alike without it: not this axis
            del left[between[0].axis]
            continue
        shown = "not there" if there is None else getattr(there, "value", there)
        return {between[0].axis: left[between[0].axis]}, f"; {shown} {_with(between[0], between[0].before)} ({other})"
    return left, ""


def _site_cause(
    pairing: SitePairing,
    which: ScriptRole,
    label: str,
    axes: Axes,
    recorded: Axes,
    candidates: list[Difference],
    runs: list[Run],
) -> SiteCause:
    what = pairing.site_class.value
    if not candidates:
        return SiteCause("", f"{what}, though nothing differs from the recording (torch, libraries, Dynamo settings)")
    identity = _identity(which, pairing)

    def class_there(result: CaseResult) -> SiteClass | None:
        script = result.scripts.get(which)
        return next((p.site_class for p in script.sites if _identity(which, p) == identity), None) if script else None

    left, contrast = (
        _settled(label, axes, candidates, runs, class_there)
        if len(candidates) > 1
        else (
            {candidates[0].axis: candidates[0]},
            "",
        )
    )
    if len(left) == 1:
        difference = next(iter(left.values()))
        told = contrast or f"; recorded {_with(difference, difference.before).split(' ', 1)[1]}"
        return SiteCause(
            difference.axis, f"{what} {_with(difference, difference.after)}{_moved_defaults(difference)}{told}"
        )
    if not left:
        return SiteCause("", f"{what} on every target of this replay alike: not one of the axes they vary")
    names = " and ".join(sorted(left))
    return SiteCause(
        "",
        f"{AMBIGUOUS}: {what}: {names} all differ from the recording; a target that varies one alone tells (--vary-*)",
    )


def _script_level(
    which: ScriptRole, script: ScriptResult, label: str, axes: Axes, candidates: list[Difference], runs: list[Run]
) -> list[str]:
    """The script-level changes (recompiles, fallbacks, status) of a target with several candidate axes,
    each settled by a twin where one tells."""
    states: list[tuple[str, Callable[[ScriptResult], object]]] = []
    if script.recompiles_after != script.recompiles_before:
        states.append((f"recompiles {script.recompiles_before} -> {script.recompiles_after}", _recompiles))
    if script.new_fallbacks or script.cleared_fallbacks:
        states.append(("its fallbacks", _fallbacks))
    if script.recorded_status is not None and script.status is not script.recorded_status:
        states.append((f"status {script.recorded_status.value} -> {script.status.value}", _status))
    said = []
    for what, read in states:

        def there(result: CaseResult, read: Callable[[ScriptResult], object] = read) -> object:
            other = result.scripts.get(which)
            return read(other) if other is not None else None

        left, contrast = _settled(label, axes, candidates, runs, there)
        if len(left) == 1:
            difference = next(iter(left.values()))
            said.append(f"{script.label}: {what} {_with(difference, difference.after)}{contrast}")
        elif left:
            names = " and ".join(sorted(left))
            said.append(f"{script.label}: {what}: {AMBIGUOUS}: {names} all differ from the recording (--vary-* tells)")
    return said


def _recompiles(script: ScriptResult) -> object:
    return script.recompiles_after


def _fallbacks(script: ScriptResult) -> object:
    falling = sorted({f.function for f in script.observation.fallback_frames})
    return f"falls back in {', '.join(falling)}" if falling else "no fallback"


def _status(script: ScriptResult) -> object:
    return script.status
