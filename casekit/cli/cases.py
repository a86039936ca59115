"""The case commands: capture, list, show, validate. Parse, call one core function, render."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from casekit.cli.common import (
    ArchiveOption,
    PerfRepeats,
    PerfScripts,
    default_runner_factory,
    emit_json,
    examples,
    fail,
    open_archive,
    progress_view,
    report_invalid,
    terminal_width,
)
from casekit.errors import CasekitError
from casekit.outcome import ExitCode
from casekit.runners.registry import allow_help, interpreter_runner
from casekit.settings import ALLOW_ENV

CAPTURE_EXAMPLES = examples(
    'casekit capture repro.py --fixed repro_fixed.py --title "item() branch in step" --tag data-dependent',
    'casekit capture repro.py --fixed fixed.py --rollback "drop fullgraph=True" --commit',
    "casekit capture repro.py --python ~/envs/torch25/bin/python --id item-branch-251",
)
LIST_EXAMPLES = examples("casekit list", "casekit list --archive ~/triage/cases")
SHOW_EXAMPLES = examples(
    "casekit show item-branch",
    "casekit show item-branch --json -            (the whole case as JSON on stdout)",
    "casekit show item-branch --json case.json",
)
VALIDATE_EXAMPLES = examples("casekit validate", "casekit validate cases/item-branch.toml")


def capture(
    script: Annotated[Path, typer.Argument(help="The minimal repro (pre-fix) script.")],
    fixed: Annotated[Path | None, typer.Option("--fixed", help="The fixed (post-fix) script.")] = None,
    case_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="Case id (a slug) [default: the first words of the title or the file name, up to 32 characters]",
        ),
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="One-line title of the case.")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    notes: Annotated[str, typer.Option("--notes", help="What breaks and why (the triage reading).")] = "",
    fix_summary: Annotated[str, typer.Option("--fix-summary", help="What the fix changes.")] = "",
    rollback: Annotated[
        str, typer.Option("--rollback", help="How to return to fullgraph=False / eager if the fix stops holding.")
    ] = "",
    archive: ArchiveOption = None,
    python: Annotated[
        str | None, typer.Option("--python", help="Interpreter to run the probe with [default: this one].")
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            "--backend", help="torch.compile backend forced for the runs; 'eager' is fast and enough for graph breaks."
        ),
    ] = "eager",
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each run of a script may take.")] = 300.0,
    include: Annotated[
        list[Path] | None,
        typer.Option("--include", help="A file or folder beside the script that it imports or reads (repeatable)."),
    ] = None,
    waive: Annotated[
        list[str] | None,
        typer.Option("--waive", help="Keep the case although this gate fails (eager, compiled, timeout, fix)."),
    ] = None,
    keep_failing_gates: Annotated[
        bool, typer.Option("--keep-failing-gates", help="Keep the case although gates fail (waives every gate).")
    ] = False,
    fullgraph: Annotated[
        bool,
        typer.Option(
            "--fullgraph/--no-fullgraph",
            help="Also run with fullgraph=True to record where compiling the whole function fails.",
        ),
    ] = True,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing case with the same id.")] = False,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            envvar=ALLOW_ENV,
            metavar="KEY=VALUE",
            help=allow_help([interpreter_runner().name]),  # the capture runs an existing interpreter
        ),
    ] = None,
    commit: Annotated[
        bool, typer.Option("--commit", help="Commit the new bundle to the archive's git repository.")
    ] = False,
    perf: Annotated[
        bool,
        typer.Option(
            "--perf",
            help="Then time the scripts on this target (compile cold and warm, steady state, speed-up over eager; "
            "fresh processes one at a time) and keep the figures in the bundle: context, never a later replay's "
            "baseline (a verdict needs both sides measured in one run: replay --perf).",
        ),
    ] = False,
    perf_repeats: PerfRepeats = None,
    perf_scripts: PerfScripts = None,
) -> None:
    """Run a repro (and its fix) for real and file it as a case bundle."""
    from casekit.capture import CaptureRequest, run_capture
    from casekit.perf.settings import settings_from_flags
    from casekit.report.text import case_summary

    timed = perf or perf_repeats is not None or perf_scripts is not None

    request = CaptureRequest(
        script=script,
        fixed=fixed,
        case_id=case_id,
        title=title,
        tags=tag or [],
        notes=notes,
        fix_summary=fix_summary,
        rollback_notes=rollback,
        backend=backend,
        timeout=timeout,  # checked by the capture gates (exit 1 with the reason)
        fullgraph=fullgraph,
        force=force,
        includes=list(include or []),
        waive=list(waive or []) + (["all"] if keep_failing_gates else []),
        python=python,
        allow=list(allow or []),
        commit=commit,
        perf=settings_from_flags(perf_repeats, None, perf_scripts, None) if timed else None,
    )
    with progress_view() as progress:
        outcome = run_capture(request, open_archive(archive), default_runner_factory, progress)
    typer.echo(case_summary(outcome.case))
    typer.echo(f"\nsaved {outcome.path}")
    if outcome.committed:
        typer.echo(outcome.committed)


def list_cases(archive: ArchiveOption = None) -> None:
    """List the cases in the archive (invalid bundles: one line each on stderr, exit 2)."""
    from casekit.report.text import case_rows, table

    cases, invalid = open_archive(archive).summaries_tolerant(history=False)  # the index: only changed bundles parsed
    width = terminal_width()  # None off a terminal: a stable table for logs and golden files
    typer.echo(table(["id", "title", "tags", "breaks", "last replay"], case_rows(cases), width=width, squeeze=1))
    if invalid:
        report_invalid(invalid)
        raise typer.Exit(ExitCode.PROBLEM)


def show(
    case_id: Annotated[str, typer.Argument(help="Case id.")],
    archive: ArchiveOption = None,
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            metavar="FILE",
            help="Write the whole case as JSON (schema casekit.case/1) here; '-' prints it to stdout.",
        ),
    ] = None,
) -> None:
    """Show one case: sites, graphs, recompiles, inputs, checks, timings, pre vs post."""
    from casekit.model import to_plain
    from casekit.report.text import case_summary

    case = open_archive(archive).load(case_id)
    if json_out is not None:
        plain = to_plain(case)
        version = plain.pop("schema_version", 1)  # one schema key in every JSON casekit writes
        emit_json({"schema": f"casekit.case/{version}", **plain}, json_out)
    else:
        typer.echo(case_summary(case))


def validate(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Bundle files [default: every bundle in the archive].")
    ] = None,
    archive: ArchiveOption = None,
) -> None:
    """Check bundles: TOML, schema version, every field, script hashes, and the capture gates."""
    from casekit.bundle import load_case
    from casekit.capture import validate_gates

    store = open_archive(archive)
    files = list(paths or [store.root / f"{i}.toml" for i in store.ids()])
    if not files:
        fail(f"no bundles to validate in {store.root}")
    bad = 0
    for path in files:
        try:
            case = load_case(path)
            if case.id != path.stem:
                raise CasekitError(f"{path}: field 'id': {case.id!r} does not match the file name")
            for failure in validate_gates(case)[:1]:
                raise CasekitError(f"{path}: {failure.line()}")
            typer.echo(f"ok      {path}")
        except CasekitError as error:
            bad += 1
            typer.echo(f"invalid {error}")
    if bad:
        fail(f"{bad} of {len(files)} bundle(s) invalid", 1)


def register(app: typer.Typer) -> None:
    """Add capture, list, show and validate to the casekit app."""
    app.command(epilog=CAPTURE_EXAMPLES)(capture)
    app.command("list", epilog=LIST_EXAMPLES)(list_cases)
    app.command(epilog=SHOW_EXAMPLES)(show)
    app.command(epilog=VALIDATE_EXAMPLES)(validate)
