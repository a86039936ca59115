"""The perf phase of a replay (or a capture): after every target has replayed, each case's script is timed
on every target side by side, their timed blocks in turns (casekit.perf.measure), and judged against the
baseline.

The baseline is the first target (or the one `baseline` names). With one target there is nothing to
compare in this run: its figures are reported, and one line says how to get a verdict (a recorded timing
from another host or day is context, never a baseline). Each target gets a warm session of its own for
this phase (ScriptEntry.PERF), which imports Inductor once before its processes fork.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from casekit.errors import CasekitError
from casekit.includes import check_script_name
from casekit.model import Case, PerfComparison, PerfFigures, PerfRecord, PerfVerdict, ScriptRole, ScriptStatus
from casekit.perf.compare import compare, figures, wants_more
from casekit.perf.measure import Measured, PerfSubject, PerfTarget, load_average, measure_subject
from casekit.perf.settings import PerfSettings
from casekit.runners.interface import ProbeScheduling, ProgressFn, RunnerFactory, ScriptEntry, TargetSpec
from casekit.scrub import Replacement, Scrubber, interpreter_prefix, machine_folders, temp_prefix

# Installed modules a perf session imports once, before its processes fork: Inductor's own import is
# seconds of every process's warm compile otherwise, the same on every side and not the compile's.
PRELOAD = ("torch._inductor.compile_fx", "torch._inductor.codecache", "torch._functorch.aot_autograd")


@dataclass
class PerfTargetSpec:
    """A target of the replay, for the perf phase: its label, how to make its runner, what it ran on."""

    label: str
    spec: TargetSpec
    torch: str | None = None
    libraries: Mapping[str, str] = field(default_factory=dict)
    statuses: Mapping[tuple[str, ScriptRole], ScriptStatus] = field(default_factory=dict)


@dataclass
class PerfResult:
    """One script of one case on one target: its figures, and against the baseline (None: it is the baseline,
    or there was none)."""

    case_id: str
    script: ScriptRole
    figures: PerfFigures
    comparison: PerfComparison | None = None
    skipped: str = ""  # why this script was not timed on this target


@dataclass
class PerfPhase:
    """What the phase found: results per target label, the baseline, and the notes for the reader."""

    results: dict[str, list[PerfResult]] = field(default_factory=dict)
    baseline: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    load: str = ""


def run_perf_phase(
    cases: Sequence[Case],
    targets: Sequence[PerfTargetSpec],
    settings: PerfSettings,
    make_runner: RunnerFactory,
    progress: ProgressFn,
    baseline: str | None = None,
) -> PerfPhase:
    """Time every case's scripts (settings.scripts) on every target, side by side; judge against the baseline."""
    import time

    started = time.monotonic()
    phase = PerfPhase(baseline=None)
    if not targets:
        return phase
    ordered = _baseline_first(list(targets), baseline)
    phase.baseline = ordered[0].label if len(ordered) > 1 else None
    if len(ordered) == 1:
        phase.notes.append(
            f"perf: one target ({ordered[0].label}): figures only; a verdict needs a baseline measured in this "
            "run, side by side (add it as a target: --torch VERSION or --python PATH; a timing recorded on another "
            "host or day is context, not a baseline)"
        )
    phase.load = load_average()
    progress(
        f"perf: timing {len(cases)} case(s) on {len(ordered)} target(s), their blocks in turns "
        f"(cold {settings.cold}, warm {settings.warm} a side; {phase.load})"
    )
    folder = Path(tempfile.mkdtemp(prefix=temp_prefix("replay")))
    sessions: list[PerfTarget] = []
    try:
        for target in ordered:
            sessions.append(open_perf_target(target, make_runner))
        for case in cases:
            for role in settings.scripts:
                script = case.script(role)
                if script is None:
                    continue
                failed = [t for t in ordered if t.statuses.get((case.id, role), ScriptStatus.OK) is not ScriptStatus.OK]
                if failed:
                    why = f"not timed: {role}-fix did not run cleanly on {failed[0].label} ({failed[0].statuses[(case.id, role)].value})"
                    for target in ordered:
                        phase.results.setdefault(target.label, []).append(
                            PerfResult(case.id, role, PerfFigures(target.label, role), skipped=why)
                        )
                    continue
                subject = perf_subject(case, role, folder, settings)
                measured = measure_subject(subject, sessions, settings, progress, _more(settings, ordered[0].label))
                _judge(phase, case, role, measured, ordered, settings)
    finally:
        for opened in sessions:
            opened.session.close()
        shutil.rmtree(folder, ignore_errors=True)
    phase.seconds = time.monotonic() - started
    return phase


def open_perf_target(target: PerfTargetSpec, make_runner: RunnerFactory) -> PerfTarget:
    """A target's warm perf session (ScriptEntry.PERF: one process at a time, or a round's in turns;
    Inductor preloaded before its processes fork); CasekitError in one line for a target that cannot keep
    a warm probe on this host."""
    runner = make_runner(target.spec)
    runner.prepare(lambda message: None)
    session = runner.open_session(ScriptEntry.PERF, scheduling=ProbeScheduling(parallel_runs=1, serial_timings=True))
    if not session.warm or not session.supports_turns:
        session.close()
        raise CasekitError(
            f"--perf times fresh processes in a warm probe on this host: {target.label} cannot "
            "(use --runner venv or --python PATH)"
        )
    session.preload = list(PRELOAD)
    return PerfTarget(target.label, session, target.spec.dynamo)


def _baseline_first(targets: list[PerfTargetSpec], baseline: str | None) -> list[PerfTargetSpec]:
    if baseline is None:
        return targets
    chosen = [t for t in targets if t.label == baseline]
    if not chosen:
        raise CasekitError(
            f"--perf-baseline {baseline}: no such target (targets: {', '.join(t.label for t in targets)})"
        )
    return chosen + [t for t in targets if t.label != baseline]


def perf_subject(case: Case, role: ScriptRole, folder: Path, settings: PerfSettings) -> PerfSubject:
    """One script of a case as perf runs it, written under `folder` (where a session copies it from)."""
    script = case.script(role)
    assert script is not None
    path = folder / case.id / role.value / check_script_name(script.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script.source, encoding="utf-8")
    return PerfSubject(
        case.id, role, script.name, script.source, path, tuple(case.includes), settings.backend or _timing_backend(case)
    )


def _timing_backend(case: Case) -> str | None:
    """The backend perf times: the case's own, unless it is the eager backend (a break's shape needs no
    inductor, its cost does: never time `eager`); None leaves the script's own choice (inductor by default)."""
    return None if case.backend in ("eager", "", None) else case.backend


def _more(settings: PerfSettings, baseline: str):  # noqa: ANN202 - a closure over the phase's settings
    return lambda measured: wants_more(measured.samples, measured.baseline_halves, settings, baseline)


def _judge(
    phase: PerfPhase,
    case: Case,
    role: ScriptRole,
    measured: Measured,
    ordered: Sequence[PerfTargetSpec],
    settings: PerfSettings,
) -> None:
    base = ordered[0]
    for target in ordered:
        found = figures(target.label, role, measured.samples[target.label], phase.load)
        comparison = None
        if target is not base:
            comparison = compare(
                measured.samples[target.label],
                measured.samples[base.label],
                measured.baseline_halves,
                settings,
                base.label,
            )
            comparison.cause = cause_of(base, target)
        phase.results.setdefault(target.label, []).append(PerfResult(case.id, role, found, comparison))


def portable(records: Sequence[PerfRecord], python: str | None = None) -> list[PerfRecord]:
    """Timings as a bundle keeps them: copies, with this machine's folders and the target interpreter's
    (`python`) replaced by placeholders, as a capture's observations are (a bundle is shared)."""
    prefix = interpreter_prefix(python or "")
    scrubber = Scrubber(machine_folders([Replacement(prefix, "<python>")] if prefix else []))
    return [scrubber.walk(copy.deepcopy(record)) for record in records]


def cause_of(baseline: PerfTargetSpec, target: PerfTargetSpec) -> str:
    """What differs between the two targets, the change's likely axis: torch, a library, a Dynamo setting."""
    parts = []
    if baseline.torch != target.torch:
        parts.append(f"torch {baseline.torch} → {target.torch}")
    for name in sorted(set(baseline.libraries) | set(target.libraries)):
        old, new = baseline.libraries.get(name), target.libraries.get(name)
        if old != new and name.lower() != "torch":
            parts.append(f"library {name} {old or 'absent'} → {new or 'absent'}")
    settings_a, settings_b = dict(baseline.spec.dynamo), dict(target.spec.dynamo)
    for name in sorted(set(settings_a) | set(settings_b)):
        if settings_a.get(name) != settings_b.get(name):
            parts.append(f"setting {name} {settings_a.get(name, 'default')} → {settings_b.get(name, 'default')}")
    return "; ".join(parts) or "nothing recorded differs (the same build: a noise check)"


def verdict_lines(result: PerfResult) -> list[str]:
    """The reasons a result's perf gives the replay's verdict: each axis that is slower or faster, with the
    structure that explains it and what changed it."""
    comparison = result.comparison
    if comparison is None:
        return []
    lines = []
    for axis in comparison.axes:
        if axis.verdict in (PerfVerdict.SLOWER, PerfVerdict.FASTER):
            explained = f"; {comparison.explanation}" if comparison.explanation else "; the structure is the same"
            lines.append(
                f"perf ({result.script.value}-fix): {axis.axis.value.replace('_', ' ')} {axis.verdict.value} "
                f"{axis.change:+.1%} against {comparison.baseline} ({comparison.cause}){explained}"
            )
    return lines
