"""Capture: run a repro (and its fix) for real under the probe and file the case."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.archive import Archive
from casekit.bundle import check_case_id, check_script_name, sha256_text, slugify
from casekit.errors import CasekitError, ScriptError, ScriptNameError
from casekit.model import Case, Provenance, ScriptObservation, ScriptSource
from casekit.observe import failed_observation, interpret
from casekit.runners.interface import ProbeBatchResult, ProbeJob, ProgressFn, Runner


@dataclass
class CaptureRequest:
    """What the user asked capture to file."""

    script: Path
    fixed: Path | None = None
    case_id: str | None = None
    title: str | None = None
    tags: list[str] = field(default_factory=list)
    notes: str = ""
    fix_summary: str = ""
    rollback_notes: str = ""
    backend: str = "eager"
    timeout: float = 300.0
    fullgraph: bool = True  # also run with fullgraph=True: the first break as an error (seeds' step 1)
    force: bool = False


def read_script(path: Path) -> ScriptSource:
    if not path.exists():
        raise ScriptError(f"script {path} does not exist")
    if not path.is_file():
        raise ScriptError(f"script {path} is not a file")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ScriptError(f"cannot read script {path}: {error}") from None
    try:
        compile(source, str(path), "exec")
    except SyntaxError as error:
        raise ScriptError(f"script {path} is not valid Python: line {error.lineno}: {error.msg}") from None
    try:
        check_script_name(path.name)
    except ScriptNameError as error:
        raise ScriptError(f"script {path}: {error}; rename the file") from None
    return ScriptSource(name=path.name, sha256=sha256_text(source), source=source)


def provenance_of(path: Path) -> Provenance | None:
    """Remote, commit, dirty flag and repo-relative path when the script lives in a git checkout."""
    try:
        import git
    except ImportError:  # pragma: no cover - gitpython is a hard dependency
        return None
    try:
        repo = git.Repo(path.resolve().parent, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    root = Path(repo.working_tree_dir or ".").resolve()
    relative = str(path.resolve().relative_to(root))
    try:
        commit = repo.head.commit.hexsha
    except ValueError:  # a repository without commits yet
        commit = None
    remote = None
    try:
        remote = next(iter(repo.remotes)).url if repo.remotes else None
    except Exception:
        remote = None
    dirty = repo.is_dirty(untracked_files=True, path=relative) or relative in repo.untracked_files
    return Provenance(repo=str(root), remote=remote, commit=commit, dirty=bool(dirty), path=relative)


def jobs_for(
    case_id: str, scripts: dict[str, Path], modes: tuple[str, ...], backend: str, timeout: float
) -> list[ProbeJob]:
    return [
        ProbeJob(id=f"{case_id}.{which}", script=path, modes=modes, backend=backend, timeout=timeout)
        for which, path in scripts.items()
    ]


def observe_batch(batch: ProbeBatchResult, job: ProbeJob, source: ScriptSource) -> ScriptObservation:
    """The observation for one job of a batch (env_failed when the probe gave nothing)."""
    raw = batch.results.get(job.id)
    if raw is None:
        return failed_observation(batch.failed.get(job.id, "no result from the probe"))
    return interpret(raw, str(raw.get("script", job.script)), source.name, source.source)


def environment_record(batch: ProbeBatchResult, runner: Runner, packages: dict[str, str]) -> dict[str, Any]:
    env: dict[str, Any] = {k: v for k, v in batch.environment.items() if v is not None and v != []}
    env.update({k: v for k, v in runner.describe().items() if v is not None})
    if packages:
        env["packages"] = dict(sorted(packages.items()))
    return env


def capture(request: CaptureRequest, runner: Runner, archive: Archive, progress: ProgressFn) -> Case:
    """Observe the scripts for real, build the case, and save it atomically."""
    pre = read_script(request.script)
    post = read_script(request.fixed) if request.fixed else None
    case_id = check_case_id(request.case_id or slugify(request.title or request.script.stem))
    if archive.exists(case_id) and not request.force:
        raise CasekitError(f"case {case_id!r} already exists in {archive.root} (choose --id, or --force to replace it)")
    scripts = {"pre": request.script}
    if request.fixed:
        scripts["post"] = request.fixed
    modes = ("eager", "compiled", "fullgraph") if request.fullgraph else ("eager", "compiled")
    jobs = jobs_for(case_id, scripts, modes, request.backend, request.timeout)
    progress(f"preparing {runner.spec.label}")
    runner.prepare(progress)
    progress(
        f"observing {len(jobs)} script(s) on {runner.spec.label}: eager baseline, compiled run"
        + (", fullgraph=True run" if request.fullgraph else "")
    )
    batch = runner.run_probe(jobs, progress)
    sources = {"pre": pre, "post": post}
    observations = {}
    for job, which in zip(jobs, scripts, strict=True):
        source = sources[which]
        assert source is not None
        observations[which] = observe_batch(batch, job, source)
    packages: dict[str, str] = {}
    for observation in observations.values():
        packages.update(observation.packages)
    case = Case(
        id=case_id,
        title=request.title or f"{request.script.name}: {len(observations['pre'].sites)} graph break(s)",
        pre=pre,
        post=post,
        tags=list(request.tags),
        notes=request.notes,
        fix_summary=request.fix_summary,
        rollback_notes=request.rollback_notes,
        created=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        backend=request.backend,
        environment=environment_record(batch, runner, packages),
        observations=observations,
        provenance=provenance_of(request.script),
    )
    with archive.locked():  # the exists check that counts is here, under the lock: two captures, one saves
        if archive.exists(case_id) and not request.force:
            raise CasekitError(
                f"case {case_id!r} was saved meanwhile by another capture in {archive.root} "
                "(choose --id, or --force to replace it)"
            )
        archive.save(case)
    return case
