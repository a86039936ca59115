"""Bisect torch releases for a case: each candidate is one replay of the case on that torch (any runner).

Options travel as one `ReleaseBisect`; the effects (replaying a target, the
runner factory, the package index) are passed in as `ReleaseSeams`, so tests
drive every path with a fake `run_target` at its interface.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.bisect.ahead import Ahead, BuildAhead, release_builder
from casekit.bisect.engine import (
    CacheSettings,
    Evaluated,
    Evaluator,
    Fresh,
    Record,
    Subject,
    observations_from_record,
    observations_record,
    quiet,
    registry_runner,
    search_range,
    unknown_record,
)
from casekit.bisect.predicates import Predicate, by_role
from casekit.bisect.report import BisectReport, CommitRange, ReportHeader, build_report
from casekit.bisect.search import UNKNOWN, BisectResult, likely_after
from casekit.bisect.versions import fetch_available_versions, parse_version, versions_between
from casekit.bundle import content_hash
from casekit.classify import classify_case
from casekit.errors import BisectError
from casekit.model import Case, ScriptRole, ScriptStatus
from casekit.observe.probe_output import read_environment
from casekit.replay.run import ReplayOptions, TargetRun, run_target
from casekit.runners import registry
from casekit.runners.dynamo import variant_suffix
from casekit.runners.interface import ProgressFn, RunnerFactory, ScriptEntry, TargetSpec
from casekit.runners.torch_source.request import Channel, is_date, nightly_date, parse_date

RunTarget = Callable[[TargetSpec, list[Case], ReplayOptions, RunnerFactory, ProgressFn], TargetRun]
ListVersions = Callable[..., list[str]]
ListNightlies = Callable[[TargetSpec, dt.date, dt.date], tuple[list[str], list[str]]]
PYTORCH_COMPARE = "https://github.com/pytorch/pytorch/compare/{good}...{bad}"


@dataclass(frozen=True)
class ReleaseBisect:
    """Everything a user chooses for a bisection over torch releases."""

    good: str
    bad: str
    versions: Sequence[str] | None = None  # explicit candidates; else the mapped interpreters or the index
    runner: str = registry.DEFAULT_RUNNER
    pythons: Mapping[str, str] = field(default_factory=dict)  # version -> interpreter, for a runner of interpreters
    predicate: Predicate = field(default_factory=Predicate)
    cuda: str | None = None
    index_url: str | None = None
    nightlies: bool = False  # candidates are nightlies by date (--good/--bad YYYY-MM-DD), from the nightly channel
    torch_repo: Path | None = None  # a PyTorch checkout: list the commits between two nightlies from it
    backend: str | None = None
    timeout: float | None = None  # None: each case's bound, derived from its capture (casekit.timeouts)
    archive_dir: Path | None = None  # only to print a reproduce command that finds the case
    cache: CacheSettings = field(default_factory=CacheSettings)
    ahead: Ahead = field(default_factory=lambda: Ahead(limit=0))  # envs built in the background ahead of need
    # pins installed beside torch (a shared bisection pins all its cases' libraries)
    extra_packages: tuple[str, ...] = ()
    dynamo: tuple[tuple[str, str], ...] = ()  # --dynamo NAME=VALUE, set in every run of every release
    options: tuple[tuple[str, str], ...] = ()  # --allow KEY=VALUE: the runner's relaxations (each runner checks them)

    @property
    def channel(self) -> Channel:
        return Channel.NIGHTLY if self.nightlies else Channel.RELEASE

    def spec(self, version: str) -> TargetSpec:
        return registry.target_spec(
            self.runner,
            torch=version,
            python=self.pythons.get(version),
            cuda=self.cuda,
            index_url=self.index_url,
            extra_packages=self.extra_packages,
            channel=self.channel,
            dynamo=self.dynamo,
            options=self.options,
        )

    def label(self, version: str) -> str:
        """How a candidate is shown: a nightly by its date ('2026-01-05 (2.14.0.dev20260105)')."""
        date = nightly_date(version) if self.nightlies else None
        return f"{date} ({version})" if date is not None else version

    def target_key(self, version: str) -> str:
        spec = self.spec(version)
        key = version_target_key(self.runner, version, python=spec.python, cuda=self.cuda, host=spec.host)
        return key + variant_suffix(self.dynamo, ())  # other settings: another result in the cache

    def check_runner(self) -> None:
        """BisectError before any run: a runner of interpreters with none given."""
        if registry.takes_interpreters(self.runner) and not self.pythons:
            raise BisectError(f"--runner {self.runner} needs interpreters: --python-for VERSION=PATH for each version")

    def missing_target(self, version: str) -> str | None:
        """Why this version has no target (no interpreter mapped to it), or None when it has one."""
        if registry.takes_interpreters(self.runner) and version not in self.pythons:
            return f"no interpreter given for {version} (--python-for {version}=PATH)"
        return None


@dataclass(frozen=True)
class ReleaseSeams:
    """The effects a release bisection calls: replay one target, make runners, list the index's versions."""

    run_target: RunTarget | None = None  # None: casekit.replay.run.run_target
    make_runner: RunnerFactory | None = None  # None: the runner registry
    list_versions: ListVersions = fetch_available_versions
    list_nightlies: ListNightlies = registry.nightlies_between
    progress: ProgressFn = quiet


def version_target_key(
    runner: str, version: str, *, python: str | None = None, cuda: str | None = None, host: str | None = None
) -> str:
    """'venv:2.5.1', 'docker:2.13.0+cu124', 'python:2.5.1@/opt/py251/bin/python',
    'docker:2.13.0@tcp://gpu-a:2376' (another engine: another target)."""
    key = f"{runner}:{version}" + (f"+{cuda}" if cuda else "")
    return key + "".join(f"@{where}" for where in (python, host) if where)


def compare_url(last_good: str, first_bad: str) -> str | None:
    """The upstream diff between two releases (not for nightlies or local builds, which have no tags)."""
    good, bad = parse_version(last_good), parse_version(first_bad)
    if good.is_nightly or bad.is_nightly:
        return None
    return f"https://github.com/pytorch/pytorch/compare/v{good.text.split('+')[0]}...v{bad.text.split('+')[0]}"


@dataclass(frozen=True)
class Candidates:
    """A bisection's candidate list, oldest first, and what was done to make it (one line each)."""

    versions: list[str]
    notes: list[str] = field(default_factory=list)


def version_candidates(config: ReleaseBisect, list_versions: ListVersions = fetch_available_versions) -> list[str]:
    """good, the versions between, bad: an explicit list, the mapped interpreters, or the package index."""
    if config.versions is not None:
        return versions_between(config.versions, config.good, config.bad)
    if registry.takes_interpreters(config.runner):
        return versions_between(config.pythons, config.good, config.bad)
    listed = list_versions("torch", pre=config.nightlies, index_url=config.index_url)
    return versions_between(listed, config.good, config.bad)


def candidates_for(config: ReleaseBisect, seams: ReleaseSeams) -> Candidates:
    """The candidates: nightlies by date from the nightly channel (--nightlies), else releases as above."""
    if not config.nightlies:
        return Candidates(version_candidates(config, seams.list_versions))
    good, bad = (_as_date(config.good, "--good"), _as_date(config.bad, "--bad"))
    registry.check_channel(config.runner, Channel.NIGHTLY)
    versions, notes = seams.list_nightlies(config.spec(config.good), good, bad)
    return Candidates(versions, notes)


def _as_date(text: str, flag: str) -> dt.date:
    """A nightly end: a date, or a nightly version standing for its date."""
    if is_date(text):
        return parse_date(text)
    date = nightly_date(text)
    if date is None:
        raise BisectError(f"{flag} {text!r}: with --nightlies, give a date (YYYY-MM-DD) or a nightly version")
    return date


def commit_range(
    config: ReleaseBisect, result: BisectResult[str], evaluate: Evaluator, subject: Subject
) -> CommitRange | None:
    """The PyTorch commits between the last good and the first bad build: their `torch.version.git_version`,
    read from what each build's probe reported (cached with the step), and the compare URL."""
    shas = []
    for version in (result.last_good, result.first_bad):
        record = evaluate.store.get(subject.name, subject.target_key(version)) or {}
        sha = record.get("torch_git")
        if not isinstance(sha, str) or not sha or sha == "Unknown":
            return None
        shas.append(sha)
    good, bad = shas
    log = commits_in(config.torch_repo, good, bad) if config.torch_repo is not None else []
    return CommitRange(good, bad, PYTORCH_COMPARE.format(good=good, bad=bad), log)


def commits_in(repo: Path, good: str, bad: str, limit: int = 200) -> list[str]:
    """'sha subject' for each commit in good..bad of a local checkout (newest first); [] when it cannot tell."""
    import git

    try:
        lines = git.Repo(repo).git.log("--format=%h %s", f"-{limit}", f"{good}..{bad}", "--")
    except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):
        return []
    return [line for line in str(lines).splitlines() if line.strip()]


def finish_report(
    report: BisectReport,
    case_id: str,
    config: ReleaseBisect,
    result: BisectResult[str] | None,
    evaluate: Evaluator,
    notes: Sequence[str] = (),
) -> None:
    """What a release bisection adds to the report: how to reproduce each side, the upstream range."""
    report.notes = list(notes)
    if config.nightlies:
        report.labels = {candidate: config.label(candidate) for candidate in report.candidates}
    if result is None:
        return
    report.reproduce = replay_command(case_id, result.first_bad, config)
    report.compare_url = compare_url(result.last_good, result.first_bad)
    if config.nightlies:
        report.reproduce_good = replay_command(case_id, result.last_good, config)
        report.commits = commit_range(config, result, evaluate, evaluate.subject)
        if report.commits is not None:
            report.compare_url = report.commits.compare_url


def replay_command(case_id: str, version: str, config: ReleaseBisect) -> str:
    """The one replay that shows a target's outcome (history left alone); a nightly named by its date."""
    spec = config.spec(version)
    date = nightly_date(version) if config.nightlies else None
    if date is not None:  # "--torch nightly:2026-01-05", as a user types it (the same build: that day's)
        spec = dataclasses.replace(spec, torch=str(date), extra_packages=())
    words = registry.replay_flags(spec)
    words += (["--backend", config.backend] if config.backend else []) + (
        ["--archive", str(config.archive_dir)] if config.archive_dir else []
    )
    return " ".join(["casekit", "replay", "--case", case_id, *words, "--no-record"])


def fresh_from_run(run: TargetRun, case_id: str, version: str) -> Fresh:
    """One case's record out of a replay of one target (which may have replayed other cases too)."""
    if run.error:
        return Fresh(unknown_record(f"environment failed: {run.error}"))
    result = next((r for r in run.results if r.case_id == case_id), None)
    if result is None:
        return Fresh(unknown_record("the replay returned no result"))
    scripts = result.scripts
    failed = [
        f"{w}: {s.observation.detail}"
        for w, s in scripts.items()
        if s.status in (ScriptStatus.ENV_FAILED, ScriptStatus.UNOBSERVED)  # neither says what this release does
    ]
    if failed:
        return Fresh(unknown_record("environment failed: " + "; ".join(failed)))
    environment = read_environment(run.environment)
    extra: dict[str, Any] = {"torch": environment.torch or version}
    if environment.torch_git:  # the commit the build was made from: a nightly's upstream range
        extra["torch_git"] = environment.torch_git
    return Fresh(observations_record({w: s.observation for w, s in scripts.items()}, **extra))


def release_subject(case: Case, config: ReleaseBisect, seams: ReleaseSeams) -> Subject:
    """How one release is run fresh, and how its cached record is read back into an outcome."""
    make_runner = seams.make_runner or registry_runner()
    replay_one = seams.run_target or run_target
    options = ReplayOptions(
        backend=config.backend,
        timeout=config.timeout,
        record=False,
        verify_rollback=False,
        entry=ScriptEntry.BISECT_RELEASES,
    )

    def run_fresh(version: str) -> Fresh:
        why = config.missing_target(version)
        if why is not None:
            return Fresh(unknown_record(why), cacheable=False, ran=False)
        run = replay_one(config.spec(version), [case], options, make_runner, seams.progress)
        return fresh_from_run(run, case.id, version)

    def interpret(version: str, record: Record) -> Evaluated | None:
        if "unknown" in record:
            return Evaluated(UNKNOWN, str(record["unknown"]), {})
        observations = observations_from_record(record)
        if observations is None or not set(observations) <= set(ScriptRole):
            return None
        result = classify_case(case, registry.label(config.spec(version)), by_role(observations))
        return Evaluated(config.predicate.outcome(result), config.predicate.detail(result), observations, result)

    name = f"case:{content_hash(case)}" + (f":backend={config.backend}" if config.backend else "")
    return Subject(name, config.target_key, run_fresh, interpret, config.label)


def bisect_releases(case: Case, config: ReleaseBisect, seams: ReleaseSeams | None = None) -> BisectReport:
    """Find the first torch version between good and bad where the case's outcome differs from good's.

    Each candidate is one replay of the case on that version (history not
    recorded). With a runner of interpreters, `config.pythons` maps each version
    to an existing interpreter; a version without one is unknown. A target that
    cannot be built or run is unknown and stepped around. When both ends give
    the same outcome the report says nothing changed (first_bad None).
    """
    seams = seams or ReleaseSeams()
    config.predicate.validate(case)
    config.check_runner()
    listed = candidates_for(config, seams)
    candidates = listed.versions
    for note in listed.notes:
        seams.progress(note)
    subject = release_subject(case, config, seams)
    builder = release_builder(
        config.runner, config.spec, seams.make_runner or registry_runner(), config.ahead, seams.progress
    )
    evaluate = Evaluator(subject, config.cache, seams.progress)
    if builder is not None:
        subject.run_fresh = _building_ahead(subject.run_fresh, builder, candidates, evaluate)
    what = config.predicate.describe()
    seams.progress(
        f"bisecting {case.id} by {what}: {len(candidates)} candidate(s), "
        f"{config.label(candidates[0])} … {config.label(candidates[-1])}"
    )
    try:
        result = search_range(candidates, evaluate)
    finally:
        if builder is not None:
            builder.close()
    header = ReportHeader("versions", case.id, what, config.runner, config.predicate.hint())
    report = build_report(header, candidates, evaluate, result, case, config.predicate.direction)
    finish_report(report, case.id, config, result, evaluate, listed.notes)
    return report


def _building_ahead(
    run_fresh: Callable[[str], Fresh], builder: BuildAhead, candidates: list[str], evaluate: Evaluator
) -> Callable[[str], Fresh]:
    """Before each fresh run: ask the builder for both halves of the split this run makes."""
    index = {version: i for i, version in enumerate(candidates)}

    def run(version: str) -> Fresh:
        builder.claim(version)
        seen = [(index[s.target], UNKNOWN if s.outcome == "unknown" else s.outcome) for s in evaluate.steps]
        builder.want([candidates[i] for i in likely_after(len(candidates), seen, index[version])])
        return run_fresh(version)

    return run
