"""What every command shares: the --archive option, the one-line error, progress, notices, JSON out."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from casekit.archive.store import Archive, archive_dir
from casekit.errors import BundleError, CasekitError
from casekit.fsutil import STDOUT, write_atomic
from casekit.outcome import ExitCode
from casekit.progress import ProgressView, Verbosity, verbosity
from casekit.runners.interface import ProgressFn, Runner, TargetSpec
from casekit.runners.registry import allow_help
from casekit.settings import ALLOW_ENV

ArchiveOption = Annotated[
    Path | None,
    typer.Option("--archive", help="Archive folder of case bundles [default: $CASEKIT_ARCHIVE or ./cases]"),
]
FailOnOption = Annotated[
    str,
    typer.Option(
        "--fail-on",
        metavar="LEVEL",
        help="Exit 1 when a result reaches this severity: error, warn, info or never.",
    ),
]

# --perf's own flags, on every command that times (replay, capture, bisect)
PerfRepeats = Annotated[
    str | None,
    typer.Option(
        "--perf-repeats",
        metavar="cold=N,warm=N,max=N",
        help="Fresh processes a side: cold ones, warm rounds, and the most warm rounds added while a verdict is "
        "open [default: cold=1,warm=5,max=10].",
    ),
]
PerfThreshold = Annotated[
    str | None,
    typer.Option(
        "--perf-threshold",
        metavar="steady=P%,compile=P%",
        help="The smallest change called slower or faster [default: steady=5%,compile=15%].",
    ),
]
PerfScripts = Annotated[
    str | None,
    typer.Option(
        "--perf-scripts",
        help="Which scripts --perf times: pre (the repro, with its breaks), post or both [default: pre].",
    ),
]


def examples(*lines: str) -> str:
    """A command's example block (the \\b keeps click from re-wrapping the lines)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def fail(message: str, code: int = ExitCode.PROBLEM) -> NoReturn:
    typer.echo(f"casekit: error: {message}", err=True)
    raise typer.Exit(code)


def progress(message: str) -> None:
    """One plain progress line on stderr (commands with long work open a `progress_view`)."""
    if verbosity() is Verbosity.QUIET or (message.startswith(" ") and verbosity() < Verbosity.VERBOSE):
        return
    typer.echo(f"  ... {message}", err=True)


@contextmanager
def progress_view() -> Iterator[ProgressFn]:
    """Bars on a terminal, plain lines otherwise (casekit.progress), for the length of a command."""
    with ProgressView.for_stderr() as view:
        yield view


def notice(message: str) -> None:
    if verbosity() is not Verbosity.QUIET:
        typer.echo(message, err=True)


def report_invalid(invalid: Sequence[BundleError]) -> None:
    """One line per invalid bundle: the rest of the archive is still used."""
    for error in invalid:
        typer.echo(f"casekit: invalid bundle: {error}", err=True)


def emit_json(document: Any, path: Path) -> None:
    """`--json FILE` writes atomically; `--json -` prints to stdout (the one convention of every command)."""
    text = json.dumps(document, indent=2) + "\n"
    if path == STDOUT:
        sys.stdout.write(text)
        return
    try:
        write_atomic(path, text)
    except OSError as error:
        raise CasekitError(f"--json {path}: cannot write: {error.strerror or error}") from None


def human_to_stderr(json_out: Path | None) -> bool:
    """With `--json -` stdout holds the JSON alone, so the human view goes to stderr."""
    return json_out == STDOUT


def terminal_width() -> int | None:
    """The terminal's columns when stdout is one (and output may be styled); None for plain output."""
    from casekit.progress import plain_output

    if plain_output(sys.stdout):
        return None
    import shutil

    return shutil.get_terminal_size().columns


def open_archive(archive: Path | None) -> Archive:
    return Archive(archive_dir(archive))


def default_runner_factory(spec: TargetSpec) -> Runner:
    from casekit.runners.registry import make_runner

    return make_runner(spec)


Allow = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        metavar="KEY=VALUE",
        envvar=ALLOW_ENV,  # CASEKIT_ALLOW="sandbox=none network=host": for make run and CI jobs
        help=allow_help(),  # each runner's keys, from the registry
    ),
]
