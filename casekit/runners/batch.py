"""Laying out a probe batch on disk and reading it back: shared by every runner.

The batch folder holds the probe itself, the scripts, the request and the
results. A runner only has to make that folder visible to the target (it is
the host path for python/venv runners, a bind mount for docker) and start
`python probe.py request.json` there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from casekit.runners.interface import PROBE_PATH, ProbeBatchResult, ProbeJob

REQUEST_SCHEMA = "casekit.probe-request/1"


def lay_out_batch(batch_dir: Path, jobs: list[ProbeJob], root_in_target: str) -> Path:
    """Copy the probe and the scripts into batch_dir; write the request. Returns the request path."""
    batch_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(PROBE_PATH, batch_dir / "probe.py")
    request_jobs = []
    for job in jobs:
        script_dir = batch_dir / "scripts" / job.id
        script_dir.mkdir(parents=True, exist_ok=True)
        target = script_dir / job.script.name
        shutil.copy2(job.script, target)
        lay_out_included_files(script_dir, job)
        request_jobs.append(job.to_request(f"{root_in_target}/scripts/{job.id}/{job.script.name}"))
    (batch_dir / "out").mkdir(exist_ok=True)
    request = {"schema": REQUEST_SCHEMA, "out_dir": f"{root_in_target}/out", "jobs": request_jobs}
    request_path = batch_dir / "request.json"
    request_path.write_text(json.dumps(request, indent=1))
    return request_path


def lay_out_included_files(script_dir: Path, job: ProbeJob) -> None:
    """A job's included files beside its script, with their relative paths (imports and reads work)."""
    from casekit.includes import lay_out

    lay_out(script_dir, job.includes)


def read_batch(batch_dir: Path, jobs: list[ProbeJob], probe_log: str = "") -> ProbeBatchResult:
    """Collect what the probe wrote; a job without a result says why."""
    out = batch_dir / "out"
    env_path = out / "env.json"
    env_record: dict[str, object] = {}
    if env_path.exists():
        env_record = json.loads(env_path.read_text())
    environment: Any = env_record.get("environment") if env_record.get("ok") else None
    results: dict[str, dict[str, object]] = {}
    failed: dict[str, str] = {}
    for job in jobs:
        path = out / f"{job.id}.result.json"
        if path.exists():
            results[job.id] = json.loads(path.read_text())
        elif not env_record:
            failed[job.id] = "the probe did not start: " + (probe_log.strip().splitlines() or ["no output"])[-1]
        elif not env_record.get("ok"):
            failed[job.id] = f"torch could not be imported: {env_record.get('error')}"
        else:
            failed[job.id] = (
                "the probe stopped before this script: " + (probe_log.strip().splitlines() or ["no output"])[-1]
            )
    done = out / "done.json"
    wall = json.loads(done.read_text()).get("wall_s") if done.exists() else None
    import_s = env_record.get("import_s")
    return ProbeBatchResult(
        environment=dict(environment or {}),
        results=results,
        failed=failed,
        import_s=float(import_s) if isinstance(import_s, (int, float)) else None,
        wall_s=wall,
    )
