"""The measurement protocol: fresh processes of one script on two or more targets, interleaved in one time
window, one at a time, nothing else of casekit's running beside them.

Every process is one perf run of a target's warm session (a fork of a probe that imported torch and never
compiled: a fresh process for Dynamo, Inductor and their caches). Per script:

    cold rounds   each target once (the first one rotating), its compile cache emptied first
    warm rounds   baseline, every other target, baseline again: the caches kept; the baseline's two halves
                  (before and after the others) are its A/A pair, the noise floor measured in the same window
    more rounds   while an axis is inconclusive and the rounds left up to `max_warm` could settle it
                  (casekit.perf.compare.wants_more), and within the budget

Each process times its first calls (the compile), then calls each entry point again in blocks, eager and
compiled in turn (casekit.probe: measure_steady).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from casekit.model import IncludedFile, ScriptRole
from casekit.perf.samples import ProcessSample, read_sample
from casekit.perf.settings import PerfSettings
from casekit.runners.interface import ProbeJob, ProbeSession, ProgressFn

DONE_LINE = re.compile(r"\d+/\d+ ")  # a session's "1/1 x.pre.perf done (...)": one per process, said otherwise


@dataclass(frozen=True)
class PerfSubject:
    """One script of one case, as perf runs it."""

    case_id: str
    role: ScriptRole
    name: str  # the script's file name
    source: str
    path: Path  # written where the session copies it from
    includes: tuple[IncludedFile, ...] = ()
    backend: str | None = None  # None: the script's own (inductor unless it names another)
    timeout: float = 600.0

    @property
    def key(self) -> str:
        return f"{self.case_id}.{self.role.value}"


@dataclass
class PerfTarget:
    """A target's warm session, and the Dynamo settings its runs take."""

    label: str
    session: ProbeSession
    dynamo: tuple[tuple[str, str], ...] = ()


@dataclass
class Measured:
    """What the processes of one subject measured, per target; the baseline's warm processes by half."""

    samples: dict[str, list[ProcessSample]] = field(default_factory=dict)
    baseline_halves: tuple[list[ProcessSample], list[ProcessSample]] = field(default_factory=lambda: ([], []))
    rounds: int = 0
    seconds: float = 0.0


def run_process(
    target: PerfTarget, subject: PerfSubject, settings: PerfSettings, cache: str, progress: ProgressFn
) -> ProcessSample:
    """One fresh process of `subject` on `target`: its compile (caches `cache`: cold or warm) and its blocks.
    The session's own lines (its probe's start) go to `progress`; its "1/1 … done" per process do not."""
    job = ProbeJob(
        id=f"{subject.key}.perf",
        script=subject.path,
        modes=("perf",),
        backend=settings.backend or subject.backend,
        timeout=subject.timeout,
        includes=subject.includes,
        dynamo_config=target.dynamo,
        perf={
            "cache": cache,
            "cache_key": subject.key,
            "blocks": settings.blocks,
            "block_s": settings.block_s,
            "threads": settings.threads,
        },
    )
    batch = target.session.run_probe([job], lambda message: None if DONE_LINE.match(message) else progress(message))
    raw = batch.results.get(job.id)
    return read_sample(raw, batch.failed.get(job.id, "no result"), cache, subject.name, subject.source)


def measure_subject(
    subject: PerfSubject,
    targets: list[PerfTarget],
    settings: PerfSettings,
    progress: ProgressFn,
    wants_more: Callable[[Measured], bool] = lambda measured: False,
) -> Measured:
    """Every process of `subject` on `targets` (the first is the baseline), as the module's docstring says.
    `wants_more(measured)`: whether another warm round could still settle a verdict."""
    measured = Measured({target.label: [] for target in targets})
    started = time.monotonic()
    baseline, others = targets[0], targets[1:]

    def one(target: PerfTarget, cache: str, half: int | None = None) -> None:
        begun = time.monotonic()
        sample = run_process(target, subject, settings, cache, progress)
        measured.samples[target.label].append(sample)
        if half is not None:
            measured.baseline_halves[half].append(sample)
        said = f"{sample.compile_s:.2f} s compile" if sample.compile_s is not None else sample.detail[:120]
        progress(f"perf {subject.key} {cache} on {target.label}: {said} [{time.monotonic() - begun:.1f} s]")

    for round_ in range(settings.cold):
        order = targets[round_ % len(targets) :] + targets[: round_ % len(targets)]
        for target in order:
            one(target, "cold")
    warm = 0
    while warm < settings.warm or (
        others and warm < settings.max_warm and _within_budget(started, settings) and wants_more(measured)
    ):
        one(baseline, "warm", 0 if others else None)
        for target in others:
            one(target, "warm")
        if others:
            one(baseline, "warm", 1)
        warm += 1
        if not _all_ok(measured):
            break  # a script that fails is judged on what it did, not timed again
    measured.rounds = warm
    measured.seconds = time.monotonic() - started
    return measured


def _within_budget(started: float, settings: PerfSettings) -> bool:
    return settings.budget_s is None or time.monotonic() - started < settings.budget_s


def _all_ok(measured: Measured) -> bool:
    return all(sample.ok for samples in measured.samples.values() for sample in samples)


def load_average() -> str:
    """The host's load (1, 5, 15 minutes) and cores, for the record beside every timing."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return ""
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} core(s)"
