"""The record-keeping commands: report, log, import, merge. Thin: parse, call one core function, render."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from casekit.archive.store import Archive, archive_dir
from casekit.cli.common import ArchiveOption, FailOnOption, emit_json, examples, notice, open_archive, report_invalid
from casekit.fsutil import STDOUT
from casekit.model import ScriptRole
from casekit.outcome import FailOn
from casekit.report.formats import DEFAULT_FORMAT, DEFAULT_OUT, format_names

NO_REPLAYS_HINT = (
    "no replays recorded yet: run `casekit replay --json out/replay.json` and "
    "`casekit report --results out/replay.json`, or replay with --record"
)
REPORT_EXAMPLES = examples(
    "casekit replay --json out/replay.json && casekit report --results out/replay.json --out out/report",
    "casekit report -f md -f junit --results out/replay.json --out out/report",
    "casekit report -f junit --fail-on warn --results out/replay.json --out out/ci   (warnings fail in CI too)",
    "casekit report -f json --results out/replay.json --out -       (one report on stdout)",
    "casekit report                  (the history recorded in the bundles: replay --record)",
)
LOG_EXAMPLES = examples("casekit log item-branch", "casekit log item-branch --archive ~/triage/cases")
IMPORT_EXAMPLES = examples(
    "TORCH_TRACE=/tmp/trace python train.py && casekit import --trace /tmp/trace --dry-run",
    "TORCH_LOGS=graph_breaks,recompiles python train.py 2> run.log && casekit import --log run.log",
    "casekit import --trace /tmp/trace --group function --out drafts/ --commit",
)
MERGE_EXAMPLES = examples(
    "casekit replay --shard 1/2 --json out/1.json; casekit replay --shard 2/2 --json out/2.json",
    "casekit merge out/1.json out/2.json --json out/replay.json --fail-on warn",
    "casekit merge out/*.json --json - | jq '.results | length'    (the JSON on stdout)",
    "casekit merge results/ --json merged.json     (a --results-dir folder: the latest attempt of each shard)",
)


def report(
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format", "-f", metavar="FORMAT", help=f"{format_names()} (repeatable) [default: {DEFAULT_FORMAT}]."
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Folder to write into; '-' prints a single md/json/junit report to stdout.")
    ] = DEFAULT_OUT,
    archive: ArchiveOption = None,
    results: Annotated[
        list[Path] | None,
        typer.Option(
            "--results",
            help="casekit.replay/1 JSON (replay --json, merge --json) overriding the bundles' history for its cells (repeatable).",
        ),
    ] = None,
    title: Annotated[str, typer.Option("--title", help="Report title.")] = "casekit archive",
    fail_on: Annotated[
        str,
        typer.Option(
            "--fail-on",
            metavar="LEVEL",
            help="A result at this severity or above is a JUnit failure and fails the Markdown summary "
            "(error, warn, info or never); the exit code stays replay's and merge's to set.",
        ),
    ] = "error",
) -> None:
    """Render the archive: latest replay per case x target, case pages, history."""
    from casekit.report.plan import ReportRequest, run_report

    request = ReportRequest(tuple(formats or ()), out, tuple(results or ()), title, FailOn.parse(fail_on))
    outcome = run_report(request, open_archive(archive))
    if outcome.no_replays:
        notice(NO_REPLAYS_HINT)
    for warning in outcome.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if outcome.printed is not None:
        sys.stdout.write(outcome.printed)
    for main_file, count in outcome.written:
        typer.echo(f"wrote {main_file}" + (f" (+{count - 1} file(s))" if count > 1 else ""))
    if outcome.invalid:  # the report holds every valid case; the invalid ones are named, and CI sees a non-zero exit
        report_invalid(outcome.invalid)
    raise typer.Exit(outcome.exit_code)


def log(
    case_id: Annotated[str, typer.Argument(help="Case id.")],
    archive: ArchiveOption = None,
) -> None:
    """A case's history: git commits of its bundle merged with its replay records, newest first."""
    from casekit.archive.git import case_log, log_text

    typer.echo(log_text(case_id, case_log(archive_dir(archive), case_id)))


def import_runs(
    trace: Annotated[
        Path | None, typer.Option("--trace", help="A TORCH_TRACE folder (dedicated_log_torch_trace_*.log).")
    ] = None,
    log_files: Annotated[
        list[Path] | None,
        typer.Option("--log", help="Output of a run with TORCH_LOGS=graph_breaks,recompiles (repeatable)."),
    ] = None,
    archive: ArchiveOption = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the drafts here instead of into the archive.")
    ] = None,
    group: Annotated[
        str, typer.Option("--group", help="One draft per user line with breaks (line), per site, or per function.")
    ] = "line",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the drafts; write nothing.")] = False,
    commit: Annotated[
        bool, typer.Option("--commit", help="Commit the new drafts to the archive's git repository.")
    ] = False,
) -> None:
    """Turn the graph breaks of a real run (TORCH_TRACE or TORCH_LOGS) into draft cases that still need a repro."""
    from casekit.importer import import_runs as do_import
    from casekit.importer import save_drafts

    store = Archive(archive_dir(archive))
    target = Archive(out) if out else store
    existing = store.load_all() if store.root.is_dir() else []
    if out and out.resolve() != store.root.resolve() and target.root.is_dir():
        existing += target.load_all()
    result = do_import(trace, log_files or [], existing, group)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    for skipped in result.skipped:
        typer.echo(f"skipped {skipped}")
    typer.echo(
        f"{len(result.sites)} distinct site(s), {len(result.recompiles)} recompile(s) -> {len(result.drafts)} draft(s)"
    )
    for case in result.drafts:
        pre = case.observations[ScriptRole.PRE]
        typer.echo(f"  {case.id}: {case.title} [{len(pre.sites)} site(s), {len(pre.recompiles)} recompile(s)]")
    if dry_run or not result.drafts:
        return
    paths = save_drafts(target, result)
    typer.echo(f"saved {len(paths)} draft(s) in {target.root}; each says what still needs a repro (casekit show ID)")
    if commit:
        from casekit.archive.git import commit_paths

        ids = ", ".join(case.id for case in result.drafts)
        typer.echo(commit_paths(target.root, paths, f"import {len(paths)} draft case(s): {ids}"))


def merge(
    results: Annotated[
        list[Path],
        typer.Argument(
            help="casekit.replay/1 JSON files written by `replay --shard K/N --json`, or folders written by "
            "`replay --results-dir`."
        ),
    ],
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json", metavar="FILE", help="Write the merged casekit.replay/1 JSON here; '-' prints it to stdout."
        ),
    ] = None,
    fail_on: FailOnOption = "error",
    allow_partial: Annotated[bool, typer.Option("--allow-partial", help="Merge even when shards are missing.")] = False,
    expect_target: Annotated[
        list[str] | None,
        typer.Option(
            "--expect-target",
            metavar="LABEL",
            help="A target whose results must be there (repeatable): one with no result file at all is missing.",
        ),
    ] = None,
) -> None:
    """Combine shard results into one report and verdict (exit codes as replay: 1 at --fail-on, 2 when an environment failed)."""
    from casekit.replay.shard import merge_reports
    from casekit.report.text import replay_document_text

    threshold = FailOn.parse(fail_on)
    merged = merge_reports(results, allow_partial=allow_partial, expected_targets=list(expect_target or ()))
    for warning in merged.warnings:
        typer.echo(f"warning: {warning}", err=True)
    for retry in merged.retries:
        typer.echo(f"retried: {retry}", err=True)
    data = merged.data
    to_stderr = json_out == STDOUT  # stdout holds the JSON alone
    if json_out:
        emit_json(data.to_json(), json_out)
    typer.echo("\n" + replay_document_text(data), err=to_stderr)
    typer.echo(
        f"\n{len(data.results)} result(s) from {merged.files_said()}; worst severity: {merged.worst.value}",
        err=to_stderr,
    )
    if json_out and not to_stderr:
        typer.echo(f"wrote {json_out}")
    failed = [target.display or target.label for target in data.failed_targets()]
    if failed:  # the why is in the report above, once
        typer.echo(f"casekit: error: {len(failed)} target(s) could not run: {', '.join(failed)}", err=True)
    raise typer.Exit(merged.exit_code(threshold))


def register(app: typer.Typer) -> None:
    """Add report, log, import and merge to the casekit app."""
    app.command("report", epilog=REPORT_EXAMPLES)(report)
    app.command("log", epilog=LOG_EXAMPLES)(log)
    app.command("import", epilog=IMPORT_EXAMPLES)(import_runs)
    app.command("merge", epilog=MERGE_EXAMPLES)(merge)
