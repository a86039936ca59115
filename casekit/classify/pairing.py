"""Pairing: which observed break is which recorded one.

One assignment over the recorded and observed sites, cheapest link first: replay, bisect, import and
reduce all pair through `match_sites`. Pure functions over plain data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from casekit.model import (
    Frame,
    ReplayRecord,
    ScriptRole,
    Site,
    SiteClass,
)
from casekit.observe.reasons import named_subject
from casekit.pysource import defined_names, normalized_statement, used_names
from casekit.scrub import shorten


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
