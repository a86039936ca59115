"""Running the probe as a local subprocess: shared by the python and venv runners.

The probe runs in its own session so that a timeout or Ctrl-C can kill it and
everything it started. Its stdout/stderr go to a log file that is never parsed:
results come back only as the JSON files the probe writes into the batch folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from casekit import settings
from casekit.errors import EnvironmentFailed, RunnerError, Stopped
from casekit.fsutil import tail_text
from casekit.runners.batch import lay_out_batch, read_batch, read_env_record, read_json_file, write_request
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProbeScheduling, ProgressFn
from casekit.runners.sandbox import Sandbox
from casekit.scrub import temp_prefix

BATCH_PREFIX = temp_prefix("batch")
REPLAY_PREFIX = temp_prefix("replay")  # replay's own script folder: swept the same way
OWNED_PREFIXES = (BATCH_PREFIX, REPLAY_PREFIX)
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


def run_probe_subprocess(
    python: str,
    jobs: list[ProbeJob],
    progress: ProgressFn,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    sandbox: Sandbox | None = None,
    scheduling: ProbeScheduling | None = None,
) -> ProbeBatchResult:
    """Run `python probe.py request.json` over all jobs in a temporary batch folder, sandboxed.

    `sandbox` defaults to bwrap with no network (SandboxUnavailable, one line, when the
    host cannot: the user opts out with `--allow sandbox=none`). `timeout` bounds the
    whole probe (default: `overall_timeout(jobs)`); when it expires the probe and
    every process it started are killed and the jobs that did not finish are
    reported as failed. When the probe dies mid-batch (a script killed it), the
    script it was running fails and a new probe runs the ones after it. Ctrl-C
    kills everything too, then re-raises. Raises EnvironmentUnusable when the
    interpreter is missing or torch cannot be imported, RunnerError when the probe
    dies without reporting.
    """
    check_interpreter(python)
    sandbox = sandbox or Sandbox.from_options()
    sandbox.check()
    progress(sandbox.summary())
    limit = overall_timeout(jobs) if timeout is None else timeout
    sweep_stale_batches()
    batch_dir = Path(tempfile.mkdtemp(prefix=f"{BATCH_PREFIX}{os.getpid()}-"))
    stage = sandbox.stage_for(batch_dir)  # the launcher's (casekit is root): outside the batch and the view
    workdirs = sorted({Path(w) for w in (getattr(job, "workdir", None) for job in jobs) if w})
    places = sandbox.place([batch_dir, *workdirs])
    keep = settings.keep_batch()
    try:
        lay_out_batch(batch_dir, jobs, places[str(batch_dir)], sandbox.run_isolation(python), scheduling, places)
        deadline = time.monotonic() + limit
        remaining = list(jobs)
        merged: ProbeBatchResult | None = None
        attempt = 0
        while remaining:
            attempt += 1
            left = max(1.0, deadline - time.monotonic())
            result, timed_out, returncode, probe_log = _run_probe_once(
                python, batch_dir, remaining, progress, left, env, sandbox, attempt, scheduling, stage, places
            )
            if merged is None:
                if not timed_out:
                    _raise_if_unusable(python, batch_dir, returncode, probe_log)
                merged = result
            else:
                merged.results.update(result.results)
                merged.failed.update(result.failed)
            if timed_out:
                for job_id in result.failed:
                    merged.failed[job_id] = f"the probe was stopped after its overall limit of {limit:g} s"
                break
            missing = [job for job in remaining if job.id in result.failed]
            died_in = next((job for job in missing if "tampered" not in result.failed[job.id]), None)
            env_record = read_env_record(batch_dir) or {}
            if died_in is None or returncode == 0 or not env_record.get("ok"):
                break  # nothing died mid-script, or torch itself fails: a restart would not help
            merged.failed[died_in.id] = (
                f"the probe died while running this script ({_exit_description(returncode)}); "
                "the scripts after it ran in a new probe"
            )
            remaining = [job for job in remaining[remaining.index(died_in) + 1 :] if job.id in result.failed]
            if remaining:
                progress(f"the probe died in {died_in.id}; restarting it for the {len(remaining)} script(s) after it")
        assert merged is not None
        merged.environment["sandbox"] = sandbox.summary()
        return merged
    finally:
        if keep:
            progress(f"batch kept at {batch_dir} ({settings.KEEP_BATCH_ENV}=1)")
        else:
            shutil.rmtree(batch_dir, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)


def _exit_description(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _run_probe_once(
    python: str,
    batch_dir: Path,
    jobs: list[ProbeJob],
    progress: ProgressFn,
    limit: float,
    env: Mapping[str, str] | None,
    sandbox: Sandbox,
    attempt: int,
    scheduling: ProbeScheduling | None = None,
    stage: Path | None = None,
    places: dict[str, str] | None = None,
) -> tuple[ProbeBatchResult, bool, int | None, str]:
    """One probe process over `jobs`: (results, timed out, exit status, log tail)."""
    places = places or sandbox.place([batch_dir])
    root = places[str(batch_dir)]
    write_request(batch_dir, jobs, root, sandbox.run_isolation(python), scheduling, places)
    log_path = batch_dir / f"probe.{attempt}.log"
    with open(log_path, "wb") as log:
        process = sandbox.popen(
            python,
            [f"{root}/probe.py", f"{root}/request.json"],
            writable=places,
            scratch=[f"{root}/runs"] if sandbox.isolates else [],  # the runs write to a size-limited tmpfs
            cwd=batch_dir,
            chdir=root,
            env=env,
            stage=stage,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killable as a whole, deaf to our Ctrl-C
        )
    try:
        progress(
            f"probe started in {python} (pid {process.pid}, {len(jobs)} script(s), limit {limit:g} s): "
            "importing torch, warming Dynamo up …"
        )
        timed_out = _wait_reporting(process, batch_dir, jobs, progress, limit)
    except BaseException:
        kill_process_tree(process)
        raise
    kill_process_tree(process)  # scripts may leave orphans behind even when the probe ended well
    probe_log = tail_text(log_path)
    return read_batch(batch_dir, jobs, probe_log), timed_out, process.returncode, probe_log


def _wait_reporting(
    process: subprocess.Popen[bytes], batch_dir: Path, jobs: list[ProbeJob], progress: ProgressFn, limit: float
) -> bool:
    """Poll until the probe exits; report the import and each finished job. True on timeout."""
    out = batch_dir / "out"
    deadline = time.monotonic() + limit
    reported: set[str] = set()
    import_reported = False
    while True:
        exited = process.poll() is not None
        if not import_reported and (out / "env.json").exists():
            import_reported = True
            progress(_describe_import(out / "env.json"))
        report_finished(out, jobs, reported, progress)
        if exited:
            return False
        if time.monotonic() > deadline:
            progress(f"probe exceeded its overall limit of {limit:g} s; stopping it")
            return True
        if STOPPING.is_set():  # a signal reached casekit's main thread: every target stops now
            raise Stopped(STOPPING.signum)
        try:
            process.wait(timeout=POLL_S)  # returns the moment the probe exits
        except subprocess.TimeoutExpired:
            pass


def _describe_import(env_path: Path) -> str:
    try:
        record = read_json_file(env_path, 16 << 20)
    except Exception:  # noqa: BLE001 - progress text only: the result is checked when read for real
        return "torch import finished"
    if not isinstance(record, dict):
        return "torch import finished"
    if not record.get("ok"):
        return (
            f"target refused: {record.get('error')}"
            if record.get("refused")
            else f"torch import failed: {record.get('error')}"
        )
    environment = record.get("environment") or {}
    seconds = record.get("import_s")
    took = f" in {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
    return f"torch {environment.get('torch')} imported{took}"


def report_finished(out: Path, jobs: list[ProbeJob], reported: set[str], progress: ProgressFn) -> None:
    """Say each job whose result file has appeared in `out` since the last call ("3/18 a.pre done (eager ok, ...)")."""
    for job in jobs:
        if job.id not in reported and (out / f"{job.id}.result.json").exists():
            reported.add(job.id)
            progress(f"{len(reported)}/{len(jobs)} {job.id} done{_describe_runs(out / f'{job.id}.result.json')}")


def _describe_runs(result_path: Path) -> str:
    """' (eager ok, compiled ok)': the run statuses, so progress shows trouble as it happens."""
    try:
        runs = read_json_file(result_path, 256 << 20).get("runs") or {}
    except Exception:  # noqa: BLE001 - progress text only: the result is checked when read for real
        return ""
    parts = [f"{mode} {run.get('status')}" for mode, run in runs.items() if isinstance(run, dict)]
    return f" ({', '.join(parts)})" if parts else ""


def raise_if_refused(python: str, record: dict[str, Any] | None) -> None:
    """Torch imported, but this release cannot take what the target asks (--dynamo): the whole target fails.
    `record`: the batch's env.json, as `read_env_record` reads it."""
    if record is not None and record.get("refused"):
        raise EnvironmentUnusable(f"python {python}: {record.get('error')}")


def _raise_if_unusable(python: str, batch_dir: Path, returncode: int | None, probe_log: str) -> None:
    record = read_env_record(batch_dir)
    raise_if_refused(python, record)
    if record is not None:
        if not record.get("ok"):
            raise EnvironmentUnusable(torch_missing(python, str(record.get("error"))))
        return
    last = (probe_log.strip().splitlines() or ["no output"])[-1]
    raise RunnerError(f"python {python}: the probe did not start (exit status {returncode}): {last}")


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
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}") and sys.platform.startswith("linux"):
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
