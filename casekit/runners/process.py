"""The probe as a local process: what the python and venv runners' session (runners.warm) shares with
the rest of casekit: whether an interpreter can be one, how long a batch may take, how finished jobs are
reported, how a signal stops every target, and how a probe is killed with everything it started (it runs
in its own process group; each run in a session of its own).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from casekit.errors import EnvironmentFailed, RunnerError, Stopped
from casekit.fsutil import SafeFolder
from casekit.runners.batch import read_json_file
from casekit.runners.interface import ProbeJob, ProgressFn
from casekit.scrub import temp_prefix

BATCH_PREFIX = temp_prefix("batch")
REPLAY_PREFIX = temp_prefix("replay")  # replay's own script folder: swept the same way
# a killed casekit's folders, each named with its pid: a session's, its stage, a replay's scripts
OWNED_PREFIXES = (temp_prefix("session"), temp_prefix("stage"), BATCH_PREFIX, REPLAY_PREFIX)
IMPORT_MARGIN_S = 120.0  # importing torch + dynamo takes 7-10 s here; slow disks and cold caches take longer
POLL_S = 0.2


def torch_missing(python: str, error: str) -> str:
    """The line for an interpreter whose torch does not import, with the remedy that fits it: casekit's
    own environment (a `uv tool` or pipx install holds no torch) takes another interpreter or torch beside
    it; an interpreter the user named takes torch, or another name."""
    if _same_file(python, sys.executable):
        remedy = (
            "name an interpreter that has torch with --python PATH, or install torch beside casekit "
            "(uv tool install --with torch ..., pipx inject casekit torch)"
        )
    else:
        remedy = "install torch into it, or name another interpreter with --python PATH"
    return f"python {python}: torch is not importable: {error}; {remedy}"


def _same_file(a: str, b: str) -> bool:
    # by path, not by inode: a venv's python is a link to its base interpreter, yet another environment
    return os.path.abspath(a) == os.path.abspath(b)


class EnvironmentUnusable(EnvironmentFailed, RunnerError):
    """The interpreter is missing, does not run, or cannot import torch.

    Both an environment failure (bisection steps around it as "unknown") and a
    runner error (the probe could not start).
    """


def overall_timeout(jobs: list[ProbeJob]) -> float:
    """Every run of every job at its own timeout, plus the one torch import."""
    from casekit.timeouts import batch_timeout

    return batch_timeout(jobs, IMPORT_MARGIN_S)


def check_interpreter(python: str) -> None:
    """Raise EnvironmentUnusable when `python` is not an executable file."""
    if not os.path.isfile(python):
        raise EnvironmentUnusable(f"python {python}: no such interpreter")
    if not os.access(python, os.X_OK):
        raise EnvironmentUnusable(f"python {python}: not executable")


def report_finished(out: SafeFolder, jobs: list[ProbeJob], reported: set[str], progress: ProgressFn) -> None:
    """Say each job whose result file has appeared in `out` since the last call ("3/18 a.pre done (eager ok, ...)")."""
    for job in jobs:
        if job.id not in reported and out.has(f"{job.id}.result.json"):
            reported.add(job.id)
            progress(f"{len(reported)}/{len(jobs)} {job.id} done{_describe_runs(out, f'{job.id}.result.json')}")


def _describe_runs(out: SafeFolder, name: str) -> str:
    """' (eager ok, compiled ok)': the run statuses, so progress shows trouble as it happens."""
    try:
        runs = read_json_file(out, name, 256 << 20).get("runs") or {}
    except Exception:  # noqa: BLE001 - progress text only: the result is checked when read for real
        return ""
    parts = [f"{mode} {run.get('status')}" for mode, run in runs.items() if isinstance(run, dict)]
    return f" ({', '.join(parts)})" if parts else ""


def raise_if_refused(python: str, record: dict[str, Any] | None) -> None:
    """Torch imported, but this release cannot take what the target asks (--dynamo): the whole target fails.
    `record`: the batch's env.json, as `read_env_record` reads it."""
    if record is not None and record.get("refused"):
        raise EnvironmentUnusable(f"python {python}: {record.get('error')}")


# ------------------------------------------------------------------ stopping


class _StopEvent(threading.Event):
    signum: int = signal.SIGINT


STOPPING = _StopEvent()
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def install_stop_handlers() -> None:
    """SIGINT/SIGTERM/SIGHUP: every target's wait loop stops (killing its probe, removing its folder),
    and the main thread unwinds with `Stopped`, so bundles are left untouched or complete.

    A signal that whoever started casekit set to be ignored stays ignored: `nohup casekit replay`
    must outlive the terminal, and a script's background job must not stop on the script's Ctrl-C."""

    def stop(signum: int, _frame: object) -> None:
        if STOPPING.is_set():  # already stopping: a second signal must not cut the cleanup short
            return
        STOPPING.signum = signum
        STOPPING.set()
        raise Stopped(signum)

    for name in STOP_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, stop)


def sweep_stale_batches(root: Path | None = None) -> list[Path]:
    """Remove batch folders of casekit processes that are gone (a SIGKILL leaves its folder behind)."""
    removed: list[Path] = []
    folder = Path(root or tempfile.gettempdir())
    try:
        entries = [(entry, prefix) for prefix in OWNED_PREFIXES for entry in folder.glob(f"{prefix}*")]
    except OSError:
        return removed
    for entry, prefix in entries:
        owner = entry.name[len(prefix) :].split("-", 1)[0]
        try:
            ours = entry.lstat().st_uid == os.geteuid()  # another user's folder of that name is not ours to remove
        except OSError:
            continue
        if ours and owner.isdigit() and not os.path.exists(f"/proc/{owner}") and sys.platform.startswith("linux"):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


# ------------------------------------------------------------------ killing


def kill_process_tree(process: subprocess.Popen[bytes]) -> None:
    """Kill the probe's process group and every descendant's group, then reap the probe.

    The probe starts each script run in a session of its own (so it can time it
    out), so killing the probe's group alone would orphan a running script.
    """
    own_group = os.getpgrp()
    groups = {process.pid} | {_group_of(pid) for pid in _descendants(process.pid)}
    groups.discard(own_group)
    groups.discard(0)
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not take this long
        pass


def _group_of(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return 0


def live_processes() -> dict[int, int]:
    """Every live process of this host's /proc as pid -> parent pid; zombies left out (they are dead
    and cannot be signalled: only reaped). Empty where there is no /proc."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        # the command name may hold spaces and parentheses: fields start after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    return parents


def _descendants(root: int) -> set[int]:
    """All live descendants of `root` (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for pid, parent in live_processes().items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
