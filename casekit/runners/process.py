"""Running the probe as a local subprocess: shared by the python and venv runners.

The probe runs in its own session so that a timeout or Ctrl-C can kill it and
everything it started. Its stdout/stderr go to a log file that is never parsed:
results come back only as the JSON files the probe writes into the batch folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from casekit.errors import EnvironmentFailed, RunnerError
from casekit.runners.batch import lay_out_batch, read_batch
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProgressFn

IMPORT_MARGIN_S = 120.0  # importing torch + dynamo takes 7-10 s here; slow disks and cold caches take longer
POLL_S = 0.2
KEEP_BATCH_ENV = "CASEKIT_KEEP_BATCH"


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


def probe_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the probe starts with: the caller's, unbuffered, plus overrides."""
    merged = dict(os.environ)
    merged["PYTHONUNBUFFERED"] = "1"
    if env:
        merged.update(env)
    return merged


def run_probe_subprocess(
    python: str,
    jobs: list[ProbeJob],
    progress: ProgressFn,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> ProbeBatchResult:
    """Run `python probe.py request.json` over all jobs in a temporary batch folder.

    `timeout` bounds the whole probe (default: `overall_timeout(jobs)`); when it
    expires the probe and every process it started are killed and the jobs that
    did not finish are reported as failed. Ctrl-C kills them too, then re-raises.
    Raises EnvironmentUnusable when the interpreter is missing or torch cannot be
    imported, RunnerError when the probe dies without reporting.
    """
    check_interpreter(python)
    limit = overall_timeout(jobs) if timeout is None else timeout
    batch_dir = Path(tempfile.mkdtemp(prefix="casekit-"))
    keep = os.environ.get(KEEP_BATCH_ENV) == "1"
    try:
        request = lay_out_batch(batch_dir, jobs, str(batch_dir))
        log_path = batch_dir / "probe.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [python, str(batch_dir / "probe.py"), str(request)],
                cwd=batch_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=probe_environment(env),
                start_new_session=True,  # its own process group: killable as a whole, deaf to our Ctrl-C
            )
        try:
            progress(f"probe started in {python} (pid {process.pid}, {len(jobs)} script(s), limit {limit:g} s)")
            timed_out = _wait_reporting(process, batch_dir, jobs, progress, limit)
        except BaseException:
            kill_process_tree(process)
            raise
        kill_process_tree(process)  # scripts may leave orphans behind even when the probe ended well
        probe_log = _tail(log_path)
        result = read_batch(batch_dir, jobs, probe_log)
        if timed_out:
            for job_id in result.failed:
                result.failed[job_id] = f"the probe was stopped after its overall limit of {limit:g} s"
            return result
        _raise_if_unusable(python, batch_dir, process.returncode, probe_log)
        return result
    finally:
        if keep:
            progress(f"batch kept at {batch_dir} ({KEEP_BATCH_ENV}=1)")
        else:
            shutil.rmtree(batch_dir, ignore_errors=True)


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
        for job in jobs:
            if job.id not in reported and (out / f"{job.id}.result.json").exists():
                reported.add(job.id)
                progress(f"{len(reported)}/{len(jobs)} {job.id} done{_describe_runs(out / f'{job.id}.result.json')}")
        if exited:
            return False
        if time.monotonic() > deadline:
            progress(f"probe exceeded its overall limit of {limit:g} s; stopping it")
            return True
        time.sleep(POLL_S)


def _describe_import(env_path: Path) -> str:
    try:
        record = json.loads(env_path.read_text())
    except (OSError, ValueError):
        return "torch import finished"
    if not record.get("ok"):
        return f"torch import failed: {record.get('error')}"
    environment = record.get("environment") or {}
    seconds = record.get("import_s")
    took = f" in {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
    return f"torch {environment.get('torch')} imported{took}"


def _describe_runs(result_path: Path) -> str:
    """' (eager ok, compiled ok)': the run statuses, so progress shows trouble as it happens."""
    try:
        runs = json.loads(result_path.read_text()).get("runs") or {}
    except (OSError, ValueError, AttributeError):
        return ""
    parts = [f"{mode} {run.get('status')}" for mode, run in runs.items() if isinstance(run, dict)]
    return f" ({', '.join(parts)})" if parts else ""


def _raise_if_unusable(python: str, batch_dir: Path, returncode: int | None, probe_log: str) -> None:
    env_path = batch_dir / "out" / "env.json"
    if env_path.exists():
        record = json.loads(env_path.read_text())
        if not record.get("ok"):
            raise EnvironmentUnusable(f"python {python}: torch is not importable: {record.get('error')}")
        return
    last = (probe_log.strip().splitlines() or ["no output"])[-1]
    raise RunnerError(f"python {python}: the probe did not start (exit status {returncode}): {last}")


def _tail(path: Path, limit: int = 8000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


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


def _descendants(root: int) -> set[int]:
    """All live descendants of `root`, from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
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
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
