"""One bisection for many cases: one candidate list, each release env prepared once, one probe batch per release.

Every case keeps its own predicate outcome, cache entries (per case content and
target) and answer -- the one its single bisection gives (see
`search.bisect_shared`). A round replays, on one release, every open case
whose window still holds it, in one probe (one torch import). While a round
runs, the envs of the next rounds' candidates are built in the background
(`ahead.BuildAhead`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from casekit.bisect import releases as release_bisection
from casekit.bisect.ahead import Ahead, BuildAhead, release_builder
from casekit.bisect.engine import Evaluator, Fresh, Subject, registry_runner
from casekit.bisect.releases import (
    ReleaseBisect,
    ReleaseSeams,
    candidates_for,
    finish_report,
    fresh_from_run,
    release_subject,
)
from casekit.bisect.report import BisectReport, ReportHeader, SharedBisection, SharedStats, build_report
from casekit.bisect.search import EndsUnknown, Outcome, SharedResult, bisect_shared
from casekit.errors import BisectError
from casekit.model import Case
from casekit.replay.run import ReplayOptions, TargetRun, case_pins
from casekit.runners import registry
from casekit.runners.interface import ScriptEntry, TargetSpec


def _shared_spec(config: ReleaseBisect, cases: list[Case]) -> tuple[ReleaseBisect, list[str]]:
    """Pin the libraries all the cases recorded, once, so every round uses the same env whatever cases it runs."""
    if not registry.runner_class(config.runner).pins_libraries:
        return config, []
    pins, warnings = case_pins(cases)
    return replace(config, extra_packages=tuple(pins)), warnings


def bisect_releases_many(
    cases: list[Case], config: ReleaseBisect, seams: ReleaseSeams | None = None, ahead: Ahead | None = None
) -> SharedBisection:
    """Bisect every case between config.good and config.bad over one candidate list, sharing envs and probes."""
    seams = seams or ReleaseSeams()
    ahead = ahead or Ahead()
    if not cases:
        raise BisectError("no cases to bisect")
    config.check_runner()
    started = time.monotonic()
    errors: dict[str, str] = {}
    open_cases: list[Case] = []
    for case in cases:
        try:
            config.predicate.validate(case)
            open_cases.append(case)
        except BisectError as error:
            errors[case.id] = str(error)
    config, warnings = _shared_spec(config, open_cases)
    listed = candidates_for(config, seams)
    candidates = listed.versions
    for note in listed.notes:
        seams.progress(note)
    make_runner = seams.make_runner or registry_runner()
    replay_one = seams.run_target or release_bisection.run_target  # looked up late, as releases does
    options = ReplayOptions(
        backend=config.backend,
        timeout=config.timeout,
        record=False,
        verify_rollback=False,
        pin_packages=False,
        entry=ScriptEntry.BISECT_RELEASES,
    )
    stats = SharedStats()
    pending: dict[tuple[str, str], Fresh] = {}
    evaluators = {case.id: _evaluator(case, config, seams, pending) for case in open_cases}
    builder = release_builder(config.runner, config.spec, make_runner, ahead, seams.progress)
    probes = _SharedProbes(config, seams, open_cases, evaluators, pending, stats, builder)
    probes.ends_together = ahead.ends_together and len(candidates) > 1
    probes.bad_end = candidates[-1]
    probes.run = lambda spec, chosen: replay_one(spec, chosen, options, make_runner, seams.progress)
    evaluate_many = probes.evaluate_many
    what = config.predicate.describe()
    seams.progress(
        f"bisecting {len(open_cases)} case(s) by {what}: {len(candidates)} candidate(s), {candidates[0]} … {candidates[-1]}"
    )
    try:
        with probes:
            shared = bisect_shared(
                candidates, list(evaluators), evaluate_many, prefetch=builder.want if builder is not None else None
            )
    except BaseException:
        if builder is not None:  # Ctrl-C or an error: start nothing more, do not wait for a build in progress
            builder.close(wait=False)
        raise
    if builder is not None:  # a build in progress finishes: a complete env, reused by the next bisection
        builder.close()
        stats.ahead = builder.stats
    reports = _case_reports(open_cases, candidates, config, evaluators, shared, errors, listed.notes)
    stats.seconds = time.monotonic() - started
    return SharedBisection(reports, errors, stats, warnings)


def _case_reports(
    cases: list[Case],
    candidates: list[str],
    config: ReleaseBisect,
    evaluators: dict[str, Evaluator],
    shared: SharedResult[str, str],
    errors: dict[str, str],
    notes: list[str],
) -> dict[str, BisectReport]:
    """Each case's report, as its single bisection builds it; an unknown end goes to `errors` instead."""
    what = config.predicate.describe()
    reports = {}
    for case in cases:
        answer = shared.result(case.id, candidates)
        evaluator = evaluators[case.id]
        if answer in (EndsUnknown.GOOD_UNKNOWN, EndsUnknown.BAD_UNKNOWN):
            end = candidates[0] if answer is EndsUnknown.GOOD_UNKNOWN else candidates[-1]
            word = "good" if answer is EndsUnknown.GOOD_UNKNOWN else "bad"
            errors[case.id] = f"the {word} end {end} could not be evaluated: {evaluator.done[end].detail}"
            continue
        result = None if answer is EndsUnknown.SAME else answer
        assert not isinstance(result, EndsUnknown)
        header = ReportHeader("versions", case.id, what, config.runner, config.predicate.hint())
        report = build_report(header, candidates, evaluator, result, case, config.predicate.direction)
        finish_report(report, case.id, config, result, evaluator, notes)
        reports[case.id] = report
    return reports


class _SharedProbes:
    """The probes of a shared bisection: one per release for the cases that need it, the bad end's beside the good end's.

    Every case needs both ends (unless its good end is unknown), so with
    `ends_together` the bad end's probe runs in a second thread while the good
    end's runs: two imports at once on two cores. Only the probes overlap; the
    cases' evaluators still read the outcomes in the search's order.
    """

    def __init__(
        self,
        config: ReleaseBisect,
        seams: ReleaseSeams,
        cases: list[Case],
        evaluators: dict[str, Evaluator],
        pending: dict[tuple[str, str], Fresh],
        stats: SharedStats,
        builder: BuildAhead | None,
    ) -> None:
        self.config, self.seams, self.stats, self.builder = config, seams, stats, builder
        self.by_id = {case.id: case for case in cases}
        self.evaluators, self.pending = evaluators, pending
        self.ends_together = False
        self.bad_end = ""
        self.run: Callable[[TargetSpec, list[Case]], TargetRun] = lambda spec, chosen: TargetRun(
            spec, registry.label(spec)
        )
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="casekit-bad-end")
        self._early: dict[str, tuple[list[str], Future[None]]] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> _SharedProbes:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _probe(self, version: str, ids: list[str], cached: int) -> None:
        """One probe of this release for these cases; each case's record waits in `pending`."""
        if not ids or self.config.missing_target(version) is not None:
            return  # each case's own run_fresh says why
        self.seams.progress(f"{version}: one probe for {len(ids)} case(s) ({cached} cached)")
        begun = time.monotonic()
        run = self.run(self.config.spec(version), [self.by_id[i] for i in ids])
        seconds = time.monotonic() - begun
        with self._lock:
            self.stats.batches += 1
            self.stats.case_runs += len(ids)
            for case_id in ids:
                fresh = fresh_from_run(run, case_id, version)
                fresh.seconds = seconds  # what this case waited for, the probe being shared
                self.pending[(case_id, version)] = fresh

    def _needing(self, version: str, ids: list[str]) -> list[str]:
        return [i for i in ids if _needs_run(self.evaluators[i], version)]

    def evaluate_many(self, version: str, ids: list[str]) -> dict[str, Outcome]:
        if self.builder is not None:
            self.builder.claim(version)
        fresh_ids = self._needing(version, ids)
        if self.ends_together and not self.stats.rounds and version != self.bad_end:
            early = self._needing(self.bad_end, ids)
            if early:
                if self.builder is not None:
                    self.builder.claim(self.bad_end)
                future = self._pool.submit(self._probe, self.bad_end, early, len(ids) - len(early))
                self._early[self.bad_end] = (early, future)
        running = fresh_ids
        if version in self._early:
            covered, future = self._early.pop(version)
            future.result()
            running = [i for i in fresh_ids if i not in covered]
        self._probe(version, running, len(ids) - len(fresh_ids))
        self.stats.rounds += 1
        self.stats.from_cache += len(ids) - len(fresh_ids)
        return {case_id: self.evaluators[case_id](version) for case_id in ids}


def _evaluator(
    case: Case, config: ReleaseBisect, seams: ReleaseSeams, pending: dict[tuple[str, str], Fresh]
) -> Evaluator:
    """The case's own evaluator (cache, steps, outcome); a fresh run is taken from the shared probe's results."""
    own = release_subject(case, config, seams)

    def run_fresh(version: str) -> Fresh:
        fresh = pending.pop((case.id, version), None)
        return fresh if fresh is not None else own.run_fresh(version)  # e.g. a cached record that no longer reads

    subject = Subject(own.name, own.target_key, run_fresh, own.interpret, own.label)
    say = seams.progress
    return Evaluator(subject, config.cache, lambda message: say(f"{case.id}: {message}"))


def _needs_run(evaluator: Evaluator, version: str) -> bool:
    """Whether this case has no usable record for this release (so it joins the round's probe)."""
    if version in evaluator.done:
        return False
    record = evaluator.store.get(evaluator.subject.name, evaluator.subject.target_key(version))
    return record is None or ("unknown" in record and evaluator.retry_unknown)
