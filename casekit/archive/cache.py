"""The archive's derived files, in `<archive>/.casekit/`: casekit's own folder, and files it can tell it wrote.

A shared archive is untrusted input, and `.casekit/` comes with it: a teammate can
commit a symlink there, a FIFO, or a file dressed as casekit's. So every level of
the folder must be a real directory (a link is never followed: it is removed and
a folder made in its place), and every file casekit keeps there carries a `Seal`:
an HMAC made with this user's secret, which lives in casekit's cache folder
(`settings.archive_cache_key_path`), never in an archive. A file without a valid
seal (a fresh clone's, a planted one) is not casekit's: it is ignored and made again.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from pathlib import Path

from casekit.fsutil import UnreadableFile, read_regular_file
from casekit.settings import archive_cache_key_path

CACHE_DIR = ".casekit"
KEY_BYTES = 32
TAG_CHARS = 2 * hashlib.sha256().digest_size  # a seal, as hex


def cache_folder(root: Path, *names: str, create: bool) -> Path | None:
    """`root/.casekit[/names...]` when every level is a real directory, else None.

    Never through a link: with `create`, whatever stands in a level's place (a committed
    symlink, a file, a FIFO) is removed (the link itself, not what it points to) and a real
    folder made; without, the cache is simply absent. None also when it cannot be made.
    """
    folder = root
    for name in (CACHE_DIR, *names):
        folder = folder / name
        try:
            mode: int | None = os.lstat(folder).st_mode
        except FileNotFoundError:
            mode = None
        except OSError:
            return None
        if mode is not None and stat.S_ISDIR(mode):
            continue
        if not create:
            return None
        try:
            if mode is not None:
                os.unlink(folder)  # the name is casekit's: what a teammate put there is not followed
            os.mkdir(folder)
        except OSError:
            return None
    return folder


class Seal:
    """HMAC-SHA256 tags over a derived file's bytes, with this user's local key.

    A tag names what it seals (`purpose`: "index", "page <case>.<key>"), so a sealed
    file renamed into another's place does not pass either.
    """

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def local(cls) -> Seal | None:
        """The seal of this user's key (made on first use, 0600); None when it cannot be read or made."""
        key = _local_key(archive_cache_key_path())
        return None if key is None else cls(key)

    def tag(self, purpose: str, data: bytes | memoryview) -> bytes:
        """The tag of `data` for `purpose`, as TAG_CHARS ASCII hex digits."""
        mac = hmac.new(self._key, purpose.encode() + b"\x00", hashlib.sha256)
        mac.update(data)
        return mac.hexdigest().encode("ascii")

    def verify(self, purpose: str, data: bytes | memoryview, tag: bytes) -> bool:
        return hmac.compare_digest(self.tag(purpose, data), tag)


def _local_key(path: Path) -> bytes | None:
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # 0600
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(KEY_BYTES))
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)  # never replaces: two first runs at once both use the winner's key
            except FileExistsError:
                pass
            except OSError:
                os.replace(tmp, path)  # a file system without hard links
        finally:
            Path(tmp).unlink(missing_ok=True)
        return _read_key(path)
    except (OSError, UnreadableFile):
        return None


def _read_key(path: Path) -> bytes | None:
    """The key, if it is a regular file of this user that nobody else can read; FileNotFoundError when absent."""
    try:
        key, status = read_regular_file(path, KEY_BYTES)
    except UnreadableFile:
        return None
    if len(key) != KEY_BYTES or status.st_mode & 0o077 or (hasattr(os, "getuid") and status.st_uid != os.getuid()):
        return None  # a key others could read (or write) seals nothing
    return key
