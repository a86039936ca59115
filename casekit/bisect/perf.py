"""Bisect on performance: `casekit bisect CASE --perf slower:10%` finds the first release whose timing of
the case's repro is slower than the good end's by the rule.

Each probed release is timed against the good end in the same time window: the good end's perf session
(ScriptEntry.PERF, casekit.perf.phase) stays open for the whole search, each candidate's is
opened for its probe, and their fresh processes' timed blocks take turns (casekit.perf.measure): several
processes a side, never one run. The candidate's axis is judged against the good end by casekit.perf's rule: `slower` is bad,
`same` or `faster` is good, `inconclusive` is unknown, and the search steps around it as around an
environment that cannot be built. Before the search, the bad end is measured the same way: when it is not
slower by the rule, one line says so, with both figures, and nothing is searched.

Timings are never cached: a timing from another window (another run, another load) is not comparable,
so each bisection measures again; nothing else of casekit's runs beside them (no environment is built
ahead while a candidate is timed).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from casekit.bisect.engine import (
    CacheSettings,
    Evaluated,
    Evaluator,
    Fresh,
    Record,
    Subject,
    registry_runner,
    search_range,
    unknown_record,
)
from casekit.bisect.predicates import Direction
from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, candidates_for
from casekit.bisect.report import BisectReport, ReportHeader, WhatChanged, build_report
from casekit.bisect.search import UNKNOWN, Outcome
from casekit.errors import BisectError, CasekitError
from casekit.model import Case, PerfAxis, PerfAxisResult, PerfComparison, PerfFigures, PerfVerdict, ScriptRole
from casekit.perf.compare import compare, figures, wants_more
from casekit.perf.measure import PerfSubject, PerfTarget, load_average, measure_subject
from casekit.perf.phase import PerfTargetSpec, open_perf_target, perf_subject
from casekit.perf.settings import PerfSettings, parse_repeats
from casekit.report.summary import axis_words, spread_text
from casekit.runners import registry
from casekit.scrub import temp_prefix

SLOWER, NOT_SLOWER = "slower", "not slower"  # a candidate's outcome: bad, or good (same or faster)
# --perf RULE:P%: the axis each rule follows (`slower` alone is the steady state, per call)
RULES = {
    "slower": PerfAxis.STEADY,
    "steady-slower": PerfAxis.STEADY,
    "compile-slower": PerfAxis.COMPILE_WARM,
    "cold-compile-slower": PerfAxis.COMPILE_COLD,
}
# The fewest fresh processes a side that can ever be told apart at the judge's alpha (0.01: a bisection reads one
# axis, so it is not shared with the others as in a replay, casekit.perf.settings): the cold rounds
# give each side one process a round; the warm rounds give the good end two (its A/A halves), the candidate one.
FEWEST = {PerfAxis.COMPILE_COLD: ("cold", 5), PerfAxis.COMPILE_WARM: ("warm", 4), PerfAxis.STEADY: ("warm", 4)}
NOT_CACHED = "perf steps are not cached: a timing from another run is not comparable, so every bisection measures again"


@dataclass(frozen=True)
class PerfRule:
    """What `--perf` asks: which axis, slower by at least what, measured how (the fresh processes a side)."""

    axis: PerfAxis
    threshold: float
    settings: PerfSettings = field(default_factory=PerfSettings)

    @classmethod
    def parse(cls, text: str, repeats: str | None = None) -> PerfRule:
        """'slower:10%', 'compile-slower:15%', 'cold-compile-slower:20%' (+ --perf-repeats); BisectError in one line."""
        name, _, amount = text.strip().partition(":")
        match = re.fullmatch(r"(\d{1,3}(?:\.\d{1,3})?)%", amount.strip())
        if name not in RULES or not match or not 0 < float(match[1]) < 100:
            raise BisectError(
                f"--perf {text!r}: use RULE:P% with RULE one of {', '.join(RULES)} (e.g. slower:10%: the steady "
                "state per call; compile-slower: the compile with warm caches; cold-compile-slower: with empty ones)"
            )
        axis, threshold = RULES[name], float(match[1]) / 100
        group = "compile" if axis in (PerfAxis.COMPILE_COLD, PerfAxis.COMPILE_WARM) else "steady"
        settings = PerfSettings(thresholds={**PerfSettings().thresholds, group: threshold}, axes_read=1)
        if axis is PerfAxis.STEADY:
            settings = replace(settings, cold=0)  # no compile is judged: an empty-cache one is not paid for
        elif axis is PerfAxis.COMPILE_COLD:
            settings = replace(settings, cold=FEWEST[axis][1])
        if repeats:
            settings = parse_repeats(repeats, settings)
        kind, fewest = FEWEST[axis]
        if getattr(settings, kind) < fewest:
            raise BisectError(
                f"--perf {name} judges {kind} processes: give at least {fewest} a side "
                f"(--perf-repeats {kind}={fewest}); fewer can never be told apart"
            )
        if axis is PerfAxis.COMPILE_WARM and settings.cold < 1:
            raise BisectError(f"--perf {name}: a warm compile needs a cold round first to fill the caches (cold=1)")
        return cls(axis, threshold, settings)

    def describe(self) -> str:
        """'steady state per call slower by at least 10% than the good end (timed side by side)'."""
        what = {
            PerfAxis.STEADY: "steady state per call",
            PerfAxis.COMPILE_WARM: "compile with warm caches",
            PerfAxis.COMPILE_COLD: "compile with empty caches",
            PerfAxis.SPEEDUP: "speed-up over eager",
        }[self.axis]
        return f"{what} slower by at least {percent(self.threshold)} than the good end (timed side by side)"


@dataclass
class Timing:
    """One candidate timed against the good end: the comparison, and both sides' figures."""

    comparison: PerfComparison
    good: PerfFigures
    candidate: PerfFigures

    def axis(self, axis: PerfAxis) -> PerfAxisResult:
        return next(result for result in self.comparison.axes if result.axis is axis)


class PerfSearch:
    """The good end's open session and every candidate's timing against it, as the engine's Subject."""

    def __init__(self, case: Case, config: ReleaseBisect, rule: PerfRule, seams: ReleaseSeams, folder: Path) -> None:
        self.case, self.config, self.rule, self.seams = case, config, rule, seams
        self.make_runner = seams.make_runner or registry_runner()
        self.settings = replace(rule.settings, backend=config.backend) if config.backend else rule.settings
        self.subject: PerfSubject = perf_subject(case, ScriptRole.PRE, folder, self.settings)
        self.good: PerfTarget | None = None
        self.good_version = ""
        self.timings: dict[str, Timing] = {}

    def open_good(self, version: str) -> None:
        """The good end's session, open until `close`: every candidate is timed beside it."""
        spec, self.good_version = self.config.spec(version), version
        try:
            self.good = open_perf_target(PerfTargetSpec(self.config.label(version), spec), self.make_runner)
        except CasekitError as error:
            raise BisectError(f"the good end {self.config.label(version)} cannot be timed: {error}") from None

    def close(self) -> None:
        if self.good is not None:
            self.good.session.close()
            self.good = None

    def run_fresh(self, version: str) -> Fresh:
        """The candidate timed against the good end now, in a session of its own (never cached)."""
        if self.good is None or version == self.good_version:
            return Fresh(
                {"v": 1, "outcome": NOT_SLOWER, "detail": "the good end: every candidate is timed against it"},
                cacheable=False,
            )
        why = self.config.missing_target(version)
        if why is not None:
            return Fresh(unknown_record(why), cacheable=False, ran=False)
        label = self.config.label(version)
        try:
            target = open_perf_target(PerfTargetSpec(label, self.config.spec(version)), self.make_runner)
        except CasekitError as error:
            return Fresh(unknown_record(f"environment failed: {error}"), cacheable=False)
        try:
            return Fresh(self._timed(version, target), cacheable=False)
        finally:
            target.session.close()

    def _timed(self, version: str, target: PerfTarget) -> Record:
        assert self.good is not None
        settings, good = self.settings, self.good
        measured = measure_subject(
            self.subject,
            [good, target],
            settings,
            self.seams.progress,
            lambda m: wants_more(m.samples, m.baseline_halves, settings, good.label),
        )
        mine, theirs = measured.samples[target.label], measured.samples[good.label]
        comparison = compare(mine, theirs, measured.baseline_halves, settings, good.label)
        load = load_average()
        timing = Timing(
            comparison,
            figures(good.label, ScriptRole.PRE, theirs, load),
            figures(target.label, ScriptRole.PRE, mine, load),
        )
        self.timings[version] = timing
        result = timing.axis(self.rule.axis)
        said = self._said(timing)
        if result.verdict is PerfVerdict.SLOWER:
            return {"v": 1, "outcome": SLOWER, "detail": said}
        if result.verdict in (PerfVerdict.SAME, PerfVerdict.FASTER):
            return {"v": 1, "outcome": NOT_SLOWER, "detail": said}
        return unknown_record(said)  # inconclusive: stepped around, as an env that cannot be built

    def _said(self, timing: Timing) -> str:
        """'steady slower +182.0% (p=0.000667), past 10%; 41.2 µs [40–44, n=8] → 116 µs [..]; structure: the same'."""
        result = timing.axis(self.rule.axis)
        good, candidate = _figure(timing.good, self.rule.axis), _figure(timing.candidate, self.rule.axis)
        structure = timing.comparison.explanation or "the same"
        return f"{axis_words(result.axis)} {result.verdict.value}: {result.why}; {good} → {candidate}; structure: {structure}"

    def interpret(self, version: str, record: Record) -> Evaluated | None:
        if "unknown" in record:
            return Evaluated(UNKNOWN, str(record["unknown"]), {})
        return Evaluated(str(record["outcome"]), str(record.get("detail", "")), {})

    def engine_subject(self) -> Subject:
        return Subject(
            f"perf:{self.case.id}", self.config.target_key, self.run_fresh, self.interpret, self.config.label
        )

    def what_changed(self, good: Evaluated, first_bad: Evaluated, labels: tuple[str, str], target: str) -> WhatChanged:
        """The first slower release against the good end: every axis judged, the eager arm's own change, and
        the structural difference that explains it."""
        timing = self.timings[target]
        comparison = timing.comparison
        measured = [a for a in comparison.axes if a.change is not None]  # an axis neither side timed says nothing
        lines = [f"{axis_words(a.axis)}: {a.verdict.value} — {a.why}" for a in measured]
        lines.append(f"steady per call {spread_text(timing.good.steady_s)} → {spread_text(timing.candidate.steady_s)}")
        if comparison.eager_change is not None:
            lines.append(f"eager alone: {comparison.eager_change:+.1%} (not the compiler's: reported apart)")
        lines.append(f"structure: {comparison.explanation or 'the same'}")
        return WhatChanged(labels[0], lines, [], None, [first_bad.detail])


def percent(ratio: float) -> str:
    """0.125 -> '12.5%', 0.1 -> '10%': a threshold as it was given."""
    return f"{ratio * 100:g}%"


def _figure(found: PerfFigures, axis: PerfAxis) -> str:
    spread = {
        PerfAxis.STEADY: found.steady_s,
        PerfAxis.COMPILE_WARM: found.compile_warm_s,
        PerfAxis.COMPILE_COLD: found.compile_cold_s,
        PerfAxis.SPEEDUP: found.speedup,
    }[axis]
    return f"{found.target} {spread_text(spread, 'x' if axis is PerfAxis.SPEEDUP else 's')}"


def bisect_on_perf(
    case: Case, config: ReleaseBisect, rule: PerfRule, seams: ReleaseSeams | None = None
) -> BisectReport:
    """Find the first release between good and bad whose timing of the case's repro is slower than the good
    end's by `rule` (see the module's docstring); BisectError in one line when the ends do not differ so."""
    seams = seams or ReleaseSeams()
    config.check_runner()
    listed = candidates_for(config, seams)
    candidates = listed.versions
    seams.progress(NOT_CACHED)
    folder = Path(tempfile.mkdtemp(prefix=temp_prefix("bisect")))
    search = PerfSearch(case, config, rule, seams, folder)
    try:
        search.open_good(candidates[0])
        evaluate = Evaluator(search.engine_subject(), CacheSettings(path=None), seams.progress)
        evaluate(candidates[0])
        seams.progress(f"pre-flight: is {config.label(candidates[-1])} {rule.describe()}?")
        _preflight(evaluate(candidates[-1]), evaluate.done[candidates[-1]], config, rule)
        result = search_range(candidates, evaluate)
    finally:
        search.close()
        shutil.rmtree(folder, ignore_errors=True)
    header = ReportHeader("versions", case.id, rule.describe(), config.runner)
    report = build_report(
        header, candidates, evaluate, result, case, lambda good, bad: _direction(good, bad), search.what_changed
    )
    report.notes = [*listed.notes, NOT_CACHED]
    if result is not None:
        report.reproduce = _reproduce(case.id, result.last_good, result.first_bad, config, rule)
    return report


def _preflight(outcome: Outcome, evaluated: Evaluated, config: ReleaseBisect, rule: PerfRule) -> None:
    """The two ends must differ by the rule before anything is searched: else one line, with the figures."""
    if outcome == SLOWER:
        return
    bad, good = config.label(config.bad), config.label(config.good)
    if outcome is UNKNOWN and evaluated.detail.startswith(("environment failed", "no interpreter")):
        raise BisectError(f"the bad end {bad} could not be timed: {evaluated.detail}")
    raise BisectError(
        f"the ends do not differ by the rule ({rule.describe()}): {bad} against {good}: {evaluated.detail}; "
        "nothing to bisect"
    )


def _direction(good: Outcome, bad: Outcome) -> Direction:
    return Direction.NOTHING if good == bad else Direction.REGRESSION


def _reproduce(case_id: str, good: str, bad: str, config: ReleaseBisect, rule: PerfRule) -> str:
    """The one replay that times the last good and the first slower release side by side (history left alone)."""
    words = [*registry.replay_flags(config.spec(good)), *registry.replay_flags(config.spec(bad))]
    group = "compile" if rule.axis in (PerfAxis.COMPILE_COLD, PerfAxis.COMPILE_WARM) else "steady"
    words += ["--perf", "--perf-threshold", f"{group}={percent(rule.threshold)}"]
    words += ["--archive", str(config.archive_dir)] if config.archive_dir else []
    return " ".join(["casekit", "replay", "--case", case_id, *words, "--no-record"])
