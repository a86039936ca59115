"""Which break to keep when a script shows several: by site, by graph-break id, by reason text.

Pure functions over the original's observation. The default is the first break
in the user's own code: the first observed break whose place is one of the
user's files, else the first whose call site is (a break inside a library,
reached from the script).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from casekit.errors import CasekitError
from casekit.model import ScriptObservation, Site

SITE_FORMAT = re.compile(r"^(?P<file>[^:]+):(?P<line>[0-9]+)$")


class ReduceRefused(CasekitError):
    """A reduction that cannot start (a bad script, site or option): one line, before anything is reduced."""


@dataclass(frozen=True)
class BreakChoice:
    """The user's pick (any of them, all must hold); none: the first break in the user's code."""

    site: tuple[str, int] | None = None  # (file, line) as the script names them
    gb_id: str | None = None  # "GB0124"
    reason: str | None = None  # words of the reason, case-insensitive

    @classmethod
    def parse(cls, site: str | None = None, gb_id: str | None = None, reason: str | None = None) -> BreakChoice:
        """From the command line's strings; a malformed one is refused in one line."""
        where = None
        if site is not None:
            match = SITE_FORMAT.match(site.strip())
            if not match or int(match["line"]) < 1:
                raise ReduceRefused(f"--site {site!r}: give FILE:LINE, e.g. model.py:42")
            where = (match["file"], int(match["line"]))
        if gb_id is not None and not re.fullmatch(r"(?i)gb\d{4}", gb_id.strip()):
            raise ReduceRefused(f"--gb {gb_id!r}: a graph-break id looks like GB0124")
        if reason is not None and not reason.strip():
            raise ReduceRefused("--reason '': give some words of the break's reason")
        return cls(where, gb_id.strip().upper() if gb_id else None, reason.strip() if reason else None)

    def describe(self) -> str:
        said = []
        if self.site:
            said.append(f"at {self.site[0]}:{self.site[1]}")
        if self.gb_id:
            said.append(f"with id {self.gb_id}")
        if self.reason:
            said.append(f"with reason {self.reason!r}")
        return "the break " + " and ".join(said) if said else "the first break in your code"

    def matches(self, site: Site, canonical_site: tuple[str, int] | None) -> bool:
        """Whether `site` is the one asked for; `canonical_site`: the asked place in canonical lines."""
        if canonical_site is not None:
            places = {(site.file, site.line), (site.anchor.file, site.anchor.line)}
            places |= {(f.file, f.line) for f in site.stack}
            if canonical_site not in places:
                return False
        if self.gb_id and (site.gb_id or site.category).upper() != self.gb_id:
            return False
        if self.reason:
            text = f"{site.reason}\n{site.explanation}\n{site.category}".lower()
            if self.reason.lower() not in text:
                return False
        return True


def choose_break(
    observation: ScriptObservation,
    choice: BreakChoice,
    user_files: frozenset[str],
    canonical_site: tuple[str, int] | None = None,
) -> Site:
    """The break to keep, from the original's (canonical) sites; ReduceRefused naming what was seen instead."""
    sites = observation.sites
    if not sites:
        graphs = f" ({observation.graphs} graph(s), no break logged)" if observation.graphs > 1 else ""
        raise ReduceRefused(f"the script shows no graph break{graphs}: there is nothing to keep while reducing")
    if choice.site or choice.gb_id or choice.reason:
        for site in sites:
            if choice.matches(site, canonical_site):
                return site
        seen = "; ".join(f"{s.where()} {s.gb_id or s.category} ({s.reason[:50]})" for s in sites[:6])
        raise ReduceRefused(f"the script does not show {choice.describe()}; it breaks at: {seen}")
    for site in sites:
        if site.file in user_files:
            return site
    for site in sites:
        if site.anchor.file in user_files:
            return site
    return sites[0]
