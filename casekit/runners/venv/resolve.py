"""From a target's `--torch`/`--cuda` to the exact env request: the channel's index, the variant, the build.

A channel with variants (release, nightly, test) is read from PyTorch's index
for the variant (or a mirror): casekit reads the listing itself, so it knows
which build a prefix, a date or "latest" means, and finds a nightly the
listing no longer shows by its URL. PyPI's builds, and the user's own
`--index-url` / `--find-links` for releases, are resolved by the installer as
before. An exact request whose env is already built needs no network at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from casekit.errors import EnvironmentFailed
from casekit.runners.channels import (
    Build,
    Channel,
    TorchSource,
    choose_source,
    is_date,
    newest_release,
    nightly_date,
    parse_date,
)
from casekit.runners.interface import ProgressFn, TargetSpec
from casekit.runners.venv.cache import EnvRequest, envs_dir, list_envs, why_not_ready
from casekit.runners.venv.install import python_version_of, request_for, resolve_torch_version
from casekit.runners.wheel_index import IndexUnreachable, Listing, exists, nightly_on, read_listing
from casekit.versions import is_exact, is_release_prefix, pick_newest, sort_versions

MIRROR_HINT = "CASEKIT_TORCH_INDEX=URL names a mirror of PyTorch's index, --find-links DIR a folder of wheels"


@dataclass(frozen=True)
class IndexSeams:
    """How listings are read and hidden files looked for (tests pass fakes; the real ones read HTTP)."""

    read: Callable[[str], Listing] = read_listing
    exists: Callable[[str], bool] = exists
    gpu_here: bool | None = None  # None: look at this host


def resolve_request(
    spec: TargetSpec, root: Path, installer: str, progress: ProgressFn, seams: IndexSeams | None = None
) -> EnvRequest:
    """The exact env request for a venv target, saying in one line which build it is and why."""
    seams = seams or IndexSeams()
    source = choose_source(
        spec.channel, spec.cuda, index_url=spec.index_url, find_links=spec.find_links, gpu_here=seams.gpu_here
    )
    if source.listed:
        try:
            return _from_listing(spec, source, root, progress, seams)
        except IndexUnreachable as error:
            if source.channel is not Channel.RELEASE or spec.cuda is not None:
                raise EnvironmentFailed(f"{error} ({MIRROR_HINT})") from None
            progress(f"{error}: taking PyPI's build instead (CUDA on Linux, ~10x a CPU build; {MIRROR_HINT})")
            source = TorchSource(Channel.RELEASE, None, None, listed=False)
    elif source.note:
        progress(source.note)
    return _from_installer(spec, root, installer, progress)


def _ready(request: EnvRequest, root: Path) -> bool:
    return why_not_ready(envs_dir(root) / request.key) is None


def _from_listing(
    spec: TargetSpec, source: TorchSource, root: Path, progress: ProgressFn, seams: IndexSeams
) -> EnvRequest:
    assert source.index_url is not None
    from_folder = source.index_url == spec.find_links  # a mirror given as --find-links is passed as one
    torch_index = None if from_folder or source.index_url == spec.index_url else source.index_url
    found: dict[str, str | None] = {"cuda": source.variant, "torch_index": torch_index}
    asked = spec.torch
    # an exact version already built needs no listing: offline, a bisection's steps, a second replay
    if asked is not None and is_exact(asked) and "+" not in asked:
        draft = request_for(spec, asked, **found)
        if _ready(draft, root):
            _say(progress, source, f"torch {asked}", None)
            return draft
    try:
        listing = seams.read(source.index_url)
    except IndexUnreachable:
        cached = _newest_cached(spec, found, root) if source.channel is Channel.NIGHTLY and asked is None else None
        if cached is None:
            raise
        progress(f"the nightly index cannot be read; using the newest nightly env already built, torch {cached}")
        return request_for(spec, cached, **found)
    python_version = python_version_of(spec.python)
    builds = listing.installable(python_version)
    build, notes = _choose(spec, source, builds, listing, python_version, seams)
    for note in notes:
        progress(note)
    request = request_for(
        spec, build.public, **found, torch_file=build.filename, torch_url=None if build.listed else build.url
    )
    _say(progress, source, f"torch {build.public}", build)
    return request


def _choose(
    spec: TargetSpec,
    source: TorchSource,
    builds: list[Build],
    listing: Listing,
    python_version: str,
    seams: IndexSeams,
) -> tuple[Build, tuple[str, ...]]:
    asked = spec.torch
    where = f"{listing.location} (python {python_version})"
    if source.channel is Channel.NIGHTLY:
        if asked is not None and not is_date(asked):  # an exact dev version: its date's build, that version
            wanted = asked.split("+", 1)[0]
            listed = [b for b in builds if b.public == wanted]
            if listed:
                return max(listed), ()
            dated = nightly_on(builds, _date_of(wanted), exists=seams.exists, lookback=0)
            if dated.build.public != wanted:
                raise EnvironmentFailed(f"no nightly torch {wanted} at {where}")
            return dated.build, dated.notes
        dated = nightly_on(builds, parse_date(asked) if asked else None, exists=seams.exists)
        return dated.build, dated.notes
    if asked is not None and not is_exact(asked) and not is_release_prefix(asked):
        raise EnvironmentFailed(f"not a torch version: {asked!r} (try 2.5.1 or 2.13)")
    chosen = newest_release(builds, asked)
    if chosen is None:
        shown = ", ".join(sorted({b.public for b in builds if not b.version.is_devrelease}, reverse=True)[:8])
        raise EnvironmentFailed(f"no torch {asked or 'release'} at {where}" + (f": it has {shown}" if shown else ""))
    return chosen, ()


def _date_of(version: str) -> dt.date:
    date = nightly_date(version)
    if date is None:
        raise EnvironmentFailed(f"not a nightly version: {version!r} (expected 2.14.0.dev20260105)")
    return date


def _say(progress: ProgressFn, source: TorchSource, what: str, build: Build | None) -> None:
    """One line: which build, from where, and why this variant."""
    origin = f" ({build.filename})" if build is not None else ""
    progress(f"{what}{origin}: " + (source.note or f"the {source.variant or 'default'} build"))


def _newest_cached(spec: TargetSpec, found: dict[str, str | None], root: Path) -> str | None:
    """Offline fallback: the newest complete env that fits the request apart from its torch."""
    draft = request_for(spec, "0", **found)
    versions = []
    for env in list_envs(root):
        request = (env.marker or {}).get("request")
        if isinstance(request, dict) and draft.matches_apart_from_torch(request):
            versions.append(str(request.get("torch")))
    if spec.channel is Channel.NIGHTLY:
        ordered = sort_versions(versions)
        return ordered[-1] if ordered else None
    return pick_newest(versions, spec.torch)


def _from_installer(spec: TargetSpec, root: Path, installer: str, progress: ProgressFn) -> EnvRequest:
    """PyPI's build, or the user's own index or folder: the installer resolves a prefix, as pip would."""
    requested = spec.torch
    if requested and is_exact(requested):
        return request_for(spec, requested)
    if requested and not is_release_prefix(requested):
        raise EnvironmentFailed(f"not a torch version: {requested!r} (try 2.5.1 or 2.13)")
    draft = request_for(spec, requested or "latest")
    progress(f"resolving torch {requested or 'latest'} …")
    try:
        version = resolve_torch_version(draft, requested, root, installer)
    except EnvironmentFailed as error:
        cached = _newest_cached(spec, {"cuda": spec.cuda}, root)
        if cached is None:
            raise
        progress(f"{error}; using the newest cached match, torch {cached}")
        return request_for(spec, cached)
    progress(f"torch {requested or 'latest'} is {version}")
    return request_for(spec, version)
