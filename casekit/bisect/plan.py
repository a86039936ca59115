"""What `casekit bisect` and `casekit bisect-commits` decide around the search: one case or many,
how far to build ahead, which predicate, what is written where, and how the run ends.

`run_bisect` and `run_commit_bisect` are the one core call behind each command, so
every policy here (the ids or --all, --ahead's default, the ends' order, the
documents written, the exit code, what Ctrl-C leaves) is testable in-process with a
fake `run_target`; the CLI parses flags into a request and renders the outcome.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casekit.archive.store import Archive
from casekit.bisect.ahead import Ahead
from casekit.bisect.commits import CommitBisect, bisect_commits
from casekit.bisect.engine import CacheSettings, quiet
from casekit.bisect.perf import PerfRule, bisect_on_perf
from casekit.bisect.predicates import Predicate, PredicateKind
from casekit.bisect.releases import ReleaseBisect, ReleaseSeams, bisect_releases
from casekit.bisect.report import (
    BisectReport,
    SharedBisection,
    multi_report_to_json,
    render_shared_text,
    render_text,
    report_to_json,
    write_multi_report,
    write_report,
)
from casekit.bisect.shared import bisect_releases_many
from casekit.bisect.versions import parse_version, read_version_list
from casekit.errors import BisectError, CasekitError
from casekit.fsutil import STDOUT, write_atomic
from casekit.outcome import ExitCode
from casekit.runners import registry
from casekit.runners.dynamo import parse_dynamo
from casekit.runners.interface import ProgressFn
from casekit.runners.torch_source.request import parse_date

AHEAD_FOR_SEVERAL = 2  # several cases share each release: building the next ones ahead pays off
AHEAD_FOR_ONE = 0  # one case: a build ahead is mostly a build the search never asks for


def parse_python_for(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """['2.5.1=/opt/py/bin/python', ...] -> {'2.5.1': '/opt/py/bin/python'}."""
    mapping: dict[str, str] = {}
    for item in items:
        version, sep, path = item.partition("=")
        if not sep or not version.strip() or not path.strip():
            raise BisectError(f"--python-for takes VERSION=PATH (e.g. 2.5.1=/opt/py251/bin/python), not {item!r}")
        mapping[version.strip()] = path.strip()
    return mapping


def runner_for(runner: str | None, pythons: Mapping[str, str]) -> str:
    """--runner, or the runner of interpreters when --python-for maps versions to them (which only it takes)."""
    interpreters = registry.interpreter_runner().name
    kind = runner or (interpreters if pythons else registry.DEFAULT_RUNNER)
    if pythons and not registry.takes_interpreters(kind):
        raise BisectError(
            f"--python-for maps versions to interpreters for --runner {interpreters}, not --runner {kind}"
        )
    return kind


def predicate_for(site: str | None = None, status: str | None = None, post_holds: bool = False) -> Predicate:
    """--site / --status / --post-holds (at most one) as the predicate to follow; the verdict by default."""
    chosen = [name for name, given in (("--site", site), ("--status", status), ("--post-holds", post_holds)) if given]
    if len(chosen) > 1:
        raise BisectError(f"choose one of --site, --status and --post-holds, not {' and '.join(chosen)}")
    if site:
        return Predicate.parse(("site", site))
    if status:
        return Predicate.parse(("status", status))
    return Predicate.parse("post-holds" if post_holds else "verdict")


@dataclass(frozen=True)
class Outputs:
    """Where a bisection's documents go: `--json` (STDOUT: printed instead), `--html` (a page; every case with --all)."""

    json_out: Path | None = None
    html_out: Path | None = None

    def __post_init__(self) -> None:
        for flag, path in (("--json", self.json_out), ("--html", self.html_out)):
            if path is not None and path != STDOUT and path.is_dir():  # found now, not after a long bisection
                raise CasekitError(f"{flag} {path}: is a folder; give a file name")
        if self.html_out == STDOUT:
            raise CasekitError("--html takes a file name; '-' is for --json")


@dataclass(frozen=True)
class BisectRequest:
    """Everything `casekit bisect` was asked, checked on construction (bad flags: one clear line)."""

    good: str
    bad: str
    case_ids: tuple[str, ...] = ()
    all_cases: bool = False
    ahead: int | None = None  # envs built in the background; None: AHEAD_FOR_SEVERAL or AHEAD_FOR_ONE
    versions: str | None = None  # 'a,b,c' or a file of versions; None: the interpreters given or the index
    runner: str | None = None
    python_for: tuple[str, ...] = ()  # VERSION=PATH, for the python runner
    predicate: Predicate = field(default_factory=Predicate)
    cuda: str | None = None
    index_url: str | None = None
    nightlies: bool = False  # candidates are nightlies by date (--good/--bad YYYY-MM-DD)
    torch_repo: Path | None = None  # a PyTorch checkout: the commits between two nightlies come from it
    backend: str | None = None
    timeout: float | None = None
    archive_dir: Path | None = None  # as given (only to print a reproduce command that finds the case)
    cache: CacheSettings = field(default_factory=CacheSettings)
    outputs: Outputs = field(default_factory=Outputs)
    dynamo: tuple[str, ...] = ()  # --dynamo NAME=VALUE, set on every release
    perf: PerfRule | None = None  # --perf RULE: follow the repro's timing against the good end, not its breaks
    allow: tuple[str, ...] = ()  # --allow KEY=VALUE: the runner's relaxations, as replay takes them

    def __post_init__(self) -> None:
        parse_dynamo(self.dynamo)
        registry.parse_allow(
            self.allow
        )  # a malformed key: one line now  # a malformed setting: one line now, not after the first build
        if self.perf is not None:
            _check_perf(self)
        if self.all_cases and self.case_ids:
            raise BisectError("give case ids or --all, not both")
        if not self.all_cases and not self.case_ids:
            raise BisectError("name the case(s) to bisect, or pass --all")
        if self.ahead is not None and self.ahead < 0:
            raise BisectError(f"--ahead takes 0 or more, not {self.ahead}")
        object.__setattr__(self, "case_ids", tuple(dict.fromkeys(self.case_ids)))
        _check_ends(self.good, self.bad, nightlies=self.nightlies)

    @property
    def several(self) -> bool:
        """Several cases are bisected together (one env and one probe per release for all)."""
        return self.all_cases or len(self.case_ids) > 1

    @property
    def ahead_limit(self) -> int:
        if self.ahead is not None:
            return self.ahead
        return AHEAD_FOR_SEVERAL if self.several else AHEAD_FOR_ONE

    def release_config(self) -> ReleaseBisect:
        pythons = parse_python_for(self.python_for)
        return ReleaseBisect(
            self.good,
            self.bad,
            versions=read_version_list(self.versions) if self.versions else None,
            runner=runner_for(self.runner, pythons),
            pythons=pythons,
            predicate=self.predicate,
            cuda=self.cuda,
            index_url=self.index_url,
            nightlies=self.nightlies,
            torch_repo=self.torch_repo,
            backend=self.backend,
            timeout=self.timeout,
            archive_dir=self.archive_dir,
            cache=self.cache,
            ahead=Ahead(limit=self.ahead_limit),
            dynamo=parse_dynamo(self.dynamo),
            options=registry.parse_allow(self.allow),
        )


def perf_rule_for(rule: str | None, repeats: str | None = None) -> PerfRule | None:
    """--perf RULE (and --perf-repeats) as the rule to follow; None without --perf."""
    if rule is None:
        if repeats is not None:
            raise BisectError("--perf-repeats goes with --perf RULE (e.g. --perf slower:10%)")
        return None
    return PerfRule.parse(rule, repeats)


def _check_perf(request: BisectRequest) -> None:
    """A timing bisection follows one case's timing, measured alone: no other predicate, nothing built ahead."""
    if request.several:
        raise BisectError("--perf bisects one case at a time: each candidate is timed against the good end alone")
    if request.predicate.kind is not PredicateKind.VERDICT:
        raise BisectError("--perf follows the timing; --site, --status and --post-holds follow the breaks: choose one")
    if request.ahead:
        raise BisectError("--perf builds nothing ahead: a build beside a timing would be timed with it")


def _check_ends(good: str, bad: str, *, nightlies: bool = False) -> None:
    """Refuse swapped or equal ends before anything is listed or built, saying what to type instead.
    With --nightlies the ends are dates (YYYY-MM-DD), compared as dates."""
    if nightlies:
        same, swapped, what = parse_date(good) == parse_date(bad), parse_date(bad) < parse_date(good), "day"
    else:
        same, swapped, what = (
            parse_version(good) == parse_version(bad),
            parse_version(bad) < parse_version(good),
            "release",
        )
    if same:
        raise BisectError(f"--good {good} and --bad {bad} are the same {what}: nothing lies between them")
    if swapped:
        raise BisectError(
            f"--good {good} is newer than --bad {bad}: swap them (--good {bad} --bad {good}); the search finds "
            f"the first {what} whose outcome differs from the older end's, so a fix bisects as a regression does"
        )


def _now() -> str:
    """When a bisection's page was made (UTC, ISO 8601, to the second)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


@dataclass
class BisectOutcome:
    """What a bisection found and how the command ends; the CLI only renders this."""

    text: str  # the report a user reads (or, interrupted, what to do next)
    document: dict[str, Any] | None  # casekit.bisect/1, or casekit.bisect-many/1 for several cases
    exit_code: int
    written: list[Path] = field(default_factory=list)
    write_failures: list[str] = field(default_factory=list)  # one line each; the results stand
    interrupted: bool = False


def run_bisect(
    request: BisectRequest,
    archive: Archive,
    progress: ProgressFn = quiet,
    notice: Callable[[str], None] = quiet,
    seams: ReleaseSeams | None = None,
) -> BisectOutcome:
    """Bisect the case (or the cases, together) over torch releases, write the documents, decide the exit.

    One case: its report, exit 0 whether a change was found or nothing changed. Several: each case's
    report as its single bisection gives it; a case that could not be bisected makes the exit 2.
    `notice` receives the line a user should see before the search starts; `seams` replace the
    effects (tests: a fake `run_target`), `progress` is theirs by default.
    """
    config = request.release_config()
    seams = seams or ReleaseSeams(progress=progress)
    what = "nightlies" if config.nightlies else "torch"
    between = f"between {what} {config.good} (good) and {config.bad} (bad) with the {config.runner} runner"
    if request.several:
        cases = archive.load_all(list(request.case_ids) or None)
        if not cases:
            raise BisectError(f"the archive {archive.root} holds no cases to bisect")
        notice(f"bisecting {len(cases)} case(s) together {between}")
        with _stopping(config.cache.path) as stopped:
            shared = bisect_releases_many(cases, config, seams, config.ahead)
        return stopped.outcome or _shared_outcome(shared, request.outputs)
    case = archive.load(request.case_ids[0])
    if request.perf is not None:
        notice(f"bisecting case {case.id} on its timing ({request.perf.describe()}) {between}")
        with _stopping(None, resumable=False) as stopped:
            report = bisect_on_perf(case, config, request.perf, seams)
        return stopped.outcome or report_outcome(report, request.outputs)
    notice(f"bisecting case {case.id} {between}")
    with _stopping(config.cache.path) as stopped:
        report = bisect_releases(case, config, seams)
    return stopped.outcome or report_outcome(report, request.outputs)


def run_commit_bisect(config: CommitBisect, outputs: Outputs, progress: ProgressFn = quiet) -> BisectOutcome:
    """Bisect the commits of a repository as `config` says, write the documents, decide the exit."""
    with _stopping(config.cache.path) as stopped:
        report = bisect_commits(config, progress=progress)
    return stopped.outcome or report_outcome(report, outputs)


def report_outcome(report: BisectReport, outputs: Outputs) -> BisectOutcome:
    """One bisection's outcome: an answer (a culprit, or nothing changed) exits 0."""
    from casekit.report.html import render_bisect_html

    outcome = BisectOutcome(render_text(report), report_to_json(report), ExitCode.OK)
    _write(outcome, outputs.json_out, lambda path: write_report(report, path))
    if outputs.html_out is not None:
        document = outcome.document
        page = render_bisect_html(document or {}, generated=_now())
        _write(outcome, outputs.html_out, lambda path: write_atomic(path, page))
    return outcome


def _shared_outcome(shared: SharedBisection, outputs: Outputs) -> BisectOutcome:
    """Several cases: exit 2 when one could not be bisected (an unknown end, a predicate it cannot follow)."""
    code = ExitCode.PROBLEM if shared.errors else ExitCode.OK
    from casekit.report.html import render_bisect_many_html

    outcome = BisectOutcome(render_shared_text(shared), multi_report_to_json(shared), code)
    _write(outcome, outputs.json_out, lambda path: write_multi_report(shared, path))
    if outputs.html_out is not None:
        page = render_bisect_many_html(outcome.document or {}, generated=_now())
        _write(outcome, outputs.html_out, lambda path: write_atomic(path, page))
    return outcome


def _write(outcome: BisectOutcome, path: Path | None, write: Callable[[Path], None]) -> None:
    """Write one document; a failure (a full disk) is one line and exit 2, and the results are still shown."""
    if path is None or path == STDOUT:
        return
    try:
        write(path)
    except (OSError, CasekitError) as error:
        why = error.strerror or str(error) if isinstance(error, OSError) else str(error)
        outcome.write_failures.append(f"{path}: cannot write: {why}")
        outcome.exit_code = ExitCode.PROBLEM
        return
    outcome.written.append(path)


@dataclass
class _Stopped:
    outcome: BisectOutcome | None = None


@contextmanager
def _stopping(cache: Path | None, resumable: bool = True) -> Iterator[_Stopped]:
    """Ctrl-C (or SIGTERM, SIGHUP) during a search: the outcome says how to resume (every finished step
    is in the cache; a timing's are not) and the exit is 128 + the signal; the runners killed what they
    started on the way out."""
    stopped = _Stopped()
    try:
        yield stopped
    except KeyboardInterrupt as error:
        signum = getattr(error, "signum", signal.SIGINT)  # casekit's stop handlers raise Stopped(signum)
        where = f" in {cache}" if cache else ""
        text = f"interrupted; finished steps are cached{where}: run the same command again to resume"
        if not resumable:
            text = "interrupted; timed steps are not cached (another run's timing is not comparable): run it again"
        stopped.outcome = BisectOutcome(text, None, 128 + signum, interrupted=True)
