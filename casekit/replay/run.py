"""Replay: rerun the archive on one or more targets and classify every break.

One session of the target's runner per target runs every script of every case,
then the rollback verification of the fixes that broke: on this host (python,
venv) one warm probe, torch imported once, serves both; a container runner
starts a second container. Targets run side by side where cores allow. A case's history
is appended only once its target has finished, atomically, so an interrupted
replay leaves each bundle untouched or complete.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from casekit import settings
from casekit.archive.store import Archive
from casekit.bundle import check_case_id
from casekit.classify import (
    Axes,
    CaseResult,
    attribute_changes,
    attributed,
    classify_case,
    recorded_axes,
    settings_axes,
    site_key,
)
from casekit.errors import CasekitError, ScriptNameError
from casekit.includes import check_script_name
from casekit.model import (
    Case,
    PerfRecord,
    ReplayRecord,
    ScriptObservation,
    ScriptRole,
    ScriptStatus,
    Severity,
    SiteVerdict,
)
from casekit.observe import interpret
from casekit.observe.batch import observe_batch
from casekit.observe.probe_output import ProbeOutputError, read_environment, run_as_compiled
from casekit.outcome import check_seconds
from casekit.perf.phase import PerfPhase, PerfResult, PerfTargetSpec, portable, run_perf_phase, verdict_lines
from casekit.perf.settings import PerfSettings
from casekit.runners import registry
from casekit.runners.dynamo import pin_name
from casekit.runners.interface import (
    ProbeBatchResult,
    ProbeJob,
    ProbeScheduling,
    ProbeSession,
    ProgressFn,
    RunnerFactory,
    ScriptEntry,
    TargetSpec,
)
from casekit.runners.process import REPLAY_PREFIX
from casekit.timeouts import replay_run_timeout
from casekit.versions import package_pin


@dataclass
class ReplayOptions:
    """How to replay: the backend (None = each case's recorded one), limits, what to record."""

    backend: str | None = None
    timeout: float | None = None  # None = each case's bound, derived from its capture (casekit.timeouts)
    record: bool = True
    pin_packages: bool = True
    parallel: int | None = None  # targets at once; None = as many as cores allow
    verify_rollback: bool = True
    jobs: int | None = None  # runs at once inside each target; None = its share of the target's cores
    serial_timings: bool = False  # runs one at a time, so timings are not measured under parallel load
    entry: ScriptEntry = ScriptEntry.REPLAY  # the way of running scripts this replay is (a bisection's probe)
    perf: PerfSettings | None = None  # --perf: time each case's scripts on every target, side by side, after
    perf_baseline: str | None = None  # --perf-baseline: the target the others are judged against (the first)

    def __post_init__(self) -> None:
        if self.timeout is not None:
            self.timeout = check_seconds("--timeout", self.timeout)
        if self.parallel is not None and self.parallel < 1:
            raise CasekitError(f"parallel must be at least 1, not {self.parallel}")
        if self.jobs is not None and self.jobs < 1:
            raise CasekitError(f"--jobs must be at least 1, not {self.jobs}")


@dataclass
class TargetRun:
    """One target's outcome: its environment, every case result, warnings."""

    spec: TargetSpec
    label: str  # the key of the build that ran ('venv:torch-2.13.0'); the asked label until it ran
    environment: dict[str, Any] = field(default_factory=dict)
    results: list[CaseResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    import_s: float | None = None
    recorded: list[str] = field(default_factory=list)  # case ids whose bundle got this target's record
    recorded_at: str = ""  # the time stamp of the records this run appended (replay --perf adds its figures)
    record_error: str | None = None  # why the others did not (a full disk...): each is as it was
    display: str | None = None  # the target for people here (`python:/home/me/...`); None: the label
    perf: list[PerfResult] = field(default_factory=list)  # replay --perf: its cases' scripts timed
    asked: str = ""  # the label as asked ('venv:torch-2.13'): a shard plan's key; "" when it is the label

    @property
    def planned(self) -> str:
        """The label a shard plan knows this target by (the one asked, before the build was resolved)."""
        return self.asked or self.label

    def name_by_build(self) -> None:
        """Once a build ran, the target is known by it: `--torch 2.13` that ran 2.13.0 is `venv:torch-2.13.0`,
        as `--torch 2.13.0` is, in the JSON, the bundles' history and every report."""
        built = registry.as_built(self.spec, self.environment.get("torch"))
        label, shown = registry.label(built), registry.display(built)
        if label != self.label:
            self.asked = self.asked or self.label
            self.label = label
        self.display = shown if shown != label else None

    def libraries(self) -> dict[str, str]:
        """The library versions this target's scripts imported (torch aside): one environment, one version each."""
        found: dict[str, str] = {}
        for result in self.results:
            for script in result.scripts.values():
                found.update({d: v for d, v in script.observation.packages.items() if d.lower() != "torch"})
        return dict(sorted(found.items()))


@dataclass
class ReplayReport:
    """Every target's run of one replay, in the order the targets were given."""

    targets: list[TargetRun]
    perf: PerfPhase | None = None  # replay --perf: the phase that timed the scripts after every target ran

    @property
    def results(self) -> list[CaseResult]:
        return [result for target in self.targets for result in target.results]

    def worst(self) -> Severity:
        return max((r.severity for r in self.results), key=lambda s: s.rank, default=Severity.INFO)


def case_pins(cases: list[Case]) -> tuple[tuple[str, ...], list[str]]:
    """Library versions the cases recorded (transformers, timm...), to install beside torch.

    Without them, a library upgrade masquerades as a torch change. Conflicting
    records are reported and the newest capture wins.
    """
    pins: dict[str, tuple[str, str]] = {}
    warnings = []
    for case in sorted(cases, key=lambda c: c.created):
        for dist, version in (case.environment.get("packages") or {}).items():
            if package_pin(dist, version) is None:
                warnings.append(
                    f"{case.id}: recorded package {str(dist)[:60]!r} {str(version)[:40]!r} ignored: not a name==version pin"
                )
                continue
            if dist.lower() in ("torch", "numpy", "triton") or dist.lower().startswith("nvidia"):
                continue
            if dist in pins and pins[dist][0] != version:
                warnings.append(
                    f"{dist}: {pins[dist][1]} recorded {pins[dist][0]}, {case.id} recorded {version}; using {version}"
                )
            pins[dist] = (version, case.id)
    return tuple(f"{dist}=={version}" for dist, (version, _) in sorted(pins.items())), warnings


def _write_scripts(cases: list[Case], folder: Path) -> dict[tuple[str, ScriptRole], Path]:
    paths: dict[tuple[str, ScriptRole], Path] = {}
    for case in cases:
        for which in ScriptRole:
            script = case.script(which)
            if script is None:
                continue
            # Every component is re-checked here: a bundle's fields never choose a host path.
            path = folder / check_case_id(case.id) / which / check_script_name(script.name)
            if folder.resolve() not in path.resolve().parents:
                raise ScriptNameError(f"{case.id}: script path {path} would leave the batch folder")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(script.source, encoding="utf-8")
            paths[(case.id, which)] = path
    return paths


def _jobs(
    cases: list[Case], paths: dict[tuple[str, ScriptRole], Path], options: ReplayOptions, modes: tuple[str, ...]
) -> list[ProbeJob]:
    return [
        ProbeJob(
            id=f"{case_id}.{which}",
            script=path,
            modes=modes,
            backend=options.backend or next(c.backend for c in cases if c.id == case_id),
            timeout=replay_run_timeout(next(c.capture for c in cases if c.id == case_id), options.timeout),
            includes=tuple(next(c.includes for c in cases if c.id == case_id)),
        )
        for (case_id, which), path in paths.items()
    ]


def _package_warnings(
    cases: list[Case], observations: dict[tuple[str, ScriptRole], ScriptObservation], label: str
) -> list[str]:
    warnings = []
    for case in cases:
        recorded: dict[str, str] = case.environment.get("packages") or {}
        for (case_id, _), observation in observations.items():
            if case_id != case.id:
                continue
            for dist, version in observation.packages.items():
                if dist in recorded and recorded[dist] != version and dist.lower() != "torch":
                    warnings.append(
                        f"{case.id}: {dist} {version} on {label}, but the case recorded {recorded[dist]}: "
                        "a change may come from the library, not torch"
                    )
    return sorted(set(warnings))


def _verify_rollbacks(
    probe: ProbeSession,
    dynamo: tuple[tuple[str, str], ...],
    cases: dict[str, Case],
    results: list[CaseResult],
    paths: dict[tuple[str, ScriptRole], Path],
    options: ReplayOptions,
    progress: ProgressFn,
) -> None:
    """Prove a way back for each broken fix: post-fix with fullgraph=False, else pre-fix the same way."""
    needing = [r for r in results if r.rollback and r.rollback.needed]
    if not needing:
        return
    jobs = []
    for result in needing:
        for which in (ScriptRole.POST, ScriptRole.PRE):
            if (result.case_id, which) in paths:
                jobs.append(
                    ProbeJob(
                        id=f"{result.case_id}.{which}.rollback",
                        script=paths[(result.case_id, which)],
                        modes=("eager", "rollback"),
                        backend=options.backend or cases[result.case_id].backend,
                        timeout=replay_run_timeout(cases[result.case_id].capture, options.timeout),
                        includes=tuple(cases[result.case_id].includes),
                        dynamo_config=dynamo,
                    )
                )
    progress(f"verifying rollback for {len(needing)} case(s) with fullgraph=False …")
    batch = probe.run_probe(jobs, progress)
    for result in needing:
        rollback = result.rollback
        assert rollback is not None
        attempts = []
        for which in (ScriptRole.POST, ScriptRole.PRE):
            job_id = f"{result.case_id}.{which}.rollback"
            raw = batch.results.get(job_id)
            case = cases[result.case_id]
            script = case.script(which)
            if raw is None or script is None:
                attempts.append(f"{which}-fix: not run ({batch.failed.get(job_id, 'no result')})")
                continue
            try:
                as_compiled = run_as_compiled(raw, "rollback")
            except ProbeOutputError as error:
                attempts.append(f"{which}-fix: not run ({error})")
                continue
            observation = interpret(as_compiled, str(as_compiled.get("script")), script.name, script.source)
            matches = observation.check.allclose is not False
            if observation.status is ScriptStatus.OK and matches:
                rollback.verified = True
                rollback.path = f"{which}-fix with fullgraph=False"
                attempts.append(
                    f"{which}-fix with fullgraph=False runs and matches eager "
                    f"({observation.check.compared} call(s) compared, {len(observation.sites)} break(s), {observation.graphs} graph(s))"
                )
                break
            attempts.append(
                f"{which}-fix with fullgraph=False: {observation.status.value} {observation.detail}".strip()
            )
        else:
            rollback.verified = False
        rollback.detail = rollback.detail + "; " + "; ".join(attempts)


def run_target(
    spec: TargetSpec,
    cases: list[Case],
    options: ReplayOptions,
    make_runner: RunnerFactory,
    progress: ProgressFn,
    targets_sharing: int = 1,
) -> TargetRun:
    """Replay every case on one target (one probe process, one torch import).

    `targets_sharing`: how many targets run at the same time, dividing the cores between them.
    """
    started = time.monotonic()
    pinning = options.pin_packages and registry.runner_class(spec.runner).pins_libraries
    pins, pin_warnings = case_pins(cases) if pinning else ((), [])
    given = {pin_name(pin) for pin in spec.packages}  # --package replaces the cases' pin of that library
    pins = tuple(pin for pin in pins if pin_name(pin) not in given) + (spec.packages if pinning else ())
    if pins:
        spec = replace(spec, extra_packages=tuple(spec.extra_packages) + pins)
    label, shown = registry.label(spec), registry.display(spec)
    run = TargetRun(spec=spec, label=label, warnings=list(pin_warnings), display=shown if shown != label else None)
    say: ProgressFn = lambda message: progress(f"[{shown}] {message}")  # noqa: E731
    folder = Path(tempfile.mkdtemp(prefix=f"{REPLAY_PREFIX}{os.getpid()}-"))  # the pid: swept if we are killed
    session: ProbeSession | None = None
    try:
        paths = _write_scripts(cases, folder)
        jobs = [replace(job, dynamo_config=spec.dynamo) for job in _jobs(cases, paths, options, ("eager", "compiled"))]
        runner = make_runner(spec)
        runner.scheduling = ProbeScheduling(options.jobs, targets_sharing, options.serial_timings)
        observations: dict[tuple[str, ScriptRole], ScriptObservation] = {}
        try:
            runner.prepare(say)
            # one session for the batch and its rollback check: on this host, one warm probe for both
            session = runner.open_session(options.entry)
            say(f"running {len(jobs)} script(s) of {len(cases)} case(s)")
            batch = session.run_probe(jobs, say)
        except CasekitError as error:
            run.error = str(error)
            batch = ProbeBatchResult(environment={}, results={}, failed={job.id: str(error) for job in jobs})
        # what the probe saw wins: the exact build (2.5.1+cu124), not the version the runner asked for
        run.environment = {**runner.describe(), **batch.environment}
        run.import_s = batch.import_s
        run.name_by_build()
        label = run.label
        by_id = {case.id: case for case in cases}
        for job in jobs:
            case_id, role = job.id.rsplit(".", 1)
            which = ScriptRole(role)  # the job ids _jobs made: "<case id>.<role>"
            script = by_id[case_id].script(which)
            assert script is not None
            observations[(case_id, which)] = observe_batch(batch, job, script)
        run.warnings += _package_warnings(cases, observations, label)
        for case in cases:
            observed = {which: obs for (case_id, which), obs in observations.items() if case_id == case.id}
            run.results.append(classify_case(case, label, observed))
        if options.verify_rollback and run.error is None and session is not None:
            try:
                _verify_rollbacks(session, spec.dynamo, by_id, run.results, paths, options, say)
            except CasekitError as error:
                run.warnings.append(f"rollback verification could not run: {error}")
    finally:
        if session is not None:
            session.close()
        if not settings.keep_batch():
            shutil.rmtree(folder, ignore_errors=True)
    run.seconds = time.monotonic() - started
    return run


def replay_record(result: CaseResult, run: TargetRun, at: str | None = None) -> ReplayRecord:
    """The compact history entry a bundle keeps (so later replays can tell 'reappeared'); `at`: when (now)."""
    sites = []
    observed: dict[ScriptRole, list[str]] = {}
    for which, script in result.scripts.items():
        observed[which] = sorted({site_key(site) for site in script.observation.sites})
        for pairing in script.sites:
            site = pairing.site
            sites.append(SiteVerdict(which, pairing.site_class, site.anchor.where(), site.category))
    return ReplayRecord(
        at=at or _now(),
        target=run.label,
        torch=str(run.environment.get("torch", "?")),
        runner=run.spec.runner,
        verdict=result.verdict,
        severity=result.severity,
        statuses={which: script.status for which, script in result.scripts.items()},
        sites=sites,
        observed=observed,
        reasons=list(result.reasons),
        graphs={which: script.observation.graphs for which, script in result.scripts.items()},
        compile_s={
            which: seconds
            for which, script in result.scripts.items()
            if (seconds := script.observation.compile_s()) is not None
        },
        fallbacks={
            which: [f"{f.function} ({f.file}:{f.line})" for f in script.observation.fallback_frames]
            for which, script in result.scripts.items()
        },
        timing_load=next(
            (s.observation.timing_load for s in result.scripts.values() if s.observation.timing_load), None
        ),
    )


def record_history(archive: Archive, run: TargetRun) -> None:
    """Append this target's results to each bundle: reload under the lock, write atomically.

    The first bundle that cannot be recorded (a full disk, a bundle changed meanwhile) stops it:
    `run.recorded` says which were, `run.record_error` why the rest were not; each is whole.
    """
    if run.error:
        return  # an environment that never ran says nothing about the cases
    run.recorded_at = _now()
    try:
        with archive.locked():
            for result in run.results:
                case = archive.load(result.case_id)
                case.replays.append(replay_record(result, run, run.recorded_at))
                archive.save(case)
                run.recorded.append(case.id)
    except CasekitError as error:
        left = len(run.results) - len(run.recorded)
        run.record_error = f"{run.label}: {left} of {len(run.results)} bundle(s) not recorded: {error}"


def _one_per_build(by_build: dict[str, TargetRun], run: TargetRun) -> tuple[TargetRun, TargetRun | None]:
    """The run that holds `run`'s label and the one it displaces (None: the label was free): of two
    requests of one build, the first that ran wins over a later one, and one that ran over one that failed."""
    first = by_build.get(run.label)
    if first is None:
        by_build[run.label] = run
        return run, None
    if first.error and not run.error:
        by_build[run.label] = run
        return run, first
    return first, run


def record_perf(archive: Archive, run: TargetRun) -> None:
    """replay --perf --record: the figures each script's timing gave, added to the record this run appended to
    its bundle (the timing runs after every target has replayed and been recorded). Bundles are reloaded under
    the lock and written atomically; one that cannot be written stops it, as recording does."""
    cases = {case_id for case_id in run.recorded if any(p.case_id == case_id for p in run.perf)}
    try:
        with archive.locked():
            for case_id in sorted(cases):
                case = archive.load(case_id)
                mine = [r for r in case.replays if r.target == run.label and r.at == run.recorded_at]
                if not mine:
                    continue  # rewritten meanwhile (its history replaced): nothing of this run's to add to
                timed = [
                    PerfRecord(p.script, p.figures, p.comparison, p.skipped) for p in run.perf if p.case_id == case_id
                ]
                mine[-1].perf = portable(timed, run.spec.python)
                archive.save(case)
    except CasekitError as error:
        run.record_error = run.record_error or f"{run.label}: the perf figures were not recorded: {error}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def replay(
    cases: list[Case],
    specs: list[TargetSpec],
    options: ReplayOptions,
    archive: Archive | None,
    make_runner: RunnerFactory,
    progress: ProgressFn,
) -> ReplayReport:
    """Replay all cases on all targets; record each target's history as it completes."""
    if not cases:
        raise CasekitError("the archive holds no cases to replay")
    workers = max(1, min(len(specs), options.parallel or (os.cpu_count() or 1)))
    lock = threading.Lock()
    runs: list[TargetRun | None] = [None] * len(specs)
    by_build: dict[str, TargetRun] = {}  # label -> the run that holds it: two requests of one build are one target

    def locked_progress(message: str) -> None:
        with lock:
            progress(message)

    def one(index: int) -> None:
        run = run_target(specs[index], cases, options, make_runner, locked_progress, targets_sharing=workers)
        with lock:
            kept, dropped = _one_per_build(by_build, run)
            if dropped is not None:
                kept.warnings.append(
                    f"{dropped.planned} ran the same build as {kept.planned}: one target, {kept.label}, holds its results"
                )
                runs[:] = [None if other is dropped else other for other in runs]
            if kept is run:
                if options.record and archive is not None:
                    record_history(archive, run)
                runs[index] = run

    if workers == 1:
        for index in range(len(specs)):
            one(index)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(one, i) for i in range(len(specs))]:
                future.result()
    report = ReplayReport([run for run in runs if run is not None])
    attribute(cases, report)
    if options.perf is not None:
        report.perf = time_cases(cases, report, options, make_runner, progress)
        if options.record and archive is not None:
            for run in report.targets:
                record_perf(archive, run)
    return report


def time_cases(
    cases: list[Case], report: ReplayReport, options: ReplayOptions, make_runner: RunnerFactory, progress: ProgressFn
) -> PerfPhase:
    """replay --perf: every target that ran times the cases' scripts side by side (casekit.perf), after the
    replay, alone on the machine; a slower axis raises its result to a warning, with why in its reasons."""
    assert options.perf is not None
    ran = [run for run in report.targets if not run.error]
    targets = [
        PerfTargetSpec(
            label=run.label,
            spec=run.spec,
            torch=run.environment.get("torch"),
            libraries=run.libraries(),
            statuses={(r.case_id, role): script.status for r in run.results for role, script in r.scripts.items()},
        )
        for run in ran
    ]
    phase = run_perf_phase(cases, targets, options.perf, make_runner, progress, options.perf_baseline)
    for run in ran:
        run.perf = phase.results.get(run.label, [])
        for result in run.results:
            lines = [line for timed in run.perf if timed.case_id == result.case_id for line in verdict_lines(timed)]
            result.reasons += lines
            if any(" slower " in line for line in lines) and result.severity.rank < Severity.WARN.rank:
                result.severity = Severity.WARN  # the seeds' performance level: a warning, gated by --fail-on warn
    return phase


def result_axes(run: TargetRun, result: CaseResult) -> Axes:
    """What the case ran on in this target: its torch, the libraries its scripts imported, the settings."""
    libraries: dict[str, str] = {}
    for script in result.scripts.values():
        libraries.update({d: v for d, v in script.observation.packages.items() if d.lower() != "torch"})
    environment = read_environment(run.environment)
    return Axes(environment.torch, libraries, settings_axes(environment.dynamo_settings))


def attribute(cases: list[Case], report: ReplayReport) -> None:
    """Per case, over every target that ran: which axis (torch, a library, a Dynamo setting) changed each break."""
    for case in cases:
        runs = [
            (run.label, result_axes(run, result), result)
            for run in report.targets
            if not run.error
            for result in run.results
            if result.case_id == case.id
        ]
        said = attribute_changes(recorded_axes(case), runs) if runs else {}
        for run in report.targets:
            if run.label in said:
                run.results = [
                    attributed(result, said[run.label]) if result.case_id == case.id else result
                    for result in run.results
                ]
