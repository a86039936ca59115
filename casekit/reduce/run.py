"""`casekit reduce`: a script that shows a graph break -> the smallest script that shows the same break.

Steps: check the input (every bad input is one line before anything runs, or
right after the original's run); observe the original in a warm probe and pick
the break to keep (its eager run traces the lines it runs in the user's files);
check the source normalized by `ast.unparse` still keeps it; try one candidate
without every statement the original never ran; write the compiled call's
arguments as literals of what the original passed (`arguments.py`: the data
pipeline becomes dead code, which the explorer's statement rounds and their
unread-bindings try, `unread.py`, take out); shrink loop counts (every
later candidate runs faster); reduce the code, coarse to fine (the explorer's
passes: whole included files, config literals, whole statements, single-use
variables, then pysource-minimize's expressions, bodies, imports, arguments),
`jobs` candidates at once; shrink the inputs; confirm the result in a fresh
probe, exactly as replay would run it.
The best result so far is always in `--out` (written on every improvement),
so a Ctrl-C or a time limit keeps it; nothing else is written outside the
probe's own temporary folder, and every candidate runs in the sandbox.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from casekit.bundle import sha256_text
from casekit.capture import read_script
from casekit.classify import match_sites
from casekit.errors import CasekitError
from casekit.fsutil import write_atomic
from casekit.includes import collect_includes, file_bytes, missing_includes
from casekit.model import IncludedFile, ScriptObservation, ScriptSource, ScriptStatus, Site, SiteClass
from casekit.observe.batch import observe_batch
from casekit.reduce.after_break import completed_path, without_what_follows
from casekit.reduce.arguments import RecordedCall, recorded_calls, with_made_up_inputs
from casekit.reduce.candidate import Candidate, render_candidate
from casekit.reduce.candidates import CandidateJob, CandidateProbe, Layout, callers_seen, library_modules, lines_run
from casekit.reduce.choice import BreakChoice, ReduceRefused, choose_break
from casekit.reduce.coverage import without_unrun
from casekit.reduce.inputs import shrink_inputs
from casekit.reduce.lines import OriginalIndex, Rendered, RenderError, identity_map
from casekit.reduce.oracle import Judgement, Oracle, OracleOptions
from casekit.reduce.result import CaptureOptions, ReduceResult, ReduceStopped
from casekit.reduce.speculate import SpeculativeSearch
from casekit.reduce.statements import importers_first
from casekit.reduce.target import open_warm_session
from casekit.reduce.unread import without_unread
from casekit.runners.interface import ProbeScheduling, ProbeSession, ProgressFn, Runner, ScriptEntry
from casekit.scrub import temp_prefix
from casekit.timeouts import check_timeout, reduce_run_timeout

LOOPS = frozenset({"loop"})
ALL_INPUTS = frozenset({"shape", "loop", "size"})


@dataclass
class ReduceRequest:
    """What the user asked `casekit reduce` for."""

    script: Path
    out: Path
    includes: list[Path] = field(default_factory=list)
    choice: BreakChoice = BreakChoice()
    options: OracleOptions = OracleOptions()
    jobs: int | None = None  # candidates at once [default: the cores this process may use]
    timeout: float = 300.0  # the original's runs; candidates get a bound derived from what it took
    max_seconds: float | None = None  # the whole reduction, confirming run included; the best so far kept
    backend: str = "eager"
    shrink_inputs: bool = True
    capture: CaptureOptions | None = None  # file the result as a case


@dataclass
class _Inputs:
    """The checked input: the script, the files reduced beside it, the files kept as they are."""

    script: ScriptSource
    reduced: dict[str, str]  # name -> original text (the script and included Python files)
    fixed: tuple[IncludedFile, ...]
    indexes: dict[str, OriginalIndex]


def _read_inputs(request: ReduceRequest) -> _Inputs:
    script = read_script(request.script)
    includes = collect_includes(request.script, request.includes) if request.includes else []
    problems = missing_includes(request.script, script.source, includes)
    if problems:
        raise ReduceRefused(problems[0] + " (reduce runs the script with its included files only)")
    reduced = {script.name: script.source}
    fixed = []
    for item in includes:
        if item.path.endswith(".py") and item.text is not None:
            reduced[item.path] = item.text
        else:
            fixed.append(item)
    indexes = {}
    for name, text in reduced.items():
        try:
            indexes[name] = OriginalIndex(text)
        except SyntaxError as error:
            raise ReduceRefused(f"included file {name} is not valid Python: line {error.lineno}: {error.msg}") from None
    return _Inputs(script, reduced, tuple(fixed), indexes)


def _check_site(choice: BreakChoice, inputs: _Inputs) -> tuple[str, int] | None:
    """--site in canonical lines; a file or line that is not code of the script is refused now."""
    if choice.site is None:
        return None
    file, line = choice.site
    index = inputs.indexes.get(file)
    if index is None:
        names = ", ".join(sorted(inputs.indexes))
        raise ReduceRefused(f"--site {file}:{line}: {file} is not a file being reduced ({names})")
    canonical = index.canonical(line)
    if canonical is None:
        if line > len(index.lines):
            raise ReduceRefused(f"--site {file}:{line}: {file} has {len(index.lines)} lines")
        raise ReduceRefused(f"--site {file}:{line}: line {line} holds no statement ({index.line_text(line)!r})")
    return (file, canonical)


def _check_out(request: ReduceRequest) -> None:
    out = request.out
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ReduceRefused(f"--out {out}: not a folder")
    if out.resolve() == request.script.resolve().parent:
        raise ReduceRefused(f"--out {out}: the script's own folder (the reduced files would replace the originals)")


def _refuse_original(observation: ScriptObservation, timeout: float) -> None:
    status = observation.status
    if status is ScriptStatus.OK:
        return
    why = observation.detail or status.value
    if status is ScriptStatus.TIMEOUT:
        raise ReduceRefused(
            f"the script did not finish within {timeout:g} s ({why}): raise --timeout if it is only slow"
        )
    if status is ScriptStatus.EAGER_FAILED:
        raise ReduceRefused(f"the script fails without torch.compile ({why}): reduce needs a script that runs eagerly")
    if status is ScriptStatus.MISMATCH:
        raise ReduceRefused(f"the compiled script's outputs differ from eager ({why}): reduce keeps breaks, not this")
    if status is ScriptStatus.ENV_FAILED:
        raise ReduceRefused(f"the script could not be run: {why}")
    raise ReduceRefused(f"the compiled run fails ({why}): reduce keeps a graph break, and a crash is not one")


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class _Output:
    """The output folder: the best candidate so far, always complete (each file written atomically)."""

    def __init__(self, out: Path, fixed: tuple[IncludedFile, ...]) -> None:
        self.out = out
        self.written: dict[str, Path] = {}
        for item in fixed:  # data files the reduced script reads: beside it, as they were
            self._write(item.path, file_bytes(item))

    def _write(self, name: str, data: str | bytes) -> Path:
        target = self.out.joinpath(*PurePosixPath(name).parts)
        try:
            write_atomic(target, data)
        except OSError as error:
            raise CasekitError(f"--out {self.out}: cannot write {name}: {error.strerror or error}") from None
        self.written[name] = target
        return target

    def save(self, files: dict[str, str | None]) -> None:
        for name, text in files.items():
            if text is None:
                path = self.written.pop(name, None)
                if path is not None:
                    path.unlink(missing_ok=True)
            else:
                self._write(name, text)


def reduce_script(request: ReduceRequest, runner: Runner, progress: ProgressFn) -> ReduceResult:
    """Reduce `request.script` keeping its chosen break; the result is written under `request.out`.

    Raises ReduceRefused (one line) for every bad input, before any reduction starts, and
    ReduceStopped (with the result so far) on Ctrl-C.
    """
    check_timeout(request.timeout)
    inputs = _read_inputs(request)
    canonical_site = _check_site(request.choice, inputs)
    _check_out(request)
    jobs = max(1, request.jobs or default_jobs())
    runner.prepare(progress)
    env: dict[str, str] = {}
    if jobs > 1 and "OMP_NUM_THREADS" not in os.environ:  # runs side by side: one thread each, not two per core
        env["OMP_NUM_THREADS"] = str(max(1, default_jobs() // jobs))
    started = time.monotonic()
    with open_warm_session(runner, ProbeScheduling(parallel_runs=jobs), env) as probe:
        return _reduce(request, inputs, canonical_site, probe, runner, jobs, started, progress)


def _reduce(
    request: ReduceRequest,
    inputs: _Inputs,
    canonical_site: tuple[str, int] | None,
    probe: ProbeSession,
    runner: Runner,
    jobs: int,
    started: float,
    progress: ProgressFn,
) -> ReduceResult:
    name = inputs.script.name
    user_files = frozenset(inputs.reduced)
    layout = Layout(name, inputs.fixed, inputs.indexes)
    original = Candidate({n: Rendered(text, identity_map(inputs.indexes[n])) for n, text in inputs.reduced.items()})
    progress(f"observing {name} (eager baseline, compiled run) in a warm probe")
    first = CandidateProbe(probe, layout, _no_oracle(), request.timeout, progress, request.backend)
    job = first.jobs_for([original])[0]
    job.report_modules, job.eager_must_pass, job.trace_lines, job.call_sites = True, False, True, True
    batch = probe.run_probe([job], progress)
    # A fresh probe's start and one run of the original: what the confirming run at the end will cost
    # at most, kept out of the time limit so that the limit bounds the whole reduction.
    confirming_reserve = time.monotonic() - started
    shutil.rmtree(job.script.parent, ignore_errors=True)
    torch_version = str(batch.environment.get("torch") or "?")
    ran = lines_run(batch, job.id)
    callers = callers_seen(batch, job.id)
    calls = recorded_calls(batch.results.get(job.id) or {})
    observed = observe_batch(batch, job, inputs.script)
    _refuse_original(observed, request.timeout)
    placed = layout.placement_of(original).observation(observed)
    chosen = choose_break(placed, request.choice, user_files, canonical_site)
    progress(
        f"keeping {chosen.where()} {chosen.gb_id or chosen.category} ({chosen.reason[:60]}), of {len(placed.sites)} break(s)"
    )
    oracle = Oracle(placed, chosen, user_files, request.options)
    slowest = max(observed.eager_wall_s or 0.0, observed.compiled_wall_s or 0.0)
    timeout = reduce_run_timeout(slowest, request.timeout)
    probe.preload = library_modules(batch, job.id)
    candidates = CandidateProbe(probe, layout, oracle, timeout, progress, request.backend)
    trees = {n: index.tree for n, index in inputs.indexes.items()}
    normalized = render_candidate(trees, inputs.indexes)
    check = candidates.judge([normalized])[0]
    if not check.kept:
        raise ReduceRefused(f"the break is not kept once the source is normalized (ast.unparse): {check.why}")
    output = _Output(request.out, inputs.fixed)
    output.save(dict(inputs.reduced))
    before = original.code_lines()
    state = _State(normalized, before, output, progress, started)
    # the batch running at the deadline finishes (about one run of the original), then the confirming run
    reserve = confirming_reserve + slowest
    deadline = started + max(request.max_seconds - reserve, 0.0) if request.max_seconds else None
    stopped: str | None = None
    signum = 0

    def should_stop() -> bool:
        nonlocal stopped
        if deadline is not None and time.monotonic() > deadline:
            stopped = "time limit"
        return stopped is not None

    def judge(batch: Sequence[Candidate]) -> list[bool]:
        answers = candidates.answers(batch)
        state.tick(candidates.stats.run)
        return answers

    try:
        if ran:
            state.phase("code the original never ran (one candidate)")
            try:
                unrun = render_candidate(without_unrun(state.best.trees, ran, name), inputs.indexes)
            except (RenderError, SyntaxError, ValueError):
                unrun = None
            if unrun is not None and unrun.code_lines() < state.best.code_lines() and judge([unrun])[0]:
                state.keep(unrun)
        if request.shrink_inputs and calls and not should_stop():
            state.phase("inputs of the compiled call written as literals")
            _make_up_inputs(state, calls, inputs.indexes, judge, should_stop)
        if not should_stop():
            state.phase("what follows the break in each frame of its call path")
            path = completed_path(state.best.trees, oracle.kept_path(), callers)
            _cut_what_follows(state, path, calls, name, inputs.indexes, judge)
        if request.shrink_inputs and not should_stop():
            state.phase("loop counts")
            shrink_inputs(state.best, inputs.indexes, judge, jobs, LOOPS, state.keep, should_stop)
        if not should_stop():
            state.phase("code")
            order = importers_first(name, inputs.reduced)
            start = {
                "originals": dict(inputs.reduced),
                "trees": state.best.trees,
                "order": order,
                "removable": [n for n in inputs.reduced if n != name],
                "rounds": 2,
                "script": name,
                "compiled_calls": [(c.line, c.col) for c in calls if c.file == name],
            }
            SpeculativeSearch(
                start,
                judge,
                jobs,
                state.keep,
                lambda what: state.phase(f"code: {what}"),
                should_stop,
            ).run()
        if request.shrink_inputs and not should_stop():
            state.phase("inputs (shapes, loop counts, sizes)")
            shrink_inputs(state.best, inputs.indexes, judge, jobs, ALL_INPUTS, state.keep, should_stop)
    except KeyboardInterrupt as stop:
        stopped, signum = "interrupted", getattr(stop, "signum", 2)
    result = ReduceResult(
        script=name,
        out=request.out,
        torch=torch_version,
        kept=chosen,
        kept_now=None,
        lines_before=before,
        lines_after=state.best.code_lines() if state.improved else before,
        breaks_before=len(placed.sites),
        breaks_after=len(placed.sites),
        candidates=candidates.stats.run,
        cached=candidates.stats.cached,
        seconds=time.monotonic() - started,
        written=sorted(output.written.values()),
        files_before=len(inputs.reduced),
        files_after=sum(1 for r in state.best.files.values() if r is not None)
        if state.improved
        else len(inputs.reduced),
        stopped=stopped,
        refusals=dict(candidates.stats.refusals),
        original_sha256=inputs.script.sha256,
        improved=state.improved,
        original_files=original,
        best=state.best if state.improved else original,
        layout=layout,
        user_files=user_files,
        backend=request.backend,
        timeout=timeout,
    )
    if stopped == "interrupted":
        raise ReduceStopped(signum, result)
    if state.improved:
        progress("confirming the result in a fresh probe (no preloaded library, as replay runs it)")
        result.confirmed, final = _confirm(state.best, layout, oracle, runner, timeout, request.backend, progress)
        result.kept_now = result.confirmed.site if result.confirmed else None
        if final is not None:
            result.breaks_after = len(final.sites)
        result.seconds = time.monotonic() - started
        if request.capture is not None and result.confirmed and result.confirmed.kept:
            from casekit.reduce.filing import capture_reduced

            case = capture_reduced(result, request.capture, request.script, runner, progress)
            result.case_id, result.case_path = case.id, request.capture.archive.path_for(case.id)
    return result


def check_on_release(result: ReduceResult, runner: Runner, progress: ProgressFn) -> Judgement:
    """Whether the reduced files still show the kept break on another target (a second release):
    the original and the result run there side by side, the kept break found in the original's run by
    casekit's pairing, and the result judged against it by the reduction's own oracle."""
    if result.best is None or result.original_files is None or result.layout is None:
        raise CasekitError("check_on_release needs a finished reduction")
    runner.prepare(progress)
    layout = result.layout
    with open_warm_session(runner) as probe:
        lay_out = CandidateProbe(probe, layout, _no_oracle(), max(result.timeout, 60.0), progress, result.backend)
        original, reduced = lay_out.observe([result.original_files, result.best])
    if original.status is not ScriptStatus.OK:
        return Judgement(False, f"the original on this release: {original.status.value}: {original.detail}"[:300])
    pairings, _, _ = match_sites([result.kept], original.sites)
    there = pairings[0] if pairings else None
    if there is None or there.observed is None or there.site_class is not SiteClass.PERSISTS:
        return Judgement(False, "the original does not show the kept break on this release")
    return Oracle(original, there.observed, result.user_files).judge(reduced)


def _no_oracle() -> Oracle:
    """The original's own run is judged by `_refuse_original`, not by an oracle."""
    return Oracle(ScriptObservation(ScriptStatus.OK), Site("", 0, "", "", "", ""), frozenset())


def _confirm(
    best: Candidate, layout: Layout, oracle: Oracle, runner: Runner, timeout: float, backend: str, progress: ProgressFn
) -> tuple[Judgement, ScriptObservation | None]:
    """The result run by the runner itself (a fresh probe), judged again, and its run in its own lines."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=temp_prefix("reduce")))
    try:
        staging = _Staging(folder)
        job = staging.job(best, layout, timeout, backend)
        with runner.open_session(ScriptEntry.REDUCE_CONFIRM) as session:
            batch = session.run_probe([job], progress)
        script = best.files[layout.script]
        assert script is not None
        source = ScriptSource(layout.script, sha256_text(script.text), script.text)
        observed = observe_batch(batch, job, source)
        judgement = oracle.judge(layout.placement_of(best).observation(observed))
        return judgement, observed
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _make_up_inputs(
    state: _State,
    calls: Sequence[RecordedCall],
    indexes: Mapping[str, OriginalIndex],
    judge: Callable[[Sequence[Candidate]], list[bool]],
    should_stop: Callable[[], bool],
) -> None:
    """Each recorded call site in turn: its arguments as literals, both variants side by side (the
    first kept wins), from the best so far."""
    for call in calls:
        if should_stop():
            return
        tried: list[Candidate] = []
        for variant in (0, 1):
            for trees in with_made_up_inputs(state.best.trees, [call], variant):
                try:
                    tried.append(render_candidate(trees, indexes))
                except (RenderError, SyntaxError, ValueError):
                    continue
        if not tried:
            continue
        for candidate, kept in zip(tried, judge(tried), strict=True):
            if kept:
                state.keep(candidate)
                break


def _cut_what_follows(
    state: _State,
    path: Sequence[tuple[str, int]],
    calls: Sequence[RecordedCall],
    script: str,
    indexes: Mapping[str, OriginalIndex],
    judge: Callable[[Sequence[Candidate]], list[bool]],
) -> None:
    """The variants of `after_break.py`, boldest first, two at a time (the first kept wins): the cut in
    every frame of the path or only after the compiled call, the loops around that call once or not,
    and what is then unread out with or without its calls."""
    drivers = [(call.file, call.line) for call in calls]
    compiled_calls = frozenset((call.line, call.col) for call in calls if call.file == script)
    variants: list[Candidate] = []
    seen = {state.best.key}
    # (the break's frames too, or only the driver's; the loops around the compiled call run once; the
    # unread bindings go with their calls, or leave them as statements)
    for frames, unroll, drop_calls in (
        (path, True, True),
        (path, False, True),
        (path, False, False),
        ((), False, False),
    ):
        trees = without_unread(
            without_what_follows(state.best.trees, frames, drivers, unroll), script, drop_calls, compiled_calls
        )
        try:
            candidate = render_candidate(trees, indexes)
        except (RenderError, SyntaxError, ValueError):
            continue
        if candidate.key not in seen and candidate.code_lines() < state.best.code_lines():
            seen.add(candidate.key)
            variants.append(candidate)
    for start in range(0, len(variants), 2):
        pair = variants[start : start + 2]
        for candidate, kept in zip(pair, judge(pair), strict=True):
            if kept:
                state.keep(candidate)
                return


class _Staging:
    """Candidate files laid out for a runner's own probe (the confirmation)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def job(self, candidate: Candidate, layout: Layout, timeout: float, backend: str) -> CandidateJob:
        from casekit.reduce.candidates import included

        script = candidate.files[layout.script]
        assert script is not None
        path = self.folder / layout.script
        path.write_text(script.text, encoding="utf-8")
        reduced = tuple(
            included(n, r.text) for n, r in sorted(candidate.files.items()) if n != layout.script and r is not None
        )
        return CandidateJob(
            id="reduced",
            script=path,
            backend=backend,
            timeout=timeout,
            includes=reduced + layout.fixed,
            eager_must_pass=False,
        )


class _State:
    """The best candidate so far, written to the output on every improvement, and the progress shown."""

    REPORT_EVERY_S = 10.0

    def __init__(self, best: Candidate, before: int, output: _Output, progress: ProgressFn, started: float) -> None:
        self.best, self.before, self.output, self.progress = best, before, output, progress
        self.started = started
        self.improved = False
        self._said = started
        self._run = 0
        self._phase = ""

    def phase(self, what: str) -> None:
        self._phase = what
        self.progress(f"reducing {what}: {self.best.code_lines()} lines")

    def keep(self, candidate: Candidate) -> None:
        """A candidate the oracle kept: every search only keeps what is smaller (in code or in inputs)."""
        self.best = candidate
        self.improved = True
        self.output.save({n: (r.text if r is not None else None) for n, r in candidate.files.items()})

    def tick(self, run: int) -> None:
        self._run = run
        now = time.monotonic()
        if now - self._said >= self.REPORT_EVERY_S:
            self._said = now
            rate = run / max(now - self.started, 1e-9)
            self.progress(
                f"{self._phase}: {run} candidates ({rate:.1f}/s), {self.before} -> {self.best.code_lines()} lines"
            )
