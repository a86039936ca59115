"""A bisection's answer: what changed (classified as replay classifies), which way, and the casekit.bisect/1 document.

"What changed" pairs the first bad target's observations with the good end's
through `casekit.classify.classify_case` -- the pairing replay uses -- so
bisect and replay cannot disagree about the same two runs, and the change
list and the verdict line come from one classification against one baseline.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from casekit.bisect.ahead import AheadStats
from casekit.bisect.engine import Evaluated, Evaluator, Step
from casekit.bisect.predicates import COMMIT_SCRIPT, Direction, by_role
from casekit.bisect.search import UNKNOWN, BisectResult, Outcome
from casekit.classify import CaseResult, ScriptResult, classify_case, describe_fallback
from casekit.errors import BisectError
from casekit.fsutil import write_atomic
from casekit.model import Case, ScriptObservation, ScriptRole, ScriptSource, Site, SiteClass, Verdict
from casekit.report.pictures import end_words
from casekit.scrub import portable_paths

BISECT_SCHEMA = "casekit.bisect/1"
MULTI_SCHEMA = "casekit.bisect-many/1"  # one casekit.bisect/1 document per case, the shared costs, per-case errors
JSON_SCHEMA_FILE = "bisect.schema.json"  # in casekit/data: the document's shape, checked on write and read


@dataclass(frozen=True)
class SiteChange:
    """One break's class from the good end to the first bad, as replay would give it."""

    script: str  # "pre" | "post" | "script" (a commit bisection's one script)
    site_class: SiteClass
    where: str
    function: str
    category: str
    reason: str
    note: str = ""


@dataclass
class WhatChanged:
    """The first bad target classified against the good end's observations."""

    baseline: str  # the good end
    lines: list[str]
    sites: list[SiteChange]
    verdict: Verdict | None  # None only in a document that did not say
    reasons: list[str]


@dataclass(frozen=True)
class CommitRange:
    """The upstream commits between the last good and the first bad build (each build's git_version)."""

    good: str
    bad: str
    compare_url: str
    log: list[str] = field(default_factory=list)  # 'sha subject' from a local PyTorch checkout, newest first

    @property
    def range(self) -> str:
        """'a1b2c3d4e5f6..0f9e8d7c6b5a': what `git log` takes."""
        return f"{self.good[:12]}..{self.bad[:12]}"


@dataclass
class BisectReport:
    """What a bisection searched, what it tried, where the outcome changes, and which way."""

    kind: str  # "versions" | "commits"
    subject: str  # the case id, or the command
    predicate: str
    runner: str
    candidates: list[str]
    good_outcome: str
    bad_outcome: str  # at the bad end
    last_good: str | None  # None when nothing changed between the ends
    first_bad: str | None
    first_bad_outcome: str | None
    direction: Direction
    ambiguous: list[str]
    steps: list[Step]
    changed: WhatChanged | None
    warnings: list[str] = field(default_factory=list)
    reproduce: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # candidate -> how to show it ("abc1234 subject")
    compare_url: str | None = None
    cache_path: str | None = None
    hint: str = ""
    reproduce_good: str | None = None  # the replay that shows the last good side
    commits: CommitRange | None = None  # between two nightlies: the upstream commits
    notes: list[str] = field(default_factory=list)  # how the candidates were found (dates rolled, hidden builds)

    @property
    def exact(self) -> bool:
        """A single culprit, with no untestable candidate hiding the change."""
        return self.first_bad is not None and not self.ambiguous

    @property
    def monotonic(self) -> bool:
        return not any(w.startswith("not monotonic") for w in self.warnings)

    @property
    def evaluated(self) -> int:
        """Candidates actually run this time (not read from the cache)."""
        return sum(1 for step in self.steps if step.ran and not step.cached)

    @property
    def from_cache(self) -> int:
        return sum(1 for step in self.steps if step.cached)

    def label(self, candidate: str) -> str:
        return self.labels.get(candidate, candidate)


# ------------------------------------------------------------------ what changed


def baseline_case(case: Case | None, observations: Mapping[ScriptRole, ScriptObservation]) -> Case:
    """The case as if it had been captured on the good end: its observations are the baseline, no history."""
    if case is None:  # a commit bisection without --case: only the observed script
        case = Case(id="commits", title="", pre=ScriptSource("script", "", ""))
    return dataclasses.replace(case, observations=dict(observations), replays=[])


def _site_line(site: Site) -> str:
    where = site.where()
    if site.call_site is not None and site.call_site.where() != where:
        where += f" (from {site.call_site.where()})"
    return f"{where} in {site.function}: {site.reason or site.category}"


def _script_lines(name: str, result: ScriptResult, before: ScriptObservation, labels: tuple[str, str]) -> list[str]:
    lines = []
    if result.recorded_status is not None and result.recorded_status is not result.status:
        detail = f": {result.observation.detail}" if result.observation.detail else ""
        lines.append(
            f"{name}: {result.recorded_status.value} on {labels[0]} -> {result.status.value} on {labels[1]}{detail}"
        )
    for pairing in result.sites:
        if pairing.site_class is SiteClass.PERSISTS and not pairing.note:
            continue
        note = f" ({pairing.note})" if pairing.note else ""
        lines.append(f"{name}: {pairing.site_class.value}: {_site_line(pairing.site)}{note}")
    if before.graphs != result.observation.graphs:
        lines.append(f"{name}: {before.graphs} -> {result.observation.graphs} graph(s)")
    for frame in result.new_fallbacks:
        lines.append(f"{name}: {describe_fallback(frame.function, f'{frame.file}:{frame.line}')}")
    for frame in result.cleared_fallbacks:
        lines.append(f"{name}: {describe_fallback(frame.function, '', now=False)}")
    if result.recompiles_before != result.recompiles_after:
        lines.append(f"{name}: recompiles {result.recompiles_before} -> {result.recompiles_after}")
    return lines


def what_changed(
    case: Case | None, before: Evaluated, after: Evaluated, labels: tuple[str, str], target: str
) -> WhatChanged:
    """Classify `after` against `before` exactly as a replay of a case captured on `before` would."""
    baseline_observations = by_role(before.observations)
    # a commit bisection's script is classified as a repro, and still called "script" wherever it is named
    names = {ScriptRole.PRE: COMMIT_SCRIPT} if COMMIT_SCRIPT in before.observations else {}
    result: CaseResult = classify_case(
        baseline_case(case, baseline_observations), target, by_role(after.observations), names
    )
    lines: list[str] = []
    sites: list[SiteChange] = []
    for which, script in result.scripts.items():
        baseline = baseline_observations.get(which)
        if baseline is None:
            continue
        name = names.get(which, which.value)
        lines += _script_lines(COMMIT_SCRIPT if name == COMMIT_SCRIPT else which.label, script, baseline, labels)
        for pairing in script.sites:
            site = pairing.site
            sites.append(
                SiteChange(
                    name,
                    pairing.site_class,
                    site.where(),
                    site.function,
                    site.category,
                    site.reason,
                    pairing.note,
                )
            )
    return WhatChanged(labels[0], lines, sites, result.verdict, list(result.reasons))


def monotonic_warnings(candidates: list[str], result: BisectResult[str], done: Mapping[str, Evaluated]) -> list[str]:
    """Warn when some target from the first bad on gives another outcome than the bad end: it changed more than once."""
    first = candidates.index(result.first_bad)
    bad_end = done[candidates[-1]].outcome
    odd = [
        (c, done[c].outcome)
        for c in candidates[first:]
        if c in done and done[c].outcome is not UNKNOWN and done[c].outcome != bad_end
    ]
    if not odd:
        return []
    shown = ", ".join(f"{c} gives {o!r}" for c, o in odd)
    return [
        f"not monotonic: {shown} but the bad end {candidates[-1]} gives {bad_end!r}; the outcome changes more than "
        f"once in the range, so {result.first_bad} is the first change, not necessarily the one at the bad end"
    ]


def outcome_text(outcome: Outcome) -> str:
    return "unknown" if outcome is UNKNOWN else str(outcome)


@dataclass(frozen=True)
class ReportHeader:
    """What a bisection was about, as the report names it."""

    kind: str  # "versions" | "commits"
    subject: str
    predicate: str  # described in words
    runner: str
    hint: str = ""  # what else to follow when nothing changed


def build_report(
    header: ReportHeader,
    candidates: list[str],
    evaluate: Evaluator,
    result: BisectResult[str] | None,
    case: Case | None,
    direction: Callable[[Outcome, Outcome], Direction],
    explain: Callable[[Evaluated, Evaluated, tuple[str, str], str], WhatChanged] | None = None,
) -> BisectReport:
    """The report of a finished search (result None: the ends agree), its changes against the good end:
    classified as replay would by default, else as `explain` says (a timing: casekit.bisect.perf)."""
    done = evaluate.done
    good, bad = done[candidates[0]], done[candidates[-1]]
    report = BisectReport(
        kind=header.kind,
        subject=header.subject,
        predicate=header.predicate,
        runner=header.runner,
        candidates=candidates,
        good_outcome=outcome_text(good.outcome),
        bad_outcome=outcome_text(bad.outcome),
        last_good=None,
        first_bad=None,
        first_bad_outcome=None,
        direction=Direction.NOTHING,
        ambiguous=[],
        steps=evaluate.steps,
        changed=None,
        cache_path=str(evaluate.store.path) if evaluate.store.path else None,
        hint=header.hint,
    )
    if result is None:
        return report
    first_bad = done[result.first_bad]
    report.last_good, report.first_bad = result.last_good, result.first_bad
    report.first_bad_outcome = outcome_text(first_bad.outcome)
    report.direction = direction(good.outcome, first_bad.outcome)
    report.ambiguous = list(result.ambiguous)
    report.warnings = monotonic_warnings(candidates, result, done)
    short = (lambda c: c[:12]) if header.kind == "commits" else str
    labels = (short(candidates[0]), short(result.first_bad))
    if explain is None:
        report.changed = what_changed(case, good, first_bad, labels, result.first_bad)
    else:
        report.changed = explain(good, first_bad, labels, result.first_bad)
    report.changed.baseline = candidates[0]
    return report


# ------------------------------------------------------------------ the casekit.bisect/1 document


def report_to_json(report: BisectReport) -> dict[str, Any]:
    """The report as a casekit.bisect/1 document (plain JSON)."""
    changed = report.changed
    return {
        "schema": BISECT_SCHEMA,
        "kind": report.kind,
        "subject": report.subject,
        "predicate": report.predicate,
        "runner": report.runner,
        "searched": {"from": report.candidates[0], "to": report.candidates[-1], "candidates": report.candidates},
        "result": report.direction.value,
        "good_outcome": report.good_outcome,
        "bad_outcome": report.bad_outcome,
        "first_bad_outcome": report.first_bad_outcome,
        "last_good": report.last_good,
        "first_bad": report.first_bad,
        "exact": report.exact,
        "monotonic": report.monotonic,
        "warnings": report.warnings,
        "ambiguous": report.ambiguous,
        "steps": [
            {
                "target": s.target,
                "outcome": s.outcome,
                "detail": s.detail,
                "cached": s.cached,
                "ran": s.ran and not s.cached,
                "seconds": round(s.seconds, 2),
            }
            for s in report.steps
        ],
        "baseline": changed.baseline if changed else None,
        "changes": changed.lines if changed else [],
        "sites": [{**dataclasses.asdict(site), "site_class": site.site_class.value} for site in changed.sites]
        if changed
        else [],
        "verdict": changed.verdict.value if changed and changed.verdict else None,
        "reasons": changed.reasons if changed else [],
        # a document is shared: its commands name an interpreter or a folder as labels do (~/envs/..., …/bin/python)
        "reproduce": portable_paths(report.reproduce) if report.reproduce else report.reproduce,
        "labels": report.labels,
        "compare_url": report.compare_url,
        "cache": report.cache_path,
        "reproduce_good": portable_paths(report.reproduce_good) if report.reproduce_good else report.reproduce_good,
        "commits": dataclasses.asdict(report.commits) | {"range": report.commits.range} if report.commits else None,
        "notes": report.notes,
    }


def json_schema() -> dict[str, Any]:
    """The JSON Schema of casekit.bisect/1, shipped in casekit/data; the schema string itself lives only here."""
    text = resources.files("casekit.data").joinpath(JSON_SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    schema["properties"]["schema"] = {"const": BISECT_SCHEMA}
    return schema


def validate_document(data: Any, source: str) -> None:
    """BisectError naming the source and the first field that does not fit the schema."""
    import jsonschema

    try:
        jsonschema.validate(data, json_schema())
    except jsonschema.ValidationError as error:
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise BisectError(f"{source}: not a {BISECT_SCHEMA} document: {where}: {error.message}") from None


def report_from_json(data: Any, source: str = "bisect report") -> BisectReport:
    """A casekit.bisect/1 document back into a BisectReport (validated first)."""
    validate_document(data, source)
    changed = None
    if data["baseline"] is not None:
        sites = [SiteChange(**{**site, "site_class": SiteClass(site["site_class"])}) for site in data["sites"]]
        verdict = Verdict(data["verdict"]) if data["verdict"] is not None else None
        changed = WhatChanged(data["baseline"], data["changes"], sites, verdict, data["reasons"])
    steps = [Step(s["target"], s["outcome"], s["detail"], s["cached"], s["ran"], s["seconds"]) for s in data["steps"]]
    return BisectReport(
        kind=data["kind"],
        subject=data["subject"],
        predicate=data["predicate"],
        runner=data["runner"],
        candidates=data["searched"]["candidates"],
        good_outcome=data["good_outcome"],
        bad_outcome=data["bad_outcome"],
        last_good=data["last_good"],
        first_bad=data["first_bad"],
        first_bad_outcome=data["first_bad_outcome"],
        direction=Direction(data["result"]),
        ambiguous=data["ambiguous"],
        steps=steps,
        changed=changed,
        warnings=data["warnings"],
        reproduce=data["reproduce"],
        labels=data["labels"],
        compare_url=data["compare_url"],
        cache_path=data["cache"],
        reproduce_good=data.get("reproduce_good"),
        commits=_commits_from(data.get("commits")),
        notes=list(data.get("notes") or []),
    )


def _commits_from(data: Any) -> CommitRange | None:
    if not isinstance(data, dict):
        return None
    return CommitRange(data["good"], data["bad"], data["compare_url"], list(data.get("log") or []))


def write_report(report: BisectReport, path: Path) -> None:
    """Write the casekit.bisect/1 document atomically (checked against the schema first)."""
    data = report_to_json(report)
    validate_document(data, str(path))
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def read_report(path: Path) -> BisectReport:
    """Read a casekit.bisect/1 document; BisectError (one line) when it is missing or malformed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise BisectError(f"{path}: cannot read a {BISECT_SCHEMA} document: {error}") from None
    return report_from_json(data, str(path))


# ------------------------------------------------------------------ the text a user reads


# How the two sides of the change are named: "bad" would be the wrong word for the release that fixed a break
# (one table for every view: the terminal here, the HTML page and its picture).
END_WORDS = {direction: end_words(direction.value) for direction in Direction}


def _headline(report: BisectReport) -> list[str]:
    word = report.direction.value
    if report.first_bad is None:
        return [
            f"nothing changed between {report.label(report.candidates[0])} and {report.label(report.candidates[-1])}: "
            f"both give {report.good_outcome!r} for {report.predicate}" + (f"; {report.hint}" if report.hint else "")
        ]
    if report.exact:
        lines = [f"{word} in {report.label(report.first_bad)}"]
    else:
        hidden = ", ".join(report.label(c) for c in report.ambiguous)
        lines = [
            f"{word} somewhere in {hidden} … {report.label(report.first_bad)}: "
            f"{len(report.ambiguous)} candidate(s) there could not be built or run"
        ]
    assert report.last_good is not None
    before, after = END_WORDS[report.direction]
    lines += [f"{before} {report.label(report.last_good)}", f"{after} {report.label(report.first_bad)}"]
    return lines


def _what_changed(report: BisectReport) -> list[str]:
    changed = report.changed
    if changed is None or report.first_bad is None:
        return []
    lines = [f"what changed from {report.label(changed.baseline)} (good end) to {report.label(report.first_bad)}:"]
    lines += [f"  {line}" for line in changed.lines] or [
        f"  outcome {report.good_outcome!r} -> {report.first_bad_outcome!r} (no difference in the observed breaks)"
    ]
    if changed.verdict is None:  # a timing: no replay verdict, the judge's reasons
        lines += [f"against {report.label(changed.baseline)}: {reason}" for reason in changed.reasons]
        return lines
    why = f" ({'; '.join(changed.reasons)})" if changed.reasons else ""
    lines.append(f"verdict against {report.label(changed.baseline)}: {changed.verdict}{why}")
    return lines


def _commit_lines(commits: CommitRange | None) -> list[str]:
    """The upstream range between two builds, as cargo-bisect-rustc gives it for two nightlies."""
    if commits is None:
        return []
    lines = [f"commits: {commits.range} (torch.version.git_version of the two builds)"]
    lines += [f"  {line}" for line in commits.log[:50]]
    if len(commits.log) > 50:
        lines.append(f"  … {len(commits.log) - 50} more")
    return lines


def render_text(report: BisectReport) -> str:
    """The final report, after cargo-bisect-rustc's: range searched, culprit, what changed, how to reproduce."""
    what = "commits" if report.kind == "commits" else "versions"
    lines = [
        f"searched {what} {report.label(report.candidates[0])} … {report.label(report.candidates[-1])} "
        f"({len(report.candidates)} candidates) by {report.predicate}",
        f"{report.good_outcome!r} at the good end, {report.bad_outcome!r} at the bad end",
        "",
        "steps:",
    ]
    for number, step in enumerate(report.steps, 1):
        how = "cached" if step.cached else (f"{step.seconds:.1f} s" if step.ran else "not run")
        detail = f"  ({step.detail})" if step.detail and step.outcome == "unknown" else ""
        lines.append(f"  {number:>2}. {report.label(step.target):<40} {step.outcome:<24} [{how}]{detail}")
    lines.append("")
    lines += [f"note: {note}" for note in report.notes]
    lines += [f"warning: {warning}" for warning in report.warnings]
    lines += _headline(report)
    lines += _commit_lines(report.commits)
    if report.compare_url:
        lines.append(f"upstream changes: {report.compare_url}")
    lines += _what_changed(report)
    if report.reproduce_good and report.reproduce:
        before, after = END_WORDS[report.direction]
        lines.append(f"reproduce the {before} side with: {report.reproduce_good}")
        lines.append(f"reproduce the {after} side with: {report.reproduce}")
    elif report.reproduce:
        lines.append(f"reproduce with: {report.reproduce}")
    lines.append(
        f"{len(report.steps)} step(s): {report.evaluated} run, {report.from_cache} from the cache"
        + (f" ({report.cache_path})" if report.cache_path else "")
    )
    return "\n".join(lines)


# ------------------------------------------------------------------ many cases bisected together


@dataclass
class SharedStats:
    """What the shared bisection cost: rounds (one release each), probe batches and case runs, envs built ahead."""

    rounds: int = 0
    batches: int = 0
    case_runs: int = 0
    from_cache: int = 0
    seconds: float = 0.0
    ahead: AheadStats = field(default_factory=AheadStats)

    def summary(self, cases: int) -> str:
        built = len(self.ahead.built)
        return (
            f"{cases} case(s): {self.rounds} release(s) evaluated, {self.batches} probe batch(es) run "
            f"({self.case_runs} case run(s), {self.from_cache} from the cache), "
            f"{built} env(s) prepared ahead of need, {self.seconds:.1f} s"
        )


@dataclass
class SharedBisection:
    """Per case: its report, or why it could not be bisected (an end unknown, a predicate it cannot follow)."""

    reports: dict[str, BisectReport]
    errors: dict[str, str]
    stats: SharedStats
    warnings: list[str] = field(default_factory=list)


def multi_report_to_json(shared: SharedBisection) -> dict[str, Any]:
    """A casekit.bisect-many/1 document: each case's unchanged casekit.bisect/1 document, the errors, the costs."""
    stats = shared.stats
    return {
        "schema": MULTI_SCHEMA,
        "reports": [report_to_json(report) for report in shared.reports.values()],
        "errors": [{"case": case_id, "error": error} for case_id, error in shared.errors.items()],
        "warnings": list(shared.warnings),
        "summary": {
            "cases": len(shared.reports) + len(shared.errors),
            "rounds": stats.rounds,
            "batches": stats.batches,
            "case_runs": stats.case_runs,
            "from_cache": stats.from_cache,
            "built_ahead": [{"target": target, "seconds": round(s, 1)} for target, s in stats.ahead.built],
            "seconds": round(stats.seconds, 1),
        },
    }


def validate_multi_document(data: Any, source: str) -> None:
    """BisectError naming the source when the wrapper, or any case's document in it, does not fit."""
    if not isinstance(data, dict) or data.get("schema") != MULTI_SCHEMA:
        raise BisectError(f"{source}: not a {MULTI_SCHEMA} document")
    for name, kind in (("reports", list), ("errors", list), ("summary", dict)):
        if not isinstance(data.get(name), kind):
            raise BisectError(f"{source}: not a {MULTI_SCHEMA} document: {name}: expected a {kind.__name__}")
    for index, document in enumerate(data["reports"]):
        validate_document(document, f"{source} reports[{index}]")


def write_multi_report(shared: SharedBisection, path: Path) -> None:
    """Write the casekit.bisect-many/1 document atomically (checked first)."""
    data = multi_report_to_json(shared)
    validate_multi_document(data, str(path))
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def render_shared_text(shared: SharedBisection) -> str:
    """Each case's report as a single bisection prints it, the cases that could not be bisected, the costs."""
    parts = []
    for case_id, report in shared.reports.items():
        parts.append(f"== {case_id} ==\n{render_text(report)}")
    for case_id, error in shared.errors.items():
        parts.append(f"== {case_id} ==\nnot bisected: {error}")
    parts.append(
        "\n".join(
            [f"warning: {w}" for w in shared.warnings]
            + [shared.stats.summary(len(shared.reports) + len(shared.errors))]
        )
    )
    return "\n\n".join(parts)
