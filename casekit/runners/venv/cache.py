"""The cache of managed environments: ``$CASEKIT_CACHE/envs/<key>``, one folder per exact request.

The key is readable and exact: ``torch-2.5.1-cu124-py3.11-1a2b3c4d``. A folder
is complete when its marker ``casekit-env.json`` is there (written last by a
build); a folder without it, or whose python is gone, is half-built or broken.
Reuse costs two stat calls.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from casekit import settings
from casekit.errors import CasekitError
from casekit.fsutil import UnreadableFile, exclusive_lock, read_regular_bytes, shared_lock, write_atomic
from casekit.runners.interface import ProgressFn

MARKER = "casekit-env.json"
BROKEN_NOTE = "casekit-env.broken"
ENV_SCHEMA = "casekit.env/1"
USED_SUFFIX = ".used"  # <key>.used beside the env: its mtime is the env's last use
DOWNLOADS_LOCK = "downloads.lock"  # builds hold it shared, `envs prune` exclusive, around the download caches
MAX_NOTE_BYTES = 1 << 20  # the completion marker and the broken note: a few hundred bytes
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

__all__ = [
    "BROKEN_NOTE",
    "ENV_SCHEMA",
    "MARKER",
    "CachedEnv",
    "EnvRequest",
    "envs_dir",
    "list_envs",
    "mark_broken",
    "read_marker",
    "prune_envs",
    "remove_env",
    "why_not_ready",
]


def envs_dir(root: Path | None = None) -> Path:
    """<cache>/envs ($CASEKIT_CACHE, or ~/.cache/casekit)."""
    return settings.envs_root(root)


@dataclass(frozen=True)
class EnvRequest:
    """The exact identity of one managed environment (torch already resolved)."""

    python: str | None  # as asked: None (casekit's own), "3.11", or an interpreter path
    python_version: str  # "3.11": the readable part of the key
    torch: str  # an exact version: "2.5.1", "2.14.0.dev20260105" (the build label is the variant's)
    cuda: str | None = None  # the variant: "cpu", "cu124"; None: the index's default build (PyPI's)
    index_url: str | None = None  # the user's --index-url
    find_links: str | None = None
    extra_packages: tuple[str, ...] = ()
    channel: str = "release"  # a casekit.runners.torch_source.request.Channel value
    torch_index: str | None = None  # the channel's index for the variant, read by casekit (PyTorch's layout)
    # how this build was found; not part of the identity (the same build, listed or not, is one env)
    torch_file: str | None = None  # the wheel chosen from the listing: "torch-2.13.0+cpu-cp311-…whl"
    torch_url: str | None = None  # its URL, when the listing no longer shows it (installed by URL)

    @property
    def effective_index_url(self) -> str | None:
        """The index torch comes from: the one given, the channel's, else PyTorch's index for the CUDA tag."""
        if self.index_url:
            return self.index_url
        if self.torch_index:
            return self.torch_index
        return settings.pytorch_index_url(self.cuda) if self.cuda else None

    @property
    def torch_requirement(self) -> str:
        """What the installer is asked for: the exact build of the listing, its URL when hidden, else the version."""
        if self.torch_url:
            return f"torch @ {self.torch_url}"
        if self.torch_file:
            return f"torch=={self.torch_file.split('-', 2)[1]}"  # with its build label: only that file matches
        return f"torch=={self.torch}"

    @property
    def key(self) -> str:
        """'torch-2.5.1-cu124-py3.11-1a2b3c4d': readable prefix, hash of every field that names the build."""
        fields: dict[str, object] = {
            "python": self.python,
            "python_version": self.python_version,
            "torch": self.torch,
            "cuda": self.cuda,
            "index_url": self.effective_index_url,
            "find_links": self.find_links,
            "extra_packages": sorted(self.extra_packages),
        }
        if self.channel not in ("release", "pypi"):  # so the envs built before channels keep their keys
            fields["channel"] = self.channel
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
        parts = [f"torch-{self.torch}"] + ([self.cuda] if self.cuda else []) + [f"py{self.python_version}", digest]
        return re.sub(r"[^A-Za-z0-9._+-]", "_", "-".join(parts))

    def matches_apart_from_torch(self, other: Mapping[str, object]) -> bool:
        found = ("torch", "torch_file", "torch_url")
        mine = {k: v for k, v in asdict(self).items() if k not in found}
        theirs = {k: v for k, v in dict(other).items() if k not in found}
        theirs["extra_packages"] = tuple(theirs.get("extra_packages") or ())  # type: ignore[arg-type]
        theirs.setdefault("channel", "release")
        theirs.setdefault("torch_index", None)
        return mine == theirs


@dataclass(frozen=True)
class CachedEnv:
    """One folder under envs/: complete when its marker is there."""

    key: str
    path: Path
    marker: dict[str, object] | None

    @property
    def complete(self) -> bool:
        return self.marker is not None

    @property
    def python_executable(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def torch(self) -> str | None:
        value = (self.marker or {}).get("torch")
        return value if isinstance(value, str) else None


def list_envs(root: Path | None = None) -> list[CachedEnv]:
    """Every env folder in the cache, complete or not (build leftovers and links excluded), by key."""
    folder = envs_dir(root)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and not path.is_symlink() and ".tmp-" not in path.name and ".old-" not in path.name:
            found.append(CachedEnv(path.name, path, read_marker(path)))
    return found


@contextlib.contextmanager
def _cache_folder(base: Path, name: str | None = None) -> Iterator[int | None]:
    """A descriptor of the cache's real folder (or of its child `name`), opened through no link below the
    cache root: everything deleted is deleted through it, so nothing outside the cache's real path
    can be. None when it does not exist; one CasekitError line when `name` is a link or not a folder."""
    real = os.path.realpath(base)  # the cache root itself may be the user's link ($CASEKIT_CACHE)
    try:
        root_fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        root_fd = None
    if root_fd is None or name is None:
        try:
            yield root_fd
        finally:
            if root_fd is not None:
                os.close(root_fd)
        return
    try:
        fd = _open_folder(name, root_fd, real)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)
    finally:
        os.close(root_fd)


def _open_folder(name: str, parent_fd: int, parent: str) -> int | None:
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return None
    except OSError:
        where = os.path.join(parent, name)
        if os.path.islink(where):
            raise CasekitError(
                f"{where} is a symbolic link (to {os.readlink(where)}): casekit deletes nothing through a link; "
                f"point CASEKIT_CACHE at the real cache, or remove the link"
            ) from None
        raise CasekitError(f"{where} is not a folder: remove it, or point CASEKIT_CACHE elsewhere") from None


def _link_note(name: str, folder_fd: int) -> str:
    """Remove a link found in the cache as a link, never what it points at; the line that says so."""
    target = os.readlink(name, dir_fd=folder_fd)
    os.unlink(name, dir_fd=folder_fd)
    return f"envs/{name} was a symbolic link (to {target}): removed the link only, not what it points at"


def _entry_mode(name: str, folder_fd: int) -> int | None:
    try:
        return os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def remove_env(key: str, root: Path | None = None, progress: ProgressFn | None = None) -> str | None:
    """Delete one cached env (waits for a build of it to finish first); through no link, and only inside
    the cache's real path. An entry that is a link is removed as a link: the line saying so is returned."""
    if not key or "/" in key or key.startswith(".") or key != Path(key).name:
        raise CasekitError(f"not an env key: {key!r}")
    base = root or settings.cache_root()
    folder = envs_dir(base)
    say = progress or (lambda _line: None)
    with _cache_folder(base, folder.name) as envs:
        mode = None if envs is None else _entry_mode(key, envs)
        if envs is None or mode is None or not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            raise CasekitError(f"no cached env {key} in {folder}")
        if stat.S_ISLNK(mode):
            return _link_note(key, envs)
        with exclusive_lock(
            folder / f"{key}.lock", on_wait=lambda: say(f"waiting for another casekit process building {key} …")
        ):
            try:
                shutil.rmtree(key, dir_fd=envs)  # refuses a link swapped in meanwhile; never follows one inside
            except OSError as error:
                raise CasekitError(f"cannot remove {folder / key}: {error.strerror or error}") from None
        for suffix in (".build.log", USED_SUFFIX):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                os.unlink(f"{key}{suffix}", dir_fd=envs)  # a link here goes as a link
    return None


def read_marker(path: Path) -> dict[str, object] | None:
    try:
        marker = json.loads(read_regular_bytes(path / MARKER, MAX_NOTE_BYTES))
    except (OSError, ValueError, UnreadableFile):
        return None
    return marker if isinstance(marker, dict) and marker.get("schema") == ENV_SCHEMA else None


def why_not_ready(path: Path) -> str | None:
    """None when the env can be used as is; else why not (cheap: no torch import)."""
    if not path.is_dir():
        return "missing"
    if os.path.lexists(path / BROKEN_NOTE):
        try:
            note = read_regular_bytes(path / BROKEN_NOTE, MAX_NOTE_BYTES).decode("utf-8", "replace").strip()
        except (OSError, UnreadableFile):
            note = ""
        return note or "marked broken"
    if read_marker(path) is None:
        return "no completion marker: a build did not finish"
    if not (path / "bin" / "python").exists():  # exists() follows the link to the base interpreter
        return "its python is missing"
    return None


def mark_broken(path: Path, reason: str) -> None:
    """Make the next prepare() rebuild this env."""
    write_atomic(path / BROKEN_NOTE, reason + "\n")
    (path / MARKER).unlink(missing_ok=True)


# ------------------------------------------------------------------ bytecode


def site_folders(path: Path) -> list[Path]:
    """The site-packages folders of an env."""
    return sorted(path.glob("lib/python*/site-packages"))


def bytecode_counts(path: Path) -> dict[str, int]:
    """How many of torch's modules in an env have bytecode for the env's Python ({"py": N, "pyc": M})."""
    py = pyc = 0
    for site in site_folders(path):
        tag = f"cpython-{site.parent.name.removeprefix('python').replace('.', '')}"
        for folder, _dirs, files in os.walk(site / "torch"):
            if os.path.basename(folder) == "__pycache__":
                pyc += sum(1 for name in files if name.endswith(".pyc") and f".{tag}." in name)
            else:
                py += sum(1 for name in files if name.endswith(".py"))
    return {"py": py, "pyc": pyc}


def lacks_bytecode(path: Path) -> bool:
    """An env whose torch has no bytecode (built before casekit compiled it): cheap, two stat calls."""
    for site in site_folders(path):
        init = site / "torch" / "__init__.py"
        if init.is_file():
            tag = f"cpython-{site.parent.name.removeprefix('python').replace('.', '')}"
            return not (site / "torch" / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    return False


def installed_wheel_name(path: Path, dist: str) -> str | None:
    """The wheel file an installed distribution came from, rebuilt from its dist-info (name, version, tag)."""
    for site in site_folders(path):
        for info in sorted(site.glob(f"{dist}-*.dist-info")):
            version = info.name.removesuffix(".dist-info").split("-", 1)[1]
            try:
                lines = (info / "WHEEL").read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            tags = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Tag:")]
            if tags:
                return f"{dist}-{version}-{tags[0]}.whl"
    return None


# ------------------------------------------------------------------ use and size


def mark_used(path: Path) -> None:
    """Record that an env was used now (its <key>.used file's mtime)."""
    used = path.parent / f"{path.name}{USED_SUFFIX}"
    try:
        used.touch()
        os.utime(used)
    except OSError:
        pass  # a read-only cache still runs; the env only looks older


def last_used(env: CachedEnv) -> dt.datetime | None:
    """When an env was last used (or built, for one never used since); None when nothing says."""
    for candidate in (env.path.parent / f"{env.key}{USED_SUFFIX}", env.path / MARKER, env.path):
        try:
            return dt.datetime.fromtimestamp(candidate.stat().st_mtime, dt.UTC)
        except OSError:
            continue
    return None


@dataclass
class DiskUsage:
    """Bytes on disk under some folders, each file counted once however many links it has."""

    total: int = 0  # every inode met
    own: int = 0  # inodes with no link outside what was walked (what removing it all frees)
    files: int = 0


def disk_usage(roots: Iterable[Path], seen: set[tuple[int, int]] | None = None) -> DiskUsage:
    """Allocated bytes (st_blocks) under `roots`, never following a link; hard links counted once.

    uv hardlinks envs into its cache, so an env's own cost can be a few MB beside its apparent GBs."""
    seen = set() if seen is None else seen
    usage = DiskUsage()
    links_met: dict[tuple[int, int], tuple[int, int]] = {}  # inode -> (links met, links it has), bytes
    sizes: dict[tuple[int, int], int] = {}
    for root in roots:
        stack = [root]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    stack.append(Path(entry.path))
                inode = (info.st_dev, info.st_ino)
                # a folder's link count is its children's '..': it has no hard link elsewhere, it is one entry
                met, links = links_met.get(inode, (0, 1 if stat.S_ISDIR(info.st_mode) else info.st_nlink))
                links_met[inode] = (met + 1, links)
                if inode in seen:
                    continue
                seen.add(inode)
                sizes[inode] = info.st_blocks * 512
                usage.total += sizes[inode]
                usage.files += 1
    usage.own = sum(size for inode, size in sizes.items() if links_met[inode][0] >= links_met[inode][1])
    return usage


@contextlib.contextmanager
def downloads_lock(root: Path, *, shared: bool, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Builds read the download caches under a shared lock; `envs prune` clears them under an exclusive one."""
    lock = (shared_lock if shared else exclusive_lock)(root / DOWNLOADS_LOCK, on_wait, "the download caches")
    with lock:
        yield


# ------------------------------------------------------------------ pruning


@dataclass
class PruneResult:
    """What `envs prune` removed and what that freed: bytes on disk under the cache root and the user's own
    download caches (where casekit's envs may hardlink), before and after, each file once."""

    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    caches_cleared: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # one line per link found in envs/, removed as a link
    caches_left: list[tuple[settings.DownloadCache, int]] = field(default_factory=list)  # the user's, with their bytes
    before: int = 0
    after: int = 0
    own_before: int = 0  # of `before`, the files with no link outside what was measured (what removing can free)
    own_after: int = 0

    @property
    def freed(self) -> int:
        """What really went: a file an env shares with a cache that stays (the user's uv cache) is not freed."""
        return max(0, self.own_before - self.own_after)


def measured_roots(base: Path) -> list[Path]:
    """Where casekit's envs and downloads take disk: the cache root, and the user's own download caches
    elsewhere (uv hardlinks an env's files into its cache wherever that is)."""
    roots = [base]
    for cache in settings.download_caches(base):
        if not cache.own and cache.path.is_dir() and not cache.path.resolve().is_relative_to(base.resolve()):
            roots.append(cache.path)
    return roots


AGE_UNITS = {"w": 604800, "d": 86400, "h": 3600, "min": 60, "m": 60, "s": 1}


def parse_age(text: str) -> dt.timedelta:
    """'30d', '12h', '90min', '2w', '1.5d' as a timedelta; a CasekitError for anything else."""
    stripped = text.strip()
    for unit, scale in AGE_UNITS.items():
        number = stripped.removesuffix(unit)
        if number != stripped and number.replace(".", "", 1).isdigit():
            return dt.timedelta(seconds=float(number) * scale)
    raise CasekitError(f"--older-than takes an age such as 30d, 12h or 2w, not {text!r}")


def select_for_pruning(
    envs: list[CachedEnv],
    *,
    older_than: dt.timedelta | None = None,
    keep: int | None = None,
    everything: bool = False,
    now: dt.datetime | None = None,
) -> list[CachedEnv]:
    """The envs to remove: all, or those both beyond the `keep` most recently used and unused for `older_than`."""
    if everything:
        return list(envs)
    if older_than is None and keep is None:
        raise CasekitError("envs prune: say what to remove: --older-than AGE, --keep N or --all")
    epoch = dt.datetime.fromtimestamp(0, dt.UTC)
    newest_first = sorted(envs, key=lambda env: last_used(env) or epoch, reverse=True)
    candidates = newest_first[keep:] if keep is not None else newest_first
    if older_than is not None:
        cutoff = (now or dt.datetime.now(dt.UTC)) - older_than
        candidates = [env for env in candidates if (last_used(env) or epoch) < cutoff]
    return candidates


def prune_envs(
    root: Path | None = None,
    *,
    older_than: dt.timedelta | None = None,
    keep: int | None = None,
    everything: bool = False,
    dry_run: bool = False,
    progress: ProgressFn | None = None,
) -> PruneResult:
    """Remove the chosen envs and clear casekit's download caches (uv's and pip's under the cache root).

    The caches go whatever is kept: an env kept holds its own links to what it uses, so clearing them
    frees only what no kept env uses; the next build downloads again. A cache the user named
    (UV_CACHE_DIR) stays. Bytes are measured on disk under the cache root and the user's caches, each
    file once, before and after: what is freed is what no remaining file still links."""
    base = root or settings.cache_root()
    say = progress or (lambda _line: None)
    with _cache_folder(base, envs_dir(base).name) as envs:  # refuses an envs/ that is a link, before anything
        links = _links_in(envs)
        chosen = select_for_pruning(list_envs(base), older_than=older_than, keep=keep, everything=everything)
        measured = disk_usage(measured_roots(base))
        result = PruneResult(before=measured.total, own_before=measured.own)
        result.kept = [env.key for env in list_envs(base) if env.key not in {c.key for c in chosen}]
        if dry_run:
            result.removed = [env.key for env in chosen]
            result.links = [f"envs/{name} is a symbolic link: would remove the link only" for name in links]
            result.after, result.own_after = result.before, result.own_before  # nothing was removed
            return result
        for env in chosen:
            remove_env(env.key, base, say)
            result.removed.append(env.key)
        if envs is not None:
            result.links = [_link_note(name, envs) for name in links]
            _remove_leftovers(envs, envs_dir(base), say)
    _clear_download_caches(base, result, say)
    measured = disk_usage(measured_roots(base))
    result.after, result.own_after = measured.total, measured.own
    return result


def _links_in(folder_fd: int | None) -> list[str]:
    """The names in envs/ that are symbolic links (none of them an env casekit built)."""
    if folder_fd is None:
        return []
    return sorted(entry.name for entry in os.scandir(folder_fd) if entry.is_symlink())


def _clear_download_caches(base: Path, result: PruneResult, say: ProgressFn) -> None:
    """casekit's own uv and pip caches under the cache's real folder, through no link (a link there is left
    alone). A cache the user named (UV_CACHE_DIR, PIP_CACHE_DIR) is theirs: left, and measured for the line."""
    with (
        downloads_lock(
            base, shared=False, on_wait=lambda: say("waiting for a build to finish with the download caches …")
        ),
        _cache_folder(base) as root_fd,
    ):
        for cache in settings.download_caches(base):
            if not cache.own:
                if cache.path.is_dir():
                    result.caches_left.append((cache, disk_usage([cache.path]).total))
                continue
            mode = None if root_fd is None else _entry_mode(cache.path.name, root_fd)
            if root_fd is None or mode is None or not stat.S_ISDIR(mode):
                continue
            with contextlib.suppress(OSError):  # what cannot go stays, as before; the sizes say what was freed
                shutil.rmtree(cache.path.name, dir_fd=root_fd)
            result.caches_cleared.append(str(cache.path))


def _remove_leftovers(envs: int, folder: Path, say: ProgressFn) -> None:
    """What killed builds left (<key>.tmp-*, <key>.old-*) when no build holds their lock, and the logs
    and use stamps of envs that are gone (never a lock file: a build may be waiting on it); through the
    envs folder's descriptor, never following a link."""
    entries = {entry.name: entry for entry in os.scandir(envs)}
    present = {name for name, entry in entries.items() if entry.is_dir(follow_symlinks=False) and ".tmp-" not in name}
    for name, entry in sorted(entries.items()):
        for mark in (".tmp-", ".old-"):
            if mark in name and entry.is_dir(follow_symlinks=False):
                key = name.split(mark, 1)[0]
                with exclusive_lock(
                    folder / f"{key}.lock", on_wait=functools.partial(say, f"waiting for the build of {key} …")
                ):
                    shutil.rmtree(name, dir_fd=envs, ignore_errors=True)
        for suffix in (".build.log", USED_SUFFIX):
            if (
                name.endswith(suffix)
                and entry.is_file(follow_symlinks=False)
                and name.removesuffix(suffix) not in present
            ):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=envs)
