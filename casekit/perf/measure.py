"""The measurement protocol: fresh processes of one script on two or more targets, in one time window,
nothing else of casekit's running beside them.

Every process is one perf run of a target's warm session (a fork of a probe that imported torch and never
compiled: a fresh process for Dynamo, Inductor and their caches). Per script:

    cold rounds   each target once (the first one rotating), one process at a time, its compile cache
                  emptied first
    warm rounds   the baseline, every other target, the baseline again: the caches kept. The round's
                  processes run at once but take turns (casekit.runners.turns): each compiles alone, then
                  their timed blocks alternate, A B A' | A B A' | …, so every block of a target has the
                  baseline's blocks just before and after it, in the same time window. The baseline's two
                  processes (its halves, one request of its session) are its A/A pair, the noise floor
                  measured in the same run.
    more rounds   while an axis is inconclusive and the rounds left up to `max_warm` could settle it
                  (casekit.perf.compare.wants_more), and within the budget

Each process times its first calls (the compile), then calls each entry point again in blocks, eager and
compiled in turn (casekit.probe: measure_steady). One target alone has nothing to alternate with: its
processes run one at a time.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from casekit.model import IncludedFile, ScriptRole
from casekit.perf.samples import ProcessSample, read_sample
from casekit.perf.settings import PerfSettings
from casekit.runners.interface import ProbeJob, ProbeSession, ProgressFn
from casekit.runners.turns import Turns

DONE_LINE = re.compile(r"\d+/\d+ ")  # a session's "1/1 x.pre.perf done (...)": one per process, said otherwise
BLOCK_TURN_S = 30.0  # the longest a timed block's turn may take (about 2 x block_s): past it, no more turns


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


def run_processes(
    target: PerfTarget,
    subject: PerfSubject,
    settings: PerfSettings,
    cache: str,
    progress: ProgressFn,
    turns: list[Turns] | None = None,
) -> list[ProcessSample]:
    """Fresh processes of `subject` on `target` (caches `cache`: cold or warm), each its compile and its
    blocks: one, or one per entry of `turns`, run at once in one request (their turns keep them apart; they
    share the target's compile cache). The session's own lines (its probe's start) go to `progress`; its
    "1/1 … done" per process do not."""
    jobs = [
        ProbeJob(
            id=f"{subject.key}.perf" + (f".{index + 1}" if index else ""),
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
            turns=turn,
        )
        for index, turn in enumerate(turns or [None])
    ]
    batch = target.session.run_probe(jobs, lambda message: None if DONE_LINE.match(message) else progress(message))
    return [
        read_sample(
            batch.results.get(job.id), batch.failed.get(job.id, "no result"), cache, subject.name, subject.source
        )
        for job in jobs
    ]


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

    def said(sample: ProcessSample, cache: str, target: PerfTarget, seconds: float) -> None:
        figure = f"{sample.compile_s:.2f} s compile" if sample.compile_s is not None else sample.detail[:120]
        progress(f"perf {subject.key} {cache} on {target.label}: {figure} [{seconds:.1f} s]")

    for round_ in range(settings.cold):
        order = targets[round_ % len(targets) :] + targets[: round_ % len(targets)]
        for target in order:
            begun = time.monotonic()
            (sample,) = run_processes(target, subject, settings, "cold", progress)
            measured.samples[target.label].append(sample)
            said(sample, "cold", target, time.monotonic() - begun)
    warm = 0
    while warm < settings.warm or (
        others and warm < settings.max_warm and _within_budget(started, settings) and wants_more(measured)
    ):
        begun = time.monotonic()
        if others:
            halves, rest = run_round(baseline, others, subject, settings, progress, warm)
            for half, sample in enumerate(halves):
                measured.samples[baseline.label].append(sample)
                measured.baseline_halves[half].append(sample)
                said(sample, "warm", baseline, time.monotonic() - begun)
            for target, sample in zip(others, rest, strict=True):
                measured.samples[target.label].append(sample)
                said(sample, "warm", target, time.monotonic() - begun)
        else:
            (sample,) = run_processes(baseline, subject, settings, "warm", progress)
            measured.samples[baseline.label].append(sample)
            said(sample, "warm", baseline, time.monotonic() - begun)
        warm += 1
        if not _all_ok(measured):
            break  # a script that fails is judged on what it did, not timed again
    measured.rounds = warm
    measured.seconds = time.monotonic() - started
    return measured


def run_round(
    baseline: PerfTarget,
    others: list[PerfTarget],
    subject: PerfSubject,
    settings: PerfSettings,
    progress: ProgressFn,
    number: int,
) -> tuple[list[ProcessSample], list[ProcessSample]]:
    """One warm round: two processes of the baseline (its halves) and one of every other target, all at once
    (a request per target, in threads), in turns (conduct) in the order A, the others, A'. Returns (the
    baseline's two, the others' in order), each marked with the round's `number`."""
    for target in [baseline, *others]:
        target.session.start(progress)  # here, not in the threads below: a probe dies with its starting thread
    turns = [Turns() for _ in range(len(others) + 2)]
    asked = [(baseline, [turns[0], turns[-1]])] + [(t, [turns[i + 1]]) for i, t in enumerate(others)]
    found: list[list[ProcessSample] | None] = [None] * len(asked)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        target, its_turns = asked[index]
        try:
            found[index] = run_processes(target, subject, settings, "warm", progress, its_turns)
        except BaseException as error:  # raised in the caller's thread, once every run has ended
            errors.append(error)

    threads = [threading.Thread(target=work, args=(index,), daemon=True) for index in range(len(asked))]
    for thread in threads:
        thread.start()
    # each turn's run is alive while its target's request is
    alive = [threads[0]] + threads[1:] + [threads[0]]
    try:
        conduct(turns, alive, settings.blocks, subject.timeout, progress)
    finally:
        for opened in turns:
            opened.close()  # every run left waiting goes on: its last turn was its last
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    samples = [sample for group in found for sample in group or []]
    for sample in samples:
        sample.round = number
    return samples[:2], samples[2:]


def conduct(
    turns: list[Turns], threads: list[threading.Thread], blocks: int, limit: float, progress: ProgressFn
) -> None:
    """The turns of one round: every run ready at its first line, then each one's compile alone, in order,
    then `blocks` cycles of one block each, always in that order (A B A' | A B A' | …: each target's block
    lies between the baseline's two, every run's blocks are as far apart, and none runs right after its
    own. With the order reversed every other cycle, A B A' | A' B A, the baseline's runs went twice in a
    row at each turn-round and started those blocks with their caches warm: in 11 A/A comparisons the
    target measured a median 2.2 % slower, 10 of them above zero). A run that ends (its script failed), or
    whose turn outlasts its limit, gets no more turns; one whose turn outlasted it is said (it may have run
    beside the next)."""
    live = list(range(len(turns)))

    def running(index: int) -> Callable[[], bool]:
        return threads[index].is_alive

    deadline = time.monotonic() + limit
    for index in list(live):  # ready: laid out by its session, forked, at the script's first line
        while not turns[index].made and threads[index].is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        left = deadline - time.monotonic()
        if not turns[index].made or turns[index].wait(left, running(index)) != "ended":
            live.remove(index)
    cycles = [list(live) for _ in range(blocks + 1)]  # the compiles, then the blocks
    for cycle, order in enumerate(cycles):
        for index in list(order):
            if index not in live:
                continue
            ended = "gone"
            if turns[index].give():
                ended = turns[index].wait(limit if cycle == 0 else BLOCK_TURN_S, running(index))
            if ended != "ended":
                live.remove(index)
                if ended == "overran":
                    what = "its compile" if cycle == 0 else f"block {cycle}"
                    progress(f"perf: a run's turn ({what}) outlasted its limit: it gets no more turns")


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
