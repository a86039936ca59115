"""The cache of managed environments: ``$CASEKIT_CACHE/envs/<key>``, one folder per exact request.

The key is readable and exact: ``torch-2.5.1-cu124-py3.11-1a2b3c4d``. A folder
is complete when its marker ``casekit-env.json`` is there (written last by a
build); a folder without it, or whose python is gone, is half-built or broken.
Reuse costs two stat calls.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from casekit import settings
from casekit.errors import CasekitError
from casekit.fsutil import exclusive_lock
from casekit.runners.interface import ProgressFn

MARKER = "casekit-env.json"
BROKEN_NOTE = "casekit-env.broken"
ENV_SCHEMA = "casekit.env/1"

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
    torch: str  # an exact version: "2.5.1", "2.13.0+cpu"
    cuda: str | None = None
    index_url: str | None = None
    find_links: str | None = None
    extra_packages: tuple[str, ...] = ()

    @property
    def effective_index_url(self) -> str | None:
        """The index torch comes from: the one given, else PyTorch's index for the CUDA tag."""
        if self.index_url:
            return self.index_url
        return settings.pytorch_index_url(self.cuda) if self.cuda else None

    @property
    def key(self) -> str:
        """'torch-2.5.1-cu124-py3.11-1a2b3c4d': readable prefix, hash of every field."""
        identity = json.dumps(
            {
                "python": self.python,
                "python_version": self.python_version,
                "torch": self.torch,
                "cuda": self.cuda,
                "index_url": self.effective_index_url,
                "find_links": self.find_links,
                "extra_packages": sorted(self.extra_packages),
            },
            sort_keys=True,
        )
        digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
        parts = [f"torch-{self.torch}"] + ([self.cuda] if self.cuda else []) + [f"py{self.python_version}", digest]
        return re.sub(r"[^A-Za-z0-9._+-]", "_", "-".join(parts))

    def matches_apart_from_torch(self, other: Mapping[str, object]) -> bool:
        mine = asdict(self)
        mine.pop("torch")
        theirs = dict(other)
        theirs.pop("torch", None)
        theirs["extra_packages"] = tuple(theirs.get("extra_packages") or ())  # type: ignore[arg-type]
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
    """Every env folder in the cache, complete or not (build leftovers excluded), by key."""
    folder = envs_dir(root)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and ".tmp-" not in path.name and ".old-" not in path.name:
            found.append(CachedEnv(path.name, path, read_marker(path)))
    return found


def remove_env(key: str, root: Path | None = None, progress: ProgressFn | None = None) -> None:
    """Delete one cached env (waits for a build of it to finish first)."""
    if not key or "/" in key or key.startswith(".") or key != Path(key).name:
        raise CasekitError(f"not an env key: {key!r}")
    folder = envs_dir(root)
    path = folder / key
    if not path.is_dir():
        raise CasekitError(f"no cached env {key} in {folder}")
    say = progress or (lambda _line: None)
    with exclusive_lock(
        folder / f"{key}.lock", on_wait=lambda: say(f"waiting for another casekit process building {key} …")
    ):
        shutil.rmtree(path)
    (folder / f"{key}.build.log").unlink(missing_ok=True)


def read_marker(path: Path) -> dict[str, object] | None:
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("schema") == ENV_SCHEMA else None


def why_not_ready(path: Path) -> str | None:
    """None when the env can be used as is; else why not (cheap: no torch import)."""
    if not path.is_dir():
        return "missing"
    if (path / BROKEN_NOTE).exists():
        return (path / BROKEN_NOTE).read_text().strip() or "marked broken"
    if read_marker(path) is None:
        return "no completion marker: a build did not finish"
    if not (path / "bin" / "python").exists():  # exists() follows the link to the base interpreter
        return "its python is missing"
    return None


def mark_broken(path: Path, reason: str) -> None:
    """Make the next prepare() rebuild this env."""
    (path / BROKEN_NOTE).write_text(reason + "\n")
    (path / MARKER).unlink(missing_ok=True)
