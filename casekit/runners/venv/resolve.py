"""From a target's `--torch`/`--cuda` to the exact env request: the channel's index, the variant, the build.

Where torch comes from is `casekit.runners.torch_source`; this module asks it, and the env cache, in
order: an exact request whose env is already built needs no network at all; a channel with variants
(release, nightly, test) is read from PyTorch's index for the variant (or a mirror), so casekit knows
which build a prefix, a date or "latest" means; PyPI's builds, and the user's own `--index-url` /
`--find-links` for releases, are resolved by the installer. When PyTorch's index cannot be read, an
env built before from it still serves; only when a build is about to come from PyPI instead does the
user hear that it will.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from casekit.errors import EnvironmentFailed
from casekit.runners.interface import ProgressFn, TargetSpec
from casekit.runners.torch_source import index
from casekit.runners.torch_source.builds import Build
from casekit.runners.torch_source.index import IndexUnreachable, Listing
from casekit.runners.torch_source.pick import choose_build, newest_release
from casekit.runners.torch_source.request import Channel, ask_for, is_exact, pick_newest, variant_asked
from casekit.runners.torch_source.source import TorchSource, choose_source
from casekit.runners.venv.cache import EnvRequest, envs_dir, list_envs, why_not_ready
from casekit.runners.venv.install import python_version_of, request_for, resolve_torch_version
from casekit.versions import sort_versions, without_local

MIRROR_HINT = "CASEKIT_TORCH_INDEX=URL names a mirror of PyTorch's index, --find-links DIR a folder of wheels"
PYPI_FALLBACK = "taking PyPI's build instead (CUDA on Linux, ~10x a CPU build; " + MIRROR_HINT + ")"


def _read_listing(location: str, links: bool) -> Listing:
    return index.read_listing(location, links=links)


@dataclass(frozen=True)
class IndexSeams:
    """How listings are read and hidden files looked for (tests pass fakes; the real ones read HTTP)."""

    read: Callable[[str, bool], Listing] = _read_listing  # (location, a find-links location?)
    exists: Callable[[str], bool] = index.exists
    gpu_here: bool | None = None  # None: look at this host


def resolve_request(
    spec: TargetSpec, root: Path, installer: str, progress: ProgressFn, seams: IndexSeams | None = None
) -> EnvRequest:
    """The exact env request for a venv target, saying in one line which build it is and why."""
    seams = seams or IndexSeams()
    cuda = variant_asked(spec.channel, spec.torch, spec.cuda)
    source = choose_source(
        spec.channel, cuda, index_url=spec.index_url, find_links=spec.find_links, gpu_here=seams.gpu_here
    )
    if not source.listed:
        if source.note:
            progress(source.note)
        return _from_installer(spec, root, installer, progress)
    try:
        return _from_listing(spec, source, root, progress, seams)
    except IndexUnreachable as error:
        if source.channel is not Channel.RELEASE or cuda is not None:
            raise EnvironmentFailed(f"{error} ({MIRROR_HINT})") from None
        built = _cached_build(spec, source, root)
        if built is not None:
            progress(f"{error}; reusing the {source.variant} env built before from it, torch {built.torch}")
            return built
        request = _from_installer(spec, root, installer, progress)
        if not _ready(request, root) and not _in_find_links(request):
            progress(f"{error}: {PYPI_FALLBACK}")  # said only when PyPI's build is about to be downloaded
        return request


def _ready(request: EnvRequest, root: Path) -> bool:
    return why_not_ready(envs_dir(root) / request.key) is None


def _found(spec: TargetSpec, source: TorchSource) -> dict[str, str | None]:
    """The variant and the index an env request records for this source (beside the user's own)."""
    assert source.index_url is not None
    from_folder = source.links  # a mirror given as --find-links is passed as one
    torch_index = None if from_folder or source.index_url == spec.index_url else source.index_url
    return {"cuda": source.variant, "torch_index": torch_index}


def _from_listing(
    spec: TargetSpec, source: TorchSource, root: Path, progress: ProgressFn, seams: IndexSeams
) -> EnvRequest:
    assert source.index_url is not None
    found = _found(spec, source)
    asked = spec.torch
    # an exact version already built needs no listing: offline, a bisection's steps, a second replay
    if asked is not None and is_exact(asked) and "+" not in asked:
        draft = request_for(spec, asked, **found)
        if _ready(draft, root):
            _say(progress, source, f"torch {asked}", None)
            return draft
    try:
        listing = seams.read(source.index_url, source.links)
    except IndexUnreachable:
        cached = _newest_cached(spec, found, root) if source.channel is Channel.NIGHTLY and asked is None else None
        if cached is None:
            raise
        progress(f"the nightly index cannot be read; using the newest nightly env already built, torch {cached}")
        return request_for(spec, cached, **found)
    python_version = python_version_of(spec.python)
    where = f"{listing.location} (python {python_version})"
    build, notes = choose_build(
        source.channel, asked, listing.installable(python_version), where, exists=seams.exists
    )
    for note in notes:
        progress(note)
    request = request_for(
        spec, build.public, **found, torch_file=build.filename, torch_url=None if build.listed else build.url
    )
    _say(progress, source, f"torch {build.public}", build)
    return request


def _say(progress: ProgressFn, source: TorchSource, what: str, build: Build | None) -> None:
    """One line: which build, from where, and why this variant."""
    origin = f" ({build.filename})" if build is not None else ""
    progress(f"{what}{origin}: " + (source.note or f"the {source.variant or 'default'} build"))


def _cached_build(spec: TargetSpec, source: TorchSource, root: Path) -> EnvRequest | None:
    """The newest complete env built before from this source that the request admits (the index unread)."""
    found = _found(spec, source)
    version = _newest_cached(spec, found, root)
    if version is None:
        return None
    draft = request_for(spec, version, **found)
    for env in list_envs(root):
        if env.key == draft.key and env.complete:
            return draft
    return None


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
    return pick_newest(versions, without_local(spec.torch) if spec.torch else None)  # the variant is in `found`


def _in_find_links(request: EnvRequest) -> bool:
    """Whether the request's --find-links folder holds a torch wheel it admits for its python (the
    installer takes it there: nothing comes from PyPI)."""
    if not request.find_links:
        return False
    try:
        listing = index.read_listing(request.find_links, links=True)
    except index.IndexUnreadable:
        return False
    return newest_release(listing.installable(request.python_version), request.torch) is not None


def _from_installer(spec: TargetSpec, root: Path, installer: str, progress: ProgressFn) -> EnvRequest:
    """PyPI's build, or the user's own index or folder: the installer resolves a prefix, as pip would."""
    requested = spec.torch
    if requested and is_exact(requested):
        return request_for(spec, requested)
    ask_for(requested)  # a request that is no version is refused here, in one line
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
