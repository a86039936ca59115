"""File mechanics used everywhere: the atomic writer, an inter-process lock, bounded reads, a tail."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from casekit.errors import CasekitError

# The one path that means "standard output" (`--json -`, `--out -`): nothing is written for it.
STDOUT = Path("-")

_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, *, durable: bool = True, executable: bool = False
) -> None:
    """Write then rename: readers and interrupted runs see the old file or the new one, never half.

    casekit's one writer for files others read (bundles, documents, reports, caches). The
    temporary file sits beside the target, so the rename is atomic; its name is fresh and
    random, made with O_EXCL and O_NOFOLLOW, so nothing planted there is written through.
    It is made as open() makes a file (0666 less the umask: 0644 under 022), never
    mkstemp's 0600. `durable` fsyncs it before the rename, so a crash cannot leave an
    empty file under the final name; derived files that can always be written again
    (a report's pages) pass False and skip the cost. `executable`: 0777 less the umask (a job script).
    """
    target = os.fspath(path)
    folder, name = os.path.split(target)
    tmp, fd = _new_temporary(folder, name, 0o777 if executable else 0o666)
    try:
        try:
            view = memoryview(data.encode("utf-8") if isinstance(data, str) else data)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _new_temporary(folder: str, name: str, mode: int = 0o666) -> tuple[str, int]:
    """A file of a fresh random name beside `name`, opened for writing; the folder made if missing."""
    for _ in range(100):  # a name taken (a leftover, something planted) is passed over, never opened
        tmp = os.path.join(folder, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            return tmp, os.open(tmp, _TEMP_FLAGS, mode)
        except FileExistsError:
            continue
        except FileNotFoundError:  # the folder is new: made once here, not checked before every write
            os.makedirs(folder, exist_ok=True)
            return tmp, os.open(tmp, _TEMP_FLAGS, mode)
    raise FileExistsError(f"no free temporary name beside {os.path.join(folder, name)}")


@contextmanager
def exclusive_lock(
    lock_path: Path, on_wait: Callable[[], None] | None = None, what: str | None = None
) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path` (created if needed) for the block.

    `on_wait` is called once when another process holds it, before blocking,
    so a caller can say what it waits for. The kernel releases the lock when
    the descriptor closes, even if the process dies.
    """
    with _flock(lock_path, fcntl.LOCK_EX, on_wait, what):
        yield


@contextmanager
def shared_lock(lock_path: Path, on_wait: Callable[[], None] | None = None, what: str | None = None) -> Iterator[None]:
    """Hold a shared flock on `lock_path` for the block: many holders at once, none while an exclusive one is held."""
    with _flock(lock_path, fcntl.LOCK_SH, on_wait, what):
        yield


@contextmanager
def _flock(lock_path: Path, mode: int, on_wait: Callable[[], None] | None, what: str | None) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:  # never through a symlink (it could point anywhere), never a FIFO or a device
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise CasekitError(f"cannot lock {what or lock_path}: {lock_path}: {_lock_problem(lock_path, error)}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CasekitError(f"cannot lock {what or lock_path}: {lock_path} is not a regular file (remove it)")
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


class UnreadableFile(Exception):
    """A file casekit will not read, with the reason as a phrase ("is a symbolic link", ...)."""


def read_regular_bytes(path: Path, limit: int, follow_symlinks: bool = False, single_link: bool = False) -> bytes:
    """The bytes of a regular file of at most `limit` bytes: the one way casekit reads untrusted files.

    Never follows a symlink unless asked (a bundle or a result must not point elsewhere), never blocks
    on a FIFO (O_NONBLOCK, then fstat refuses it), never reads more than `limit` + 1 bytes; with
    `single_link`, refuses a file with more than one name (a hard link can be any file of the disk).
    FileNotFoundError when absent; UnreadableFile(reason) for everything else.
    """
    return read_regular_file(path, limit, follow_symlinks, single_link)[0]


def read_regular_file(
    path: Path, limit: int, follow_symlinks: bool = False, single_link: bool = False
) -> tuple[bytes, os.stat_result]:
    """`read_regular_bytes`, and the fstat of the very file read (its size and mtime go with these bytes)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as failure:
        if not follow_symlinks and os.path.islink(path):
            raise UnreadableFile("is a symbolic link (casekit reads only regular files)") from None
        raise UnreadableFile(f"cannot be read: {failure.strerror or failure}") from None
    return _read_open(fd, limit, single_link)


def _read_open(fd: int, limit: int, single_link: bool = False) -> tuple[bytes, os.stat_result]:
    """Read the file open as `fd` (closed here) as `read_regular_file` does."""
    try:
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):
            raise UnreadableFile("is a folder, not a file")
        if not stat.S_ISREG(status.st_mode):
            raise UnreadableFile("is not a regular file (a device or FIFO?)")
        if single_link and status.st_nlink > 1:
            raise UnreadableFile(
                f"is a hard link (one of {status.st_nlink} names of one file; casekit follows no link)"
            )
        if status.st_size > limit:  # refused from its size: a sparse 3 GB file is not read at all
            raise UnreadableFile(f"is over the {limit} byte limit")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as failure:
        raise UnreadableFile(f"cannot be read: {failure.strerror or failure}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise UnreadableFile(f"is over the {limit} byte limit")
    return b"".join(chunks), status


def gunzip_bounded(data: bytes, limit: int) -> bytes:
    """The bytes gzip `data` holds (every member, as gzip reads them), refused as soon as they pass
    `limit`: a 17 MB file can inflate to 4 GB, and only `limit` + 1 bytes of it are ever made.
    UnreadableFile(reason) for too much, a truncated file, or something that is not gzip."""
    chunks: list[bytes] = []
    size = 0
    rest = data
    while rest:
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)  # gzip's header and trailer
        pending = rest
        try:
            while True:
                chunk = inflater.decompress(pending, limit + 1 - size)  # never 0 here: that would mean "all"
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise UnreadableFile(f"decompresses to more than the {limit} byte limit")
                pending = inflater.unconsumed_tail
                if inflater.eof or not (pending or chunk):  # all in; asked again until zlib holds nothing back
                    break
        except zlib.error as error:
            raise UnreadableFile(f"is not valid gzip data: {error}") from None
        if not inflater.eof:
            raise UnreadableFile("is a truncated gzip file")
        rest = inflater.unused_data.lstrip(b"\0")  # gzip pads members with zeros on some tapes
    return b"".join(chunks)


def json_too_deep(data: Any, limit: int) -> tuple[Any, ...] | None:
    """The path to the first value of parsed JSON nested deeper than `limit`, or None (a loop, not
    recursion, so a value too deep to recurse over is still measured)."""
    pending: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while pending:
        value, where = pending.pop()
        if len(where) > limit:
            return where
        if isinstance(value, dict):
            pending += [(child, (*where, key)) for key, child in value.items()]
        elif isinstance(value, list):
            pending += [(child, (*where, index)) for index, child in enumerate(value)]
    return None


class NestedTooDeep(ValueError):
    """JSON nested deeper than its reader allows."""


def loads_bounded(text: str | bytes, depth: int) -> Any:
    """JSON with at most `depth` levels of nesting: NestedTooDeep past it, ValueError for what is not
    JSON; never a RecursionError from a value nested 100,000 deep."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise NestedTooDeep(f"is nested deeper than {depth} levels") from None
    if json_too_deep(data, depth) is not None:
        raise NestedTooDeep(f"is nested deeper than {depth} levels")
    return data


def _lock_problem(lock: Path, error: OSError) -> str:
    if lock.is_symlink():
        return "it is a symbolic link (remove it; casekit makes a plain lock file)"
    return error.strerror or str(error)


def tail_text(path: Path, limit: int = 8000, start: int = 0) -> str:
    """At most the last `limit` bytes of a file from offset `start` on, decoded leniently; "" if unreadable."""
    try:
        with open(path, "rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            handle.seek(max(start, end - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


# ------------------------------------------------------------------ folders a run could have touched

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class FreshTree:
    """A folder casekit makes now, and what it writes below it (a probe request: scripts, included files,
    a commit's tree, the request). Nothing is made over something that exists (mkdir, O_EXCL) and nothing
    is walked through a link (every step by directory fd with O_NOFOLLOW): what lies there is what casekit
    wrote, whoever could write near it."""

    def __init__(self, path: Path, mode: int = 0o755) -> None:
        os.mkdir(path, mode)  # FileExistsError: refused, never reused
        os.chmod(path, mode)  # not narrowed by the umask: the sandbox user reads it
        self.path = path
        self.fd = os.open(path, _DIR_FLAGS)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> FreshTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _folder_fd(self, parts: tuple[str, ...], make: bool) -> int:
        """An fd of the folder `parts` below the tree (made, 0755, when `make`); the caller closes it."""
        fd = os.dup(self.fd)
        try:
            for part in parts:
                _check_part(part)
                made = False
                if make:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        made = True
                    except FileExistsError:
                        pass  # a folder this tree made for an earlier file: opened below without following
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = inner
                if made:
                    os.fchmod(fd, 0o755)  # not narrowed by the umask: the sandbox user reads it
            return fd
        except BaseException:
            os.close(fd)
            raise

    def folder(self, relative: str) -> None:
        """Make the folder `relative` ('a/b') below the tree."""
        os.close(self._folder_fd(_parts(relative), make=True))

    def write(self, relative: str, data: bytes, mode: int = 0o644) -> None:
        """Write a new file at `relative`; FileExistsError if anything is there."""
        *folders, name = _parts(relative)
        parent = self._folder_fd(tuple(folders), make=True)
        try:
            _check_part(name)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
            try:
                os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        finally:
            os.close(parent)

    def fifo(self, relative: str, access: int = os.O_RDWR) -> int:
        """Make a FIFO at `relative` that the sandbox user may open (0666: below casekit's own folders), and
        return casekit's end of it, opened without waiting: `access` O_RDWR for one casekit writes to (a
        reader then sees no end of file while casekit holds it), O_RDONLY for one it reads (it then sees
        the end of file once every writer has closed); the caller closes it."""
        *folders, name = _parts(relative)
        parent = self._folder_fd(tuple(folders), make=True)
        try:
            _check_part(name)
            os.mkfifo(name, 0o600, dir_fd=parent)  # FileExistsError if anything is there
            fd = os.open(name, access | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                    raise UnreadableFile(f"{relative} is not the FIFO just made")
                os.fchmod(fd, 0o666)
            except BaseException:
                os.close(fd)
                raise
            return fd
        finally:
            os.close(parent)

    def copy_file(self, source: Path, relative: str, limit: int) -> None:
        """Copy a regular file (never through a link, at most `limit` bytes) to `relative`."""
        data, status = read_regular_file(source, limit)
        self.write(relative, data, 0o755 if status.st_mode & stat.S_IXUSR else 0o644)

    def copy_tree(self, source: Path, relative: str, limit: int, skip: frozenset[str] = frozenset()) -> int:
        """Copy the folder `source` to `relative`: regular files and folders, links as links (never
        followed), nothing else (FIFOs, sockets, devices are left out); names in `skip` are left out at
        every level. At most `limit` bytes in all, else UnreadableFile. Returns the bytes copied."""
        self.folder(relative)
        total = 0
        stack = [(source, relative)]
        while stack:
            folder, target = stack.pop()
            with os.scandir(folder) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.name in skip:
                        continue
                    inside = f"{target}/{entry.name}"
                    if entry.is_symlink():
                        self.link(os.readlink(entry.path), inside)
                    elif entry.is_dir(follow_symlinks=False):
                        self.folder(inside)
                        stack.append((Path(entry.path), inside))
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                        if total > limit:
                            raise UnreadableFile(f"is over the {limit} byte limit")
                        self.copy_file(Path(entry.path), inside, limit)
        return total

    def link(self, pointing_to: str, relative: str) -> None:
        """A symbolic link at `relative` (copied as a link: what it names is not read here)."""
        *folders, name = _parts(relative)
        parent = self._folder_fd(tuple(folders), make=True)
        try:
            _check_part(name)
            os.symlink(pointing_to, name, dir_fd=parent)
        finally:
            os.close(parent)


def _parts(relative: str) -> tuple[str, ...]:
    return tuple(part for part in relative.split("/") if part)


def _check_part(part: str) -> None:
    if part in ("", ".", "..") or "/" in part or "\x00" in part:
        raise ValueError(f"not a plain name: {part!r}")


class SafeFolder:
    """A folder a run could have written (the probe's results), read without following anything: it and
    each folder below are opened with O_NOFOLLOW from a parent casekit trusts, and files are read as
    `read_regular_bytes` reads them (regular, bounded, never blocking)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, trusted_parent: Path, *names: str) -> SafeFolder:
        """`trusted_parent/names…`, each of `names` opened without following a link; FileNotFoundError
        when missing, UnreadableFile when something there is not a folder."""
        fd = os.open(trusted_parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        path = trusted_parent
        try:
            for name in names:
                _check_part(name)
                try:
                    inner = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    raise
                except OSError as failure:
                    raise UnreadableFile(f"{path / name} is not a folder ({failure.strerror})") from None
                os.close(fd)
                fd, path = inner, path / name
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SafeFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has(self, name: str) -> bool:
        """Whether `name` is there as a regular file (a link, a FIFO or a folder is not)."""
        try:
            return stat.S_ISREG(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def read(self, name: str, limit: int) -> bytes:
        """The bytes of the regular file `name`; FileNotFoundError, or UnreadableFile with the reason."""
        _check_part(name)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError as failure:
            if failure.errno == errno.ELOOP:
                raise UnreadableFile("is a symbolic link (casekit reads only regular files)") from None
            raise UnreadableFile(f"cannot be read: {failure.strerror or failure}") from None
        return _read_open(fd, limit)[0]
