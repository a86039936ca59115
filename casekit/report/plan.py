"""What `casekit report` decides: which formats, read how, overridden by which results, written where.

`run_report` is the one core call behind the command, so every policy here (the
formats, the cases read in full only for a format that needs them, `--out -` for a
single-file format, invalid bundles named and the exit code) is testable in-process;
each format writes itself (`ReportFormat.write`), so no format is a special case here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from casekit.archive.store import Archive
from casekit.errors import BundleError, CasekitError
from casekit.fsutil import STDOUT
from casekit.outcome import ExitCode
from casekit.replay.document import read_replay_document
from casekit.report.formats import DEFAULT_FORMAT, DEFAULT_OUT, FORMATS, format_names, get_format
from casekit.report.interface import ReportFormat
from casekit.report.summary import summarize


@dataclass(frozen=True)
class ReportRequest:
    """Everything `casekit report` was asked, checked on construction (bad flags: one clear line)."""

    formats: tuple[str, ...] = (DEFAULT_FORMAT,)
    out: Path = DEFAULT_OUT  # a folder; STDOUT prints the one single-file report asked for
    results: tuple[Path, ...] = ()  # casekit.replay/1 documents overriding the history for their cells
    title: str = "casekit archive"

    def __post_init__(self) -> None:
        chosen = tuple(dict.fromkeys(self.formats or (DEFAULT_FORMAT,)))
        object.__setattr__(self, "formats", chosen)
        kinds = [get_format(name) for name in chosen]  # an unknown name is refused here, before any reading
        if self.out == STDOUT and (len(kinds) != 1 or kinds[0].folder):
            single = format_names([name for name in FORMATS if not get_format(name).folder])
            folders = [fmt.name.upper() for fmt in kinds if fmt.folder]
            why = f"; the {' and '.join(folders)} report is a folder" if folders else ""
            raise CasekitError(f"--out - prints one {single} report{why}")

    def chosen(self) -> list[ReportFormat]:
        return [get_format(name) for name in self.formats]


@dataclass
class ReportOutcome:
    """What a report wrote (or printed) and how the command ends; the CLI only renders this."""

    exit_code: ExitCode
    printed: str | None = None  # with `--out -`: the report itself
    written: list[tuple[Path, int]] = field(default_factory=list)  # each format's main file, and its file count
    warnings: list[str] = field(default_factory=list)
    invalid: list[BundleError] = field(default_factory=list)  # named, and exit 2; every valid case is reported
    no_replays: bool = False  # neither results nor recorded history: the report shows captures only


def run_report(request: ReportRequest, archive: Archive) -> ReportOutcome:
    """Summarize the archive (the index; whole cases where a format renders them) with the results given,
    then print the one report or let each format write itself into the folder."""
    formats = request.chosen()
    cases, invalid = archive.summaries_tolerant(keep_cases=any(fmt.full_cases for fmt in formats))
    documents = [(path.name, read_replay_document(path)) for path in request.results]
    summary = summarize(cases, documents, title=request.title)
    outcome = ReportOutcome(
        ExitCode.PROBLEM if invalid else ExitCode.OK,
        warnings=list(summary.warnings),
        invalid=invalid,
        no_replays=not documents and not any(case.replays for case in cases),
    )
    if request.out == STDOUT:
        (only,) = formats
        outcome.printed = only.render(summary)[only.main_file]
        return outcome
    for fmt in formats:
        outcome.written.append((request.out / fmt.main_file, fmt.write(summary, request.out, archive.root)))
    return outcome
