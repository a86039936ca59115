"""Capture: run a repro (and its fix) for real under the probe and file the case."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.archive.store import Archive
from casekit.bundle import MAX_SCRIPT_CHARS, case_id_from_title, check_case_id, sha256_text
from casekit.errors import CasekitError, ScriptError, ScriptNameError
from casekit.includes import check_script_name, collect_includes, missing_includes
from casekit.model import (
    DRAFT_TAG,
    CaptureRecord,
    Case,
    Gate,
    IncludedFile,
    PerfRecord,
    Provenance,
    ScriptObservation,
    ScriptRole,
    ScriptSource,
    ScriptStatus,
)
from casekit.observe.batch import observe_batch
from casekit.observe.cause import NO_CUDA_ADVICE, failure_text, needs_cuda
from casekit.observe.interpret import CASEKIT_FAILED
from casekit.observe.logs import error_headline, is_registry_message
from casekit.observe.probe_output import read_environment
from casekit.perf.phase import PerfTargetSpec, portable, run_perf_phase
from casekit.perf.settings import PerfSettings
from casekit.runners import registry
from casekit.runners.interface import (
    ProbeBatchResult,
    ProbeJob,
    ProgressFn,
    Runner,
    RunnerFactory,
    ScriptEntry,
    allow_options,
)
from casekit.scrub import Replacement, Scrubber, interpreter_prefix, machine_folders
from casekit.timeouts import DEFAULT_RUN_TIMEOUT_S, check_timeout


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
    timeout: float = DEFAULT_RUN_TIMEOUT_S
    fullgraph: bool = True  # also run with fullgraph=True: the first break as an error (seeds' step 1)
    force: bool = False
    includes: list[Path] = field(default_factory=list)  # files and folders beside the script it needs
    waive: list[str] = field(default_factory=list)  # gates kept failing on purpose ("all" = every one)
    python: str | None = None  # the interpreter that runs the probe; None: this one
    allow: list[str] = field(default_factory=list)  # sandbox relaxations, KEY=VALUE (docs/sandbox.md)
    commit: bool = False  # commit the new bundle to the archive's git repository
    perf: PerfSettings | None = None  # --perf: time the scripts on the capture's target (figures only, context)


@dataclass
class CaptureOutcome:
    """What a capture filed, and the commit line when it committed the bundle."""

    case: Case
    path: Path
    committed: str | None = None


# ---------------------------------------------------------------- gates (Gate is in the model: bundles record waivers)


GATE_NAMES = tuple(g.value for g in Gate)


@dataclass(frozen=True)
class GateFailure:
    """One failed gate: which, on which script, the evidence, and what to do."""

    gate: Gate
    script: ScriptRole
    evidence: str
    advice: str

    def line(self) -> str:
        return f"gate {self.gate.value} ({self.script}-fix): {self.evidence}; {self.advice}"


def findings(observation: ScriptObservation, script_name: str | None = None) -> set[str]:
    """What a script shows that makes it a case: breaks, recompiles, fallbacks, crashes, mismatches.

    A break is named by file, function and reason, not line: a fix that only shifts lines fixes nothing;
    the script's own file is named alike for the pre- and post-fix (repro.py and fixed.py).
    """

    def file_of(file: str) -> str:
        return "the script" if file == script_name else file

    found = {f"break in {s.function} ({s.category}) in {file_of(s.file)}" for s in observation.sites}
    found |= {f"recompile of {r.function}" for r in observation.recompiles}
    found |= {f"fallback of {f.function} to eager" for f in observation.fallback_frames}
    if observation.status in (ScriptStatus.COMPILE_ERROR, ScriptStatus.CRASHED):
        found.add(f"{observation.status.value}: {_last_line(observation)}")
    if observation.status is ScriptStatus.MISMATCH:
        found.add("compiled output differs from eager")
    if observation.graphs > 1 and not observation.sites:
        found.add(f"{observation.graphs} graphs")  # a split with no break logged still counts
    return found


def is_sentinel(observations: Mapping[ScriptRole, ScriptObservation]) -> bool:
    """A pre-fix that ran and compiled cleanly: a case that alerts when a break appears.

    A post-fix may come with it (a version-difference case: the rewrite to use once the break appears).
    """
    pre = observations.get(ScriptRole.PRE)
    return (
        pre is not None and pre.status is ScriptStatus.OK and not _run_gates(ScriptRole.PRE, pre) and not findings(pre)
    )


def check_gates(
    observations: Mapping[ScriptRole, ScriptObservation], script_names: Mapping[ScriptRole, str] | None = None
) -> list[GateFailure]:
    """Every gate the observations fail (pure: used by capture before saving and by `casekit validate`).

    `script_names` ("pre" -> "repro.py") lets a break in repro.py and the same break in fixed.py compare equal.
    """
    failures: list[GateFailure] = []
    for which in ScriptRole:
        observation = observations.get(which)
        if observation is not None:
            failures.extend(_run_gates(which, observation, (script_names or {}).get(which)))
    pre, post = observations.get(ScriptRole.PRE), observations.get(ScriptRole.POST)
    if pre is not None and post is not None and not any(f.gate is not Gate.FIX for f in failures):
        names = script_names or {}
        before, after = findings(pre, names.get(ScriptRole.PRE)), findings(post, names.get(ScriptRole.POST))
        failures.extend(_fix_gate(before, after, post, _remaining_sites(pre, after, names.get(ScriptRole.PRE))))
    return failures


def _run_gates(which: ScriptRole, observation: ScriptObservation, name: str | None = None) -> list[GateFailure]:
    status = observation.status
    if status is ScriptStatus.TIMEOUT:
        return [GateFailure(Gate.TIMEOUT, which, observation.detail or "a run timed out", _TIMEOUT_ADVICE)]
    if status in (ScriptStatus.EAGER_FAILED, ScriptStatus.ENV_FAILED, ScriptStatus.UNOBSERVED):
        advice = NO_CUDA_ADVICE if needs_cuda(observation) else _eager_advice(observation, name)
        return [GateFailure(Gate.EAGER, which, f"the eager run failed: {_last_line(observation)}", advice)]
    crashed = status in (ScriptStatus.COMPILE_ERROR, ScriptStatus.CRASHED)
    called = sum(entry.calls for entry in observation.entries) or len(observation.calls)
    # a run that compiled graphs or met breaks before it raised did call its entry point (a probe older
    # than the module hook that records a raising call saw no call)
    if not called and not (crashed and (observation.graphs or observation.sites)):
        return [GateFailure(Gate.COMPILED, which, _never_called(observation), _COMPILED_ADVICE)]
    if not crashed and observation.check.compared == 0:
        evidence = f"{called} compiled call(s) but 0 compared with eager (the compiled run ended early?)"
        return [GateFailure(Gate.COMPILED, which, evidence, _COMPILED_ADVICE)]
    return []


def _never_called(observation: ScriptObservation) -> str:
    """Why no compiled entry point ran, from what the run shows."""
    if observation.status in (ScriptStatus.COMPILE_ERROR, ScriptStatus.CRASHED):
        return f"the compiled run stopped before any compiled call: {_last_line(observation)}"
    names = sorted({entry.name for entry in observation.entries})
    if names:
        return f"torch.compile'd {', '.join(names[:3])} never called (the compiled run reached its end without a call)"
    return "the script never calls torch.compile (no compiled function or module)"


def _remaining_sites(pre: ScriptObservation, after: set[str], script_name: str | None) -> list[str]:
    """The pre-fix's breaks still present after the fix, by their pre-fix place (the evidence to show)."""
    remaining = []
    for site in pre.sites:
        if findings(ScriptObservation(pre.status, sites=[site]), script_name) <= after:
            remaining.append(f"{site.where()} in {site.function} ({site.category})")
    return remaining


def _fix_gate(before: set[str], after: set[str], post: ScriptObservation, remaining: list[str]) -> list[GateFailure]:
    if before and before <= after:
        remained = "; ".join((remaining or sorted(before))[:3])
        advice = "pass the script that really fixes it as --fixed"
        evidence = f"the fix changes nothing the pre-fix showed: {remained}"
        return [GateFailure(Gate.FIX, ScriptRole.POST, evidence, advice)]
    if post.status is not ScriptStatus.OK:
        evidence = f"the post-fix does not match eager ({post.status.value}: {_last_line(post)})"
        return [GateFailure(Gate.FIX, ScriptRole.POST, evidence, "a fix must run and give eager's outputs")]
    return []


_TIMEOUT_ADVICE = "make the repro smaller, or raise --timeout"
# an error that names a file or module the script looked for beside it: --include brings it along
_MISSING_FILE = re.compile(r"No module named|FileNotFoundError|No such file or directory|ImportError")
# an operator that compiles its body even without torch.compile (torch.cond traces its branches with
# Dynamo in eager mode): running "without torch.compile" cannot make its error go away
_COMPILES_EAGERLY = re.compile(
    r"Higher Order Operator: (?P<op>[\w.]+)|UncapturedHigherOrderOpError|(?P<cond>torch\.cond)"
)
_HINT = re.compile(r"^\s*Hint:\s*(?P<hint>.+)$", re.MULTILINE)


def _eager_advice(observation: ScriptObservation, name: str | None) -> str:
    text = failure_text(observation)
    run = f"`python {name}`" if name else "the script"
    eagerly = _COMPILES_EAGERLY.search(text)
    if eagerly:
        op = eagerly["op"] or "torch.cond"
        hint = _HINT.search(text)
        what = f"do what its hint says ({hint['hint'].strip()[:160]})" if hint else "change what the error names"
        return f"{op} traces its body with Dynamo even without torch.compile, so {run} fails too: {what}"
    advice = f"make {run} run without torch.compile first"
    if _MISSING_FILE.search(text):
        return advice + " (a sibling file? pass --include)"
    return advice


_COMPILED_ADVICE = "call the torch.compile'd function or module in the script, and let the run reach its end"


def _last_line(observation: ScriptObservation) -> str:
    """The error in one line: what it is (a registry-style error's own title, never its hint lines)."""
    if observation.error is not None:
        message = observation.error.message
        if is_registry_message(message):  # its title, never a hint line below it
            return f"{observation.error.type}: {error_headline(message)}"[:300]
        lines = [line for line in message.strip().splitlines() if line.strip()]
        return (f"{observation.error.type}: {lines[-1].strip()}" if lines else observation.error.type)[:300]
    return (observation.detail.strip().splitlines() or [observation.status.value])[-1][:300]


def gates_to_check(failures: list[GateFailure], waived: Iterable[str | Gate]) -> list[GateFailure]:
    """The failures the user did not waive ("all" waives every gate)."""
    names = set(waived)
    return [f for f in failures if "all" not in names and f.gate.value not in names]


def check_waivers(waived: Iterable[str]) -> list[str]:
    unknown = sorted(set(waived) - set(GATE_NAMES) - {"all"})
    if unknown:
        raise CasekitError(f"--waive {unknown[0]}: not a gate (one of: {', '.join(GATE_NAMES)}, all)")
    return sorted(set(waived))


class CaptureRefused(CasekitError):
    """The capture would not make a case that reproduces: nothing was written (exit 1)."""

    exit_code = 1


class ProbeFailed(CasekitError):
    """casekit's own probe failed around a script: the script is not to blame, and nothing is filed."""


class MissingIncludes(CaptureRefused):
    """The script imports or reads a file beside it that was not passed with --include."""


class GateError(CaptureRefused):
    """A capture failed its gates: nothing was written."""

    def __init__(self, failures: list[GateFailure]) -> None:
        self.failures = failures
        lines = [f.line() for f in failures]
        lines.append("nothing was written (--waive GATE or --keep-failing-gates keeps such a case on purpose)")
        super().__init__("\n".join(lines))


def read_script(path: Path) -> ScriptSource:
    if not path.exists():
        raise ScriptError(f"script {path} does not exist")
    if not path.is_file():
        raise ScriptError(f"script {path} is not a file")
    if path.stat().st_size > 4 * MAX_SCRIPT_CHARS:  # refused from its size, before reading (UTF-8: 4 bytes a character)
        raise ScriptError(f"script {path} is over {MAX_SCRIPT_CHARS} characters: a repro is small")
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


_CREDENTIALS = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def strip_credentials(url: str) -> str:
    """A remote URL without the user:token@ part (a bundle is shared); a remote that is a folder of
    this machine (`/srv/git/model`, `file:///srv/git/model`) keeps only its name."""
    url = url.strip()
    if url.startswith(("/", "file://", "~")) or (len(url) > 1 and url[1] == ":" and url[0].isalpha()):
        return Path(url.removeprefix("file://").rstrip("/")).name or url
    return _CREDENTIALS.sub(lambda m: m["scheme"], url)


def provenance_of(path: Path) -> Provenance | None:
    """Remote (or folder name), commit, dirty flag and repo-relative path: never the checkout's host path."""
    try:
        import git
    except ImportError:  # pragma: no cover - gitpython is a hard dependency
        return None
    try:
        repo = git.Repo(path.resolve().parent, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    root = Path(repo.working_tree_dir or ".").resolve()
    relative = path.resolve().relative_to(root).as_posix()
    try:
        commit = repo.head.commit.hexsha
    except ValueError:  # a repository without commits yet
        commit = None
    remote = None
    try:
        remote = strip_credentials(next(iter(repo.remotes)).url) if repo.remotes else None
    except Exception:
        remote = None
    dirty = repo.is_dirty(untracked_files=True, path=relative) or relative in repo.untracked_files
    return Provenance(repo=root.name, remote=remote, commit=commit, dirty=bool(dirty), path=relative)


def jobs_for(
    case_id: str,
    scripts: dict[ScriptRole, Path],
    modes: tuple[str, ...],
    backend: str,
    timeout: float,
    includes: tuple[IncludedFile, ...] = (),
) -> list[ProbeJob]:
    return [
        ProbeJob(id=f"{case_id}.{which}", script=path, modes=modes, backend=backend, timeout=timeout, includes=includes)
        for which, path in scripts.items()
    ]


# Host-specific facts a bundle leaves out: they name this machine's folders and mean nothing elsewhere.
HOST_ONLY_ENVIRONMENT = ("python_executable", "env_path")


def environment_record(batch: ProbeBatchResult, runner: Runner, packages: dict[str, str]) -> dict[str, Any]:
    reported = read_environment(batch.environment).fields  # a field of the wrong type never reaches the bundle
    env: dict[str, Any] = {k: v for k, v in reported.items() if v is not None and v != []}
    env.update({k: v for k, v in runner.describe().items() if v is not None})
    prefixes = [interpreter_prefix(str(env.get("python_executable") or ""))]
    for key in HOST_ONLY_ENVIRONMENT:
        env.pop(key, None)
    if packages:
        env["packages"] = dict(sorted(packages.items()))
    extra = [Replacement(p, "<python>") for p in prefixes if p]
    scrubbed: dict[str, Any] = Scrubber(machine_folders(extra)).walk(env)
    return scrubbed


def capture_record(
    request: CaptureRequest, observations: Mapping[ScriptRole, ScriptObservation], waived: list[Gate]
) -> CaptureRecord:
    run_seconds = {}
    for which, observation in observations.items():
        for mode, seconds in (("eager", observation.eager_wall_s), ("compiled", observation.compiled_wall_s)):
            if seconds is not None:
                run_seconds[f"{which}.{mode}"] = round(seconds, 3)
    return CaptureRecord(
        timeout_s=request.timeout, run_seconds=run_seconds, sentinel=is_sentinel(observations), waived_gates=waived
    )


def read_includes(
    request: CaptureRequest, sources: Mapping[ScriptRole, ScriptSource | None]
) -> tuple[IncludedFile, ...]:
    """The --include files, and a refusal when a script imports or reads a sibling that is not included."""
    others = [request.fixed] if request.fixed else []  # with --include it sits beside the pre-fix: never included
    included = collect_includes(request.script, request.includes, others) if request.includes else []
    problems = []
    for which, script in ((ScriptRole.PRE, request.script), (ScriptRole.POST, request.fixed)):
        source = sources.get(which)
        if script is not None and source is not None:
            problems.extend(missing_includes(script, source.source, included))
    if problems:
        raise MissingIncludes("\n".join(sorted(set(problems))))
    return tuple(included)


def capture(request: CaptureRequest, runner: Runner, archive: Archive, progress: ProgressFn) -> Case:
    """Observe the scripts for real, check the gates, build the case, and save it atomically.

    Raises GateError (nothing written) when the observations fail a gate the request did not waive.
    """
    check_timeout(request.timeout)
    waivable = check_waivers(request.waive)
    # `--id ''` is refused like any bad id, not taken as "the default"
    case_id = check_case_id(
        request.case_id if request.case_id is not None else case_id_from_title(request.title or request.script.stem)
    )
    pre = read_script(request.script)
    post = read_script(request.fixed) if request.fixed else None
    if request.fixed and request.fixed.resolve().parent != request.script.resolve().parent and request.includes:
        raise CasekitError("--include needs the pre-fix and the post-fix scripts in the same folder")
    includes = read_includes(request, {ScriptRole.PRE: pre, ScriptRole.POST: post})
    if archive.exists(case_id) and not request.force:
        raise CasekitError(f"case {case_id!r} already exists in {archive.root} (choose --id, or --force to replace it)")
    scripts = {ScriptRole.PRE: request.script}
    if request.fixed:
        scripts[ScriptRole.POST] = request.fixed
    modes = ("eager", "compiled", "fullgraph") if request.fullgraph else ("eager", "compiled")
    jobs = jobs_for(case_id, scripts, modes, request.backend, request.timeout, includes)
    shown = registry.display(runner.spec)
    progress(f"preparing {shown}")
    runner.prepare(progress)
    progress(
        f"observing {len(jobs)} script(s) on {shown}: eager baseline, compiled run"
        + (", fullgraph=True run" if request.fullgraph else "")
    )
    with runner.open_session(ScriptEntry.CAPTURE) as session:
        batch = session.run_probe(jobs, progress)
    sources = {ScriptRole.PRE: pre, ScriptRole.POST: post}
    observations: dict[ScriptRole, ScriptObservation] = {}
    for job, which in zip(jobs, scripts, strict=True):
        source = sources[which]
        assert source is not None
        observations[which] = observe_batch(batch, job, source)
    for which, observation in observations.items():
        if observation.status is ScriptStatus.ENV_FAILED and observation.detail.startswith(CASEKIT_FAILED):
            raise ProbeFailed(f"{which}-fix: {observation.detail}; nothing was written")
    failures = check_gates(observations, {which: source.name for which, source in sources.items() if source})
    refused = gates_to_check(failures, waivable)
    if refused:
        raise GateError(refused)
    waived = sorted({f.gate for f in failures})
    for failure in failures:
        progress(f"waived: {failure.line()}")
    packages: dict[str, str] = {}
    for observation in observations.values():
        packages.update(observation.packages)
    case = Case(
        id=case_id,
        title=request.title or f"{request.script.name}: {len(observations[ScriptRole.PRE].sites)} graph break(s)",
        pre=pre,
        post=post,
        tags=list(request.tags),
        notes=request.notes,
        fix_summary=request.fix_summary,
        rollback_notes=request.rollback_notes,
        created=dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        backend=request.backend,
        environment=environment_record(batch, runner, packages),
        observations=observations,
        provenance=provenance_of(request.script),
        includes=list(includes),
        capture=capture_record(request, observations, waived),
    )
    if case.capture and case.capture.sentinel:
        progress("sentinel: the pre-fix compiles cleanly; the case alerts when a break appears")
    if request.perf is not None:
        try:
            case.perf = time_capture(case, runner, request.perf, progress)
        except CasekitError as error:  # the capture itself stands: it is saved, without timings
            progress(f"perf: not timed ({error}); the case is saved without timings")
    with archive.locked():  # the exists check that counts is here, under the lock: two captures, one saves
        if archive.exists(case_id) and not request.force:
            raise CasekitError(
                f"case {case_id!r} was saved meanwhile by another capture in {archive.root} "
                "(choose --id, or --force to replace it)"
            )
        archive.save(case)
    return case


def time_capture(case: Case, runner: Runner, settings: PerfSettings, progress: ProgressFn) -> list[PerfRecord]:
    """capture --perf: after the capture's runs, each script timed on the capture's target (casekit.perf:
    fresh processes, one at a time). One target: figures only, no verdict (the phase says so); the bundle
    keeps them as context for a reader, never as a later replay's baseline."""
    label = registry.label(runner.spec)
    target = PerfTargetSpec(
        label,
        runner.spec,
        torch=str(case.environment.get("torch") or "") or None,
        statuses={(case.id, which): observation.status for which, observation in case.observations.items()},
    )
    phase = run_perf_phase([case], [target], settings, lambda spec: runner, progress)
    for note in phase.notes:
        progress(note)
    timed = [PerfRecord(r.script, r.figures, None, r.skipped) for r in phase.results.get(label, [])]
    return portable(timed, runner.spec.python)


def run_capture(
    request: CaptureRequest, archive: Archive, make_runner: RunnerFactory, progress: ProgressFn
) -> CaptureOutcome:
    """`casekit capture`: refuse a --commit outside a git repository before anything runs, observe
    and file the case on the requested interpreter (`capture`), then commit the bundle when asked."""
    from casekit.archive.git import commit_paths, require_repo

    if request.commit:
        require_repo(archive.root)
    spec = registry.interpreter_target(request.python, allow_options(request.allow))
    case = capture(request, make_runner(spec), archive, progress)
    outcome = CaptureOutcome(case, archive.path_for(case.id))
    if request.commit:
        outcome.committed = commit_paths(archive.root, [outcome.path], f"capture {case.id}: {case.title}")
    return outcome


def validate_gates(case: Case) -> list[GateFailure]:
    """The gates a recorded case breaks that its capture did not waive (what `casekit validate` checks).

    Drafts imported from logs have no run of a repro yet: there is nothing to gate.
    """
    if DRAFT_TAG in case.tags:
        return []
    waived = case.capture.waived_gates if case.capture else []
    names = {which: script.name for which in ScriptRole if (script := case.script(which))}
    return gates_to_check(check_gates(case.observations, names), waived)
