"""`casekit reduce`: a script that shows a graph break -> the smallest script that shows the same break.

The driver: check the input (`request.py`); observe the original in a warm probe and pick the break
to keep (its eager run traces the lines it runs and who called whom: `facts.py`); check that the
source normalized by `ast.unparse` still keeps it; run the pipeline (`pipeline.py`) in an explorer
process, `jobs` candidates at once (`explore/`), each candidate run in the warm probe and judged by
the oracle (`judge/`); confirm the result in a fresh probe, exactly as replay would run it. The best
result so far is always in `--out` (written on every improvement), so a Ctrl-C or a time limit keeps
it; nothing else is written outside the probe's own temporary folder, and every candidate runs in the
sandbox.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass

from casekit.model import ScriptObservation, Site
from casekit.observe.batch import observe_batch
from casekit.reduce.confirm import check_on_release, confirm, no_oracle
from casekit.reduce.explore.speculate import SpeculativeSearch
from casekit.reduce.facts import Facts, callers_seen, library_modules, lines_run, recorded_calls
from casekit.reduce.judge.choice import ReduceRefused, choose_break
from casekit.reduce.judge.oracle import Oracle
from casekit.reduce.judge.probe import CandidateProbe, Layout
from casekit.reduce.output import Best, Output
from casekit.reduce.passes.statements import importers_first
from casekit.reduce.pipeline import last_step, steps_for, tidy_steps
from casekit.reduce.request import Inputs, ReduceRequest, check_out, check_site, read_inputs, refuse_original
from casekit.reduce.result import ReduceResult, ReduceStopped
from casekit.reduce.source.candidate import Candidate, render_candidate
from casekit.reduce.source.lines import Rendered, identity_map
from casekit.reduce.target import open_warm_session
from casekit.runners.interface import ProbeScheduling, ProbeSession, ProgressFn, Runner
from casekit.timeouts import check_timeout, reduce_run_timeout

__all__ = ["ReduceRequest", "check_on_release", "default_jobs", "reduce_script"]

TIDY_BATCHES = 16  # batches the tidy stage may need once the time for reducing is up
TIDY_SHARE = 0.2  # of --max-time at most, kept for it


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def reduce_script(request: ReduceRequest, runner: Runner, progress: ProgressFn) -> ReduceResult:
    """Reduce `request.script` keeping its chosen break; the result is written under `request.out`.

    Raises ReduceRefused (one line) for every bad input, before any reduction starts, and
    ReduceStopped (with the result so far) on Ctrl-C.
    """
    check_timeout(request.timeout)
    inputs = read_inputs(request)
    canonical_site = check_site(request.choice, inputs)
    check_out(request)
    jobs = max(1, request.jobs or default_jobs())
    runner.prepare(progress)
    env: dict[str, str] = {}
    if jobs > 1 and "OMP_NUM_THREADS" not in os.environ:  # runs side by side: one thread each, not two per core
        env["OMP_NUM_THREADS"] = str(max(1, default_jobs() // jobs))
    started = time.monotonic()
    with open_warm_session(runner, ProbeScheduling(parallel_runs=jobs), env) as probe:
        original = _observe_original(request, inputs, canonical_site, probe, progress)
        return _reduce(request, inputs, original, probe, runner, jobs, started, progress)


@dataclass
class _Original:
    """The original's run: what it showed (in canonical lines), the break kept, what it told the passes."""

    observed: ScriptObservation
    placed: ScriptObservation
    kept: Site
    oracle: Oracle
    facts: Facts
    torch: str
    reserve: float  # a fresh probe's start and one run of the original: the confirming run at most
    layout: Layout
    files: Candidate


def _observe_original(
    request: ReduceRequest,
    inputs: Inputs,
    canonical_site: tuple[str, int] | None,
    probe: ProbeSession,
    progress: ProgressFn,
) -> _Original:
    started = time.monotonic()
    name = inputs.script.name
    layout = Layout(name, inputs.fixed, inputs.indexes)
    files = Candidate({n: Rendered(text, identity_map(inputs.indexes[n])) for n, text in inputs.reduced.items()})
    progress(f"observing {name} (eager baseline, compiled run) in a warm probe")
    first = CandidateProbe(probe, layout, no_oracle(), request.timeout, progress, request.backend)
    job = first.jobs_for([files])[0]
    job.report_modules, job.eager_must_pass, job.trace_lines, job.call_sites = True, False, True, True
    batch = probe.run_probe([job], progress)
    reserve = time.monotonic() - started
    shutil.rmtree(job.script.parent, ignore_errors=True)
    observed = observe_batch(batch, job, inputs.script)
    refuse_original(observed, request.timeout)
    placed = layout.placement_of(files).observation(observed)
    kept = choose_break(placed, request.choice, frozenset(inputs.reduced), canonical_site)
    progress(
        f"keeping {kept.where()} {kept.gb_id or kept.category} ({kept.reason[:60]}), of {len(placed.sites)} break(s)"
    )
    probe.preload = library_modules(batch, job.id)
    oracle = Oracle(placed, kept, frozenset(inputs.reduced), request.options)
    facts = Facts(
        script=name,
        originals=dict(inputs.reduced),
        order=tuple(importers_first(name, inputs.reduced)),
        ran={n: frozenset(lines) for n, lines in lines_run(batch, job.id).items()},
        callers={place: frozenset(seen) for place, seen in callers_seen(batch, job.id).items()},
        calls=tuple(recorded_calls(batch.results.get(job.id) or {})),
        kept_path=tuple(oracle.kept_path()),
        backend=request.backend,
    )
    torch = str(batch.environment.get("torch") or "?")
    return _Original(observed, placed, kept, oracle, facts, torch, reserve, layout, files)


def _reduce(
    request: ReduceRequest,
    inputs: Inputs,
    original: _Original,
    probe: ProbeSession,
    runner: Runner,
    jobs: int,
    started: float,
    progress: ProgressFn,
) -> ReduceResult:
    observed = original.observed
    slowest = max(observed.eager_wall_s or 0.0, observed.compiled_wall_s or 0.0)
    timeout = reduce_run_timeout(slowest, request.timeout)
    candidates = CandidateProbe(probe, original.layout, original.oracle, timeout, progress, request.backend)
    trees = {n: index.tree for n, index in inputs.indexes.items()}
    normalized = render_candidate(trees, inputs.indexes)
    check = candidates.judge([normalized])[0]
    if not check.kept:
        raise ReduceRefused(f"the break is not kept once the source is normalized (ast.unparse): {check.why}")
    output = Output(request.out, inputs.fixed)
    output.save(dict(inputs.reduced))
    best = Best(normalized, original.files.code_lines(), output, progress, started)
    # the batch running at the deadline finishes (about one run of the original), then the confirming run
    reserve = original.reserve + slowest
    deadline = started + max(request.max_seconds - reserve, 0.0) if request.max_seconds else None
    stopped: str | None = None
    signum = 0

    def judge(batch: Sequence[Candidate]) -> list[bool]:
        answers = candidates.answers(batch)
        best.tick(candidates.stats.run)
        return answers

    def cut_short() -> bool:
        """Time to finish: what is left is kept for the tidy steps' few candidates (at the recent pace)."""
        nonlocal stopped
        if deadline is None or request.max_seconds is None:
            return False
        keep = min(TIDY_BATCHES * candidates.stats.recent, TIDY_SHARE * request.max_seconds)
        if time.monotonic() > deadline - keep:
            stopped = "time limit"
        return stopped is not None

    def past_deadline() -> bool:
        """The time is up: the search skips to its last step. Said as the time limit even when only tidy
        steps were left to skip (the result is then not what an unhurried reduction gives)."""
        nonlocal stopped
        if deadline is None or time.monotonic() <= deadline:
            return False
        stopped = "time limit"
        return True

    search = SpeculativeSearch(
        {"facts": original.facts, "trees": trees, "steps": steps_for(request.shrink_inputs)},
        judge,
        jobs,
        best.keep,
        best.phase,
        past_deadline,
        cut_short,
        tidy_steps(),
        last_step(),
    )
    try:
        if not search.run():
            stopped = "time limit"
    except KeyboardInterrupt as stop:
        stopped, signum = "interrupted", getattr(stop, "signum", 2)
    result = _result(request, inputs, original, best, candidates, output, started, stopped, timeout)
    if stopped == "interrupted":
        raise ReduceStopped(signum, result)
    if best.improved:
        _confirm_and_file(result, request, best.best, original, runner, progress)
        result.seconds = time.monotonic() - started
    return result


def _confirm_and_file(
    result: ReduceResult,
    request: ReduceRequest,
    best: Candidate,
    original: _Original,
    runner: Runner,
    progress: ProgressFn,
) -> None:
    """The result confirmed in a fresh probe, then filed as a case when --capture asks (and it kept the break)."""
    progress("confirming the result in a fresh probe (no preloaded library, as replay runs it)")
    judgement, final = confirm(
        best, original.layout, original.oracle, runner, result.timeout, request.backend, progress
    )
    result.confirmed, result.kept_now = judgement, judgement.site if judgement else None
    if final is not None:
        result.breaks_after = len(final.sites)
    if request.capture is not None and judgement.kept:
        from casekit.reduce.filing import capture_reduced

        case = capture_reduced(result, request.capture, request.script, runner, progress)
        result.case_id, result.case_path = case.id, request.capture.archive.path_for(case.id)


def _result(
    request: ReduceRequest,
    inputs: Inputs,
    original: _Original,
    best: Best,
    candidates: CandidateProbe,
    output: Output,
    started: float,
    stopped: str | None,
    timeout: float,
) -> ReduceResult:
    improved = best.improved
    return ReduceResult(
        script=inputs.script.name,
        out=request.out,
        torch=original.torch,
        kept=original.kept,
        kept_now=None,
        lines_before=best.before,
        lines_after=best.best.code_lines() if improved else best.before,
        breaks_before=len(original.placed.sites),
        breaks_after=len(original.placed.sites),
        candidates=candidates.stats.run,
        cached=candidates.stats.cached,
        seconds=time.monotonic() - started,
        written=sorted(output.written.values()),
        files_before=len(inputs.reduced),
        files_after=sum(1 for r in best.best.files.values() if r is not None) if improved else len(inputs.reduced),
        stopped=stopped,
        refusals=dict(candidates.stats.refusals),
        original_sha256=inputs.script.sha256,
        improved=improved,
        original_files=original.files,
        best=best.best if improved else original.files,
        layout=original.layout,
        user_files=frozenset(inputs.reduced),
        backend=request.backend,
        timeout=timeout,
    )
