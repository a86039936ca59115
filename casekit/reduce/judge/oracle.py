"""The reducer's test, "is it still the same break?", as casekit's own identity.

Pure functions over plain data. A candidate is kept only when its eager and
compiled runs still work, the chosen break still pairs with the original's as
*persists* under `classify`'s pairing — with the same graph-break id and kind,
reached through the same calls of the user's files — no break appears that
the original did not have (unless allowed), and its compiled inputs keep
their dtypes, devices and `requires_grad`. Both sides are compared in the
original's lines (`lines.py`): a candidate is the original with lines taken
out, so its places are translated back before the pairing sees them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from casekit.classify import match_sites
from casekit.model import Frame, ScriptObservation, ScriptStatus, Site, SiteClass, TensorInput

LinePlace = Callable[[int], int | None]  # a line of one file -> its canonical original line


@dataclass(frozen=True)
class Placement:
    """How to read a run's places in the original's lines: per reduced file, a line translation, and the
    original text of each canonical line (the pairing weighs the words of the source line)."""

    lines: Mapping[str, LinePlace]
    texts: Mapping[str, Callable[[int], str]] = field(default_factory=dict)

    def frame(self, frame: Frame) -> Frame:
        place = self.lines.get(frame.file)
        if place is None:
            return frame
        line = place(frame.line)
        if line is None:  # a line no original statement holds: it cannot be the same place as anything
            return Frame(frame.file, -abs(frame.line) - 1, frame.function, frame.source)
        text = self.texts.get(frame.file)
        return Frame(frame.file, line, frame.function, text(line) if text else frame.source)

    def site(self, site: Site) -> Site:
        placed = copy.copy(site)
        inner = self.frame(Frame(site.file, site.line, site.function, site.source))
        placed.line, placed.source = inner.line, inner.source
        placed.call_site = self.frame(site.call_site) if site.call_site else None
        placed.stack = [self.frame(f) for f in site.stack]
        return placed

    def observation(self, observation: ScriptObservation) -> ScriptObservation:
        placed = copy.copy(observation)
        placed.sites = [self.site(s) for s in observation.sites]
        return placed


@dataclass(frozen=True)
class OracleOptions:
    """What else must hold besides the chosen break (the issue's optional checks)."""

    allow_new: bool = False  # a break the original did not have may appear
    keep_graphs: bool = False  # the graph count and the frames falling back to eager must stay


@dataclass(frozen=True)
class Judgement:
    """The oracle's answer for one candidate, with the reason when it refuses."""

    kept: bool
    why: str = ""
    site: Site | None = None  # the chosen break as the candidate shows it

    def __bool__(self) -> bool:
        return self.kept


def _user_path(site: Site, user_files: frozenset[str]) -> list[tuple[str, int]]:
    """The calls through the user's own files that lead to the break (what "the same call site" means)."""
    frames = [f for f in site.stack if f.file in user_files]
    path = [(f.file, f.line) for f in frames]
    anchor = site.anchor
    if anchor.file in user_files and (not path or path[-1] != (anchor.file, anchor.line)):
        path.append((anchor.file, anchor.line))
    return path


def _signature(inputs: list[TensorInput]) -> set[tuple[str, str, bool]]:
    return {(t.dtype, t.device, t.requires_grad) for t in inputs}


def _inputs(observation: ScriptObservation) -> list[TensorInput]:
    return [tensor for call in observation.calls for tensor in call.tensors]


@dataclass(frozen=True)
class Oracle:
    """The original run (in its canonical lines), the break to keep, and the options."""

    original: ScriptObservation
    chosen: Site
    user_files: frozenset[str]
    options: OracleOptions = OracleOptions()

    def kept_path(self) -> list[tuple[str, int]]:
        """The kept break's calls through the user's files (file, line), outermost first."""
        return _user_path(self.chosen, self.user_files)

    def judge(self, candidate: ScriptObservation) -> Judgement:
        """Keep or refuse a candidate's run, already placed in the original's lines."""
        if candidate.status is not ScriptStatus.OK:
            return Judgement(False, f"{candidate.status.value}: {candidate.detail}"[:300])
        pairings, _, new = match_sites(self.original.sites, candidate.sites)
        mine = next((p for p in pairings if p.recorded is self.chosen), None)
        if mine is None or mine.observed is None:
            return Judgement(False, f"the break at {self.chosen.where()} is gone")
        observed = mine.observed
        if mine.site_class is not SiteClass.PERSISTS:
            return Judgement(False, f"the break moved: {mine.note}", observed)
        if (observed.category, observed.gb_id, observed.kind) != (
            self.chosen.category,
            self.chosen.gb_id,
            self.chosen.kind,
        ):
            was = f"{self.chosen.gb_id or self.chosen.category} ({self.chosen.kind})"
            now = f"{observed.gb_id or observed.category} ({observed.kind})"
            return Judgement(False, f"the break changed id: {was} -> {now}", observed)
        if _user_path(observed, self.user_files) != _user_path(self.chosen, self.user_files):
            before = " > ".join(f"{f}:{n}" for f, n in _user_path(self.chosen, self.user_files))
            after = " > ".join(f"{f}:{n}" for f, n in _user_path(observed, self.user_files))
            return Judgement(False, f"the break is reached from another call site: {before} -> {after}", observed)
        if not self.options.allow_new:
            moved = [p.observed for p in pairings if p.site_class is SiteClass.MOVED and p.observed is not None]
            for site in new + moved:
                return Judgement(False, f"a new break at {site.where()} ({site.gb_id or site.category})", observed)
        inputs, original_inputs = _inputs(candidate), _inputs(self.original)
        changed = _signature(inputs) - _signature(original_inputs)
        if changed:
            dtype, device, grad = sorted(changed)[0]
            return Judgement(False, f"an input became {dtype} on {device} (requires_grad={grad})", observed)
        if any(0 in t.shape for t in inputs) and not any(0 in t.shape for t in original_inputs):
            return Judgement(False, "an input became empty (a zero-size dimension)", observed)
        if self.options.keep_graphs:
            if candidate.graphs != self.original.graphs:
                return Judgement(False, f"graphs {self.original.graphs} -> {candidate.graphs}", observed)
            if len(candidate.fallback_frames) != len(self.original.fallback_frames):
                return Judgement(False, "the frames falling back to eager changed", observed)
        return Judgement(True, "", observed)


def breaks_in(observation: ScriptObservation) -> int:
    return len(observation.sites)
