"""Laying out a probe batch on disk and reading it back: shared by every runner.

The batch folder holds the probe itself, the scripts, the request and the
results. A runner only has to make that folder visible to the target (it is
the host path for python/venv runners, a bind mount for docker) and start
`python probe.py request.json` there.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casekit.fsutil import UnreadableFile, read_regular_bytes
from casekit.runners.interface import PROBE_PATH, ProbeBatchResult, ProbeJob, ProbeScheduling

REQUEST_SCHEMA = "casekit.probe-request/1"
PROBE_SCHEMA = "casekit.probe/1"
MAX_RESULT_BYTES = 256 * 1024 * 1024  # one script's result file; beyond this it is that script's failure
MAX_ENV_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class RunIsolation:
    """How the probe isolates each run (the bwrap sandbox): the batch read-only but for the run's own copy
    of its job, jobs/ and out/ hidden, a private /tmp and /dev/shm of `tmp_size` bytes, a PID namespace
    (`pid_namespace` is off only in the tests that show what it stops)."""

    tmp_size: int
    pid_namespace: bool = True
    keep_in_tmp: tuple[str, ...] = ()  # folders the target shows below /tmp: carried into each run's fresh /tmp
    hold: str = ""  # an empty folder outside /tmp where the probe holds them meanwhile


@dataclass(frozen=True)
class UidIsolation:
    """How the probe isolates each run in a container (the docker runner), where no namespace can be made:
    the probe is root with a few capabilities, each run an unprivileged uid of its own (`first_uid` + the
    slot of the process forking it: 0 the probe, then each worker) owning only its run dir (on the runs'
    tmpfs, beside the batch), with HOME and TMPDIR in it; what that uid leaves in `shared` is removed when
    the run ends. `drop` is off (runs keep the probe's uid) and `shared` empty only in the tests that show
    what they stop."""

    first_uid: int = 20000
    shared: tuple[str, ...] = ("/tmp", "/dev/shm", "/dev/mqueue")
    drop: bool = True


def in_target(path: str, moved: Mapping[str, str]) -> str:
    """A host path as the target sees it: `moved` maps host folders to their place in the target."""
    for host, target in moved.items():
        if path == host or path.startswith(host.rstrip("/") + "/"):
            return target + path[len(host) :]
    return path


class ResultUnreadable(Exception):
    """A result file the probe (or a script that tampered with it) left unreadable."""


def job_folder(batch_dir: Path, job: ProbeJob) -> Path:
    """The folder holding one job's inputs: its script and whatever is laid out beside it."""
    return batch_dir / "jobs" / job.id


def lay_out_job(batch_dir: Path, job: ProbeJob) -> Path:
    """Copy the job's inputs into its own folder; returns the script's path there."""
    folder = job_folder(batch_dir, job)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / job.script.name
    shutil.copy2(job.script, target)
    lay_out_included_files(folder, job)
    return target


def lay_out_batch(
    batch_dir: Path,
    jobs: list[ProbeJob],
    root_in_target: str,
    isolation: RunIsolation | UidIsolation | None = None,
    scheduling: ProbeScheduling | None = None,
    moved: Mapping[str, str] | None = None,
) -> Path:
    """Copy the probe and each job's inputs into batch_dir; write the request. Returns the request path.

    With `isolation` the probe isolates each run: a private view in the bwrap sandbox (RunIsolation),
    a uid of its own in a container (UidIsolation).
    `moved`: host folders the target sees elsewhere (in-place jobs' worktrees), for their paths.
    """
    batch_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(PROBE_PATH, batch_dir / "probe.py")
    for job in jobs:
        lay_out_job(batch_dir, job)
    (batch_dir / "out").mkdir(exist_ok=True)
    return write_request(batch_dir, jobs, root_in_target, isolation, scheduling, moved)


def write_request(
    batch_dir: Path,
    jobs: list[ProbeJob],
    root_in_target: str,
    isolation: RunIsolation | UidIsolation | None = None,
    scheduling: ProbeScheduling | None = None,
    moved: Mapping[str, str] | None = None,
) -> Path:
    """The probe's request for `jobs` (all of them, or the ones left after a probe crash).

    The number of runs at once is decided inside the target (it alone sees its
    cores and cgroup CPU quota) unless `scheduling` fixes it.
    """
    request_jobs = []
    for job in jobs:
        folder = f"{root_in_target}/jobs/{job.id}"
        job_request = job.to_request(f"{folder}/{job.script.name}")
        if job_request["script"] == f"{folder}/{job.script.name}":
            job_request["job_dir"] = folder
        else:  # in-place jobs (bisect) run where they lie, which the target may see elsewhere
            for key in ("script", "workdir"):
                if isinstance(job_request.get(key), str):
                    job_request[key] = in_target(str(job_request[key]), moved or {})
        request_jobs.append(job_request)
    request: dict[str, Any] = {"schema": REQUEST_SCHEMA, "out_dir": f"{root_in_target}/out", "jobs": request_jobs}
    scheduling = scheduling or ProbeScheduling()
    request["targets_sharing"] = scheduling.targets_sharing
    if scheduling.parallel_runs is not None:
        request["parallel_runs"] = scheduling.parallel_runs
    if scheduling.serial_timings:
        request["serial_timings"] = True
    if isolation is not None:
        request["runs_dir"] = f"{root_in_target}/runs"
        (batch_dir / "runs").mkdir(exist_ok=True)
    if isinstance(isolation, UidIsolation):
        request["isolation"] = {
            "kind": "uid",
            "first_uid": isolation.first_uid,
            "shared": list(isolation.shared),
            "drop": isolation.drop,
        }
    elif isolation is not None:
        request["isolation"] = {
            "kind": "namespace",
            "batch_root": root_in_target,
            "hide": [f"{root_in_target}/jobs", f"{root_in_target}/out"],
            "readonly": [f"{root_in_target}/runs"],  # a tmpfs of its own: the batch's read-only view misses it
            "tmp_size": isolation.tmp_size,
            "keep_in_tmp": list(isolation.keep_in_tmp),
            "hold": isolation.hold,
            "pid_namespace": isolation.pid_namespace,
        }
    request_path = batch_dir / "request.json"
    request_path.write_text(json.dumps(request, indent=1))
    return request_path


def lay_out_included_files(script_dir: Path, job: ProbeJob) -> None:
    """A job's included files beside its script, with their relative paths (imports and reads work)."""
    from casekit.includes import lay_out

    lay_out(script_dir, job.includes)


def read_json_file(path: Path, limit: int) -> Any:
    """A JSON file that must be a regular file of at most `limit` bytes; ResultUnreadable otherwise."""
    try:
        raw = read_regular_bytes(path, limit)  # FileNotFoundError passes through: "no result" is not tampering
    except UnreadableFile as why:
        raise ResultUnreadable(f"{path.name} {why}") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ResultUnreadable(f"{path.name} is not valid JSON ({error})") from None


def check_result(raw: Any, job: ProbeJob) -> dict[str, Any]:
    """A probe result of the expected schema for this job; ResultUnreadable otherwise."""
    if not isinstance(raw, dict) or raw.get("schema") != PROBE_SCHEMA or raw.get("job") != job.id:
        raise ResultUnreadable("the result is not a probe result for this script")
    runs = raw.get("runs")
    if not isinstance(runs, dict) or not all(
        isinstance(run, dict) and isinstance(run.get("status"), str) for run in runs.values()
    ):
        raise ResultUnreadable("the result's runs are malformed")
    if not isinstance(raw.get("script"), str):
        raise ResultUnreadable("the result names no script")
    return raw


def read_env_record(batch_dir: Path) -> dict[str, Any] | None:
    """env.json (None when missing); an unreadable one reads as a failed import with the reason."""
    try:
        record = read_json_file(batch_dir / "out" / "env.json", MAX_ENV_BYTES)
    except FileNotFoundError:
        return None
    except ResultUnreadable as error:
        return {"ok": False, "error": f"the probe's environment record is unusable: {error}"}
    if not isinstance(record, dict) or (record.get("ok") and not isinstance(record.get("environment"), dict)):
        return {"ok": False, "error": "the probe's environment record is malformed"}
    return record


def read_lost_record(path: Path, job: ProbeJob) -> str | None:
    """Why the probe's worker for `job` ended without a result, or None (no record, or not a usable one)."""
    try:
        record = read_json_file(path, MAX_ENV_BYTES)
    except (FileNotFoundError, ResultUnreadable):
        return None
    if not isinstance(record, dict) or record.get("job") != job.id or not isinstance(record.get("why"), str):
        return None
    return record["why"][:200]


def read_batch(batch_dir: Path, jobs: list[ProbeJob], probe_log: str = "") -> ProbeBatchResult:
    """Collect what the probe wrote; a job without a usable result says why."""
    out = batch_dir / "out"
    env_record = read_env_record(batch_dir) or {}
    environment: Any = env_record.get("environment") if env_record.get("ok") else None
    last_line = (probe_log.strip().splitlines() or ["no output"])[-1]
    results: dict[str, dict[str, object]] = {}
    failed: dict[str, str] = {}
    for job in jobs:
        path = out / f"{job.id}.result.json"
        try:
            results[job.id] = check_result(read_json_file(path, MAX_RESULT_BYTES), job)
            continue
        except FileNotFoundError:
            pass
        except ResultUnreadable as error:
            failed[job.id] = f"its result was tampered with or is unusable: {error}"
            continue
        lost = read_lost_record(out / f"{job.id}.lost.json", job)
        if lost:
            failed[job.id] = (
                f"the probe died while running this script (its worker: {lost}); the scripts beside it ran on"
            )
        elif not env_record:
            failed[job.id] = "the probe did not start: " + last_line
        elif not env_record.get("ok"):
            failed[job.id] = f"torch could not be imported: {env_record.get('error')}"
        else:
            failed[job.id] = "the probe stopped before this script: " + last_line
    wall: Any = None
    try:
        done = read_json_file(out / "done.json", MAX_ENV_BYTES)
        wall = done.get("wall_s") if isinstance(done, dict) else None
    except (FileNotFoundError, ResultUnreadable):
        pass
    import_s = env_record.get("import_s")
    return ProbeBatchResult(
        environment=dict(environment or {}),
        results=results,
        failed=failed,
        import_s=float(import_s) if isinstance(import_s, (int, float)) else None,
        wall_s=float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) else None,
    )
