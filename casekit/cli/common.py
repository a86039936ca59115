"""What every command shares: the --archive option, the one-line error, progress and notices."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from casekit.archive import Archive, archive_dir
from casekit.errors import BundleError
from casekit.outcome import ExitCode
from casekit.runners.interface import Runner, TargetSpec

ArchiveOption = Annotated[
    Path | None,
    typer.Option("--archive", help="Archive folder of case bundles [default: $CASEKIT_ARCHIVE or ./cases]"),
]
FailOnOption = Annotated[
    str, typer.Option("--fail-on", help="Exit 1 when a result reaches this severity: error, warn, info or never.")
]


def fail(message: str, code: int = ExitCode.PROBLEM) -> NoReturn:
    typer.echo(f"casekit: error: {message}", err=True)
    raise typer.Exit(code)


def progress(message: str) -> None:
    typer.echo(f"  ... {message}", err=True)


def notice(message: str) -> None:
    typer.echo(message, err=True)


def report_invalid(invalid: Sequence[BundleError]) -> None:
    """One line per invalid bundle: the rest of the archive is still used."""
    for error in invalid:
        typer.echo(f"casekit: invalid bundle: {error}", err=True)


def open_archive(archive: Path | None) -> Archive:
    return Archive(archive_dir(archive))


def default_runner_factory(spec: TargetSpec) -> Runner:
    from casekit.runners.registry import make_runner

    return make_runner(spec)
