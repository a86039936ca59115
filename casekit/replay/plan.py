"""What `casekit replay` decides before and after the runs: which cases and targets, which
shard, what the JSON says, and how the run ends.

`run_replay` is the one core call behind the command, so every policy here
(draft skipping, invalid bundles, sharding, the document written even for an
empty shard, the exit code) is testable in-process with a fake runner.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import assert_never

from casekit.archive.index import CaseDigest
from casekit.archive.store import Archive
from casekit.errors import BundleError, CasekitError
from casekit.fsutil import STDOUT
from casekit.model import DRAFT_TAG, Case, Severity, SiteClass, Verdict
from casekit.outcome import ExitCode, FailOn, exit_code
from casekit.replay.document import (
    Matrix,
    ReplayDocument,
    ReplayDocumentError,
    read_replay_document,
    replay_document,
    write_replay_document,
)
from casekit.replay.run import ReplayOptions, ReplayReport, replay
from casekit.replay.shard import parse_shard, result_file, shard_layout, shard_plan
from casekit.replay.shard_env import shard_from_env
from casekit.runners import registry
from casekit.runners.dynamo import parse_dynamo, parse_pins, pin_name
from casekit.runners.interface import ProgressFn, RunnerFactory, TargetSpec, VersionSource
from casekit.runners.torch_source.request import check_variant, parse_torch_request, variant_asked
from casekit.timeouts import recorded_run_seconds
from casekit.versions import without_local


@dataclass(frozen=True)
class TargetChoice:
    """The target flags of `replay`: interpreters, managed torch versions and how they are provided."""

    pythons: tuple[str, ...] = ()
    torches: tuple[str, ...] = ()
    runner: str | None = None
    cuda: str | None = None
    index_url: str | None = None
    find_links: str | None = None
    image: str | None = None
    allow: tuple[str, ...] = ()  # sandbox relaxations KEY=VALUE (bubblewrap or docker keys)
    base_image: str | None = None
    dynamo: tuple[str, ...] = ()  # --dynamo NAME=VALUE: set on every target
    packages: tuple[str, ...] = ()  # --package NAME==VERSION: pinned on every target, in place of the cases' pin
    vary_dynamo: tuple[str, ...] = ()  # --vary-dynamo NAME=VALUE: each target once more with it
    vary_packages: tuple[str, ...] = ()  # --vary-package NAME==VERSION: each target once more with that pin

    def specs(self) -> list[TargetSpec]:
        """One TargetSpec per target, in the order given, then each --vary-* twin of each; the local
        torch when none is given."""
        specs = self._base_specs()
        dynamo, packages = parse_dynamo(self.dynamo), parse_pins(self.packages)
        specs = [replace(spec, dynamo=dynamo, packages=packages) for spec in specs]
        twins = []
        for name, value in parse_dynamo(self.vary_dynamo, "--vary-dynamo"):
            twins += [
                replace(s, dynamo=tuple((n, v) for n, v in s.dynamo if n != name) + ((name, value),)) for s in specs
            ]
        for pin in parse_pins(self.vary_packages, "--vary-package"):
            if not all(registry.runner_class(s.runner).pins_libraries for s in specs):
                raise CasekitError(
                    f"--vary-package {pin}: only managed targets (--torch) install pins; "
                    "for an interpreter, give a second --python that has that version"
                )
            twins += [
                replace(s, packages=tuple(p for p in s.packages if pin_name(p) != pin_name(pin)) + (pin,))
                for s in specs
            ]
        if packages and not all(registry.runner_class(s.runner).pins_libraries for s in specs):
            raise CasekitError("--package: only managed targets (--torch) install pins; an interpreter has its own")
        return specs + twins

    def _base_specs(self) -> list[TargetSpec]:
        if self.runner is not None and self.runner not in registry.runner_names():
            raise CasekitError(f"--runner must be one of {', '.join(registry.runner_names())}, not {self.runner!r}")
        options = registry.parse_allow(self.allow)
        if self.base_image:
            options += (("base_image", self.base_image),)
        # every target takes the same --allow keys; each runner refuses the keys it does not know, now
        interpreters = registry.interpreter_runner()
        specs = [interpreters.target(python=p, options=options) for p in self.pythons]
        managed = registry.runner_class(self.runner or registry.DEFAULT_RUNNER)
        if managed.versions is VersionSource.INTERPRETERS and self.torches:
            raise CasekitError(f"--runner {managed.name} takes --python PATH, not --torch")
        cuda = check_variant(self.cuda)
        for asked in self.torches:
            channel, version = parse_torch_request(asked)  # "2.13", "nightly", "nightly:2026-01-05", "pypi:2.13"
            variant_asked(channel, version, cuda)  # '2.13+cpu' with --cuda cu126 is refused before anything runs
            specs.append(
                managed.target(
                    torch=version,
                    channel=channel,
                    cuda=cuda,
                    index_url=self.index_url,
                    find_links=self.find_links,
                    image=self.image,
                    options=options,
                )
            )
        if self.image and not self.torches:
            specs.append(registry.image_runner().target(image=self.image, options=options))
        if not specs:
            specs.append(interpreters.target(options=options))  # the local torch
        checked = [registry.check_target(spec) for spec in specs]
        shown: dict[str, str] = {}
        for spec in checked:  # one label is one target in every document and history: two may not share it
            label, display = registry.label(spec), registry.display(spec)
            if label in shown and shown[label] != display:
                raise CasekitError(
                    f"{shown[label]} and {display} would both be recorded as {label}: "
                    "give one of them in another folder layout (a label keeps the path's last three parts)"
                )
            shown[label] = display
        return checked


@dataclass(frozen=True)
class ReplayRequest:
    """Everything `casekit replay` was asked, checked on construction (bad flags: one clear line)."""

    targets: TargetChoice = field(default_factory=TargetChoice)
    case_ids: tuple[str, ...] = ()
    options: ReplayOptions = field(default_factory=ReplayOptions)
    fail_on: FailOn = FailOn.ERROR
    shard: str | None = None
    json_out: Path | None = None
    allow_invalid: bool = False
    commit: bool = False
    # --shard-from-env: the environment to read the shard from (casekit.replay.shard_env); None: not asked
    shard_env: Mapping[str, str] | None = None
    results_dir: Path | None = None  # --results-dir: one file per target under DIR/<target>/shard-K-of-N.json
    shard_source: str | None = None  # set on construction: where the shard came from, in one line

    def __post_init__(self) -> None:
        object.__setattr__(self, "fail_on", FailOn.parse(self.fail_on))
        if self.commit and not self.options.record:  # committing the history means recording it
            object.__setattr__(self, "options", replace(self.options, record=True))
        if self.shard_env is not None:
            if self.shard is not None:
                raise CasekitError("give --shard K/N or --shard-from-env, not both")
            found = shard_from_env(self.shard_env)
            object.__setattr__(self, "shard", found.text)
            object.__setattr__(self, "shard_source", found.source)
        elif self.shard is not None:
            parse_shard(self.shard)
            object.__setattr__(self, "shard_source", self.shard_source or "--shard")
        if self.results_dir is not None and self.results_dir.exists() and not self.results_dir.is_dir():
            raise CasekitError(f"--results-dir {self.results_dir}: is a file; give a folder")
        if (
            self.json_out is not None and self.json_out != STDOUT and self.json_out.is_dir()
        ):  # found now, not after a long replay
            raise CasekitError(f"--json {self.json_out}: is a folder; give a file name")


@dataclass
class ReplayOutcome:
    """What a replay did and how it ends; the CLI only renders this."""

    document: ReplayDocument
    exit_code: ExitCode
    report: ReplayReport | None = None  # None: this shard had nothing to run
    skipped_drafts: list[str] = field(default_factory=list)
    invalid: list[BundleError] = field(default_factory=list)
    failed_targets: list[str] = field(
        default_factory=list
    )  # "target: why" (as shown here), one per environment that failed
    json_written: Path | None = None
    results_written: list[Path] = field(default_factory=list)  # --results-dir: one file per target
    committed: str | None = None
    recorded: int = 0  # bundles whose history this replay appended to (0 unless --record / --commit)
    # what could not be written (a bundle's record, the --json): one line each; what was written stays
    write_failures: list[str] = field(default_factory=list)
    marks: dict[str, str] = field(default_factory=dict)  # case id -> 'sentinel' / 'waived: ...'

    @property
    def worst(self) -> Severity:
        return self.report.worst() if self.report else Severity.INFO


@dataclass
class _Selection:
    cases: list[Case]
    specs: list[TargetSpec]
    cells: set[tuple[str, str]] | None  # the shard's (case id, label) cells; None = the whole matrix
    matrix: Matrix | None
    layout: dict[str, list[int]] | None = None  # label -> the shards holding its cells (sharded runs)


def recorded_costs(cases: Sequence[Case]) -> dict[str, float]:
    """Case id -> what its runs took at capture (the shard plan's costs); cases that recorded nothing are left out."""
    costs = {}
    for case in cases:
        seconds = case.recorded_s if isinstance(case, CaseDigest) else recorded_run_seconds(case.capture)
        if seconds is not None:
            costs[case.id] = seconds
    return costs


def _select(request: ReplayRequest, cases: Sequence[Case]) -> _Selection:
    """The shard's rectangle of the case x target matrix (everything when not sharded)."""
    specs = request.targets.specs()
    if request.shard is None:
        return _Selection(list(cases), specs, None, None)
    k, n = parse_shard(request.shard)
    all_ids, all_labels = [c.id for c in cases], [registry.label(s) for s in specs]
    plan = shard_plan(all_ids, all_labels, n, recorded_costs(cases))
    cells = plan[k - 1]
    chosen_cases = [c for c in cases if any(case_id == c.id for case_id, _ in cells)]
    chosen_specs = [s for s in specs if registry.label(s) in {label for _, label in cells}]
    return _Selection(chosen_cases, chosen_specs, cells, Matrix(cases=all_ids, targets=all_labels), shard_layout(plan))


def run_replay(
    request: ReplayRequest,
    archive: Archive,
    make_runner: RunnerFactory,
    progress: ProgressFn,
    notice: Callable[[str], None] = lambda message: None,
) -> ReplayOutcome:
    """Replay the archive as asked: load (invalid bundles reported), skip drafts, shard, run,
    write the casekit.replay/1 JSON (whatever the exit code), commit, and decide the exit code.

    `notice` receives the lines a user should see before the runs start.
    """
    if request.commit:
        from casekit.archive.git import require_repo

        require_repo(archive.root)  # before a replay that can take minutes, not after
    # the archive index plans the run (drafts, shard); only the cases it runs are parsed in full below
    cases, invalid = archive.summaries_tolerant(list(request.case_ids) or None, history=False)
    for error in invalid:
        notice(f"invalid bundle: {error}")
    # a draft has no repro (its script only raises): skipped alike whether named with --case or not
    drafts = [c.id for c in cases if DRAFT_TAG in c.tags]
    if drafts:
        notice(  # once, before the run: the report below holds the cases that ran
            f"skipping {len(drafts)} draft case(s) without a repro: {', '.join(drafts)} "
            "(capture one with `casekit capture SCRIPT --id ID --force`)"
        )
        cases = [c for c in cases if c.id not in drafts]
        if not cases and not invalid and request.shard is None:
            raise CasekitError(
                f"nothing to replay: {', '.join(drafts)} {'is a draft' if len(drafts) == 1 else 'are drafts'} "
                "without a repro; capture one with `casekit capture SCRIPT --id ID --force`"
            )
    if not cases and invalid:
        raise CasekitError(f"no valid case to replay: {len(invalid)} invalid bundle(s), the first: {invalid[0]}")
    if not cases and request.shard is None:
        raise CasekitError(f"the archive {archive.root} holds no cases to replay")
    selection = _select(request, cases)
    if request.shard_source and request.shard_env is not None:
        notice(f"shard {request.shard} from {request.shard_source}")
    if selection.cases:
        full, late = archive.load_all_tolerant([c.id for c in selection.cases])
        invalid += late  # a bundle changed under us since the index read it
        selection = replace(selection, cases=full)
    problems = 0 if request.allow_invalid else len(invalid)
    if not selection.cases:  # a shard with nothing to run still writes its (empty) document
        outcome = ReplayOutcome(
            _sliced(replay_document(None, request.shard, selection.matrix), request, selection),
            exit_code(Severity.INFO, request.fail_on, problems),
            skipped_drafts=drafts,
            invalid=invalid,
        )
        return _write(request, outcome)
    notice(
        f"replaying {len(selection.cases)} case(s) on {len(selection.specs)} target(s): "
        + ", ".join(registry.display(s) for s in selection.specs)
    )
    report = replay(selection.cases, selection.specs, request.options, archive, make_runner, progress)
    if selection.cells is not None:
        for run in report.targets:
            run.results = [r for r in run.results if (r.case_id, run.planned) in selection.cells]
    failed = [f"{run.display or run.label}: {run.error}" for run in report.targets if run.error]  # for people
    unrecorded = [f"could not record the replay of {run.record_error}" for run in report.targets if run.record_error]
    outcome = ReplayOutcome(
        _sliced(replay_document(report, request.shard, selection.matrix), request, selection),
        exit_code(report.worst(), request.fail_on, problems + len(failed) + len(unrecorded)),
        report=report,
        skipped_drafts=drafts,
        invalid=invalid,
        failed_targets=failed,
        recorded=len({case_id for run in report.targets for case_id in run.recorded}),
        marks={c.id: c.capture.mark() for c in selection.cases if c.capture and c.capture.mark()},
        write_failures=unrecorded,
    )
    outcome = _write(request, outcome)
    if request.commit and request.options.record and not unrecorded:  # a half-recorded history is not committed
        from casekit.archive.git import commit_paths

        paths = [archive.path_for(c.id) for c in selection.cases]
        outcome.committed = commit_paths(archive.root, paths, replay_message(report))
    return outcome


def _sliced(document: ReplayDocument, request: ReplayRequest, selection: _Selection) -> ReplayDocument:
    """A shard's document says which plan it is a slice of (the layout) and where its shard came from."""
    if selection.layout is not None:
        document.layout = selection.layout
    if request.shard_source is not None and request.shard is not None:
        document.shard_source = request.shard_source
    return document


def per_target_documents(document: ReplayDocument) -> dict[str, ReplayDocument]:
    """A (shard's) document split by target: the label its plan knows it by (`planned`: a retry whose
    environment failed replaces the same file) -> that target's entry and results, and the slice fields."""
    return {
        target.planned: dataclasses.replace(
            document, targets=[target], results=[r for r in document.results if r.target == target.label]
        )
        for target in document.targets
    }


def write_results_dir(document: ReplayDocument, folder: Path, now: Callable[[], datetime]) -> list[Path]:
    """One file per target under FOLDER/<target>/shard-K-of-N.json, each written atomically: a retried
    shard replaces its own files (one attempt more than the file it replaces), never another shard's."""
    k, n = parse_shard(document.shard or "1/1")
    written = []
    for label, part in per_target_documents(document).items():
        path = result_file(folder, label, k, n)
        part.attempt = _previous_attempt(path) + 1
        part.written = now().isoformat(timespec="microseconds")
        written.append(write_replay_document(part, path))
    return written


def _previous_attempt(path: Path) -> int:
    """The attempt number of the file a shard is about to replace (0 when there is none or it is unreadable)."""
    if not path.exists():
        return 0
    try:
        previous = read_replay_document(path)
    except ReplayDocumentError:
        return 1  # a file is there, whatever it holds: this is at least the second attempt
    attempt = previous.attempt
    return attempt if isinstance(attempt, int) and attempt > 0 else 1


def _write(request: ReplayRequest, outcome: ReplayOutcome) -> ReplayOutcome:
    """Write the --json and the --results-dir files; a failure (a full disk) is one more write failure,
    and the results are still shown."""
    if request.json_out is not None and request.json_out != STDOUT:
        try:
            outcome.json_written = write_replay_document(outcome.document, request.json_out)
        except ReplayDocumentError as error:
            outcome.write_failures.append(f"--json {error}")
            outcome.exit_code = ExitCode.PROBLEM
    if request.results_dir is not None:
        try:
            outcome.results_written = write_results_dir(outcome.document, request.results_dir, _utc_now)
        except ReplayDocumentError as error:
            outcome.write_failures.append(f"--results-dir {error}")
            outcome.exit_code = ExitCode.PROBLEM
    return outcome


def _utc_now() -> datetime:
    return datetime.now(UTC)


# ------------------------------------------------------------ the commit message of a recorded replay

# Site classes in the order a commit subject lists them (persists says nothing changed).
MESSAGE_CLASSES = [SiteClass.MOVED, SiteClass.REAPPEARED, SiteClass.NEW, SiteClass.GONE]


def message_words(verdict: Verdict) -> str | None:
    """How a commit subject counts cases of this verdict ("2 regressed"); None: not counted there."""
    match verdict:
        case Verdict.FIX_BROKEN:
            return "fix broken"
        case Verdict.REGRESSED:
            return "regressed"
        case Verdict.ENV_FAILED:
            return "env failed"
        case Verdict.CHANGED | Verdict.IMPROVED | Verdict.UNCHANGED | Verdict.UNOBSERVED:
            return None
        case _:
            assert_never(verdict)


# The order a commit subject counts in: the verdicts worth naming, then the site classes.
MESSAGE_ORDER = [words for verdict in Verdict if (words := message_words(verdict))] + [c.value for c in MESSAGE_CLASSES]


def _torch_name(torch: str, bases: Counter[str]) -> str:
    """'2.13.0' for '2.13.0+cpu', unless two targets share the release (cpu vs cu124): then all of it."""
    base = without_local(torch)
    return base if bases[base] == 1 else torch


def replay_message(report: ReplayReport) -> str:
    """'replay 2.13.0: 2 moved, 1 reappeared' (per torch version), then one line per case that changed."""
    bases: Counter[str] = Counter(without_local(str(run.environment.get("torch", "?"))) for run in report.targets)
    parts = []
    body = []
    seen_names: set[str] = set()
    for run in report.targets:
        torch = str(run.environment.get("torch", "?"))
        name = _torch_name(torch, bases)
        if name in seen_names:  # same torch build on two targets (python vs venv): name the target
            name = run.label
        seen_names.add(name)
        if run.error:
            parts.append(f"{name}: environment failed")
            continue
        counts: Counter[str] = Counter()
        for result in run.results:
            words = message_words(result.verdict)
            if words:
                counts[words] += 1
            for site_class in MESSAGE_CLASSES:
                counts[site_class.value] += sum(script.count(site_class) for script in result.scripts.values())
            changes = [
                f"{which}: " + ", ".join(f"{script.count(c)} {c.value}" for c in MESSAGE_CLASSES if script.count(c))
                for which, script in result.scripts.items()
                if any(script.count(c) for c in MESSAGE_CLASSES)
            ]
            if result.verdict is not Verdict.UNCHANGED or changes:
                body.append(
                    f"- {result.case_id} on {run.label}: {result.verdict} ({result.severity.value})"
                    + (f"; {'; '.join(changes)}" if changes else "")
                )
        summary = ", ".join(f"{counts[key]} {key}" for key in MESSAGE_ORDER if counts[key])
        parts.append(f"{name}: {summary or f'no change ({len(run.results)} case(s))'}")
    subject = "replay " + "; ".join(parts) if parts else "replay: no targets"
    return subject + ("\n\n" + "\n".join(body) if body else "")
