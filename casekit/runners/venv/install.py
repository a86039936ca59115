"""Installing managed environments: resolve the torch version, then build the env with uv or pip.

uv is a dependency of casekit: its binary comes with the `uv` package, found from there (a pip or pipx
install of casekit puts nothing on PATH), else from PATH. With uv an env takes seconds once uv's cache
is warm, and envs hardlink into that cache (it lives beside them), so releases share what they have in
common; pip, only when no uv can run, copies everything into every env.

Building is safe against concurrent casekit processes: the env is built into
``<key>.tmp-<pid>`` under an exclusive lock on ``<key>.lock``, the completion
marker is written last, and the folder is renamed into place.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from casekit import settings
from casekit.errors import EnvironmentFailed, RunnerError
from casekit.fsutil import exclusive_lock, tail_text, write_atomic
from casekit.runners.interface import ProgressFn, TargetSpec
from casekit.runners.process import EnvironmentUnusable
from casekit.runners.python import installed_version, query_versions
from casekit.runners.sandbox import runtime_of
from casekit.runners.venv.cache import (
    ENV_SCHEMA,
    MARKER,
    CachedEnv,
    EnvRequest,
    bytecode_counts,
    downloads_lock,
    envs_dir,
    installed_wheel_name,
    lacks_bytecode,
    mark_used,
    read_marker,
    site_folders,
    why_not_ready,
)
from casekit.runners.torch_source.request import ask_for, pick_newest, version_or_none
from casekit.runners.venv.config import configured_cause
from casekit.versions import VersionError, parse_pip_index_versions, without_local

STREAM_EVERY_S = 5.0
RESOLVE_TIMEOUT_S = 120.0

# Everything a managed env's interpreter must not inherit from the host: a
# PYTHONPATH pointing at another torch would silently replace the env's own.
# (Python treats an empty PYTHON* variable as unset.)
ISOLATING_ENV = {"PYTHONPATH": "", "PYTHONHOME": ""}


# --------------------------------------------------------------- installers


def _packaged_uv() -> str | None:
    """The uv binary the `uv` package installed beside casekit (None: the package or its binary is missing)."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    try:
        return str(find_uv_bin())
    except FileNotFoundError:
        return None


@functools.cache
def uv_binary() -> str | None:
    """The uv casekit runs: the one its `uv` dependency installed, else the first on PATH; None when no
    uv runs here (a binary for another platform, a broken install): pip then."""
    for candidate in dict.fromkeys(found for found in (_packaged_uv(), shutil.which("uv")) if found):
        try:
            done = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.startswith("uv "):
            return candidate
    return None


def choose_installer() -> str:
    """'uv' when a uv runs here (or $CASEKIT_INSTALLER forces one), else 'pip'."""
    return settings.forced_installer() or ("uv" if uv_binary() else "pip")


def _uv() -> str:
    """The uv binary to run; EnvironmentFailed, in one line, when uv is forced but none runs."""
    found = uv_binary()
    if found is None:
        raise EnvironmentFailed(
            f"{settings.INSTALLER_ENV}=uv, but no uv runs here (neither casekit's `uv` package nor one on PATH): "
            "reinstall casekit with its dependencies, or unset it to build with pip"
        )
    return found


@functools.cache
def _uv_help(*subcommand: str) -> str:
    try:
        return subprocess.run([_uv(), *subcommand, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired, EnvironmentFailed):
        return ""


@functools.cache
def _uv_version() -> str:
    try:
        return " ".join(
            subprocess.run([_uv(), "--version"], capture_output=True, text=True, timeout=30).stdout.split()[:2]
        )
    except (OSError, subprocess.TimeoutExpired, EnvironmentFailed):
        return "uv"


def _pip_version(python: Path) -> str:
    """'pip 24.0': read from the new env's files. Nothing of the env runs on the host with its site hook: a
    pinned wheel's .pth import line would run here, as casekit's user (root in CI), with its environment."""
    try:
        version = installed_version("pip", runtime_of(str(python)).import_path)
    except RunnerError:
        version = None
    return f"pip {version}" if version else "pip"


def _uv_tls_flags() -> list[str]:
    # The network may intercept TLS: trust the system store (newer uv renamed the flag).
    return ["--system-certs"] if "--system-certs" in _uv_help("pip", "install") else ["--native-tls"]


def _uv_index_flags(request: EnvRequest) -> list[str]:
    flags: list[str] = []
    if request.index_url:
        flags += ["--index-url", request.index_url]
    elif request.torch_index:
        variant_backend = (
            request.channel == "release" and request.cuda and settings.is_pytorch_index(request.torch_index)
        )
        if variant_backend and "--torch-backend" in _uv_help("pip", "install"):
            flags += ["--torch-backend", str(request.cuda)]  # torch & co. from PyTorch's index, the rest from PyPI
        else:
            # first in line: torch (and whatever else it serves) from there, the rest from the default index
            flags += ["--index", request.torch_index]
    elif request.cuda:
        if "--torch-backend" in _uv_help("pip", "install"):
            flags += ["--torch-backend", request.cuda]  # torch & co. from PyTorch's index, the rest from PyPI
        else:
            flags += [
                "--extra-index-url",
                settings.pytorch_index_url(request.cuda),
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
    elif request.torch_index or request.cuda:
        # pip merges indexes and prefers the highest version: 2.5.1+cu124 beats PyPI's 2.5.1
        flags += ["--extra-index-url", request.effective_index_url or ""]
    if request.find_links:
        flags += ["--find-links", request.find_links]
    return flags


def installer_environment(root: Path) -> dict[str, str]:
    """The host environment plus what installing needs here: a CA bundle and uv's cache beside the envs."""
    env = {key: value for key, value in os.environ.items() if key not in ISOLATING_ENV}
    if not env.get("SSL_CERT_FILE"):
        ca_bundle = settings.host_ca_bundle()
        if ca_bundle is not None:
            env["SSL_CERT_FILE"] = str(ca_bundle)
    if env.get("SSL_CERT_FILE") and not env.get("PIP_CERT"):
        env["PIP_CERT"] = env["SSL_CERT_FILE"]
    # same filesystem as the envs, so uv hardlinks instead of copying gigabytes; casekit's own unless the
    # user named theirs, so `casekit envs prune` can show and clear what casekit downloaded
    for cache in settings.download_caches(root):
        env[cache.variable] = str(cache.path)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


# -------------------------------------------------------- version resolution


def resolve_torch_version(request: EnvRequest, requested: str | None, root: Path, installer: str) -> str:
    """The exact torch release a partial request means now, asking the same indexes the install will."""
    if installer == "uv":
        return _resolve_with_uv(request, requested, root)
    return _resolve_with_pip(request, requested, root)


def _resolve_with_uv(request: EnvRequest, requested: str | None, root: Path) -> str:
    ask = ask_for(requested)
    requirement = f"torch=={'.'.join(str(part) for part in ask.release)}.*" if ask.release else "torch"
    command = [_uv(), "pip", "compile", "-", "--no-deps", "--no-header", "--no-annotate", "--quiet"]
    command += ["--python-version", request.python_version, *_uv_tls_flags(), *_uv_index_flags(request)]
    done = _run_quiet(command, root, requirement)
    for line in done.stdout.splitlines():
        if line.strip().startswith("torch=="):
            resolved = line.strip().split("==", 1)[1]
            version = version_or_none(resolved)
            if version is None or not ask.admits(version):
                raise EnvironmentFailed(f"uv resolves torch {requested} to {resolved}, not the build asked")
            # the release; the local label stays an index matter unless the request names one
            return resolved if ask.local else without_local(resolved)
    raise EnvironmentFailed(f"cannot resolve torch {requested or 'latest'} with uv: {_summarize(done.stderr)}")


def _resolve_with_pip(request: EnvRequest, requested: str | None, root: Path) -> str:
    command = [sys.executable, "-m", "pip", "index", "versions", "torch", "--retries", "1", "--timeout", "30"]
    command += ["--python-version", request.python_version, "--only-binary=:all:", *_pip_index_flags(request)]
    done = _run_quiet(command, root, None)
    try:
        listed = parse_pip_index_versions(done.stdout)
    except VersionError:
        raise EnvironmentFailed(f"cannot list torch versions with pip: {_summarize(done.stderr)}") from None
    found = pick_newest(listed, requested)
    if found:
        return found
    raise EnvironmentFailed(f"no torch release matches {requested}: Available versions: {', '.join(listed)}")


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


def request_for(spec: TargetSpec, torch_version: str, **found: str | None) -> EnvRequest:
    """The env request for `spec` once its torch version is known; `found`: the variant and build
    the channel's listing gave (cuda, torch_index, torch_file, torch_url)."""
    extra = tuple(spec.extra_packages)
    # numpy: torch wheels do not depend on it, yet most repro scripts (and torch's own numpy interop) need it.
    # setuptools: torch.utils.cpp_extension imports it, and older releases' Inductor imports that (2.5.1's
    # compile fails "No module named 'setuptools'"); torch requires it only on Python >= 3.12, and a venv uv
    # makes has none (a venv pip made on 3.11 had it by chance)
    for needed in ("numpy", "setuptools"):
        if not any(re.split(r"[=<>!~ \[]", p, maxsplit=1)[0].lower() == needed for p in extra):
            extra += (needed,)
    fields: dict[str, str | None] = {"cuda": spec.cuda, **found}
    return EnvRequest(
        python=spec.python,
        python_version=python_version_of(spec.python),
        torch=torch_version,
        index_url=spec.index_url,
        find_links=spec.find_links or settings.default_find_links(),
        extra_packages=extra,
        channel=spec.channel.value,
        **fields,  # type: ignore[arg-type]
    )


@functools.cache
def python_version_of(python: str | None) -> str:
    """'3.11': the version of the interpreter a managed env is made from (casekit's own when None)."""
    if python is None:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    if os.sep not in python:
        return python.removeprefix("python")  # "3.11" or "python3.11"
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],  # no site, no .pth
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
    if why_not_ready(path) is None and not lacks_bytecode(path):
        progress(f"reusing env {key}")
        mark_used(path)
        return CachedEnv(key, path, read_marker(path))
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(
        folder / f"{key}.lock", on_wait=lambda: progress(f"waiting for another casekit process building {key} …")
    ):
        problem = why_not_ready(path)
        if problem is None:
            if lacks_bytecode(path):  # built before casekit compiled at build time: once, here, outside any run
                _compile_in_place(path, root, progress)
            else:
                progress(f"reusing env {key} (built meanwhile by another casekit process)")
            mark_used(path)
            return CachedEnv(key, path, read_marker(path))
        if problem != "missing":
            progress(f"env {key} is half-built or broken ({problem}); rebuilding it")
        for pattern in (f"{key}.tmp-*", f"{key}.old-*"):  # what a killed build left; we hold the lock
            for leftover in folder.glob(pattern):
                shutil.rmtree(leftover, ignore_errors=True)
        building = folder / f"{key}.tmp-{os.getpid()}"
        try:
            # the download caches stay while a build reads them (`envs prune` waits for this)
            with downloads_lock(root, shared=True, on_wait=lambda: progress("waiting for `casekit envs prune` …")):
                marker = _build(request, building, path, root, progress, installer or choose_installer())
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        if path.exists():
            retired = folder / f"{key}.old-{os.getpid()}"
            os.rename(path, retired)
            shutil.rmtree(retired, ignore_errors=True)
        os.rename(building, path)
        mark_used(path)
    return CachedEnv(key, path, marker)


def _compile_in_place(path: Path, root: Path, progress: ProgressFn) -> None:
    """Compile a published env's bytecode (under its lock): the sandbox shows it read-only, so Python
    could never write its cache there, and every target start would compile torch again."""
    started = time.monotonic()
    progress(f"env {path.name} has no bytecode: compiling it once (imports then take about a third) …")
    log_path = path.parent / f"{path.name}.build.log"
    python = path / "bin" / "python"
    for site in site_folders(path):
        # -I -S: no site hook, no .pth code; compileall compiles, it imports nothing of the env
        command = [str(python), "-I", "-S", "-m", "compileall", "-q", "-j", "0", str(site)]
        _run_logged(command, log_path, installer_environment(root), root, progress, "compileall", check=False)
    marker = read_marker(path)
    if marker is not None:
        marker["bytecode"] = bytecode_counts(path)
        marker["bytecode_compiled_s"] = round(time.monotonic() - started, 1)
        write_atomic(path / MARKER, json.dumps(marker, indent=1))
    progress(f"compiled env {path.name}'s bytecode in {time.monotonic() - started:.1f} s")


def _build(
    request: EnvRequest, building: Path, final: Path, root: Path, progress: ProgressFn, installer: str
) -> dict[str, object]:
    started = time.monotonic()
    env = installer_environment(root)
    log_path = final.parent / f"{final.name}.build.log"
    log_path.write_text("")
    packages = [request.torch_requirement, *request.extra_packages]
    python = building / "bin" / "python"
    if installer == "uv":
        progress(f"creating venv {final.name} with uv …")
        relocatable = ["--relocatable"] if "--relocatable" in _uv_help("venv") else []
        base = request.python or sys.executable
        _run_logged([_uv(), "venv", *relocatable, "-p", base, str(building)], log_path, env, root, progress, "uv venv")
        progress(f"installing {' '.join(packages)} with uv (this can take minutes) …")
        # wheels only: the pins come from shared bundles, and building an sdist runs its code here, unsandboxed.
        # No --compile-bytecode: uv compiles by running the env's interpreter with its site hook, after the
        # packages are in, so a pinned wheel's .pth would run here as the user (as root in CI). casekit compiles
        # with `-I -S` itself, below, before the env is published (the sandbox shows it read-only later).
        command = [_uv(), "pip", "install", "--python", str(python), "--only-binary", ":all:"]
        command += [*_uv_tls_flags(), *_uv_index_flags(request)]
        refused = functools.partial(configured_cause, "uv", env=env, asked=packages)
        _run_logged([*command, *packages], log_path, env, root, progress, "uv pip install", explain=refused)
        _compile_bytecode(building, final, log_path, root, progress)
        installer_version = _uv_version()
    else:
        base = _base_interpreter(request.python)
        progress(f"creating venv {final.name} with {base} -m venv …")
        # pip's console scripts get absolute shebangs and break on the final rename;
        # casekit only ever runs bin/python, which does not.
        _run_logged([base, "-m", "venv", str(building)], log_path, env, root, progress, "venv")
        progress(f"installing {' '.join(packages)} with pip (this can take minutes) …")
        command = [str(python), "-m", "pip", "install", "--progress-bar", "off", "--only-binary=:all:", "--compile"]
        command += _pip_index_flags(request)
        refused = functools.partial(configured_cause, "pip", env=env, asked=packages)
        _run_logged([*command, *packages], log_path, env, root, progress, "pip install", explain=refused)
        installer_version = _pip_version(python)
    progress("checking that torch imports …")
    try:
        torch_version, python_version = query_versions(str(python))
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
        "torch_file": request.torch_file or installed_wheel_name(building, "torch"),
        "bytecode": bytecode_counts(building),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "build_s": round(time.monotonic() - started, 1),
    }
    write_atomic(building / MARKER, json.dumps(marker, indent=1))  # written last: its presence means "complete"
    progress(f"env {final.name} ready: torch {torch_version}, python {python_version} ({marker['build_s']} s)")
    return marker


def _compile_bytecode(building: Path, final: Path, log_path: Path, root: Path, progress: ProgressFn) -> None:
    """Compile an env's site folders with its own interpreter under `-I -S` (no site hook: no .pth line of a
    pinned package runs), the paths in the bytecode naming the folder the env is published as."""
    progress("compiling bytecode (python -I -S -m compileall) …")
    python = building / "bin" / "python"
    for site in site_folders(building):
        command = [str(python), "-I", "-S", "-m", "compileall", "-q", "-j", "0"]
        command += ["-s", str(building), "-p", str(final), str(site)]
        _run_logged(command, log_path, installer_environment(root), root, progress, "compileall", check=False)


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
    command: list[str],
    log_path: Path,
    env: dict[str, str],
    cwd: Path,
    progress: ProgressFn,
    what: str,
    check: bool = True,
    explain: Callable[[str], str | None] | None = None,
) -> None:
    """Run an installer step, its output appended to the build log; echo its latest line every few seconds.
    `explain`: a cause the failure's output shows that the installer does not name (its own configuration)."""
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
    if process.returncode != 0 and check:
        with open(log_path, "rb") as handle:
            handle.seek(start)
            output = handle.read().decode("utf-8", "replace")
        cause = explain(output) if explain else None
        said = f"{_summarize(output)}; {cause}" if cause else _summarize(output)
        raise EnvironmentFailed(f"{what} failed: {said} (log: {log_path})")


def _last_line(path: Path, start: int) -> str:
    text = tail_text(path, limit=4000, start=start)
    lines = [line.strip() for line in re.split(r"[\r\n]", text) if line.strip()]
    return lines[-1][:200] if lines else ""
