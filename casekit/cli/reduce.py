"""`casekit reduce`: parse, call `casekit.reduce.run.reduce_script`, render the summary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from casekit.cli.common import ArchiveOption, default_runner_factory, examples, open_archive, progress_view
from casekit.replay.plan import TargetChoice
from casekit.runners.registry import DEFAULT_RUNNER, allow_help, interpreter_runner

REDUCE_EXAMPLES = examples(
    "casekit reduce train.py --out reduced/                     (the first break in your code)",
    "casekit reduce train.py --include model/ --site model/moe.py:88 --jobs 2",
    "casekit reduce eval.py --gb GB0124 --torch 2.5.1 --capture --title 'item() in longformer'",
)


def reduce(
    script: Annotated[Path, typer.Argument(help="The script that shows the break (the model where it was found).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the reduced script(s), with their file names.")] = Path(
        "reduced"
    ),
    include: Annotated[
        list[Path] | None,
        typer.Option("--include", help="A file or folder beside the script that it imports or reads (repeatable)."),
    ] = None,
    site: Annotated[
        str | None, typer.Option("--site", metavar="FILE:LINE", help="Keep the break at (or called from) this line.")
    ] = None,
    gb: Annotated[str | None, typer.Option("--gb", metavar="ID", help="Keep the break with this id (GB0124).")] = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Keep the break whose reason says this.")] = None,
    python: Annotated[str | None, typer.Option("--python", help="Interpreter to run with [default: this one].")] = None,
    torch: Annotated[
        str | None, typer.Option("--torch", help="Run on a managed venv with this torch (built and cached).")
    ] = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="Candidates run at once [default: the cores].")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds each run of the original may take (candidates: derived).")
    ] = 300.0,
    max_time: Annotated[
        float | None,
        typer.Option(
            "--max-time", help="Finish within this many seconds (the confirming run included), keeping the best so far."
        ),
    ] = None,
    allow_new: Annotated[
        bool, typer.Option("--allow-new", help="Keep candidates that show a break the original did not.")
    ] = False,
    keep_graphs: Annotated[
        bool, typer.Option("--keep-graphs", help="The graph count and the frames falling back must stay.")
    ] = False,
    inputs: Annotated[
        bool, typer.Option("--inputs/--no-inputs", help="Also shrink tensor shapes, loop counts and sizes.")
    ] = True,
    backend: Annotated[str, typer.Option("--backend", help="torch.compile backend forced for the runs.")] = "eager",
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", metavar="KEY=VALUE", help=allow_help([interpreter_runner().name, DEFAULT_RUNNER])),
    ] = None,
    capture: Annotated[bool, typer.Option("--capture", help="File the reduced script as a case.")] = False,
    archive: ArchiveOption = None,
    case_id: Annotated[str | None, typer.Option("--id", help="Case id for --capture.")] = None,
    title: Annotated[str | None, typer.Option("--title", help="Case title for --capture.")] = None,
) -> None:
    """Reduce a script to the smallest one that shows the same graph break (same place, same id).

    A candidate is kept only when it still runs eagerly and compiled, its break pairs with the
    original's as replay pairs them (same id, same call site) and no new break appears. Candidates
    run sandboxed, as replay runs scripts. The best result so far is always in --out: Ctrl-C or
    --max-time keeps it."""
    from casekit.reduce.judge.choice import BreakChoice
    from casekit.reduce.judge.oracle import OracleOptions
    from casekit.reduce.result import CaptureOptions, ReduceStopped
    from casekit.reduce.run import ReduceRequest, reduce_script
    from casekit.reduce.summary import summary_lines

    if python and torch:
        raise typer.BadParameter("give --python or --torch, not both")
    request = ReduceRequest(
        script=script,
        out=out,
        includes=list(include or []),
        choice=BreakChoice.parse(site, gb, reason),
        options=OracleOptions(allow_new=allow_new, keep_graphs=keep_graphs),
        jobs=jobs,
        timeout=timeout,
        max_seconds=max_time,
        backend=backend,
        shrink_inputs=inputs,
        capture=CaptureOptions(open_archive(archive), case_id, title) if capture else None,
    )
    choice = TargetChoice(
        pythons=(python,) if python else (), torches=(torch,) if torch else (), allow=tuple(allow or ())
    )
    spec = choice.specs()[0]
    runner = default_runner_factory(spec)
    try:
        with progress_view() as progress:
            result = reduce_script(request, runner, progress)
    except ReduceStopped as stop:
        for line in summary_lines(stop.result):
            typer.echo(line)
        raise typer.Exit(128 + stop.signum) from None
    for line in summary_lines(result):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command("reduce", epilog=REDUCE_EXAMPLES)(reduce)
