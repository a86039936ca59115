"""Laying out a probe request on disk and reading its results back: shared by every runner.

A request is a folder casekit makes fresh (`FreshTree`: never over something that
exists, never through a link): each job's inputs under jobs/<id>/ and request.json.
A container's batch holds the probe, the request, out/ and runs/ in one folder
(`lay_out_batch`); a warm probe's session keeps its requests apart from the folder
the probe writes its results in (runners.warm). Results are read back from a folder
a run could have touched (`results_folder`, `read_batch`): without following a link,
bounded, schema-checked; a bad one is that script's failure, never the batch's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casekit.errors import RunnerError
from casekit.fsutil import FreshTree, SafeFolder, UnreadableFile
from casekit.runners.interface import PROBE_PATH, ProbeBatchResult, ProbeJob, ProbeScheduling

REQUEST_SCHEMA = "casekit.probe-request/1"
PROBE_SCHEMA = "casekit.probe/1"
MAX_RESULT_BYTES = 256 * 1024 * 1024  # one script's result file; beyond this it is that script's failure
MAX_ENV_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class RunIsolation:
    """How the probe isolates each run (the bwrap sandbox): the batch read-only but for the run's own copy
    of its job, jobs/ and out/ hidden, a private /tmp and /dev/shm of `tmp_size` bytes, a PID namespace, no
    capabilities and a seccomp filter (`pid_namespace` and `confine` are off only in the tests that show
    what they stop)."""

    tmp_size: int
    pid_namespace: bool = True
    keep_in_tmp: tuple[str, ...] = ()  # folders the target shows below /tmp: carried into each run's fresh /tmp
    hold: str = ""  # an empty folder outside /tmp where the probe holds them meanwhile
    confine: bool = True  # no capabilities and the seccomp filter in each run (off only in the tests' controls)


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


class ResultUnreadable(Exception):
    """A result file the probe (or a script that tampered with it) left unreadable."""


@dataclass(frozen=True)
class RequestPlaces:
    """Where the target sees one request's parts: its folder (the jobs below it), the folder the probe
    writes its results in, the folder each run's copy of its job goes in; and for the namespace kind of
    isolation, the root a run sees read-only and what it must not see at all (other jobs, the results)."""

    folder: str
    out_dir: str
    runs_dir: str
    batch_root: str
    hidden: tuple[str, ...]
    read_only: tuple[str, ...] = ()  # mounts of their own below batch_root (the runs' tmpfs): its bind misses them
    private: tuple[str, ...] = ()  # the runs' tmpfs of a session: each run sees only its own folders there

    @classmethod
    def one_folder(cls, root: str) -> RequestPlaces:
        """A batch that holds it all in one folder (a container's): jobs/, out/ and runs/ below `root`."""
        return cls(root, f"{root}/out", f"{root}/runs", root, (f"{root}/jobs", f"{root}/out"), (f"{root}/runs",))


MAX_SCRIPT_BYTES = 16 << 20  # one script copied into a request (a bundle's are far smaller)
MAX_TREE_BYTES = 512 << 20  # a commit's tree copied into a request: each run copies it again, on a 2g tmpfs
TREE_SKIPPED = frozenset({".git"})  # a worktree's .git names the user's repository: not the run's


def lay_out_batch(
    batch_dir: Path,
    jobs: list[ProbeJob],
    root_in_target: str,
    isolation: RunIsolation | UidIsolation | None = None,
    scheduling: ProbeScheduling | None = None,
) -> Path:
    """A batch in one fresh folder (made here; refused if it exists): the probe, each job's inputs, out/,
    runs/ and the request. Returns the request's path."""
    with FreshTree(batch_dir) as tree:
        copy_probe(tree)
        tree.folder("out")
        tree.folder("runs")
        lay_out_request(tree, jobs, RequestPlaces.one_folder(root_in_target), isolation, scheduling)
    return batch_dir / "request.json"


def copy_probe(tree: FreshTree) -> None:
    """The probe, as probe.py of `tree` (read-only to the target: a request never carries it)."""
    tree.copy_file(PROBE_PATH, "probe.py", MAX_SCRIPT_BYTES)


def lay_out_request(
    tree: FreshTree,
    jobs: list[ProbeJob],
    places: RequestPlaces,
    isolation: RunIsolation | UidIsolation | None = None,
    scheduling: ProbeScheduling | None = None,
    extra: Mapping[str, object] | None = None,
) -> None:
    """Each job's inputs under jobs/<id>/ of `tree`, and the request (request.json) naming them where the
    target sees them. The number of runs at once is decided inside the target (it alone sees its cores and
    cgroup CPU quota) unless `scheduling` fixes it; `extra`: more request keys (a warm probe's preload)."""
    for job in jobs:
        lay_out_job(tree, job)
        if job.turns is not None:  # in the request's folder: hidden from every run, its probe opens them
            job.turns.make(tree, f"turns/{job.id}", f"{places.folder}/turns/{job.id}")
    document = request_document(jobs, places, isolation, scheduling)
    tree.write("request.json", json.dumps({**document, **(extra or {})}, indent=1).encode())


def lay_out_job(tree: FreshTree, job: ProbeJob) -> None:
    """One job's folder, jobs/<id>/: its script and included files, or a whole tree (a commit's)."""
    from casekit.includes import IncludeError, check_layout, file_bytes

    folder = f"jobs/{job.id}"
    try:
        if job.tree is not None:
            tree.copy_tree(job.tree, folder, MAX_TREE_BYTES, TREE_SKIPPED)
            return
        tree.copy_file(job.script, f"{folder}/{job.script.name}", MAX_SCRIPT_BYTES)
    except UnreadableFile as why:
        raise RunnerError(f"{job.tree or job.script} {why}") from None
    check_layout([included.path for included in job.includes])
    for included in job.includes:
        try:
            tree.write(f"{folder}/{included.path}", file_bytes(included))
        except FileExistsError:
            raise IncludeError(f"included file {included.path} would replace a file beside the script") from None


def script_in_job(job: ProbeJob) -> str:
    """The script's path inside its job folder: its name, or its place in the job's tree."""
    return job.script.relative_to(job.tree).as_posix() if job.tree is not None else job.script.name


def request_document(
    jobs: list[ProbeJob],
    places: RequestPlaces,
    isolation: RunIsolation | UidIsolation | None = None,
    scheduling: ProbeScheduling | None = None,
) -> dict[str, Any]:
    """The probe's request (casekit.probe-request/1) for `jobs`, laid out at `places` in the target."""
    request_jobs = []
    for job in jobs:
        folder = f"{places.folder}/jobs/{job.id}"
        job_request = job.to_request(f"{folder}/{script_in_job(job)}")
        job_request["job_dir"] = folder
        if job.tree is not None:
            job_request["tree"] = True
        if job.turns is not None and job.turns.made and isinstance(job_request.get("perf"), dict):
            job_request["perf"]["turns"] = dict(job.turns.paths)  # type: ignore[index]
        request_jobs.append(job_request)
    request: dict[str, Any] = {"schema": REQUEST_SCHEMA, "out_dir": places.out_dir, "jobs": request_jobs}
    scheduling = scheduling or ProbeScheduling()
    request["targets_sharing"] = scheduling.targets_sharing
    if scheduling.parallel_runs is not None:
        request["parallel_runs"] = scheduling.parallel_runs
    if scheduling.serial_timings:
        request["serial_timings"] = True
    if isolation is not None:
        request["runs_dir"] = places.runs_dir
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
            "batch_root": places.batch_root,
            "hide": list(places.hidden),
            "readonly": list(places.read_only),
            "private": list(places.private),
            "tmp_size": isolation.tmp_size,
            "keep_in_tmp": list(isolation.keep_in_tmp),
            "hold": isolation.hold,
            "pid_namespace": isolation.pid_namespace,
            "confine": isolation.confine,
        }
    return request


def read_json_file(folder: SafeFolder, name: str, limit: int) -> Any:
    """A JSON file of `folder` that must be a regular file of at most `limit` bytes; ResultUnreadable otherwise."""
    try:
        raw = folder.read(name, limit)  # FileNotFoundError passes through: "no result" is not tampering
    except UnreadableFile as why:
        raise ResultUnreadable(f"{name} {why}") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ResultUnreadable(f"{name} is not valid JSON ({type(error).__name__}: {str(error)[:200]})") from None


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


def read_env_record(out: SafeFolder | None) -> dict[str, Any] | None:
    """out/env.json (None when missing); an unreadable one reads as a failed import with the reason."""
    if out is None:
        return None
    try:
        record = read_json_file(out, "env.json", MAX_ENV_BYTES)
    except FileNotFoundError:
        return None
    except ResultUnreadable as error:
        return {"ok": False, "error": f"the probe's environment record is unusable: {error}"}
    if not isinstance(record, dict) or (record.get("ok") and not isinstance(record.get("environment"), dict)):
        return {"ok": False, "error": "the probe's environment record is malformed"}
    return record


def read_lost_record(out: SafeFolder, job: ProbeJob) -> str | None:
    """Why the probe's worker for `job` ended without a result, or None (no record, or not a usable one)."""
    try:
        record = read_json_file(out, f"{job.id}.lost.json", MAX_ENV_BYTES)
    except (FileNotFoundError, ResultUnreadable):
        return None
    if not isinstance(record, dict) or record.get("job") != job.id or not isinstance(record.get("why"), str):
        return None
    return record["why"][:200]


@contextmanager
def results_folder(parent: Path, *names: str) -> Iterator[SafeFolder | None]:
    """The folder the probe wrote its results in, opened without following a link (None: not there, or
    not a folder: every job then says it has no result)."""
    try:
        folder = SafeFolder.open(parent, *names)
    except (FileNotFoundError, UnreadableFile):
        yield None
        return
    with folder:
        yield folder


NOT_REACHED = "the probe stopped before this script: "  # no result and no word of why: the probe ended first


def read_batch(out: SafeFolder | None, jobs: list[ProbeJob], probe_log: str = "") -> ProbeBatchResult:
    """Collect what the probe wrote in `out` (see `results_folder`); a job without a usable result says why."""
    env_record = read_env_record(out) or {}
    environment: Any = env_record.get("environment") if env_record.get("ok") else None
    last_line = (probe_log.strip().splitlines() or ["no output"])[-1]
    results: dict[str, dict[str, object]] = {}
    failed: dict[str, str] = {}
    for job in jobs:
        try:
            if out is None:
                raise FileNotFoundError
            results[job.id] = check_result(read_json_file(out, f"{job.id}.result.json", MAX_RESULT_BYTES), job)
            continue
        except FileNotFoundError:
            pass
        except ResultUnreadable as error:
            failed[job.id] = f"its result was tampered with or is unusable: {error}"
            continue
        lost = read_lost_record(out, job) if out is not None else None
        if lost:
            failed[job.id] = (
                f"the probe died while running this script (its worker: {lost}); the scripts beside it ran on"
            )
        elif not env_record:
            failed[job.id] = "the probe did not start: " + last_line
        elif not env_record.get("ok"):
            failed[job.id] = f"torch could not be imported: {env_record.get('error')}"
        else:
            failed[job.id] = NOT_REACHED + last_line
    wall: Any = None
    try:
        done = read_json_file(out, "done.json", MAX_ENV_BYTES) if out is not None else None
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
