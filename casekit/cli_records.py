"""The record-keeping commands: report, log, import, merge. Thin: parse, call one core function, print.

Registered on the main app by `casekit.cli` (`register(app)`); CasekitErrors
raised here become one line and exit code 2 in `casekit.cli.main`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from casekit.archive import Archive, archive_dir
from casekit.errors import CasekitError

ArchiveOption = Annotated[
    Path | None,
    typer.Option("--archive", help="Archive folder of case bundles [default: $CASEKIT_ARCHIVE or ./cases]"),
]
FAIL_ON = ("error", "warn", "info", "never")


def report(
    formats: Annotated[
        list[str] | None, typer.Option("--format", "-f", help="html, md, junit or json (repeatable) [default: html].")
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Folder to write into; '-' prints a single md/json/junit report to stdout.")
    ] = Path("casekit-report"),
    archive: ArchiveOption = None,
    results: Annotated[
        list[Path] | None,
        typer.Option(
            "--results",
            help="casekit.replay/1 JSON (replay --json, merge --json) overriding the bundles' history for its cells (repeatable).",
        ),
    ] = None,
    title: Annotated[str, typer.Option("--title", help="Report title.")] = "casekit archive",
) -> None:
    """Render the archive: latest replay per case x target, case pages, history."""
    from casekit.report.formats import get_format, write_files
    from casekit.report.page_cache import write_html_report
    from casekit.report.summary import summarize
    from casekit.shard import load_report

    chosen = [get_format(name) for name in dict.fromkeys(formats or ["html"])]
    store = Archive(archive_dir(archive))
    # through the archive index; HTML case pages come from a page cache (or the cases parsed now)
    cases = store.summaries(keep_cases=any(fmt.name == "html" for fmt in chosen))
    documents = [(path.name, load_report(path)) for path in results or []]
    summary = summarize(cases, documents, title=title)
    for warning in summary.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if str(out) == "-":
        if len(chosen) != 1 or chosen[0].name == "html":
            raise CasekitError("--out - prints one md, json or junit report; the HTML report is a folder")
        files = chosen[0].render(summary)
        sys.stdout.write(files[chosen[0].main_file])
        return
    for fmt in chosen:
        if fmt.name == "html":
            count = write_html_report(summary, store.root, out)
        else:
            count = len(write_files(fmt.render(summary), out))
        typer.echo(f"wrote {out / fmt.main_file}" + (f" (+{count - 1} file(s))" if count > 1 else ""))


def log(
    case_id: Annotated[str, typer.Argument(help="Case id.")],
    archive: ArchiveOption = None,
) -> None:
    """A case's history: git commits of its bundle merged with its replay records, newest first."""
    from casekit.gitarchive import case_log, log_text

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
        pre = case.observations["pre"]
        typer.echo(f"  {case.id}: {case.title} [{len(pre.sites)} site(s), {len(pre.recompiles)} recompile(s)]")
    if dry_run or not result.drafts:
        return
    paths = save_drafts(target, result)
    typer.echo(f"saved {len(paths)} draft(s) in {target.root}; each says what still needs a repro (casekit show ID)")
    if commit:
        from casekit.gitarchive import commit_paths

        ids = ", ".join(case.id for case in result.drafts)
        typer.echo(commit_paths(target.root, paths, f"import {len(paths)} draft case(s): {ids}"))


def merge(
    results: Annotated[
        list[Path], typer.Argument(help="casekit.replay/1 JSON files written by `replay --shard K/N --json`.")
    ],
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the merged casekit.replay/1 JSON here.")
    ] = None,
    fail_on: Annotated[
        str, typer.Option("--fail-on", help="Exit 1 when a result reaches this severity: error, warn, info or never.")
    ] = "error",
    allow_partial: Annotated[bool, typer.Option("--allow-partial", help="Merge even when shards are missing.")] = False,
) -> None:
    """Combine shard results into one report and verdict (exit 1 at --fail-on, like replay)."""
    from casekit.report.text import table
    from casekit.shard import fails, merge_reports

    if fail_on not in FAIL_ON:
        raise CasekitError(f"--fail-on must be error, warn, info or never, not {fail_on!r}")
    merged = merge_reports(results, allow_partial=allow_partial)
    for warning in merged.warnings:
        typer.echo(f"warning: {warning}", err=True)
    data = merged.data
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    for target in data["targets"]:
        rows = []
        for result in data["results"]:
            if result["target"] != target.get("label"):
                continue
            scripts = result.get("scripts") or {}
            statuses = "/".join(f"{w}:{s['status']}" for w, s in scripts.items() if s)
            classes: dict[str, int] = {}
            for script in (s for s in scripts.values() if s):
                for site in script.get("sites") or []:
                    classes[site["class"]] = classes.get(site["class"], 0) + 1
            rows.append(
                [
                    result["case"],
                    result["verdict"],
                    result["severity"],
                    statuses,
                    ", ".join(f"{n} {c}" for c, n in sorted(classes.items())) or "no breaks",
                ]
            )
        typer.echo(
            f"\ntarget {target.get('label')} (torch {target.get('torch')})"
            + (f": environment failed: {target['error']}" if target.get("error") else "")
        )
        typer.echo(table(["case", "verdict", "severity", "status", "sites"], rows))
    typer.echo(f"\n{len(data['results'])} result(s) from {len(results)} file(s); worst severity: {merged.worst.value}")
    if json_out:
        typer.echo(f"wrote {json_out}")
    if fails(merged.worst, fail_on):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add report, log, import and merge to the casekit app."""
    app.command("report")(report)
    app.command("log")(log)
    app.command("import")(import_runs)
    app.command("merge")(merge)
