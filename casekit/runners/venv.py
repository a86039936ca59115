"""The `venv` runner: a managed virtual environment per (python, torch, CUDA, index, pins).

Environments are built once and cached under ``$CASEKIT_CACHE/envs/<key>``
(default ``~/.cache/casekit``), with uv when it is on PATH (seconds once its
cache is warm; envs hardlink into uv's cache, so uv's cache lives beside them)
and pip otherwise. The key is readable and exact:
``torch-2.5.1-cu124-py3.11-1a2b3c4d``.

Building is safe against concurrent casekit processes: the env is built into
``<key>.tmp-<pid>`` under an exclusive lock on ``<key>.lock``, the completion
marker ``casekit-env.json`` is written last, and the folder is renamed into
place. A folder without the marker, or whose python is gone, is half-built or
broken and is rebuilt. Reuse costs two stat calls.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from casekit.errors import CasekitError, EnvironmentFailed
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProgressFn, Runner, TargetSpec
from casekit.runners.process import EnvironmentUnusable, run_probe_subprocess
from casekit.runners.python import query_versions
from casekit.runners.sandbox import Sandbox

CACHE_ENV = "CASEKIT_CACHE"
INSTALLER_ENV = "CASEKIT_INSTALLER"  # "uv" or "pip": force one installer
DEFAULT_CACHE = "~/.cache/casekit"
MARKER = "casekit-env.json"
BROKEN_NOTE = "casekit-env.broken"
ENV_SCHEMA = "casekit.env/1"
PYTORCH_INDEX = "https://download.pytorch.org/whl/{tag}"
DEFAULT_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
STREAM_EVERY_S = 5.0
RESOLVE_TIMEOUT_S = 120.0

# Everything a managed env's interpreter must not inherit from the host: a
# PYTHONPATH pointing at another torch would silently replace the env's own.
# (Python treats an empty PYTHON* variable as unset.)
ISOLATING_ENV = {"PYTHONPATH": "", "PYTHONHOME": ""}


# ------------------------------------------------------------------ the cache


def cache_root() -> Path:
    """$CASEKIT_CACHE, or ~/.cache/casekit."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def envs_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / "envs"


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
        return PYTORCH_INDEX.format(tag=self.cuda) if self.cuda else None

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
            found.append(CachedEnv(path.name, path, _read_marker(path)))
    return found


def remove_env(key: str, root: Path | None = None, progress: ProgressFn | None = None) -> None:
    """Delete one cached env (waits for a build of it to finish first)."""
    if not key or "/" in key or key.startswith(".") or key != Path(key).name:
        raise CasekitError(f"not an env key: {key!r}")
    folder = envs_dir(root)
    path = folder / key
    if not path.is_dir():
        raise CasekitError(f"no cached env {key} in {folder}")
    with _exclusive(folder / f"{key}.lock", progress or (lambda _line: None), f"building {key}"):
        shutil.rmtree(path)
    (folder / f"{key}.build.log").unlink(missing_ok=True)


def _read_marker(path: Path) -> dict[str, object] | None:
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
    if _read_marker(path) is None:
        return "no completion marker: a build did not finish"
    if not (path / "bin" / "python").exists():  # exists() follows the link to the base interpreter
        return "its python is missing"
    return None


def mark_broken(path: Path, reason: str) -> None:
    """Make the next prepare() rebuild this env."""
    (path / BROKEN_NOTE).write_text(reason + "\n")
    (path / MARKER).unlink(missing_ok=True)


# --------------------------------------------------------------- installers


def choose_installer() -> str:
    """'uv' when on PATH (or forced by $CASEKIT_INSTALLER), else 'pip'."""
    forced = os.environ.get(INSTALLER_ENV)
    if forced in ("uv", "pip"):
        return forced
    return "uv" if shutil.which("uv") else "pip"


@functools.cache
def _uv_help(*subcommand: str) -> str:
    try:
        return subprocess.run(["uv", *subcommand, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


@functools.cache
def _uv_version() -> str:
    try:
        return " ".join(
            subprocess.run(["uv", "--version"], capture_output=True, text=True, timeout=30).stdout.split()[:2]
        )
    except (OSError, subprocess.TimeoutExpired):
        return "uv"


def _pip_version(python: Path, env: dict[str, str]) -> str:
    try:
        done = subprocess.run(
            [str(python), "-m", "pip", "--version"], capture_output=True, text=True, env=env, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return "pip"
    return " ".join(done.stdout.split()[:2]) or "pip"


def _uv_tls_flags() -> list[str]:
    # The network may intercept TLS: trust the system store (newer uv renamed the flag).
    return ["--system-certs"] if "--system-certs" in _uv_help("pip", "install") else ["--native-tls"]


def _uv_index_flags(request: EnvRequest) -> list[str]:
    flags: list[str] = []
    if request.index_url:
        flags += ["--index-url", request.index_url]
    elif request.cuda:
        if "--torch-backend" in _uv_help("pip", "install"):
            flags += ["--torch-backend", request.cuda]  # torch & co. from PyTorch's index, the rest from PyPI
        else:
            flags += [
                "--extra-index-url",
                PYTORCH_INDEX.format(tag=request.cuda),
                "--index-strategy",
                "unsafe-best-match",
            ]
    if request.find_links:
        flags += ["--find-links", request.find_links]
    return flags


def _pip_index_flags(request: EnvRequest) -> list[str]:
    flags: list[str] = []
    if request.index_url:
        flags += ["--index-url", request.index_url]
    elif request.cuda:
        # pip merges indexes and prefers the highest version: 2.5.1+cu124 beats PyPI's 2.5.1
        flags += ["--extra-index-url", PYTORCH_INDEX.format(tag=request.cuda)]
    if request.find_links:
        flags += ["--find-links", request.find_links]
    return flags


def installer_environment(root: Path) -> dict[str, str]:
    """The host environment plus what installing needs here: a CA bundle and uv's cache beside the envs."""
    env = {key: value for key, value in os.environ.items() if key not in ISOLATING_ENV}
    if not env.get("SSL_CERT_FILE") and os.path.exists(DEFAULT_CA_BUNDLE):
        env["SSL_CERT_FILE"] = DEFAULT_CA_BUNDLE
    if env.get("SSL_CERT_FILE") and not env.get("PIP_CERT"):
        env["PIP_CERT"] = env["SSL_CERT_FILE"]
    # same filesystem as the envs, so uv hardlinks instead of copying gigabytes
    env.setdefault("UV_CACHE_DIR", str(root / "uv"))
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


# -------------------------------------------------------- version resolution

_EXACT = re.compile(r"\d+\.\d+\.\d+.*|\d+\.\d+(a|b|rc|\.dev|\.post|\+).*")
_RELEASE = re.compile(r"(\d+(?:\.\d+)*)(.*)")


def is_exact(version: str) -> bool:
    """'2.5.1', '2.6.0.dev20241112', '2.13.0+cpu' are exact; '2.13' and '2' ask for the newest."""
    return bool(_EXACT.fullmatch(version))


def pick_newest(available: list[str], requested: str | None) -> str | None:
    """The newest final release in `available` under the prefix `requested` ('2.13' → newest 2.13.x).

    Local labels are dropped ('2.13.0+cpu' → '2.13.0'): `torch==2.13.0` still
    matches the local build, and the key stays about the release.
    """
    prefix = tuple(int(part) for part in requested.split(".")) if requested else ()
    best: tuple[tuple[int, ...], str] | None = None
    for version in available:
        public = version.split("+", 1)[0]
        match = _RELEASE.fullmatch(public)
        if not match or match.group(2):  # a pre-release, dev or post suffix: not a plain release
            continue
        release = tuple(int(part) for part in match.group(1).split("."))
        if release[: len(prefix)] != prefix:
            continue
        if best is None or release > best[0]:
            best = (release, public)
    return best[1] if best else None


def resolve_torch_version(request: EnvRequest, requested: str | None, root: Path, installer: str) -> str:
    """The exact torch release a partial request means now, asking the same indexes the install will."""
    if installer == "uv":
        return _resolve_with_uv(request, requested, root)
    return _resolve_with_pip(request, requested, root)


def _resolve_with_uv(request: EnvRequest, requested: str | None, root: Path) -> str:
    requirement = f"torch=={requested}.*" if requested else "torch"
    command = ["uv", "pip", "compile", "-", "--no-deps", "--no-header", "--no-annotate", "--quiet"]
    command += ["--python-version", request.python_version, *_uv_tls_flags(), *_uv_index_flags(request)]
    done = _run_quiet(command, root, requirement)
    for line in done.stdout.splitlines():
        if line.strip().startswith("torch=="):
            return line.strip().split("==", 1)[1].split("+", 1)[0]  # the release; the local label stays an index matter
    raise EnvironmentFailed(f"cannot resolve torch {requested or 'latest'} with uv: {_summarize(done.stderr)}")


def _resolve_with_pip(request: EnvRequest, requested: str | None, root: Path) -> str:
    command = [sys.executable, "-m", "pip", "index", "versions", "torch", "--retries", "1", "--timeout", "30"]
    command += ["--python-version", request.python_version, "--only-binary=:all:", *_pip_index_flags(request)]
    done = _run_quiet(command, root, None)
    for line in done.stdout.splitlines():
        if line.startswith("Available versions:"):
            found = pick_newest([v.strip() for v in line.split(":", 1)[1].split(",")], requested)
            if found:
                return found
            raise EnvironmentFailed(f"no torch release matches {requested}: {line.strip()}")
    raise EnvironmentFailed(f"cannot list torch versions with pip: {_summarize(done.stderr)}")


def _run_quiet(command: list[str], root: Path, stdin: str | None) -> subprocess.CompletedProcess[str]:
    root.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=RESOLVE_TIMEOUT_S,
            cwd=root,  # never pick up a project's pyproject.toml / .python-version
            env=installer_environment(root),
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentFailed(f"{command[0]} took over {RESOLVE_TIMEOUT_S:.0f} s to list torch versions") from None
    except OSError as error:
        raise EnvironmentFailed(f"cannot run {command[0]}: {error.strerror or error}") from None


def _summarize(output: str) -> str:
    """One line from an installer's failure: its error and causes, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        # uv: "error: ..." + "cause: ..." lines (older uv: "× ..." + "╰─▶ ..."); pip: "ERROR: ..."
        if line.lower().startswith("error") or line.startswith("×"):
            return " ".join(part.strip(" │╰─▶×") for part in lines[index : index + 6])
    return lines[-1] if lines else "no output"


# ------------------------------------------------------------------ building


def default_find_links() -> str | None:
    """pip's PIP_FIND_LINKS (a local wheelhouse), which uv would otherwise ignore."""
    value = os.environ.get("PIP_FIND_LINKS", "").split()
    return value[0] if value and Path(value[0]).is_dir() else None


def request_for(spec: TargetSpec, torch_version: str) -> EnvRequest:
    extra = tuple(spec.extra_packages)
    if not any(re.split(r"[=<>!~ ]", p, maxsplit=1)[0].lower() == "numpy" for p in extra):
        extra += (
            "numpy",
        )  # torch wheels do not depend on it, yet most repro scripts (and torch's own numpy interop) need it
    return EnvRequest(
        python=spec.python,
        python_version=_python_version(spec.python),
        torch=torch_version,
        cuda=spec.cuda,
        index_url=spec.index_url,
        find_links=spec.find_links or default_find_links(),
        extra_packages=extra,
    )


def _python_version(python: str | None) -> str:
    if python is None:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    if os.sep not in python:
        return python.removeprefix("python")  # "3.11" or "python3.11"
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise EnvironmentFailed(f"python {python}: cannot run: {error}") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise EnvironmentFailed(f"python {python}: cannot run: {_summarize(done.stderr)}")
    return done.stdout.strip()


def ensure_env(request: EnvRequest, root: Path, progress: ProgressFn, installer: str | None = None) -> CachedEnv:
    """The ready env for `request`: reused when complete, else (re)built under the lock."""
    folder = envs_dir(root)
    key = request.key
    path = folder / key
    if why_not_ready(path) is None:
        progress(f"reusing env {key}")
        return CachedEnv(key, path, _read_marker(path))
    folder.mkdir(parents=True, exist_ok=True)
    with _exclusive(folder / f"{key}.lock", progress, f"building {key}"):
        problem = why_not_ready(path)
        if problem is None:
            progress(f"reusing env {key} (built meanwhile by another casekit process)")
            return CachedEnv(key, path, _read_marker(path))
        if problem != "missing":
            progress(f"env {key} is half-built or broken ({problem}); rebuilding it")
        for pattern in (f"{key}.tmp-*", f"{key}.old-*"):  # what a killed build left; we hold the lock
            for leftover in folder.glob(pattern):
                shutil.rmtree(leftover, ignore_errors=True)
        building = folder / f"{key}.tmp-{os.getpid()}"
        try:
            marker = _build(request, building, path, root, progress, installer or choose_installer())
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        if path.exists():
            retired = folder / f"{key}.old-{os.getpid()}"
            os.rename(path, retired)
            shutil.rmtree(retired, ignore_errors=True)
        os.rename(building, path)
    return CachedEnv(key, path, marker)


def _build(
    request: EnvRequest, building: Path, final: Path, root: Path, progress: ProgressFn, installer: str
) -> dict[str, object]:
    started = time.monotonic()
    env = installer_environment(root)
    log_path = final.parent / f"{final.name}.build.log"
    log_path.write_text("")
    packages = [f"torch=={request.torch}", *request.extra_packages]
    python = building / "bin" / "python"
    if installer == "uv":
        progress(f"creating venv {final.name} with uv …")
        relocatable = ["--relocatable"] if "--relocatable" in _uv_help("venv") else []
        base = request.python or sys.executable
        _run_logged(["uv", "venv", *relocatable, "-p", base, str(building)], log_path, env, root, progress, "uv venv")
        progress(f"installing {' '.join(packages)} with uv (this can take minutes) …")
        command = ["uv", "pip", "install", "--python", str(python), *_uv_tls_flags(), *_uv_index_flags(request)]
        _run_logged([*command, *packages], log_path, env, root, progress, "uv pip install")
        installer_version = _uv_version()
    else:
        base = _base_interpreter(request.python)
        progress(f"creating venv {final.name} with {base} -m venv …")
        # pip's console scripts get absolute shebangs and break on the final rename;
        # casekit only ever runs bin/python, which does not.
        _run_logged([base, "-m", "venv", str(building)], log_path, env, root, progress, "venv")
        progress(f"installing {' '.join(packages)} with pip (this can take minutes) …")
        command = [str(python), "-m", "pip", "install", "--progress-bar", "off", *_pip_index_flags(request)]
        _run_logged([*command, *packages], log_path, env, root, progress, "pip install")
        installer_version = _pip_version(python, env)
    progress("checking that torch imports …")
    try:
        torch_version, python_version = query_versions(str(python), ISOLATING_ENV)
    except EnvironmentUnusable as error:
        raise EnvironmentFailed(f"env {final.name} was built but {error}") from None
    marker: dict[str, object] = {
        "schema": ENV_SCHEMA,
        "key": final.name,
        "request": asdict(request),
        "torch": torch_version,
        "python": python_version,
        "python_executable": str(final / "bin" / "python"),
        "installer": installer_version,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "build_s": round(time.monotonic() - started, 1),
    }
    partial = building / f".{MARKER}.partial"
    partial.write_text(json.dumps(marker, indent=1))
    os.replace(partial, building / MARKER)  # written last: its presence means "complete"
    progress(f"env {final.name} ready: torch {torch_version}, python {python_version} ({marker['build_s']} s)")
    return marker


def _base_interpreter(python: str | None) -> str:
    if python is None:
        return sys.executable
    if os.sep in python:
        return python
    name = python if python.startswith("python") else f"python{python}"
    found = shutil.which(name)
    if not found:
        raise EnvironmentFailed(f"no {name} on PATH to create a venv with (uv can fetch one: install uv)")
    return found


def _run_logged(
    command: list[str], log_path: Path, env: dict[str, str], cwd: Path, progress: ProgressFn, what: str
) -> None:
    """Run an installer step, its output appended to the build log; echo its latest line every few seconds."""
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        start = log.tell()
        try:
            process = subprocess.Popen(
                command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError as error:
            raise EnvironmentFailed(f"{what}: cannot run {command[0]}: {error.strerror or error}") from None
        try:
            last_echo = time.monotonic()
            echoed = ""
            while process.poll() is None:
                time.sleep(0.2)
                if time.monotonic() - last_echo >= STREAM_EVERY_S:
                    last_echo = time.monotonic()
                    line = _last_line(log_path, start)
                    if line and line != echoed:
                        echoed = line
                        progress(f"  {what}: {line}")
        except BaseException:
            process.kill()
            process.wait()
            raise
    if process.returncode != 0:
        with open(log_path, "rb") as handle:
            handle.seek(start)
            output = handle.read().decode("utf-8", "replace")
        raise EnvironmentFailed(f"{what} failed: {_summarize(output)} (log: {log_path})")


def _last_line(path: Path, start: int) -> str:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(start, handle.tell() - 4000))
        text = handle.read().decode("utf-8", "replace")
    lines = [line.strip() for line in re.split(r"[\r\n]", text) if line.strip()]
    return lines[-1][:200] if lines else ""


@contextmanager
def _exclusive(lock_path: Path, progress: ProgressFn, what: str) -> Iterator[None]:
    """An exclusive flock, saying so when another process holds it (released on close, even on a crash)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another casekit process {what} …")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -------------------------------------------------------------------- runner


class VenvRunner(Runner):
    """A managed, cached virtual environment with the requested torch (and pins)."""

    name = "venv"

    def __init__(self, spec: TargetSpec, cache_dir: Path | None = None, installer: str | None = None) -> None:
        super().__init__(spec)
        self.root = cache_dir or cache_root()
        self.installer = installer or choose_installer()
        self.env: CachedEnv | None = None

    def prepare(self, progress: ProgressFn) -> None:
        """Resolve the torch version, then reuse or build the env."""
        if self.env is not None and why_not_ready(self.env.path) is None:
            return
        self.env = ensure_env(self._request(progress), self.root, progress, self.installer)

    def _request(self, progress: ProgressFn) -> EnvRequest:
        requested = self.spec.torch
        if requested and is_exact(requested):
            return request_for(self.spec, requested)
        if requested and not re.fullmatch(r"\d+(\.\d+)*", requested):
            raise EnvironmentFailed(f"not a torch version: {requested!r} (try 2.5.1 or 2.13)")
        draft = request_for(self.spec, requested or "latest")
        progress(f"resolving torch {requested or 'latest'} …")
        try:
            version = resolve_torch_version(draft, requested, self.root, self.installer)
        except EnvironmentFailed as error:
            cached = self._newest_cached(draft, requested)
            if cached is None:
                raise
            progress(f"{error}; using the newest cached match, torch {cached}")
            return request_for(self.spec, cached)
        progress(f"torch {requested or 'latest'} is {version}")
        return request_for(self.spec, version)

    def _newest_cached(self, draft: EnvRequest, requested: str | None) -> str | None:
        """Offline fallback: the newest complete env that fits the request."""
        versions = []
        for env in list_envs(self.root):
            request = (env.marker or {}).get("request")
            if isinstance(request, dict) and draft.matches_apart_from_torch(request):
                versions.append(str(request.get("torch")))
        return pick_newest(versions, requested)

    def run_probe(self, jobs: list[ProbeJob], progress: ProgressFn) -> ProbeBatchResult:
        self.prepare(progress)
        assert self.env is not None
        try:
            sandbox = Sandbox.from_options(self.spec.options)
            return run_probe_subprocess(
                str(self.env.python_executable), jobs, progress, env=ISOLATING_ENV, sandbox=sandbox
            )
        except EnvironmentUnusable as error:
            mark_broken(self.env.path, f"marked broken after a failed run: {error}")
            raise EnvironmentUnusable(f"{error} (env {self.env.key} is rebuilt on next use)") from None

    def describe(self) -> dict[str, object]:
        facts = super().describe()
        if self.env is not None:
            marker = self.env.marker or {}
            facts.update(
                env_key=self.env.key,
                env_path=str(self.env.path),
                torch=marker.get("torch"),
                python=marker.get("python"),
                installer=marker.get("installer"),
            )
        return facts
