"""Which build a request means in a listing: the newest under a prefix, one exact version, a nightly's date.

PyTorch's listing shows only the newest 60 files of a package: a nightly below that horizon is looked
for at its URL (the oldest listed name, that date), one HEAD each.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from casekit.errors import EnvironmentFailed
from casekit.runners.torch_source import index
from casekit.runners.torch_source.builds import Build, DatedBuild, by_date, hidden_candidate, pick_of_day
from casekit.runners.torch_source.request import Channel, ask_for, is_date, nightly_date, parse_date, read_ask

HIDDEN_LOOKBACK_DAYS = 7  # how far `nightly:DATE` steps back below the horizon to find a build

Exists = Callable[[str], bool]


def newest_release(builds: Sequence[Build], requested: str | None) -> Build | None:
    """The build a release request means (`VersionAsk`): the newest final release under a prefix ('2.13';
    None: the newest of all), or the one exact version ('2.13.0', '2.13.0+cpu'); a build label narrows
    either ('2.13+cpu')."""
    return ask_for(requested).newest(builds, lambda build: build.version)


def choose_build(
    channel: Channel, asked: str | None, builds: list[Build], where: str, *, exists: Exists = index.exists
) -> tuple[Build, tuple[str, ...]]:
    """The build `asked` means among a channel's installable `builds`, and what was done to find it.
    EnvironmentFailed, in one line naming `where` and what is there, when nothing fits."""
    if channel is Channel.NIGHTLY:
        if asked is not None and not is_date(asked):  # an exact dev version: its date's build, that version
            ask = read_ask(asked)
            listed = [b for b in builds if ask.admits(b.version)]
            if listed:
                return max(listed), ()
            dated = nightly_on(builds, _date_of(asked), exists=exists, lookback=0)
            if not ask.admits(dated.build.version):
                raise EnvironmentFailed(f"no nightly torch {asked} at {where}")
            return dated.build, dated.notes
        dated = nightly_on(builds, parse_date(asked) if asked else None, exists=exists)
        return dated.build, dated.notes
    chosen = newest_release(builds, asked)
    if chosen is None:
        shown = ", ".join(sorted({str(b.version) for b in builds if not b.version.is_devrelease}, reverse=True)[:8])
        raise EnvironmentFailed(f"no torch {asked or 'release'} at {where}" + (f": it has {shown}" if shown else ""))
    return chosen, ()


def _date_of(version: str) -> dt.date:
    date = nightly_date(version)
    if date is None:
        raise EnvironmentFailed(f"not a nightly version: {version!r} (expected 2.14.0.dev20260105)")
    return date


def _horizon_template(builds: Sequence[Build]) -> Build | None:
    """The oldest listed nightly: the pattern of the names below the listing's horizon."""
    dated = [b for b in builds if b.date is not None]
    return min(dated, key=lambda b: (b.date, b.version)) if dated else None


def nightly_on(
    builds: Sequence[Build],
    asked: dt.date | None,
    *,
    exists: Exists = index.exists,
    lookback: int = HIDDEN_LOOKBACK_DAYS,
) -> DatedBuild:
    """The nightly a date stands for (None: the newest): that day's build, else the newest before it.

    A date below the listing's horizon is looked for by its URL, stepping back a day at a time
    (`lookback` days at most). EnvironmentFailed, in one line, when none is found."""
    days = by_date(builds)
    if not days:
        raise EnvironmentFailed("the index lists no nightly torch build this interpreter can install")
    if asked is None:
        newest = max(days)
        chosen, notes = pick_of_day(days[newest], newest)
        return DatedBuild(chosen, newest, notes)
    if asked in days:
        chosen, notes = pick_of_day(days[asked], asked)
        return DatedBuild(chosen, asked, notes)
    horizon = min(days)
    if asked > horizon:
        before = max(day for day in days if day < asked) if any(day < asked for day in days) else horizon
        chosen, notes = pick_of_day(days[before], before)
        return DatedBuild(chosen, asked, (f"no nightly on {asked}: taking {before}'s, the newest before it", *notes))
    template = _horizon_template(builds)
    assert template is not None
    for back in range(lookback + 1):
        day = asked - dt.timedelta(days=back)
        candidate = hidden_candidate(template, day)
        if exists(candidate.url):
            notes = (f"{day}'s nightly is below the index listing's horizon ({horizon}): fetched by its URL",)
            if back:
                notes = (f"no nightly on {asked}: taking {day}'s, the newest before it", *notes)
            return DatedBuild(candidate, asked, notes)
    raise EnvironmentFailed(
        f"no nightly found on or up to {lookback} days before {asked}: the listing starts at {horizon}, "
        f"and {hidden_candidate(template, asked).filename} is not at its URL either"
    )


def nightly_range(
    builds: Sequence[Build], good: dt.date, bad: dt.date, *, exists: Exists = index.exists
) -> tuple[list[Build], list[str]]:
    """The nightlies from `good` to `bad` (oldest first, one per date) for a bisection, and what was done.

    An end with no build rolls inward to the nearest build inside the range, and says so. Dates below
    the listing's horizon are looked for by their URLs (one HEAD each)."""
    if not good < bad:
        raise EnvironmentFailed(f"the good date {good} must be before the bad date {bad}")
    days = by_date(builds)
    if not days:
        raise EnvironmentFailed("the index lists no nightly torch build this interpreter can install")
    notes: list[str] = []
    horizon = min(days)
    template = _horizon_template(builds)
    assert template is not None
    hidden_found = []
    day = good
    while day < horizon and day <= bad:
        candidate = hidden_candidate(template, day)
        if exists(candidate.url):
            days[day] = [candidate]
            hidden_found.append(day)
        day += dt.timedelta(days=1)
    if hidden_found:
        notes.append(
            f"{len(hidden_found)} nightly(ies) below the index listing's horizon ({horizon}) found by their URLs: "
            f"{hidden_found[0]} … {hidden_found[-1]}"
        )
    inside = sorted(day for day in days if good <= day <= bad)
    if len(inside) < 2:
        raise EnvironmentFailed(f"fewer than two nightlies between {good} and {bad}: nothing to bisect")
    if inside[0] != good:
        notes.append(f"no nightly on {good} (good end): starting from {inside[0]}, the first after it")
    if inside[-1] != bad:
        notes.append(f"no nightly on {bad} (bad end): ending at {inside[-1]}, the last before it")
    chosen = []
    for day in inside:
        build, day_notes = pick_of_day(days[day], day)
        chosen.append(build)
        notes += day_notes
    return chosen, notes
