"""Run a bisection for real: torch releases for a case, or commits of the user's repository.

`search` knows how to pick the next candidate; this module knows how to test
one. Across versions, each candidate is one `replay.run_target` of the case on
that torch (any runner); across commits, the user's script is observed by the
probe in a temporary worktree of each commit (or, with `exit_code=True`, any
command is run with `git bisect run`'s contract).

What a target showed is cached on disk as its raw observations, keyed by
(case content hash, target): the outcome is recomputed from them at every
read, so a second bisection of the same case with another predicate
(`--site`, `--status`, `--post-holds`) re-runs nothing either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.bisect.commits import (
    COMMIT_ENV_VAR,
    commit_summary,
    list_first_parent_commits,
    run_command_outcome,
    temporary_worktree,
)
from casekit.bisect.search import UNKNOWN, BisectResult, Outcome, ResultCache, bisect_candidates
from casekit.bisect.versions import fetch_available_versions, parse_version, versions_between
from casekit.bundle import content_hash, from_plain, sha256_text
from casekit.capture import observe_batch
from casekit.classify import CaseResult, classify_case
from casekit.errors import BisectError, BundleError, CasekitError, EnvironmentFailed
from casekit.model import Case, ScriptObservation, ScriptSource, ScriptStatus, Site, SiteClass, to_plain
from casekit.replay import ReplayOptions, RunnerFactory, TargetRun, run_target
from casekit.runners.interface import ProbeJob, ProgressFn, Runner, TargetSpec

BISECT_SCHEMA = "casekit.bisect/1"
CACHE_FILE = "bisect-cache.json"
RECORD_VERSION = 1  # shape of one cached target record; others are ignored (re-run)
SCRIPT_LABELS = {"pre": "pre-fix", "post": "post-fix", "script": "script"}
PREDICATE_KINDS = ("verdict", "site", "status", "post-holds")
HOLDS, BROKEN = "holds", "broken"
BREAK, NO_BREAK = "break", "no-break"

RunTarget = Callable[[TargetSpec, list[Case], ReplayOptions, RunnerFactory, ProgressFn], TargetRun]
ListVersions = Callable[..., list[str]]


class BisectEndsAgree(BisectError):
    """Both ends of the range give the same outcome: there is nothing to bisect."""


class BisectEndUnknown(BisectError):
    """An end of the range could not be built or run, so the range cannot be trusted."""


def _quiet(message: str) -> None:
    """Progress sink for callers that do not want any."""


def default_cache_path() -> Path:
    """$CASEKIT_CACHE/bisect-cache.json (default ~/.cache/casekit), beside the managed envs."""
    from casekit.runners.venv import cache_root

    return cache_root() / CACHE_FILE


# ------------------------------------------------------------------ predicates


def parse_location(spec: str) -> tuple[str, int]:
    """'model.py:12' -> ('model.py', 12); BisectError when it is not FILE:LINE."""
    file, sep, line = spec.strip().rpartition(":")
    if not sep or not file or not line.isdigit():
        raise BisectError(f"{spec!r} is not a site: expected FILE:LINE, e.g. model.py:12")
    return file, int(line)


def _same_file(wanted: str, file: str) -> bool:
    """Files are stored by script name or package-relative path: match either way round by path suffix."""
    wanted, file = wanted.replace("\\", "/").lstrip("./"), file.replace("\\", "/")
    return wanted == file or wanted.endswith("/" + file) or file.endswith("/" + wanted)


def site_at(site: Site, location: tuple[str, int]) -> bool:
    """Does this break happen at FILE:LINE, itself or through the script line that led to it?"""
    file, line = location
    places = [(site.file, site.line), (site.anchor.file, site.anchor.line)]
    return any(_same_file(file, f) and line == n for f, n in places)


@dataclass(frozen=True)
class Predicate:
    """What 'differs' means for a case: its verdict, one site's class, a script's status, or 'post-fix holds'."""

    kind: str = "verdict"
    argument: str | None = None  # FILE:LINE for "site", "pre"/"post" for "status"

    @classmethod
    def parse(cls, value: Predicate | str | tuple[str, str]) -> Predicate:
        """Accept a Predicate, "verdict", "post-holds", ("site", "FILE:LINE") or ("status", "pre"|"post")."""
        if isinstance(value, Predicate):
            predicate = value
        elif isinstance(value, str):
            predicate = cls(value)
        else:
            predicate = cls(value[0], value[1])
        predicate.validate()
        return predicate

    def validate(self, case: Case | None = None) -> None:
        if self.kind not in PREDICATE_KINDS:
            raise BisectError(f"unknown predicate {self.kind!r} (choose one of: {', '.join(PREDICATE_KINDS)})")
        if self.kind == "site":
            parse_location(self.argument or "")
        if self.kind == "status" and self.argument not in ("pre", "post"):
            raise BisectError(f"--status takes pre or post, not {self.argument!r}")
        if case is not None and case.post is None and (self.kind == "post-holds" or self.argument == "post"):
            raise BisectError(f"case {case.id!r} has no post-fix script, so there is no post-fix to follow")

    def describe(self) -> str:
        if self.kind == "site":
            return f"class of the break at {self.argument}"
        if self.kind == "status":
            return f"status of the {SCRIPT_LABELS[self.argument or 'pre']} script"
        if self.kind == "post-holds":
            return "whether the post-fix still holds"
        return "the case's replay verdict"

    def detail(self, result: CaseResult) -> str:
        """One line on why a target gave its outcome, for the step list."""
        if self.kind in ("status", "post-holds"):
            script = result.scripts.get("post" if self.kind == "post-holds" else self.argument or "pre")
            if script is not None:
                return f"{SCRIPT_LABELS[script.which]} {script.status.value}" + (
                    f": {script.observation.detail}" if script.observation.detail else ""
                )
        return "; ".join(result.reasons[:3]) if self.kind == "verdict" else f"verdict {result.verdict}"

    def outcome(self, result: CaseResult) -> Outcome:
        """The outcome of one (known) target for this predicate."""
        if self.kind == "verdict":
            return result.verdict
        if self.kind == "status":
            script = result.scripts.get(self.argument or "pre")
            return script.status.value if script else "absent"
        if self.kind == "post-holds":
            post = result.scripts.get("post")
            if post is None:
                return BROKEN
            back = [p for p in post.sites if p.site_class in (SiteClass.NEW, SiteClass.REAPPEARED, SiteClass.MOVED)]
            return HOLDS if post.status is ScriptStatus.OK and not back else BROKEN
        location = parse_location(self.argument or "")
        for which in ("pre", "post"):
            script = result.scripts.get(which)
            for pairing in script.sites if script else []:
                # either side: a recorded break that moved away is still "the break at FILE:LINE"
                if any(site is not None and site_at(site, location) for site in (pairing.observed, pairing.recorded)):
                    return pairing.site_class.value
        return "absent"


# ------------------------------------------------------------------ the report


@dataclass
class Step:
    """One evaluated candidate, in the order it was tried."""

    target: str
    outcome: str  # "unknown" when it could not be built or run
    detail: str = ""
    cached: bool = False  # read from the cache, not run
    ran: bool = True  # False when nothing could be run (no interpreter for that version)
    seconds: float = 0.0


@dataclass
class BisectReport:
    """What a bisection searched, what it tried, and where the outcome changes."""

    kind: str  # "versions" | "commits"
    subject: str  # the case id, or the command
    predicate: str
    runner: str
    candidates: list[str]
    good_outcome: str
    bad_outcome: str
    last_good: str
    first_bad: str
    ambiguous: list[str]
    steps: list[Step]
    changes: list[str]
    reproduce: str
    labels: dict[str, str] = field(default_factory=dict)  # candidate -> how to show it ("abc1234 subject")
    compare_url: str | None = None
    cache_path: str | None = None

    @property
    def exact(self) -> bool:
        return not self.ambiguous

    @property
    def evaluated(self) -> int:
        """Candidates actually run this time (not read from the cache)."""
        return sum(1 for step in self.steps if step.ran and not step.cached)

    @property
    def from_cache(self) -> int:
        return sum(1 for step in self.steps if step.cached)

    def label(self, candidate: str) -> str:
        return self.labels.get(candidate, candidate)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": BISECT_SCHEMA,
            "kind": self.kind,
            "subject": self.subject,
            "predicate": self.predicate,
            "runner": self.runner,
            "searched": {"from": self.candidates[0], "to": self.candidates[-1], "candidates": self.candidates},
            "good_outcome": self.good_outcome,
            "bad_outcome": self.bad_outcome,
            "last_good": self.last_good,
            "first_bad": self.first_bad,
            "exact": self.exact,
            "ambiguous": self.ambiguous,
            "steps": [
                {
                    "target": s.target,
                    "outcome": s.outcome,
                    "detail": s.detail,
                    "cached": s.cached,
                    "ran": s.ran and not s.cached,
                    "seconds": round(s.seconds, 2),
                }
                for s in self.steps
            ],
            "changes": self.changes,
            "reproduce": self.reproduce,
            "labels": self.labels,
            "compare_url": self.compare_url,
            "cache": self.cache_path,
        }


# ------------------------------------------------------------------ the cache of target records


class RecordStore:
    """Target records (JSON objects) by (subject, target key): in memory, and on disk unless disabled.

    Each record is kept in the ResultCache file as one JSON string. Before a
    write the file is re-read under a lock, so two bisections sharing the
    cache add to it rather than overwrite each other.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._disk = ResultCache(path) if path is not None else None
        self._memory: dict[tuple[str, str], dict[str, Any]] = {}

    def get(self, subject: str, key: str) -> dict[str, Any] | None:
        if (subject, key) in self._memory:
            return self._memory[(subject, key)]
        if self._disk is None:
            return None
        stored = self._disk.get(subject, key)
        if not isinstance(stored, str):
            return None
        try:
            record = json.loads(stored)
        except ValueError:
            return None
        return record if isinstance(record, dict) and record.get("v") == RECORD_VERSION else None

    def put(self, subject: str, key: str, record: dict[str, Any], *, persist: bool = True) -> None:
        self._memory[(subject, key)] = record
        if self.path is None or not persist:
            return
        with self._locked():
            ResultCache(self.path).put(subject, key, json.dumps(record, sort_keys=True))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def observation_record(observation: ScriptObservation) -> dict[str, Any]:
    """An observation as cacheable JSON, without the long log texts classification does not read."""
    plain: dict[str, Any] = to_plain(observation)
    plain.pop("log_excerpt", None)
    plain.pop("stdout_tail", None)
    for site in plain.get("sites", []):
        site.pop("excerpt", None)
    return plain


def observation_from_record(data: Any) -> ScriptObservation | None:
    """Back from JSON; None when the record does not fit (written by another casekit: re-run)."""
    try:
        observation: ScriptObservation = from_plain(ScriptObservation, data, "bisect cache", "observation")
    except BundleError:
        return None
    return observation


def _unknown_record(why: str) -> dict[str, Any]:
    return {"v": RECORD_VERSION, "unknown": why}


@dataclass
class Fresh:
    """A fresh evaluation's record; `cacheable` False for what may differ next time, `ran` False when nothing ran."""

    record: dict[str, Any]
    cacheable: bool = True
    ran: bool = True


@dataclass
class _Evaluated:
    outcome: Outcome
    detail: str
    observations: dict[str, ScriptObservation]
    result: CaseResult | None = None


class _Evaluator:
    """Evaluate candidates once each: the record from the store, or a fresh run stored at once."""

    def __init__(
        self,
        store: RecordStore,
        subject: str,
        target_key: Callable[[str], str],
        run_fresh: Callable[[str], Fresh],
        interpret_record: Callable[[str, dict[str, Any]], _Evaluated | None],
        retry_unknown: bool,
        label: Callable[[str], str],
        progress: ProgressFn,
    ) -> None:
        self.store = store
        self.subject = subject
        self.target_key = target_key
        self.run_fresh = run_fresh
        self.interpret_record = interpret_record
        self.retry_unknown = retry_unknown
        self.label = label
        self.progress = progress
        self.done: dict[str, _Evaluated] = {}
        self.steps: list[Step] = []

    def __call__(self, candidate: str) -> Outcome:
        if candidate in self.done:
            return self.done[candidate].outcome
        key = self.target_key(candidate)
        record = self.store.get(self.subject, key)
        if record is not None and "unknown" in record and self.retry_unknown:
            record = None
        cached, ran = record is not None, False
        started = time.monotonic()
        if record is None:
            fresh = self.run_fresh(candidate)
            record, ran = fresh.record, fresh.ran
            self.store.put(self.subject, key, record, persist=fresh.cacheable)
        evaluated = self.interpret_record(candidate, record)
        if evaluated is None and cached:  # a record this casekit cannot read back: run it again
            fresh = self.run_fresh(candidate)
            cached, ran = False, fresh.ran
            self.store.put(self.subject, key, fresh.record, persist=fresh.cacheable)
            evaluated = self.interpret_record(candidate, fresh.record)
        if evaluated is None:
            evaluated = _Evaluated(UNKNOWN, "the observations could not be read back", {})
        seconds = 0.0 if cached else time.monotonic() - started
        self.done[candidate] = evaluated
        shown = "unknown" if evaluated.outcome is UNKNOWN else str(evaluated.outcome)
        self.steps.append(Step(candidate, shown, evaluated.detail, cached, ran, seconds))
        how = "cached" if cached else f"{seconds:.1f} s"
        if evaluated.outcome is UNKNOWN:
            shown += f" ({evaluated.detail})" + ("; --retry-unknown runs it again" if cached else "")
        self.progress(f"{self.label(candidate)}: {shown} [{how}]")
        return evaluated.outcome


def _search(
    candidates: list[str], evaluate: _Evaluator, what: str, hint: str, progress: ProgressFn
) -> BisectResult[str]:
    """Check both ends first (with clear errors), then bisect the inside."""
    interior = len(candidates) - 2
    for index, end in ((0, "good"), (-1, "bad")):
        left = (2 if end == "good" else 1) + interior.bit_length()
        progress(
            f"step {len(evaluate.steps) + 1}, ~{left} left: checking the {end} end {evaluate.label(candidates[index])}"
        )
        if evaluate(candidates[index]) is UNKNOWN:
            raise BisectEndUnknown(
                f"the {end} end {evaluate.label(candidates[index])} could not be evaluated: "
                f"{evaluate.done[candidates[index]].detail}; pick a {end} end that builds and runs "
                "(or add --retry-unknown if the failure was passing, e.g. the network)"
            )
    good, bad = evaluate.done[candidates[0]], evaluate.done[candidates[-1]]
    if good.outcome == bad.outcome:
        ends = "; ".join(
            f"{evaluate.label(c)}: {evaluate.done[c].detail}"
            for c in (candidates[0], candidates[-1])
            if evaluate.done[c].detail
        )
        raise BisectEndsAgree(
            f"both ends give {good.outcome!r} for {what} ({evaluate.label(candidates[0])} and "
            f"{evaluate.label(candidates[-1])}): nothing to bisect{hint}" + (f" [{ends}]" if ends else "")
        )

    def on_step(done: int, left: int, candidate: str) -> None:
        if candidate not in evaluate.done:
            progress(f"step {done + 1}, ~{left} left: trying {evaluate.label(candidate)}")

    return bisect_candidates(candidates, evaluate, progress=on_step)


# ------------------------------------------------------------------ what changed


def _site_line(site: Site) -> str:
    where = site.where()
    if site.call_site is not None and site.call_site.where() != where:
        where += f" (from {site.call_site.where()})"
    return f"{where} in {site.function}: {site.reason or site.category}"


def describe_changes(
    before: Mapping[str, ScriptObservation], after: Mapping[str, ScriptObservation], before_label: str, after_label: str
) -> list[str]:
    """What one script set showed differently between two targets: statuses, breaks, graphs, fallbacks."""
    changes: list[str] = []
    for which in sorted(
        set(before) | set(after), key=lambda w: list(SCRIPT_LABELS).index(w) if w in SCRIPT_LABELS else 9
    ):
        name = SCRIPT_LABELS.get(which, which)
        old, new = before.get(which), after.get(which)
        if old is None or new is None:
            continue
        if old.status is not new.status:
            detail = f": {new.detail}" if new.detail else ""
            changes.append(
                f"{name}: {old.status.value} on {before_label} -> {new.status.value} on {after_label}{detail}"
            )
        old_sites = {(s.where(), s.category): s for s in old.sites}
        new_sites = {(s.where(), s.category): s for s in new.sites}
        vanished = [s for k, s in old_sites.items() if k not in new_sites]
        appeared = [s for k, s in new_sites.items() if k not in old_sites]
        for site in list(appeared):
            source = next((s for s in vanished if s.category == site.category), None)
            if source is not None:
                changes.append(f"{name}: break moved from {source.where()} ({source.function}) to {_site_line(site)}")
                vanished.remove(source)
                appeared.remove(site)
        for site in appeared:
            changes.append(f"{name}: new break at {_site_line(site)}")
        for site in vanished:
            changes.append(f"{name}: break at {_site_line(site)} no longer observed")
        for key, site in new_sites.items():
            earlier = old_sites.get(key)
            if earlier is not None and earlier.reason != site.reason:
                changes.append(f"{name}: break at {site.where()} reworded: {earlier.reason!r} -> {site.reason!r}")
        if old.graphs != new.graphs:
            changes.append(f"{name}: {old.graphs} -> {new.graphs} graph(s)")
        old_fallbacks = {(f.file, f.function) for f in old.fallback_frames}
        new_fallbacks = {(f.file, f.function) for f in new.fallback_frames}
        for frame in new.fallback_frames:
            if (frame.file, frame.function) not in old_fallbacks:
                changes.append(f"{name}: {frame.function} ({frame.file}:{frame.line}) now falls back to eager entirely")
        for frame in old.fallback_frames:
            if (frame.file, frame.function) not in new_fallbacks:
                changes.append(f"{name}: {frame.function} no longer falls back to eager entirely")
    return changes


# ------------------------------------------------------------------ across torch versions


def version_target_key(runner: str, version: str, *, python: str | None = None, cuda: str | None = None) -> str:
    """'venv:2.5.1', 'docker:2.13.0+cu124', 'python:2.5.1@/opt/py251/bin/python'."""
    key = f"{runner}:{version}" + (f"+{cuda}" if cuda else "")
    return key + (f"@{python}" if python else "")


def _compare_url(last_good: str, first_bad: str) -> str | None:
    """The upstream diff between two releases (not for nightlies or local builds, which have no tags)."""
    good, bad = parse_version(last_good), parse_version(first_bad)
    if good.is_nightly or bad.is_nightly:
        return None
    return f"https://github.com/pytorch/pytorch/compare/v{good.text.split('+')[0]}...v{bad.text.split('+')[0]}"


def version_candidates(
    good: str,
    bad: str,
    *,
    versions: Sequence[str] | None,
    runner: str,
    pythons: Mapping[str, str],
    nightlies: bool = False,
    index_url: str | None = None,
    list_versions: ListVersions = fetch_available_versions,
) -> list[str]:
    """good, the versions between, bad: an explicit list, the mapped interpreters, or the package index."""
    if versions is not None:
        return versions_between(versions, good, bad)
    if runner == "python":
        return versions_between(pythons, good, bad)
    return versions_between(list_versions("torch", pre=nightlies, index_url=index_url), good, bad)


def bisect_versions(
    case: Case,
    good: str,
    bad: str,
    *,
    versions: Sequence[str] | None = None,
    runner: str = "venv",
    pythons: Mapping[str, str] | None = None,
    predicate: Predicate | str | tuple[str, str] = "verdict",
    cuda: str | None = None,
    index_url: str | None = None,
    nightlies: bool = False,
    backend: str | None = None,
    timeout: float = 300.0,
    cache_path: Path | None = None,
    use_cache: bool = True,
    retry_unknown: bool = False,
    archive_dir: Path | None = None,
    make_runner: RunnerFactory | None = None,
    run_target_fn: RunTarget | None = None,
    list_versions: ListVersions = fetch_available_versions,
    progress: ProgressFn = _quiet,
) -> BisectReport:
    """Find the first torch version between `good` and `bad` where the case's outcome differs from good's.

    Each candidate is one replay of the case on that version (`run_target`,
    history not recorded). With runner "python", `pythons` maps each version
    to an existing interpreter; a version without one is unknown. A target
    that cannot be built or run is unknown and stepped around.
    """
    chosen = Predicate.parse(predicate)
    chosen.validate(case)
    pythons = dict(pythons or {})
    if runner == "python" and not pythons:
        raise BisectError("--runner python needs interpreters: --python-for VERSION=PATH for each version")
    if make_runner is None:
        from casekit.runners.registry import make_runner as registry_make_runner

        make_runner = registry_make_runner
    candidates = version_candidates(
        good,
        bad,
        versions=versions,
        runner=runner,
        pythons=pythons,
        nightlies=nightlies,
        index_url=index_url,
        list_versions=list_versions,
    )
    replay_one = run_target_fn or run_target
    options = ReplayOptions(backend=backend, timeout=timeout, record=False, verify_rollback=False)
    subject = f"case:{content_hash(case)}" + (f":backend={backend}" if backend else "")
    factory = make_runner

    def spec_for(version: str) -> TargetSpec:
        return TargetSpec(runner=runner, torch=version, python=pythons.get(version), cuda=cuda, index_url=index_url)

    def run_fresh(version: str) -> Fresh:
        if runner == "python" and version not in pythons:
            why = f"no interpreter given for {version} (--python-for {version}=PATH)"
            return Fresh(_unknown_record(why), cacheable=False, ran=False)
        run = replay_one(spec_for(version), [case], options, factory, progress)
        if run.error:
            return Fresh(_unknown_record(f"environment failed: {run.error}"))
        if not run.results:
            return Fresh(_unknown_record("the replay returned no result"))
        scripts = run.results[0].scripts
        failed = [
            f"{which}: {s.observation.detail}" for which, s in scripts.items() if s.status is ScriptStatus.ENV_FAILED
        ]
        if failed:
            return Fresh(_unknown_record("environment failed: " + "; ".join(failed)))
        return Fresh(
            {
                "v": RECORD_VERSION,
                "torch": str(run.environment.get("torch") or version),
                "observations": {which: observation_record(s.observation) for which, s in scripts.items()},
            }
        )

    def interpret_record(version: str, record: dict[str, Any]) -> _Evaluated | None:
        if "unknown" in record:
            return _Evaluated(UNKNOWN, str(record["unknown"]), {})
        observations: dict[str, ScriptObservation] = {}
        stored = record.get("observations") or {}
        # pre before post whatever the JSON order: the classification's reasons follow it
        for which, data in sorted(stored.items(), key=lambda item: (item[0] != "pre", item[0])):
            observation = observation_from_record(data)
            if observation is None:
                return None
            observations[which] = observation
        result = classify_case(case, spec_for(version).label, observations)
        outcome = chosen.outcome(result)
        return _Evaluated(outcome, chosen.detail(result), observations, result)

    path = (cache_path or default_cache_path()) if use_cache else None
    evaluate = _Evaluator(
        RecordStore(path),
        subject,
        lambda v: version_target_key(runner, v, python=pythons.get(v), cuda=cuda),
        run_fresh,
        interpret_record,
        retry_unknown,
        str,
        progress,
    )
    progress(
        f"bisecting {case.id} by {chosen.describe()}: {len(candidates)} candidate(s), {candidates[0]} … {candidates[-1]}"
    )
    hint = (
        "; compare another aspect with --site FILE:LINE, --status pre|post or --post-holds"
        if chosen.kind == "verdict"
        else ""
    )
    result = _search(candidates, evaluate, chosen.describe(), hint, progress)
    before, after = evaluate.done[result.last_good], evaluate.done[result.first_bad]
    changes = []
    if before.result is not None and after.result is not None and before.result.verdict != after.result.verdict:
        changes.append(
            f"verdict: {before.result.verdict} on {result.last_good} -> {after.result.verdict} on {result.first_bad}"
        )
    changes += describe_changes(before.observations, after.observations, result.last_good, result.first_bad)
    if after.result is not None:
        if after.result.reasons:
            changes.append(f"on {result.first_bad}, against the case's record: " + "; ".join(after.result.reasons))
    return BisectReport(
        kind="versions",
        subject=case.id,
        predicate=chosen.describe(),
        runner=runner,
        candidates=candidates,
        good_outcome=str(result.good_outcome),
        bad_outcome=str(evaluate.done[candidates[-1]].outcome),
        last_good=result.last_good,
        first_bad=result.first_bad,
        ambiguous=list(result.ambiguous),
        steps=evaluate.steps,
        changes=changes,
        reproduce=_replay_command(case.id, result.first_bad, runner, pythons, cuda, index_url, backend, archive_dir),
        compare_url=_compare_url(result.last_good, result.first_bad),
        cache_path=str(path) if path else None,
    )


def _replay_command(
    case_id: str,
    version: str,
    runner: str,
    pythons: Mapping[str, str],
    cuda: str | None,
    index_url: str | None,
    backend: str | None,
    archive_dir: Path | None,
) -> str:
    """The one replay that shows the first bad target's outcome (history left alone)."""
    if runner == "python":
        words = ["--python", pythons.get(version, f"PYTHON_WITH_TORCH_{version}")]
    else:
        words = ["--torch", version] + (["--runner", runner] if runner != "venv" else [])
        words += (["--cuda", cuda] if cuda else []) + (["--index-url", index_url] if index_url else [])
    words += (["--backend", backend] if backend else []) + (["--archive", str(archive_dir)] if archive_dir else [])
    return " ".join(["casekit", "replay", "--case", case_id, *words, "--no-record"])


# ------------------------------------------------------------------ across the user's commits


@dataclass
class InPlaceProbeJob(ProbeJob):
    """A probe job that runs the script where it lies (in the worktree), not a copy in the batch folder.

    The user's script imports its neighbours (`from model import Net`) and
    reads files relative to the repository: it must run from the checkout,
    with the command's working directory, as the user's command would.
    Host interpreters only (the python runner), where that path is visible.
    """

    workdir: str | None = None

    def to_request(self, script_path: str) -> dict[str, object]:
        request = super().to_request(str(self.script))
        request["workdir"] = self.workdir
        return request


def split_probe_command(command: Sequence[str]) -> tuple[str | None, str, list[str]]:
    """`python train.py --steps 2` -> (interpreter or None, 'train.py', ['--steps', '2']).

    The script is the last argument ending in .py; what follows it are the
    script's own arguments. The interpreter is the first word when it names a
    python ('python', 'python3.11', '/opt/venv/bin/python'), else None.
    """
    words = list(command)
    scripts = [i for i, word in enumerate(words) if word.endswith(".py")]
    if not scripts:
        raise BisectError(
            f"no .py script in the command {' '.join(words)!r}: the probe observes a python script "
            "(e.g. -- python model.py); for any other command pass --exit-code"
        )
    index = scripts[-1]
    interpreter = words[0] if index > 0 and Path(words[0]).name.startswith("python") else None
    return interpreter, words[index], words[index + 1 :]


def _recorded_categories(case: Case) -> list[str]:
    pre = case.observations.get("pre")
    categories = [site.category for site in (pre.sites if pre else [])]
    if not categories:
        raise BisectError(f"case {case.id!r} recorded no pre-fix graph breaks to look for")
    return categories


def commit_outcome(
    observation: ScriptObservation, *, site: str | None = None, case: Case | None = None
) -> tuple[Outcome, str]:
    """One commit's outcome from the observed script, and a one-line detail.

    With `site`: "break"/"no-break" at that place; with `case`: how many of
    the case's recorded pre-fix breaks (by category) are observed; otherwise
    the number of graph breaks. A script that cannot even run eagerly (or an
    environment that fails) is unknown: that commit cannot be tested, as with
    exit 125. A crash or timeout under compile is an outcome of its own.
    """
    sites = observation.sites
    detail = f"{len(sites)} break(s), {observation.graphs} graph(s)" + (
        ": " + ", ".join(s.where() for s in sites[:4]) if sites else ""
    )
    if observation.status in (ScriptStatus.ENV_FAILED, ScriptStatus.EAGER_FAILED):
        return UNKNOWN, f"{observation.status.value}: {observation.detail}"
    if observation.status not in (ScriptStatus.OK, ScriptStatus.MISMATCH):
        return observation.status.value, observation.detail
    if site is not None:
        location = parse_location(site)
        return (BREAK if any(site_at(s, location) for s in sites) else NO_BREAK), detail
    if case is not None:
        wanted = _recorded_categories(case)
        seen = [s.category for s in sites]
        found = 0
        for category in wanted:
            if category in seen:
                seen.remove(category)
                found += 1
        return f"{found}/{len(wanted)} recorded break(s)", detail
    return f"{len(sites)} graph break(s)", detail


def bisect_commits_run(
    repo: Path,
    good: str,
    bad: str,
    command: Sequence[str],
    *,
    site: str | None = None,
    case: Case | None = None,
    exit_code: bool = False,
    python: str | None = None,
    backend: str = "eager",
    timeout: float = 300.0,
    cache_path: Path | None = None,
    use_cache: bool = True,
    retry_unknown: bool = False,
    make_runner: RunnerFactory | None = None,
    progress: ProgressFn = _quiet,
) -> BisectReport:
    """Find the first commit (first-parent, oldest first) after `good` where the outcome differs from good's.

    Probe mode (default): `command` is `[python] SCRIPT.py [ARGS...]`; the
    script is observed by the probe at each commit, run in place in a
    temporary worktree with the worktree as working directory. Exit-code mode
    (`exit_code=True`): any command, `git bisect run`'s contract (0 good,
    125 skip, 1-127 bad). The user's working tree is never touched.
    """
    repo = Path(repo)
    command = list(command)
    if not command:
        raise BisectError("no command given to run at each commit (put it after --)")
    if site is not None and case is not None:
        raise BisectError("give --site or --case, not both")
    if site is not None:
        parse_location(site)
    if exit_code and (site is not None or case is not None):
        raise BisectError("--exit-code judges commits by the command's exit status; it takes no --site or --case")
    candidates = list_first_parent_commits(repo, good, bad)
    script_rel, interpreter = "", ""
    argv: list[str] = []
    if exit_code:
        identity: dict[str, Any] = {"mode": "exit-code", "command": command}
    else:
        named, script_rel, argv = split_probe_command(command)
        interpreter = python or named or sys.executable
        identity = {"mode": "probe", "script": script_rel, "argv": argv, "python": interpreter, "backend": backend}
    subject = "commits:" + sha256_text(json.dumps(identity, sort_keys=True))[:16]
    if make_runner is None:
        from casekit.runners.registry import make_runner as registry_make_runner

        make_runner = registry_make_runner
    factory = make_runner
    runner_holder: list[Runner] = []

    def probe_runner() -> Runner:
        """One runner for all commits: the interpreter is checked (and torch's version read) once."""
        if not runner_holder:
            runner = factory(TargetSpec(runner="python", python=interpreter))
            try:
                runner.prepare(progress)
            except EnvironmentFailed as error:
                raise BisectError(f"cannot observe the script with {interpreter}: {error}") from error
            runner_holder.append(runner)
        return runner_holder[0]

    def run_fresh(sha: str) -> Fresh:
        with temporary_worktree(repo, sha) as worktree:
            if exit_code:
                outcome = run_command_outcome(command, worktree, timeout, env={**os.environ, COMMIT_ENV_VAR: sha})
                if outcome is UNKNOWN:
                    return Fresh(_unknown_record("the command exited 125 (skip)"))
                return Fresh({"v": RECORD_VERSION, "exit": str(outcome)})
            script = worktree / script_rel
            if not script.is_file():
                return Fresh(_unknown_record(f"no {script_rel} at this commit"))
            job = InPlaceProbeJob(
                id="commit", script=script, backend=backend, timeout=timeout, argv=tuple(argv), workdir=str(worktree)
            )
            source = script.read_text(encoding="utf-8", errors="replace")
            runner = probe_runner()
            try:
                batch = runner.run_probe([job], progress)
            except CasekitError as error:
                return Fresh(_unknown_record(f"the probe could not run: {error}"), cacheable=False)
            observation = observe_batch(batch, job, ScriptSource(script.name, sha256_text(source), source))
            return Fresh({"v": RECORD_VERSION, "observations": {"script": observation_record(observation)}})

    def interpret_record(sha: str, record: dict[str, Any]) -> _Evaluated | None:
        if "unknown" in record:
            return _Evaluated(UNKNOWN, str(record["unknown"]), {})
        if "exit" in record:
            return _Evaluated(str(record["exit"]), "", {})
        observation = observation_from_record((record.get("observations") or {}).get("script"))
        if observation is None:
            return None
        outcome, detail = commit_outcome(observation, site=site, case=case)
        return _Evaluated(outcome, detail, {"script": observation})

    labels: dict[str, str] = {}

    def label(sha: str) -> str:
        if sha not in labels:
            labels[sha] = commit_summary(repo, sha)
        return labels[sha]

    if exit_code:
        what, hint = "the command's exit status", ""
    elif site is not None:
        what, hint = f"a break at {site}", ""
    elif case is not None:
        what, hint = f"the breaks case {case.id} recorded", ""
    else:
        what, hint = "the number of graph breaks", "; look for one break with --site FILE:LINE"
    path = (cache_path or default_cache_path()) if use_cache else None
    evaluate = _Evaluator(RecordStore(path), subject, str, run_fresh, interpret_record, retry_unknown, label, progress)
    progress(
        f"bisecting {len(candidates)} commit(s) of {repo} by {what}: {label(candidates[0])} … {label(candidates[-1])}"
    )
    result = _search(candidates, evaluate, what, hint, progress)
    before, after = evaluate.done[result.last_good], evaluate.done[result.first_bad]
    changes = describe_changes(before.observations, after.observations, result.last_good[:12], result.first_bad[:12])
    changes += _files_changed(repo, result.last_good, result.first_bad)
    for sha in (*result.ambiguous, result.first_bad):
        label(sha)
    return BisectReport(
        kind="commits",
        subject=" ".join(command),
        predicate=what,
        runner="exit-code" if exit_code else f"python:{interpreter}",
        candidates=candidates,
        good_outcome=str(result.good_outcome),
        bad_outcome=str(evaluate.done[candidates[-1]].outcome),
        last_good=result.last_good,
        first_bad=result.first_bad,
        ambiguous=list(result.ambiguous),
        steps=evaluate.steps,
        changes=changes,
        reproduce=_commit_command(repo, result.first_bad, command, exit_code),
        labels=labels,
        cache_path=str(path) if path else None,
    )


def _files_changed(repo: Path, last_good: str, first_bad: str) -> list[str]:
    import git

    try:
        names = git.Repo(repo).git.diff("--name-only", last_good, first_bad).split()
    except git.GitCommandError:
        return []
    return [f"files changed {last_good[:12]}..{first_bad[:12]}: " + ", ".join(names)] if names else []


def _commit_command(repo: Path, sha: str, command: Sequence[str], exit_code: bool) -> str:
    folder = f"/tmp/casekit-{sha[:12]}"
    logs = "" if exit_code else "TORCH_LOGS=graph_breaks "
    return f"git -C {repo} worktree add --detach {folder} {sha[:12]} && cd {folder} && {logs}{' '.join(command)}"
